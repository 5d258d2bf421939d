"""Repeated measurements and the regression decision (section Q4 of the specification)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable

from ._errors import RuleTypeError, typed_inputs, check_finite

__all__ = ["percentile", "summarize_repeated_runs", "evaluate_regression", "DEFAULT_THRESHOLDS"]

#: The specification's defaults for :func:`evaluate_regression`.
DEFAULT_THRESHOLDS = {
    "min_valid_runs": 5,
    "min_improvement": 0.05,
    "quality_tolerance": 0.01,
    "maximum_failure_rate": 0.0,
    "maximum_p95_ratio": 1.05,
}


def _positive_finite(values: Iterable, field: str) -> bool:
    """True when every value is a finite number > 0."""
    return all(check_finite(value, field) and value > 0 for value in values)


@typed_inputs
def percentile(values, fraction: float):
    """Nearest-rank percentile: the smallest sample with at least ``fraction`` of samples at or below it.

    The rank is ``ceil(n * fraction)`` (1-based, at least 1), as in the specification; the
    result is always one of the samples, never an interpolation.

    Args:
        values: latency samples, each finite and > 0.
        fraction: in [0, 1]; 0.95 gives the P95.

    Raises:
        ValueError: ``values`` is empty, ``fraction`` is outside [0, 1], or a sample is not a
            finite number > 0.
    """
    if values is None:
        values = []
    try:
        values = list(values)
    except TypeError:
        raise RuleTypeError(f"values must be a list of numbers, got {type(values).__name__}") from None
    if not values or not check_finite(fraction, "fraction") or not 0 <= fraction <= 1:
        raise ValueError(
            f"values must be non-empty and fraction must be in the range [0, 1]; got "
            f"{len(values)} values and fraction={fraction!r}"
        )
    if not _positive_finite(values, "latency sample"):
        raise ValueError("latency samples must be finite numbers > 0")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


def _ok_flag(run: Any):
    try:
        return run.get("ok")
    except AttributeError:
        raise RuleTypeError(f"each run must be a dict, got {type(run).__name__}") from None


@typed_inputs
def summarize_repeated_runs(runs: list) -> dict:
    """Summarise one arm's attempts; every attempt, failed or not, stays in the denominator.

    Args:
        runs: attempt records ``{"ok": bool, "latency_ms": ..., "quality": ..., "failure": ...}``;
            a successful attempt must carry ``latency_ms`` (finite, > 0) and ``quality`` (finite).

    Returns:
        ``attempted_runs``, ``valid_runs``, ``failed_runs``, ``failure_rate`` (failed over
        attempted; ``None`` with no attempts), ``failure_reasons`` (``"unspecified"`` where none
        was given), ``median_ms`` (``statistics.median``), ``p95_ms`` (nearest rank) and
        ``quality`` (mean); the last three are ``None`` without a successful attempt.

    Raises:
        ValueError: an attempt has no boolean ``ok``, or a latency or quality is out of range.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    if any(type(_ok_flag(run)) is not bool for run in runs):
        raise ValueError("every run must declare a boolean 'ok' (True or False)")
    successful = [run for run in runs if run["ok"]]
    failed = [run for run in runs if not run["ok"]]
    if any("latency_ms" not in run or "quality" not in run for run in successful):
        raise KeyError("a successful run must contain 'latency_ms' and 'quality'")
    latencies = [run["latency_ms"] for run in successful]
    qualities = [run["quality"] for run in successful]
    if not _positive_finite(latencies, "latency_ms"):
        raise ValueError("latency_ms of a successful run must be a finite number > 0")
    if not all(check_finite(value, "quality") for value in qualities):
        raise ValueError("quality must be finite and scored by the same rule on every run")
    return {
        "attempted_runs": len(runs),
        "valid_runs": len(successful),
        "failed_runs": len(failed),
        "failure_rate": len(failed) / len(runs) if runs else None,
        "failure_reasons": [run.get("failure", "unspecified") for run in failed],
        "median_ms": statistics.median(latencies) if successful else None,
        "p95_ms": percentile(latencies, 0.95) if successful else None,
        "quality": statistics.mean(qualities) if successful else None,
    }


def check_thresholds(min_valid_runs, min_improvement, quality_tolerance,
                     maximum_failure_rate, maximum_p95_ratio) -> None:
    """Raise ``ValueError`` for thresholds outside the specification's ranges."""
    if type(min_valid_runs) is not int or min_valid_runs <= 0:
        raise ValueError(f"min_valid_runs must be a positive integer, got {min_valid_runs!r}")
    named = (
        ("min_improvement", min_improvement),
        ("quality_tolerance", quality_tolerance),
        ("maximum_failure_rate", maximum_failure_rate),
        ("maximum_p95_ratio", maximum_p95_ratio),
    )
    for field, value in named:
        if not check_finite(value, field):
            raise ValueError(f"{field} must be finite, got {value!r}")
    if not 0 <= min_improvement < 1 or quality_tolerance < 0:
        raise ValueError(
            "min_improvement must be in the range [0, 1) and quality_tolerance must be >= 0; got "
            f"min_improvement={min_improvement!r}, quality_tolerance={quality_tolerance!r}"
        )
    if not 0 <= maximum_failure_rate <= 1 or maximum_p95_ratio < 1:
        raise ValueError(
            "maximum_failure_rate must be in the range [0, 1] and maximum_p95_ratio must be >= 1; "
            f"got maximum_failure_rate={maximum_failure_rate!r}, maximum_p95_ratio={maximum_p95_ratio!r}"
        )


@typed_inputs
def evaluate_regression(
    baseline_runs: list,
    candidate_runs: list,
    min_valid_runs: int = 5,
    min_improvement: float = 0.05,
    quality_tolerance: float = 0.01,
    maximum_failure_rate: float = 0.0,
    maximum_p95_ratio: float = 1.05,
) -> dict:
    """Decide accept, reject or rerun for a candidate against its baseline (the specification's rule).

    In order: both arms need ``min_valid_runs`` successful attempts (else ``rerun``,
    ``insufficient_valid_runs``); the baseline's failure rate may not exceed
    ``maximum_failure_rate`` (else ``rerun``, ``unreliable_baseline``). Then four checks, each
    with its own flag: the candidate's failure rate, its quality (at least the baseline's less
    ``quality_tolerance``), its P95 (at most ``maximum_p95_ratio`` times the baseline's) and its
    median improvement, which must reach ``max(min_improvement, baseline_noise)`` where
    ``baseline_noise = (P95 - median) / median`` of the baseline: a teaching proxy for noise, not
    a confidence interval. Any failed check rejects.

    Args:
        baseline_runs, candidate_runs: attempt records (see :func:`summarize_repeated_runs`).
        min_valid_runs: a positive int.
        min_improvement: in [0, 1).
        quality_tolerance: >= 0.
        maximum_failure_rate: in [0, 1].
        maximum_p95_ratio: >= 1.

    Returns:
        ``baseline`` and ``candidate`` summaries, ``decision`` and ``reason``; once the checks
        ran also ``failure_rate_ok``, ``quality_ok``, ``p95_ok``, ``improvement_ok``,
        ``failed_checks``, ``baseline_noise``, ``required_improvement``,
        ``observed_improvement``, ``maximum_failure_rate`` and ``maximum_p95_ratio``.

    Raises:
        ValueError: a threshold is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    check_thresholds(min_valid_runs, min_improvement, quality_tolerance,
                     maximum_failure_rate, maximum_p95_ratio)
    b = summarize_repeated_runs(baseline_runs)
    c = summarize_repeated_runs(candidate_runs)
    result = {"baseline": b, "candidate": c}
    if min(b["valid_runs"], c["valid_runs"]) < min_valid_runs:
        return {**result, "decision": "rerun", "reason": "insufficient_valid_runs"}
    if b["failure_rate"] > maximum_failure_rate:
        return {**result, "decision": "rerun", "reason": "unreliable_baseline"}
    baseline_noise = (b["p95_ms"] - b["median_ms"]) / b["median_ms"]
    required_improvement = max(min_improvement, baseline_noise)
    observed_improvement = (b["median_ms"] - c["median_ms"]) / b["median_ms"]
    checks = {
        "failure_rate_ok": c["failure_rate"] <= maximum_failure_rate,
        "quality_ok": c["quality"] >= b["quality"] - quality_tolerance,
        "p95_ok": c["p95_ms"] / b["p95_ms"] <= maximum_p95_ratio,
        "improvement_ok": observed_improvement >= required_improvement,
    }
    failed_checks = [name for name, passed in checks.items() if not passed]
    return {
        **result,
        **checks,
        "failed_checks": failed_checks,
        "decision": "reject" if failed_checks else "accept",
        "reason": "declared_thresholds_checked",
        "baseline_noise": baseline_noise,
        "required_improvement": required_improvement,
        "observed_improvement": observed_improvement,
        "maximum_failure_rate": maximum_failure_rate,
        "maximum_p95_ratio": maximum_p95_ratio,
    }
