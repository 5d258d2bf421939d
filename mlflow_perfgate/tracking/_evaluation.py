"""A judged group as it travels through ``tracking``: records, made into the public dict once.

The evaluator's order (:func:`._judge.judge_views`) answers with a :class:`Judged`: the rule's
:class:`~mlflow_perfgate.rules.Decision` (or the evaluator's own answer, correctness or attempts
in progress, with the arms' summaries), the changed variable and the notes. The evaluator
(:func:`._evaluate.evaluate_group`) completes it into an :class:`Evaluation`: the group, the policy,
the attempts judged, the decision key, where the decision is written and its links. The decision
run's params, tags and metrics and the attempts' view read the record's fields.

:meth:`Evaluation.to_dict` makes the one plain dict of the public boundary: what
``evaluate_group`` returns, what ``decision.json`` holds, and what the report
(:mod:`._report`, whose functions take that dict as users do) renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .. import rules
from ..rules import METHODS, OBJECTIVES
from ._group import AttemptView

__all__ = ["Change", "Evaluation", "Judged"]


@dataclass(frozen=True)
class Change:
    """The changed variable of a group and its value in each arm (``None`` when not known)."""

    variable: str | None = None
    baseline_value: str | None = None
    candidate_value: str | None = None


@dataclass(frozen=True)
class Judged:
    """What the evaluator's order answered for a group's attempts.

    Attributes:
        decision: the rule's decision; for the evaluator's own answers (``blocked_by_correctness``,
            ``attempts_in_progress``) a decision without checks, holding the arms' summaries.
        change: the changed variable.
        notes: warnings for the report (excluded attempts, environments, contention).
        excluded_runs: attempts excluded by ``forget``, not judged.
        answer: the evaluator's own answer's details (``issues``, ``first_failure``,
            ``reproducible``, ``invalid_runs``; or ``running_runs``), empty for the rule's.
        failed_checks: the checks that failed (the rule's, or ``run_valid``).
        contention_runs: for the rule's decision, the run ids of the attempts flagged as
            contended, by arm (``None`` for the evaluator's own answers).
    """

    decision: rules.Decision
    change: Change
    notes: tuple[str, ...] = ()
    excluded_runs: tuple[str, ...] = ()
    answer: Mapping[str, Any] = field(default_factory=dict)
    failed_checks: tuple[str, ...] = ()
    contention_runs: Mapping[str, tuple[str, ...]] | None = None

    @property
    def by_rule(self) -> bool:
        """Whether the policy's rule decided (not the evaluator's own answer)."""
        return self.contention_runs is not None

    def plain(self) -> dict:
        """The judged part of the public dict, in the first release's layout."""
        if self.by_rule:
            result = self.decision.to_dict()
            result["contention_runs"] = {arm: list(ids) for arm, ids in self.contention_runs.items()}
        else:
            result = {**self.decision.to_dict(labels=(), messages=False, advice=False), **self.answer}
        result["failed_checks"] = list(self.failed_checks)
        return result


@dataclass
class Evaluation:
    """A group judged under a policy, and where its decision is (or would be) written.

    ``verdict`` and ``reason`` start as the judged decision's; the evaluator changes them only
    where it must (attempts still in the journal: ``rerun``, ``attempts_not_synced``). The link
    fields are filled as the decision run is claimed and written.
    """

    group: str
    experiment_id: str
    policy: rules.Policy
    judged: Judged
    views: tuple[AttemptView, ...]
    attempts: tuple[Mapping[str, Any], ...]
    decision_key: str
    verdict: str
    reason: str
    warnings: list[str] = field(default_factory=list)
    duplicate_run_ids: tuple[str, ...] = ()
    reconciled_run_ids: tuple[str, ...] | None = None
    decision_run_id: str | None = None
    decision_run_url: str | None = None
    view_key: str | None = None
    view_url: str | None = None
    report: str | None = None
    #: the comparison run's ``perfgate.configuration``: how its attempts were measured and judged, in words
    configuration: str | None = None

    # what the decision is, as the decision run's params, tags and metrics read it
    @property
    def decision(self) -> rules.Decision:
        return self.judged.decision

    @property
    def change(self) -> Change:
        return self.judged.change

    @property
    def objective(self) -> str:
        return self.policy.objective

    @property
    def objective_entry(self):
        """The objective's registry entry (``None`` when it is not registered in this process)."""
        return OBJECTIVES[self.objective] if self.objective in OBJECTIVES else None

    @property
    def method(self) -> str:
        """The method that decided: the rule's own (a paired request without rounds is judged by robust);
        the policy's for the evaluator's own answers (``judge_views`` gives them the policy's method)."""
        return self.decision.method

    @property
    def method_entry(self):
        return METHODS[self.method] if self.method in METHODS else None

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return self.judged.failed_checks

    @property
    def run_ids(self) -> list[str]:
        return [view.run_id for view in self.views]

    def arm(self, name: str) -> Mapping[str, Any]:
        """An arm's summary figures, by the names of the summary dict (``median_ms``, ...)."""
        summary = self.decision.baseline if name == "baseline" else self.decision.candidate
        return summary.to_dict()

    def figure(self, name: str) -> Any:
        """One of the rule's figures or advice (``p_value``, ``recommended_attempts``), or ``None``."""
        if name in self.decision.figures:
            return self.decision.figures[name]
        return self.decision.advice.get(name)

    @property
    def companions(self) -> Mapping[str, Mapping[str, Any]]:
        """Each registered method's short answer beside the decision (``{"seed": {...}}``)."""
        return {name: summary for name, summary in self.decision.companions.items() if "decision" in summary}

    def decided(self, verdict: str, reason: str) -> "Evaluation":
        """The same evaluation with another verdict (the evaluator's own overrides)."""
        return replace(self, verdict=verdict, reason=reason)

    def to_dict(self) -> dict:
        """The public dict: ``evaluate_group``'s return value and ``decision.json``'s content.

        The judged decision's keys (summaries, checks, figures, messages, companions) in the
        first release's layout, then the evaluator's: ``warnings``, ``group``, ``experiment_id``,
        ``thresholds``, ``objective``, ``mode``, ``method`` (the one that decided),
        ``method_asked``, ``latency``, the changed variable and its values, ``run_ids``,
        ``attempts``, ``decision_key`` and the decision run's id and links.
        """
        result = self.judged.plain()
        result["decision"], result["reason"] = self.verdict, self.reason
        result["warnings"] = list(self.warnings)
        result["excluded_runs"] = list(self.judged.excluded_runs)
        result.update(
            group=self.group, experiment_id=self.experiment_id, thresholds=self.policy.objective_thresholds(),
            objective=self.policy.objective, mode=self.policy.mode, method=self.method,
            method_asked=self.policy.method, latency=self.policy.latency,
            changed_variable=self.change.variable, baseline_value=self.change.baseline_value,
            candidate_value=self.change.candidate_value, run_ids=self.run_ids,
            duplicate_run_ids=list(self.duplicate_run_ids), attempts=[dict(a) for a in self.attempts],
            decision_key=self.decision_key, decision_run_id=self.decision_run_id,
            decision_run_url=self.decision_run_url, view_key=self.view_key, view_url=self.view_url,
            report=self.report)
        if self.configuration is not None:
            result["configuration"] = self.configuration
        if self.reconciled_run_ids is not None:
            result["reconciled_run_ids"] = list(self.reconciled_run_ids)
        return result
