"""A robust comparison beside the specification's rule: a rank test and an interval for the ratio.

The specification's rule (:func:`evaluate_regression`) asks the median improvement to reach the
baseline's ``(P95 - median) / median``, a teaching proxy for noise. On a shared machine a few
slow attempts set that bar: a true 20% speedup is accepted only a fraction of the time. The
functions here judge the same attempt records with distribution-free statistics instead:

- a one-sided Mann-Whitney U test (is one arm's latency stochastically smaller?);
- the Hodges-Lehmann estimate of the ratio of medians, candidate over baseline, with its
  Mann-Whitney confidence interval, both computed on log latencies;
- a non-regression mode for CI (the candidate may not be slower than a declared margin),
  for this method and for the specification's (:func:`evaluate_seed_non_regression`);
- the number of attempts that would likely settle an inconclusive comparison;
- flags (never removals) on attempts that look slowed by contention.

The specification's failure-rate, quality and P95 checks keep their meaning; only the P95 check
is judged with a test (see :func:`evaluate_robust`), because with 10 attempts the nearest-rank
P95 is the slowest attempt, whatever slowed it.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ._checks import (
    REL_TOL,
    above,
    exceedance_tail_text,
)
from ._errors import RuleTypeError, typed_inputs
from ._policy import MODES, Policy
from ._explain import common_messages
from ._records import STATUS_WORDS, ArmSummary, Decision, interval_text
from ._registry import OBJECTIVES, Figure, Method, Objective
from ._regression import evaluate_seed_non_regression
from ._statistical import (Estimate, improvement_verdict, no_regression_verdict, statistical_decision,
                           statistical_floor, statistical_texts)
from ._stats import (
    flag_contention,
    hodges_lehmann_ratio,
    interval_rank as _interval_rank,
    log_latencies,
    log_shift,
    min_attempts_mann_whitney,
    recommended_attempts,
    u_null_cdf as _u_null_cdf,
)

__all__ = [
    "MODES",
    "ROBUST",
    "advice_floor",
    "evaluate_robust",
    "evaluate_seed_non_regression",
    "explain_robust_checks",
    "flag_contention",
    "hodges_lehmann_ratio",
    "improvement_verdict",
    "no_regression_verdict",
    "recommended_attempts",
    "robust_rule",
]
_ = (_interval_rank, _u_null_cdf)  # kept importable from here, where the first release had them


def _interval_text(f: Mapping) -> str:
    return (f"ratio candidate/baseline {f['ratio']:.3f} ({interval_text(f['low'], f['high'], f['confidence'])}, "
            f"Hodges-Lehmann)")


def _tail_text(f: Mapping) -> str:
    return exceedance_tail_text(f)


_improvement_text, _no_regression_text = statistical_texts(_interval_text, lambda f: "Mann-Whitney")


def advice_floor(attempts: int | None, floor: int) -> int | None:
    """``attempts`` raised to ``floor`` (the fewest with which the test can decide at all), capped at 1000."""
    return None if attempts is None else min(1000, max(attempts, floor))


def robust_rule(b: ArmSummary, c: ArmSummary, policy: Policy, objective: Objective, *, look: int | None = None,
                max_looks: int | None = None, previous_fraction: float | None = None) -> Decision:
    """Decide accept, reject or rerun with a rank test and an interval for the latency ratio.

    Preconditions as in :func:`evaluate_regression`: both arms need ``min_valid_runs``
    successful attempts (else ``rerun``, ``insufficient_valid_runs``) and the baseline's failure
    rate may not exceed ``maximum_failure_rate`` (else ``rerun``, ``unreliable_baseline``),
    with one exception: where a precondition would answer ``rerun`` but the candidate's
    failures already exceed ``maximum_failure_rate`` even if the attempts still needed to reach
    ``min_valid_runs`` all succeed (:func:`hopeless_failures_check`), the answer is ``reject``
    (reason ``unreliable_candidate``, the one check ``failure_rate_ok``): more attempts cannot
    change it. Then these checks, each with its own flag: ``True`` passed, ``False`` failed
    (the decision is ``reject``), ``None`` undecided (the decision is ``rerun`` with reason
    ``inconclusive`` when nothing failed):

    - ``failure_rate_ok`` and ``quality_ok``: the specification's, unchanged.
    - ``p95_ok``: fails when the candidate's P95 exceeds ``maximum_p95_ratio`` times the
      baseline's (the specification's comparison) *and* that is more than chance: ``j``, the
      number of the candidate's successful attempts above that bar, is improbably large for
      two arms of one distribution, ``P(J >= j) < alpha`` under the exact, distribution-free
      law of the number of exceedances of a baseline order statistic (Gumbel and von
      Schelling, 1950; conservative here, as the bar is ``maximum_p95_ratio`` times that order
      statistic). With 10 attempts per arm the P95 is the slowest attempt, and one contended
      attempt would otherwise reject; at ``alpha = 0.02``, 5 of 10 candidate attempts above the
      bar are needed (``P(J >= 5) = 0.016``).
    - ``improvement_ok`` (mode ``"improvement"``): ``True`` when the improvement is both
      significant and large enough, as asv's ``_is_result_better`` asks: the one-sided
      Mann-Whitney p-value (candidate faster) is below ``alpha`` and the Hodges-Lehmann
      estimate of the improvement, ``1 - ratio_estimate``, is at least ``min_improvement``.
      ``False`` when the interval rules such an improvement out (``ratio_ci_low > 1 -
      min_improvement``), ``None`` otherwise.
    - ``no_regression_ok`` (mode ``"non_regression"``): ``False`` when the interval shows a
      slowdown beyond the margin (``ratio_ci_low > 1 + margin``), ``True`` when it rules one
      out (``ratio_ci_high <= 1 + margin``), ``None`` when it straddles ``1 + margin``.

    Every threshold comparison allows a relative tolerance of :data:`REL_TOL` (1e-9), so a
    ratio exactly at its threshold decides the same in any unit (190 / 200 and 95 / 100 ms are
    both exactly 5% faster; their log ratios round apart).

    The ratio is Hodges-Lehmann's on log latencies (:func:`hodges_lehmann_ratio`), every
    successful attempt included; attempts that look contended are flagged
    (:func:`flag_contention`) but never dropped. ``observed_improvement`` and
    ``baseline_noise`` are the specification's figures, for the report.

    With ``look`` and ``max_looks`` (repeated looks of ``compare --until-decisive``), ``alpha``
    and the interval's confidence are spent across the looks (:func:`sequential_thresholds`).

    The policy's levels: ``alpha`` is the one-sided significance level of the improvement and
    tail tests. It is the rate of accepting a candidate that is not faster at all that one signs
    up for: on a noisy machine a significant result nearly always also estimates at least
    ``min_improvement``, so the false-accept rate approaches ``alpha``. 0.02 holds it at 2%.
    ``confidence`` is the ratio interval's; each of its tails is a one-sided error of
    ``(1 - confidence) / 2``. 0.90 makes the non-regression decision Schuirmann's two one-sided
    tests at 5% each (D. J. Schuirmann, J. Pharmacokinet. Biopharm. 15(6), 657-680, 1987): a
    candidate exactly ``margin`` slower is rejected, and accepted, 5% of the time.

    Returns:
        The :class:`Decision`: its figures are ``baseline_noise``, ``observed_improvement``,
        ``required_improvement`` (``min_improvement``, or ``-margin``), ``maximum_failure_rate``,
        ``maximum_p95_ratio``, ``margin``, ``alpha``, ``confidence`` (at this look), ``p_value``
        (one-sided Mann-Whitney U, ``scipy.stats.mannwhitneyu`` defaults, towards a faster
        candidate in ``"improvement"`` and a slower one in ``"non_regression"``),
        ``ratio_estimate``, ``ratio_ci_low``, ``ratio_ci_high`` (``None`` where unbounded),
        ``p95_ratio`` and ``p95_p_value``; its advice ``recommended_attempts`` (on an
        ``inconclusive`` or ``insufficient_valid_runs`` rerun when estimable; never below the
        fewest attempts per arm with which the test at its level can decide at all,
        :func:`min_attempts_mann_whitney`: 4 at ``alpha = 0.02``) and ``contention``; its notes
        say when an arm failed every attempt.
    """
    from scipy.stats import mannwhitneyu

    base_ms, cand_ms = list(b.latencies), list(c.latencies)

    def estimate(alpha: float, confidence: float) -> Estimate:
        alternative = "less" if policy.mode == "improvement" else "greater"
        p_value = float(mannwhitneyu(cand_ms, base_ms, alternative=alternative).pvalue)
        interval = hodges_lehmann_ratio(base_ms, cand_ms, confidence=confidence)
        return Estimate(p_value, interval["ratio_estimate"], interval["ratio_ci_low"], interval["ratio_ci_high"])

    def advice(alpha: float, tail_alpha: float, at_least: int, ratio: float | None) -> int | None:
        if min(len(base_ms), len(cand_ms)) < 2:
            return None
        if ratio is None:
            ratio = math.exp(log_shift(log_latencies(base_ms, "baseline"), log_latencies(cand_ms, "candidate"),
                                       None)[0])
        return _advice(base_ms, cand_ms, ratio, policy, alpha, tail_alpha, at_least)

    return statistical_decision(b, c, policy, objective, method="robust", look=look, max_looks=max_looks,
                                estimate=estimate, advice=advice, texts=(_improvement_text, _no_regression_text),
                                at_least=min(len(base_ms), len(cand_ms)) + 1, previous_fraction=previous_fraction,
                                boundary_p=lambda boundary: robust_boundary_p_value(b, c, boundary),
                                test=lambda found: "Mann-Whitney U")


def _advice(base_ms: list, cand_ms: list, ratio: float, policy: Policy, alpha: float, tail_alpha: float,
            at_least: int) -> int | None:
    """Attempts per arm likely to settle it, never below ``at_least`` nor the fewest that can reach the level.

    In improvement mode with an estimate already large enough, what is missing is significance
    against "no change" at ``alpha``; otherwise the interval must clear the boundary, each tail
    at ``tail_alpha``.
    """
    if policy.mode == "improvement" and not above(ratio, 1 - policy.min_improvement):
        estimate, level = recommended_attempts(base_ms, cand_ms, margin=0.0, alpha=alpha), alpha
    else:
        boundary = policy.margin if policy.mode == "non_regression" else -policy.min_improvement
        estimate, level = recommended_attempts(base_ms, cand_ms, margin=boundary, alpha=tail_alpha), tail_alpha
    return advice_floor(estimate, max(at_least, min_attempts_mann_whitney(level)))


def _describe(s: Mapping) -> str:
    if s.get("p_value") is None or s.get("ratio_estimate") is None:
        return f"no statistics computed ({s.get('reason')})"
    interval = interval_text(s.get("ratio_ci_low"), s.get("ratio_ci_high"), s.get("confidence"))
    return (f"one-sided Mann-Whitney p = {s['p_value']:.4g}; candidate/baseline ratio "
            f"{s['ratio_estimate']:.4g}, {interval} (Hodges-Lehmann)")


def robust_boundary_p_value(b: ArmSummary, c: ArmSummary, boundary: float) -> float:
    """The robust method's: ``U_b`` counts the ``m n`` pairwise ratios candidate / baseline at or
    below ``boundary``; ``p = P(U <= U_b)`` under the exact null distribution of the Mann-Whitney
    statistic (:func:`~._stats.u_null_cdf`) up to 50 attempts per arm, else
    ``Phi((U_b + 0.5 - m n / 2) / sqrt(m n (m + n + 1) / 12))``."""
    from ._stats import _EXACT_U_MAX, log_latencies, normal_cdf, u_null_cdf

    if not b.latencies or not c.latencies:
        return 1.0
    limit = boundary * (1 + REL_TOL)  # a difference exactly at the boundary counts as at or below it
    base = log_latencies(b.latencies, "baseline latencies")
    cand = log_latencies(c.latencies, "candidate latencies")
    # in log space: the ratio at or below the limit is its log at or below the limit's (no exp to overflow)
    count = int(np.count_nonzero(np.subtract.outer(cand, base) <= math.log(limit)))
    m, n = base.size, cand.size
    if max(m, n) <= _EXACT_U_MAX:
        return float(min(1.0, u_null_cdf(m, n)[count]))
    spread = math.sqrt(m * n * (m + n + 1) / 12)
    return min(1.0, normal_cdf((count + 0.5 - m * n / 2) / spread))


#: The robust method's entry in the method registry.
ROBUST = Method(
    "robust", robust_rule,
    figures=(Figure("p_value", "Mann-Whitney p", metric="robust_p_value"),
             Figure("ratio_estimate", "ratio candidate/baseline", metric="robust_ratio_estimate"),
             Figure("ratio_ci_low", "ratio interval, low", metric="robust_ratio_ci_low"),
             Figure("ratio_ci_high", "ratio interval, high", metric="robust_ratio_ci_high"),
             Figure("p95_p_value", "tail test p", metric="robust_p95_p_value"),
             Figure("alpha", metric=""), Figure("confidence", metric=""),
             Figure("recommended_attempts", "attempts per arm to settle it", metric="robust_recommended_attempts")),
    objectives=("latency",),
    help="one-sided Mann-Whitney U and a Hodges-Lehmann interval of the latency ratio",
    describe=_describe,
    boundary_p_value=robust_boundary_p_value,
    floor=statistical_floor,
)


@typed_inputs
def evaluate_robust(baseline_runs: list, candidate_runs: list, *, mode: str = "improvement", margin: float = 0.05,
                    alpha: float = 0.02, confidence: float = 0.90, **thresholds) -> dict:
    """Decide accept, reject or rerun with a rank test and an interval for the latency ratio.

    See :func:`robust_rule` for the method; ``**thresholds`` are the specification's.

    Returns:
        ``baseline``, ``candidate``, ``decision``, ``reason``, ``method`` (``"robust"``),
        ``mode`` and ``recommended_attempts``; once the checks ran also each check's flag,
        ``failed_checks``, the figures (``p_value``, ``ratio_estimate``, ``ratio_ci_low``,
        ``ratio_ci_high``, ``p95_ratio``, ``p95_p_value``, ``alpha``, ``confidence``, ``margin``,
        ``baseline_noise``, ``observed_improvement``, ``required_improvement``,
        ``maximum_failure_rate``, ``maximum_p95_ratio``) and ``contention``.

    Raises:
        ValueError: a threshold or argument is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    policy = Policy(method="robust", mode=mode, margin=_required(margin, "margin"),
                    alpha=_required(alpha, "alpha"), confidence=_required(confidence, "confidence"), **thresholds)
    b, c = ArmSummary.from_runs(baseline_runs), ArmSummary.from_runs(candidate_runs)
    decision = robust_rule(b, c, policy, OBJECTIVES["latency"])
    return decision.to_dict(labels=("method", "mode"), messages=False, deciding=False)


def _required(value, field: str):
    if value is None:  # None would mean "the default" to a Policy; here it is a mistake
        raise RuleTypeError(f"{field} must be a real number, got NoneType None")
    return value


def explain_robust_checks(result: dict, quality_tolerance: float | None = None) -> dict[str, str]:
    """A message for every check of an :func:`evaluate_robust` result, passed, failed or undecided.

    The messages read the figures the result stores (the same texts as the checks' own).

    Args:
        result: the dict :func:`evaluate_robust` returned.
        quality_tolerance: the tolerance used, for the quality message.

    Returns:
        ``{check_name: message}`` in the order of the checks; empty when the checks did not run.
    """
    if "failure_rate_ok" not in result:
        return {}
    messages = common_messages(result, quality_tolerance)
    b, c = result["baseline"], result["candidate"]
    shift = {"ratio": result["ratio_estimate"], "low": result["ratio_ci_low"], "high": result["ratio_ci_high"],
             "confidence": result["confidence"], "p_value": result["p_value"]}
    messages["p95_ok"] = f"{STATUS_WORDS[result['p95_ok']]}: " + _tail_text(
        {"candidate": c["p95_ms"], "baseline": b["p95_ms"], "ratio": result["p95_ratio"],
         "threshold": result["maximum_p95_ratio"], "p_value": result["p95_p_value"], "alpha": result["alpha"]})
    if "improvement_ok" in result:
        messages["improvement_ok"] = f"{STATUS_WORDS[result['improvement_ok']]}: " + _improvement_text(
            {**shift, "required": result["required_improvement"], "alpha": result["alpha"]})
    else:
        messages["no_regression_ok"] = f"{STATUS_WORDS[result['no_regression_ok']]}: " + _no_regression_text(
            {**shift, "margin": result["margin"]})
    return messages
