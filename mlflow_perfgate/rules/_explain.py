"""Plain-language reasons for a decision: one message per check, naming both values and the threshold."""

from __future__ import annotations

__all__ = ["explain_checks", "failure_rate_message", "quality_message", "pct", "ms"]

VERDICT = {True: "ok", False: "FAILED", None: "INCONCLUSIVE"}


def pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def ms(value) -> str:
    return "n/a" if value is None else f"{value:.4g} ms"


_pct, _ms = pct, ms


def failure_rate_message(passed, b: dict, c: dict, maximum_failure_rate: float) -> str:
    """The failure-rate check's message: both arms' rates and the threshold."""
    return (f"{VERDICT[passed]}: candidate failure rate {pct(c['failure_rate'])} ({c['failed_runs']} of "
            f"{c['attempted_runs']}) against maximum_failure_rate {pct(maximum_failure_rate)} "
            f"(baseline {pct(b['failure_rate'])})")


def quality_message(passed, b: dict, c: dict, quality_tolerance: float | None) -> str:
    """The quality check's message: both arms' quality and the tolerance."""
    tolerance = "" if quality_tolerance is None else f" less quality_tolerance {quality_tolerance:g}"
    return (f"{VERDICT[passed]}: candidate quality {c['quality']:.6g} against baseline "
            f"{b['quality']:.6g}{tolerance}")


def explain_checks(result: dict, quality_tolerance: float | None = None) -> dict[str, str]:
    """A message for every check of an ``evaluate_regression`` result, passed or failed.

    Args:
        result: the dict ``evaluate_regression`` returned (after its checks ran).
        quality_tolerance: the tolerance used, for the quality message.

    Returns:
        ``{check_name: message}`` in the order of the checks; empty when the checks did not run
        (a ``rerun`` before them).
    """
    if "failure_rate_ok" not in result:
        return {}
    b, c = result["baseline"], result["candidate"]
    verdict = VERDICT
    messages = {
        "failure_rate_ok": failure_rate_message(result["failure_rate_ok"], b, c, result["maximum_failure_rate"]),
        "quality_ok": quality_message(result["quality_ok"], b, c, quality_tolerance),
    }
    messages["p95_ok"] = (
        f"{verdict[result['p95_ok']]}: candidate P95 {_ms(c['p95_ms'])} is "
        f"{c['p95_ms'] / b['p95_ms']:.3f}x baseline P95 {_ms(b['p95_ms'])}; maximum_p95_ratio "
        f"{result['maximum_p95_ratio']:g}"
    )
    if "no_regression_ok" in result:
        messages["no_regression_ok"] = (
            f"{verdict[result['no_regression_ok']]}: median {_ms(c['median_ms'])} against baseline "
            f"{_ms(b['median_ms'])} is an improvement of {_pct(result['observed_improvement'])}; the least "
            f"allowed is {_pct(result['required_improvement'])} (minus the larger of margin and baseline noise "
            f"{_pct(result['baseline_noise'])})"
        )
        return messages
    messages["improvement_ok"] = (
        f"{verdict[result['improvement_ok']]}: median {_ms(c['median_ms'])} against baseline "
        f"{_ms(b['median_ms'])} is an improvement of {_pct(result['observed_improvement'])}; "
        f"required {_pct(result['required_improvement'])} (the larger of min_improvement and "
        f"baseline noise {_pct(result['baseline_noise'])})"
    )
    return messages
