"""Keeping the store honest: replaying the journal (``sync``) and reaping stale attempts (``reap``)."""

from __future__ import annotations

import re
import time

from mlflow.entities import RunStatus, ViewType

from ..rules._errors import InputError
from . import _client, _journal
from ._attempts import _experiment_env, clip, write_payload
from ._group import group_filter
from ._schema import KIND_ATTEMPT, TAG

__all__ = ["sync", "reap", "parse_duration"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"`` or ``"1d"`` in seconds."""
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"a duration must be a positive number with an optional unit s, m, h or d (like 2h); got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def sync() -> dict:
    """Send every journaled attempt of the current tracking URI that MLflow does not hold yet.

    Idempotent: an attempt whose ``attempt_id`` is already in MLflow with a reported outcome is
    only marked synced. One search per group finds what is there.

    Returns:
        ``{"sent": n, "already_present": n, "pending_before": n}``.
    """
    mlflow_client = _client.client()
    entries = _journal.pending(tracking_uri=mlflow_client.tracking_uri)
    counts = {"pending_before": len(entries), "sent": 0, "already_present": 0}
    present: dict[tuple, set] = {}
    for entry in entries:
        with _experiment_env(entry.get("experiment_env") or {}):
            experiment_id = _client.resolve_experiment(mlflow_client, entry["experiment_name"], create=True)
        key = (experiment_id, entry["group"])
        if key not in present:
            runs = _client.search_all(mlflow_client, [experiment_id], group_filter(entry["group"]),
                                      view=ViewType.ALL)
            present[key] = {run.data.tags.get(TAG.ATTEMPT_ID) for run in runs
                            if run.data.tags.get(TAG.GROUP) == entry["group"] and TAG.OK in run.data.tags}
        if entry["attempt_id"] in present[key]:
            counts["already_present"] += 1
            _journal.mark_synced(entry["attempt_id"], "already-present")
            continue
        run_id = write_payload(mlflow_client, entry)
        present[key].add(entry["attempt_id"])
        _journal.mark_synced(entry["attempt_id"], run_id)
        counts["sent"] += 1
    return counts


def reap(older_than_s: float, *, experiment_name: str | None = None, group: str | None = None) -> list[str]:
    """Mark attempts still RUNNING longer than ``older_than_s`` as KILLED, with the reason as
    ``perfgate.failure``, so the UI shows what the evaluator counts (a failed attempt).

    Returns:
        The reaped run ids.
    """
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)) or older_than_s <= 0:
        raise InputError(f"older_than_s must be a number > 0, got {older_than_s!r}")
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    filter_string = group_filter(group) if group is not None else f"tags.\"{TAG.KIND}\" = '{KIND_ATTEMPT}'"
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string)
    now_ms = int(time.time() * 1000)
    reaped = []
    for run in runs:
        tags = run.data.tags
        if tags.get(TAG.KIND) != KIND_ATTEMPT or run.info.status not in ("RUNNING", "SCHEDULED"):
            continue
        if group is not None and tags.get(TAG.GROUP) != group:
            continue
        age_s = (now_ms - (run.info.start_time or now_ms)) / 1000
        if age_s <= older_than_s:
            continue
        reason = clip(f"reaped: {run.info.status} for {age_s:.0f} s (limit {older_than_s:.0f} s); its process is gone or hung")
        _client.retrying(lambda: mlflow_client.set_tag(run.info.run_id, TAG.FAILURE, reason))
        _client.retrying(lambda: mlflow_client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED)))
        reaped.append(run.info.run_id)
    return reaped
