"""The checks of an attempt's input, before anything is written: pure Python, no mlflow import.

``log_attempt``, ``attempt`` and the command line's ``record`` (which checks every attempt it
was given before it imports mlflow) all check here: a group, an arm, the conditions, the
outcome, the validity record, extra metrics and tags, the environment fingerprint. Bad input is
an :class:`~mlflow_perfgate.errors.InputError` naming the field; nothing is truncated.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import rules
from ..errors import InputError
from ..rules import step_figures, to_python
from ._environment import ENV_TAG_PREFIX, commit_time as git_commit_time, fingerprint
from ._schema import (
    ARM_COLORS,
    ARMS,
    KIND_ATTEMPT,
    MAX_KEY_LENGTH,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    METRIC,
    RESERVED_METRICS,
    RESERVED_PREFIXES,
    TAG,
    canonical_conditions,
    fit,
    group_key,
)

__all__ = ["CheckedAttempt", "check_attempt", "clip", "commit_time_tags", "mlflow_name_problem"]

# mlflow.utils.validation.validate_param_and_metric_name, on POSIX
_MLFLOW_NAME = re.compile(r"^[/\w.\- :]*$")


def clip(text: str, limit: int = MAX_TAG_VALUE) -> str:
    """Shorten a message of our own making to fit a tag (with the marker); user input is refused instead."""
    return fit(text, limit)


def mlflow_name_problem(name: str) -> str | None:
    """Why MLflow would refuse ``name`` as a param, metric or tag key; ``None`` when it accepts it.

    The rule of ``mlflow.utils.validation`` (``validate_param_and_metric_name`` and
    ``path_not_unique``, POSIX), written here so that input is checked before mlflow is
    imported; ``tests/test_inputs.py`` holds it to MLflow's own on many names.
    """
    if not _MLFLOW_NAME.match(name):
        return ("Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), "
                "colon(:) and slashes (/).")
    normal = posixpath.normpath(name)
    if normal != name or normal == "." or normal.startswith("..") or normal.startswith("/"):
        return ("Names may be treated as files in certain cases, and must not resolve to other names when treated "
                f"as such. This name would resolve to {normal!r}")
    return None


def _check_key(key: Any, what: str) -> None:
    if not isinstance(key, str) or not key:
        raise InputError(f"{what} key must be a non-empty string, got {key!r}")
    _check_encodable(key, f"{what} key")
    if len(key) > MAX_KEY_LENGTH:
        raise InputError(f"{what} key {key[:40]!r}... is {len(key)} characters; MLflow allows {MAX_KEY_LENGTH}")
    problem = mlflow_name_problem(key)
    if problem is not None:
        raise InputError(f"{what} key {key!r} is not accepted by MLflow: Invalid value {key!r} for parameter "
                         f"'key' supplied: {problem}")


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
        _check_key(key, "condition")
        _reserved(key, "condition")
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
    #: Per-step metric histories beyond ``step_time_ms`` (``step_wait_share``, ...): name -> one
    #: value per step, ``None`` where a step has none (the step index is kept).
    histories: dict[str, list[float | None]] = field(default_factory=dict)

    def result_tags(self) -> dict[str, str]:
        return {TAG.OK: "true" if self.ok else "false", **self.tags}


def _reserved(key: str, what: str) -> None:
    if key.startswith(RESERVED_PREFIXES):
        raise InputError(f"{what} {key!r} is reserved: keys starting with {' or '.join(RESERVED_PREFIXES)} are "
                         "written by mlflow-perfgate and MLflow themselves; choose another name")


def _check_histories(histories: Any, metrics: dict[str, float]) -> dict[str, list[float | None]]:
    """Per-step histories: each key a metric name of its own, each value a list of finite numbers or ``None``."""
    if histories is None:
        return {}
    if not isinstance(histories, dict):
        raise InputError(f"histories must be a dict, got {type(histories).__name__}")
    checked = {}
    for key, values in histories.items():
        _check_key(key, "history")
        _reserved(key, "history")
        if key in RESERVED_METRICS:
            raise InputError(f"history {key!r} is the attempt's own field; pass it as {key}=... (step_times_ms "
                             "for the step history), not among the histories")
        if key in metrics:
            raise InputError(f"history {key!r} is also given as a metric; MLflow would mix them into one series")
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
            raise InputError(f"history {key!r} must be a list of numbers, got {type(values).__name__}")
        checked[key] = [None if value is None else _real(value, f"history {key!r}") for value in values]
    return checked


def _check_result(*, ok: Any, latency_ms: Any, quality: Any, failure: Any, validity: Any,
                  metrics: dict | None, step_times_ms: Any, tags: dict | None, failure_detail: Any = None,
                  mem_status: Any = None, histories: Any = None, contention_status: Any = None,
                  torch_state: dict | None = None, mem_estimate_from: Any = None) -> _Result:
    if type(ok) is not bool:
        raise InputError(f"ok must be True or False, got {ok!r}")
    result = _Result(ok=ok)
    if step_times_ms is not None:
        if isinstance(step_times_ms, (str, bytes, dict, set, frozenset)) or not hasattr(step_times_ms, "__iter__"):
            raise InputError("step_times_ms must be a sequence of the measured steps' times in ms, in order, got "
                             f"{type(step_times_ms).__name__}")
        result.step_times_ms = [_real(v, "step_times_ms", positive=True) for v in step_times_ms]
    if ok and latency_ms is None and result.step_times_ms:
        latency_ms = statistics.median(result.step_times_ms)  # the typical measured step, as the harness logs it
    if ok:
        if failure is not None:
            raise InputError("an ok attempt cannot have a failure reason; pass ok=False")
        if latency_ms is None or quality is None:
            raise InputError("an ok attempt needs latency_ms (finite, > 0; default the median of step_times_ms) "
                             "and quality (finite)")
    else:
        if not isinstance(failure, str) or not failure.strip():
            raise InputError("a failed attempt (ok=False) needs a non-empty failure reason")
        result.tags[TAG.FAILURE] = _check_text(failure, "failure", MAX_TAG_VALUE)
    if latency_ms is not None:
        result.metrics[METRIC.LATENCY] = _real(latency_ms, "latency_ms", positive=True)
    if quality is not None:
        result.metrics[METRIC.QUALITY] = _real(quality, "quality")
    if metrics is not None and not isinstance(metrics, dict):
        raise InputError(f"metrics must be a dict, got {type(metrics).__name__}")
    for key, value in (metrics or {}).items():
        _check_key(key, "metric")
        if key in RESERVED_METRICS:
            raise InputError(f"metric {key!r} is the attempt's own field; pass it as {key}=... (step_times_ms "
                             "for the step history), not among the extra metrics")
        result.metrics[key] = _real(value, f"metric {key!r}",
                                    positive=key in (METRIC.UNCONTENDED_LATENCY, METRIC.FASTEST_STEP,
                                                     METRIC.STEP_P10, METRIC.STEP_MEAN, METRIC.STEP_P95))
    result.histories = _check_histories(histories, result.metrics)
    if ok and result.step_times_ms:  # what latency="fastest" judges, from the steps themselves
        fastest, slowest = min(result.step_times_ms), max(result.step_times_ms)
        latency = result.metrics[METRIC.LATENCY]
        if not fastest * (1 - 1e-9) <= latency <= slowest * (1 + 1e-9):
            raise InputError(f"latency_ms {latency!r} lies outside its step times ({fastest!r} to {slowest!r} ms): "
                             "latency_ms is the attempt's typical measured step (the harness logs the median of "
                             "step_times_ms); check that both are in ms and come from the same attempt")
        given = result.metrics.get(METRIC.FASTEST_STEP)
        if given is not None and given != fastest:
            raise InputError(f"metric {METRIC.FASTEST_STEP!r} is the fastest of step_times_ms ({fastest!r}), "
                             f"got {given!r}; leave it out, it is written from the step times")
        figures = step_figures(result.step_times_ms)  # the one place a step figure is computed (rules)
        result.metrics[METRIC.FASTEST_STEP] = figures[METRIC.FASTEST_STEP]
        # the 10th percentile, the mean step (throughput) and the step tail, judged beside the typical step
        for key, words in ((METRIC.STEP_P10, "the 10th percentile of step_times_ms (Harrell-Davis)"),
                           (METRIC.STEP_MEAN, "the mean of step_times_ms"),
                           (METRIC.STEP_P95, "the nearest-rank P95 of step_times_ms")):
            value = figures[key]
            given = result.metrics.get(key)
            if given is not None and not math.isclose(given, value, rel_tol=1e-9):
                raise InputError(f"metric {key!r} is {words} ({value!r}), got {given!r}; leave it out, it is "
                                 "written from the step times")
            result.metrics[key] = value
    elif ok:  # given without step times (a harness of one's own): fastest <= p10 <= the typical step
        # (written from the steps there is nothing to check: the fastest lies within them, and the
        # 10th percentile, a weighted mean of every step, may pass a median of tied steps)
        given_p10, given_fastest = result.metrics.get(METRIC.STEP_P10), result.metrics.get(METRIC.FASTEST_STEP)
        if given_p10 is not None and given_fastest is not None and given_fastest > given_p10 * (1 + 1e-9):
            raise InputError(f"metric {METRIC.FASTEST_STEP!r} ({given_fastest!r}) is above {METRIC.STEP_P10!r} "
                             f"({given_p10!r}): the fastest step cannot be slower than the 10th percentile of the "
                             "steps; give step_times_ms and both are written from them")
        for key, value, words in ((METRIC.FASTEST_STEP, given_fastest, "fastest measured step"),
                                  (METRIC.STEP_P10, given_p10, "10th-percentile step")):
            if value is not None and value > result.metrics[METRIC.LATENCY] * (1 + 1e-9):
                raise InputError(f"metric {key!r} ({value!r}) is above latency_ms "
                                 f"({result.metrics[METRIC.LATENCY]!r}): an attempt's {words} cannot be slower "
                                 "than its typical one; give step_times_ms and it is written from them")
    result.tags.update(_validity_tags(validity))
    if torch_state:  # a step-interleaved arm's process-wide torch state (workloads._globals), as JSON
        result.tags[TAG.TORCH_STATE] = clip(json.dumps(torch_state, sort_keys=True, default=str))
    if tags is not None and not isinstance(tags, dict):
        raise InputError(f"tags must be a dict, got {type(tags).__name__}")
    for key, value in (tags or {}).items():
        _check_key(key, "tag")
        _reserved(key, "tag")
        result.tags[key] = _check_text(value, f"tag {key!r}", MAX_TAG_VALUE)
    if failure_detail is not None:  # our own text (a traceback, a child's log): shortened, marked
        result.tags[TAG.FAILURE_DETAIL] = clip(_check_text(str(failure_detail), "failure_detail", 10**9))
    if mem_status is not None:
        if mem_status not in ("measured", "estimated"):
            raise InputError(f"mem_status must be 'measured' or 'estimated', got {mem_status!r}")
        result.tags[TAG.MEM_STATUS] = mem_status
    if mem_estimate_from is not None:  # the attempt whose CPU estimate this one carries (compare's)
        result.tags[TAG.MEM_ESTIMATE_FROM] = _check_text(mem_estimate_from, "mem_estimate_from", MAX_TAG_VALUE)
    if contention_status is not None:  # the sampler's own text: "measured" or "unavailable: <why>"
        if not isinstance(contention_status, str) or not (
                contention_status == "measured" or contention_status.startswith("unavailable: ")):
            raise InputError(f"contention_status must be 'measured' or 'unavailable: <why>', got {contention_status!r}")
        result.tags[TAG.CONTENTION_STATUS] = clip(_check_text(contention_status, "contention_status", 10**9))
    return result


def _env_tags(environment: dict | None) -> dict[str, str]:
    if environment is not None and not isinstance(environment, dict):
        raise InputError(f"environment must be a dict, got {type(environment).__name__}")
    tags = {}
    for key, value in fingerprint(environment).items():
        tag = ENV_TAG_PREFIX + key
        _check_key(tag, "environment")
        tags[tag] = _check_text(value, f"environment {key!r}", MAX_TAG_VALUE)
    return tags


def _creation_tags(group: str, arm: str, attempt_id: str | None, parent_run_id: str | None,
                   environment: dict | None = None, pair: int | None = None) -> dict:
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
    if arm in ARM_COLORS:
        tags[TAG.RUN_COLOR] = ARM_COLORS[arm]
    if parent_run_id is not None:
        if not isinstance(parent_run_id, str) or not parent_run_id.strip():
            raise InputError(f"parent_run_id must be a run id string, got {parent_run_id!r}")
        tags[TAG.PARENT] = parent_run_id
    if pair is not None:
        pair = to_python(pair)  # a numpy or torch integer is the round it holds
        if type(pair) is not int or pair < 0:
            raise InputError(f"pair must be an integer >= 0 (the attempt's ABBA round), got {pair!r}")
        tags[TAG.PAIR] = str(pair)
    return tags


def _run_name(arm: str, attempt_id: str) -> str:
    return f"{arm}-{attempt_id[:8]}"


def _check_experiment_name(experiment_name: Any) -> str | None:
    if experiment_name is not None:
        if not isinstance(experiment_name, str) or not experiment_name.strip():
            raise InputError(f"experiment_name must be a non-empty string, got {experiment_name!r}")
        _check_encodable(experiment_name, "experiment_name")
    return experiment_name


@dataclass(frozen=True)
class CheckedAttempt:
    """One attempt whose every field passed the checks: what ``log_attempt`` writes."""

    group: str
    arm: str
    params: dict
    result: _Result
    creation_tags: dict
    experiment_name: str | None

    @property
    def attempt_id(self) -> str:
        return self.creation_tags[TAG.ATTEMPT_ID]

    def payload(self, tracking_uri: str, experiment_env: dict) -> dict:
        """The JSON-ready form the journal keeps and ``write_payload`` writes."""
        return {
            "attempt_id": self.attempt_id, "group": self.group, "arm": self.arm, "tracking_uri": tracking_uri,
            "experiment_name": self.experiment_name, "experiment_env": experiment_env, "params": self.params,
            "creation_tags": self.creation_tags, "ok": self.result.ok, "metrics": self.result.metrics,
            "step_times_ms": self.result.step_times_ms, "tags": self.result.tags,
            "histories": self.result.histories,
        }


#: How far past this machine's clock a commit time may lie (clocks of two machines differ).
_COMMIT_TIME_SLACK_S = 86400.0


def commit_time_tags(params: dict[str, str], commit_time: Any = None) -> dict[str, str]:
    """``perfgate.commit_time`` for an attempt whose conditions hold a ``revision``.

    The time given (POSIX seconds), else the commit time of the revision when it is a git sha of
    the repository in the working directory (``git show -s --format=%ct``), else none.

    Raises:
        InputError: ``commit_time`` is not a finite number >= 0, lies more than a day in the
            future (milliseconds given as seconds, say), or is given without a ``revision``.
    """
    if commit_time is not None:
        if isinstance(commit_time, bool) or not isinstance(commit_time, (int, float)) \
                or not math.isfinite(commit_time) or commit_time < 0:
            raise InputError(f"commit_time must be a finite number of POSIX seconds >= 0, got {commit_time!r}")
        latest = time.time() + _COMMIT_TIME_SLACK_S
        if commit_time > latest:
            hint = " (milliseconds? divide by 1000)" if commit_time / 1000 <= latest else ""
            raise InputError(f"commit_time {commit_time!r} lies in the future{hint}: give the commit's time in POSIX "
                             "seconds")
        if "revision" not in params:
            raise InputError("commit_time is the commit time of the attempt's revision: give a revision condition "
                             "(--set revision=SHA)")
        value = float(commit_time)
        return {TAG.COMMIT_TIME: str(int(value)) if value.is_integer() else repr(value)}
    if "revision" in params:
        found = git_commit_time(params["revision"])
        if found is not None:
            return {TAG.COMMIT_TIME: str(found)}
    return {}


def check_attempt(group: Any, arm: Any, conditions: Any, *, latency_ms: Any = None, quality: Any = None,
                  ok: Any = True, failure: Any = None, validity: Any = None, experiment_name: Any = None,
                  parent_run_id: Any = None, attempt_id: Any = None, metrics: Any = None, step_times_ms: Any = None,
                  tags: Any = None, environment: Any = None, failure_detail: Any = None,
                  mem_status: Any = None, pair: Any = None, histories: Any = None,
                  contention_status: Any = None, commit_time: Any = None) -> CheckedAttempt:
    """Check every field of an attempt (the arguments of ``log_attempt``) without touching a store.

    Raises:
        InputError: the first field that is wrong, named.
    """
    group, arm = _check_group(group), _check_arm(arm)
    params = _check_params(conditions)
    result = _check_result(ok=ok, latency_ms=latency_ms, quality=quality, failure=failure, validity=validity,
                           metrics=metrics, step_times_ms=step_times_ms, tags=tags, failure_detail=failure_detail,
                           mem_status=mem_status, histories=histories, contention_status=contention_status)
    created = _creation_tags(group, arm, attempt_id, parent_run_id, environment, pair)
    created.update(commit_time_tags(params, commit_time))
    return CheckedAttempt(group, arm, params, result, created, _check_experiment_name(experiment_name))
