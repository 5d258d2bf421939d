"""One entry point for a decision: a :class:`Policy` over the method and objective registries."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._checks import contention_check, contention_flags
from ._errors import MissingField, typed_inputs
from ._guards import guarded
from ._policy import Policy
from ._records import ArmSummary, Decision
from ._registry import METHODS, OBJECTIVES, Method

__all__ = ["METHODS", "companion", "decide", "judge", "uncontended"]


def companion(decision: Decision, method: Method) -> dict[str, Any]:
    """A method's short answer beside another's: its decision, reason and declared figures.

    A method whose rule handed the decision to another (the paired method without ABBA rounds
    answers with the robust method's decision) has no figures of its own to show: its summary
    says ``judged_by`` that method and carries the decision's notes (``note``), so the other
    method's figures are never logged under its metric names.
    """
    summary = {"decision": decision.verdict, "reason": decision.reason}
    if decision.method != method.name:
        return {**summary, "judged_by": decision.method, "note": "; ".join(decision.notes.values())}
    values = {**decision.figures, **decision.advice}
    return {**summary, **{figure.name: values[figure.name] for figure in method.figures if figure.name in values}}


#: Failed checks whose reject stands whatever the latencies say (a contention rerun does not undo them).
_LATENCY_FREE_CHECKS = ("failure_rate_ok", "quality_ok")
#: Reruns that come before any check (the specification's preconditions): a contention rerun leaves them.
_PRECONDITIONS = ("insufficient_valid_runs", "unreliable_baseline")


def uncontended(decision: Decision, b: ArmSummary, c: ArmSummary) -> Decision:
    """A decision under ``latency="uncontended"``: with its ``contention_ok`` check, and ``rerun``
    (reason ``contention``) when that check is undecided.

    The verdict a rule reached on latencies of which more than half in an arm are raw (contended
    attempts) is not trusted: an accept, a reject on latency checks or an inconclusive rerun becomes
    ``rerun``/``contention``. A reject on the failure rate or the quality stands (the latencies do not
    enter it), and so do the specification's preconditions (``insufficient_valid_runs``,
    ``unreliable_baseline``), which answer before any check.
    """
    check = contention_check(b, c)
    figures = {**decision.figures, "baseline_contended_runs": b.contended_runs,
               "candidate_contended_runs": c.contended_runs}
    if decision.verdict == "rerun" and decision.reason in _PRECONDITIONS and not decision.checks:
        return dataclasses.replace(decision, figures=figures)
    checks = (*decision.checks, check)
    stands = decision.verdict == "reject" and any(name in _LATENCY_FREE_CHECKS for name in decision.failed_checks)
    if check.passed is None and not stands:
        return dataclasses.replace(decision, verdict="rerun", reason="contention", checks=checks, figures=figures)
    return dataclasses.replace(decision, checks=checks, figures=figures)


def judge(baseline_runs: list, candidate_runs: list, policy: Policy, *, look: int | None = None,
          max_looks: int | None = None, previous_fraction: float | None = None) -> Decision:
    """Judge one comparison under ``policy``; the :class:`Decision` record.

    Each arm is summarised once (with the objective's metric). The policy's method decides.
    When several registered methods judge the objective in the policy's mode, each one's short
    answer and figures are kept as companions, whichever decides, so a decision run shows what
    the others would have said. The advice holds the contention flags (never removals) and the
    attempts per arm that would likely settle a rerun (the first method that estimates them).

    Args:
        baseline_runs, candidate_runs: attempt records (``ok``, ``latency_ms``, ``quality``,
            ``failure``, the objective's metric, ``pair``).
        policy: how to decide; its ``latency`` says which latency of each attempt is judged
            (``raw``: ``latency_ms``; ``uncontended``: ``uncontended_latency_ms`` where an
            attempt has it, see :func:`uncontended`; ``fastest``: ``fastest_step_ms``; ``p10``:
            ``step_p10_ms``).
        look, max_looks: the look of a sequential comparison (``compare --until-decisive``);
            statistical methods spend their error rates across the looks.
        previous_fraction: the information fraction the comparison's earlier looks spent (``look``
            and ``max_looks`` then count attempts per arm: ``compare --until-decisive``, resumed
            or not); ``None``: the previous look is ``look - 1``. Passed to a method's rule only
            when given (a plugin's rule without the argument is judged as before).
    """
    objective = OBJECTIVES.require(policy.objective)  # a policy unpickled where its plugin is not: said so
    METHODS.require(policy.method)
    summaries = []
    for arm, runs in (("baseline", baseline_runs), ("candidate", candidate_runs)):
        try:
            summaries.append(ArmSummary.from_runs(runs, objective.metrics, policy.latency_key))
        except MissingField as exc:  # say which arm: the other may hold the figure
            raise MissingField(f"{arm}: {exc}") from None
    b, c = summaries

    def rule(name: str) -> Decision:
        extra = {} if previous_fraction is None else {"previous_fraction": previous_fraction}
        made = METHODS[name].rule(b, c, policy, objective, look=look, max_looks=max_looks, **extra)
        if objective.name == "latency":  # the step figures the method did not test: never accept a slower step
            made = guarded(made, b, c, policy)
        return uncontended(made, b, c) if policy.latency == "uncontended" else made

    decision = rule(policy.method)
    judges = [name for name in METHODS if METHODS[name].judges(objective.name) and policy.mode in METHODS[name].modes]
    companions = {}
    if len(judges) > 1:
        for name in judges:
            other = decision if name == policy.method else rule(name)
            companions[name] = companion(other, METHODS[name])
    advice = dict(decision.advice)
    if "recommended_attempts" not in advice:
        advice["recommended_attempts"] = next(
            (summary["recommended_attempts"] for summary in companions.values() if "recommended_attempts" in summary),
            None)
    advice.setdefault("contention", contention_flags(b, c))
    figures = dict(decision.figures)
    if "non_regression" in objective.modes:
        figures.setdefault("margin", policy.margin)
    return dataclasses.replace(decision, advice=advice, companions=companions, figures=figures)


@typed_inputs
def decide(baseline_runs: list, candidate_runs: list, *, objective: str = "latency", method: str = "seed",
           mode: str = "improvement", margin: float | None = 0.05, alpha: float | None = None,
           confidence: float | None = None, look: int | None = None, max_looks: int | None = None,
           latency: str | None = None, previous_fraction: float | None = None, **thresholds) -> dict:
    """Judge one comparison: objective x method x mode, every judging method's figures kept.

    - ``objective="latency"``: ``method="seed"`` is the specification's rule, exact
      (:func:`evaluate_regression`; in ``mode="non_regression"``
      :func:`evaluate_seed_non_regression`); ``method="robust"`` is :func:`evaluate_robust`;
      ``method="paired"`` judges the ABBA rounds' within-round ratios (``_paired.paired_rule``;
      without rounds it answers with the robust decision, ``method`` then ``"robust"``). All
      are computed and the others' figures are kept under ``seed`` / ``robust`` / ``paired``.
    - ``objective="memory"`` or ``"throughput"``: :func:`evaluate_objective` (improvement
      mode, the specification-style rule on the objective's figure).
    - ``latency="uncontended"``: the rules judge each attempt's ``uncontended_latency_ms`` where
      it has one (see :func:`judge`); ``latency="fastest"`` each attempt's ``fastest_step_ms``
      and ``latency="p10"`` its ``step_p10_ms`` (every successful attempt must have it); ``raw``
      (default) judges ``latency_ms``.

    A thin wrapper of :func:`judge` with a :class:`Policy` made of the keyword arguments
    (``None`` means the default).

    Returns:
        The deciding rule's result plus ``objective``, ``method``, ``mode``, ``messages``,
        ``failed_checks``, the companions (``seed``, ``robust`` for latency), ``contention``
        (indices of flagged successful attempts per arm) and ``recommended_attempts``.

    Raises:
        ValueError: an unknown objective, method or mode, a combination the methods do not
            judge (memory/throughput with the robust method or the non-regression mode), a
            threshold out of range or an invalid record.
        KeyError: a successful attempt misses ``latency_ms``, ``quality`` or the objective's metric.
    """
    policy = Policy(objective=objective, method=method, mode=mode, margin=margin, alpha=alpha,
                    confidence=confidence, latency=latency, **thresholds)
    decision = judge(baseline_runs, candidate_runs, policy, look=look, max_looks=max_looks,
                     previous_fraction=previous_fraction)
    result = decision.to_dict()
    result.setdefault("failed_checks", [])
    return result
