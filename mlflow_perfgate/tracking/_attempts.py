"""Attempts as MLflow runs: ``log_attempt`` and the ``attempt`` context manager."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

from mlflow.entities import Metric, RunStatus

from ..rules._errors import InputError
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
from ._schema import METRIC, TAG

__all__ = ["AttemptDeferred", "AttemptRecorder", "attempt", "clip", "entities", "log_attempt", "log_checked",
           "write_payload"]


def entities(result: _Result) -> tuple[list[Metric], dict[str, str]]:
    """The MLflow metrics (the step times as the ``step_time_ms`` history) and tags of a checked outcome."""
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, 0) for key, value in result.metrics.items()]
    metrics += [Metric(METRIC.STEP_TIME, value, now, step) for step, value in enumerate(result.step_times_ms)]
    return metrics, result.result_tags()


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
        tags: extra tags.
        environment: fingerprint keys to add or override (``torch_threads``, ``gpu_name``);
            the process's own fingerprint (versions, CPU, host, git revision) is always logged
            as ``perfgate.env.*`` tags.
        journal: append the attempt to the local journal first (see ``_journal``); default:
            yes for a tracking server over HTTP(S), no for a local store
            (``MLFLOW_PERFGATE_JOURNAL_MODE=always|never`` overrides).

    Returns:
        The run id.

    Raises:
        InputError: bad input (nothing was written).
        AttemptDeferred: the server could not be reached; the attempt is in the journal.
    """
    checked = check_attempt(group, arm, conditions, latency_ms=latency_ms, quality=quality, ok=ok, failure=failure,
                            validity=validity, experiment_name=experiment_name, parent_run_id=parent_run_id,
                            attempt_id=attempt_id, metrics=metrics, step_times_ms=step_times_ms, tags=tags,
                            environment=environment)
    return log_checked(checked, journal=journal)


def log_checked(checked, *, journal: bool | None = None) -> str:
    """Write an attempt :func:`check_attempt` passed (journaled first against a server); its run id."""
    mlflow_client = _client.client()
    experiment_env = {k: os.environ[k] for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID") if os.environ.get(k)}
    payload = checked.payload(mlflow_client.tracking_uri, experiment_env)
    use_journal = _journal_enabled(mlflow_client.tracking_uri) if journal is None else journal
    if use_journal:
        _journal.append(payload)
    try:
        run_id = write_payload(mlflow_client, payload)
    except Exception as exc:
        if use_journal and _client.is_unreachable(exc):
            raise AttemptDeferred(payload["attempt_id"], exc) from exc
        if use_journal:
            _journal.mark_rejected(payload["attempt_id"], _client.short_error(exc))
        raise
    if use_journal:
        _journal.mark_synced(payload["attempt_id"], run_id)
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


def write_payload(mlflow_client, payload: dict) -> str:
    """Write one checked attempt: create the run with its tags, one ``log_batch``, terminate."""
    experiment_name = payload["experiment_name"]
    with _experiment_env(payload.get("experiment_env") or {}):
        experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    creation_tags = payload["creation_tags"]
    run = _client.retrying(lambda: mlflow_client.create_run(
        experiment_id, tags=creation_tags, run_name=_run_name(payload["arm"], payload["attempt_id"])
    ))
    run_id = run.info.run_id
    result = _Result(ok=payload["ok"], metrics=payload["metrics"], step_times_ms=payload["step_times_ms"],
                     tags=payload["tags"])
    metric_entities, result_tags = entities(result)
    try:
        _client.log_batch(mlflow_client, run_id, params=payload["params"], metrics=metric_entities, tags=result_tags)
    except BaseException:
        with contextlib.suppress(Exception):
            mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    status = RunStatus.FINISHED if payload["ok"] else RunStatus.FAILED
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(status)))
    return run_id


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
