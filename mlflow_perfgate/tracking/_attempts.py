"""Attempts as MLflow runs: ``log_attempt`` and the ``attempt`` context manager."""

from __future__ import annotations

import contextlib
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from mlflow.entities import Metric, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import _validate_param_name, _validate_tag_name

from .. import rules
from ..rules._errors import InputError
from . import _client, _journal
from ._environment import ENV_TAG_PREFIX, fingerprint
from ._schema import (
    ARMS,
    KIND_ATTEMPT,
    MAX_KEY_LENGTH,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    METRIC,
    TAG,
    canonical_conditions,
    fit,
    group_key,
)

__all__ = ["log_attempt", "attempt", "AttemptRecorder", "AttemptDeferred", "clip", "write_payload"]


def clip(text: str, limit: int = MAX_TAG_VALUE) -> str:
    """Shorten a message of our own making to fit a tag (with the marker); user input is refused instead."""
    return fit(text, limit)


def _check_key(key: Any, what: str, validator) -> None:
    if not isinstance(key, str) or not key:
        raise InputError(f"{what} key must be a non-empty string, got {key!r}")
    _check_encodable(key, f"{what} key")
    if len(key) > MAX_KEY_LENGTH:
        raise InputError(f"{what} key {key[:40]!r}... is {len(key)} characters; MLflow allows {MAX_KEY_LENGTH}")
    try:
        validator(key)
    except MlflowException as exc:
        raise InputError(f"{what} key {key!r} is not accepted by MLflow: {exc.message}") from None


def _check_encodable(value: str, what: str) -> None:
    """Refuse text no store keeps faithfully: NUL (PostgreSQL refuses it) and text that is not
    UTF-8 (lone surrogates, from command-line bytes that were not UTF-8)."""
    if "\x00" in value:
        raise InputError(f"{what} contains a NUL character, which tracking stores cannot keep")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} is not valid UTF-8 text") from None


def _check_text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    _check_encodable(value, what)
    if len(value) > limit:
        raise InputError(
            f"{what} is {len(value)} characters; MLflow keeps at most {limit} and would truncate it"
        )
    return value


def _real(value: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise InputError(f"{what} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise InputError(f"{what} must be finite, got {value!r} (MLflow cannot store NaN or infinity faithfully)")
    if positive and number <= 0:
        raise InputError(f"{what} must be > 0, got {value!r}")
    return number


def _check_params(conditions: dict) -> dict[str, str]:
    params = canonical_conditions(conditions)
    if not params:
        raise InputError("conditions must name at least one condition (model, batch_size, ...)")
    for key, value in params.items():
        _check_key(key, "condition", _validate_param_name)
        _check_text(value, f"condition {key!r}", MAX_PARAM_VALUE)
    return params


def _check_group(group: Any) -> str:
    if not isinstance(group, str) or not group.strip():
        raise InputError(f"group must be a non-empty string, got {group!r}")
    return _check_text(group, "group", MAX_TAG_VALUE)


def _check_arm(arm: Any) -> str:
    if arm not in ARMS:
        raise InputError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    return arm


def _validity_tags(validity: dict | None) -> dict[str, str]:
    if validity is None:
        return {}
    try:
        report = rules.validate_validity_report(validity)
    except KeyError as exc:
        raise InputError(f"validity: {exc.args[0]}") from None
    except ValueError as exc:
        raise InputError(f"validity: {exc}") from None
    return {
        TAG.RUN_VALID: "true" if report["run_valid"] else "false",
        TAG.ISSUES: _check_text(",".join(report["issues"]), "validity issues", MAX_TAG_VALUE),
        TAG.FIRST_FAILURE: _check_text(str(report["first_failure"] or ""), "validity first_failure", MAX_TAG_VALUE),
        TAG.REPRODUCIBLE: "true" if report["reproducible"] else "false",
    }


@dataclass
class _Result:
    """The checked outcome of one attempt, ready to write."""

    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    step_times_ms: list[float] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def entities(self) -> tuple[list[Metric], dict[str, str]]:
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, 0) for key, value in self.metrics.items()]
        metrics += [Metric(METRIC.STEP_TIME, value, now, step) for step, value in enumerate(self.step_times_ms)]
        return metrics, {TAG.OK: "true" if self.ok else "false", **self.tags}


def _check_result(*, ok: Any, latency_ms: Any, quality: Any, failure: Any, validity: Any,
                  metrics: dict | None, step_times_ms: Any, tags: dict | None) -> _Result:
    if type(ok) is not bool:
        raise InputError(f"ok must be True or False, got {ok!r}")
    result = _Result(ok=ok)
    if ok:
        if failure is not None:
            raise InputError("an ok attempt cannot have a failure reason; pass ok=False")
        if latency_ms is None or quality is None:
            raise InputError("an ok attempt needs latency_ms (finite, > 0) and quality (finite)")
    else:
        if not isinstance(failure, str) or not failure.strip():
            raise InputError("a failed attempt (ok=False) needs a non-empty failure reason")
        result.tags[TAG.FAILURE] = _check_text(failure, "failure", MAX_TAG_VALUE)
    if latency_ms is not None:
        result.metrics[METRIC.LATENCY] = _real(latency_ms, "latency_ms", positive=True)
    if quality is not None:
        result.metrics[METRIC.QUALITY] = _real(quality, "quality")
    for key, value in (metrics or {}).items():
        _check_key(key, "metric", _validate_param_name)
        result.metrics[key] = _real(value, f"metric {key!r}")
    if step_times_ms is not None:
        result.step_times_ms = [_real(v, "step_times_ms", positive=True) for v in step_times_ms]
    result.tags.update(_validity_tags(validity))
    for key, value in (tags or {}).items():
        _check_key(key, "tag", _validate_tag_name)
        result.tags[key] = _check_text(value, f"tag {key!r}", MAX_TAG_VALUE)
    return result


def _env_tags(environment: dict | None) -> dict[str, str]:
    if environment is not None and not isinstance(environment, dict):
        raise InputError(f"environment must be a dict, got {type(environment).__name__}")
    tags = {}
    for key, value in fingerprint(environment).items():
        tag = ENV_TAG_PREFIX + key
        _check_key(tag, "environment", _validate_tag_name)
        tags[tag] = _check_text(value, f"environment {key!r}", MAX_TAG_VALUE)
    return tags


def _creation_tags(group: str, arm: str, attempt_id: str | None, parent_run_id: str | None,
                   environment: dict | None = None) -> dict:
    if attempt_id is None:
        attempt_id = uuid.uuid4().hex
    _check_text(attempt_id, "attempt_id", MAX_TAG_VALUE)
    if not attempt_id.strip():
        raise InputError("attempt_id must be a non-empty string")
    tags = {
        TAG.KIND: KIND_ATTEMPT,
        TAG.GROUP: group,
        TAG.GROUP_KEY: group_key(group),
        TAG.ARM: arm,
        TAG.ATTEMPT_ID: attempt_id,
        **_env_tags(environment),
    }
    if parent_run_id is not None:
        if not isinstance(parent_run_id, str) or not parent_run_id.strip():
            raise InputError(f"parent_run_id must be a run id string, got {parent_run_id!r}")
        tags[TAG.PARENT] = parent_run_id
    return tags


def _run_name(arm: str, attempt_id: str) -> str:
    return f"{arm}-{attempt_id[:8]}"


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
    group, arm = _check_group(group), _check_arm(arm)
    params = _check_params(conditions)
    result = _check_result(ok=ok, latency_ms=latency_ms, quality=quality, failure=failure,
                           validity=validity, metrics=metrics, step_times_ms=step_times_ms, tags=tags)
    creation_tags = _creation_tags(group, arm, attempt_id, parent_run_id, environment)
    if experiment_name is not None:
        if not isinstance(experiment_name, str) or not experiment_name.strip():
            raise InputError(f"experiment_name must be a non-empty string, got {experiment_name!r}")
        _check_encodable(experiment_name, "experiment_name")
    mlflow_client = _client.client()
    payload = {
        "attempt_id": creation_tags[TAG.ATTEMPT_ID], "group": group, "arm": arm,
        "tracking_uri": mlflow_client.tracking_uri, "experiment_name": experiment_name,
        "experiment_env": {k: os.environ[k] for k in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID")
                           if os.environ.get(k)},
        "params": params, "creation_tags": creation_tags, "ok": result.ok, "metrics": result.metrics,
        "step_times_ms": result.step_times_ms, "tags": result.tags,
    }
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
    metric_entities, result_tags = result.entities()
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
        metric_entities, result_tags = _check_result(**outcome).entities()
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
