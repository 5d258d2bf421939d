"""The noise lab's command line (``python benchmarks/noise_lab.py``): collect and report, report
again from a CSV (``--from-csv``), or fit the simulation's noise to one (``--fit-simulation``)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
import time

from .analysis import SIZES, available_judges
from .attempts import HERE, WORKLOAD, base_conditions
from .collection import FIELDS, WAIT_BOUND, attempt_wall_s, collect, interleave_hook, read_rows
from .effects import EFFECT_SIZES, calibrate, effect_list
from .neighbours import CONDITIONS, loadavg
from .peers import REFERENCES
from .report import print_fit, report

def _sizes(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers separated by commas, got {text!r}")
    return values


def _effects(text: str) -> list[float]:
    values = [float(part) for part in text.split(",") if part.strip()]
    if not values or any(not 0 < value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"effects must be fractions in (0, 1) separated by commas, got {text!r}")
    return values


def _conditions(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(values) - set(CONDITIONS))
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"conditions must be some of {list(CONDITIONS)}, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=sys.modules[__package__].__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=80, help="ABBA rounds per condition and effect")
    parser.add_argument("--cycles", type=int, default=2,
                        help="blocks per condition: the conditions run in order, then reversed, ...")
    parser.add_argument("--conditions", type=_conditions, default=list(CONDITIONS), help="quiet,steady,bursty")
    parser.add_argument("--effects", type=_effects, default=list(EFFECT_SIZES),
                        help="true effect sizes, each as a speedup and a slowdown (identical arms always)")
    parser.add_argument("--sizes", type=_sizes, default=list(SIZES), help="window sizes n (rounds)")
    parser.add_argument("--stride", type=int, default=1, help="rounds between the starts of two windows")
    parser.add_argument("--input-shape", default="4,128")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the harness's default)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-attempt timeout, s (compare's default)")
    parser.add_argument("--no-probe", action="store_true", help="skip the correctness probe (compare runs it)")
    parser.add_argument("--unit-size", type=int, default=128, help="matrix size of one unit of extra work")
    parser.add_argument("--probe-units", type=int, default=100, help="units of extra work the calibration measures")
    parser.add_argument("--calibration-rounds", type=int, default=6)
    parser.add_argument("--calibration", metavar="JSON", help="reuse an earlier calibration instead of measuring")
    parser.add_argument("--wait-bound", type=float, default=WAIT_BOUND,
                        help="a step counts as uncontended at this wait share or below")
    parser.add_argument("--interleave", choices=("auto", "off"), default="auto",
                        help="auto: identical arms sharing one process (run_interleaved) too, under each condition, "
                             "beside a run of separate processes")
    parser.add_argument("--interleave-rounds", type=int, default=20)
    parser.add_argument("--step-mode", choices=("process", "steps"), default=None,
                        help="process (default): every attempt its own child; steps: both arms of a round in one "
                             "child, their steps interleaved (compare --interleave steps). With --from-csv: which "
                             "rounds to judge (default: the process rounds, or the steps rounds when only those "
                             "carry effects)")
    parser.add_argument("--seed", type=int, default=20240612)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for judging the windows")
    parser.add_argument("--csv", default=f"noise_lab-{time.strftime('%Y%m%d-%H%M%S')}.csv")
    parser.add_argument("--from-csv", metavar="PATH", help="judge an earlier run's attempts; measure nothing")
    parser.add_argument("--fit-simulation", metavar="FROM_CSV",
                        help="fit benchmarks/decision_quality.py's noise to a CSV's attempts and print it")
    args = parser.parse_args(argv)
    if args.wait_bound != WAIT_BOUND and args.from_csv:
        parser.error("--wait-bound applies when collecting (the CSV keeps each attempt's uncontended latency)")

    if args.fit_simulation:
        return print_fit(args.fit_simulation, args.threads)
    missing = sorted(set(REFERENCES) - set(available_judges()))
    if missing:
        # Checked before any attempt runs: the reference columns are half of the table's point.
        parser.error(f"{' and '.join(missing)} not installed; the lab judges by their rules too: "
                     "pip install -e '.[bench]'")
    if args.from_csv:
        calibration = None
        sidecar = args.from_csv.removesuffix(".gz") + ".calibration.json"  # beside the CSV, gzipped or not
        if os.path.exists(sidecar):
            with open(sidecar) as handle:
                calibration = json.load(handle)
        print(f"noise lab, from {args.from_csv}; cat /proc/loadavg: {loadavg()}")
        return report(read_rows(args.from_csv), args.sizes, args.stride, args.jobs, calibration, args.step_mode)

    if HERE not in sys.path:
        sys.path.insert(0, HERE)  # the children import the wrapper workload from here (runners pass sys.path on)
    # SIGTERM (a timeout) unwinds like Ctrl-C: the neighbours end in their finally, the runner closes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch

    from mlflow_perfgate.workloads import attempt_runner

    lab_t0 = time.monotonic()
    started = time.perf_counter()
    conditions = base_conditions(args)
    threads = args.threads or torch.get_num_threads()
    effects = effect_list(args.effects)
    total = len(args.conditions) * args.rounds * len(effects) * 2
    print(f"noise lab: torch {torch.__version__}, {threads} thread(s), cores {sorted(os.sched_getaffinity(0))}, "
          f"seed {args.seed}; {len(args.conditions)} conditions x {len(effects)} effects x {args.rounds} rounds x 2 "
          f"= {total} attempts; cat /proc/loadavg: {loadavg()}")
    print(f"attempts to {os.path.abspath(args.csv)}", flush=True)
    with attempt_runner("auto", workload=WORKLOAD) as runner:
        if runner.kind == "fork":
            runner.status()  # the server's warm-up is the runner's, once
        if args.calibration:
            with open(args.calibration) as handle:
                calibration = json.load(handle)
            missing = [f"{e:+.2f}" for e in effects if f"{e:+.2f}" not in calibration["units"]]
            if missing:
                raise SystemExit(f"--calibration {args.calibration} has no units for effects {missing}")
            print(f"calibration from {args.calibration} (measured {calibration['at']})")
        else:
            calibration = calibrate(args, runner, conditions)
        with open(args.csv + ".calibration.json", "w") as handle:
            json.dump(calibration, handle, indent=1)
        slow = {"quiet": 1.0, "steady": 2.0, "bursty": 1.5}
        wall = attempt_wall_s(calibration, args.warmup, args.steps)
        estimate = sum(slow[c] for c in args.conditions) * args.rounds * len(effects) * 2 * wall
        print(f"expected collection time about {estimate / 60:.0f} min ({wall:.2f} s an "
              f"attempt when quiet, assumed 2x under steady and 1.5x under bursty neighbours)\n", flush=True)
        with open(args.csv, "w", newline="", buffering=1) as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            seq = collect(args, runner, conditions, calibration, writer, lab_t0)
            if args.interleave == "auto" and args.step_mode != "steps":
                interleave_hook(args, runner, conditions, writer, lab_t0, seq=seq)
    print(f"collected in {(time.perf_counter() - started) / 60:.1f} min; cat /proc/loadavg: {loadavg()}\n", flush=True)
    code = report(read_rows(args.csv), args.sizes, args.stride, args.jobs, calibration, args.step_mode)
    print(f"\nattempts: {os.path.abspath(args.csv)} (recompute: python benchmarks/noise_lab.py --from-csv "
          f"{args.csv}); total {(time.perf_counter() - started) / 60:.1f} min; cat /proc/loadavg: {loadavg()}")
    return code
