"""Judging a loaded group: correctness first, the single variable, the environment, then the policy's rule."""

from __future__ import annotations

from .. import rules
from ..errors import EnvironmentMismatch, SingleVariableError
from ..rules import OBJECTIVES
from ._environment import compare_fingerprints, env_from_tags, excused_by
from ._evaluation import Change, Judged
from ._group import AttemptView
from ._schema import ARMS

__all__ = ["Change", "Judged", "changed_variable", "judge_views", "objective_metrics", "records"]


def _arm_conditions(views: list[AttemptView], arm: str) -> dict | None:
    """The params every attempt of an arm shares; :class:`SingleVariableError` naming the keys that differ."""
    logged = [v for v in views if v.arm == arm and v.params]
    if not logged:
        return None
    first = logged[0].params
    for other in logged[1:]:
        if other.params != first:
            keys = sorted(k for k in set(first) | set(other.params) if first.get(k) != other.params.get(k))
            raise SingleVariableError(
                f"the {arm} attempts do not share identical conditions: {keys} differ "
                f"(runs {logged[0].run_id} and {other.run_id})"
            )
    return first


def changed_variable(views: list[AttemptView]) -> Change:
    """The one condition baseline and candidate differ in (the single-variable rule)."""
    baseline, candidate = _arm_conditions(views, "baseline"), _arm_conditions(views, "candidate")
    if baseline is None or candidate is None:
        return Change()
    differ = rules.changed_keys({"baseline": baseline, "candidate": candidate})
    if len(differ) != 1:
        what = "do not differ in any condition" if not differ else f"differ in {len(differ)} conditions: {differ}"
        raise SingleVariableError(
            f"baseline and candidate must differ in exactly one condition (the changed variable); they {what}"
        )
    key = differ[0]
    return Change(key, baseline.get(key, "(absent)"), candidate.get(key, "(absent)"))


def objective_metrics() -> tuple[str, ...]:
    """The attempt metrics the registered objectives judge (``peak_mem_mib``, ``throughput_tok_s``, ...)."""
    return tuple(dict.fromkeys(metric for name in OBJECTIVES for metric in OBJECTIVES[name].metrics))


def records(views: list[AttemptView]) -> dict[str, list[dict]]:
    """Each arm's attempt records for the rules; attempts still running are not judged yet."""
    metrics = objective_metrics()
    return {arm: [view.record(metrics) for view in views if view.arm == arm and view.state != "running"]
            for arm in ARMS}


def judge_views(views: list[AttemptView], policy: rules.Policy, env_mismatch: str, *, look: int | None = None,
                max_looks: int | None = None, previous_fraction: float | None = None) -> Judged:
    """The evaluator's order: correctness, single variable, environment, in-progress, then the rule.

    Returns:
        The :class:`Judged` answer: the rule's decision, or the evaluator's own
        ``blocked_by_correctness`` / ``attempts_in_progress`` answer, with the group's :class:`Change`.

    Raises:
        SingleVariableError: the arms break the single-variable rule (unless blocked first).
        EnvironmentMismatch: the fingerprints differ and ``env_mismatch`` is ``fail``.
    """
    excluded = [v for v in views if v.state == "excluded"]
    views = [v for v in views if v.state != "excluded"]
    # withdrawn (a stop by the operator, the other arm's crash in a shared child) or taken out by 'forget'
    notes = [f"{len(excluded)} attempt{'s' if len(excluded) > 1 else ''} withdrawn or forgotten, not judged and in "
             "no failure rate: " + "; ".join(f"{v.arm} {v.run_id} ({v.failure})" for v in excluded[:10])
             + ("; ..." if len(excluded) > 10 else "")] if excluded else []
    excluded_runs = tuple(v.run_id for v in excluded)
    judged = records(views)
    invalid = [v for v in views if v.validity and not v.validity["run_valid"]]
    if invalid:
        try:
            change = changed_variable(views)
        except SingleVariableError:
            change = Change()
        first = invalid[0]
        answer = {"issues": sorted({issue for v in invalid for issue in v.validity["issues"]}),
                  "first_failure": first.validity["first_failure"], "reproducible": first.validity["reproducible"],
                  "invalid_runs": [v.run_id for v in invalid]}
        return Judged(_own_answer(judged, "blocked_by_correctness", "run_invalid", policy), change, tuple(notes),
                      excluded_runs, answer, failed_checks=("run_valid",))
    change = changed_variable(views)
    notes += _environment_notes(views, change, env_mismatch)
    running = [v.run_id for v in views if v.state == "running"]
    if running:
        return Judged(_own_answer(judged, "rerun", "attempts_in_progress", policy), change, tuple(notes),
                      excluded_runs, {"running_runs": running})
    decision = rules.judge(judged["baseline"], judged["candidate"], policy, look=look, max_looks=max_looks,
                           previous_fraction=previous_fraction)
    key = policy.latency_key
    flagged = {arm: [judged[arm][index] for index in indices] for arm, indices in decision.advice.get(
        "contention", {}).items()}
    for arm, attempts in flagged.items():
        notes += [f"possible contention: {arm} attempt {record['run_id']} "
                  f"({record.get(key, record['latency_ms']):.4g} ms) is far outside its arm's spread; it stays "
                  "in every count" for record in attempts]
    for arm, summary in (("baseline", decision.baseline), ("candidate", decision.candidate)):
        if summary.contended_runs:  # uncontended only: fastest has no fallback
            notes.append(f"{summary.contended_runs} of {summary.valid_runs} successful {arm} attempts have no "
                         f"{key} (more than half their steps waited for a CPU, or contention was not measured): "
                         "judged on their raw latency_ms")
    return Judged(decision, change, tuple(notes), excluded_runs, failed_checks=tuple(decision.failed_checks),
                  contention_runs={arm: tuple(record["run_id"] for record in attempts)
                                   for arm, attempts in flagged.items()})


def _environment_notes(views: list[AttemptView], change: Change, env_mismatch: str) -> list[str]:
    """The fingerprints' differences beyond the changed variable: refused, warned of, or ignored."""
    mismatches = compare_fingerprints([(v.run_id, env_from_tags(v.tags)) for v in views], change.variable)
    if change.variable is not None:  # what the variable excuses may differ between the arms, never within one
        for arm in ("baseline", "candidate"):  # (a working tree edited between two calls of one group, say)
            within = compare_fingerprints([(v.run_id, env_from_tags(v.tags)) for v in views if v.arm == arm], None)
            mismatches += [f"{found} within the {arm}" for found in within
                           if excused_by(found.partition(":")[0], change.variable)]
    if mismatches and env_mismatch == "fail":
        raise EnvironmentMismatch(
            "the attempts ran in different environments beyond the changed variable ("
            + "; ".join(mismatches) + "); rerun them in one environment, or pass env_mismatch='warn'")
    return [f"environment differs: {m}" for m in mismatches] if env_mismatch == "warn" else []


def _own_answer(judged: dict[str, list[dict]], verdict: str, reason: str, policy: rules.Policy) -> rules.Decision:
    """The evaluator's own answer as a decision without checks: the arms' summaries, the verdict, why."""
    return rules.Decision(verdict, reason, rules.ArmSummary.from_runs(judged["baseline"]),
                          rules.ArmSummary.from_runs(judged["candidate"]), method=policy.method, mode=policy.mode,
                          objective=policy.objective)
