"""One entry point for a decision: objective x method x mode, both methods' figures kept."""

from __future__ import annotations

from ._errors import typed_inputs
from ._explain import explain_checks
from ._objectives import OBJECTIVES, evaluate_objective
from ._regression import evaluate_regression
from ._robust import MODES, evaluate_robust, evaluate_seed_non_regression, explain_robust_checks, flag_contention
from ._sequential import sequential_thresholds

__all__ = ["METHODS", "decide"]

METHODS = ("seed", "robust")
#: The robust method's figures that every latency decision reports, whichever method decides.
ROBUST_FIGURES = ("p_value", "ratio_estimate", "ratio_ci_low", "ratio_ci_high", "p95_p_value", "alpha", "confidence")
SEED_FIGURES = ("baseline_noise", "required_improvement", "observed_improvement")


@typed_inputs
def decide(baseline_runs: list, candidate_runs: list, *, objective: str = "latency", method: str = "seed",
           mode: str = "improvement", margin: float = 0.05, alpha: float | None = None,
           confidence: float | None = None, look: int | None = None, max_looks: int | None = None,
           min_memory_reduction: float | None = None, maximum_latency_cost: float | None = None,
           **thresholds) -> dict:
    """Judge one comparison.

    - ``objective="latency"``: ``method="seed"`` is the specification's rule, exact
      (:func:`evaluate_regression`; in ``mode="non_regression"``
      :func:`evaluate_seed_non_regression`); ``method="robust"`` is :func:`evaluate_robust`.
      Both are computed and the other's figures are kept under ``seed`` / ``robust``
      (decision, p-value, interval, noise proxy), whichever decides.
    - ``objective="memory"`` or ``"throughput"``: :func:`evaluate_objective` (improvement
      mode, the specification-style rule on the objective's figure).

    With ``look`` and ``max_looks`` (repeated looks of ``compare --until-decisive``), the robust
    method's ``alpha`` and interval confidence are spent across the looks
    (:func:`sequential_thresholds`, O'Brien-Fleming-type spending) so the overall error rates
    stay at their nominal levels.

    Returns:
        The deciding rule's result plus ``objective``, ``method``, ``mode``, ``messages``,
        ``seed``, ``robust`` (for latency), ``contention`` (indices of flagged successful
        attempts per arm) and ``recommended_attempts``.

    Raises:
        ValueError: an unknown objective, method or mode, or a combination the rules do not
            define (memory/throughput with the robust method or the non-regression mode).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if objective != "latency":
        if method != "seed" or mode != "improvement":
            raise ValueError(f"the {objective} objective is judged by the seed method in improvement mode; "
                             f"got method={method!r}, mode={mode!r}")
        extra = {k: v for k, v in (("min_memory_reduction", min_memory_reduction),
                                   ("maximum_latency_cost", maximum_latency_cost)) if v is not None}
        result = evaluate_objective(baseline_runs, candidate_runs, objective, **thresholds, **extra)
        result.setdefault("messages", {})
        return {**result, "method": "seed", "mode": mode, "contention": _contention(baseline_runs, candidate_runs),
                "recommended_attempts": None}

    robust_kwargs = {}
    if alpha is not None:
        robust_kwargs["alpha"] = alpha
    if confidence is not None:
        robust_kwargs["confidence"] = confidence
    if look is not None and max_looks is not None and max_looks > 1:
        robust_kwargs = sequential_thresholds(look, max_looks, **robust_kwargs)
    robust = evaluate_robust(baseline_runs, candidate_runs, mode=mode, margin=margin, **robust_kwargs, **thresholds)
    if mode == "improvement":
        seed = evaluate_regression(baseline_runs, candidate_runs, **thresholds)
    else:
        seed = evaluate_seed_non_regression(baseline_runs, candidate_runs, margin=margin, **thresholds)
    quality_tolerance = thresholds.get("quality_tolerance", 0.01)
    if method == "seed":
        result = dict(seed)
        result["messages"] = explain_checks(seed, quality_tolerance)
    else:
        result = dict(robust)
        result["messages"] = explain_robust_checks(robust, quality_tolerance)
    result.update(
        objective="latency", method=method, mode=mode, margin=margin,
        seed={"decision": seed["decision"], "reason": seed["reason"],
              **{k: seed[k] for k in SEED_FIGURES if k in seed}},
        robust={"decision": robust["decision"], "reason": robust["reason"],
                "recommended_attempts": robust.get("recommended_attempts"),
                **{k: robust[k] for k in ROBUST_FIGURES if k in robust}},
        recommended_attempts=robust.get("recommended_attempts"),
        contention=robust.get("contention") or _contention(baseline_runs, candidate_runs),
    )
    result.setdefault("failed_checks", [])
    return result


def _contention(baseline_runs: list, candidate_runs: list) -> dict:
    flags = {}
    for arm, runs in (("baseline", baseline_runs), ("candidate", candidate_runs)):
        ok = [index for index, run in enumerate(runs) if run["ok"]]
        latencies = [runs[index]["latency_ms"] for index in ok]
        flags[arm] = [ok[i] for i in flag_contention(latencies)] if latencies else []
    return flags
