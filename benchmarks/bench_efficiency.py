"""Where ``compare``'s wall time goes, as users run it, and the most efficiency its rules allow.

Each repeat runs ``mlflow-perfgate compare --change checkpoint=true`` (TinyLM, the defaults: paired
on p10, 10 rounds of 30 steps, steps interleaved, one thread) in a fresh process on a fresh SQLite
store, through ``_cli_timeline.py`` (the CLI's own entry, with a timeline of its phases), on a
quiet machine. Efficiency: the measured step time its attempts hold over the command's wall time
(issue 40's target: at least 0.6).

The timeline splits the wall time into what the comparison's rules force and what they do not:

- ``server ready``: the fork server's warm-up (``import torch`` and ``torch._dynamo``, which the
  first optimizer pulls in), from the command's start. No measured step can run before it, and
  the main process's own imports (mlflow, its SQLAlchemy store, scipy.stats, matplotlib) run
  beside it, never beside a measured step.
- per round: ``window`` (the gate's opening to the end of the measured steps: the steps and the
  child's few microseconds between them), ``tail`` (each arm's quality, probe and memory record
  after the measured steps, and the child's end: the next round may not measure beside it) and
  ``writes`` (the round's two attempts written: before the next round measures, so that a stop
  loses nothing measured);
- ``decide``: the decision, its run, plots and report.

``bound`` is the efficiency the command would have if everything else cost nothing: measured over
(server ready + the rounds' windows, tails and writes + decide). ``gap`` is what else the wall
time holds (the first child's start, the parent's waits, the exit).

Usage: ``python benchmarks/bench_efficiency.py [--repeats 5] [--input-shape 4,128]`` (about 15 s a repeat).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_lockstep import _shape_sets  # noqa: E402 - a sibling script (this folder is sys.path[0])

HERE = Path(__file__).resolve().parent
#: What the main process and the fork server import before a first measured step, each timed alone
#: in a fresh interpreter (the second of a pair after the first).
IMPORTS = {
    "torch (server)": ("", "import torch"),
    "torch._dynamo (server)": ("import torch", "import torch._dynamo"),
    "mlflow (main)": ("", "import mlflow"),
    "SQLAlchemy store (main)": ("import mlflow", "import mlflow.store.tracking.sqlalchemy_store"),
    "scipy.stats (main)": ("import numpy", "import scipy.stats.mstats"),
    "matplotlib.pyplot (main)": ("import numpy", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"),
}


def import_seconds(before: str, statement: str) -> float:
    code = f"{before}\nimport time\nt = time.perf_counter()\n{statement}\nprint(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def run(folder: Path, index: int, input_shape: str | None) -> dict:
    timeline = folder / f"timeline-{index}.json"
    shape = _shape_sets(input_shape)
    command = [sys.executable, str(HERE / "_cli_timeline.py"), "compare", "--change", "checkpoint=true", *shape,
               "--format", "json", "--no-progress", "--group", f"efficiency-{index}"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / f'store-{index}.db'}",
           "PERFGATE_TIMELINE": str(timeline)}
    began = time.monotonic()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=1200, env=env)
    ended = time.monotonic()
    result = json.loads(done.stdout)
    line = json.loads(timeline.read_text())
    rounds = [r for r in line["rounds"] if "tail_done" in r]
    steps = {}
    for attempt in result["attempts"]:
        if attempt.get("step_mean_ms"):
            steps[attempt["pair"]] = steps.get(attempt["pair"], 0.0) + attempt["step_mean_ms"] * 30 / 1e3
    measured = sum(steps.values())
    windows = [r["measured"] - r["gate"] for r in rounds]
    tails = [r["tail_done"] - r["measured"] for r in rounds]
    writes = [end - begin for begin, end in line["report"]]  # one per round, each round's two attempts
    decide = line["decide_end"] - line["decide_begin"]
    ready = line["server_ready"] - began
    forced = ready + sum(windows) + sum(tails) + sum(writes) + decide
    return {"wall": ended - began, "measured": measured, "efficiency": measured / (ended - began),
            "bound": measured / forced, "server_ready": ready, "open_done": line["open_done"] - began,
            "first_gate": rounds[0]["gate"] - began, "window_over_steps": sum(windows) - measured,
            "tail": statistics.median(tails), "writes": statistics.median(writes),
            "starts": statistics.median(end - begin for begin, end in line["starts"]),
            "between": statistics.median(b["gate"] - a["tail_done"] for a, b in zip(rounds, rounds[1:])),
            "decide": decide, "exit": ended - line["closed"], "gap": (ended - began) - forced,
            "rounds": len(rounds), "decision": result["decision"]}


COLUMNS = (("wall", "wall s"), ("measured", "measured s"), ("efficiency", "efficiency"), ("bound", "bound"),
           ("server_ready", "server ready s"), ("open_done", "open s"), ("first_gate", "first gate s"),
           ("tail", "tail s/round"), ("writes", "writes s/round"), ("between", "tail end to gate s"),
           ("window_over_steps", "in-child s"), ("decide", "decide s"), ("gap", "gap s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--input-shape", default=None, help="TinyLM's input shape (default its own, 4,128)")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        print(f"load before: {handle.read().split()[0]}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-efficiency-") as tmp:
        for index in range(args.repeats):
            rows.append(run(Path(tmp), index, args.input_shape))
            print(" ".join(f"{key} {rows[-1][key]:.3f}" if isinstance(rows[-1][key], float) else
                           f"{key} {rows[-1][key]}" for key in rows[-1]), flush=True)
    with open("/proc/loadavg") as handle:
        print(f"load after: {handle.read().split()[0]}")
    print("\n| run | " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for index, row in enumerate(rows):
        print(f"| {index} | " + " | ".join(f"{row[key]:.2f}" for key, _ in COLUMNS) + " |")
    print("| **median** | " + " | ".join(f"{statistics.median(r[key] for r in rows):.2f}" for key, _ in COLUMNS) + " |")
    print("\nimports before a first measured step, each alone in a fresh interpreter (median of 3):")
    for name, (before, statement) in IMPORTS.items():
        print(f"  {name}: {statistics.median(import_seconds(before, statement) for _ in range(3)):.2f} s")
    efficiency = statistics.median(r["efficiency"] for r in rows)
    bound = statistics.median(r["bound"] for r in rows)
    print(f"\nefficiency {efficiency:.3f} (target >= 0.6: {'ok' if efficiency >= 0.6 else 'MISS'}); "
          f"bound under the rules {bound:.3f}")


if __name__ == "__main__":
    main()
