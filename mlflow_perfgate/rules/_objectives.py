"""The objectives: latency (the specification's), memory and throughput, each one registry entry.

The specification's plans name the signal an experiment tests (memory or time), but its
regression rule reads latency alone; a memory-pressure change such as activation checkpointing
trades time for memory and would always be rejected on latency. An objective's checks keep the
specification's preconditions and its failure-rate and quality checks (the seed rule runs
those) and judge the objective's own figure. Latency stays the default.
"""

from __future__ import annotations

from ._checks import REL_TOL, above, below
from ._errors import typed_inputs
from ._policy import DEFAULT_THRESHOLDS, MODES, Policy, Setting
from ._records import ArmSummary, Check, pct
from ._registry import OBJECTIVES, Figure, Objective
from ._regression import evaluate_regression, latency_checks, seed_rule

__all__ = [
    "LATENCY",
    "MEMORY",
    "THROUGHPUT",
    "evaluate_objective",
    "objective_for_signal",
]


def objective_for_signal(primary_signal: str) -> str:
    """The objective a diagnosis's primary signal calls for: ``memory`` -> memory, else latency."""
    return "memory" if primary_signal == "memory" else "latency"


_SEED_FIGURES = (Figure("baseline_noise", "noise proxy"), Figure("required_improvement", "required improvement"),
                 Figure("observed_improvement", "observed improvement"))

LATENCY = Objective(
    "latency", metric=None, direction="lower", unit="ms", checks=latency_checks,
    figures=_SEED_FIGURES, modes=MODES,
    headlines={
        "improvement": "ACCEPT: the candidate is faster, no worse in quality, and no less reliable",
        "non_regression": "ACCEPT: the candidate is no slower than the margin allows, no worse in quality, "
                          "and no less reliable",
    },
    help="median and P95 step latency, lower is better",
)


def memory_checks(b: ArmSummary, c: ArmSummary, policy: Policy) -> tuple[list[Check], dict]:
    """Memory (lower peak memory is better) within a latency budget.

    ``memory_reduction_ok``: the candidate's median ``peak_mem_mib`` falls by at least
    ``min_memory_reduction``; ``latency_cost_ok``: its median latency rises by at most
    ``maximum_latency_cost``; ``p95_ok``: its latency P95 is at most ``maximum_p95_ratio * (1 +
    maximum_latency_cost)`` times the baseline's (the tail bounded by the same budget). Each
    comparison allows the relative tolerance ``REL_TOL`` (1e-9; ``1.05 * 1.3`` is
    ``1.3650000000000002``), relative to the numbers compared and, for a reduction or a cost,
    to 1 (they are differences of ratios near 1).
    """
    b_mem, c_mem = b.figures["median_peak_mem_mib"], c.figures["median_peak_mem_mib"]
    reduction = (b_mem - c_mem) / b_mem
    cost = (c.median_ms - b.median_ms) / b.median_ms
    limit = policy.maximum_p95_ratio * (1 + policy.maximum_latency_cost)
    ratio = c.p95_ms / b.p95_ms
    checks = [
        Check.build("p95_ok", not above(ratio, limit, REL_TOL),
                    {"candidate": c.p95_ms, "baseline": b.p95_ms, "ratio": ratio, "limit": limit},
                    lambda f: (f"candidate latency P95 {f['candidate']:.4g} ms is {f['ratio']:.3f}x baseline "
                               f"{f['baseline']:.4g} ms; limit maximum_p95_ratio x (1 + maximum_latency_cost) "
                               f"= {f['limit']:.3f}")),
        Check.build("memory_reduction_ok", not below(reduction, policy.min_memory_reduction, REL_TOL, 1.0),
                    {"candidate": c_mem, "baseline": b_mem, "reduction": reduction,
                     "threshold": policy.min_memory_reduction},
                    lambda f: (f"candidate median peak memory {f['candidate']:.4g} MiB against baseline "
                               f"{f['baseline']:.4g} MiB is a reduction of {pct(f['reduction'])}; required "
                               f"min_memory_reduction {pct(f['threshold'])}")),
        Check.build("latency_cost_ok", not above(cost, policy.maximum_latency_cost, REL_TOL, 1.0),
                    {"candidate": c.median_ms, "baseline": b.median_ms, "cost": cost,
                     "threshold": policy.maximum_latency_cost},
                    lambda f: (f"candidate median latency {f['candidate']:.4g} ms against baseline "
                               f"{f['baseline']:.4g} ms is a cost of {pct(f['cost'])}; allowed "
                               f"maximum_latency_cost {pct(f['threshold'])}")),
    ]
    return checks, {"memory_reduction": reduction, "latency_cost": cost,
                    "min_memory_reduction": policy.min_memory_reduction,
                    "maximum_latency_cost": policy.maximum_latency_cost}


MEMORY = Objective(
    "memory", metric="peak_mem_mib", direction="lower", unit="MiB", checks=memory_checks,
    thresholds=(
        Setting("min_memory_reduction", 0.10, "Memory objective: least reduction of median peak memory",
                low=0, high=1, high_open=True),
        Setting("maximum_latency_cost", 0.30, "Memory objective: most rise of median latency", low=0),
    ),
    arm_figures=(Figure("median_peak_mem_mib", "median peak memory", " MiB"),),
    figures=(Figure("memory_reduction", "memory reduction"), Figure("latency_cost", "latency cost")),
    headlines={"improvement": "ACCEPT: the candidate needs less memory within its latency budget, no worse in "
                              "quality, and no less reliable"},
    help="peak memory, lower is better, within a latency budget", label="peak memory",
)


def throughput_checks(b: ArmSummary, c: ArmSummary, policy: Policy) -> tuple[list[Check], dict]:
    """Throughput (higher ``throughput_tok_s`` is better), mirroring the latency rule.

    The noise is ``(median - P5) / median`` of the baseline's throughput (its slow tail), the
    required improvement ``max(min_improvement, noise)``, the observed one ``(candidate median -
    baseline median) / baseline median`` (``improvement_ok``), and the tail check ``candidate P5
    / baseline P5 >= 1 / maximum_p95_ratio`` (``p95_ok``). Each comparison allows the relative
    tolerance ``REL_TOL`` (1e-9), relative to the numbers compared and, for the improvement, to 1.
    """
    b_tp, c_tp = b.figures["median_throughput_tok_s"], c.figures["median_throughput_tok_s"]
    b_p5, c_p5 = b.figures["p5_throughput_tok_s"], c.figures["p5_throughput_tok_s"]
    noise = (b_tp - b_p5) / b_tp
    required = max(policy.min_improvement, noise)
    observed = (c_tp - b_tp) / b_tp
    ratio = c_p5 / b_p5
    checks = [
        Check.build("p95_ok", not below(ratio, 1 / policy.maximum_p95_ratio, REL_TOL),
                    {"candidate": c_p5, "baseline": b_p5, "ratio": ratio, "limit": 1 / policy.maximum_p95_ratio},
                    lambda f: (f"candidate P5 throughput {f['candidate']:.4g} tok/s is {f['ratio']:.3f}x "
                               f"baseline {f['baseline']:.4g} tok/s; at least 1 / maximum_p95_ratio = "
                               f"{f['limit']:.3f}")),
        Check.build("improvement_ok", not below(observed, required, REL_TOL, 1.0),
                    {"candidate": c_tp, "baseline": b_tp, "observed": observed, "required": required,
                     "noise": noise},
                    lambda f: (f"candidate median throughput {f['candidate']:.4g} tok/s against baseline "
                               f"{f['baseline']:.4g} tok/s is an improvement of {pct(f['observed'])}; required "
                               f"{pct(f['required'])} (the larger of min_improvement and baseline noise "
                               f"{pct(f['noise'])})")),
    ]
    return checks, {"baseline_noise": noise, "required_improvement": required, "observed_improvement": observed}


THROUGHPUT = Objective(
    "throughput", metric="throughput_tok_s", direction="higher", unit="tok/s", checks=throughput_checks,
    arm_figures=(Figure("median_throughput_tok_s", "median throughput", " tok/s"),
                 Figure("p5_throughput_tok_s", "P5 throughput", " tok/s")),
    figures=_SEED_FIGURES,
    headlines={"improvement": "ACCEPT: the candidate has a higher throughput, no worse in quality, and no less "
                              "reliable"},
    help="tokens per second, higher is better", label="throughput",
)


@typed_inputs
def evaluate_objective(baseline_runs: list, candidate_runs: list, objective: str = "latency",
                       **thresholds) -> dict:
    """Judge a candidate on an objective with the specification's rule (the seed method).

    - ``latency``: exactly :func:`evaluate_regression` (plus ``objective``).
    - ``memory``: see :func:`memory_checks`; ``throughput``: see :func:`throughput_checks`.

    Both keep the specification's preconditions (``insufficient_valid_runs``,
    ``unreliable_baseline``) and its ``failure_rate_ok`` and ``quality_ok`` checks; each check
    keeps its own flag and a message naming the candidate value, the baseline value and the
    threshold (``messages``).

    Args:
        baseline_runs, candidate_runs: attempt records; a successful one carries the objective's
            metric too.
        objective: a registered objective.
        **thresholds: the specification's thresholds and the objective's own
            (``min_memory_reduction`` in [0, 1), default 0.10; ``maximum_latency_cost`` >= 0,
            default 0.30).

    Raises:
        ValueError: an unknown objective, a threshold out of range, or an invalid record.
        KeyError: a successful attempt misses the objective's metric.
    """
    policy = Policy(objective=objective, **thresholds)
    if objective == "latency":
        spec = {key: value for key, value in thresholds.items() if key in DEFAULT_THRESHOLDS}
        return {**evaluate_regression(baseline_runs, candidate_runs, **spec), "objective": "latency"}
    entry = OBJECTIVES[objective]
    b = ArmSummary.from_runs(baseline_runs, entry.metrics)
    c = ArmSummary.from_runs(candidate_runs, entry.metrics)
    decision = seed_rule(b, c, policy, entry)
    return decision.to_dict(labels=("objective",), advice=False, messages=bool(decision.checks))
