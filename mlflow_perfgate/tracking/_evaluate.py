"""The evaluator: one search for a group's attempts, the rules, and the decision run."""

from __future__ import annotations

import contextlib
import functools
import math
import tempfile
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from mlflow.entities import Metric, RunStatus

from .. import rules
from . import _client, _journal, _report
from ._environment import ENV_MISMATCH_MODES, compare_fingerprints, env_from_tags
from ._schema import (
    ARMS,
    KIND_ATTEMPT,
    KIND_DECISION,
    MAX_PARAM_VALUE,
    METRIC,
    TAG,
    THRESHOLD_PARAMS,
    group_key,
)

__all__ = ["evaluate_group", "group_filter", "DEFAULT_STALE_AFTER_S", "AttemptView", "load_group"]

#: A run of the group still RUNNING after this long (from its start) counts as a failed,
#: 'stale' attempt: its process is gone or hung. Younger ones make the answer ``rerun``.
DEFAULT_STALE_AFTER_S = 3600.0
_TERMINAL = {"FINISHED", "FAILED", "KILLED"}
# MLflow stores +/-infinity as +/-1.7976931348623157e308.
_MLFLOW_INFINITY = 1.7976931348623157e308


def _quoted_filter(clauses: list[tuple[str, str]]) -> str | None:
    """``tags."k" = 'v' AND ...`` if MLflow's parser reads every value back exactly, else None."""
    from mlflow.utils.search_utils import SearchUtils

    parts = []
    for key, value in clauses:
        quote = "'" if "'" not in value else '"' if '"' not in value else None
        if quote is None:
            return None
        parts.append(f'tags."{key}" = {quote}{value}{quote}')
    text = " AND ".join(parts)
    try:
        parsed = SearchUtils.parse_search_filter(text)
    except Exception:
        return None
    expected = [("tag", key, "=", value) for key, value in clauses]
    got = [(p.get("type"), p.get("key"), p.get("comparator"), p.get("value")) for p in parsed]
    return text if got == expected else None


@functools.lru_cache(maxsize=256)
def group_filter(group: str) -> str:
    """A filter string selecting exactly one group's runs (attempts and decisions).

    The group name is quoted only when MLflow's own filter parser reads it back unchanged;
    otherwise (both quote characters in the name, say) the filter uses the name's sha256 key
    tag, which every run we write carries. Callers still compare the full name exactly, and
    pick the kind of run they want from the results: one clause keeps the query as cheap as
    a plain search of the group.
    """
    text = _quoted_filter([(TAG.GROUP, group)])
    if text is None:
        text = _quoted_filter([(TAG.GROUP_KEY, group_key(group))])
    assert text is not None  # hex keys always quote
    return text


@dataclass
class AttemptView:
    """One attempt run as the evaluator sees it. ``state`` keeps the outcomes apart:
    ``ok``, ``failed`` (reported), ``crashed`` (ended without reporting), ``stale``
    (RUNNING too long) and ``running``."""

    run_id: str
    arm: str
    state: str
    attempt_id: str
    start_time: int
    status: str
    params: dict
    latency_ms: float | None = None
    quality: float | None = None
    failure: str | None = None
    validity: dict | None = None
    metrics: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    parent_run_id: str | None = None

    def record(self) -> dict:
        """The specification's attempt record."""
        if self.state == "ok":
            return {"ok": True, "latency_ms": self.latency_ms, "quality": self.quality, "run_id": self.run_id}
        return {"ok": False, "failure": self.failure, "run_id": self.run_id}


def _finite_metric(run, key: str) -> float | None:
    value = run.data.metrics.get(key)
    if value is None:
        return None
    if not math.isfinite(value) or abs(value) >= _MLFLOW_INFINITY:
        raise ValueError(
            f"run {run.info.run_id} holds a non-finite {key} ({value!r}); it cannot be judged. "
            "Delete or fix the run, then evaluate again."
        )
    return value


def _view(run, now_ms: int, stale_after_s: float) -> AttemptView:
    tags, info = run.data.tags, run.info
    arm = tags.get(TAG.ARM)
    if arm not in ARMS:
        raise ValueError(
            f"run {info.run_id} of the group has {TAG.ARM}={arm!r}; expected one of {list(ARMS)}"
        )
    view = AttemptView(
        run_id=info.run_id, arm=arm, state="", attempt_id=tags.get(TAG.ATTEMPT_ID) or info.run_id,
        start_time=info.start_time or 0, status=info.status, params=dict(run.data.params),
        metrics=dict(run.data.metrics), tags=dict(tags), parent_run_id=tags.get(TAG.PARENT),
    )
    if tags.get(TAG.RUN_VALID) in ("true", "false"):
        invalid = tags[TAG.RUN_VALID] == "false"
        issues = [i for i in tags.get(TAG.ISSUES, "").split(",") if i]
        view.validity = {
            "run_valid": not invalid, "issues": issues,
            "first_failure": tags.get(TAG.FIRST_FAILURE) or None,
            "reproducible": tags.get(TAG.REPRODUCIBLE) == "true",
        }
    ok_tag = tags.get(TAG.OK)
    if ok_tag == "true":
        view.latency_ms = _finite_metric(run, METRIC.LATENCY)
        view.quality = _finite_metric(run, METRIC.QUALITY)
        if view.latency_ms is None or view.quality is None or view.latency_ms <= 0:
            raise ValueError(
                f"run {info.run_id} says {TAG.OK}=true but lacks a positive {METRIC.LATENCY} or a "
                f"{METRIC.QUALITY}; log it again with mlflow_perfgate.log_attempt"
            )
        view.state = "ok"
    elif ok_tag == "false":
        view.state, view.failure = "failed", tags.get(TAG.FAILURE) or "unspecified"
    elif info.status in ("FAILED", "KILLED"):
        view.state = "crashed"
        view.failure = tags.get(TAG.FAILURE) or f"crashed: run ended {info.status} without reporting"
    elif info.status == "FINISHED":
        view.state, view.failure = "crashed", "no_result: run FINISHED without reporting"
    else:
        age_s = (now_ms - view.start_time) / 1000
        if age_s > stale_after_s:
            view.state = "stale"
            view.failure = f"stale: {info.status} for {age_s:.0f} s (limit {stale_after_s:.0f} s)"
        else:
            view.state = "running"
    return view


def _preference(view: AttemptView) -> tuple:
    # Among runs of one attempt_id (a retried write), keep the most complete one.
    rank = {"ok": 0, "failed": 0, "crashed": 1, "stale": 2, "running": 2}[view.state]
    return (rank, view.start_time, view.run_id)


def load_group(group: str, experiment_id: str, mlflow_client, *, stale_after_s: float,
               kind: str = KIND_ATTEMPT) -> tuple[list[AttemptView], list[str]]:
    """The group's attempts (one paginated search), deduplicated by attempt_id.

    Returns:
        The attempts, oldest first, and the run ids dropped as duplicates of a retried write.
    """
    runs = _client.search_all(mlflow_client, [experiment_id], group_filter(group))
    now_ms = int(time.time() * 1000)
    # The filter may match more than the exact name on a case-insensitive database: compare here.
    views = [_view(run, now_ms, stale_after_s) for run in runs
             if run.data.tags.get(TAG.GROUP) == group and run.data.tags.get(TAG.KIND) == kind]
    by_attempt: dict[str, list[AttemptView]] = {}
    for view in views:
        by_attempt.setdefault(view.attempt_id, []).append(view)
    kept, duplicates = [], []
    for same in by_attempt.values():
        same.sort(key=_preference)
        kept.append(same[0])
        duplicates.extend(v.run_id for v in same[1:])
    kept.sort(key=lambda v: (v.start_time, v.run_id))
    return kept, duplicates


def _arm_params(views: list[AttemptView], arm: str) -> dict | None:
    """The params every attempt of an arm shares, or ValueError naming the keys that differ."""
    logged = [v for v in views if v.arm == arm and v.params]
    if not logged:
        return None
    first = logged[0].params
    for other in logged[1:]:
        if other.params != first:
            keys = sorted(k for k in set(first) | set(other.params) if first.get(k) != other.params.get(k))
            raise ValueError(
                f"the {arm} attempts do not share identical conditions: {keys} differ "
                f"(runs {logged[0].run_id} and {other.run_id})"
            )
    return first


def _changed_variable(views: list[AttemptView]) -> tuple[str | None, str | None, str | None]:
    """(variable, baseline value, candidate value) under the single-variable rule."""
    baseline, candidate = _arm_params(views, "baseline"), _arm_params(views, "candidate")
    if baseline is None or candidate is None:
        return None, None, None
    differ = rules.changed_keys({"baseline": baseline, "candidate": candidate})
    if len(differ) != 1:
        what = "do not differ in any condition" if not differ else f"differ in {len(differ)} conditions: {differ}"
        raise ValueError(
            f"baseline and candidate must differ in exactly one condition (the changed variable); they {what}"
        )
    key = differ[0]
    return key, baseline.get(key, "(absent)"), candidate.get(key, "(absent)")


_OBJECTIVE_THRESHOLDS = ("min_memory_reduction", "maximum_latency_cost")


def _thresholds(given: dict) -> dict:
    unknown = sorted(set(given) - set(THRESHOLD_PARAMS) - set(_OBJECTIVE_THRESHOLDS))
    if unknown:
        raise ValueError(
            f"unknown thresholds {unknown}; expected some of {list(THRESHOLD_PARAMS + _OBJECTIVE_THRESHOLDS)}")
    merged = {**rules.DEFAULT_THRESHOLDS, **{k: v for k, v in given.items() if v is not None}}
    try:
        # checks every threshold, judges nothing
        rules.evaluate_objective([], [], "memory", **merged)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return merged


def _records(views: list[AttemptView]) -> dict[str, list[dict]]:
    judged = [v for v in views if v.state != "running"]
    records = {}
    for arm in ARMS:
        records[arm] = []
        for view in judged:
            if view.arm != arm:
                continue
            record = view.record()
            if record["ok"]:
                for key in (METRIC.PEAK_MEM, METRIC.THROUGHPUT):
                    if key in view.metrics:
                        record[key] = view.metrics[key]
            records[arm].append(record)
    return records


def _judge(views: list[AttemptView], thresholds: dict, options: dict, env_mismatch: str) -> dict:
    """The rules, in the evaluator's order: correctness, single variable, environment,
    in-progress, then the decision rule."""
    invalid = [v for v in views if v.validity and not v.validity["run_valid"]]
    records = _records(views)
    summaries = {arm: rules.summarize_repeated_runs(records[arm]) for arm in ARMS}
    if invalid:
        first = invalid[0]
        issues = sorted({issue for v in invalid for issue in v.validity["issues"]})
        try:
            changed = _changed_variable(views)
        except ValueError:
            changed = (None, None, None)
        return {
            **summaries, "decision": "blocked_by_correctness", "reason": "run_invalid",
            "issues": issues, "first_failure": first.validity["first_failure"],
            "reproducible": first.validity["reproducible"],
            "invalid_runs": [v.run_id for v in invalid], "failed_checks": ["run_valid"],
            "_changed": changed,
        }
    changed = _changed_variable(views)
    warnings = []
    mismatches = compare_fingerprints([(v.run_id, env_from_tags(v.tags)) for v in views], changed[0])
    if mismatches and env_mismatch == "fail":
        raise ValueError(
            "the attempts ran in different environments beyond the changed variable ("
            + "; ".join(mismatches) + "); rerun them in one environment, or pass env_mismatch='warn'")
    if mismatches and env_mismatch == "warn":
        warnings += [f"environment differs: {m}" for m in mismatches]
    running = [v.run_id for v in views if v.state == "running"]
    if running:
        return {**summaries, "decision": "rerun", "reason": "attempts_in_progress",
                "running_runs": running, "failed_checks": [], "warnings": warnings, "_changed": changed}
    result = rules.decide(records["baseline"], records["candidate"], **options, **thresholds)
    for arm, indices in (result.get("contention") or {}).items():
        for index in indices:
            record = records[arm][index]
            warnings.append(
                f"possible contention: {arm} attempt {record['run_id']} ({record['latency_ms']:.4g} ms) is far "
                "outside its arm's spread; it stays in every count")
    result["contention_runs"] = {arm: [records[arm][i]["run_id"] for i in indices]
                                 for arm, indices in (result.get("contention") or {}).items()}
    result["warnings"] = warnings + result.get("warnings", [])
    result["_changed"] = changed
    return result


_SUMMARY_KEYS = ("median_ms", "p95_ms", "failure_rate", "quality", "valid_runs", "failed_runs", "attempted_runs",
                 "median_peak_mem_mib", "median_throughput_tok_s", "p5_throughput_tok_s")
_RESULT_FIGURES = ("baseline_noise", "required_improvement", "observed_improvement", "memory_reduction",
                   "latency_cost", "recommended_attempts")


def _summary_metrics(result: dict) -> dict[str, float]:
    metrics = {}
    for arm in ARMS:
        for key in _SUMMARY_KEYS:
            value = result[arm].get(key)
            if value is not None:
                metrics[f"{arm}_{key}"] = float(value)
    for key in _RESULT_FIGURES:
        if result.get(key) is not None:
            metrics[key] = float(result[key])
    for key, value in (result.get("robust") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("alpha", "confidence"):
            metrics[key if key != "recommended_attempts" else "robust_recommended_attempts"] = float(value)
    return metrics


def _common_parent(views: list[AttemptView], mlflow_client):
    parents = {v.parent_run_id for v in views}
    if len(parents) == 1 and None not in parents:
        return _client.retrying(lambda: mlflow_client.get_run(next(iter(parents))))
    return None


def _decision_target(parent, mlflow_client, experiment_id: str, group: str) -> tuple[str, bool]:
    """(run id to write the decision on, whether it is a new run needing attempts re-parented)."""
    if parent is not None and parent.data.tags.get(TAG.COMPARISON) == "true":
        if TAG.DECISION not in parent.data.tags:
            return parent.info.run_id, False
        # decided before: a new decision nests under the comparison, attempts stay put
        run = _client.retrying(lambda: mlflow_client.create_run(
            experiment_id, run_name="decision", tags={TAG.PARENT: parent.info.run_id}))
        return run.info.run_id, False
    run = _client.retrying(lambda: mlflow_client.create_run(
        experiment_id, run_name=f"decision {group[:60]}"))
    return run.info.run_id, True


def evaluate_group(group: str, *, experiment_name: str | None = None,
                   stale_after_s: float = DEFAULT_STALE_AFTER_S, objective: str | None = None,
                   method: str = "seed", mode: str = "improvement", margin: float = 0.05,
                   env_mismatch: str = "fail", alpha: float | None = None, confidence: float | None = None,
                   look: int | None = None, max_looks: int | None = None, dry_run: bool = False,
                   **thresholds: Any) -> dict:
    """Judge a group's attempts and log the decision run.

    Finds the attempts with one paginated search, then applies in order: correctness first
    (any attempt with ``run_valid`` false gives ``blocked_by_correctness``); the
    single-variable rule on the logged params (ValueError otherwise); the environment
    fingerprints (``env_mismatch``); in-progress attempts (``rerun``,
    ``attempts_in_progress``); and the decision rule (``rules.decide``). Failed, crashed and
    stale attempts stay in the failure-rate denominator.

    The decision is written onto the attempts' comparison run when they have one (and it is
    undecided), else onto a new run under which the attempts are nested.

    Args:
        group: the comparison id.
        experiment_name: default ``MLFLOW_EXPERIMENT_NAME`` or MLflow's Default experiment.
        stale_after_s: a RUNNING attempt older than this counts as failed (``stale``).
        objective: ``latency``, ``memory`` or ``throughput``; default: the comparison run's
            objective (from its diagnosis), else ``latency``.
        method: ``seed`` (the specification's rule, exact) or ``robust`` (Mann-Whitney U and a
            Hodges-Lehmann interval); both methods' figures are logged whichever decides.
        mode: ``improvement`` (the candidate must be faster) or ``non_regression`` (it may not
            be slower than ``margin``, for CI).
        margin: the slowdown tolerated in ``non_regression``.
        env_mismatch: ``fail`` (default: refuse arms whose environment fingerprints differ
            beyond the changed variable), ``warn`` or ``ignore``.
        alpha, confidence: the robust method's levels (its defaults when None).
        look, max_looks: the look number of a sequential comparison (``--until-decisive``).
        dry_run: judge without writing anything (the interim looks of a sequential comparison).
        **thresholds: ``min_valid_runs``, ``min_improvement``, ``quality_tolerance``,
            ``maximum_failure_rate``, ``maximum_p95_ratio`` (the specification's defaults), and
            for the memory objective ``min_memory_reduction`` (0.10) and
            ``maximum_latency_cost`` (0.30).

    Returns:
        The rule's result (``baseline``, ``candidate`` summaries, the checks) with
        ``decision``, ``reason``, ``failed_checks``, ``decision_run_id``, ``group``,
        ``objective``, ``method``, ``mode``, ``changed_variable``, ``baseline_value``,
        ``candidate_value``, ``run_ids``, ``thresholds``, ``warnings`` and ``experiment_id``.

    Raises:
        ValueError: bad thresholds or options, no attempts, an unknown experiment, a broken
            single-variable rule or differing environments; no decision run is written then.
    """
    if not isinstance(group, str) or not group:
        raise ValueError(f"group must be a non-empty string, got {group!r}")
    if isinstance(stale_after_s, bool) or not isinstance(stale_after_s, (int, float)) or not stale_after_s > 0:
        raise ValueError(f"stale_after_s must be a number > 0, got {stale_after_s!r}")
    if env_mismatch not in ENV_MISMATCH_MODES:
        raise ValueError(f"env_mismatch must be one of {list(ENV_MISMATCH_MODES)}, got {env_mismatch!r}")
    merged = _thresholds(thresholds)
    options = dict(method=method, mode=mode, margin=margin, alpha=alpha, confidence=confidence, look=look,
                   max_looks=max_looks)
    if objective is not None:
        options["objective"] = objective
    rules.decide([], [], **options, **merged)  # checks every option before anything is read
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    views, duplicates = load_group(group, experiment_id, mlflow_client, stale_after_s=stale_after_s)
    if not views:
        raise ValueError(f"no attempts of group {group!r} in experiment {experiment_id}")
    parent = _common_parent(views, mlflow_client)
    if objective is None:
        objective = (parent.data.tags.get(TAG.OBJECTIVE) if parent is not None else None) or "latency"
        options["objective"] = objective
    result = _judge(views, merged, options, env_mismatch)
    waiting = _journal.pending(tracking_uri=mlflow_client.tracking_uri, group=group)
    if waiting:
        # Their outcomes (failures included) are unknown to MLflow: deciding now could drop
        # failed attempts from the denominator.
        result.setdefault("warnings", []).append(
            f"{len(waiting)} attempts of this group wait in the journal {_journal.journal_path()}; "
            "run 'mlflow-perfgate sync', then evaluate again")
        if result["decision"] in ("accept", "reject"):
            result.update(decision="rerun", reason="attempts_not_synced")
    changed_variable, baseline_value, candidate_value = result.pop("_changed")
    result.update(
        group=group, experiment_id=experiment_id, thresholds=merged,
        objective=objective, method=method, mode=mode,
        changed_variable=changed_variable, baseline_value=baseline_value,
        candidate_value=candidate_value, run_ids=[v.run_id for v in views],
        duplicate_run_ids=duplicates,
        attempts=[{**v.record(), "arm": v.arm, "state": v.state, "attempt_id": v.attempt_id,
                   "start_time": v.start_time} for v in views],
    )
    result.setdefault("warnings", [])
    result.setdefault("failed_checks", [])
    if dry_run:
        result["decision_run_id"] = None
        return result
    decision_run_id, reparent = _decision_target(parent, mlflow_client, experiment_id, group)
    result["decision_run_id"] = decision_run_id
    try:
        _write_decision(mlflow_client, decision_run_id, result)
    except BaseException:
        if decision_run_id != (parent.info.run_id if parent is not None else None):
            with contextlib.suppress(Exception):  # no half-written decision run stays listed
                mlflow_client.delete_run(decision_run_id)
        raise
    if reparent:
        for view in views:
            if view.parent_run_id != decision_run_id:
                _client.retrying(lambda: mlflow_client.set_tag(view.run_id, TAG.PARENT, decision_run_id))
    _report.write_step_summary(result)
    return result


def _param_text(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 15] + " ...[truncated]"


def _write_decision(mlflow_client, run_id: str, result: dict) -> None:
    params = {key: str(value) for key, value in result["thresholds"].items()}
    if result.get("mode") == "non_regression":
        params["margin"] = str(result.get("margin"))
    if result.get("method") == "robust" and result.get("alpha") is not None:
        params.update(alpha=str(result["alpha"]), confidence=str(result["confidence"]))
    params.update(
        changed_variable=_param_text(result["changed_variable"]),
        baseline_value=_param_text(result["baseline_value"]),
        candidate_value=_param_text(result["candidate_value"]),
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        note = _report.decision_markdown(result)
        _report.prepare_artifacts(result, note, folder)  # may add a warning: render the note after
        note = _report.decision_markdown(result)
        (folder / "report.md").write_text(note)
        tags = {
            TAG.KIND: KIND_DECISION,
            TAG.GROUP: result["group"],
            TAG.GROUP_KEY: group_key(result["group"]),
            TAG.DECISION: result["decision"],
            TAG.REASON: result["reason"],
            TAG.FAILED_CHECKS: ",".join(result["failed_checks"]),
            TAG.CHANGED_VARIABLE: _param_text(result["changed_variable"]),
            TAG.OBJECTIVE: result["objective"],
            TAG.METHOD: result["method"],
            TAG.MODE: result["mode"],
            **({TAG.SEED_DECISION: result["seed"]["decision"],
                TAG.ROBUST_DECISION: result["robust"]["decision"]} if result.get("robust") else {}),
            TAG.NOTE: _report.fit_note(note),
        }
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in _summary_metrics(result).items() if math.isfinite(v)]
        try:
            _client.log_batch(mlflow_client, run_id, params=params, metrics=metrics, tags=tags)
            _report.log_artifacts(mlflow_client, run_id, result, folder)
        except BaseException:
            with contextlib.suppress(Exception):
                mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED)))
