"""A local, append-only journal of attempts: nothing is lost when the tracking server is not there.

Each attempt is appended (flushed and fsynced) before it is sent to MLflow, and a ``synced``
line follows once MLflow has it. An attempt whose write failed stays in the journal;
``mlflow-perfgate sync`` replays it later. Replays are idempotent: an attempt whose
``attempt_id`` MLflow already holds is only marked synced.

The journal is one JSON object per line at ``$MLFLOW_PERFGATE_JOURNAL`` (default
``.perfgate/journal.jsonl`` under the working directory), each with its format version
(``format``; see ``_schema.JOURNAL_FORMAT``). A torn line (a crash while appending) and a line
of a format this release does not know are skipped on reading, and reported by
:func:`skipped_lines`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ._schema import JOURNAL_FORMAT

__all__ = ["JOURNAL_ENV", "append", "journal_path", "mark_rejected", "mark_synced", "pending", "skipped_lines"]

JOURNAL_ENV = "MLFLOW_PERFGATE_JOURNAL"


def journal_path() -> Path:
    return Path(os.environ.get(JOURNAL_ENV) or Path.cwd() / ".perfgate" / "journal.jsonl")


def _append_line(entry: dict) -> None:
    path = journal_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"format": JOURNAL_FORMAT, **entry}, sort_keys=True, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def append(payload: dict) -> None:
    """Record an attempt before it is sent."""
    _append_line({"type": "attempt", "written_at": time.time(), **payload})


def mark_synced(attempt_id: str, run_id: str) -> None:
    _append_line({"type": "synced", "attempt_id": attempt_id, "run_id": run_id, "written_at": time.time()})


def mark_rejected(attempt_id: str, reason: str) -> None:
    """The server answered and refused the attempt (bad credentials, no permission): replaying it
    would only be refused again, or write what its sender was not allowed to."""
    _append_line({"type": "rejected", "attempt_id": attempt_id, "reason": reason[:500], "written_at": time.time()})


def _read() -> tuple[list[dict], list[str]]:
    """The journal's entries and, for each line skipped, where and why."""
    path = journal_path()
    if not path.exists():
        return [], []
    entries, skipped = [], []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                skipped.append(f"{path}:{number}: not a whole JSON line (a crash while writing?)")
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("attempt_id"), str):
                skipped.append(f"{path}:{number}: not a journal entry")
                continue
            if entry.get("format", 0) not in (0, JOURNAL_FORMAT):
                skipped.append(f"{path}:{number}: format {entry.get('format')!r}, newer than this release reads")
                continue
            entries.append(entry)
    return entries, skipped


def _entries() -> list[dict]:
    return _read()[0]


def skipped_lines() -> list[str]:
    """The lines the journal's reader skips, each as ``path:line: why``."""
    return _read()[1]


def pending(tracking_uri: str | None = None, group: str | None = None) -> list[dict]:
    """Attempts appended but neither synced nor rejected (optionally of one tracking URI / group)."""
    entries = _entries()
    synced = {e["attempt_id"] for e in entries if e.get("type") in ("synced", "rejected")}
    seen, result = set(), []
    for entry in entries:
        if entry.get("type") != "attempt" or entry["attempt_id"] in synced or entry["attempt_id"] in seen:
            continue
        if tracking_uri is not None and entry.get("tracking_uri") != tracking_uri:
            continue
        if group is not None and entry.get("group") != group:
            continue
        seen.add(entry["attempt_id"])
        result.append(entry)
    return result
