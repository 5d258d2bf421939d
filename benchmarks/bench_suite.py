"""The suite's error control in simulation: false alarms and detection over many simulated suites.

Each entry's arms are lognormal latencies (median 10 ms, sigma of log latency ``--sigma``), judged
by the robust method in non-regression mode (margin 5%, or 0: the boundary at the truth), then
gated by ``rules.suite_gate`` (Holm, or Benjamini-Hochberg). Printed: the share of suites with
any false reject (the family-wise error), the same for the entries' own verdicts taken one by
one (what the gate prevents), and the share of suites in which a slowed entry is rejected.

    python benchmarks/bench_suite.py [--suites 1000] [--entries 20] [--sigma 0.05] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlflow_perfgate.rules import ArmSummary, Policy
from mlflow_perfgate.rules._registry import METHODS, OBJECTIVES
from mlflow_perfgate.rules._suite import entry_evidence, suite_gate


def simulate(rng, ratios, policy, n, sigma, controls=("holm", "bh")):
    rule, objective = METHODS[policy.method].rule, OBJECTIVES["latency"]
    evidence = []
    for index, ratio in enumerate(ratios):
        base = [{"ok": True, "latency_ms": float(v), "quality": 1.0} for v in 10 * np.exp(rng.normal(0, sigma, n))]
        cand = [{"ok": True, "latency_ms": float(v), "quality": 1.0}
                for v in 10 * ratio * np.exp(rng.normal(0, sigma, n))]
        decision = rule(ArmSummary.from_runs(base), ArmSummary.from_runs(cand), policy, objective)
        evidence.append(entry_evidence(f"e{index}", decision))
    return evidence, {control: suite_gate(evidence, alpha=0.05, control=control) for control in controls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suites", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{args.suites} suites of {args.entries} entries, lognormal sigma {args.sigma}, robust, non_regression, "
          "alpha 0.05")
    for margin in (0.05, 0.0):
        policy = Policy(method="robust", mode="non_regression", margin=margin)
        for n in (10,):
            started = time.perf_counter()
            counts = {"own": 0, "holm": 0, "bh": 0}
            for _ in range(args.suites):
                evidence, gates = simulate(rng, [1.0] * args.entries, policy, n, args.sigma)
                counts["own"] += any(item.verdict == "reject" for item in evidence)
                for control, gate in gates.items():
                    counts[control] += gate.verdict == "reject"
            rates = ", ".join(f"{k} {v / args.suites:.1%}" for k, v in counts.items())
            print(f"identical arms, margin {margin:.2f}, n = {n}: any false reject: {rates} "
                  f"({time.perf_counter() - started:.0f} s)")
    policy = Policy(method="robust", mode="non_regression", margin=0.05)
    for n in (5, 10, 20):
        counts = {"holm": 0, "bh": 0, "holm_others": 0}
        for _ in range(args.suites):
            _, gates = simulate(rng, [1.2] + [1.0] * (args.entries - 1), policy, n, args.sigma)
            counts["holm"] += gates["holm"].entries[0].verdict == "reject"
            counts["bh"] += gates["bh"].entries[0].verdict == "reject"
            counts["holm_others"] += any(e.verdict == "reject" for e in gates["holm"].entries[1:])
        print(f"one entry 20% slower among {args.entries - 1} identical, n = {n}: found holm "
              f"{counts['holm'] / args.suites:.1%}, bh {counts['bh'] / args.suites:.1%}; a false reject among the "
              f"others (holm) {counts['holm_others'] / args.suites:.1%}")


if __name__ == "__main__":
    main()
