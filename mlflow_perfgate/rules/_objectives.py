"""Objectives beyond latency: memory experiments judged on memory, throughput on throughput.

The specification's plans name the signal an experiment tests (memory or time), but its
regression rule reads latency alone; a memory-pressure change such as activation
checkpointing trades time for memory and would always be rejected on latency. These rules
keep the specification's preconditions and its failure-rate and quality checks, and judge the
objective's own figure. Latency stays the default (``evaluate_regression``, exact).
"""

from __future__ import annotations

import statistics

from ._errors import check_finite, typed_inputs
from ._explain import failure_rate_message, pct, quality_message
from ._regression import check_thresholds, evaluate_regression, percentile, summarize_repeated_runs

__all__ = ["OBJECTIVES", "OBJECTIVE_METRICS", "DEFAULT_MIN_MEMORY_REDUCTION", "DEFAULT_MAXIMUM_LATENCY_COST",
           "evaluate_objective", "objective_for_signal"]

OBJECTIVES = ("latency", "memory", "throughput")
#: The attempt metric each objective needs beyond latency and quality.
OBJECTIVE_METRICS = {"latency": None, "memory": "peak_mem_mib", "throughput": "throughput_tok_s"}
DEFAULT_MIN_MEMORY_REDUCTION = 0.10
DEFAULT_MAXIMUM_LATENCY_COST = 0.30


def objective_for_signal(primary_signal: str) -> str:
    """The objective a diagnosis's primary signal calls for: ``memory`` -> memory, else latency."""
    return "memory" if primary_signal == "memory" else "latency"


def _values(runs: list, key: str) -> list:
    successful = [run for run in runs if run["ok"]]
    if any(key not in run for run in successful):
        raise KeyError(f"a successful run must contain {key!r} for this objective")
    values = [run[key] for run in successful]
    if not all(check_finite(value, key) and value > 0 for value in values):
        raise ValueError(f"{key} of a successful run must be a finite number > 0")
    return values


def _figure_summary(values: list, key: str) -> dict:
    if not values:
        return {f"median_{key}": None, f"p5_{key}": None, f"p95_{key}": None}
    return {f"median_{key}": statistics.median(values), f"p5_{key}": percentile(values, 0.05),
            f"p95_{key}": percentile(values, 0.95)}


_pct = pct


@typed_inputs
def evaluate_objective(
    baseline_runs: list,
    candidate_runs: list,
    objective: str = "latency",
    min_valid_runs: int = 5,
    min_improvement: float = 0.05,
    quality_tolerance: float = 0.01,
    maximum_failure_rate: float = 0.0,
    maximum_p95_ratio: float = 1.05,
    min_memory_reduction: float = DEFAULT_MIN_MEMORY_REDUCTION,
    maximum_latency_cost: float = DEFAULT_MAXIMUM_LATENCY_COST,
) -> dict:
    """Judge a candidate on an objective: ``latency`` (the specification), ``memory`` or ``throughput``.

    - ``latency``: exactly :func:`evaluate_regression`.
    - ``memory`` (lower peak memory is better): accept needs the candidate's median
      ``peak_mem_mib`` to fall by at least ``min_memory_reduction`` (``memory_reduction_ok``)
      while its median latency rises by at most ``maximum_latency_cost``
      (``latency_cost_ok``). The latency tail is bounded by the same budget: the candidate's
      latency P95 may be at most ``maximum_p95_ratio * (1 + maximum_latency_cost)`` times the
      baseline's (``p95_ok``).
    - ``throughput`` (higher ``throughput_tok_s`` is better), mirroring the latency rule: the
      noise is ``(median - P5) / median`` of the baseline's throughput (its slow tail), the
      required improvement ``max(min_improvement, noise)``, the observed one
      ``(candidate median - baseline median) / baseline median`` (``improvement_ok``), and the
      tail check ``candidate P5 / baseline P5 >= 1 / maximum_p95_ratio`` (``p95_ok``).

    Both keep the specification's preconditions (``insufficient_valid_runs``,
    ``unreliable_baseline``) and its ``failure_rate_ok`` and ``quality_ok`` checks; each check
    keeps its own flag and a message naming the candidate value, the baseline value and the
    threshold (``messages``).

    Raises:
        ValueError: an unknown objective, a threshold out of range (``min_memory_reduction``
            in [0, 1), ``maximum_latency_cost`` >= 0), or an invalid record.
        KeyError: a successful attempt misses the objective's metric.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    thresholds = dict(min_valid_runs=min_valid_runs, min_improvement=min_improvement,
                      quality_tolerance=quality_tolerance, maximum_failure_rate=maximum_failure_rate,
                      maximum_p95_ratio=maximum_p95_ratio)
    if objective == "latency":
        return {**evaluate_regression(baseline_runs, candidate_runs, **thresholds), "objective": "latency"}
    check_thresholds(**thresholds)
    for field, value in (("min_memory_reduction", min_memory_reduction), ("maximum_latency_cost", maximum_latency_cost)):
        if not check_finite(value, field):
            raise ValueError(f"{field} must be finite, got {value!r}")
    if not 0 <= min_memory_reduction < 1 or maximum_latency_cost < 0:
        raise ValueError(
            "min_memory_reduction must be in the range [0, 1) and maximum_latency_cost must be >= 0; got "
            f"{min_memory_reduction!r} and {maximum_latency_cost!r}"
        )
    b = summarize_repeated_runs(baseline_runs)
    c = summarize_repeated_runs(candidate_runs)
    key = "peak_mem_mib" if objective == "memory" else "throughput_tok_s"
    b.update(_figure_summary(_values(baseline_runs, key), key))
    c.update(_figure_summary(_values(candidate_runs, key), key))
    result = {"baseline": b, "candidate": c, "objective": objective}
    if min(b["valid_runs"], c["valid_runs"]) < min_valid_runs:
        return {**result, "decision": "rerun", "reason": "insufficient_valid_runs"}
    if b["failure_rate"] > maximum_failure_rate:
        return {**result, "decision": "rerun", "reason": "unreliable_baseline"}
    checks = {
        "failure_rate_ok": c["failure_rate"] <= maximum_failure_rate,
        "quality_ok": c["quality"] >= b["quality"] - quality_tolerance,
    }
    messages = {
        "failure_rate_ok": failure_rate_message(checks["failure_rate_ok"], b, c, maximum_failure_rate),
        "quality_ok": quality_message(checks["quality_ok"], b, c, quality_tolerance),
    }
    figures: dict = {}
    if objective == "memory":
        b_mem, c_mem = b["median_peak_mem_mib"], c["median_peak_mem_mib"]
        memory_reduction = (b_mem - c_mem) / b_mem
        latency_cost = (c["median_ms"] - b["median_ms"]) / b["median_ms"]
        p95_limit = maximum_p95_ratio * (1 + maximum_latency_cost)
        p95_ratio = c["p95_ms"] / b["p95_ms"]
        checks["p95_ok"] = p95_ratio <= p95_limit
        checks["memory_reduction_ok"] = memory_reduction >= min_memory_reduction
        checks["latency_cost_ok"] = latency_cost <= maximum_latency_cost
        messages["p95_ok"] = (f"candidate latency P95 {c['p95_ms']:.4g} ms is {p95_ratio:.3f}x baseline "
                              f"{b['p95_ms']:.4g} ms; limit maximum_p95_ratio x (1 + maximum_latency_cost) = {p95_limit:.3f}")
        messages["memory_reduction_ok"] = (f"candidate median peak memory {c_mem:.4g} MiB against baseline {b_mem:.4g} MiB "
                                           f"is a reduction of {_pct(memory_reduction)}; required min_memory_reduction "
                                           f"{_pct(min_memory_reduction)}")
        messages["latency_cost_ok"] = (f"candidate median latency {c['median_ms']:.4g} ms against baseline "
                                       f"{b['median_ms']:.4g} ms is a cost of {_pct(latency_cost)}; allowed "
                                       f"maximum_latency_cost {_pct(maximum_latency_cost)}")
        figures = {"memory_reduction": memory_reduction, "latency_cost": latency_cost,
                   "min_memory_reduction": min_memory_reduction, "maximum_latency_cost": maximum_latency_cost}
    else:
        b_tp, c_tp = b["median_throughput_tok_s"], c["median_throughput_tok_s"]
        noise = (b_tp - b["p5_throughput_tok_s"]) / b_tp
        required = max(min_improvement, noise)
        observed = (c_tp - b_tp) / b_tp
        tail_ratio = c["p5_throughput_tok_s"] / b["p5_throughput_tok_s"]
        checks["p95_ok"] = tail_ratio >= 1 / maximum_p95_ratio
        checks["improvement_ok"] = observed >= required
        messages["p95_ok"] = (f"candidate P5 throughput {c['p5_throughput_tok_s']:.4g} tok/s is {tail_ratio:.3f}x "
                              f"baseline {b['p5_throughput_tok_s']:.4g} tok/s; at least 1 / maximum_p95_ratio = "
                              f"{1 / maximum_p95_ratio:.3f}")
        messages["improvement_ok"] = (f"candidate median throughput {c_tp:.4g} tok/s against baseline {b_tp:.4g} tok/s "
                                      f"is an improvement of {_pct(observed)}; required {_pct(required)} (the larger "
                                      f"of min_improvement and baseline noise {_pct(noise)})")
        figures = {"baseline_noise": noise, "required_improvement": required, "observed_improvement": observed}
    failed_checks = [name for name, passed in checks.items() if not passed]
    verdict = {True: "ok", False: "FAILED"}
    return {
        **result, **checks, **figures,
        "failed_checks": failed_checks,
        "decision": "reject" if failed_checks else "accept",
        "reason": "declared_thresholds_checked",
        "maximum_failure_rate": maximum_failure_rate, "maximum_p95_ratio": maximum_p95_ratio,
        "messages": {name: text if name in ("failure_rate_ok", "quality_ok") else f"{verdict[checks[name]]}: {text}"
                     for name, text in messages.items()},
    }
