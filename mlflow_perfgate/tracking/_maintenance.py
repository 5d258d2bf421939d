"""Keeping the store honest: replaying the journal (``sync``) and reaping stale attempts (``reap``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time

from mlflow.entities import RunStatus, ViewType

from ..errors import InputError, StoreRefused, StoreUnavailable
from . import _client, _journal, _reconcile
from ._attempts import _experiment_env, clip, held_attempts, write_payload
from ._environment import process_alive
from ._group import attempt_state, group_filter
from ._schema import KIND_ATTEMPT, KIND_COMPARISON, KIND_DECISION, KIND_SUITE, TAG

__all__ = ["JournalBusy", "abandon", "forget", "parse_duration", "reap", "sync"]

#: How long a ``sync`` waits for another one replaying the same journal before it gives up.
SYNC_LOCK_WAIT_S = 120.0
#: A decision run left RUNNING without a decision is ended by ``sync`` (whose own limit is this
#: long) when its writer cannot be asked; ``reap`` uses its ``--older-than``, the evaluator its
#: ``stale_after_s``.
SYNC_STALE_AFTER_S = 3600.0


class JournalBusy(StoreUnavailable):
    """Another ``sync`` held the journal's lock for longer than this one would wait: nothing sent."""


@contextlib.contextmanager
def _replay_lock(wait_s: float):
    """Hold the journal's replay lock (``<journal>.lock``, ``flock``), waiting at most ``wait_s``.

    Two replays of one journal at once would both find an attempt missing from the store and
    both write it; with the lock the second reads the journal after the first marked what it sent.

    Raises:
        JournalBusy: the lock stayed held for ``wait_s``.
    """
    path = _journal.journal_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise JournalBusy(
                        f"another 'mlflow-perfgate sync' (or a compare sending what waits) has held the journal's "
                        f"lock {lock_path} for {wait_s:.0f} s; this sync sent nothing: run it again when that one "
                        "ends") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"`` or ``"1d"`` in seconds."""
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"a duration must be a positive number with an optional unit s, m, h or d (like 2h); got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


class SyncCounts(dict):
    """What :func:`sync` did: a dict of counts, with the lines it could not read beside them."""

    in_flight: int = 0
    skipped_lines: list
    reconciled: list


def sync(*, lock_wait_s: float = SYNC_LOCK_WAIT_S) -> dict:
    """Send every journaled attempt of the current tracking location that MLflow does not hold yet.

    Idempotent: an attempt whose ``attempt_id`` MLflow already holds with its outcome written
    is only marked synced (the evaluator's rule, :func:`attempt_state`); one that MLflow holds as
    started, without its outcome, gets the outcome written onto that run. An attempt journaled
    only as started, whose process is gone, is written as failed (``supervisor_died``); one that
    MLflow holds ended already (reaped, stopped) is left as it is. One search per group finds what
    is there; the runs it finds are then ended as the evaluator counts them
    (:func:`~mlflow_perfgate.tracking._reconcile.reconcile`: a run shown FAILED whose outcome is
    ok, a second run of one attempt, a decision run that never got its decision).

    One replay at a time per journal: a twin waits for the journal's lock (``<journal>.lock``) at
    most ``lock_wait_s``, then reads what the first left pending, so two syncs at once store each
    attempt once.

    Returns:
        ``{"sent": n, "already_present": n, "pending_before": n}``, with the attributes
        ``in_flight`` (started attempts left pending: still running, or run on another host),
        ``skipped_lines`` (journal lines that could not be read, each ``path:line: why``) and
        ``reconciled`` (the run ids ended as the evaluator counts them).

    Raises:
        JournalBusy: another sync held the journal's lock for ``lock_wait_s``.
    """
    mlflow_client = _client.client()
    with _replay_lock(lock_wait_s):
        return _sync(mlflow_client)


def _sync(mlflow_client) -> dict:
    entries = _journal.pending(tracking_uri=mlflow_client.tracking_uri)
    counts = SyncCounts(pending_before=len(entries), sent=0, already_present=0)
    counts.skipped_lines = _journal.skipped_lines()
    counts.reconciled = []
    held: dict[tuple, dict] = {}
    for entry in entries:
        only_started = entry.get("type") == "started"
        if only_started:
            supervisor = entry["creation_tags"].get(TAG.SUPERVISOR, "")
            if process_alive(supervisor) is not False:
                counts.in_flight += 1  # still running, or this host cannot tell: leave it pending
                continue
            entry = {**entry, "ok": False, "metrics": {}, "step_times_ms": [],
                     "tags": {TAG.FAILURE: "supervisor_died: the process running this attempt ended before its "
                                           "outcome was written"}}
        with _experiment_env(entry.get("experiment_env") or {}):
            experiment_id = _client.resolve_experiment(mlflow_client, entry["experiment_name"], create=True)
        key = (experiment_id, entry["group"])
        if key not in held:
            runs = _client.search_all(mlflow_client, [experiment_id], group_filter(entry["group"]),
                                      view=ViewType.ALL)
            mine = [run for run in runs if run.data.tags.get(TAG.GROUP) == entry["group"]]
            counts.reconciled += _reconcile.apply(mlflow_client, _reconcile.reconcile(
                mine, stale_after_s=SYNC_STALE_AFTER_S))
            held[key] = held_attempts(mine, entry["group"])
        run = held[key].get(entry["attempt_id"])
        if run is not None and (TAG.OK in run.data.tags or (only_started and run.info.status != "RUNNING")):
            # its outcome is written, or (journaled as started only) its run was ended already: it is there
            counts["already_present"] += 1
            _journal.mark_synced(entry["attempt_id"], run.info.run_id)
            continue
        started = run.info.run_id if run is not None and run.info.status == "RUNNING" else None
        run_id = write_payload(mlflow_client, entry, started, journaled=True)
        _journal.mark_synced(entry["attempt_id"], run_id)
        counts["sent"] += 1
    return counts


def reap(older_than_s: float, *, experiment_name: str | None = None, group: str | None = None,
         attempts_only: bool = False) -> list[str]:
    """End the runs left RUNNING by a process that is gone, so the UI shows what the evaluator counts.

    One search for RUNNING runs (of the group, or of the experiment), then by the evaluator's
    rule (:func:`attempt_state`):

    - an attempt whose outcome was written but whose run was never terminated ends FINISHED
      (ok) or FAILED (not ok), as its outcome says;
    - an attempt without an outcome, older than ``older_than_s`` or whose process is known to be
      gone (``supervisor_died``), ends KILLED with the reason as ``perfgate.failure``, unless this
      host's journal holds its outcome (written while the store could not be reached): ``sync``
      writes that onto the run, so it is left RUNNING for it;
    - a comparison run left RUNNING by a killed ``compare`` (or a suite run by a killed ``suite
      run``), older than ``older_than_s`` or whose process is gone, ends KILLED with the reason as
      ``perfgate.end_reason`` (not with
      ``attempts_only``: ``compare --resume`` reaps the attempts of the group it goes on with,
      at ``older_than_s = inf``, and carries on its comparison run).

    A run whose process this host sees alive is never ended for its age: it is still at work
    (a long attempt, a long suite), and ending it would leave an outcome beside a failure.

    Before that, the runs of each group with a RUNNING attempt or decision run (one search per
    group), and the attempts whose status contradicts their written outcome (a FAILED run whose
    ``perfgate.ok`` is true: a lost answer to its ``log_batch``), are ended as the evaluator counts
    them (:func:`~mlflow_perfgate.tracking._reconcile.reconcile`: the rule ``sync`` and the evaluator
    apply too): a second run of one attempt (a creation sent twice) KILLED as a duplicate of the run
    holding the outcome, a decision run that never got its decision KILLED when a twin holds it, its
    writer is gone or it is older than ``older_than_s``, an outcome shown otherwise ended as it says.

    Returns:
        The reaped run ids (the reconciled ones first).
    """
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)) or not older_than_s > 0:
        raise InputError(f"older_than_s must be a number > 0, got {older_than_s!r}")
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    running = "attributes.status = 'RUNNING'"
    filter_string = f"{group_filter(group)} AND {running}" if group is not None else running
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string)
    now_ms = int(time.time() * 1000)
    fixes = _reconcile_fixes(mlflow_client, experiment_id, runs, group, now_ms, older_than_s)
    reaped = _reconcile.apply(mlflow_client, fixes)
    journaled = {entry["attempt_id"] for entry in _journal.pending(tracking_uri=mlflow_client.tracking_uri, group=group)
                 if entry.get("type") == "attempt"}  # outcomes sync will write
    for run in runs:
        tags, run_id = run.data.tags, run.info.run_id
        if (group is not None and tags.get(TAG.GROUP) != group) or run_id in reaped:
            continue
        kind = tags.get(TAG.KIND)
        if kind == KIND_ATTEMPT:
            state, failure = attempt_state(tags, run.info.status, run.info.start_time, now_ms, older_than_s)
            if state == "running" or (state in ("crashed", "stale") and tags.get(TAG.ATTEMPT_ID) in journaled):
                continue
            if state == "stale" and process_alive(tags.get(TAG.SUPERVISOR, "")) is True:
                continue  # old, but its process still runs it
            if state in ("ok", "failed"):
                status = RunStatus.FINISHED if state == "ok" else RunStatus.FAILED
            else:
                status = RunStatus.KILLED
                reason = failure if state == "crashed" else failure.replace("stale:", "reaped:", 1)
                _client.retrying(lambda: mlflow_client.set_tag(run_id, TAG.FAILURE, clip(reason)))
        elif kind in (KIND_COMPARISON, KIND_SUITE) and TAG.DECISION not in tags and not attempts_only:
            alive = process_alive(tags.get(TAG.SUPERVISOR, ""))
            age_s = (now_ms - (run.info.start_time or now_ms)) / 1000
            if alive is False:
                what = "compare" if kind == KIND_COMPARISON else "suite run"
                reason = f"supervisor_died: the {what} that ran it ended before its decision"
            elif alive is None and age_s > older_than_s:
                reason = f"reaped: RUNNING for {age_s:.0f} s (limit {older_than_s:.0f} s) without a decision"
            else:
                continue
            status = RunStatus.KILLED
            _client.retrying(lambda: mlflow_client.set_tag(run_id, TAG.END_REASON, reason))
        else:
            continue
        _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(status)))
        reaped.append(run_id)
    return reaped


def _reconcile_fixes(mlflow_client, experiment_id: str, running: list, group: str | None, now_ms: int,
                     older_than_s: float) -> list:
    """:func:`reap`'s part of the shared rule: the groups of its RUNNING attempt and decision runs read
    whole (one search each), and the attempts whose status contradicts their outcome."""
    groups = {run.data.tags.get(TAG.GROUP) for run in running
              if run.data.tags.get(TAG.KIND) in (KIND_ATTEMPT, KIND_DECISION) and run.data.tags.get(TAG.GROUP)}
    if group is not None:
        groups = {group}
    seen: dict[str, object] = {}
    for name in sorted(groups):
        for run in _client.search_all(mlflow_client, [experiment_id], group_filter(name)):
            if run.data.tags.get(TAG.GROUP) == name:
                seen[run.info.run_id] = run
    if group is None:  # an outcome shown otherwise, in a group with nothing RUNNING
        ok = f'tags."{TAG.KIND}" = \'{KIND_ATTEMPT}\' AND tags."{TAG.OK}" = '
        for clause in (ok + "'true' AND attributes.status != 'FINISHED'", ok + "'false' AND attributes.status = 'FINISHED'"):
            for run in _client.search_all(mlflow_client, [experiment_id], clause):
                seen.setdefault(run.info.run_id, run)
    return _reconcile.reconcile(list(seen.values()), now_ms, older_than_s)


def abandon(group: str, reason: str, *, experiment_name: str | None = None) -> list[str]:
    """End a group's runs left RUNNING by a writer the caller knows is gone, as failures with ``reason``.

    For what this host cannot see: the process that ran the group's attempts lived on another
    host (a Ray node that died, a task that was cancelled), so ``supervisor_died`` cannot be
    checked here, and the evaluator would wait for its attempts until they are stale
    (``stale_after_s``, an hour by default). The caller must know that no process still writes
    the group (``ray_dispatch`` knows: the only task that ran it ended). One search for the
    group's RUNNING runs, then:

    - an attempt whose outcome was written but whose run was never terminated ends FINISHED or
      FAILED, as its outcome says (as :func:`reap` does);
    - an attempt without an outcome ends KILLED with ``reason`` as ``perfgate.failure``: the
      evaluator counts it as a failed attempt (``crashed``), never as a success; an outcome that
      ``sync`` sends later from the writer's journal is written as a run of the same
      ``attempt_id`` and replaces it in the counts (an outcome known beats a crash assumed);
    - a comparison run without a decision ends KILLED with ``reason`` as ``perfgate.end_reason``.

    Runs that ended already are left as they are.

    Returns:
        The run ids ended.

    Raises:
        InputError: an empty reason.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InputError("abandon needs a reason (why the group's writer is gone)")
    mlflow_client = _client.client()
    try:
        experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    except InputError:
        return []  # no experiment: nothing was written
    running = f"{group_filter(group)} AND attributes.status = 'RUNNING'"
    runs = _client.search_all(mlflow_client, [experiment_id], running)
    now_ms = int(time.time() * 1000)
    ended = []
    for run in runs:
        tags, run_id = run.data.tags, run.info.run_id
        if tags.get(TAG.GROUP) != group:
            continue
        kind = tags.get(TAG.KIND)
        if kind == KIND_ATTEMPT:
            state, _ = attempt_state(tags, run.info.status, run.info.start_time, now_ms, float("inf"))
            if state in ("ok", "failed"):
                status = RunStatus.FINISHED if state == "ok" else RunStatus.FAILED
            else:
                status = RunStatus.KILLED
                if state != "excluded":  # forget took it out already; its reason stays
                    _client.retrying(lambda: mlflow_client.set_tag(run_id, TAG.FAILURE, clip(reason)))
        elif kind == KIND_COMPARISON and TAG.DECISION not in tags:
            status = RunStatus.KILLED
            _client.retrying(lambda: mlflow_client.set_tag(run_id, TAG.END_REASON, clip(reason)))
        else:
            continue
        _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(status)))
        ended.append(run_id)
    return ended


def forget(group: str, run_ids: list[str], reason: str) -> list[str]:
    """Exclude mistaken attempts from a group's decisions, with a reason; nothing is deleted.

    Each run must be an attempt of ``group``; it gets ``perfgate.excluded=true`` and the reason
    (``perfgate.excluded_reason``). The evaluator then leaves it out of every count and says how
    many it excluded; removing the two tags brings it back.

    Returns:
        The run ids excluded.

    Raises:
        InputError: no run ids, an empty reason, or a run that is not an attempt of the group
            (nothing is written then).
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InputError("forget needs a reason (what was mistaken about the attempt)")
    if not run_ids:
        raise InputError("forget needs at least one --run-id")
    mlflow_client = _client.client()
    runs = []
    for run_id in dict.fromkeys(run_ids):
        try:
            run = _client.retrying(lambda: mlflow_client.get_run(run_id))
        except StoreRefused:
            raise InputError(f"run {run_id!r} does not exist in this tracking store") from None
        if run.data.tags.get(TAG.KIND) != KIND_ATTEMPT or run.data.tags.get(TAG.GROUP) != group:
            raise InputError(f"run {run_id!r} is not an attempt of group {group!r}")
        runs.append(run)
    for run in runs:
        _client.log_batch(mlflow_client, run.info.run_id,
                          tags={TAG.EXCLUDED: "true", TAG.EXCLUDED_REASON: clip(f"forgotten: {reason.strip()}")})
    return [run.info.run_id for run in runs]
