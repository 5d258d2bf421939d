"""Attempts as MLflow runs: ``log_attempt`` and the ``attempt`` context manager."""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from typing import Iterator

from mlflow.entities import Metric, RunStatus, ViewType

from ..errors import InputError, StoreRefused, StoreUnavailable
from . import _client, _journal
from ._inputs import (
    _check_arm,
    _check_group,
    _check_params,
    _check_result,
    _creation_tags,
    _Result,
    _run_name,
    check_attempt,
    clip,
)
from ._environment import process_identity
from ._group import group_filter
from ._schema import METRIC, TAG

__all__ = ["AttemptDeferred", "AttemptRecorder", "SeriesOutcome", "StartedAttempt", "attempt", "clip", "entities",
           "held_attempts", "log_attempt", "log_checked", "log_series", "start_attempt", "write_payload"]


def entities(result: _Result) -> tuple[list[Metric], dict[str, str]]:
    """The MLflow metrics and tags of a checked outcome.

    The step times are the ``step_time_ms`` history and each of ``result.histories`` a history of
    its own (``step_wait_share``, ...), a value's step its index (a ``None`` value is left out,
    the others keep their index), so step ``i`` of every history is the same measured step.
    """
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, 0) for key, value in result.metrics.items()]
    metrics += [Metric(METRIC.STEP_TIME, value, now, step) for step, value in enumerate(result.step_times_ms)]
    for key, values in result.histories.items():
        metrics += [Metric(key, value, now, step) for step, value in enumerate(values) if value is not None]
    from ._views import logged_rounded  # the figures as a person reads them, for the decision's view

    return metrics, {**logged_rounded(result.metrics), **result.result_tags()}


def log_attempt(
    group: str,
    arm: str,
    conditions: dict,
    *,
    latency_ms: float | None = None,
    quality: float | None = None,
    ok: bool = True,
    failure: str | None = None,
    validity: dict | None = None,
    experiment_name: str | None = None,
    parent_run_id: str | None = None,
    attempt_id: str | None = None,
    metrics: dict | None = None,
    step_times_ms: list | None = None,
    tags: dict | None = None,
    environment: dict | None = None,
    journal: bool | None = None,
    failure_detail: str | None = None,
    mem_status: str | None = None,
    pair: int | None = None,
    histories: dict | None = None,
    contention_status: str | None = None,
    commit_time: float | None = None,
) -> str:
    """Log one attempt as one MLflow run: create (with its tags), one ``log_batch``, terminate.

    Everything is checked before the first request, so bad input writes nothing.

    Args:
        group: the comparison id; any string (quotes included) up to 8,000 characters.
        arm: ``"baseline"`` or ``"candidate"``.
        conditions: the fixed conditions and the variable under test; each becomes a param
            holding its canonical string (``(4, 128)`` and ``[4, 128]`` both give ``[4, 128]``).
        latency_ms: finite and > 0; required when ``ok``.
        quality: finite; required when ``ok``.
        ok: False for a failed attempt, which needs ``failure`` and ends FAILED.
        failure: why the attempt failed.
        validity: the specification's correctness record (``validate_validity_report``).
        experiment_name: created if missing; default ``MLFLOW_EXPERIMENT_NAME`` or Default.
        parent_run_id: a comparison run to nest the attempt under.
        attempt_id: a unique id for this attempt (default: a new uuid). A retried write with
            the same id is counted once by the evaluator.
        metrics: extra finite metrics (``peak_mem_mib``, ``throughput_tok_s``, ...).
        step_times_ms: the raw step times, logged as the ``step_time_ms`` history.
        tags: extra tags; keys starting with ``perfgate.`` or ``mlflow.`` are refused (the tool's
            own fields cannot be overridden that way), as are extra metrics named ``latency_ms``,
            ``quality`` or ``step_time_ms``.
        environment: fingerprint keys to add or override (``torch_threads``, ``gpu_name``);
            the process's own fingerprint (versions, CPU, host, git revision) is always logged
            as ``perfgate.env.*`` tags.
        journal: append the attempt to the local journal first (see ``_journal``); default:
            yes for a tracking server over HTTP(S), no for a local store
            (``MLFLOW_PERFGATE_JOURNAL_MODE=always|never`` overrides).
        failure_detail: context for a failure (a traceback, a child's log tail); shortened, with
            the marker, to fit a tag.
        mem_status: ``measured`` or ``estimated``: how ``peak_mem_mib`` was obtained.
        pair: the attempt's ABBA round (``perfgate.pair``), for the paired method.
        histories: per-step metric histories beside ``step_times_ms``, name -> one finite
            value per step (``None`` where a step has none), such as ``step_wait_share``; names
            follow the extra metrics' rules and may not repeat one of them.
        contention_status: ``measured`` or ``unavailable: <why>`` (``perfgate.contention_status``):
            whether the kernel's contention figures among the metrics were read.
        commit_time: the commit time (POSIX seconds) of the ``revision`` condition, tagged
            ``perfgate.commit_time`` to order a benchmark's history; default: read from git when
            the revision is a commit of the repository in the working directory.

    Returns:
        The run id.

    Raises:
        InputError: bad input (nothing was written).
        AttemptDeferred: the server could not be reached; the attempt is in the journal.
    """
    checked = check_attempt(group, arm, conditions, latency_ms=latency_ms, quality=quality, ok=ok, failure=failure,
                            validity=validity, experiment_name=experiment_name, parent_run_id=parent_run_id,
                            attempt_id=attempt_id, metrics=metrics, step_times_ms=step_times_ms, tags=tags,
                            environment=environment, failure_detail=failure_detail, mem_status=mem_status,
                            pair=pair, histories=histories, contention_status=contention_status,
                            commit_time=commit_time)
    return log_checked(checked, journal=journal)


def log_checked(checked, *, journal: bool | None = None) -> str:
    """Write an attempt :func:`check_attempt` passed (journaled first against a server); its run id.

    The journal line is written before any request. When the server cannot be reached, or
    answers "not now" (429, 502, 503, 504), the attempt stays in the journal
    (:class:`AttemptDeferred`); a definite refusal (401, 403, a bad request) is marked rejected,
    never replayed; any other error leaves it pending for ``sync``. Once the run is written, a
    journal that cannot take its ``synced`` line (a full disk) costs a warning only: the attempt
    is in MLflow, and ``sync`` finds it there.
    """
    mlflow_client = _client.client(probe=False)
    experiment_env = {k: os.environ[k] for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID") if os.environ.get(k)}
    payload = checked.payload(mlflow_client.tracking_uri, experiment_env)
    use_journal = _journal_enabled(mlflow_client.tracking_uri) if journal is None else journal
    return _send(payload, use_journal)


class SeriesOutcome:
    """What :func:`log_series` did with a series of attempts, in order."""

    def __init__(self, total: int):
        self.total = total
        self.written: list[str] = []  # run ids written now
        self.present: list[str] = []  # run ids the store held already (a series recorded again)
        self.deferred: list[str] = []  # attempt ids kept in the journal for sync
        self.cause: AttemptDeferred | None = None  # why the store was left alone

    @property
    def run_ids(self) -> list[str]:
        return self.written + self.present


def log_series(checked_list: list, *, derived: frozenset | set = frozenset(), journal: bool | None = None,
               on_run=None) -> SeriesOutcome:
    """Write checked attempts in order (``record --from-jsonl``), none lost when the store goes away.

    Once the tracking server is found unreachable (or answers "not now"), every remaining attempt
    is appended to the journal at once, without asking the server again for each one: ``sync``
    sends them, idempotently, when it is back. An attempt whose ``attempt_id`` is in ``derived``
    (ids made from the series' content, so that recording the same series again names the same
    attempts) is first looked up, with one search per group: one the store holds with its outcome
    is not written again (its run id is reported), one it holds RUNNING without an outcome gets
    the outcome written onto that run. ``on_run(run_id)`` is called for each attempt the store
    holds, as it is known. Without the journal, an unreachable store raises as :func:`log_checked`.
    """
    mlflow_client = _client.client(probe=False)
    experiment_env = {k: os.environ[k] for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID") if os.environ.get(k)}
    use_journal = _journal_enabled(mlflow_client.tracking_uri) if journal is None else journal
    outcome = SeriesOutcome(len(checked_list))
    held: dict[tuple, dict] = {}
    for checked in checked_list:
        payload = checked.payload(mlflow_client.tracking_uri, experiment_env)
        if outcome.cause is not None:  # known down: straight to the journal
            _journal.append(payload)
            outcome.deferred.append(payload["attempt_id"])
            continue
        try:
            run = _held_run(mlflow_client, payload, held) if payload["attempt_id"] in derived else None
            if run is not None and TAG.OK in run.data.tags:
                outcome.present.append(run.info.run_id)
                if on_run is not None:
                    on_run(run.info.run_id)
                continue
            if run is not None and run.info.status == "RUNNING":
                payload = {**payload, "run_id": run.info.run_id}
            run_id = _send(payload, use_journal)
        except AttemptDeferred as exc:
            outcome.cause = exc
            outcome.deferred.append(payload["attempt_id"])
            continue
        except Exception as exc:  # the look-up itself found the store down
            if not (use_journal and _client.is_unreachable(exc)):
                raise
            _journal.append(payload)
            outcome.cause = AttemptDeferred(payload["attempt_id"], exc)
            outcome.deferred.append(payload["attempt_id"])
            continue
        outcome.written.append(run_id)
        if on_run is not None:
            on_run(run_id)
    return outcome


def _held_run(mlflow_client, payload: dict, held: dict):
    """The run of the payload's attempt the store holds (one search per experiment and group), or None."""
    _client.ensure_reachable(mlflow_client.tracking_uri, series=True)
    with _experiment_env(payload.get("experiment_env") or {}):
        try:
            experiment_id = _client.resolve_experiment(mlflow_client, payload["experiment_name"], create=False)
        except InputError:
            return None  # no such experiment yet: nothing of the series is there
    key = (experiment_id, payload["group"])
    if key not in held:
        runs = _client.search_all(mlflow_client, [experiment_id], group_filter(payload["group"]), view=ViewType.ALL)
        held[key] = held_attempts(runs, payload["group"])
    return held[key].get(payload["attempt_id"])


def held_attempts(runs, group: str) -> dict:
    """The run that stands for each attempt_id among a group's runs: one holding the outcome first,
    then a RUNNING one not ended as a duplicate, then any other (the evaluator's preference)."""
    def rank(run) -> tuple:
        tags = run.data.tags
        return (TAG.OK not in tags, TAG.DUPLICATE_OF in tags, run.info.lifecycle_stage == "deleted",
                run.info.status != "RUNNING", run.info.start_time or 0, run.info.run_id)

    chosen: dict = {}
    for run in sorted(runs, key=rank):
        tags = run.data.tags
        if tags.get(TAG.GROUP) == group and tags.get(TAG.ATTEMPT_ID):
            chosen.setdefault(tags[TAG.ATTEMPT_ID], run)
    return chosen


def _send(payload: dict, use_journal: bool, *, params_written: bool = False) -> str:
    mlflow_client = _client.client(probe=False)
    if use_journal:
        _journal.append(payload)  # whole: a replay writes the params again (the same values)
    try:
        _client.ensure_reachable(mlflow_client.tracking_uri, series=True)
        run_id = write_payload(mlflow_client, payload, payload.get("run_id"), journaled=use_journal,
                               params_written=params_written)
    except Exception as exc:
        if use_journal and _client.is_unreachable(exc):
            raise AttemptDeferred(payload["attempt_id"], exc) from exc
        if use_journal and _client.is_final_refusal(exc):
            _journal.mark_rejected(payload["attempt_id"], _client.short_error(exc))
        raise
    if use_journal:
        try:
            _journal.mark_synced(payload["attempt_id"], run_id)
        except OSError as exc:
            warnings.warn(f"attempt {payload['attempt_id']} is written (run {run_id}) but the journal "
                          f"{_journal.journal_path()} could not record it ({exc.strerror}); 'mlflow-perfgate sync' "
                          "will find it in MLflow", RuntimeWarning, stacklevel=3)
    return run_id


class AttemptDeferred(ConnectionError):
    """The tracking server could not be reached; the attempt waits in the local journal.

    ``mlflow-perfgate sync`` sends it once the server is back. A series may go on.
    """

    def __init__(self, attempt_id: str, cause: BaseException):
        self.attempt_id = attempt_id
        super().__init__(
            f"attempt {attempt_id} is kept in the journal {_journal.journal_path()} because the tracking "
            f"server could not be reached ({_client.short_error(cause)}); run 'mlflow-perfgate sync' when it is back"
        )


def _journal_enabled(tracking_uri: str) -> bool:
    """Journal by default where an outage can happen: a tracking server over HTTP(S)."""
    setting = os.environ.get("MLFLOW_PERFGATE_JOURNAL_MODE", "auto").lower()
    if setting in ("always", "on", "true", "1"):
        return True
    if setting in ("never", "off", "false", "0"):
        return False
    return tracking_uri.startswith(("http://", "https://"))


def _create(mlflow_client, payload: dict) -> str:
    """Create the attempt's run (RUNNING) with its creation tags; its id."""
    with _experiment_env(payload.get("experiment_env") or {}):
        experiment_id = _client.resolve_experiment(mlflow_client, payload["experiment_name"], create=True)
    run = _client.retrying(lambda: mlflow_client.create_run(
        experiment_id, tags=payload["creation_tags"], run_name=_run_name(payload["arm"], payload["attempt_id"])
    ))
    return run.info.run_id


_PARENTS: dict[tuple[str, str], str | None] = {}


def _check_parent(mlflow_client, parent_run_id: str, group: str) -> None:
    """A parent run must exist and, when it belongs to a group (a comparison), to this one."""
    key = (mlflow_client.tracking_uri, parent_run_id)
    if key not in _PARENTS:
        try:
            run = _client.retrying(lambda: mlflow_client.get_run(parent_run_id))
        except StoreRefused as exc:
            if "RESOURCE_DOES_NOT_EXIST" in repr(exc.__cause__) or "not found" in str(exc).lower():
                raise InputError(f"parent run {parent_run_id!r} does not exist in this tracking store") from None
            raise
        _PARENTS[key] = run.data.tags.get(TAG.GROUP)
    other = _PARENTS[key]
    if other is not None and other != group:
        raise InputError(f"parent run {parent_run_id!r} is the comparison of group {other!r}, not of {group!r}; "
                         "nest the attempt under its own group's comparison run")


def check_parent_runs(parents) -> None:
    """Each ``(parent_run_id, group)`` checked as :func:`write_payload` will check it, before any
    attempt of a batch is written (``record --from-jsonl``: one bad parent, nothing written).
    A store that cannot be reached now is no answer: the writes will journal as usual."""
    parents = list(dict.fromkeys(parents))
    if not parents:
        return
    mlflow_client = _client.client(probe=False)
    try:
        _client.ensure_reachable(mlflow_client.tracking_uri, series=True)  # fast, and remembered for the writes
    except StoreUnavailable:
        return
    for parent_run_id, group in parents:
        try:
            _check_parent(mlflow_client, parent_run_id, group)
        except InputError:
            raise
        except Exception as exc:
            if _client.is_unreachable(exc):
                return
            raise


def write_payload(mlflow_client, payload: dict, run_id: str | None = None, *, journaled: bool = False,
                  params_written: bool = False) -> str:
    """Write one checked attempt: create the run with its tags (unless ``run_id``, a run created
    when the attempt started), one ``log_batch`` of params (unless ``params_written``: the started
    run has them), metrics and the outcome, terminate (FINISHED when ok, else FAILED, or the
    payload's ``status``: KILLED for a stopped attempt).

    A ``log_batch`` that fails ends the run FAILED (a crash), unless the store could not be reached
    and the attempt is ``journaled``: its outcome may have landed (only the answer was lost), and
    ``sync`` writes it onto this run, so the run is left RUNNING for it rather than shown FAILED."""
    if run_id is None:
        parent = payload["creation_tags"].get(TAG.PARENT)
        if parent:
            _check_parent(mlflow_client, parent, payload["group"])
        run_id = _create(mlflow_client, payload)
    # Journal lines written before histories existed have none.
    result = _Result(ok=payload["ok"], metrics=payload["metrics"], step_times_ms=payload["step_times_ms"],
                     tags=payload["tags"], histories=payload.get("histories") or {})
    metric_entities, result_tags = entities(result)
    try:
        _client.log_batch(mlflow_client, run_id, params=None if params_written else payload["params"],
                          metrics=metric_entities, tags=result_tags)
    except BaseException as exc:
        if not (journaled and isinstance(exc, Exception) and _client.is_unreachable(exc)):
            with contextlib.suppress(Exception):
                mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    status = RunStatus.FINISHED if payload["ok"] else RunStatus.FAILED
    if not payload["ok"] and payload.get("status") == "KILLED":
        status = RunStatus.KILLED
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(status)))
    return run_id


class StartedAttempt:
    """An attempt whose run exists (RUNNING, with its conditions and who runs it) before it runs.

    Made by :func:`start_attempt`; :meth:`finish` writes the outcome onto the same run. If the
    process dies in between, the run stays RUNNING with ``perfgate.supervisor`` naming the dead
    process: the evaluator and ``reap`` count it as failed (``supervisor_died``), on the host
    that ran it at once, elsewhere once it is stale.
    """

    def __init__(self, payload: dict, run_id: str | None, use_journal: bool, params_written: bool = False):
        self.payload = payload
        self.run_id = run_id
        self.use_journal = use_journal
        self.params_written = params_written  # the started run holds its params: the outcome's write skips them

    @property
    def attempt_id(self) -> str:
        return self.payload["attempt_id"]

    def finish(self, *, latency_ms=None, quality=None, ok: bool = True, failure=None, validity=None, metrics=None,
               step_times_ms=None, tags=None, environment: dict | None = None, failure_detail=None,
               mem_status=None, histories=None, contention_status=None, torch_state=None,
               mem_estimate_from=None) -> str:
        """Write the outcome (the arguments of :func:`log_attempt`) onto the started run; its run id.

        ``environment`` adds or overrides fingerprint keys known only now (the threads measured);
        ``mem_estimate_from``, the attempt whose CPU memory estimate this one carries (``compare``).

        Raises:
            AttemptDeferred: the server could not be reached; the complete attempt is in the journal.
        """
        result = _check_result(ok=ok, latency_ms=latency_ms, quality=quality, failure=failure, validity=validity,
                               metrics=metrics, step_times_ms=step_times_ms, tags=tags,
                               failure_detail=failure_detail, mem_status=mem_status, histories=histories,
                               contention_status=contention_status, torch_state=torch_state,
                               mem_estimate_from=mem_estimate_from)
        env = {k: v for k, v in _creation_tags(self.payload["group"], self.payload["arm"], self.attempt_id, None,
                                               environment).items() if k.startswith(TAG.ENV_PREFIX)}
        payload = {**self.payload, "ok": result.ok, "metrics": result.metrics, "step_times_ms": result.step_times_ms,
                   "histories": result.histories, "tags": {**env, **result.tags}, "run_id": self.run_id}
        return _send(payload, self.use_journal, params_written=self.params_written)

    def abort(self, failure: str, *, tags: dict | None = None) -> str | None:
        """End the started attempt as stopped before its outcome (SIGTERM reached its comparison):
        a failed attempt with ``failure`` as its reason, its run KILLED (``tags``: the tool's own,
        added). Journaled as :meth:`finish` is; its run id, or ``None`` when the server could not
        be reached (the journal holds it)."""
        result = _check_result(ok=False, latency_ms=None, quality=None, failure=clip(failure), validity=None,
                               metrics=None, step_times_ms=None, tags=None)
        payload = {**self.payload, "ok": False, "metrics": {}, "step_times_ms": [], "histories": {},
                   "tags": {**result.tags, **(tags or {})}, "run_id": self.run_id, "status": "KILLED"}
        try:
            return _send(payload, self.use_journal, params_written=self.params_written)
        except AttemptDeferred:
            return None

    def withdraw(self, reason: str) -> str | None:
        """End the started attempt as never run (its round was not let through): as :meth:`abort`,
        and excluded (``perfgate.excluded``, the reason ``withdrawn: ...``), so that no count
        judges it; its run id, or ``None`` when the server could not be reached."""
        why = clip(f"withdrawn: {reason}")
        return self.abort(why, tags={TAG.EXCLUDED: "true", TAG.EXCLUDED_REASON: why})


def start_attempt(group: str, arm: str, conditions: dict, *, experiment_name: str | None = None,
                  parent_run_id: str | None = None, attempt_id: str | None = None,
                  environment: dict | None = None, journal: bool | None = None,
                  pair: int | None = None) -> StartedAttempt:
    """Write an attempt as started before it runs (a comparison's attempts are): see :class:`StartedAttempt`.

    Everything is checked first; against a server the start is journaled too, so that an
    attempt in flight when its supervisor dies is known even if the server was down.
    A server that cannot be reached now costs nothing here: :meth:`StartedAttempt.finish`
    journals the complete attempt.
    """
    checked = check_attempt(group, arm, conditions, ok=False, failure="running", experiment_name=experiment_name,
                            parent_run_id=parent_run_id, attempt_id=attempt_id, environment=environment, pair=pair)
    mlflow_client = _client.client(probe=False)
    experiment_env = {k: os.environ[k] for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID") if os.environ.get(k)}
    payload = checked.payload(mlflow_client.tracking_uri, experiment_env)
    payload["creation_tags"] = {**payload["creation_tags"], TAG.SUPERVISOR: process_identity()}
    use_journal = _journal_enabled(mlflow_client.tracking_uri) if journal is None else journal
    if use_journal:
        _journal.append_started(payload)
    run_id, params_written = None, False
    try:
        _client.ensure_reachable(mlflow_client.tracking_uri, series=True)
        if parent_run_id:
            _check_parent(mlflow_client, parent_run_id, payload["group"])
        run_id = _create(mlflow_client, payload)
        _client.log_batch(mlflow_client, run_id, params=payload["params"])
        params_written = True
    except Exception as exc:
        if not _client.is_unreachable(exc):
            raise
    return StartedAttempt(payload, run_id, use_journal, params_written)


@contextlib.contextmanager
def _experiment_env(values: dict):
    """Replay under the experiment variables the attempt was logged with."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID")}
    try:
        for key in saved:
            if key in values:
                os.environ[key] = values[key]
            else:
                os.environ.pop(key, None)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class AttemptRecorder:
    """What the body of :func:`attempt` uses to report its outcome."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self._reported: dict | None = None

    def report(self, *, latency_ms: float, quality: float, validity: dict | None = None,
               metrics: dict | None = None, step_times_ms: list | None = None,
               tags: dict | None = None) -> None:
        """Report a successful outcome. Checked at once: bad values raise ``ValueError`` here."""
        kwargs = dict(latency_ms=latency_ms, quality=quality, failure=None, validity=validity,
                      metrics=metrics, step_times_ms=step_times_ms, tags=tags)
        _check_result(ok=True, **kwargs)
        self._reported = {"ok": True, **kwargs}

    def fail(self, failure: str, *, validity: dict | None = None, metrics: dict | None = None,
             tags: dict | None = None) -> None:
        """Report a failed outcome (the body then returns normally)."""
        kwargs = dict(latency_ms=None, quality=None, failure=failure, validity=validity,
                      metrics=metrics, step_times_ms=None, tags=tags)
        _check_result(ok=False, **kwargs)
        self._reported = {"ok": False, **kwargs}


@contextlib.contextmanager
def attempt(
    group: str,
    arm: str,
    conditions: dict,
    *,
    experiment_name: str | None = None,
    parent_run_id: str | None = None,
    attempt_id: str | None = None,
    environment: dict | None = None,
) -> Iterator[AttemptRecorder]:
    """Record the body as one attempt; it calls ``recorder.report(latency_ms=..., quality=...)``.

    The run and its params are written on entry, so even a process killed in the body leaves
    a run (RUNNING, later counted as stale or reaped) with its conditions. An exception that
    escapes the body records a failed attempt whose failure names it, and is re-raised; a
    body that reports nothing records a failed attempt and raises ``ValueError``.
    """
    group, arm = _check_group(group), _check_arm(arm)
    params = _check_params(conditions)
    creation_tags = _creation_tags(group, arm, attempt_id, parent_run_id, environment)
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    run = _client.retrying(lambda: mlflow_client.create_run(
        experiment_id, tags=creation_tags, run_name=_run_name(arm, creation_tags[TAG.ATTEMPT_ID])
    ))
    run_id = run.info.run_id
    _client.log_batch(mlflow_client, run_id, params=params)
    recorder = AttemptRecorder(run_id)

    def finish(outcome: dict, status: int) -> None:
        metric_entities, result_tags = entities(_check_result(**outcome))
        _client.log_batch(mlflow_client, run_id, metrics=metric_entities, tags=result_tags)
        _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(status)))

    try:
        yield recorder
    except Exception as exc:
        failure = clip(f"exception: {type(exc).__name__}: {exc}")
        finish(_failed(failure), RunStatus.FAILED)
        raise
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: the attempt was stopped
        finish(_failed(clip(f"interrupted: {type(exc).__name__}")), RunStatus.KILLED)
        raise
    if recorder._reported is None:
        finish(_failed("no_result: the attempt body reported no outcome"), RunStatus.FAILED)
        raise InputError("the attempt body must call report(latency_ms=..., quality=...) or fail(...)")
    reported = recorder._reported
    finish(reported, RunStatus.FINISHED if reported["ok"] else RunStatus.FAILED)


def _failed(failure: str) -> dict:
    return dict(ok=False, latency_ms=None, quality=None, failure=failure, validity=None,
                metrics=None, step_times_ms=None, tags=None)
