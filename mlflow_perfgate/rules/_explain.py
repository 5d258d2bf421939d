"""Plain-language reasons for a decision: one message per check, naming both values and the threshold."""

from __future__ import annotations

__all__ = ["explain_checks"]


def _pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.4g} ms"


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
    messages = {}
    verdict = {True: "ok", False: "FAILED"}
    messages["failure_rate_ok"] = (
        f"{verdict[result['failure_rate_ok']]}: candidate failure rate {_pct(c['failure_rate'])} "
        f"({c['failed_runs']} of {c['attempted_runs']}) against maximum_failure_rate "
        f"{_pct(result['maximum_failure_rate'])} (baseline {_pct(b['failure_rate'])})"
    )
    tolerance = "" if quality_tolerance is None else f" less quality_tolerance {quality_tolerance:g}"
    messages["quality_ok"] = (
        f"{verdict[result['quality_ok']]}: candidate quality {c['quality']:.6g} against baseline "
        f"{b['quality']:.6g}{tolerance}"
    )
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
