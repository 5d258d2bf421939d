"""A local, append-only journal of attempts: nothing is lost when the tracking server is not there.

Each attempt is appended (flushed and fsynced) before it is sent to MLflow, and a ``synced``
line follows once MLflow has it. An attempt whose write failed stays in the journal;
``mlflow-perfgate sync`` replays it later. Replays are idempotent: an attempt whose
``attempt_id`` MLflow already holds is only marked synced.

The journal is one JSON object per line at ``$MLFLOW_PERFGATE_JOURNAL``, else in the user's
state directory (``$XDG_STATE_HOME/mlflow-perfgate/journal.jsonl``, by default
``~/.local/state/mlflow-perfgate/journal.jsonl``): one place whatever the working directory,
so attempts recorded from two worktrees and evaluated from a third meet. Each line carries its
format version (``format``; see ``_schema.JOURNAL_FORMAT``) and the tracking location it is for
(:func:`location_key`: scheme, host resolved, port, path; never credentials). A line is written
whole with one ``write`` in append mode after a newline that repairs a torn last line (a crash or
a full disk mid-write), so a torn line never swallows the next one; on reading, a torn line, a
line that is no journal entry and one of a newer format are skipped and reported, each with
the file and line number (:func:`skipped_lines`), without failing anything else.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
from functools import lru_cache
from pathlib import Path

from ._redact import redact_text, redact_uri
from ._schema import JOURNAL_FORMAT

__all__ = ["JOURNAL_ENV", "append", "append_started", "journal_path", "location_key", "mark_rejected", "mark_synced", "pending",
           "skipped_lines"]

JOURNAL_ENV = "MLFLOW_PERFGATE_JOURNAL"


def journal_path() -> Path:
    """``$MLFLOW_PERFGATE_JOURNAL``, else ``$XDG_STATE_HOME/mlflow-perfgate/journal.jsonl`` (``~/.local/state``)."""
    if os.environ.get(JOURNAL_ENV):
        return Path(os.environ[JOURNAL_ENV])
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "mlflow-perfgate" / "journal.jsonl"


@lru_cache(maxsize=64)
def _host(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:  # offline, or an IPv6 literal: the name as given
        return host.lower()


def location_key(tracking_uri: str) -> str:
    """One spelling for one tracking location: ``http://localhost:5000/`` and
    ``http://127.0.0.1:5000`` are the same server; ``sqlite:///mlflow.db`` is that file's absolute
    path. Credentials are never part of it."""
    parts = urllib.parse.urlsplit(tracking_uri)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        port = parts.port or (443 if scheme == "https" else 80)
        return f"{scheme}://{_host(parts.hostname or '')}:{port}{parts.path.rstrip('/')}"
    if scheme.startswith("sqlite") and ":///" in tracking_uri:  # sqlite:///relative.db, sqlite:////abs.db
        return f"{scheme}:///{os.path.abspath(tracking_uri.split(':///', 1)[1])}"
    if scheme == "file":
        return f"file://{os.path.abspath(parts.path)}"
    if not scheme and ("/" in tracking_uri or tracking_uri.startswith(".")):  # a plain path: a file store
        return f"file://{os.path.abspath(tracking_uri)}"
    host = parts.netloc.rsplit("@", 1)[-1].lower()  # a database URI: credentials off (a token in its query too)
    return redact_uri(urllib.parse.urlunsplit(parts._replace(netloc=host))).rstrip("/")


def _append_line(entry: dict) -> None:
    path = journal_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps({"format": JOURNAL_FORMAT, **entry}, sort_keys=True, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # the last line was torn: end it, so this one stays whole
        written = 0
        while written < len(line):  # a short write (a full disk) raises on the next try, never passes
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def append(payload: dict) -> None:
    """Record an attempt before it is sent (with its location, never the URI's credentials)."""
    uri = payload.get("tracking_uri") or ""
    _append_line({"type": "attempt", "written_at": time.time(), **payload, "tracking_uri": redact_uri(uri),
                  "location": location_key(uri)})


def append_started(payload: dict) -> None:
    """Record that an attempt started (its conditions and who runs it), before it runs."""
    uri = payload.get("tracking_uri") or ""
    _append_line({"type": "started", "written_at": time.time(), **payload, "tracking_uri": redact_uri(uri),
                  "location": location_key(uri)})


def mark_synced(attempt_id: str, run_id: str) -> None:
    _append_line({"type": "synced", "attempt_id": attempt_id, "run_id": run_id, "written_at": time.time()})


def mark_rejected(attempt_id: str, reason: str) -> None:
    """The server answered and refused the attempt (bad credentials, no permission): replaying it
    would only be refused again, or write what its sender was not allowed to."""
    _append_line({"type": "rejected", "attempt_id": attempt_id, "reason": redact_text(reason)[:500],
                  "written_at": time.time()})


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
    """Attempts appended but neither synced nor rejected (optionally of one tracking location / group).

    An attempt journaled only as ``started`` is pending too (``entry["type"] == "started"``): it
    started and its outcome never reached the journal (it is in flight, or its process died).
    """
    entries = _entries()
    done = {e["attempt_id"] for e in entries if e.get("type") in ("synced", "rejected")}
    complete = {e["attempt_id"]: e for e in entries if e.get("type") == "attempt"}
    seen, result = set(), []
    for entry in entries:
        attempt_id = entry["attempt_id"]
        if entry.get("type") not in ("attempt", "started") or attempt_id in done or attempt_id in seen:
            continue
        if tracking_uri is not None and _location(entry) != location_key(tracking_uri):
            continue
        if group is not None and entry.get("group") != group:
            continue
        seen.add(attempt_id)
        result.append(complete.get(attempt_id, entry))
    return result


def _location(entry: dict) -> str:
    return entry.get("location") or location_key(str(entry.get("tracking_uri") or ""))
