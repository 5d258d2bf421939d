"""What the kernel's contention figures cost, and how well they track a contended TinyLM step.

Prints, from one run:

1. the sampling overhead: the median cost of one snapshot of the process (``ContentionSampler
   .sample``, µs), the median cost per measured step as ``time_steps`` records it (two
   snapshots, outside the clock), its share of a quiet TinyLM step, and the median step time
   with and without the sampler in alternating blocks (the clock must not see the sampler);
2. under 0, 1 and 2 busy neighbour processes per core (pure-Python spin loops pinned to each
   core, started and ended by this script, each bounded by its own deadline), in interleaved
   rounds (levels in order, then reversed) so that drift falls on every level: the median wait
   share, the median step time and its ratio to the quiet median, and how well the wait share
   tracks the slowdown (Pearson and Spearman correlation of a step's wait share with its excess
   over the quiet median; slope and R^2 of the excess in ms on the wait in ms);
3. the two contention-correction options on the same steps: (a) excluding steps whose wait
   share exceeds a bound (kept share, median of what is kept), (b) a corrected step time, wall
   minus run-queue wait (also clamped to [CPU time, wall]), or CPU time: each as the ratio of
   its median under load to its quiet median (1.00 is a load-proof figure), also paired with the
   quiet block of the same round, and its spread (P95 / median, nearest rank);
4. an accounting check, wall - CPU - wait per step (0 for one busy thread if every figure is
   exact).

Every step's raw figures go to a CSV (its path is printed) for the decision on which option to
adopt. The TinyLM process itself is not pinned (as in an attempt); its torch threads are
(``--threads``).

Each block (a level in a round) runs at most ``--steps`` steps or ``--block-seconds``, whichever
comes first, and each neighbour ends itself 30 s after its block should have ended, so a killed
run leaves nothing spinning for long.

Usage: ``python benchmarks/bench_contention.py [--threads 1] [--steps 150] [--rounds 2]
[--block-seconds 8] [--csv PATH]``; ``--from-csv PATH`` analyses an earlier run's samples again.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import signal
import statistics
import subprocess
import sys
import time

from scipy import stats

from mlflow_perfgate.workloads import make_workload
from mlflow_perfgate.workloads._contention import ContentionSampler
from mlflow_perfgate.workloads._timing import TimedSteps, pinned_threads, time_steps

#: name -> (neighbours per core, burst): steady spinning, or ``(on_s, period_s)`` bursts at a
#: random phase (the intermittent contention of a shared CI runner).
LEVELS = {"0": (0, None), "1": (1, None), "2": (2, None), "1 bursty": (1, (0.025, 0.1))}
QUIET = "0"
BOUNDS = (0.05, 0.10, 0.20, 0.30)
#: Option (a) seen per attempt: an attempt of this many steps is usable when it keeps this many.
ATTEMPT_STEPS = 10
MIN_KEPT = 5
#: A busy neighbour: pins itself to one core, says so, spins (steadily or in bursts) until its
#: deadline or its kill.
_HOG = (
    "import os, random, sys, time\n"
    "core, lifetime, on, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])\n"
    "os.sched_setaffinity(0, {core})\n"
    "print('ready', flush=True)\n"
    "end = time.monotonic() + lifetime\n"
    "time.sleep(random.uniform(0, period) if on < period else 0)\n"
    "while time.monotonic() < end:\n"
    "    burst = time.monotonic() + on\n"
    "    while time.monotonic() < burst:\n"
    "        pass\n"
    "    if on < period:\n"
    "        time.sleep(period - on)\n"
)
FIELDS = ("round", "level", "step", "wall_ms", "runq_wait_ms", "cpu_ms", "nivcsw", "wait_share",
          "threads", "threads_exited", "sampling_us")


def _loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return handle.read().strip()


def _steal_ticks() -> int:
    """The machine's stolen time (``/proc/stat``, 8th value, USER_HZ ticks): the hypervisor ran
    someone else on our virtual CPUs. Not the run-queue wait of any task here."""
    with open("/proc/stat") as handle:
        return int(handle.readline().split()[8])


def start_neighbours(per_core: int, lifetime_s: float, burst: tuple[float, float] | None = None
                     ) -> list[subprocess.Popen]:
    """``per_core`` spinning processes pinned to each core this process may use."""
    on_s, period_s = burst if burst else (1.0, 1.0)
    hogs: list[subprocess.Popen] = []
    try:
        for core in sorted(os.sched_getaffinity(0)):
            for _ in range(per_core):
                hog = subprocess.Popen([sys.executable, "-c", _HOG, str(core), str(lifetime_s), str(on_s),
                                        str(period_s)], stdout=subprocess.PIPE, text=True)
                hogs.append(hog)
                if hog.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"neighbour {hog.pid} did not start")
    except BaseException:
        stop_neighbours(hogs)
        raise
    return hogs


def stop_neighbours(hogs: list[subprocess.Popen]) -> None:
    """End the neighbours this script started, by PID."""
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
    for hog in hogs:
        hog.wait(timeout=10)
        hog.stdout.close()


def measure_overhead(workload, sampler: ContentionSampler, threads: int, blocks: int, steps: int) -> dict:
    snapshot_us = []
    for _ in range(2000):
        start = time.perf_counter()
        sampler.sample()
        snapshot_us.append((time.perf_counter() - start) * 1e6)
    with_sampler: list[float] = []
    without: list[float] = []
    per_step_us: list[float] = []
    with pinned_threads(threads):
        for block in range(blocks):
            for sampled in ((True, False) if block % 2 == 0 else (False, True)):
                samples = time_steps(workload.step, steps, sampler=sampler if sampled else None)
                (with_sampler if sampled else without).extend(samples.times_ms)
                per_step_us.extend(step.sampling_us for step in samples.contention)
    quiet_step_ms = statistics.median(without)
    figures = {
        "threads_seen": len(sampler.sample().runq_wait_ns),
        "snapshot_us": statistics.median(snapshot_us),
        "per_step_us": statistics.median(per_step_us),
        "step_ms_with": statistics.median(with_sampler),
        "step_ms_without": quiet_step_ms,
    }
    figures["share_of_step"] = figures["per_step_us"] / 1e3 / quiet_step_ms
    return figures


def measure_levels(workload, sampler: ContentionSampler, threads: int, rounds: int, steps: int,
                   block_s: float, writer: csv.DictWriter) -> list[dict]:
    """Blocks of at most ``steps`` steps or ``block_s`` seconds, one per level and round; each
    block's rows are written (and flushed) as soon as it ends, so a stopped run keeps them."""
    rows: list[dict] = []
    names = list(LEVELS)
    order = [level for r in range(rounds) for level in (names if r % 2 == 0 else names[::-1])]
    for index, level in enumerate(order):
        per_core, burst = LEVELS[level]
        # A neighbour outlives its block by a margin at most, even if this script is killed.
        hogs = start_neighbours(per_core, block_s + 30.0, burst)
        steal = _steal_ticks()
        try:
            time.sleep(0.2)  # the neighbours reach the run queues before the clock starts
            samples = TimedSteps()
            with pinned_threads(threads):
                time_steps(workload.step, 3)  # untimed: the scheduler settles on the new load
                time_steps(workload.step, steps, sampler=sampler, into=samples,
                           deadline=time.perf_counter() + block_s)
        finally:
            stop_neighbours(hogs)
        block = [{"round": index // len(LEVELS), "level": level, "step": step, "wall_ms": wall,
                  "runq_wait_ms": figures.runq_wait_ms, "cpu_ms": figures.cpu_ms,
                  "nivcsw": figures.nivcsw, "wait_share": figures.wait_share,
                  "threads": figures.threads, "threads_exited": figures.threads_exited,
                  "sampling_us": figures.sampling_us}
                 for step, (wall, figures) in enumerate(zip(samples.times_ms, samples.contention))]
        writer.writerows(block)
        rows.extend(block)
        print(f"  block {index + 1}/{len(order)}: {level!r} neighbour(s) per core, {len(block)} steps, "
              f"median step {statistics.median(samples.times_ms):.2f} ms, "
              f"steal {(_steal_ticks() - steal) * 1e3 / os.sysconf('SC_CLK_TCK'):.0f} ms; loadavg {_loadavg()}")
    return rows


def read_rows(path: str) -> list[dict]:
    """The rows of a CSV this script wrote, with their types."""
    types = {"round": int, "step": int, "nivcsw": int, "threads": int, "threads_exited": int, "level": str}
    with open(path, newline="") as handle:
        return [{key: types.get(key, float)(value) for key, value in row.items()} for row in csv.DictReader(handle)]


def _spread(values: list[float]) -> float:
    return _rank(values, 0.95) / statistics.median(values)


def _rank(values: list[float], p: float) -> float:
    """Nearest-rank quantile of any real values (``rules.percentile`` takes latencies only)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else math.nan


#: The step-time figures a decision could use: raw wall time and the corrections: wall minus
#: run-queue wait; the same kept between the CPU time and the wall time (the kernel's wait can
#: exceed wall - CPU, see the accounting check; the clamp holds for one busy thread only); CPU time.
SERIES = {
    "wall": lambda row: row["wall_ms"],
    "wall-wait": lambda row: row["wall_ms"] - row["runq_wait_ms"],
    "clamped": lambda row: min(row["wall_ms"], max(row["wall_ms"] - row["runq_wait_ms"], row["cpu_ms"])),
    "cpu": lambda row: row["cpu_ms"],
}


def report(rows: list[dict]) -> None:
    by_level = {level: [row for row in rows if row["level"] == level] for level in LEVELS}
    quiet = by_level[QUIET]
    quiet_wall = _median(row["wall_ms"] for row in quiet)
    quiet_medians = {name: _median(f(row) for row in quiet) for name, f in SERIES.items()}

    print("\nper level: medians over steps; ratio = the level's median / the quiet level's median "
          "(1.000 = the figure does not see the load); spread = P95 / median")
    print(f"{'neighbours':>10} {'steps':>5} {'wait share':>10} {'wall ms':>8} "
          + " ".join(f"{name + ' ratio':>15}" for name in SERIES) + " "
          + " ".join(f"{name + ' spread':>16}" for name in SERIES) + f" {'nivcsw':>6}")
    for level, level_rows in by_level.items():
        ratios = [_median(f(row) for row in level_rows) / quiet_medians[name] for name, f in SERIES.items()]
        spreads = [_spread([f(row) for row in level_rows]) for f in SERIES.values()]
        print(f"{level:>10} {len(level_rows):>5} {_median(row['wait_share'] for row in level_rows):>10.3f} "
              f"{_median(row['wall_ms'] for row in level_rows):>8.2f} "
              + " ".join(f"{r:>15.3f}" for r in ratios) + " " + " ".join(f"{v:>16.3f}" for v in spreads)
              + f" {_median(row['nivcsw'] for row in level_rows):>6.0f}")

    rounds = sorted({row["round"] for row in rows})
    print("\npaired by round: each block against the quiet block of its own round (slow drift in "
          "the machine's other load cancels); the median over rounds of those ratios")
    print(f"{'neighbours':>10} " + " ".join(f"{name + ' ratio':>15}" for name in SERIES))
    for level, level_rows in by_level.items():
        ratios = {name: [] for name in SERIES}
        for r in rounds:
            block = [row for row in level_rows if row["round"] == r]
            quiet_block = [row for row in quiet if row["round"] == r]
            if block and quiet_block:
                for name, f in SERIES.items():
                    ratios[name].append(_median(f(row) for row in block) / _median(f(row) for row in quiet_block))
        print(f"{level:>10} " + " ".join(f"{_median(values):>15.3f}" for values in ratios.values()))

    print("\nthe accounting check: residual = wall - cpu - wait per step, ms (about 0 for one busy thread; "
          "> 0: time neither on a CPU nor queued, e.g. sleeping or stolen by the hypervisor; "
          "< 0: wait or CPU counted beyond the step)")
    print(f"{'neighbours':>10} {'P5':>7} {'median':>7} {'P95':>7} {'share < -1 ms':>13}")
    for level, level_rows in by_level.items():
        residual = [row["wall_ms"] - row["cpu_ms"] - row["runq_wait_ms"] for row in level_rows]
        print(f"{level:>10} {_rank(residual, 0.05):>7.2f} {_median(residual):>7.2f} "
              f"{_rank(residual, 0.95):>7.2f} {sum(r < -1 for r in residual) / len(residual):>13.2f}")

    print("\nhow well the wait share tracks the slowdown (excess = wall / quiet median - 1; "
          "slope and R^2 of the excess in ms on the wait in ms)")
    print(f"{'steps':>20} {'pearson':>8} {'spearman':>9} {'slope ms/ms':>11} {'R^2':>6}")
    for label, subset in [("all levels", rows)] + [(f"{lv!r} only", by_level[lv]) for lv in LEVELS]:
        share = [row["wait_share"] for row in subset]
        if len(set(share)) < 3 or len(subset) < 3:
            print(f"{label:>20} {'(too few distinct wait shares)':>36}")
            continue
        excess = [row["wall_ms"] / quiet_wall - 1 for row in subset]
        fit = stats.linregress([row["runq_wait_ms"] for row in subset],
                               [row["wall_ms"] - quiet_wall for row in subset])
        print(f"{label:>20} {stats.pearsonr(share, excess)[0]:>8.3f} {stats.spearmanr(share, excess)[0]:>9.3f} "
              f"{fit.slope:>11.3f} {fit.rvalue ** 2:>6.3f}")

    print("\noption (a): drop steps whose wait share exceeds a bound, in every level alike; kept = share "
          "of steps kept; P50 and P95 = the kept steps' median and P95 / the kept quiet steps' ones; "
          f"usable = share of {ATTEMPT_STEPS}-step attempts (consecutive steps) keeping at least "
          f"{MIN_KEPT} steps")
    print(f"{'bound':>6} {'level':>10} {'kept':>6} {'P50':>7} {'P95':>7} {'usable':>7}")
    for bound in BOUNDS:
        quiet_kept = [row["wall_ms"] for row in quiet if row["wait_share"] <= bound]
        for level, level_rows in by_level.items():
            kept = [row["wall_ms"] for row in level_rows if row["wait_share"] <= bound]
            attempts = [level_rows[i:i + ATTEMPT_STEPS]
                        for i in range(0, len(level_rows) - ATTEMPT_STEPS + 1, ATTEMPT_STEPS)]
            usable = [sum(row["wait_share"] <= bound for row in attempt) >= MIN_KEPT for attempt in attempts]
            p50 = _median(kept) / _median(quiet_kept) if kept and quiet_kept else math.nan
            p95 = _rank(kept, 0.95) / _rank(quiet_kept, 0.95) if kept and quiet_kept else math.nan
            print(f"{bound:>6.2f} {level:>10} {len(kept) / len(level_rows):>6.2f} {p50:>7.3f} {p95:>7.3f} "
                  f"{sum(usable) / len(usable) if usable else math.nan:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--input-shape", default="(4, 128)")
    parser.add_argument("--steps", type=int, default=150, help="measured TinyLM steps per block")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the levels (ABC, CBA, ...)")
    parser.add_argument("--overhead-blocks", type=int, default=6)
    parser.add_argument("--block-seconds", type=float, default=8.0,
                        help="a block ends after this many seconds even if its steps are not done")
    parser.add_argument("--csv", default=f"bench_contention-{time.strftime('%Y%m%d-%H%M%S')}.csv")
    parser.add_argument("--from-csv", metavar="PATH", help="analyse the raw samples of an earlier run; measure nothing")
    args = parser.parse_args()
    if args.from_csv:
        report(read_rows(args.from_csv))
        return
    # SIGTERM (a timeout) unwinds like Ctrl-C, so the neighbours are ended by their finally.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    cores = sorted(os.sched_getaffinity(0))
    print(f"{len(cores)} core(s) {cores}, torch threads {args.threads}, loadavg {_loadavg()}")
    workload = make_workload("tinylm", {"input_shape": args.input_shape})
    with ContentionSampler() as sampler:
        if not sampler.available:
            raise SystemExit(f"nothing to measure: {sampler.status}")
        with pinned_threads(args.threads):
            time_steps(workload.step, 20)  # warm-up: allocator, autograd caches
        overhead = measure_overhead(workload, sampler, args.threads, args.overhead_blocks, 40)
        print(f"\nsampling overhead ({overhead['threads_seen']} threads in the process): one snapshot "
              f"{overhead['snapshot_us']:.1f} µs; per measured step (2 snapshots, outside the clock) "
              f"{overhead['per_step_us']:.1f} µs = {100 * overhead['share_of_step']:.2f}% of a quiet "
              f"TinyLM step ({overhead['step_ms_without']:.3f} ms); median step with the sampler "
              f"{overhead['step_ms_with']:.3f} ms, without {overhead['step_ms_without']:.3f} ms "
              f"(ratio {overhead['step_ms_with'] / overhead['step_ms_without']:.3f})")
        print(f"\n{args.rounds} round(s) of blocks of {args.steps} steps (at most {args.block_seconds} s) "
              f"under {LEVELS} neighbour(s) per core; raw samples to {os.path.abspath(args.csv)}")
        with open(args.csv, "w", newline="", buffering=1) as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            rows = measure_levels(workload, sampler, args.threads, args.rounds, args.steps,
                                  args.block_seconds, writer)
    workload.close()
    report(rows)
    print(f"\nraw samples: {os.path.abspath(args.csv)}")
    print(f"total {time.perf_counter() - started:.1f} s, loadavg {_loadavg()}")


if __name__ == "__main__":
    main()
