"""How far the attempt harness's clock is from torch.utils.benchmark, and what supervision costs.

Prints, from one run:

1. the harness's median step time for a fixed TinyLM training step (the loop ``run_attempt``
   times: ``time.perf_counter`` around each step, threads pinned) against
   ``torch.utils.benchmark.Timer(...).blocked_autorange()``'s median at the same thread count,
   in alternating rounds, and their ratio (target 0.95-1.05);
2. the spread, P95 over median (nearest rank, ``rules.percentile``), of the latencies of N
   in-process attempts and N supervised attempts, run interleaved (ABBA) so that drift on the
   machine falls on both.

Usage: ``python benchmarks/bench_harness.py [--threads 2] [--attempts 10]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.utils.benchmark import Timer

from mlflow_perfgate.rules import percentile
from mlflow_perfgate.workloads import interleave, make_workload, run_attempt
from mlflow_perfgate.workloads._timing import pinned_threads, time_steps


def compare_clocks(conditions: dict, threads: int, steps: int, rounds: int, min_run_time: float) -> None:
    workload = make_workload("tinylm", conditions)
    with pinned_threads(threads):
        time_steps(workload.step, 20)  # warm-up: allocator, autograd graph caches
    harness, timer = [], []
    print(f"clock comparison: TinyLM {conditions}, {threads} thread(s), {rounds} alternating rounds")
    print(f"{'round':>5} {'harness median ms':>18} {'Timer median ms':>16} {'ratio':>7}")
    for index in range(rounds):
        with pinned_threads(threads):
            samples = time_steps(workload.step, steps)
        harness_ms = statistics.median(samples.times_ms)
        measurement = Timer(stmt="step()", globals={"step": workload.step},
                            num_threads=threads).blocked_autorange(min_run_time=min_run_time)
        timer_ms = measurement.median * 1e3
        harness.append(harness_ms)
        timer.append(timer_ms)
        print(f"{index:>5} {harness_ms:>18.3f} {timer_ms:>16.3f} {harness_ms / timer_ms:>7.3f}")
    workload.close()
    ratio = statistics.median(harness) / statistics.median(timer)
    # Rounds sit next to each other in time, so the per-round ratio cancels slow drift.
    round_ratio = statistics.median(h / t for h, t in zip(harness, timer))
    verdict = "inside" if 0.95 <= ratio <= 1.05 else "OUTSIDE"
    print(f"overall: harness {statistics.median(harness):.3f} ms / Timer {statistics.median(timer):.3f} ms"
          f" = {ratio:.3f} ({verdict} the 0.95-1.05 target); median per-round ratio {round_ratio:.3f}\n")


def compare_spreads(conditions: dict, threads: int, attempts: int, warmup: int, steps: int) -> None:
    latencies: dict[str, list[float]] = {"in_process": [], "supervised": []}
    walls: dict[str, list[float]] = {"in_process": [], "supervised": []}
    print(f"attempt spread: {attempts} in-process and {attempts} supervised attempts, "
          f"warmup={warmup}, steps={steps}, ABBA order")
    for arm in interleave(attempts, arms=("in_process", "supervised")):
        result = run_attempt("tinylm", conditions, warmup=warmup, steps=steps, threads=threads,
                             supervised=arm == "supervised", probe=False)
        if not result.ok:
            raise SystemExit(f"{arm} attempt failed: {result.failure}\n{result.failure_detail}")
        latencies[arm].append(result.latency_ms)
        walls[arm].append(result.wall_s)
    print(f"{'mode':>11} {'median ms':>10} {'P95 ms':>8} {'P95/median':>11} {'min ms':>8} {'max ms':>8} {'wall s':>7}")
    for arm, values in latencies.items():
        median = statistics.median(values)
        p95 = percentile(values, 0.95)
        print(f"{arm:>11} {median:>10.3f} {p95:>8.3f} {p95 / median:>11.3f} {min(values):>8.3f}"
              f" {max(values):>8.3f} {statistics.median(walls[arm]):>7.2f}")


def _load() -> str:
    """The 1-minute load average: other work on the machine shows up in every figure above."""
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--input-shape", default="(4, 128)")
    parser.add_argument("--steps", type=int, default=60, help="harness steps per clock round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-run-time", type=float, default=0.5, help="Timer seconds per round")
    parser.add_argument("--attempts", type=int, default=10, help="attempts per mode")
    parser.add_argument("--attempt-warmup", type=int, default=3)
    parser.add_argument("--attempt-steps", type=int, default=20)
    args = parser.parse_args()
    conditions = {"model": "TinyLM", "input_shape": args.input_shape, "dtype": "fp32", "device": "cpu"}
    started = time.perf_counter()
    print(f"torch {torch.__version__}, {args.threads} thread(s), load average {_load()}\n")
    compare_clocks(conditions, args.threads, args.steps, args.rounds, args.min_run_time)
    compare_spreads(conditions, args.threads, args.attempts, args.attempt_warmup, args.attempt_steps)
    print(f"\ntotal {time.perf_counter() - started:.1f} s, load average {_load()}")


if __name__ == "__main__":
    main()
