"""The paired method: a signed-rank test and an interval on the within-round latency ratios of ABBA rounds.

``compare`` interleaves its attempts in ABBA rounds (A B, B A, A B, ...) and each attempt
record keeps its round (``pair``). Neighbouring attempts share the machine's state (the load
of a busy runner, its clock, its caches), so the ratio of the two attempts of one round is far
less noisy than either: what moves both cancels. The robust method treats the arms as two
independent samples and pays for the load that varies between rounds; this one works on the
rounds' log ratios ``d = log(candidate) - log(baseline)``:

- a one-sided Wilcoxon signed-rank test (is the candidate's latency typically lower within a
  round?), ``scipy.stats.wilcoxon``: exact for noise symmetric about no change, so its
  false-accept rate is at most ``alpha`` at any number of rounds. Below its floor (at ``alpha =
  0.02`` it needs 6 rounds: 5 give at best p = 1/32) it cannot accept, and the comparison says
  so before it runs (:func:`_statistical.too_few_to_decide`). No other test stands in below
  the floor: a one-sided t-test on 5 identical rounds accepts up to 2^-5 = 3.1% of them
  whatever alpha says.
- the one-sample Hodges-Lehmann estimate of the typical ratio (the median of the Walsh
  averages of ``d``) with its distribution-free signed-rank interval (Hollander and Wolfe,
  section 3.2), exponentiated to a ratio candidate / baseline;
- the robust method's decision logic in both modes, its failure-rate, quality and tail checks,
  its rerun advice (from the spread of ``d``) and its alpha spending across the looks of
  ``compare --until-decisive``.

Records without rounds (attempts logged independently, ``record``) or with fewer than two
complete rounds are judged by the robust method, and the decision says so.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping

import numpy as np

from ._checks import REL_TOL
from ._policy import Policy
from ._records import ArmSummary, Decision, interval_text
from ._registry import Figure, Method, Objective
from ._robust import advice_floor, robust_rule
from ._statistical import Estimate, statistical_decision, statistical_floor, statistical_texts
from ._stats import (
    log_ratios,
    min_pairs_signed_rank,
    paired_log_shift,
    settling_pairs,
    signed_rank_test,
)

__all__ = ["MIN_ROUNDS", "PAIRED", "complete_rounds", "paired_rule"]

#: The fewest complete ABBA rounds the paired statistics are computed on; below, the robust method judges.
MIN_ROUNDS = 2


def complete_rounds(b: ArmSummary, c: ArmSummary) -> tuple[list[int], list[float], list[float]]:
    """The rounds holding a successful attempt of each arm, and each arm's median latency in each.

    A round is an attempt record's ``pair`` (:attr:`ArmSummary.pairs`). Where a round holds
    several successful attempts of an arm (steps of one child, a repeated round), the arm's
    latency in the round is their median (``statistics.median``), so each round counts once. A
    round whose attempt of either arm failed is incomplete and left out (the failure stays in
    the failure rate); so is a successful attempt without a round.

    Returns:
        ``(rounds, baseline_medians, candidate_medians)``, in round order.
    """
    def by_round(summary: ArmSummary) -> dict[int, list[float]]:
        grouped: dict[int, list[float]] = {}
        for latency, pair in zip(summary.latencies, summary.pairs):
            if pair is not None:
                grouped.setdefault(pair, []).append(latency)
        return grouped

    base, cand = by_round(b), by_round(c)
    rounds = sorted(set(base) & set(cand))
    return (rounds, [statistics.median(base[r]) for r in rounds], [statistics.median(cand[r]) for r in rounds])


def _interval_text(f: Mapping) -> str:
    return (f"within-round ratio candidate/baseline {f['ratio']:.3f} over {f['pairs']} ABBA rounds "
            f"({interval_text(f['low'], f['high'], f['confidence'])}, Hodges-Lehmann of the log ratios)")


def _test_name(how: str) -> str:
    """The test that gave the p-value, from its ``p_value_method``."""
    return f"Wilcoxon signed-rank ({how})"


_improvement_text, _no_regression_text = statistical_texts(_interval_text, lambda f: _test_name(f["how"]))


def _fallback(b: ArmSummary, c: ArmSummary, policy: Policy, objective: Objective, rounds: int,
              look: int | None, max_looks: int | None, previous_fraction: float | None) -> Decision:
    """The robust method's decision, saying why the paired method did not decide."""
    if all(pair is None for pair in (*b.pairs, *c.pairs)):
        why = "no ABBA rounds recorded"
    else:
        why = (f"only {rounds} complete ABBA round{'' if rounds == 1 else 's'} (a round needs a successful "
               f"attempt of each arm; the paired method needs {MIN_ROUNDS})")
    text = f"{why}: judged by the robust method"
    decision = robust_rule(b, c, policy, objective, look=look, max_looks=max_looks,
                           previous_fraction=previous_fraction)
    return dataclasses.replace(decision, figures={**decision.figures, "paired_fallback": text},
                               notes={**decision.notes, "paired_fallback": f"NOTE: {text}"})


def paired_rule(b: ArmSummary, c: ArmSummary, policy: Policy, objective: Objective, *, look: int | None = None,
                max_looks: int | None = None, previous_fraction: float | None = None) -> Decision:
    """Decide accept, reject or rerun on the ABBA rounds' within-round latency ratios.

    Rounds: :func:`complete_rounds`; ``d_r = log(candidate median_r) - log(baseline median_r)``,
    rounded to 12 decimals so that equal ratios tie in any unit (``_stats.log_ratios``). With
    fewer than :data:`MIN_ROUNDS` complete rounds (no ``pair`` on the records: attempts logged
    independently) the robust method decides (:func:`robust_rule`): the decision is the
    robust one, its ``method`` is ``"robust"`` (only a decision made with the paired
    statistics says ``"paired"``), its figure ``paired_fallback`` and its note say
    ``"no ABBA rounds recorded: judged by the robust method"`` (or how few rounds there were).

    Otherwise, as :func:`robust_rule` with the paired statistics in place of the unpaired ones:

    - the candidate's hopeless failures reject first (``unreliable_candidate``), then the
      specification's preconditions (``insufficient_valid_runs``, ``unreliable_baseline``,
      counted on each arm's successful attempts);
    - ``failure_rate_ok``, ``quality_ok`` (the shared checks) and ``p95_ok`` (the robust
      method's exceedance test, on every successful attempt);
    - ``p_value``: the one-sided Wilcoxon signed-rank test of ``d`` (``_stats.signed_rank_test``:
      ``scipy.stats.wilcoxon``, zeros dropped, ties at average ranks, exact for up to 50
      pairs without ties or zeros and for up to 13 with them, the normal approximation above),
      towards a faster candidate (``d < 0``) in ``"improvement"`` and a slower one in
      ``"non_regression"`` (``p_value_method`` says whether it was exact);
    - ``ratio_estimate``, ``ratio_ci_low``, ``ratio_ci_high``: the one-sample Hodges-Lehmann
      estimate (the median of the Walsh averages of ``d``) and its signed-rank interval at
      ``confidence`` (exact up to 50 rounds, the normal approximation above), exponentiated;
    - ``improvement_ok``: ``True`` when ``p_value`` is below ``alpha`` and the estimate shows at
      least ``min_improvement``; ``False`` when the interval rules that out; ``None`` otherwise.
      ``no_regression_ok``: the interval against ``1 + margin``. Every comparison with the
      relative tolerance ``REL_TOL``.

    With ``look`` and ``max_looks``, ``alpha`` and the confidence are spent across the looks
    (:func:`sequential_thresholds`), as the robust rule does.

    Returns:
        The :class:`Decision`: figures ``baseline_noise``, ``observed_improvement``,
        ``required_improvement``, ``maximum_failure_rate``, ``maximum_p95_ratio``, ``margin``,
        ``alpha``, ``confidence``, ``p_value``, ``p_value_method``, ``ratio_estimate``,
        ``ratio_ci_low``, ``ratio_ci_high`` (``None`` where unbounded: at 90%, 5 rounds are
        needed), ``pairs`` (complete rounds), ``p95_ratio``, ``p95_p_value``; advice
        ``recommended_attempts`` (on an ``inconclusive`` or ``insufficient_valid_runs`` rerun:
        rounds, i.e. attempts per arm, from the spread of ``d`` alone, ``_stats.settling_pairs``;
        never below the fewest with which the signed-rank test can reach its level, ``2^-n <
        alpha``: 6 at 0.02) and ``contention``.
    """
    rounds, base_r, cand_r = complete_rounds(b, c)
    if len(rounds) < MIN_ROUNDS:
        return _fallback(b, c, policy, objective, len(rounds), look, max_looks, previous_fraction)
    d = log_ratios(base_r, cand_r)

    def estimate(alpha: float, confidence: float) -> Estimate:
        p_value, how = signed_rank_test(d, "less" if policy.mode == "improvement" else "greater")
        shift, low, high = paired_log_shift(d, confidence)
        return Estimate(p_value, math.exp(shift), None if low is None else math.exp(low),
                        None if high is None else math.exp(high), figures={"p_value_method": how},
                        text_figures={"pairs": len(rounds), "how": how})

    def advice(alpha: float, tail_alpha: float, at_least: int, ratio: float | None) -> int | None:
        del at_least, ratio  # a plan from the noise: neither the rounds seen nor where the estimate stood
        return _advice(d, policy, alpha, tail_alpha)

    return statistical_decision(b, c, policy, objective, method="paired", look=look, max_looks=max_looks,
                                estimate=estimate, advice=advice, texts=(_improvement_text, _no_regression_text),
                                at_least=len(rounds) + 1, early_figures={"pairs": len(rounds)},
                                previous_fraction=previous_fraction,
                                boundary_p=lambda boundary: paired_boundary_p_value(b, c, boundary),
                                test=lambda found: _test_name(found.figures["p_value_method"]))


def _advice(d, policy: Policy, alpha: float, tail_alpha: float) -> int | None:
    """Rounds (attempts per arm) that settle it, never below ``min_valid_runs`` nor the fewest that can reach the level.

    A plan from the rounds' spread alone (:func:`_stats.settling_pairs`): the rounds whose interval,
    each tail at ``tail_alpha``, clears the question's bound (``1 + margin``; ``1 - min_improvement``)
    for a change that does nothing, with probability :data:`_stats.SETTLE_POWER`. Where one run's
    estimate stood does not move it, nor the rounds it ran, so the advice does not grow run after run.
    """
    improvement = policy.mode == "improvement"
    bound = 1 - policy.min_improvement if improvement else 1 + policy.margin
    floor = min_pairs_signed_rank(alpha if improvement else tail_alpha)  # an accept's test, or its interval
    return advice_floor(settling_pairs(d, bound=bound, alpha=tail_alpha), max(policy.min_valid_runs, floor))


def _describe(s: Mapping) -> str:
    if s.get("judged_by"):
        return f"judged by the {s['judged_by']} method ({s.get('note') or 'no paired statistics'})"
    if s.get("p_value") is None or s.get("ratio_estimate") is None:
        return f"no statistics computed ({s.get('reason')})"
    test = "Wilcoxon signed-rank"
    return (f"one-sided {test} p = {s['p_value']:.4g} over {s.get('pairs')} ABBA rounds; "
            f"within-round ratio candidate/baseline {s['ratio_estimate']:.4g}, "
            f"{interval_text(s.get('ratio_ci_low'), s.get('ratio_ci_high'), s.get('confidence'))} (Hodges-Lehmann)")


def paired_boundary_p_value(b: ArmSummary, c: ArmSummary, boundary: float) -> float:
    """The paired method's: the count of :func:`robust_boundary_p_value` over the ``n(n+1)/2`` Walsh
    averages of the complete ABBA rounds' log ratios (:func:`complete_rounds`), against the
    signed-rank null distribution (:func:`~._stats.signed_rank_null_cdf`) up to 50 rounds, its normal
    approximation above."""
    from ._stats import _EXACT_W_MAX, log_ratios, normal_cdf, signed_rank_null_cdf, walsh_averages

    _, base, cand = complete_rounds(b, c)
    if not base:
        return 1.0
    limit = boundary * (1 + REL_TOL)
    walsh = walsh_averages(log_ratios(base, cand))
    count = int(np.count_nonzero(np.asarray(walsh) <= math.log(limit)))  # in log space: no exp to overflow
    n = len(base)
    if n <= _EXACT_W_MAX:
        return float(min(1.0, signed_rank_null_cdf(n)[count]))
    total = n * (n + 1) / 2
    spread = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return min(1.0, normal_cdf((count + 0.5 - total / 2) / spread))


#: The paired method's entry in the method registry; its metric names do not clash with the robust method's.
PAIRED = Method(
    "paired", paired_rule,
    figures=(Figure("p_value", "paired test p (Wilcoxon signed-rank)",
                    metric="paired_p_value"),
             Figure("p_value_method", "paired test", metric=""),
             Figure("ratio_estimate", "within-round ratio candidate/baseline", metric="paired_ratio_estimate"),
             Figure("ratio_ci_low", "within-round ratio interval, low", metric="paired_ratio_ci_low"),
             Figure("ratio_ci_high", "within-round ratio interval, high", metric="paired_ratio_ci_high"),
             Figure("pairs", "complete ABBA rounds", metric="paired_pairs"),
             Figure("p95_p_value", "tail test p", metric="paired_p95_p_value"),
             Figure("alpha", metric=""), Figure("confidence", metric=""),
             Figure("recommended_attempts", "attempts per arm to settle it", metric="paired_recommended_attempts")),
    objectives=("latency",),
    help=("Wilcoxon signed-rank test and Hodges-Lehmann interval on the ABBA "
          "rounds' latency ratios"),
    describe=_describe,
    boundary_p_value=paired_boundary_p_value,
    floor=statistical_floor,
)
