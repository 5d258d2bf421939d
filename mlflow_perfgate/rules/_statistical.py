"""What the statistical methods share: the levels at a look, the preconditions, the checks, the decision.

A statistical method (robust, paired) differs only in its statistic (a one-sided p-value and a
ratio interval) and in its rerun advice; :func:`statistical_decision` is the rest, written once:
the levels spent at a look of ``--until-decisive``, the specification's preconditions (with a
reject for failures that already exceed the rate whatever further attempts bring), the
failure-rate, quality and tail checks, the improvement or non-regression check, the verdict and
the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ._checks import (
    REL_TOL,
    above,
    below,
    contention_flags,
    exceedance_tail_check,
    failure_notes,
    failure_rate_check,
    hopeless_failures_check,
    p_value_text,
    precondition,
    quality_check,
    verdict_of,
)
from ._policy import Policy
from ._records import ArmSummary, Check, Deciding, Decision, change_text, pct
from ._registry import Objective
from ._sequential import sequential_thresholds
from ._stats import (
    interval_rank,
    min_attempts_mann_whitney,
    min_pairs_signed_rank,
    signed_rank_interval_rank,
)

__all__ = ["Estimate", "improvement_verdict", "is_sequential", "levels", "no_regression_verdict",
           "statistical_decision", "statistical_texts", "too_few_to_decide"]


@dataclass(frozen=True)
class Estimate:
    """A statistical method's answer: its one-sided p-value and the ratio candidate/baseline with its interval.

    Attributes:
        p_value: towards a faster candidate (improvement mode) or a slower one (non_regression).
        ratio, low, high: the estimate and the interval's bounds (``None`` where unbounded).
        figures: the method's own decision figures (``pairs``, ``p_value_method``).
        text_figures: what its messages need beyond the shared ones.
    """

    p_value: float
    ratio: float
    low: float | None
    high: float | None
    figures: Mapping = field(default_factory=dict)
    text_figures: Mapping = field(default_factory=dict)


def statistical_texts(interval: Callable[[Mapping], str], test: Callable[[Mapping], str]) -> tuple[Callable, Callable]:
    """The messages of ``improvement_ok`` and ``no_regression_ok`` for a method, from how it names its
    interval and its test (both read the check's figures)."""

    def improvement(f: Mapping) -> str:
        return (f"{interval(f)}, {change_text(f['ratio'])}; required an improvement of {pct(f['required'])} "
                f"and one-sided {test(f)} {p_value_text(f['p_value'], f['alpha'])}")

    def no_regression(f: Mapping) -> str:
        return (f"{interval(f)} against the allowed slowdown 1 + margin = {1 + f['margin']:.3f}; "
                f"one-sided {test(f)} p (slower) = {f['p_value']:.3g}")

    return improvement, no_regression


def is_sequential(look: int | None, max_looks: int | None) -> bool:
    """Whether ``look`` is one of several (``compare --until-decisive`` with more than one look)."""
    return look is not None and max_looks is not None and max_looks > 1


def levels(policy: Policy, look: int | None, max_looks: int | None,
           previous_fraction: float | None = None) -> tuple[float, float]:
    """``(alpha, confidence)`` at this look: the policy's, spent across the looks of a sequential comparison.

    ``previous_fraction``: the information fraction its earlier looks spent (``look`` and
    ``max_looks`` then count attempts per arm); ``None``: the previous look is ``look - 1``.
    """
    if is_sequential(look, max_looks):
        spent = sequential_thresholds(look, max_looks, alpha=policy.alpha, confidence=policy.confidence,
                                      previous_fraction=previous_fraction)
        return spent["alpha"], spent["confidence"]
    return policy.alpha, policy.confidence


def improvement_verdict(ratio: float, low: float | None, p_value: float, alpha: float,
                        min_improvement: float) -> bool | None:
    """``improvement_ok`` of a statistical method (robust, paired), with :data:`REL_TOL` in each comparison.

    ``True`` when significant (``p_value`` below ``alpha``) and the estimate shows at least
    ``min_improvement`` (``ratio <= 1 - min_improvement``); ``False`` when the interval rules
    such an improvement out (``low > 1 - min_improvement``); ``None`` otherwise.
    """
    bar = 1 - min_improvement
    if below(p_value, alpha) and not above(ratio, bar):
        return True
    if low is not None and above(low, bar):
        return False
    return None


def no_regression_verdict(low: float | None, high: float | None, margin: float) -> bool | None:
    """``no_regression_ok`` of a statistical method: the interval against ``1 + margin``, with :data:`REL_TOL`.

    ``False`` when the interval lies above ``1 + margin``, ``True`` when it lies at or below it,
    ``None`` when it straddles it (or is unbounded on the side that matters).
    """
    bar = 1 + margin
    if low is not None and above(low, bar):
        return False
    if high is not None and not above(high, bar):
        return True
    return None


def statistical_decision(b: ArmSummary, c: ArmSummary, policy: Policy, objective: Objective, *, method: str,
                         look: int | None, max_looks: int | None,
                         estimate: Callable[[float, float], Estimate],
                         advice: Callable[[float, float, int, float | None], int | None],
                         texts: tuple[Callable, Callable], at_least: int,
                         boundary_p: Callable[[float], float], test: Callable[[Estimate], str],
                         early_figures: Mapping | None = None, previous_fraction: float | None = None) -> Decision:
    """The decision of a statistical method, given its statistic and its advice.

    Args:
        b, c: the arms' summaries.
        policy, objective: how to decide, on what.
        method: the method's name, for the decision's labels.
        look, max_looks: the look of a sequential comparison.
        estimate: ``estimate(alpha, confidence) -> Estimate``, run once the preconditions hold.
        advice: ``advice(alpha, tail_alpha, at_least, ratio) -> attempts per arm or None``;
            ``ratio`` is ``None`` before any estimate (the method computes its own).
        texts: the messages of ``improvement_ok`` and ``no_regression_ok``.
        at_least: the least advice after an inconclusive answer (one more than the attempts seen).
        boundary_p: ``boundary_p(boundary) -> p``: the one-sided p-value of "the ratio exceeds
            ``boundary``" (the method's :attr:`~._registry.Method.boundary_p_value` on these arms).
        test: the name of the method's test, from its estimate (:attr:`Deciding.test`).
        early_figures: figures every decision of the method carries, early ones too.
        previous_fraction: what the earlier looks spent (:func:`levels`).

    Returns:
        The :class:`Decision`: checks ``failure_rate_ok``, ``quality_ok``, ``p95_ok`` (the
        exceedance tail test) and ``improvement_ok`` or ``no_regression_ok``; reject on a failed
        check, rerun (``inconclusive``) on an undecided one, else accept.
    """
    alpha, confidence = levels(policy, look, max_looks, previous_fraction)
    labels = {"method": method, "mode": policy.mode, "objective": objective.name, "notes": failure_notes(b, c)}
    main_name = "improvement_ok" if policy.mode == "improvement" else "no_regression_ok"
    bar = 1 - policy.min_improvement if policy.mode == "improvement" else 1 + policy.margin
    # stopped before any statistic: no test can be significant (p = 1 for each)
    unmeasured = Deciding(boundary=bar, tests={main_name: 1.0, "p95_ok": 1.0})
    early = dict(early_figures or {})
    tail_alpha = (1 - confidence) / 2
    hopeless = hopeless_failures_check(b, c, policy.min_valid_runs, policy.maximum_failure_rate, REL_TOL)
    reason = precondition(b, c, policy.min_valid_runs, policy.maximum_failure_rate, REL_TOL)
    if hopeless is not None and reason is not None:
        return Decision("reject", "unreliable_candidate", b, c, (hopeless,),
                        figures={"maximum_failure_rate": policy.maximum_failure_rate, **early},
                        advice={"recommended_attempts": None}, deciding=unmeasured, **labels)
    if reason is not None:
        recommended = advice(alpha, tail_alpha, policy.min_valid_runs, None) if reason == "insufficient_valid_runs" else None
        return Decision("rerun", reason, b, c, figures=early, advice={"recommended_attempts": recommended},
                        deciding=unmeasured, **labels)

    found = estimate(alpha, confidence)
    tail = exceedance_tail_check(b, c, policy.maximum_p95_ratio, alpha, REL_TOL)
    shift = {"ratio": found.ratio, "low": found.low, "high": found.high, "confidence": confidence,
             "p_value": found.p_value, **found.text_figures}
    improvement_text, no_regression_text = texts
    if policy.mode == "improvement":
        passed = improvement_verdict(found.ratio, found.low, found.p_value, alpha, policy.min_improvement)
        main = Check.build("improvement_ok", passed, {**shift, "required": policy.min_improvement, "alpha": alpha},
                           improvement_text)
    else:
        passed = no_regression_verdict(found.low, found.high, policy.margin)
        main = Check.build("no_regression_ok", passed, {**shift, "margin": policy.margin}, no_regression_text)
    checks = (failure_rate_check(b, c, policy.maximum_failure_rate, REL_TOL),
              quality_check(b, c, policy.quality_tolerance, REL_TOL), tail, main)
    verdict, reason = verdict_of(list(checks))
    recommended = advice(alpha, tail_alpha, at_least, found.ratio) if reason == "inconclusive" else None
    boundary = policy.margin if policy.mode == "non_regression" else -policy.min_improvement
    figures = {
        "baseline_noise": (b.p95_ms - b.median_ms) / b.median_ms,
        "observed_improvement": (b.median_ms - c.median_ms) / b.median_ms,
        "required_improvement": -boundary,
        "maximum_failure_rate": policy.maximum_failure_rate,
        "maximum_p95_ratio": policy.maximum_p95_ratio,
        "margin": policy.margin,
        "alpha": alpha,
        "confidence": confidence,
        "p_value": found.p_value,
        "ratio_estimate": found.ratio,
        "ratio_ci_low": found.low,
        "ratio_ci_high": found.high,
        "p95_ratio": tail.figures["ratio"],
        "p95_p_value": tail.figures["p_value"],
        **early,
        **found.figures,
    }
    advised = {"recommended_attempts": recommended, "contention": contention_flags(b, c)}
    main_p = float(boundary_p(bar))
    # the tail test's failure rests on its exceedance p-value only where the P95 ratio is past its bar
    tail_p = float(tail.figures["p_value"]) if above(tail.figures["ratio"], policy.maximum_p95_ratio) else 1.0
    deciding = Deciding(ratio=found.ratio, ratio_ci_low=found.low, ratio_ci_high=found.high, confidence=confidence,
                        p_value=found.p_value, test=test(found), boundary=bar, boundary_p_value=main_p,
                        tests={main.name: main_p, tail.name: tail_p})
    return Decision(verdict, reason, b, c, checks, figures=figures, advice=advised, deciding=deciding, **labels)


def too_few_to_decide(policy: Policy, attempts: int, *,
                      looks_for: Callable[[int], int | list[int]] | None = None) -> str | None:
    """Why the policy's method can never accept with ``attempts`` per arm at its levels, or None.

    The method's registry entry answers (:attr:`~._registry.Method.floor`): :func:`statistical_floor`
    for the built-in robust and paired methods, a plugin's own for its method; a method without a
    floor (``seed``) has none.
    """
    from ._registry import METHODS

    floor = METHODS.require(policy.method).floor
    return None if floor is None else floor(policy, attempts, looks_for)


def statistical_floor(policy: Policy, attempts: int,
                      looks_for: Callable[[int], int | list[int]] | None = None) -> str | None:
    """The robust and paired methods' floor: why ``attempts`` per arm can never accept, or None.

    The exact tests and intervals have a floor. In ``improvement`` mode an accept needs the
    one-sided test below ``alpha``, and its smallest p-value is the robust method's ``1 /
    C(2n, n)`` (:func:`_stats.min_attempts_mann_whitney`: 4) or the paired method's signed-rank
    ``2^-n`` over ``n`` complete rounds (6 at 0.02). In ``non_regression`` mode an accept needs
    the interval's upper bound, which exists from the size at which
    :func:`_stats.signed_rank_interval_rank` (or ``interval_rank``) is at least 1 at
    ``confidence`` (5 rounds, 3 per arm at 90%). Below the floor a comparison can still reject
    (an interval that rules the change out, the tail test) or ask for a rerun; it is run all the
    same (to check a pipeline, say), with this said first.

    ``looks_for`` makes it a sequential comparison's (``--until-decisive``): ``attempts`` is its
    most attempts per arm and ``looks_for(m)`` either how many equally spaced looks ``m`` of them
    give, or the looks' positions in attempts per arm (the information fraction of a look is its
    position over ``m``). With more than one look the floor is the last look's, at the alpha and
    confidence spent between the look before it and the last; the advice then names
    ``--max-attempts``.
    """
    paired = policy.method == "paired"
    unit = "complete ABBA rounds" if paired else "attempts per arm"

    def levels_at(most: int) -> tuple[float, float, int]:
        looks = looks_for(most) if looks_for is not None else 1
        if isinstance(looks, (list, tuple)):
            positions = sorted(looks)
            if len(positions) > 1:
                spent = sequential_thresholds(most, most, alpha=policy.alpha, confidence=policy.confidence,
                                              previous_fraction=positions[-2] / most)
                return spent["alpha"], spent["confidence"], len(positions)
            return policy.alpha, policy.confidence, 1
        if looks > 1:
            spent = sequential_thresholds(looks, looks, alpha=policy.alpha, confidence=policy.confidence)
            return spent["alpha"], spent["confidence"], looks
        return policy.alpha, policy.confidence, 1

    def floor(most: int) -> int:
        alpha, confidence, looks = levels_at(most)
        if policy.mode == "improvement":
            return min_pairs_signed_rank(alpha) if paired else min_attempts_mann_whitney(alpha)
        need = 1
        while need < 1000 and (signed_rank_interval_rank(need, confidence) if paired
                               else interval_rank(need, need, confidence)) < 1:
            need += 1
        return need

    here = floor(attempts)
    if attempts >= here:
        return None
    need = attempts + 1
    while need < 1000 and need < floor(need):
        need += 1
    alpha, confidence, looks = levels_at(attempts)
    level = f"alpha = {alpha:g}" if looks == 1 else f"the last of its {looks} looks' alpha = {alpha:.3g}"
    if policy.mode == "improvement":
        smallest = f"1/{2 ** attempts}" if paired else f"1/{math.comb(2 * attempts, attempts)}"
        why = (f"at {level} its {'signed-rank' if paired else 'Mann-Whitney'} test needs at "
               f"least {here} {unit} ({attempts} give a smallest p-value of {smallest})")
    else:
        at = "" if looks == 1 else f" at the last of its {looks} looks"
        why = f"its {confidence:.0%} interval{at} has an upper bound only from {here} {unit}"
    option, key = ("--attempts", "attempts") if looks_for is None else ("--max-attempts", "max_attempts")
    return (f"the {policy.method} method cannot accept with {attempts} attempt{'' if attempts == 1 else 's'} per arm: "
            f"{why}, so this comparison can answer reject or rerun, never accept; pass {option} {need} or more "
            f"({key}={need})")
