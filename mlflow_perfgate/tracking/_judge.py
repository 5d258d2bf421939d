"""Judging a loaded group: correctness first, the single variable, the environment, then the policy's rule."""

from __future__ import annotations

from dataclasses import dataclass

from .. import rules
from ..rules._errors import EnvironmentMismatch, SingleVariableError
from ..rules._registry import OBJECTIVES
from ._environment import compare_fingerprints, env_from_tags
from ._group import AttemptView
from ._schema import ARMS

__all__ = ["Change", "changed_variable", "judge_views", "objective_metrics", "records"]


@dataclass(frozen=True)
class Change:
    """The changed variable of a group and its value in each arm (``None`` when not known)."""

    variable: str | None = None
    baseline_value: str | None = None
    candidate_value: str | None = None


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
                max_looks: int | None = None, previous_fraction: float | None = None) -> tuple[dict, Change]:
    """The evaluator's order: correctness, single variable, environment, in-progress, then the rule.

    Returns:
        The result dict (the rule's, or the evaluator's own ``blocked_by_correctness`` /
        ``attempts_in_progress`` answer) and the group's :class:`Change`.

    Raises:
        SingleVariableError: the arms break the single-variable rule (unless blocked first).
        EnvironmentMismatch: the fingerprints differ and ``env_mismatch`` is ``fail``.
    """
    excluded = [v for v in views if v.state == "excluded"]
    views = [v for v in views if v.state != "excluded"]
    notes = [f"{len(excluded)} attempts excluded by 'forget' are not judged: "
             + ", ".join(f"{v.run_id} ({v.failure})" for v in excluded[:10])] if excluded else []
    judged = records(views)
    invalid = [v for v in views if v.validity and not v.validity["run_valid"]]
    if invalid:
        try:
            change = changed_variable(views)
        except SingleVariableError:
            change = Change()
        first = invalid[0]
        return {
            **_summaries(judged), "decision": "blocked_by_correctness", "reason": "run_invalid",
            "issues": sorted({issue for v in invalid for issue in v.validity["issues"]}),
            "first_failure": first.validity["first_failure"], "reproducible": first.validity["reproducible"],
            "invalid_runs": [v.run_id for v in invalid], "failed_checks": ["run_valid"], "warnings": notes,
            "excluded_runs": [v.run_id for v in excluded],
        }, change
    change = changed_variable(views)
    warnings = list(notes)
    mismatches = compare_fingerprints([(v.run_id, env_from_tags(v.tags)) for v in views], change.variable)
    if mismatches and env_mismatch == "fail":
        raise EnvironmentMismatch(
            "the attempts ran in different environments beyond the changed variable ("
            + "; ".join(mismatches) + "); rerun them in one environment, or pass env_mismatch='warn'")
    if mismatches and env_mismatch == "warn":
        warnings += [f"environment differs: {m}" for m in mismatches]
    running = [v.run_id for v in views if v.state == "running"]
    if running:
        return {**_summaries(judged), "decision": "rerun", "reason": "attempts_in_progress",
                "running_runs": running, "failed_checks": [], "warnings": warnings,
                "excluded_runs": [v.run_id for v in excluded]}, change
    decision = rules.judge(judged["baseline"], judged["candidate"], policy, look=look, max_looks=max_looks,
                           previous_fraction=previous_fraction)
    result = decision.to_dict()
    key = policy.latency_key
    flagged = {arm: [judged[arm][index] for index in indices] for arm, indices in result["contention"].items()}
    for arm, attempts in flagged.items():
        warnings += [f"possible contention: {arm} attempt {record['run_id']} "
                     f"({record.get(key, record['latency_ms']):.4g} ms) is far outside its arm's spread; it stays "
                     "in every count" for record in attempts]
    for arm, summary in (("baseline", decision.baseline), ("candidate", decision.candidate)):
        if summary.contended_runs:  # uncontended only: fastest has no fallback
            warnings.append(f"{summary.contended_runs} of {summary.valid_runs} successful {arm} attempts have no "
                            f"{key} (more than half their steps waited for a CPU, or contention was not measured): "
                            "judged on their raw latency_ms")
    result["contention_runs"] = {arm: [record["run_id"] for record in attempts] for arm, attempts in flagged.items()}
    result["warnings"] = warnings
    result["excluded_runs"] = [v.run_id for v in excluded]
    result.setdefault("failed_checks", [])
    return result, change


def _summaries(judged: dict[str, list[dict]]) -> dict:
    return {arm: rules.ArmSummary.from_runs(judged[arm]).to_dict() for arm in ARMS}
