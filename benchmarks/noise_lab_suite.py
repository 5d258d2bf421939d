"""The suite's error control on the noise lab's real attempts: false alarms and detection over suites of 20.

Reads a CSV that ``benchmarks/noise_lab.py --csv PATH`` wrote (nothing is measured here). For each
contention condition, every window of ``n`` consecutive ABBA rounds (time order) of the identical-arms
pool, and of the pool whose candidate is truly 20% slower, is judged once by each method in
``non_regression`` mode (margin 5%) and turned into the suite gate's evidence
(``rules._suite.entry_evidence``). A suite is then ``--entries`` windows drawn at random (with
replacement) and gated by ``rules.suite_gate`` (Holm or Benjamini-Hochberg, alpha 0.05):

- identical suites: all entries from identical-arm windows; printed is the share of suites with
  any reject (the family-wise false alarm), beside the share with any reject among the entries'
  own verdicts taken one by one (what the gate prevents);
- one slowed entry: one window of the 20%-slower pool among ``entries - 1`` identical ones; printed
  is the share of suites in which the gate rejects the slowed entry, and the share with a false
  reject among the others.

Caveat, printed with the figures: a pool of R rounds holds R - n + 1 overlapping windows but only
R // n disjoint ones, so entries drawn from one pool share rounds: they are more alike than the
entries of a real suite (different models), and a real suite's family-wise rate can sit higher.

    python benchmarks/noise_lab_suite.py benchmarks/results/noise_lab/full.csv.gz [--suites 2000] [--n 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from noise_lab import LATENCIES, MARGIN, judged_mode, pools_of, read_rows, window_records, windows  # noqa: E402

from mlflow_perfgate.rules import decide  # noqa: E402
from mlflow_perfgate.rules._suite import TAIL_SHARE, entry_evidence, suite_gate  # noqa: E402

SLOWDOWN = 0.2


def pool_evidence(pool: dict, n: int, method: str, latency: str) -> list:
    """Each window's gate evidence, in time order."""
    evidence = []
    for window in windows(pool, n):
        rows = [row for round_ in window for row in pool[round_]]
        baseline, candidate = window_records(rows, latency)
        result = decide(baseline, candidate, method=method, mode="non_regression", margin=MARGIN)
        evidence.append(entry_evidence("w", result, baseline_runs=baseline, candidate_runs=candidate))
    return evidence


def named(items: list) -> list:
    return [dataclasses.replace(item, name=f"e{index}") for index, item in enumerate(items)]


def suite_rates(identical: list, slowed: list, entries: int, suites: int, rng: np.random.Generator,
                tail_share: float = TAIL_SHARE) -> dict:
    """The shares of ``suites`` drawn suites of ``entries`` windows' evidence, by outcome.

    ``own``: a suite of identical entries with any reject among the entries' own verdicts;
    ``holm`` / ``bh``: the gate (alpha 0.05) rejects such a suite; ``found_holm`` / ``found_bh``:
    with one slowed entry in place of the first, the gate rejects that entry; ``beside``: it
    (Holm) rejects another entry of that suite too.
    """
    counts = dict.fromkeys(("own", "holm", "bh", "found_holm", "found_bh", "beside"), 0)
    for _ in range(suites):
        draw = named([identical[i] for i in rng.integers(len(identical), size=entries)])
        counts["own"] += any(item.verdict == "reject" for item in draw)
        for control in ("holm", "bh"):
            gate = suite_gate(draw, alpha=0.05, control=control, tail_share=tail_share)
            counts[control] += gate.verdict == "reject"
        mixed = named([slowed[rng.integers(len(slowed))]] + draw[1:])
        holm, bh = (suite_gate(mixed, alpha=0.05, control=c, tail_share=tail_share) for c in ("holm", "bh"))
        counts["found_holm"] += holm.entries[0].verdict == "reject"
        counts["found_bh"] += bh.entries[0].verdict == "reject"
        counts["beside"] += any(entry.verdict == "reject" for entry in holm.entries[1:])
    return {key: value / suites for key, value in counts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--suites", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--n", type=int, default=10, help="rounds per entry (attempts per arm)")
    parser.add_argument("--methods", default="robust,paired")
    parser.add_argument("--latency", choices=LATENCIES, default="raw")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tail-share", type=float, default=TAIL_SHARE,
                        help="the share of each entry's level its tail test gets (0.5: equal weights, plain Holm)")
    parser.add_argument("--step-mode", choices=("process", "steps"), default=None,
                        help="the rounds to judge: process (separate children) or steps (step-interleaved, one "
                             "child a round); default: process, or steps when only those carry effects")
    args = parser.parse_args(argv)
    if args.entries < 2 or args.suites < 1 or args.n < 2:
        parser.error("--entries must be >= 2, --suites >= 1 and --n >= 2")
    if not 0 < args.tail_share <= 0.5:  # NaN fails too
        parser.error(f"--tail-share must be in (0, 0.5], got {args.tail_share}")
    rows = read_rows(args.csv)
    mode = judged_mode(rows, args.step_mode)
    pools = pools_of(row for row in rows if row["step_mode"] == mode)
    conditions = sorted({condition for condition, _ in pools}, key=("quiet", "steady", "bursty").index)
    rng = np.random.default_rng(args.seed)
    print(f"{args.csv}: suites of {args.entries} entries of n = {args.n} rounds drawn from the real pools, "
          f"{args.suites} suites per cell, non_regression (margin {MARGIN:.0%}), alpha 0.05, tail share "
          f"{args.tail_share:g}, {args.latency} latency, {mode} rounds")
    print("| condition | method | windows (disjoint) | any false reject: own verdicts | Holm | BH | "
          "20% slower found: Holm | BH | a false reject beside it (Holm) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for condition in conditions:
        same, slow = pools.get((condition, 0.0)), pools.get((condition, SLOWDOWN))
        if not same or not slow:
            print(f"| {condition} | (no identical or 20%-slower pool in the CSV) |||||||")
            continue
        for method in args.methods.split(","):
            identical = pool_evidence(same, args.n, method, args.latency)
            slowed = pool_evidence(slow, args.n, method, args.latency)
            if not identical or not slowed:
                print(f"| {condition} | {method} | fewer than {args.n} rounds |||||||")
                continue
            counts = suite_rates(identical, slowed, args.entries, args.suites, rng, args.tail_share)
            share = {key: f"{value:.1%}" for key, value in counts.items()}
            print(f"| {condition} | {method} | {len(identical)} ({len(same) // args.n}) | {share['own']} | "
                  f"{share['holm']} | {share['bh']} | {share['found_holm']} | {share['found_bh']} | {share['beside']} |")
    print("caveat: entries drawn from one pool share rounds (overlapping windows), so they are more alike than a "
          "real suite's; the disjoint count says how much independent evidence each cell holds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
