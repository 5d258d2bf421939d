"""Messages for a result dict of the first release's shape (``explain_checks``, ``explain_robust_checks``).

A :class:`~mlflow_perfgate.rules._records.Decision` carries its checks' messages already; these
functions serve callers that hold only the dict. They read the figures the dict stores, with
the same texts as the checks' own.
"""

from __future__ import annotations

from ._checks import failure_rate_text, quality_text, tail_text
from ._records import STATUS_WORDS, ms, pct

__all__ = ["common_messages", "explain_checks", "ms", "pct"]


def common_messages(result: dict, quality_tolerance: float | None) -> dict[str, str]:
    """The failure-rate and quality messages of a result whose checks ran."""
    b, c = result["baseline"], result["candidate"]
    failure = {"candidate": c["failure_rate"], "baseline": b["failure_rate"],
               "threshold": result["maximum_failure_rate"], "failed": c["failed_runs"],
               "attempted": c["attempted_runs"]}
    quality = {"candidate": c["quality"], "baseline": b["quality"], "tolerance": quality_tolerance}
    return {
        "failure_rate_ok": f"{STATUS_WORDS[result['failure_rate_ok']]}: {failure_rate_text(failure)}",
        "quality_ok": f"{STATUS_WORDS[result['quality_ok']]}: {quality_text(quality)}",
    }


def explain_checks(result: dict, quality_tolerance: float | None = None) -> dict[str, str]:
    """A message for every check of an ``evaluate_regression`` result, passed or failed.

    Args:
        result: the dict ``evaluate_regression`` (or ``evaluate_seed_non_regression``) returned.
        quality_tolerance: the tolerance used, for the quality message.

    Returns:
        ``{check_name: message}`` in the order of the checks; empty when the checks did not run
        (a ``rerun`` before them).
    """
    if "failure_rate_ok" not in result:
        return {}
    from ._regression import _improvement_text, _no_regression_text, latency_words

    b, c = result["baseline"], result["candidate"]
    messages = common_messages(result, quality_tolerance)
    messages["p95_ok"] = f"{STATUS_WORDS[result['p95_ok']]}: " + tail_text(
        {"candidate": c["p95_ms"], "baseline": b["p95_ms"], "ratio": result["p95_ratio"],
         "threshold": result["maximum_p95_ratio"]})
    name = "no_regression_ok" if "no_regression_ok" in result else "improvement_ok"
    text = _no_regression_text if name == "no_regression_ok" else _improvement_text
    messages[name] = f"{STATUS_WORDS[result[name]]}: " + text(
        {"candidate": c["median_ms"], "baseline": b["median_ms"], "observed": result["observed_improvement"],
         "required": result["required_improvement"], "noise": result["baseline_noise"]},
        latency_words(b.get("latency_key", "latency_ms")))
    return messages
