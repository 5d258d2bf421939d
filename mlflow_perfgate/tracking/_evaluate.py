"""The evaluator: load a group (one search), judge it under a policy, write the decision run."""

from __future__ import annotations

import json
from typing import Any

from .. import rules
from ..errors import InputError, PolicyError
from . import _client, _journal, _reconcile, _report, _views
from ._decision_run import decision_key, decision_target, discard, reparent, wait_for, write_decision
from ._environment import ENV_MISMATCH_MODES
from ._evaluation import Evaluation
from ._group import AttemptView, group_filter, load, load_group
from ._judge import judge_views, objective_metrics
from ._schema import TAG

__all__ = ["AttemptView", "DEFAULT_STALE_AFTER_S", "evaluate_group", "group_filter", "load_group"]

#: A run of the group still RUNNING after this long (from its start) counts as a failed,
#: 'stale' attempt: its process is gone or hung. Younger ones make the answer ``rerun``.
DEFAULT_STALE_AFTER_S = 3600.0


def _sequential_look(tags: dict, notes: list[str]) -> tuple[int | None, int | None, float | None]:
    """The look a sequential comparison reached, from its run's tags (``None, None, None`` for a single look).

    The third value is the information fraction its earlier looks had spent
    (``perfgate.look_previous_fraction``; ``None`` for a group of an earlier release, whose looks
    were counted one by one).

    A group collected by ``compare --until-decisive`` was judged at each look with its levels
    spent across the looks; judged again at one look with the full alpha, the same attempts
    could be accepted where the sequential design answered rerun. So it is judged at the look
    the comparison reached, and the decision says so.
    """
    look, last = tags.get(TAG.LOOK), tags.get(TAG.MAX_LOOKS)
    if look is None or last is None:
        return None, None, None
    if not (look.isdigit() and last.isdigit() and 1 <= int(look) <= int(last)):
        notes.append(f"the comparison run's {TAG.LOOK}={look!r} and {TAG.MAX_LOOKS}={last!r} are not a look: "
                     "judged as a single look")
        return None, None, None
    notes.append(f"judged at look {look} of {last}: these attempts were collected by a sequential comparison "
                 "(compare --until-decisive), whose alpha and confidence are spent across its looks; pass look and "
                 "max_looks to judge them otherwise")
    previous = tags.get(TAG.LOOK_PREVIOUS)
    try:
        previous = None if previous is None else float(previous)
    except ValueError:
        previous = None
    if previous is not None and not 0 <= previous < int(look) / int(last):
        previous = None
    return int(look), int(last), previous


def _common_parent(views: list[AttemptView], mlflow_client, group: str, notes: list[str]):
    """The comparison run every attempt nests under, if it is this group's (another group's is left alone)."""
    parents = {v.parent_run_id for v in views if not v.deleted}
    if len(parents) != 1 or None in parents:
        return None
    parent = _client.retrying(lambda: mlflow_client.get_run(next(iter(parents))))
    other = parent.data.tags.get(TAG.GROUP)
    if other is not None and other != group:
        notes.append(f"the attempts nest under run {parent.info.run_id} of group {other!r}: the decision is not "
                     "written onto it")
        return None
    return parent


def _as_configured(policy: rules.Policy, parent, configured: dict[str, bool], notes: list[str]) -> rules.Policy:
    """The method, latency and mode (with its margin) the group's comparison was configured with, for those
    the caller left out.

    A comparison run records how ``compare`` judges it (``perfgate.configured_method``,
    ``perfgate.configured_latency``, and its planned policy ``perfgate.policy``, defaults
    included): judged again without saying, its group is judged the same way and asked the same
    question, not another rule's default.
    """
    if parent is None:
        return policy
    tags = parent.data.tags
    changes = {name: tags[key] for name, key in (("method", TAG.CONFIGURED_METHOD), ("latency", TAG.CONFIGURED_LATENCY))
               if configured.get(name) and tags.get(key) and tags[key] != getattr(policy, name)}
    if configured.get("mode") and tags.get(TAG.POLICY):  # the question it was asked (and its margin), not another
        try:
            planned = json.loads(tags[TAG.POLICY])
        except ValueError:
            planned = {}
        if isinstance(planned, dict) and planned.get("mode") in ("improvement", "non_regression") and \
                planned["mode"] != policy.mode:
            changes["mode"] = planned["mode"]
            if configured.get("margin") and isinstance(planned.get("margin"), (int, float)):
                changes["margin"] = planned["margin"]
    if not changes:
        return policy
    try:
        return policy.replace(**changes)
    except PolicyError as exc:  # a comparison of a plugin not installed here, say: the defaults, said
        notes.append(f"the comparison's configuration ({changes}) cannot judge here ({exc}): judged by "
                     f"{policy.method} on {policy.latency}")
        return policy


def evaluate_group(group: str, *, experiment_name: str | None = None,
                   stale_after_s: float = DEFAULT_STALE_AFTER_S, objective: str | None = None,
                   method: str | None = None, mode: str | None = None, margin: float | None = None,
                   env_mismatch: str = "fail", alpha: float | None = None, confidence: float | None = None,
                   look: int | None = None, max_looks: int | None = None, dry_run: bool = False,
                   policy: rules.Policy | None = None, latency: str | None = None,
                   previous_fraction: float | None = None, **thresholds: Any) -> dict:
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
        method: ``seed`` (the default: the specification's rule, exact), ``robust`` or another
            registered method; every method that judges the objective has its figures logged.
            Left out (with ``latency``), a group whose comparison run says how ``compare``
            judges it (``perfgate.configured_method``, ``perfgate.configured_latency``) is judged
            so: re-evaluating a comparison gives its own rule's answer.
        mode: ``improvement`` (the default: the candidate must be faster) or ``non_regression`` (it may not
            be slower than ``margin``, for CI). Left out, a group whose comparison run planned another
            mode (``perfgate.policy``) is asked that question, with that margin unless one is given.
        margin: the slowdown tolerated in ``non_regression`` (default 0.05).
        env_mismatch: ``fail`` (default: refuse arms whose environment fingerprints differ
            beyond the changed variable), ``warn`` or ``ignore``.
        alpha, confidence: the statistical methods' levels (the policy's defaults when None).
        look, max_looks: the look number of a sequential comparison (``--until-decisive``). When
            neither is given and the group's comparison run was sequential (tags
            ``perfgate.look`` and ``perfgate.max_looks``), the look it reached, with a warning.
        previous_fraction: with ``look`` and ``max_looks`` counted in attempts per arm, the
            information fraction the comparison's earlier looks spent (``compare --until-decisive``
            passes it; read from ``perfgate.look_previous_fraction`` with the look).
        dry_run: judge without writing anything (the interim looks of a sequential comparison).
        policy: a :class:`~mlflow_perfgate.rules.Policy` instead of the options above. The
            options it was given (``policy.given``) are judged as given; those it left to their
            defaults are filled from the group's comparison run as the options above are (its
            objective, configured method and latency, planned mode and margin); a
            ``policy.settled()`` is judged exactly as it is.
        latency: ``raw`` (default: each attempt's ``latency_ms``), ``uncontended`` (its
            ``uncontended_latency_ms`` where it has one), ``fastest`` (its ``fastest_step_ms``,
            the fastest measured step) or ``p10`` (its ``step_p10_ms``, the 10th percentile of
            its measured steps); see ``rules.Policy``.
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
        policy = rules.Policy(objective=objective or "latency", method=method or "seed", mode=mode or "improvement",
                              margin=margin,
                              alpha=alpha, confidence=confidence, latency=latency, **thresholds)
        objective_given = objective is not None
        configured = {name: value is None for name, value in (("method", method), ("latency", latency),
                                                              ("mode", mode), ("margin", margin))}
    else:
        if not isinstance(policy, rules.Policy):
            raise PolicyError(f"policy must be a mlflow_perfgate.Policy, got {type(policy).__name__}")
        given = {name: value for name, value in (("objective", objective), ("method", method), ("mode", mode),
                                                 ("margin", margin), ("alpha", alpha), ("confidence", confidence),
                                                 ("latency", latency), *thresholds.items()) if value is not None}
        if given:  # the policy says all of it: an option beside it would be ignored without a word
            raise PolicyError(f"give either policy or the options it holds, not both: got policy and "
                              f"{sorted(given)}; use policy.replace(...) to change them")
        objective_given = "objective" in policy.given  # what its maker left out: as the keywords left out
        configured = {name: name not in policy.given for name in ("method", "latency", "mode", "margin")}
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    found = load(group, experiment_id, mlflow_client, stale_after_s=stale_after_s)
    if not found.attempts:
        raise InputError(f"no attempts of group {group!r} in {_client.experiment_label(experiment_name, experiment_id)} "
                         f"of {_client.redact_uri(mlflow_client.tracking_uri)}")
    views = found.attempts + _missing_since(found, mlflow_client)
    notes = found.conflicts + _set_aside(views)
    parent = _common_parent(views, mlflow_client, group, notes)
    if not objective_given and parent is not None and parent.data.tags.get(TAG.OBJECTIVE):
        policy = policy.replace(objective=parent.data.tags[TAG.OBJECTIVE])
    policy = _as_configured(policy, parent, configured, notes)
    if look is None and max_looks is None and parent is not None:
        look, max_looks, previous_fraction = _sequential_look(parent.data.tags, notes)
    judged = judge_views(views, policy, env_mismatch, look=look, max_looks=max_looks,
                         previous_fraction=previous_fraction)
    warnings = notes + list(judged.notes)
    waiting = _journal.pending(tracking_uri=mlflow_client.tracking_uri, group=group)
    verdict, reason = judged.decision.verdict, judged.decision.reason
    if waiting:
        # Their outcomes (failures included) are unknown to MLflow: deciding now could drop
        # failed attempts from the denominator.
        warnings.append(f"{len(waiting)} attempts of this group wait in the journal {_journal.journal_path()}; "
                        "run 'mlflow-perfgate sync', then evaluate again")
        if verdict in ("accept", "reject"):
            verdict, reason = "rerun", "attempts_not_synced"
    warnings += [f"journal line skipped: {line}" for line in _journal.skipped_lines()[:5]]
    context = {} if previous_fraction is None else {"previous_fraction": previous_fraction}
    evaluation = Evaluation(
        group=group, experiment_id=experiment_id, policy=policy, judged=judged, views=tuple(views),
        attempts=tuple({**v.record(objective_metrics()), **v.contention(), "arm": v.arm, "state": v.state,
                        "attempt_id": v.attempt_id, "start_time": v.start_time, "deleted": v.deleted}
                       for v in views),
        decision_key=decision_key(group, views, policy.options(), env_mismatch=env_mismatch, look=look,
                                  max_looks=max_looks, waiting=len(waiting), **context),
        verdict=verdict, reason=reason, warnings=warnings, duplicate_run_ids=tuple(found.duplicates),
        configuration=None if parent is None else parent.data.tags.get(TAG.CONFIGURATION))
    if dry_run:
        return evaluation.to_dict()
    return _write(evaluation, found, parent, mlflow_client, stale_after_s)


def _write(evaluation: Evaluation, found, parent, mlflow_client, stale_after_s: float) -> dict:
    """Reconcile the group's runs, claim the decision run (or adopt a twin's), write it; the public dict."""
    # what the UI shows follows what was counted (the rule sync and reap apply too)
    fixes = _reconcile.reconcile(found.runs, stale_after_s=stale_after_s)
    evaluation.reconciled_run_ids = tuple(_reconcile.apply(mlflow_client, fixes))
    if fixes:
        evaluation.warnings.append(f"{len(fixes)} runs of this group were shown otherwise than counted and were "
                                   "ended as counted: " + "; ".join(f"run {fix.run_id} {fix.status} ({fix.why})"
                                                                    for fix in fixes[:5]))
    same = [run for run in found.decisions if run.data.tags.get(TAG.DECISION_KEY) == evaluation.decision_key]
    if same:  # judged before, on exactly these attempts and this policy: the same decision run
        decision_run_id, role = same[-1].info.run_id, "adopt"
    else:
        decision_run_id, role = decision_target(parent, mlflow_client, evaluation.experiment_id, evaluation.group,
                                                evaluation.decision_key, list(evaluation.views))
    evaluation.decision_run_id = decision_run_id
    evaluation.decision_run_url = _client.run_link(mlflow_client.tracking_uri, evaluation.experiment_id,
                                                   decision_run_id)
    if role == "adopt":
        winner = wait_for(mlflow_client, decision_run_id)
        _views.attach_link(mlflow_client, evaluation, winner.data.tags.get(TAG.VIEW_KEY))
        result = evaluation.to_dict()
        result["report"] = _report.decision_markdown(result)
        return result
    try:
        result = write_decision(mlflow_client, decision_run_id, evaluation)
    except BaseException:
        if role == "write_new":
            discard(mlflow_client, decision_run_id)  # no half-written decision run stays listed
        raise
    if role == "write_new":
        reparent(mlflow_client, list(evaluation.views), decision_run_id)
    _report.write_step_summary(result["report"])
    return result


def _set_aside(views: list[AttemptView]) -> list[str]:
    """Warnings for attempts deleted in the UI: they still count, so that no failure drops out unseen."""
    deleted = [v for v in views if v.deleted]
    if not deleted:
        return []
    listed = ", ".join(f"{v.run_id} ({v.arm}, {'ok' if v.state == 'ok' else v.failure})" for v in deleted[:10])
    return [f"{len(deleted)} attempts of this group were deleted and still count, so that no failure leaves the "
            f"denominator unseen: {listed}; restore them, or exclude one with 'mlflow-perfgate forget' and a reason"]


def _missing_since(found, mlflow_client) -> list[AttemptView]:
    """Attempts an earlier decision judged that the store no longer holds (purged): judged as recorded then."""
    if not found.decisions:
        return []
    latest = found.decisions[0]
    try:
        judged = int(latest.data.tags.get(TAG.ATTEMPTS_JUDGED, "0"))
    except ValueError:
        return []
    before = [v for v in found.attempts if v.start_time <= (latest.info.start_time or 0)]
    if judged <= len(before):
        return []  # every attempt it judged is still here (deleted ones included)
    present = {v.attempt_id for v in found.attempts}
    missing = []
    for attempt in _report.read_decision(latest.info.run_id).get("attempts", []):
        if attempt.get("attempt_id") in present or attempt.get("state") == "running":
            continue
        ok = bool(attempt.get("ok"))
        missing.append(AttemptView(
            run_id=attempt.get("run_id") or attempt["attempt_id"], arm=attempt["arm"], attempt_id=attempt["attempt_id"],
            state="ok" if ok else "failed", start_time=attempt.get("start_time") or 0, status="DELETED", params={},
            latency_ms=attempt.get("latency_ms") if ok else None, quality=attempt.get("quality") if ok else None,
            failure=None if ok else (attempt.get("failure") or "unspecified"), deleted=True))
    return missing
