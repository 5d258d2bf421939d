"""The evaluator: load a group (one search), judge it under a policy, write the decision run."""

from __future__ import annotations

import contextlib
from typing import Any

from .. import rules
from ..rules._errors import InputError
from . import _client, _journal, _report
from ._decision_run import decision_target, reparent, write_decision
from ._environment import ENV_MISMATCH_MODES
from ._group import AttemptView, group_filter, load_group
from ._judge import judge_views
from ._schema import TAG

__all__ = ["AttemptView", "DEFAULT_STALE_AFTER_S", "evaluate_group", "group_filter", "load_group"]

#: A run of the group still RUNNING after this long (from its start) counts as a failed,
#: 'stale' attempt: its process is gone or hung. Younger ones make the answer ``rerun``.
DEFAULT_STALE_AFTER_S = 3600.0


def _common_parent(views: list[AttemptView], mlflow_client):
    parents = {v.parent_run_id for v in views}
    if len(parents) == 1 and None not in parents:
        return _client.retrying(lambda: mlflow_client.get_run(next(iter(parents))))
    return None


def evaluate_group(group: str, *, experiment_name: str | None = None,
                   stale_after_s: float = DEFAULT_STALE_AFTER_S, objective: str | None = None,
                   method: str = "seed", mode: str = "improvement", margin: float | None = None,
                   env_mismatch: str = "fail", alpha: float | None = None, confidence: float | None = None,
                   look: int | None = None, max_looks: int | None = None, dry_run: bool = False,
                   policy: rules.Policy | None = None, **thresholds: Any) -> dict:
    """Judge a group's attempts and log the decision run.

    Finds the attempts with one paginated search, then applies in order: correctness first
    (any attempt with ``run_valid`` false gives ``blocked_by_correctness``); the
    single-variable rule on the logged params; the environment fingerprints
    (``env_mismatch``); in-progress attempts (``rerun``, ``attempts_in_progress``); and the
    policy's rule (``rules.judge``). Failed, crashed and stale attempts stay in the
    failure-rate denominator.

    The decision is written onto the attempts' comparison run when they have one (and it is
    undecided), else onto a new run under which the attempts are nested.

    Args:
        group: the comparison id.
        experiment_name: default ``MLFLOW_EXPERIMENT_NAME`` or MLflow's Default experiment.
        stale_after_s: a RUNNING attempt older than this counts as failed (``stale``).
        objective: a registered objective (``latency``, ``memory``, ``throughput``); default:
            the comparison run's objective (from its diagnosis), else ``latency``.
        method: ``seed`` (the specification's rule, exact), ``robust`` or another registered
            method; every method that judges the objective has its figures logged.
        mode: ``improvement`` (the candidate must be faster) or ``non_regression`` (it may not
            be slower than ``margin``, for CI).
        margin: the slowdown tolerated in ``non_regression`` (default 0.05).
        env_mismatch: ``fail`` (default: refuse arms whose environment fingerprints differ
            beyond the changed variable), ``warn`` or ``ignore``.
        alpha, confidence: the statistical methods' levels (the policy's defaults when None).
        look, max_looks: the look number of a sequential comparison (``--until-decisive``).
        dry_run: judge without writing anything (the interim looks of a sequential comparison).
        policy: a :class:`~mlflow_perfgate.rules.Policy` instead of the options above (its
            objective is used as given).
        **thresholds: the specification's (``min_valid_runs``, ``min_improvement``,
            ``quality_tolerance``, ``maximum_failure_rate``, ``maximum_p95_ratio``) and the
            objectives' own (``min_memory_reduction``, ``maximum_latency_cost``).

    Returns:
        The rule's result (``baseline``, ``candidate`` summaries, the checks) with
        ``decision``, ``reason``, ``failed_checks``, ``decision_run_id``, ``group``,
        ``objective``, ``method``, ``mode``, ``changed_variable``, ``baseline_value``,
        ``candidate_value``, ``run_ids``, ``thresholds``, ``warnings``, ``experiment_id`` and
        ``report`` (the markdown logged, ``None`` for a dry run).

    Raises:
        PolicyError: bad thresholds or options (nothing is read).
        InputError: no attempts, an unknown experiment, a run that cannot be judged.
        SingleVariableError, EnvironmentMismatch: the group breaks those rules.
        StoreRefused, StoreUnavailable: the store refused or could not be reached.
        No decision run is written in any of these cases.
    """
    if not isinstance(group, str) or not group:
        raise InputError(f"group must be a non-empty string, got {group!r}")
    if isinstance(stale_after_s, bool) or not isinstance(stale_after_s, (int, float)) or not stale_after_s > 0:
        raise InputError(f"stale_after_s must be a number > 0, got {stale_after_s!r}")
    if env_mismatch not in ENV_MISMATCH_MODES:
        raise InputError(f"env_mismatch must be one of {list(ENV_MISMATCH_MODES)}, got {env_mismatch!r}")
    if policy is None:
        policy = rules.Policy(objective=objective or "latency", method=method, mode=mode, margin=margin,
                              alpha=alpha, confidence=confidence, **thresholds)
        objective_given = objective is not None
    else:
        objective_given = True
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    views, duplicates = load_group(group, experiment_id, mlflow_client, stale_after_s=stale_after_s)
    if not views:
        raise InputError(f"no attempts of group {group!r} in experiment {experiment_id}")
    parent = _common_parent(views, mlflow_client)
    if not objective_given and parent is not None and parent.data.tags.get(TAG.OBJECTIVE):
        policy = policy.replace(objective=parent.data.tags[TAG.OBJECTIVE])
    result, change = judge_views(views, policy, env_mismatch, look=look, max_looks=max_looks)
    waiting = _journal.pending(tracking_uri=mlflow_client.tracking_uri, group=group)
    if waiting:
        # Their outcomes (failures included) are unknown to MLflow: deciding now could drop
        # failed attempts from the denominator.
        result.setdefault("warnings", []).append(
            f"{len(waiting)} attempts of this group wait in the journal {_journal.journal_path()}; "
            "run 'mlflow-perfgate sync', then evaluate again")
        if result["decision"] in ("accept", "reject"):
            result.update(decision="rerun", reason="attempts_not_synced")
    result.update(
        group=group, experiment_id=experiment_id, thresholds=policy.objective_thresholds(),
        objective=policy.objective, method=policy.method, mode=policy.mode,
        changed_variable=change.variable, baseline_value=change.baseline_value,
        candidate_value=change.candidate_value, run_ids=[v.run_id for v in views],
        duplicate_run_ids=duplicates,
        attempts=[{**v.record(), "arm": v.arm, "state": v.state, "attempt_id": v.attempt_id,
                   "start_time": v.start_time} for v in views],
    )
    result.setdefault("warnings", [])
    result.setdefault("failed_checks", [])
    if dry_run:
        result.update(decision_run_id=None, decision_run_url=None, report=None)
        return result
    decision_run_id, moves = decision_target(parent, mlflow_client, experiment_id, group)
    result["decision_run_id"] = decision_run_id
    try:
        result["report"] = write_decision(mlflow_client, decision_run_id, result)
    except BaseException:
        if decision_run_id != (parent.info.run_id if parent is not None else None):
            with contextlib.suppress(Exception):  # no half-written decision run stays listed
                mlflow_client.delete_run(decision_run_id)
        raise
    result["decision_run_url"] = _client.run_link(mlflow_client.tracking_uri, experiment_id, decision_run_id)
    if moves:
        reparent(mlflow_client, views, decision_run_id)
    _report.write_step_summary(result["report"])
    return result
