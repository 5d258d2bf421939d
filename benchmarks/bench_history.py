"""How often ``find_change_points`` finds a known change, and how often it finds one in pure noise.

Simulated histories (seeded, so every run prints the same figures) of revisions with
``--attempts`` attempts each (default 5), attempt latencies around 100 ms:

- *step*: ``--side`` revisions (default 10), then as many 20% slower; found when a
  ``regression`` is reported at the first slower revision (``exact``) or within one revision.
- *noise*: ``2 * side`` revisions with no change; ``any cp`` counts histories with any change
  point, ``alarm`` those with a ``regression`` or an ``improvement`` (what a report acts on).
- *trailing*: 20 revisions, then the newest 1, 2 or 3 revisions 20% slower (a regression that
  just landed, as CI sees it); found when a slower change point is reported at the first of them.

Noise models of an attempt's latency:

- ``lognormal``: ``exp(N(0, 0.05))``, a quiet machine.
- ``contention``: the same body; each attempt is, with probability 0.05, slowed by a factor
  drawn uniformly in [1.5, 3] (``benchmarks/decision_quality.py``'s assumed contention).
- ``heavy``: as ``contention`` at four times the rate (0.2): a revision's median of 5 attempts
  is itself slowed about 6% of the time.
- ``heavy+revision``: as ``heavy``, and each revision is, with probability 0.1, slowed as a
  whole by a factor uniform in [1.1, 1.5] (a busy machine for all of a revision's attempts: a
  revision-level outlier, which the median of its attempts cannot remove).
- ``flaky``: ``lognormal`` with every attempt failing with probability 0.1 (no change of rate):
  the failure test's false positives (two tests then run, each at ``alpha``).

``--clip`` sets ``rules._history.CLIP_SIGMAS`` (the permutation test's outlier clip, in robust
standard deviations; at most 16, its quantised values being int16) to compare the choices behind
its default (3.5; 16 is close to no clip for these models).

Usage: python benchmarks/bench_history.py [--series 1000] [--attempts 5] [--side 10]
       [--alpha 0.01 0.05] [--test permutation t] [--model ...] [--clip 3.5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlflow_perfgate.rules import _history
from mlflow_perfgate.rules._history import RevisionSample, find_change_points

MODELS = ("lognormal", "contention", "heavy", "heavy+revision", "flaky")
CONTENTION = {"contention": 0.05, "heavy": 0.2, "heavy+revision": 0.2}
STEP = 1.2
TRAILING = (1, 2, 3)
QUIET_BEFORE_TRAILING = 20


def history(rng, ratios, attempts: int, model: str) -> list[RevisionSample]:
    """One simulated history: a revision per ratio (its true latency over the first revision's)."""
    samples = []
    for index, ratio in enumerate(ratios):
        latencies = 100.0 * ratio * np.exp(rng.normal(0.0, 0.05, attempts))
        failed = 0
        if model in CONTENTION:
            contended = rng.random(attempts) < CONTENTION[model]
            latencies = latencies * np.where(contended, rng.uniform(1.5, 3.0, attempts), 1.0)
        if model == "heavy+revision" and rng.random() < 0.1:
            latencies = latencies * rng.uniform(1.1, 1.5)
        if model == "flaky":
            ok = rng.random(attempts) >= 0.1
            failed, latencies = int((~ok).sum()), latencies[ok]
        samples.append(RevisionSample(f"r{index}", index, tuple(float(x) for x in latencies), failed))
    return samples


def rates(model: str, alpha: float, series: int, attempts: int, side: int, test: str = "permutation",
          seed: int = 0) -> dict:
    """The cell's rates (see the module's docstring)."""
    rng = np.random.default_rng([seed, MODELS.index(model), int(alpha * 1e6)])
    counts = dict.fromkeys(["exact", "near", "any", "alarm", *(f"trailing_{r}" for r in TRAILING)], 0)
    for _ in range(series):
        found = find_change_points(history(rng, [1.0] * side + [STEP] * side, attempts, model), alpha=alpha,
                                   test=test)
        regressions = [cp.index for cp in found if cp.label == "regression"]
        counts["exact"] += side in regressions
        counts["near"] += any(abs(index - side) <= 1 for index in regressions)
        noise = find_change_points(history(rng, [1.0] * (2 * side), attempts, model), alpha=alpha, test=test)
        counts["any"] += bool(noise)
        counts["alarm"] += any(cp.label != "suspicious" for cp in noise)
        for trailing in TRAILING:
            ratios = [1.0] * QUIET_BEFORE_TRAILING + [STEP] * trailing
            found = find_change_points(history(rng, ratios, attempts, model), alpha=alpha, test=test)
            counts[f"trailing_{trailing}"] += any(cp.index == QUIET_BEFORE_TRAILING and cp.direction == "slower"
                                                  for cp in found)
    return {key: value / series for key, value in counts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000, help="simulated histories per cell and scenario")
    parser.add_argument("--attempts", type=int, default=5, help="attempts per revision")
    parser.add_argument("--side", type=int, default=10, help="revisions each side of the step")
    parser.add_argument("--alpha", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--test", nargs="+", default=["permutation", "t"], choices=_history.TESTS)
    parser.add_argument("--model", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--clip", type=float, default=_history.CLIP_SIGMAS,
                        help="the permutation test's outlier clip in robust sigmas, in (0, 16]")
    args = parser.parse_args(argv)
    if not 0 < args.clip <= 16:
        parser.error(f"--clip must be in (0, 16], got {args.clip}")
    _history.CLIP_SIGMAS = args.clip
    print(f"{args.series} histories per cell and scenario; {args.attempts} attempts per revision; step x{STEP} "
          f"after {args.side} revisions ({args.side} after); noise of {2 * args.side} revisions; trailing: "
          f"{QUIET_BEFORE_TRAILING} revisions then the newest 1/2/3 x{STEP}; clip {args.clip:g} sigma")
    print(f"{'test':<12}{'model':<16}{'alpha':>6}{'step exact':>11}{'step +-1':>9}{'noise any':>10}"
          f"{'noise alarm':>12}{'trail 1':>8}{'trail 2':>8}{'trail 3':>8}{'s':>6}")
    for test in args.test:
        for model in args.model:
            for alpha in args.alpha:
                started = time.perf_counter()
                cell = rates(model, alpha, args.series, args.attempts, args.side, test)
                print(f"{test:<12}{model:<16}{alpha:>6g}{cell['exact']:>11.1%}{cell['near']:>9.1%}"
                      f"{cell['any']:>10.1%}{cell['alarm']:>12.1%}{cell['trailing_1']:>8.1%}"
                      f"{cell['trailing_2']:>8.1%}{cell['trailing_3']:>8.1%}{time.perf_counter() - started:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
