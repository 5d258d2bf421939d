"""What a lockstep comparison costs, as users run it: the command, a fresh process each, on a quiet machine.

Three comparisons of the same workload and the same change (TinyLM, activation checkpointing), each
``mlflow-perfgate compare`` with its defaults otherwise (paired on p10, 10 rounds of 30 measured steps,
one thread), on a fresh SQLite store, interleaved ABC over ``--repeats``:

- ``steps``: ``compare --change checkpoint=true``: both arms in one child per round (the default);
- ``lockstep``: the same with ``--interleave lockstep``: one child per arm and round, their steps
  alternated by compare;
- ``revision``: a git repository made here whose ``tlm.py`` builds TinyLM, its head with
  checkpointing on: ``compare --workload tlm:make --set revision=<base> --change revision=<head>``
  (lockstep by default; each revision's worktree made and removed by the command).

For each: the wall time of the command (process start to exit), the measured step time its attempts
hold (the sum over attempts of mean step x steps), and the efficiency, measured over wall. Targets
(issue 40): a revision comparison within 2x the wall time of the in-process step-interleaved one;
compare's efficiency at least 0.6 quiet (the step-interleaved default, and lockstep beside it).

Usage: ``python benchmarks/bench_lockstep.py [--repeats 3]`` (about 3 minutes on two cores).
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

TLM = '''"""TinyLM, activation checkpointing as this revision has it."""
from mlflow_perfgate.workloads.tinylm import make_workload

CHECKPOINT = {checkpoint}


def make(conditions):
    return make_workload({{**conditions, "checkpoint": CHECKPOINT}})
'''
#: The revision comparison's conditions (its factory is no built-in workload, so it gives them all).
CONDITIONS = {"model": "TinyLM", "input_shape": "4,128", "batch_size": "4", "dtype": "fp32", "device": "cpu",
              "measurement_method": "wall_median_step_ms"}


def repository(folder: Path) -> tuple[Path, str, str]:
    repo = folder / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    shas = []
    for checkpoint in (False, True):
        (repo / "tlm.py").write_text(TLM.format(checkpoint=checkpoint))
        subprocess.run([*git, "add", "tlm.py"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", f"checkpoint {checkpoint}"], cwd=repo, check=True)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                   check=True).stdout.strip())
    return repo, shas[0], shas[1]


def _shape_sets(input_shape: str | None) -> list[str]:
    """``--set input_shape=... --set batch_size=...`` for a shape other than TinyLM's default (4,128)."""
    if input_shape is None:
        return []
    return ["--set", f"input_shape={input_shape}", "--set", f"batch_size={input_shape.split(',')[0]}"]


def run(name: str, folder: Path, repo: Path, base: str, head: str, index: int, input_shape: str | None = None) -> dict:
    cli = [sys.executable, "-m", "mlflow_perfgate", "compare", "--format", "json", "--no-progress",
           "--group", f"{name}-{index}"]
    shape = _shape_sets(input_shape)
    if name == "revision":
        given = {**CONDITIONS, **({} if input_shape is None else
                                  {"input_shape": input_shape, "batch_size": input_shape.split(",")[0]})}
        sets = [word for key, value in given.items() for word in ("--set", f"{key}={value}")]
        command, cwd = [*cli, "--workload", "tlm:make", *sets, "--set", f"revision={base}",
                        "--change", f"revision={head}"], repo
    else:
        command = [*cli, "--change", "checkpoint=true", *shape,
                   *(["--interleave", "lockstep"] if name == "lockstep" else [])]
        cwd = folder
    store = folder / f"{name}-{index}.db"
    started, epoch = time.monotonic(), time.time()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store}"})
    wall = time.monotonic() - started
    result = json.loads(done.stdout)
    measured = sum(a["step_mean_ms"] * 30 for a in result["attempts"] if a.get("step_mean_ms")) / 1e3
    return {"wall": wall, "measured": measured, "decision": result["decision"],
            "configuration": result.get("configuration", ""),
            **phases(f"sqlite:///{store}", result, epoch, epoch + wall, measured)}


def phases(uri: str, result: dict, began: float, ended: float, measured: float) -> dict:
    """Where the wall time went, from the runs' own times: ``start`` (the command's start to its first
    attempt run), ``rounds`` (first attempt's start to the last one's end) less the measured steps
    (``between``: each round's child, warm-up, tail and writes beyond its measured steps), and
    ``decide`` (the last attempt's end to the command's exit: the decision, its run, plot and report)."""
    from mlflow import MlflowClient

    from mlflow_perfgate.tracking import TAG

    client = MlflowClient(tracking_uri=uri)
    ids = {a["attempt_id"] for a in result["attempts"]}
    runs = [r for r in client.search_runs(["0"], max_results=1000) if r.data.tags.get(TAG.ATTEMPT_ID) in ids]
    if not runs:
        return {}
    first = min(r.info.start_time for r in runs) / 1e3
    last = max(r.info.end_time or r.info.start_time for r in runs) / 1e3
    return {"start": first - began, "between": (last - first) - measured, "decide": ended - last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--input-shape", default=None, help="TinyLM's input shape (default its own, 4,128)")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        print(f"load before: {handle.read().split()[0]}")
    with tempfile.TemporaryDirectory(prefix="bench-lockstep-") as tmp:
        folder = Path(tmp)
        repo, base, head = repository(folder)
        rows: dict[str, list[dict]] = {"steps": [], "lockstep": [], "revision": []}
        for index in range(args.repeats):
            for name in rows:
                row = run(name, folder, repo, base, head, index, args.input_shape)
                rows[name].append(row)
                print(f"{name:9} #{index}: wall {row['wall']:.2f} s, measured {row['measured']:.2f} s, "
                      f"efficiency {row['measured'] / row['wall']:.2f}, {row['decision']}; start "
                      f"{row.get('start', float('nan')):.2f} s, between rounds' steps "
                      f"{row.get('between', float('nan')):.2f} s, decide {row.get('decide', float('nan')):.2f} s",
                      flush=True)
    with open("/proc/loadavg") as handle:
        print(f"load after: {handle.read().split()[0]}")
    print("\n| comparison | wall s (median) | measured s | efficiency | wall / steps' wall | start s | "
          "between s | decide s |")
    print("|---|---|---|---|---|---|---|---|")
    steps_wall = statistics.median(r["wall"] for r in rows["steps"])
    for name, found in rows.items():
        wall = statistics.median(r["wall"] for r in found)
        measured = statistics.median(r["measured"] for r in found)
        efficiency = statistics.median(r["measured"] / r["wall"] for r in found)
        parts = " | ".join(f"{statistics.median(r.get(key, float('nan')) for r in found):.2f}"
                           for key in ("start", "between", "decide"))
        print(f"| {name} | {wall:.2f} | {measured:.2f} | {efficiency:.2f} | {wall / steps_wall:.2f} | {parts} |")
    ratio = statistics.median(r["wall"] for r in rows["revision"]) / steps_wall
    print(f"\nrevision / steps wall: {ratio:.2f} (target <= 2): {'ok' if ratio <= 2 else 'MISS'}")
    for name in ("steps", "lockstep"):
        efficiency = statistics.median(r["measured"] / r["wall"] for r in rows[name])
        print(f"{name} efficiency: {efficiency:.2f} (target >= 0.6): {'ok' if efficiency >= 0.6 else 'MISS'}")


if __name__ == "__main__":
    main()
