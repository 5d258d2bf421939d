"""The parts every rule shares: the specification's preconditions and its failure-rate and quality checks.

Written once here, used by the seed rule, the robust rule and every objective. Each check
stores the figures it compared; its message reads those figures and nothing else.
"""

from __future__ import annotations

from typing import Mapping

from ._records import ArmSummary, Check, Decision, ms, pct
from ._stats import flag_contention

__all__ = [
    "contention_flags",
    "decided",
    "failure_rate_check",
    "failure_rate_text",
    "precondition",
    "quality_check",
    "quality_text",
    "tail_check",
    "tail_text",
    "verdict_of",
]


def precondition(b: ArmSummary, c: ArmSummary, min_valid_runs: int, maximum_failure_rate: float) -> str | None:
    """The specification's reasons to answer ``rerun`` before any check, in its order; ``None`` to go on.

    Both arms need ``min_valid_runs`` successful attempts (``insufficient_valid_runs``), and the
    baseline's own failure rate may not exceed ``maximum_failure_rate`` (``unreliable_baseline``).
    """
    if min(b.valid_runs, c.valid_runs) < min_valid_runs:
        return "insufficient_valid_runs"
    if b.failure_rate > maximum_failure_rate:
        return "unreliable_baseline"
    return None


def failure_rate_text(f: Mapping) -> str:
    return (f"candidate failure rate {pct(f['candidate'])} ({f['failed']} of {f['attempted']}) against "
            f"maximum_failure_rate {pct(f['threshold'])} (baseline {pct(f['baseline'])})")


def failure_rate_check(b: ArmSummary, c: ArmSummary, maximum_failure_rate: float) -> Check:
    """``failure_rate_ok``: the candidate's failure rate, failures in the denominator, at most the threshold."""
    figures = {"candidate": c.failure_rate, "baseline": b.failure_rate, "threshold": maximum_failure_rate,
               "failed": c.failed_runs, "attempted": c.attempted_runs}
    return Check.build("failure_rate_ok", c.failure_rate <= maximum_failure_rate, figures, failure_rate_text)


def quality_text(f: Mapping) -> str:
    tolerance = "" if f["tolerance"] is None else f" less quality_tolerance {f['tolerance']:g}"
    return f"candidate quality {f['candidate']:.6g} against baseline {f['baseline']:.6g}{tolerance}"


def quality_check(b: ArmSummary, c: ArmSummary, quality_tolerance: float) -> Check:
    """``quality_ok``: the candidate's mean quality at least the baseline's less the tolerance."""
    figures = {"candidate": c.quality, "baseline": b.quality, "tolerance": quality_tolerance}
    return Check.build("quality_ok", c.quality >= b.quality - quality_tolerance, figures, quality_text)


def tail_text(f: Mapping) -> str:
    return (f"candidate P95 {ms(f['candidate'])} is {f['ratio']:.3f}x baseline P95 {ms(f['baseline'])}; "
            f"maximum_p95_ratio {f['threshold']:g}")


def tail_check(b: ArmSummary, c: ArmSummary, maximum_p95_ratio: float) -> Check:
    """``p95_ok`` as the specification has it: candidate P95 over baseline P95 at most the threshold."""
    ratio = c.p95_ms / b.p95_ms
    figures = {"candidate": c.p95_ms, "baseline": b.p95_ms, "ratio": ratio, "threshold": maximum_p95_ratio}
    return Check.build("p95_ok", ratio <= maximum_p95_ratio, figures, tail_text)


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
