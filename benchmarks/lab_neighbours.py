"""The broadened noise lab: real step-interleaved rounds collected through ``compare`` under
neighbours unlike the first lab's CPU spinners, judged by each candidate configuration and by
pyperf's rule on the same attempts.

Neighbour kinds (each started and ended by this script, by PID, each ending itself at its
horizon or when this script is gone):

- ``quiet``: none;
- ``membw``: a memory-bandwidth hog (numpy copies between two 64 MiB arrays, far beyond any cache);
- ``duty``: two duty-cycle spinners (50% on), periods half and twice the workload's step;
- ``storm``: a storm of short-lived processes (``/bin/true``, about 100 a second);
- ``drift``: a slow drift of load (a spinner whose duty ramps 0 -> 100% -> 0 over 40 s);
- ``mix``: the memory-bandwidth hog beside a duty-cycle spinner whose period is the step's;
- ``torchjob``: another PyTorch training job on two threads (an MLP's training steps);
- ``disk``: an fsync-heavy writer (4 KiB appends, each fsynced) beside an irregular compressor
  (zlib bursts and pauses of seeded random lengths);
- ``square``: a square wave of load on both cores (two spinners, busy for 1 s of every 2, in phase).

The workload is TinyLM plus fixed extra matrix products per step (``noise_lab_workload``); a
true effect is a change of the extra work, sized from a quiet calibration so that the
candidate's step is ``1 + effect`` times the baseline's. Each (neighbour, effect) cell is one
``compare --interleave steps --attempts R`` (30 measured steps per arm and round by default);
its attempts are then judged in windows of ``n`` consecutive rounds, in both modes, by:

- ``paired/raw``: the paired method on the typical step (the median step), the mean step and
  the step tail (the step checks);
- ``paired/p10``: the paired method on each attempt's 10th-percentile step, with the step checks;
- ``robust/raw``, ``seed/raw``: the other methods on the typical step, with the step checks;
- ``pyperf``: ``pyperf._utils.is_significant`` (Student's two-sample t-test at 95%, as
  ``compare_to`` uses it) on each attempt's mean step (pyperf's value: time over loops), then
  the ratio of means against the threshold (improvement) or the margin (non_regression).

Truth per cell: identical arms (``effect = 0``, the arms differ only in TinyLM's seed), true
speedups of 7% and 15%, true slowdowns of 7% and 15%. Rates: accept in improvement mode (a
false accept for identical arms and slowdowns), reject in non_regression mode (a false alarm for
identical arms and speedups). Windows overlap (stride 1), so neighbouring windows share rounds:
read the rates as what a user running ``n`` rounds at a random moment would see, with the
uncertainty of ``R - n + 1`` correlated windows.

Usage (the machine otherwise idle; about 1 s a round on two cores):

    .venv/bin/python benchmarks/lab_neighbours.py --rounds 30 --out lab.json
    .venv/bin/python benchmarks/lab_neighbours.py --from-json lab.json    # judge again, measure nothing

The run the README cites is kept, gzipped, as ``benchmarks/results/lab_neighbours-threads1.json.gz``
(its report beside it, ``.md``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))

WORKLOAD = "noise_lab_workload:make"
KINDS = ("quiet", "membw", "duty", "storm", "drift", "mix")
#: The kinds added for the lockstep lab (``lab_lockstep.py``): another PyTorch job, disk I/O, a square wave.
MORE_KINDS = ("torchjob", "disk", "square")
EFFECTS = (0.0, -0.07, -0.15, 0.07, 0.15)
SIZES = (5, 10, 20)
MIN_IMPROVEMENT = 0.05
MARGIN = 0.05
CONFIGS = ("paired/raw", "paired/p10", "robust/raw", "seed/raw", "pyperf")

_NEIGHBOUR = r"""
import os, sys, time
kind, horizon, parent = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def number(text):
    try:
        return float(text)
    except ValueError:
        return text

args = [number(a) for a in sys.argv[4:]]
end = time.monotonic() + horizon

def alive():
    if time.monotonic() >= end:
        print("horizon reached", file=sys.stderr)
        return False
    if os.getppid() != parent:
        print(f"parent {parent} gone (now {os.getppid()})", file=sys.stderr)
        return False
    return True

def spin(seconds):
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass

if kind == "membw":
    import numpy as np
    a = np.ones(8 * 1024 * 1024)  # 64 MiB of float64
    b = np.empty_like(a)
    while alive():
        np.copyto(b, a)
        np.copyto(a, b)
elif kind == "duty":
    period, duty = args
    while alive():
        spin(period * duty)
        time.sleep(period * (1 - duty))
elif kind == "storm":
    import subprocess
    rate = args[0]
    while alive():
        subprocess.run(["/bin/true"])
        time.sleep(1 / rate)
elif kind == "drift":
    period = args[0]
    t0 = time.monotonic()
    while alive():
        phase = ((time.monotonic() - t0) % period) / period
        duty = 1 - abs(2 * phase - 1)
        spin(0.02 * duty)
        time.sleep(0.02 * (1 - duty))
elif kind == "torchjob":
    # another PyTorch training job, on two threads: an MLP's forward, backward and optimizer step
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    batch = torch.randn(64, 512)
    while alive():
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
elif kind == "disk":
    # an fsync-heavy writer: 4 KiB appends, each fsynced, to a file of its own (folder given), rewound at 64 MiB
    folder = sys.argv[4]
    path = os.path.join(folder, f"disk-{os.getpid()}.bin")
    block = os.urandom(4096)
    with open(path, "wb") as handle:
        written = 0
        while alive():
            handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
            written += len(block)
            if written >= 64 << 20:
                handle.seek(0)
                handle.truncate()
                written = 0
    os.unlink(path)
elif kind == "compressor":
    # an irregular compressor: zlib bursts of random length, pauses of random length (seeded)
    import random, zlib
    rng = random.Random(int(args[0]))
    data = os.urandom(1 << 20)
    while alive():
        burst = time.monotonic() + rng.uniform(0.05, 0.5)
        while time.monotonic() < burst:
            zlib.compress(data, 6)
        time.sleep(rng.uniform(0.02, 0.6))
elif kind == "square":
    # a square wave of load: busy for half of each period, idle for the other half, on the machine's clock
    period = args[0]
    while alive():
        phase = (time.monotonic() % period) / period
        if phase < 0.5:
            spin((0.5 - phase) * period)
        else:
            time.sleep((1 - phase) * period)
"""


def neighbour_plan(kind: str, step_s: float) -> list[tuple]:
    """The neighbour processes of a kind: ``(name, *arguments)`` each."""
    return {
        "quiet": [],
        "membw": [("membw",)],
        "duty": [("duty", step_s / 2, 0.5), ("duty", 2 * step_s, 0.5)],
        "storm": [("storm", 100.0)],
        "drift": [("drift", 40.0)],
        "mix": [("membw",), ("duty", step_s, 0.5)],
        "torchjob": [("torchjob",)],
        "disk": [("disk", "FOLDER"), ("compressor", 7)],
        "square": [("square", 2.0), ("square", 2.0)],
    }[kind]


class Neighbours:
    """Start the neighbours of a plan; end them by PID on exit (each also ends at its horizon)."""

    def __init__(self, plan: list[tuple], horizon_s: float):
        self.plan, self.horizon_s = plan, horizon_s
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "Neighbours":
        self.logs = []
        self.folder = tempfile.TemporaryDirectory(prefix="lab-neighbours-")  # what a neighbour writes (disk)
        for name, *arguments in self.plan:
            log = tempfile.TemporaryFile()
            self.logs.append(log)
            arguments = [self.folder.name if argument == "FOLDER" else argument for argument in arguments]
            self.processes.append(subprocess.Popen(
                [sys.executable, "-c", _NEIGHBOUR, name, str(self.horizon_s), str(os.getpid()),
                 *map(str, arguments)], stdout=subprocess.DEVNULL, stderr=log))
        time.sleep(1.0 if self.plan else 0.0)  # on the run queues before the first round
        return self

    def check(self) -> None:
        for process, log, (name, *_) in zip(self.processes, self.logs, self.plan):
            if process.poll() is not None:
                log.seek(0)
                said = log.read().decode(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"neighbour {name} ({process.pid}) ended early (exit {process.returncode})"
                                   + (f": {' / '.join(said)}" if said else ""))

    def __exit__(self, *exc_info) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=10)
        for log in self.logs:
            log.close()
        self.folder.cleanup()
        self.processes, self.logs = [], []


def loadavg() -> float:
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


def base_conditions(args) -> dict:
    from mlflow_perfgate.harness import DEFAULT_CONDITIONS

    return {**DEFAULT_CONDITIONS, "input_shape": args.input_shape, "batch_size": int(args.input_shape.split(",")[0]),
            "warmup": args.warmup, "steps": args.steps}


def calibrate(args) -> dict:
    """Quiet: TinyLM's step, and the cost of one unit of extra work (fork runner, one warm server)."""
    from mlflow_perfgate.workloads import attempt_runner, run_attempt

    conditions = base_conditions(args)
    plain, loaded = [], []
    with attempt_runner("fork", WORKLOAD) as runner:
        for _ in range(args.calibration_rounds):
            plain.append(run_attempt(WORKLOAD, {**conditions, "extra_units": 0}, runner=runner,
                                     threads=args.threads).latency_ms)
            loaded.append(run_attempt(WORKLOAD, {**conditions, "extra_units": args.probe_units},
                                      runner=runner, threads=args.threads).latency_ms)
    step_ms = statistics.median(plain)
    unit_ms = statistics.median(l - p for p, l in zip(plain, loaded)) / args.probe_units
    if not unit_ms > 0:
        raise RuntimeError(f"the extra work did not show (unit cost {unit_ms!r} ms): calibrate on a quieter moment")
    base_units = max(1, round(step_ms / unit_ms))  # the baseline's extra work about one TinyLM step
    return {"step_ms": step_ms, "unit_ms": unit_ms, "base_units": base_units,
            "base_step_ms": step_ms + base_units * unit_ms}


def candidate_units(effect: float, calibration: dict) -> int:
    """Extra units that make the candidate's step ``1 + effect`` times the baseline's."""
    return max(0, round(calibration["base_units"] + effect * calibration["base_step_ms"] / calibration["unit_ms"]))


def _new_store(prefix: str) -> None:
    """A fresh temporary SQLite store for this collection's comparisons."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tempfile.mkdtemp(prefix=prefix)}/mlflow.db")


def _under_each_kind(args, step_s: float, compares_per_kind: int, rounds: int):
    """``(kind, neighbours)`` for each kind of ``args.kinds``, its neighbours running (ended after it)."""
    for kind in args.kinds:
        horizon = 600 + compares_per_kind * rounds * 20 * (2 * args.steps * step_s + 0.5)
        with Neighbours(neighbour_plan(kind, step_s), horizon) as hood:
            yield kind, hood


def collect(args, calibration: dict) -> list[dict]:
    """One ``compare`` per (neighbour kind, effect), its attempts as rows."""
    from mlflow_perfgate.harness import compare

    _new_store("lab-neighbours-")
    conditions = {**base_conditions(args), "extra_units": calibration["base_units"], "seed": 0}
    step_s = calibration["base_step_ms"] / 1e3
    rows = []
    for kind, hood in _under_each_kind(args, step_s, len(args.effects), args.rounds):
        for effect in args.effects:
            change = {"seed": 1} if effect == 0 else {"extra_units": candidate_units(effect, calibration)}
            result, wall_s, load = _timed(hood, f"{kind:6} effect {effect:+.2f}", args.rounds, lambda: compare(
                WORKLOAD, conditions, change, attempts=args.rounds, progress=False, interleave="steps",
                method="paired", group=f"lab-{kind}-{effect:+.2f}", env_mismatch="ignore", runner="fork",
                threads=args.threads, allow_undecidable=True))  # the lab judges windows of these rounds itself
            rows += _rows_of(result, kind, effect, wall_s, load)
    return rows


def _timed(hood, label: str, rounds: int, run) -> tuple[dict, float, float]:
    """``run()`` (one compare), its neighbours checked after it: its result, wall time and mean 1-minute
    load, said in a line on stderr."""
    before, started = loadavg(), time.monotonic()
    result = run()
    hood.check()
    wall_s, after = time.monotonic() - started, loadavg()
    print(f"{label}: {rounds} rounds in {wall_s:.0f} s, load {before:.2f} -> {after:.2f}, decided "
          f"{result['decision']}", file=sys.stderr)
    return result, wall_s, (before + after) / 2


def _rows_of(result: dict, kind: str, effect, wall_s: float, load: float) -> list[dict]:
    rows = []
    for attempt in result["attempts"]:
        row = {"kind": kind, "effect": effect, "arm": attempt["arm"], "ok": attempt.get("state") == "ok",
               "pair": attempt.get("pair"), "wall_s": wall_s, "load": load}
        if row["ok"]:
            row.update({key: attempt.get(key) for key in ("latency_ms", "step_p10_ms", "fastest_step_ms",
                                                          "step_mean_ms", "step_p95_ms")})
        rows.append(row)
    return rows


def collect_validity(args, calibration: dict) -> list[dict]:
    """One ``compare`` per (neighbour kind, shape): the candidate's steps change shape, not scale.

    The baseline is the lab's plain workload (``shape=none``); the candidate changes only
    ``shape`` (``noise_lab_workload.SHAPES``), so its truth is known per step: every shape here is
    slower in its typical or its mean step beyond the 5% margin, and none may be accepted.
    """
    from mlflow_perfgate.harness import compare

    _new_store("lab-validity-")
    step_units = round(calibration["base_step_ms"] / calibration["unit_ms"])
    conditions = {**base_conditions(args), "extra_units": calibration["base_units"], "seed": 0, "shape": "none",
                  "step_units": step_units}
    step_s = calibration["base_step_ms"] / 1e3
    rows = []
    for kind, hood in _under_each_kind(args, step_s, len(args.shapes), args.rounds):
        for shape in args.shapes:
            result, wall_s, load = _timed(hood, f"{kind:6} shape {shape:10}", args.rounds, lambda: compare(
                WORKLOAD, conditions, {"shape": shape}, attempts=args.rounds, progress=False, interleave="steps",
                method="paired", group=f"validity-{kind}-{shape}", env_mismatch="ignore", runner="fork",
                threads=args.threads, mode="non_regression", margin=MARGIN,
                allow_undecidable=True))  # judged in windows, as above
            rows += _rows_of(result, kind, shape, wall_s, load)
    return rows


def collect_threads(args, calibration: dict) -> list[dict]:
    """A change of process-wide state, torch's threads (1 -> 2, set by the factory), by each interleaving.

    The truth is what whole attempts measure (``--interleave attempts``: one process per attempt,
    nothing shared); step interleaving shares one process between the arms and must measure the
    same (each arm's threads re-applied before each of its steps). Per kind, one comparison of
    ``--threads-rounds`` rounds in each mode.
    """
    from mlflow_perfgate.harness import compare

    _new_store("lab-threads-")
    conditions = {**base_conditions(args), "extra_units": calibration["base_units"], "seed": 0, "threads_set": 1}
    step_s = calibration["base_step_ms"] / 1e3
    rows = []
    for kind, hood in _under_each_kind(args, step_s, 2, args.threads_rounds):
        for interleave in ("attempts", "steps"):
            result, wall_s, load = _timed(
                hood, f"{kind:6} threads 1 -> 2, {interleave:8}", args.threads_rounds, lambda: compare(
                    WORKLOAD, conditions, {"threads_set": 2}, attempts=args.threads_rounds, progress=False,
                    interleave=interleave, method="paired", latency="p10", group=f"threads-{kind}-{interleave}",
                    env_mismatch="ignore", runner="fork", threads=1, allow_undecidable=True))
            rows += [{**row, "decision": result["decision"]}
                     for row in _rows_of(result, kind, f"threads:{interleave}", wall_s, load)]
    return rows


def report_threads(rows: list[dict], kinds) -> str:
    """Per kind: the candidate/baseline ratio of p10 and mean step by interleaving, and the decisions."""
    lines = ["## A change of threads (1 -> 2, set by the factory): step interleaving against whole attempts\n",
             "| kind | p10 ratio, attempts (truth) | p10 ratio, steps | mean-step ratio, attempts | mean-step ratio, "
             "steps | decision, attempts | decision, steps | load |", "|---|---|---|---|---|---|---|---|"]
    for kind in kinds:
        cells = {}
        for mode in ("attempts", "steps"):
            cell = [r for r in rows if r["kind"] == kind and r["effect"] == f"threads:{mode}"]
            if not cell:
                continue
            by_pair = defaultdict(dict)
            for row in cell:
                if row["ok"]:
                    by_pair[row["pair"]][row["arm"]] = row
            pairs = [p for p, arms in by_pair.items() if len(arms) == 2]
            ratio = {key: statistics.median(by_pair[p]["candidate"][key] / by_pair[p]["baseline"][key] for p in pairs)
                     for key in ("step_p10_ms", "step_mean_ms")} if pairs else {}
            cells[mode] = (ratio, cell[0]["decision"], statistics.fmean(r["load"] for r in cell))
        if len(cells) < 2:
            continue
        (ra, da, la), (rs, ds, ls) = cells["attempts"], cells["steps"]
        figures = [f"{r.get(key, float('nan')):.3f}" for key in ("step_p10_ms", "step_mean_ms") for r in (ra, rs)]
        lines.append(f"| {kind} | {figures[0]} | {figures[1]} | {figures[2]} | {figures[3]} | {da} | {ds} | "
                     f"{(la + ls) / 2:.2f} |")
    return "\n".join(lines)


def collect_decisive(args, calibration: dict) -> list[dict]:
    """``compare --until-decisive`` at the recommended configuration, from the fewest rounds that can decide.

    Per (neighbour kind, effect of -15% or +15%), ``--decisive-repeats`` comparisons, each
    starting at ``--decisive-start`` rounds and adding pairs while the answer is rerun, up to
    ``--decisive-max``: improvement mode for the speedup, non_regression for the slowdown. Each
    row is one comparison: its wall time (``compare``'s own, server start included), the rounds it
    used, the measured step time they hold, and its decision.
    """
    from mlflow_perfgate.harness import compare

    _new_store("lab-decisive-")
    conditions = {**base_conditions(args), "extra_units": calibration["base_units"], "seed": 0}
    step_s = calibration["base_step_ms"] / 1e3
    rows = []
    for kind, hood in _under_each_kind(args, step_s, 2 * args.decisive_repeats, args.decisive_max):
        for effect in (-0.15, 0.15):
            mode = "improvement" if effect < 0 else "non_regression"
            change = {"extra_units": candidate_units(effect, calibration)}
            for repeat in range(args.decisive_repeats):
                before, started = loadavg(), time.monotonic()
                result = compare(WORKLOAD, conditions, change, attempts=args.decisive_start, progress=False,
                                 interleave="steps", method="paired", latency="p10", mode=mode,
                                 margin=MARGIN, min_improvement=MIN_IMPROVEMENT, until_decisive=True,
                                 max_attempts=args.decisive_max, group=f"decisive-{kind}-{effect:+.2f}-{repeat}",
                                 env_mismatch="ignore", runner="fork", threads=args.threads)
                hood.check()
                wall_s, after = time.monotonic() - started, loadavg()
                ok = [a for a in result["attempts"] if a.get("state") == "ok"]
                measured_s = sum(a["step_mean_ms"] * args.steps for a in ok if a.get("step_mean_ms")) / 1e3
                rounds = len({a.get("pair") for a in result["attempts"]})
                print(f"{kind:6} effect {effect:+.2f} #{repeat}: {rounds} rounds, {wall_s:.1f} s "
                      f"({measured_s:.1f} s measured), decided {result['decision']}", file=sys.stderr)
                rows.append({"kind": kind, "effect": effect, "mode": mode, "decision": result["decision"],
                             "reason": result.get("reason"), "rounds": rounds, "wall_s": wall_s,
                             "measured_s": measured_s, "load": (before + after) / 2})
    return rows


def _records(rows: list[dict]) -> list[dict]:
    """Attempt records for the rules: every figure, one quality (the arms differ in seed, not in quality)."""
    out = []
    for row in rows:
        if not row["ok"]:
            out.append({"ok": False, "failure": "failed", "pair": row["pair"]})
            continue
        out.append({"ok": True, "quality": 0.9, "pair": row["pair"],
                    **{key: row[key] for key in ("latency_ms", "step_p10_ms", "fastest_step_ms", "step_mean_ms",
                                                 "step_p95_ms") if row.get(key) is not None}})
    return out


def pyperf_verdict(base: list[float], cand: list[float], mode: str) -> str:
    """pyperf's rule (``pyperf._utils.is_significant``, as ``compare_to`` uses it), as accept / reject / rerun."""
    from pyperf._utils import is_significant

    if len(base) < 2 or len(cand) < 2:
        return "rerun"
    try:
        significant, _ = is_significant(base, cand)
    except ZeroDivisionError:  # all-equal samples: pyperf's own code raises; it then calls it significant
        significant = True
    if not significant:
        return "rerun"
    ratio = statistics.fmean(cand) / statistics.fmean(base)
    if mode == "improvement":
        return "accept" if ratio <= 1 - MIN_IMPROVEMENT else "reject"
    return "reject" if ratio > 1 + MARGIN else "accept"


def judge(config: str, base: list[dict], cand: list[dict], mode: str) -> str:
    from mlflow_perfgate.rules import Policy, judge as rules_judge

    if config == "pyperf":
        return pyperf_verdict([r["step_mean_ms"] for r in base if r["ok"]],
                              [r["step_mean_ms"] for r in cand if r["ok"]], mode)
    method, latency = config.split("/")
    policy = Policy(method=method, mode=mode, latency=latency, margin=MARGIN, min_improvement=MIN_IMPROVEMENT,
                    min_valid_runs=min(5, len(base)))
    return rules_judge(base, cand, policy).verdict


def analyse(rows: list[dict], sizes, configs=CONFIGS) -> dict:
    """Rates per (kind, effect, n, config, mode), the within-round spread of identical arms, the load seen."""
    cells = defaultdict(list)
    for row in rows:
        cells[(row["kind"], row["effect"])].append(row)
    rates, spread, load, wall = {}, {}, {}, {}
    for (kind, effect), cell_rows in sorted(cells.items()):
        by_pair = defaultdict(dict)
        for row, record in zip(cell_rows, _records(cell_rows)):
            by_pair[row["pair"]][row["arm"]] = record
        pairs = sorted(p for p, arms in by_pair.items() if len(arms) == 2)
        load[(kind, effect)] = statistics.fmean(r["load"] for r in cell_rows)
        wall[(kind, effect)] = cell_rows[0]["wall_s"]
        if effect == 0:
            for key in ("latency_ms", "step_p10_ms", "step_mean_ms", "step_p95_ms"):
                d = [math.log(by_pair[p]["candidate"][key] / by_pair[p]["baseline"][key]) for p in pairs
                     if by_pair[p]["candidate"]["ok"] and by_pair[p]["baseline"]["ok"]]
                spread[(kind, key)] = statistics.stdev(d) if len(d) > 1 else None
        for n in sizes:
            windows = [pairs[i:i + n] for i in range(0, len(pairs) - n + 1)]
            for config in configs:
                for mode in ("improvement", "non_regression"):
                    verdicts = [judge(config, [by_pair[p]["baseline"] for p in w], [by_pair[p]["candidate"] for p in w],
                                      mode) for w in windows]
                    wanted = "accept" if mode == "improvement" else "reject"
                    rates[(kind, effect, n, config, mode)] = (
                        (sum(v == wanted for v in verdicts) / len(verdicts)) if verdicts else None, len(verdicts))
    return {"rates": rates, "spread": spread, "load": load, "wall": wall}


TARGETS = (
    # (label, effect, n, mode, direction, bound)
    ("identical falsely accepted <= 2%", 0.0, None, "improvement", "max", 0.02),
    ("identical falsely alarmed <= 5%", 0.0, None, "non_regression", "max", 0.05),
    ("15% speedup accepted >= 80%, n=10", -0.15, 10, "improvement", "min", 0.80),
    ("7% speedup accepted >= 80%, n=20", -0.07, 20, "improvement", "min", 0.80),
    ("15% slowdown rejected >= 80%, n=10", 0.15, 10, "non_regression", "min", 0.80),
    ("7% slowdown never accepted", 0.07, None, "improvement", "max", 0.0),
    ("15% slowdown never accepted", 0.15, None, "improvement", "max", 0.0),
)


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _cells(rates: dict, kind: str, case, n: int, configs) -> list[str]:
    """One row's cells: accept (improvement) / reject (non_regression) rates and the windows, per config."""
    cells = []
    for config in configs:
        acc = rates.get((kind, case, n, config, "improvement"), (None, 0))
        rej = rates.get((kind, case, n, config, "non_regression"), (None, 0))
        cells.append(f"{_pct(acc[0])} / {_pct(rej[0])} [{acc[1]}]")
    return cells


def _worst_cell(rates: dict, config: str, kinds, cases, sizes, mode: str, direction: str, bound: float) -> str:
    """The worst rate of a config over kinds, cases and sizes, against a bound (``max``: at most, ``min``: at least)."""
    worst = None
    for kind in kinds:
        for case in cases:
            for size in sizes:
                value = rates.get((kind, case, size, config, mode), (None, 0))[0]
                if value is None:
                    continue
                if worst is None or (value > worst[0] if direction == "max" else value < worst[0]):
                    worst = (value, kind, case, size)
    if worst is None:
        return "n/a"
    ok = worst[0] <= bound if direction == "max" else worst[0] >= bound
    where = worst[1] if len(cases) == 1 and not isinstance(worst[2], str) else f"{worst[1]}, {worst[2]}"
    return f"{'ok' if ok else 'MISS'} {_pct(worst[0])} ({where}, n={worst[3]})"


def report(found: dict, kinds, sizes, configs=CONFIGS) -> str:
    rates, lines = found["rates"], []
    effects = sorted({effect for (_, effect, _, _, _) in rates})
    lines.append("## Rates (accept in improvement mode / reject in non_regression mode; windows in brackets)\n")
    for kind in kinds:
        seen = [found["load"][(kind, e)] for e in effects if (kind, e) in found["load"]]
        walls = [found["wall"][(kind, e)] for e in effects if (kind, e) in found["wall"]]
        lines.append(f"### {kind} (1-minute load average seen {min(seen):.2f} to {max(seen):.2f}; "
                     f"{statistics.fmean(walls):.0f} s a cell)\n")
        lines.append("| effect | n | " + " | ".join(configs) + " |")
        lines.append("|---|---|" + "---|" * len(configs))
        for effect in effects:
            for n in sizes:
                lines.append(f"| {effect:+.2f} | {n} | " + " | ".join(_cells(rates, kind, effect, n, configs)) + " |")
        lines.append("")
    lines.append("## Within-round spread of identical arms (sd of the log ratio)\n")
    lines.append("| kind | typical step | p10 step | mean step | step P95 |")
    lines.append("|---|---|---|---|---|")
    for kind in kinds:
        values = [found["spread"].get((kind, key)) for key in ("latency_ms", "step_p10_ms", "step_mean_ms",
                                                               "step_p95_ms")]
        lines.append(f"| {kind} | " + " | ".join("n/a" if v is None else f"{v:.3f}" for v in values) + " |")
    lines.append("\n## Targets (worst cell over the neighbour kinds; the kind that sets it)\n")
    lines.append("| target | " + " | ".join(configs) + " |")
    lines.append("|---|" + "---|" * len(configs))
    for label, effect, n, mode, direction, bound in TARGETS:
        cells = [_worst_cell(rates, config, kinds, [effect], [n] if n else sizes, mode, direction, bound)
                 for config in configs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("\n## Power against pyperf (cells where a configuration's rate is below pyperf's)\n")
    for config in configs[:-1]:
        below = []
        for (kind, effect, n, cfg, mode), (value, _) in rates.items():
            if cfg != config or effect == 0 or value is None:
                continue
            wanted = (effect < 0 and mode == "improvement") or (effect > 0 and mode == "non_regression")
            reference = rates.get((kind, effect, n, "pyperf", mode), (None, 0))[0]
            if wanted and reference is not None and value < reference:
                below.append(f"{kind} {effect:+.2f} n={n} {mode}: {_pct(value)} < {_pct(reference)}")
        lines.append(f"- {config}: {len(below)} cells below pyperf"
                     + (": " + "; ".join(sorted(below)) if below else ""))
    return "\n".join(lines)


VALIDITY_TRUTH = {
    # shape: (what is slower, by how much), the step figures as noise_lab_workload.SHAPES has them
    "stall": "mean step +40% (every 5th step 3x), typical unchanged",
    "fast_path": "typical step +12% (1 step in 4 at 0.65x, the others 1.12x), p10 35% faster, mean +0.25%",
    "slow_first": "mean step +15% (the first 3 of 30 measured steps 2.5x), typical unchanged",
    "bimodal": "mean step +15% (half the steps, at random, 1.3x)",
}


def report_validity(found: dict, kinds, sizes, configs=CONFIGS) -> str:
    """The validity cases: the accept rate (improvement; must be 0) and the reject rate (non_regression)."""
    rates, lines = found["rates"], []
    shapes = [shape for shape in VALIDITY_TRUTH if any(key[1] == shape for key in rates)]
    lines.append("## Validity: shape-changing candidates (accept in improvement / reject in non_regression)\n")
    for shape in shapes:
        lines.append(f"- `{shape}`: {VALIDITY_TRUTH[shape]}")
    lines.append("")
    lines.append("| kind | shape | n | " + " | ".join(configs) + " |")
    lines.append("|---|---|---|" + "---|" * len(configs))
    for kind in kinds:
        for shape in shapes:
            for n in sizes:
                lines.append(f"| {kind} | {shape} | {n} | " + " | ".join(_cells(rates, kind, shape, n, configs)) + " |")
    lines.append("\n### Validity targets (worst cell over the kinds)\n")
    lines.append("| target | " + " | ".join(configs) + " |")
    lines.append("|---|" + "---|" * len(configs))
    targets = [("never accepted (any shape, any n)", None, None, "improvement", "max", 0.0),
               ("stall rejected >= 90%, n=10", "stall", 10, "non_regression", "min", 0.90)]
    targets += [(f"{shape} rejected >= 80%, n=10", shape, 10, "non_regression", "min", 0.80)
                for shape in shapes if shape != "stall"]
    for label, only, n, mode, direction, bound in targets:
        cells = [_worst_cell(rates, config, kinds, [only] if only else shapes, [n] if n else sizes, mode, direction,
                             bound) for config in configs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_decisive(rows: list[dict], kinds) -> str:
    """Per (kind, effect): right decisions, the median rounds and wall time to a decision, wall over measured."""
    lines = ["## `--until-decisive` at the recommended configuration (paired, p10, steps interleaved)\n",
             "| kind | effect | mode | right | rerun | median rounds | median wall s | median measured s "
             "| wall / measured | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for kind in kinds:
        for effect in (-0.15, 0.15):
            cell = [r for r in rows if r["kind"] == kind and r["effect"] == effect]
            if not cell:
                continue
            wanted = "accept" if effect < 0 else "reject"
            right = sum(r["decision"] == wanted for r in cell)
            reruns = sum(r["decision"] == "rerun" for r in cell)
            wall = statistics.median(r["wall_s"] for r in cell)
            measured = statistics.median(r["measured_s"] for r in cell)
            ratio = statistics.median(r["wall_s"] / r["measured_s"] for r in cell if r["measured_s"] > 0)
            lines.append(f"| {kind} | {effect:+.2f} | {cell[0]['mode']} | {right}/{len(cell)} | {reruns} | "
                         f"{statistics.median(r['rounds'] for r in cell):.0f} | {wall:.1f} | {measured:.1f} | "
                         f"{ratio:.2f} | {statistics.fmean(r['load'] for r in cell):.2f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The lab's options (``bench_harness.py``'s ``decisive`` section reads its defaults here too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--input-shape", default="4,128")
    parser.add_argument("--kinds", type=lambda t: t.split(","), default=list(KINDS))
    parser.add_argument("--effects", type=lambda t: [float(x) for x in t.split(",")], default=list(EFFECTS))
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=list(SIZES))
    parser.add_argument("--calibration-rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of every attempt (1: with 2 on a 2-core machine beside busy neighbours, "
                             "torch's threads wait on each other for the CPU and a round took 200 s instead of 1)")
    parser.add_argument("--probe-units", type=int, default=40)
    parser.add_argument("--sections", type=lambda t: t.split(","), default=["effects"],
                        help="what to collect: effects (the rates), validity (shape-changing candidates), "
                             "threads (a change of torch threads, by interleaving), decisive (--until-decisive "
                             "to a decision); comma-separated")
    parser.add_argument("--shapes", type=lambda t: t.split(","), default=list(VALIDITY_TRUTH))
    parser.add_argument("--threads-rounds", type=int, default=10, help="rounds per interleaving (threads)")
    parser.add_argument("--decisive-start", type=int, default=6, help="rounds before the first look")
    parser.add_argument("--decisive-max", type=int, default=20)
    parser.add_argument("--decisive-repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the collected rows and the calibration as JSON")
    parser.add_argument("--from-json", default=None, help="judge an earlier collection; measure nothing")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.from_json:
        opener = gzip.open if args.from_json.endswith(".gz") else open
        with opener(args.from_json, "rt") as handle:
            saved = json.load(handle)
        rows, calibration = saved["rows"], saved["calibration"]
        validity, decisive = saved.get("validity", []), saved.get("decisive", [])
        threads = saved.get("threads", [])
        seen = rows + validity + decisive + threads
        kinds = [k for k in args.kinds if any(r["kind"] == k for r in seen)]
    else:
        started = time.monotonic()
        calibration = calibrate(args)
        print(f"calibration: {json.dumps(calibration)}", file=sys.stderr)
        rows = collect(args, calibration) if "effects" in args.sections else []
        validity = collect_validity(args, calibration) if "validity" in args.sections else []
        threads = collect_threads(args, calibration) if "threads" in args.sections else []
        decisive = collect_decisive(args, calibration) if "decisive" in args.sections else []
        kinds = args.kinds
        print(f"collected {len(rows) + len(validity) + len(threads)} attempts and {len(decisive)} decisive comparisons in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump({"calibration": calibration, "rows": rows, "validity": validity, "decisive": decisive,
                           "threads": threads, "args": vars(args)}, handle)
    print(f"calibration: TinyLM step {calibration['step_ms']:.2f} ms, unit {calibration['unit_ms']:.4f} ms, "
          f"baseline step {calibration['base_step_ms']:.2f} ms ({calibration['base_units']} units)")
    if rows:
        print(report(analyse(rows, args.sizes), kinds, args.sizes))
    if validity:
        print(report_validity(analyse(validity, args.sizes), kinds, args.sizes))
    if threads:
        print(report_threads(threads, kinds))
    if decisive:
        print(report_decisive(decisive, kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
