"""Loading a group: the one filter that finds its runs, each run as an :class:`AttemptView`, de-duplicated."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

from mlflow.entities import ViewType

from ..errors import InputError
from . import _client
from ._environment import process_alive
from ._schema import ARMS, KIND_ATTEMPT, KIND_COMPARISON, KIND_DECISION, METRIC, PARAM, TAG, group_key

__all__ = ["AttemptView", "Group", "attempt_state", "group_filter", "load", "load_group"]

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
    deleted: bool = False

    def contention(self) -> dict:
        """The run's contention figures (``wait_share``, ``runq_wait_ms``), those it holds: what
        the report, the attempts table and the plot show; the rules never read them."""
        return {key: self.metrics[key] for key in (METRIC.WAIT_SHARE, METRIC.RUNQ_WAIT) if key in self.metrics}

    def record(self, metrics: tuple[str, ...] = ()) -> dict:
        """The specification's attempt record, with those of ``metrics`` the run holds when it is ok.

        An ok run's record also carries ``uncontended_latency_ms``, ``fastest_step_ms``,
        ``step_p10_ms``, ``step_mean_ms`` and ``step_p95_ms`` when the run has them (what a
        policy's ``latency="uncontended"`` / ``"fastest"`` / ``"p10"`` judges, and the step
        figures every latency decision checks).
        """
        if self.state == "ok":
            record = {"ok": True, "latency_ms": self.latency_ms, "quality": self.quality, "run_id": self.run_id}
            record.update((key, self.metrics[key]) for key in metrics if key in self.metrics)
            for key in (METRIC.UNCONTENDED_LATENCY, METRIC.FASTEST_STEP, METRIC.STEP_P10, METRIC.STEP_MEAN,
                        METRIC.STEP_P95):
                if key in self.metrics:
                    record[key] = self.metrics[key]
        else:
            record = {"ok": False, "failure": self.failure, "run_id": self.run_id}
        pair = self.tags.get(TAG.PAIR, "")
        if pair.isdigit():
            record["pair"] = int(pair)
        return record


def _finite_metric(run, key: str) -> float | None:
    value = run.data.metrics.get(key)
    if value is None:
        return None
    if not math.isfinite(value) or abs(value) >= _MLFLOW_INFINITY:
        raise InputError(
            f"run {run.info.run_id} holds a non-finite {key} ({value!r}); it cannot be judged. "
            "Delete or fix the run, then evaluate again."
        )
    return value


def _view(run, now_ms: int, stale_after_s: float) -> AttemptView:
    tags, info = run.data.tags, run.info
    arm = tags.get(TAG.ARM)
    if arm not in ARMS:
        raise InputError(
            f"run {info.run_id} of the group has {TAG.ARM}={arm!r}; expected one of {list(ARMS)}"
        )
    view = AttemptView(
        run_id=info.run_id, arm=arm, state="", attempt_id=tags.get(TAG.ATTEMPT_ID) or info.run_id,
        start_time=info.start_time or 0, status=info.status,
        params={k: v for k, v in run.data.params.items()
                if k != PARAM.DECISION_CLAIM and not k.startswith(PARAM.DECISION_CLAIM + ".")},
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
    view.state, view.failure = attempt_state(tags, info.status, view.start_time, now_ms, stale_after_s)
    if view.state == "ok":
        view.latency_ms = _finite_metric(run, METRIC.LATENCY)
        view.quality = _finite_metric(run, METRIC.QUALITY)
        if view.latency_ms is None or view.quality is None or view.latency_ms <= 0:
            raise InputError(
                f"run {info.run_id} says {TAG.OK}=true but lacks a positive {METRIC.LATENCY} or a "
                f"{METRIC.QUALITY}; log it again with mlflow_perfgate.log_attempt"
            )
        for key in (METRIC.UNCONTENDED_LATENCY, METRIC.FASTEST_STEP, METRIC.STEP_P10, METRIC.STEP_MEAN,
                    METRIC.STEP_P95):
            value = _finite_metric(run, key)
            if value is not None and value <= 0:
                raise InputError(f"run {info.run_id} holds {key}={value!r}; it must be > 0")
    return view


def attempt_state(tags: dict, status: str, start_time: int, now_ms: int, stale_after_s: float) -> tuple[str, str | None]:
    """What an attempt run is, whatever its run status says: the one rule of the evaluator, ``reap`` and ``sync``.

    - ``excluded``: ``forget`` took it out (``perfgate.excluded=true``); it is not judged.
    - ``ok`` / ``failed``: its outcome was written (``perfgate.ok``), even if the run was never
      terminated (its writer was killed between the two requests): the outcome counts.
    - ``crashed``: it ended FAILED, KILLED or FINISHED without an outcome, or it is RUNNING and
      the process that ran it is gone (``supervisor_died``, known on the host that ran it).
    - ``stale``: RUNNING without an outcome for longer than ``stale_after_s``.
    - ``running``: RUNNING, younger, its process alive or unknown: the answer waits for it.

    Returns:
        ``(state, failure reason or None)``.
    """
    if tags.get(TAG.EXCLUDED) == "true":
        return "excluded", tags.get(TAG.EXCLUDED_REASON) or "excluded"
    ok_tag = tags.get(TAG.OK)
    if ok_tag == "true":
        return "ok", None
    if ok_tag == "false":
        return "failed", tags.get(TAG.FAILURE) or "unspecified"
    if status in ("FAILED", "KILLED"):
        return "crashed", tags.get(TAG.FAILURE) or f"crashed: run ended {status} without reporting"
    if status == "FINISHED":
        return "crashed", "no_result: run FINISHED without reporting"
    supervisor = tags.get(TAG.SUPERVISOR)
    if supervisor and process_alive(supervisor) is False:
        return "crashed", "supervisor_died: the process running this attempt ended before its outcome was written"
    age_s = (now_ms - (start_time or now_ms)) / 1000
    if age_s > stale_after_s:
        return "stale", f"stale: {status} for {age_s:.0f} s (limit {stale_after_s:.0f} s)"
    return "running", None


def _preference(view: AttemptView) -> tuple:
    # Among runs of one attempt_id (a retried write), keep the most complete one, an active one first;
    # a run ended as a duplicate of another (perfgate.duplicate_of, tracking._reconcile) last of all.
    rank = {"excluded": 0, "ok": 0, "failed": 0, "crashed": 1, "stale": 2, "running": 2}[view.state]
    return (TAG.DUPLICATE_OF in view.tags, view.deleted, rank, view.start_time, view.run_id)


@dataclass
class Group:
    """What one search finds of a group: its attempts, the group's decision runs, what was set aside.

    Attributes:
        attempts: one view per attempt (de-duplicated by ``attempt_id``), oldest first; attempts
            deleted in the UI are kept (``deleted``): they still count.
        duplicates: run ids dropped as duplicates of a retried write.
        decisions: the group's decision runs, and its comparison runs that carry a decision,
            newest first (MLflow ``Run`` objects).
        conflicts: a note for each attempt_id whose runs disagree on the outcome (no retried
            write, a reused id): the failed run counts, the others are dropped as duplicates.
        runs: every run of the group the search found (MLflow ``Run`` objects), for
            ``tracking._reconcile``.
    """

    attempts: list[AttemptView]
    duplicates: list[str]
    decisions: list
    conflicts: list[str] = field(default_factory=list)
    runs: list = field(default_factory=list)


def load(group: str, experiment_id: str, mlflow_client, *, stale_after_s: float) -> Group:
    """The group's runs in one paginated search (deleted ones too), sorted into a :class:`Group`."""
    runs = _client.search_all(mlflow_client, [experiment_id], group_filter(group), view=ViewType.ALL)
    now_ms = int(time.time() * 1000)
    # The filter may match more than the exact name on a case-insensitive database: compare here.
    mine = [run for run in runs if run.data.tags.get(TAG.GROUP) == group]
    views = []
    for run in mine:
        if run.data.tags.get(TAG.KIND) == KIND_ATTEMPT:
            view = _view(run, now_ms, stale_after_s)
            view.deleted = run.info.lifecycle_stage == "deleted"
            views.append(view)
    decisions = [run for run in mine if run.info.lifecycle_stage != "deleted" and TAG.DECISION in run.data.tags
                 and run.data.tags.get(TAG.KIND) in (KIND_DECISION, KIND_COMPARISON)]
    decisions.sort(key=lambda run: (run.info.start_time or 0, run.info.run_id), reverse=True)
    by_attempt: dict[str, list[AttemptView]] = {}
    for view in views:
        by_attempt.setdefault(view.attempt_id, []).append(view)
    kept, duplicates, conflicts = [], [], []
    for attempt_id, same in by_attempt.items():
        same.sort(key=_preference)
        done = [v for v in same if v.state in ("ok", "failed", "excluded")]
        if len({_outcome(v) for v in done}) > 1:
            # not a retried write (that repeats its outcome): a reused attempt_id. The failure
            # counts, so that no failed attempt drops out of the denominator, and the note says so.
            chosen = next((v for v in done if v.state == "failed"), done[0])
            same.remove(chosen)
            same.insert(0, chosen)
            conflicts.append(
                f"attempt_id {attempt_id!r} is held by {len(same)} runs whose outcomes differ ("
                + "; ".join(f"run {v.run_id}: {_describe(v)}" for v in done)
                + f"): run {chosen.run_id} counts ({_describe(chosen)}); a retried write repeats its outcome, so "
                  "check how these attempts were recorded (one attempt_id per attempt)")
        kept.append(same[0])
        duplicates.extend(v.run_id for v in same[1:])
    kept.sort(key=lambda v: (v.start_time, v.run_id))
    return Group(kept, duplicates, decisions, conflicts, mine)


def _outcome(view: AttemptView) -> tuple:
    """What a retried write of one attempt repeats exactly."""
    return (view.arm, view.state, view.latency_ms, view.quality, view.failure)


def _describe(view: AttemptView) -> str:
    if view.state == "ok":
        return f"{view.arm}, ok, latency {view.latency_ms:.4g} ms"
    return f"{view.arm}, {view.state}: {view.failure}"


def load_group(group: str, experiment_id: str, mlflow_client, *, stale_after_s: float) -> tuple[list[AttemptView], list[str]]:
    """The group's attempts (one paginated search), deduplicated by attempt_id.

    Returns:
        The attempts, oldest first, and the run ids dropped as duplicates of a retried write.
    """
    found = load(group, experiment_id, mlflow_client, stale_after_s=stale_after_s)
    return found.attempts, found.duplicates
