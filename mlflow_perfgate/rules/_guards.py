"""The figures every decision judges beside the one its method tests: typical step, mean step, step tail.

The user's question is the specification's: is the candidate's typical step faster by the
declared threshold, is its tail no worse, and, for a loop that runs step after step, is its
throughput no worse. A method tests one figure per attempt (the policy's ``latency``: the median
step, or a noise-robust estimator such as the 10th-percentile step). A change can move that
figure one way and the others the other way: a fast path taken by one step in four makes the
10th-percentile step 33% faster while the typical step is 12% slower; a stall every fifth step
leaves the median step alone while the mean step is 40% slower and the step tail three times
longer. So, wherever the attempts carry the figures (:data:`STEP_FIGURES`, written from their
step times), each one the method did not test is judged here, with the method's own estimator:

- ``typical_step_ok`` (the median step, ``latency_ms``; only when the policy judges another
  latency): no slower than ``1 + margin``;
- ``mean_step_ok`` (``step_mean_ms``): no slower than ``1 + margin``;
- ``step_tail_ok`` (``step_p95_ms``): no higher than ``maximum_p95_ratio``.

In both modes such a check fails when the method's interval lies beyond the bound (its lower
end above it: a slowdown shown at the interval's one-sided level, as the main check's), so
identical arms are not alarmed by a noisy figure; it is undecided (``None``: never an accept,
a rerun unless another check fails) when the estimate of the ratio candidate/baseline is
beyond the bound without the interval showing it, so a verdict never says faster, or no
worse, while a figure reads slower beyond its bound; it passes otherwise. The seed method,
which has no interval, compares the ratio of the arms' medians, exactly as its own checks do
(beyond the bound fails). A step check can only turn an accept into a rerun or a reject, or
a rerun into a reject, never the other way.

Estimators: the paired method's within-round Hodges-Lehmann estimate and signed-rank interval
(over complete ABBA rounds); the robust method's, and any other method's, two-sample
Hodges-Lehmann estimate and Mann-Whitney interval; the seed method's ratio of medians.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping

from ._checks import REL_TOL, above
from ._policy import STEP_FIGURES, Policy
from ._records import ArmSummary, Check, Decision, interval_text, ms, plain

__all__ = ["GUARDS", "guarded", "step_checks"]

#: ``(check name, figure key, the figure in words, its bound: "margin" or "p95")``.
GUARDS = (
    ("typical_step_ok", STEP_FIGURES["typical"], "typical step (median of the steps)", "margin"),
    ("mean_step_ok", STEP_FIGURES["mean"], "mean step (measured time / steps)", "margin"),
    ("step_tail_ok", STEP_FIGURES["tail"], "step tail (P95 of the steps)", "p95"),
)
#: The decision figure of each check's ratio estimate.
RATIO_FIGURES = {"typical_step_ok": "typical_step_ratio", "mean_step_ok": "mean_step_ratio",
                 "step_tail_ok": "step_tail_ratio"}


def _by_round(values, pairs) -> dict[int, list[float]]:
    grouped: dict[int, list[float]] = {}
    for value, pair in zip(values, pairs):
        if pair is not None:
            grouped.setdefault(pair, []).append(value)
    return grouped


def _estimate(b: ArmSummary, c: ArmSummary, key: str, method: str,
              confidence: float) -> tuple[float, float | None, float | None, str, list[float] | None]:
    """``(ratio, low, high, how, d)`` of ``key``, candidate over baseline, by the method's estimator; ``d``:
    the rounds' log ratios (the paired method's; ``None`` otherwise)."""
    base, cand = b.step_values[key], c.step_values[key]
    if method == "seed":
        return statistics.median(cand) / statistics.median(base), None, None, "ratio of the arms' medians", None
    if method == "paired":
        from ._stats import log_ratios, paired_log_shift

        rb, rc = _by_round(base, b.pairs), _by_round(cand, c.pairs)
        rounds = sorted(set(rb) & set(rc))
        if len(rounds) >= 2:
            d = log_ratios([statistics.median(rb[r]) for r in rounds], [statistics.median(rc[r]) for r in rounds])
            shift, low, high = paired_log_shift(d, confidence)
            return (math.exp(shift), None if low is None else math.exp(low), None if high is None else math.exp(high),
                    f"within-round Hodges-Lehmann over {len(rounds)} rounds", list(d))
    from ._stats import hodges_lehmann_ratio

    found = hodges_lehmann_ratio(list(base), list(cand), confidence=confidence)
    return found["ratio_estimate"], found["ratio_ci_low"], found["ratio_ci_high"], "Hodges-Lehmann", None


def _text(f: Mapping) -> str:
    interval = "" if f["low"] is None and f["high"] is None else (
        f", {interval_text(f['low'], f['high'], f['confidence'])}")
    rule = ("the ratio of medians may not exceed it" if f["method"] == "seed"
            else "the interval may not lie above it, nor the estimate for an accept")
    return (f"{f['figure']} candidate {ms(f['candidate'])} against baseline {ms(f['baseline'])}: ratio "
            f"{f['ratio']:.3f} ({f['how']}{interval}); bound {plain(f['bound'])} ({f['bound_name']}), {rule}")


def step_checks(b: ArmSummary, c: ArmSummary, policy: Policy, method: str,
                confidence: float | None = None) -> list[Check]:
    """The checks of the step figures the method did not test, where both arms carry them (see the module)."""
    confidence = policy.confidence if confidence is None else confidence
    checks = []
    for name, key, words, bound_kind in GUARDS:
        if key == b.latency_key or key not in b.step_values or key not in c.step_values:
            continue
        if bound_kind == "margin":
            bound, bound_name = 1 + policy.margin, "1 + margin"
        else:
            bound, bound_name = policy.maximum_p95_ratio, "maximum_p95_ratio"
        ratio, low, high, how, d = _estimate(b, c, key, method, confidence)
        if method == "seed":
            passed = not above(ratio, bound, 0.0)
        elif low is not None and above(low, bound, REL_TOL):
            passed = False
        else:
            passed = None if above(ratio, bound, REL_TOL) else True
        figures = {"figure": words, "candidate": statistics.median(c.step_values[key]),
                   "baseline": statistics.median(b.step_values[key]), "ratio": ratio, "low": low, "high": high,
                   "confidence": confidence, "how": how, "bound": bound, "bound_name": bound_name,
                   "mode": policy.mode, "method": method}
        if passed is None and d is not None:  # the rounds that keep a change that does nothing on its side
            from ._stats import settling_pairs

            figures["settling_rounds"] = settling_pairs(d, bound=bound, alpha=None)
        checks.append(Check.build(name, passed, figures, _text))
    return checks


def _with_typical(decision: Decision, b: ArmSummary, checks: list[Check]) -> Decision:
    """The decision with the typical and mean steps' estimates in its deciding figures: the step checks'
    (the method's estimator), or the judged figure's own where the method judged the typical step."""
    if decision.deciding is None:
        return decision
    found = {check.name: check.figures for check in checks}
    typical = found.get("typical_step_ok")
    if typical is not None:
        estimate = (typical["ratio"], typical["low"], typical["high"])
    elif b.latency_key == STEP_FIGURES["typical"]:  # the method judged the typical step itself
        deciding = decision.deciding
        estimate = (deciding.ratio, deciding.ratio_ci_low, deciding.ratio_ci_high)
    else:
        return decision
    mean = (found.get("mean_step_ok") or {}).get("ratio")
    return dataclasses.replace(decision, deciding=dataclasses.replace(
        decision.deciding, typical_ratio=estimate[0], typical_ci_low=estimate[1], typical_ci_high=estimate[2],
        mean_ratio=mean))


def guarded(decision: Decision, b: ArmSummary, c: ArmSummary, policy: Policy) -> Decision:
    """``decision`` with its step checks (:func:`step_checks`) added: a failed one rejects.

    A decision that answered before any check (a precondition's rerun) is returned as it is; a
    reject stays a reject; an accept or a rerun with a failed step check becomes a reject
    (``declared_thresholds_checked``), an accept with an undecided one a rerun
    (``inconclusive``). The checks' ratios join the figures (``typical_step_ratio``,
    ``mean_step_ratio``, ``step_tail_ratio``). A rerun's advice (``recommended_attempts``) is the
    most rounds any undecided figure needs, each planned from its rounds' spread alone
    (:func:`_stats.settling_pairs`; the paired method's).
    """
    if not decision.checks:
        return decision
    checks = step_checks(b, c, policy, decision.method, decision.figures.get("confidence"))
    decision = _with_typical(decision, b, checks)
    if not checks:
        return decision
    figures = {**decision.figures, **{RATIO_FIGURES[check.name]: check.figures["ratio"] for check in checks}}
    verdict, reason = decision.verdict, decision.reason
    if verdict != "reject" and any(check.passed is False for check in checks):
        verdict, reason = "reject", "declared_thresholds_checked"
    elif verdict == "accept" and any(check.passed is None for check in checks):
        verdict, reason = "rerun", "inconclusive"
    advice = decision.advice if verdict == decision.verdict else {**decision.advice, "recommended_attempts": None}
    if verdict == "rerun" and reason == "inconclusive":  # the most rounds any undecided figure needs
        needed = [check.figures.get("settling_rounds") for check in checks if check.passed is None]
        if decision.verdict == "rerun":  # the method's own figure undecided too
            needed.append(decision.advice.get("recommended_attempts"))
        needed = [n for n in needed if n is not None]
        if needed:
            advice = {**advice, "recommended_attempts": max(needed)}
    return dataclasses.replace(decision, verdict=verdict, reason=reason, checks=(*decision.checks, *checks),
                               figures=figures, advice=advice)
