"""The parts every rule shares: the specification's preconditions and its failure-rate and quality checks.

Written once here, used by the seed rule, the robust and paired rules and every objective. Each
check stores the figures it compared; its message reads those figures and nothing else.

Threshold comparisons and floating point: a ratio exactly at its threshold must decide the same
whatever the unit (190 / 200 and 95 / 100 are both 5% faster, but their logs round apart).
The statistical methods and the objectives' own checks compare with a relative tolerance,
:data:`REL_TOL`: a value counts as above (or below) a bound only when it is so by more than
``REL_TOL`` times the larger of the two (:func:`above`, :func:`below`). The seed method
compares exactly (``rel_tol=0``), as the specification's code does: its arithmetic (a
difference over a median, a quotient of two P95s, a failure count over the attempts, a mean
quality less a tolerance) is correctly rounded and monotone, so a tie of the numbers given
stays a tie and the tolerance would only change the specification's answers; a value that is
not a binary number (2.85 ms) is judged as the binary number it is, there and here alike.
"""

from __future__ import annotations

import math
from typing import Mapping

from ._records import ArmSummary, Check, Decision, ms, pct
from ._stats import exceedance_p_value, flag_contention

__all__ = [
    "REL_TOL",
    "above",
    "below",
    "contention_check",
    "contention_flags",
    "decided",
    "exceedance_tail_check",
    "exceedance_tail_text",
    "failure_notes",
    "failure_rate_check",
    "failure_rate_text",
    "hopeless_failures_check",
    "p_value_text",
    "precondition",
    "quality_check",
    "quality_text",
    "tail_check",
    "tail_text",
    "verdict_of",
]

#: The relative tolerance of the statistical methods' and the objectives' threshold comparisons:
#: far above a double's rounding (about 1e-16) and far below any difference a latency measurement
#: can resolve.
REL_TOL = 1e-9


def _close(value: float, bound: float, rel_tol: float, scale: float) -> bool:
    return abs(value - bound) <= rel_tol * max(abs(value), abs(bound), abs(scale))


def above(value: float, bound: float, rel_tol: float = REL_TOL, scale: float = 0.0) -> bool:
    """``value > bound`` by more than ``rel_tol`` times the larger of ``|value|``, ``|bound|``, ``|scale|``.

    ``scale`` is the size of the numbers the bound was computed from, where it is a difference
    of larger ones (a quality less a tolerance). With ``rel_tol = 0``, exactly ``value > bound``.
    """
    return value > bound and not _close(value, bound, rel_tol, scale)


def below(value: float, bound: float, rel_tol: float = REL_TOL, scale: float = 0.0) -> bool:
    """``value < bound`` by more than the tolerance (see :func:`above`)."""
    return value < bound and not _close(value, bound, rel_tol, scale)


def p_value_text(p_value: float, alpha: float) -> str:
    """``p = 0.0123 below alpha 0.02``, saying ``below``, ``above`` or ``at`` as the tolerant comparison has it."""
    if below(p_value, alpha):
        word = "below"
    elif above(p_value, alpha):
        word = "above"
    else:
        word = "at"
    return f"p = {p_value:.3g} {word} alpha {alpha:.3g}"


def precondition(b: ArmSummary, c: ArmSummary, min_valid_runs: int, maximum_failure_rate: float,
                 rel_tol: float = 0.0) -> str | None:
    """The specification's reasons to answer ``rerun`` before any check, in its order; ``None`` to go on.

    Both arms need ``min_valid_runs`` successful attempts (``insufficient_valid_runs``), and the
    baseline's own failure rate may not exceed ``maximum_failure_rate`` (``unreliable_baseline``;
    compared with ``rel_tol``, 0 for the seed method).
    """
    if min(b.valid_runs, c.valid_runs) < min_valid_runs:
        return "insufficient_valid_runs"
    if above(b.failure_rate, maximum_failure_rate, rel_tol):
        return "unreliable_baseline"
    return None


def _hopeless_text(f: Mapping) -> str:
    still = (f"even if the {f['missing']} attempts still needed to reach min_valid_runs all succeed"
             if f["missing"] else "as it stands, with min_valid_runs reached")
    return (f"{failure_rate_text(f)}; above it whatever further attempts bring: at least {f['failed']} of "
            f"{f['attempted'] + f['missing']} = {pct(f['best_case'])} {still}")


def hopeless_failures_check(b: ArmSummary, c: ArmSummary, min_valid_runs: int, maximum_failure_rate: float,
                            rel_tol: float = REL_TOL) -> Check | None:
    """A failed ``failure_rate_ok`` when the candidate's failures already decide it; ``None`` otherwise.

    With ``f`` failures in ``n`` attempts and ``missing = max(0, min_valid_runs - successes)``
    attempts still needed, the candidate's failure rate can at best fall to ``f / (n +
    missing)``; when that is above ``maximum_failure_rate`` no further attempt can make it
    pass, so the statistical methods reject at once (reason ``unreliable_candidate``) instead of
    answering ``rerun`` for want of successes. With ``maximum_failure_rate = 0``, any known
    candidate failure rejects. The seed method keeps the specification's order and does not use it.
    """
    if c.failed_runs == 0:
        return None
    missing = max(0, min_valid_runs - c.valid_runs)
    best_case = c.failed_runs / (c.attempted_runs + missing)
    if not above(best_case, maximum_failure_rate, rel_tol):
        return None
    figures = {"candidate": c.failure_rate, "baseline": b.failure_rate, "threshold": maximum_failure_rate,
               "failed": c.failed_runs, "attempted": c.attempted_runs, "missing": missing, "best_case": best_case}
    return Check.build("failure_rate_ok", False, figures, _hopeless_text)


def failure_notes(b: ArmSummary, c: ArmSummary) -> dict[str, str]:
    """A note for each arm that failed every one of its attempts (there is then nothing else to read)."""
    notes = {}
    for arm, summary in (("candidate", c), ("baseline", b)):
        if summary.attempted_runs and not summary.valid_runs:
            reasons = sorted(set(summary.failure_reasons))
            shown = ", ".join(reasons[:3]) + (f" and {len(reasons) - 3} more" if len(reasons) > 3 else "")
            notes[f"{arm}_failed_every_attempt"] = (
                f"NOTE: the {arm} failed every one of its {summary.attempted_runs} attempts ({shown})")
    return notes


def failure_rate_text(f: Mapping) -> str:
    return (f"candidate failure rate {pct(f['candidate'])} ({f['failed']} of {f['attempted']}) against "
            f"maximum_failure_rate {pct(f['threshold'])} (baseline {pct(f['baseline'])})")


def failure_rate_check(b: ArmSummary, c: ArmSummary, maximum_failure_rate: float, rel_tol: float = 0.0) -> Check:
    """``failure_rate_ok``: the candidate's failure rate, failures in the denominator, at most the threshold.

    ``rel_tol``: see :func:`above` (0, exact, for the seed method).
    """
    figures = {"candidate": c.failure_rate, "baseline": b.failure_rate, "threshold": maximum_failure_rate,
               "failed": c.failed_runs, "attempted": c.attempted_runs}
    passed = not above(c.failure_rate, maximum_failure_rate, rel_tol)
    return Check.build("failure_rate_ok", passed, figures, failure_rate_text)


def quality_text(f: Mapping) -> str:
    tolerance = "" if f["tolerance"] is None else f" less quality_tolerance {f['tolerance']:g}"
    return f"candidate quality {f['candidate']:.6g} against baseline {f['baseline']:.6g}{tolerance}"


def quality_check(b: ArmSummary, c: ArmSummary, quality_tolerance: float, rel_tol: float = 0.0) -> Check:
    """``quality_ok``: the candidate's mean quality at least the baseline's less the tolerance.

    ``rel_tol``: see :func:`above` (0, exact, for the seed method), relative to the larger of
    the qualities and the tolerance.
    """
    figures = {"candidate": c.quality, "baseline": b.quality, "tolerance": quality_tolerance}
    passed = not below(c.quality, b.quality - quality_tolerance, rel_tol, max(abs(b.quality), quality_tolerance))
    return Check.build("quality_ok", passed, figures, quality_text)


def tail_text(f: Mapping) -> str:
    return (f"candidate P95 {ms(f['candidate'])} is {f['ratio']:.3f}x baseline P95 {ms(f['baseline'])}; "
            f"maximum_p95_ratio {f['threshold']:g}")


def tail_check(b: ArmSummary, c: ArmSummary, maximum_p95_ratio: float) -> Check:
    """``p95_ok`` as the specification has it: candidate P95 over baseline P95 at most the threshold."""
    ratio = c.p95_ms / b.p95_ms
    figures = {"candidate": c.p95_ms, "baseline": b.p95_ms, "ratio": ratio, "threshold": maximum_p95_ratio}
    return Check.build("p95_ok", ratio <= maximum_p95_ratio, figures, tail_text)


def exceedance_tail_text(f: Mapping) -> str:
    counted = (f"{f['above']} of {f['count']} candidate attempts above maximum_p95_ratio x baseline P95, "
               if f.get("count") is not None else "")
    return f"{tail_text(f)}; tail test: {counted}one-sided exceedance {p_value_text(f['p_value'], f['alpha'])}"


def exceedance_tail_check(b: ArmSummary, c: ArmSummary, maximum_p95_ratio: float, alpha: float,
                          rel_tol: float = REL_TOL) -> Check:
    """``p95_ok`` judged with a test: it fails only when the tail excess is more than chance.

    Fails when the candidate's P95 exceeds ``maximum_p95_ratio`` times the baseline's (the
    specification's comparison) *and* ``j``, the number of the candidate's successful attempts
    above that bar, is improbably large for two arms of one distribution: ``P(J >= j) <
    alpha`` under the exact, distribution-free law of the number of exceedances of a baseline
    order statistic (:func:`exceedance_p_value`; conservative here, as the bar is
    ``maximum_p95_ratio`` times that order statistic). Comparisons with ``rel_tol``.
    """
    bar = maximum_p95_ratio * b.p95_ms
    count = sum(above(value, bar, rel_tol) for value in c.latencies)
    rank = max(1, math.ceil(len(b.latencies) * 0.95))  # the nearest rank of the baseline's P95
    p_value = exceedance_p_value(len(b.latencies), rank, len(c.latencies), count)
    ratio = c.p95_ms / b.p95_ms
    passed = not above(ratio, maximum_p95_ratio, rel_tol) or not below(p_value, alpha, rel_tol)
    figures = {"candidate": c.p95_ms, "baseline": b.p95_ms, "ratio": ratio, "threshold": maximum_p95_ratio,
               "p_value": p_value, "alpha": alpha, "above": count, "count": len(c.latencies)}
    return Check.build("p95_ok", passed, figures, exceedance_tail_text)


def verdict_of(checks: list[Check]) -> tuple[str, str]:
    """Reject on any failed check, rerun on an undecided one (``None``), else accept."""
    if any(check.passed is False for check in checks):
        return "reject", "declared_thresholds_checked"
    if any(check.passed is None for check in checks):
        return "rerun", "inconclusive"
    return "accept", "declared_thresholds_checked"


def decided(b: ArmSummary, c: ArmSummary, checks: list[Check], **fields) -> Decision:
    """The decision the checks give (:func:`verdict_of`), with the rest of its fields."""
    verdict, reason = verdict_of(checks)
    return Decision(verdict, reason, b, c, tuple(checks), **fields)


def contention_flags(b: ArmSummary, c: ArmSummary) -> dict[str, list[int]]:
    """Indices (into each arm's run list) of the successful attempts :func:`flag_contention` flags."""
    return {arm: [summary.ok_indices[i] for i in flag_contention(summary.latencies)] if summary.latencies else []
            for arm, summary in (("baseline", b), ("candidate", c))}


def _contention_text(f: Mapping) -> str:
    return (f"{f['baseline']} of {f['baseline_valid']} baseline and {f['candidate']} of {f['candidate_valid']} "
            "candidate successful attempts have no uncontended latency (more than half their steps waited for a "
            "CPU, or contention was not measured) and are judged on their raw latency; more than half of an arm "
            "is too many to judge it uncontended")


def contention_check(b: ArmSummary, c: ArmSummary) -> Check:
    """``contention_ok`` for a policy's ``latency="uncontended"``: ``None`` (undecided: rerun) when
    more than half of either arm's successful attempts lack an uncontended latency (:attr:`ArmSummary
    .contended_runs`), else ``True``. No attempt is dropped: the contended ones keep their raw latency."""
    figures = {"baseline": b.contended_runs or 0, "candidate": c.contended_runs or 0,
               "baseline_valid": b.valid_runs, "candidate_valid": c.valid_runs}
    too_many = any(2 * (s.contended_runs or 0) > s.valid_runs for s in (b, c))
    return Check.build("contention_ok", None if too_many else True, figures, _contention_text)
