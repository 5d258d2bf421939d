"""One rule for what a run shows: its MLflow status follows what the evaluator counts.

Lost answers leave the store saying one thing and the verdict counting another:

- a run creation whose answer was lost and that MLflow's client sent again leaves a second run
  of one attempt (one ``perfgate.attempt_id``), RUNNING for ever beside the run that got the
  outcome: counted once, shown twice;
- a decision run whose creation's answer was lost (sent again, or the evaluator failed on it)
  stays RUNNING without a decision;
- a ``log_batch`` whose answer was lost after the outcome landed makes the writer end the run
  FAILED while ``perfgate.ok=true`` counts it as a success.

:func:`reconcile` says, for the runs one search found, which runs to end and how; ``sync``,
``reap`` and the evaluator apply it (:func:`apply`) to the runs they read anyway, so no extra
search is made for it. It never ends a run that may still be written: an attempt run is ended
as a duplicate only when another run of the same attempt holds the outcome (its writer writes
the run it was answered, never the duplicate), and a decision run without a decision only when
another decision run of the same judged attempts holds the decision, or its writer is known
gone, or it is older than the caller's limit and its writer cannot be asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mlflow.entities import RunStatus

from ..errors import StoreRefused
from . import _client
from ._environment import process_alive
from ._group import attempt_state
from ._schema import KIND_ATTEMPT, KIND_DECISION, MAX_TAG_VALUE, TAG, fit

__all__ = ["Fix", "apply", "reconcile"]


@dataclass(frozen=True)
class Fix:
    """A run to end (``status``), with the tags that say why."""

    run_id: str
    status: str
    why: str
    tags: dict = field(default_factory=dict)


def _active(run) -> bool:
    return run.info.lifecycle_stage != "deleted"  # MLflow cannot end a deleted run


def reconcile(runs, now_ms: int | None = None, stale_after_s: float = float("inf")) -> list[Fix]:
    """The runs among ``runs`` (MLflow ``Run`` objects, from one search) whose status says other
    than what the evaluator counts, and the status each is ended with:

    - an attempt whose outcome is written (``perfgate.ok``) ends as that outcome: FINISHED when ok,
      FAILED when failed (a failed one ended KILLED, a stopped attempt, stays so);
    - an attempt run RUNNING without an outcome whose ``attempt_id`` another run holds with its
      outcome is a duplicate of that run (a creation sent twice): KILLED, ``perfgate.duplicate_of``
      naming the run that counts, the reason as ``perfgate.failure``;
    - a decision run RUNNING without a decision ends KILLED (``perfgate.end_reason``) when a decision
      run of the same group and ``perfgate.decision_key`` holds the decision, when its writer
      (``perfgate.supervisor``) is known gone, or when it is older than ``stale_after_s`` and its
      writer cannot be asked.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    runs = [run for run in runs if _active(run)]
    fixes: list[Fix] = []
    holders: dict[tuple, str] = {}  # (group, attempt_id) -> a run holding its outcome
    decided: dict[tuple, str] = {}  # (group, decision_key) -> a decision run holding its decision
    for run in runs:
        tags = run.data.tags
        if tags.get(TAG.KIND) == KIND_ATTEMPT and tags.get(TAG.ATTEMPT_ID) and tags.get(TAG.OK) in ("true", "false"):
            holders.setdefault((tags.get(TAG.GROUP), tags[TAG.ATTEMPT_ID]), run.info.run_id)
        if TAG.DECISION in tags and tags.get(TAG.DECISION_KEY):
            decided.setdefault((tags.get(TAG.GROUP), tags[TAG.DECISION_KEY]), run.info.run_id)
    for run in runs:
        tags, status = run.data.tags, run.info.status
        kind = tags.get(TAG.KIND)
        if kind == KIND_ATTEMPT:
            fix = _attempt_fix(run, holders, now_ms)
        elif kind == KIND_DECISION and status == "RUNNING" and TAG.DECISION not in tags:
            fix = _decision_fix(run, decided, now_ms, stale_after_s)
        else:
            fix = None
        if fix is not None and fix.status != status:
            fixes.append(fix)
    return fixes


def _attempt_fix(run, holders: dict, now_ms: int) -> Fix | None:
    tags, status, run_id = run.data.tags, run.info.status, run.info.run_id
    state, _ = attempt_state(tags, status, run.info.start_time, now_ms, float("inf"))
    if state == "ok" and status != "FINISHED":
        return Fix(run_id, "FINISHED", f"its outcome is written (ok) but it was shown {status}")
    if state == "failed" and status not in ("FAILED", "KILLED"):
        return Fix(run_id, "FAILED", f"its outcome is written (failed) but it was shown {status}")
    if status != "RUNNING" or state in ("ok", "failed", "excluded") or TAG.DUPLICATE_OF in tags:
        return None
    holder = holders.get((tags.get(TAG.GROUP), tags.get(TAG.ATTEMPT_ID)))
    if holder is None or holder == run_id:
        return None
    reason = (f"duplicate: run {holder} holds the outcome of attempt {tags[TAG.ATTEMPT_ID]}; this run is a second "
              "creation of it (a request sent again after its answer was lost) and counts for nothing")
    return Fix(run_id, "KILLED", reason, {TAG.DUPLICATE_OF: holder, TAG.FAILURE: fit(reason, MAX_TAG_VALUE)})


def _decision_fix(run, decided: dict, now_ms: int, stale_after_s: float) -> Fix | None:
    tags, run_id = run.data.tags, run.info.run_id
    holder = decided.get((tags.get(TAG.GROUP), tags.get(TAG.DECISION_KEY)))
    if holder is not None and holder != run_id:
        reason = (f"duplicate: decision run {holder} holds the decision of the same attempts; this run never got "
                  "one (a creation sent again after its answer was lost, or a twin that lost the race)")
    else:
        writer = tags.get(TAG.SUPERVISOR)
        alive = process_alive(writer) if writer else None
        age_s = (now_ms - (run.info.start_time or now_ms)) / 1000
        if alive is False:
            reason = "supervisor_died: the evaluator that created it ended before writing its decision"
        elif alive is None and age_s > stale_after_s:
            reason = f"reaped: RUNNING for {age_s:.0f} s (limit {stale_after_s:.0f} s) without a decision"
        else:
            return None
    return Fix(run_id, "KILLED", reason, {TAG.END_REASON: fit(reason, MAX_TAG_VALUE)})


def apply(mlflow_client, fixes: list[Fix]) -> list[str]:
    """End each run as its fix says (its tags first); the run ids ended.

    A run deleted since it was read is passed, not ended: a twin evaluator that lost the claim of
    a decision discards its own run (ended KILLED, then deleted) while this one holds the group's
    runs as they were a moment before; MLflow refuses any write to a deleted run.
    """
    ended = []
    for fix in fixes:
        try:
            if fix.tags:
                _client.log_batch(mlflow_client, fix.run_id, tags=fix.tags)
            _client.retrying(lambda: mlflow_client.set_terminated(fix.run_id, RunStatus.to_string(
                RunStatus.from_string(fix.status))))
        except StoreRefused:
            if not _deleted(mlflow_client, fix.run_id):
                raise
            continue
        ended.append(fix.run_id)
    return ended


def _deleted(mlflow_client, run_id: str) -> bool:
    """Whether the run is deleted (or purged) now."""
    try:
        return _client.retrying(lambda: mlflow_client.get_run(run_id)).info.lifecycle_stage == "deleted"
    except StoreRefused:
        return True  # purged: no such run any more
