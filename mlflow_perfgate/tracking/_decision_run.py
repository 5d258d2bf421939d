"""Writing the decision run: where it goes, its params, tags, metrics and files, and re-parenting the attempts."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunStatus

from ..errors import StoreRefused, StoreUnavailable
from ..rules import METHODS
from . import _client, _report, _views
from ._environment import process_alive, process_identity
from ._decision_frame import ARM_FIGURES, arm_figure_names, figure_names
from ._evaluation import Evaluation
from ._group import AttemptView
from ._schema import (ARMS, HEADLINE_DECIDING, KIND_DECISION, KIND_SUITE, MAX_PARAM_VALUE, MAX_TAG_VALUE, PARAM, TAG,
                      arm_metric, fit, group_key)

__all__ = ["ARM_FIGURES", "claim", "decision_key", "decision_target", "figure_names", "reparent", "summary_metrics",
           "verdict_name", "wait_for", "write_decision"]

def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def summary_metrics(evaluation: Evaluation) -> dict[str, float]:
    """The decision run's metrics: each arm's figures, the objective's, the methods' (declared in the registries)."""
    metrics: dict[str, float] = {}

    def put(name: str, value: Any) -> None:
        number = _number(value)
        if name and number is not None:
            metrics.setdefault(name, number)

    deciding = evaluation.decision.deciding
    if deciding is not None:  # the headline: the deciding method's figures, whatever the method
        put("ratio_estimate", deciding.ratio)
        put("ratio_ci_low", deciding.ratio_ci_low)
        put("ratio_ci_high", deciding.ratio_ci_high)
        put("p_value", deciding.p_value)
        put("improvement", deciding.improvement)
        put("typical_step_ratio", deciding.typical_ratio)
        put("typical_step_ci_low", deciding.typical_ci_low)
        put("typical_step_ci_high", deciding.typical_ci_high)
        put("mean_step_ratio", deciding.mean_ratio)
        put("boundary", deciding.boundary)
        put("boundary_p_value", deciding.boundary_p_value)
    for arm in ARMS:
        summary = evaluation.arm(arm)
        for key in arm_figure_names():
            put(arm_metric(arm, key), summary.get(key))
    objective = evaluation.objective_entry
    for figure in objective.figures if objective else ():
        put(figure.metric_name, evaluation.figure(figure.name))
    put("recommended_attempts", evaluation.figure("recommended_attempts"))
    method = evaluation.method_entry
    for figure in method.figures if method else ():
        put(figure.metric_name, evaluation.figure(figure.name))
    for name, summary in evaluation.decision.companions.items():
        if name in METHODS:
            for figure in METHODS[name].figures:
                put(figure.metric_name, summary.get(figure.name))
    return metrics


def _params(evaluation: Evaluation) -> dict[str, str]:
    params = {PARAM.of(key): str(value) for key, value in evaluation.policy.objective_thresholds().items()}
    if evaluation.policy.mode == "non_regression":
        params[PARAM.MARGIN] = str(evaluation.figure("margin"))
    method = evaluation.method_entry
    for figure in method.figures if method else ():
        if not figure.metric_name and evaluation.figure(figure.name) is not None:
            params[PARAM.of(figure.name)] = str(evaluation.figure(figure.name))  # a level, such as alpha at this look
    deciding = evaluation.decision.deciding
    if deciding is not None and deciding.test:
        params[PARAM.TEST] = _text(deciding.test, MAX_PARAM_VALUE)
    change = evaluation.change
    params.update({
        PARAM.CHANGED_VARIABLE: _text(change.variable, MAX_PARAM_VALUE),
        PARAM.BASELINE_VALUE: _text(change.baseline_value, MAX_PARAM_VALUE),
        PARAM.CANDIDATE_VALUE: _text(change.candidate_value, MAX_PARAM_VALUE),
    })
    return params


def _text(value: Any, limit: int) -> str:
    return fit("" if value is None else str(value), limit)


_VERDICTS = "ACCEPT|REJECT|RERUN|BLOCKED BY CORRECTNESS"
#: A verdict at the start of a run's name (``REJECT: compare my-change``), or at its end as earlier
#: releases wrote it (``compare my-change: REJECT``): replaced when it is decided again.
_NAMED_VERDICT = re.compile(rf"^(?:{_VERDICTS}): |: (?:{_VERDICTS})$")


def verdict_name(name: str | None, decision: str, default: str = "decision") -> str:
    """The run's name with the verdict at its start: ``compare my-change`` -> ``REJECT: compare my-change``.

    The runs list truncates a long name at its end: the verdict first is seen at any width. A
    verdict already there (at the start, or at the end where an earlier release put it) is replaced.
    """
    base = _NAMED_VERDICT.sub("", name or default) or default
    return f"{_report.verdict_word(decision)}: {base}"


def _tags(evaluation: Evaluation, reason_text: str, note: str) -> dict[str, str]:
    tags = {
        TAG.KIND: KIND_DECISION,
        TAG.GROUP: evaluation.group,
        TAG.GROUP_KEY: group_key(evaluation.group),
        TAG.DECISION: evaluation.verdict,
        TAG.REASON: evaluation.reason,
        TAG.REASON_TEXT: _text(reason_text, MAX_TAG_VALUE),
        TAG.FAILED_CHECKS: ",".join(evaluation.failed_checks),
        TAG.CHANGED_VARIABLE: _text(evaluation.change.variable, MAX_TAG_VALUE),
        TAG.OBJECTIVE: evaluation.objective,
        TAG.METHOD: evaluation.method,
        TAG.MODE: evaluation.policy.mode,
        TAG.LATENCY: evaluation.policy.latency,
        TAG.NOTE: _report.fit_note(note),
        TAG.DECISION_KEY: evaluation.decision_key,
        TAG.ATTEMPTS_JUDGED: str(len(evaluation.views)),
        TAG.HEADLINE: HEADLINE_DECIDING,
    }
    if evaluation.view_key:
        tags[TAG.VIEW_KEY] = evaluation.view_key
    for name, summary in evaluation.companions.items():
        if name in METHODS:
            tags[TAG.method_decision(name)] = summary["decision"]
    return tags


def decision_key(group: str, views: list[AttemptView], policy_options: dict, **context: Any) -> str:
    """A digest of what a decision judged (each attempt and its state) and how (the policy, the look)."""
    payload = {"group": group, "policy": policy_options, "context": context,
               "attempts": sorted([v.attempt_id, v.state, v.deleted] for v in views)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


#: How long an evaluator that lost the race waits for the winner's decision run to be written.
WAIT_FOR_WINNER_S = 120.0


def decision_target(parent, mlflow_client, experiment_id: str, group: str, key: str,
                    views: list[AttemptView] = ()) -> tuple[str, str]:
    """Where this evaluator writes its decision, racing twins included: ``(run id, role)``.

    ``role`` is ``"write"`` (this evaluator writes the run; ``write_new`` when it is a new run the
    attempts move under) or ``"adopt"`` (a twin judging the same attempts won; its run is the
    decision). Twins agree through a param, the one write MLflow makes first-come-only (it
    refuses to change a param's value): an undecided comparison run is claimed whole; otherwise
    each evaluator creates a decision run and claims an attempt it judged for it
    (:func:`_claim`), and the losers delete theirs. A new decision run nests under the attempts'
    common parent when that run is not one of ours (the project run of ``mlflow run -e
    record``), so the UI shows project run > decision > attempts.
    """
    if parent is not None and parent.data.tags.get(TAG.COMPARISON) == "true" and TAG.DECISION not in parent.data.tags:
        claim = f"{key}:{uuid.uuid4().hex}"
        try:
            _client.retrying(lambda: mlflow_client.log_param(parent.info.run_id, PARAM.DECISION_CLAIM, claim))
            return parent.info.run_id, "write"
        except StoreRefused:
            taken = _client.retrying(lambda: mlflow_client.get_run(parent.info.run_id)).data.params.get(
                PARAM.DECISION_CLAIM, "")
            if taken.split(":")[0] == key:
                return parent.info.run_id, "adopt"
            if not taken:
                raise
    tags = {TAG.KIND: KIND_DECISION, TAG.GROUP: group, TAG.GROUP_KEY: group_key(group), TAG.DECISION_KEY: key,
            TAG.SUPERVISOR: process_identity()}  # its writer: a twin can tell when it died mid-write
    if parent is not None and parent.data.tags.get(TAG.COMPARISON) == "true":
        # decided before: a new decision nests under the comparison, attempts stay put
        tags[TAG.PARENT] = parent.info.run_id
        run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, run_name="decision", tags=tags))
        role = "write"
    else:
        if parent is not None and TAG.KIND not in parent.data.tags:
            # the attempts' common parent is not ours (the project run of ``mlflow run -e record``): the
            # decision nests under it, and the attempts under the decision
            tags[TAG.PARENT] = parent.info.run_id
        run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, run_name=f"decision {group[:60]}",
                                                                tags=tags))
        role = "write_new"
    winner = _claim(mlflow_client, list(views), key, run.info.run_id)
    return (winner, "adopt") if winner != run.info.run_id else (run.info.run_id, role)


#: How many numbered claims the first place may carry once every place's claim is spent.
_MORE_CLAIMS = 64


def _claim(mlflow_client, views: list[AttemptView], key: str, run_id: str) -> str:
    """The decision run the evaluators of one look (``key``: the same attempts, the same policy) agree on.

    The places are the judged attempts, newest first (:func:`claim`). Starting times play no
    part: a twin whose run was created earlier but claims later cannot win a second time.
    """
    anchors = sorted((v for v in views if not v.deleted and v.status != "DELETED"),
                     key=lambda v: (v.start_time, v.run_id), reverse=True)
    if not anchors:
        return run_id  # nothing judged remains to claim on (never the case for a judged look)
    return claim(mlflow_client, [v.run_id for v in anchors], key, run_id, PARAM.DECISION_CLAIM)


def claim(mlflow_client, anchors: list[str], key: str, run_id: str, name: str) -> str:
    """The run that twins (writers of the same ``key``) agree on, through params of the ``anchors``.

    Every twin walks the same list of places, the param ``name`` on each anchor run in turn,
    then numbered ones (``name.2``, ...) on the first, and tries to write ``<key>:<its run
    id>`` at each: MLflow keeps the first value written, so at any place one twin wins and the
    others read its run id. A place that holds another key's claim is passed; one whose run
    ended FAILED or KILLED or was deleted (its writer died) is passed too (that never reverts,
    so every twin passes it alike). A twin that loses, or cannot claim, deletes its own run.
    """
    try:
        winner = _walk(mlflow_client, anchors, key, run_id, name)
    except BaseException:
        discard(mlflow_client, run_id)
        raise
    if winner != run_id:
        discard(mlflow_client, run_id)
    return winner


def discard(mlflow_client, run_id: str) -> None:
    """Delete a run this evaluator made and will not write, ended KILLED first (MLflow cannot end a
    deleted run, and a deleted run left RUNNING reads as one still being written). Best effort:
    a run that cannot be ended or deleted now stays for the next evaluation to pass."""
    with contextlib.suppress(Exception):
        mlflow_client.set_terminated(run_id, "KILLED")
    with contextlib.suppress(Exception):
        mlflow_client.delete_run(run_id)


def _walk(mlflow_client, anchors: list[str], key: str, run_id: str, name: str) -> str:
    """:func:`claim`'s walk over the places: the run id the first claim for ``key`` names."""
    places = [(anchor, name) for anchor in anchors]
    places += [(anchors[0], f"{name}.{n}") for n in range(2, _MORE_CLAIMS + 2)]
    mine = f"{key}:{run_id}"
    for anchor, param in places:
        try:
            _client.retrying(lambda: mlflow_client.log_param(anchor, param, mine))
            return run_id
        except StoreRefused:
            taken = _client.retrying(lambda: mlflow_client.get_run(anchor)).data.params.get(param, "")
            if not taken:
                raise  # refused for another reason than a claim already there
        taken_key, _, taken_run = taken.partition(":")
        if taken_key != key:
            continue
        if taken_run == run_id or _alive(mlflow_client, taken_run):
            return taken_run
    raise StoreRefused(f"all {len(places)} places to claim this run on (params {name} of runs it judged) hold "
                       "claims of runs whose writers failed; log another attempt (a new place) and evaluate again")


#: A claimed run still RUNNING without its decision after this long, whose writer runs on a host
#: that cannot be asked, is taken for dead (a decision is written in seconds).
ABANDONED_AFTER_S = 900.0


def _alive(mlflow_client, run_id: str) -> bool:
    """Whether a claimed run may still be (or has been) written: not deleted, not FAILED or KILLED,
    and, while RUNNING, its writer (``perfgate.supervisor``) not known dead.

    A writer that died mid-write (SIGKILL) leaves its run RUNNING: when this host sees that process
    gone, or the run has been RUNNING without a decision for :data:`ABANDONED_AFTER_S` and its
    writer cannot be asked, the run is ended KILLED here, so every twin from then on passes it alike.
    """
    try:
        run = _client.retrying(lambda: mlflow_client.get_run(run_id))
    except StoreRefused:
        return False  # gone (purged)
    return _run_alive(mlflow_client, run)


def _run_alive(mlflow_client, run) -> bool:
    """:func:`_alive` of a run already read."""
    if run.info.lifecycle_stage == "deleted" or run.info.status in ("FAILED", "KILLED"):
        return False
    if run.info.status != "RUNNING" or TAG.DECISION in run.data.tags:
        return True
    if run.data.tags.get(TAG.KIND) not in (KIND_DECISION, KIND_SUITE):
        return True  # a comparison run: its own writer (compare) and reap end it
    writer = run.data.tags.get(TAG.SUPERVISOR)
    alive = process_alive(writer) if writer else None
    if alive is None:
        alive = time.time() * 1000 - (run.info.start_time or 0) < ABANDONED_AFTER_S * 1000
    if not alive:
        with contextlib.suppress(Exception):
            mlflow_client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
    return alive


def wait_for(mlflow_client, run_id: str, *, timeout_s: float = WAIT_FOR_WINNER_S, what: str = "decision run"):
    """The run, once its decision is written (a twin's), or :class:`StoreUnavailable` when it
    failed or after ``timeout_s``; ``what`` names it in the message (``suite run``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = _client.retrying(lambda: mlflow_client.get_run(run_id))
        if TAG.DECISION in run.data.tags and run.info.status != "RUNNING":
            return run
        if not _run_alive(mlflow_client, run):
            raise StoreUnavailable(f"another evaluator of the same runs was writing {what} {run_id} and failed "
                                   "or died; evaluate again")
        if time.monotonic() > deadline:
            raise StoreUnavailable(f"another evaluator of the same runs is writing {what} {run_id}, which did "
                                   f"not finish within {timeout_s:.0f} s; evaluate again")
        time.sleep(0.2)


def write_decision(mlflow_client, run_id: str, evaluation: Evaluation) -> dict:
    """Log the decision onto ``run_id`` and end it FINISHED; returns the public dict, its ``report`` the markdown.

    The attempts' view in the MLflow UI is written first, on the experiment (a store that
    refuses it costs the view alone, with a warning: ``tracking._views``), and its link joins the
    evaluation; then the plots are drawn (a plot that cannot be drawn costs the plot alone, with a
    warning); then the public dict is made, once, and ``decision.json`` and the note are written
    from it; a write that fails ends the run FAILED and re-raises.
    """
    _views.attach_link(mlflow_client, evaluation, _views.write_view(mlflow_client, evaluation))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        evaluation.warnings += _report.draw_plots(evaluation, folder)
        result = evaluation.to_dict()
        note = result["report"] = _report.decision_markdown(result)
        _report.write_files(result, folder)
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, 0) for key, value in summary_metrics(evaluation).items()]
        try:
            tags = _tags(evaluation, _report.reason_text(result), note)
            run = _client.retrying(lambda: mlflow_client.get_run(run_id))
            tags[TAG.RUN_NAME] = verdict_name(run.info.run_name, evaluation.verdict)
            _client.log_batch(mlflow_client, run_id, params=_params(evaluation), metrics=metrics, tags=tags)
            _report.log_artifacts(mlflow_client, run_id, result, folder)
        except BaseException:
            with contextlib.suppress(Exception):
                mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED)))
    _name_project_run(mlflow_client, run.data.tags.get(TAG.PARENT), evaluation.verdict)
    return result


def _name_project_run(mlflow_client, parent_run_id: str | None, verdict: str) -> None:
    """The verdict at the end of the name of the run the decision nests under when that run is not
    ours (the project run of ``mlflow run``): the UI's run list shows its children collapsed, so the
    verdict is seen without a click. Its latest decision's verdict; best effort (a name is no evidence)."""
    if not parent_run_id:
        return
    with contextlib.suppress(Exception):
        parent = _client.retrying(lambda: mlflow_client.get_run(parent_run_id))
        if TAG.KIND not in parent.data.tags:
            mlflow_client.set_tag(parent_run_id, TAG.RUN_NAME, verdict_name(parent.info.run_name, verdict))


def reparent(mlflow_client, views: list[AttemptView], decision_run_id: str) -> None:
    """Nest the judged attempts under the decision run (the UI shows them as its children).

    MLflow has no request that tags many runs: one ``set_tag`` per attempt, sent to a server
    ``_client.RUN_WRITE_THREADS`` at a time (each is idempotent; a write that fails is raised).
    """
    moving = [view.run_id for view in views if view.parent_run_id != decision_run_id and not view.deleted]
    if not moving:
        return

    _client.for_each_run(mlflow_client, moving, lambda run_id: _client.retrying(
        lambda: mlflow_client.set_tag(run_id, TAG.PARENT, decision_run_id)))
