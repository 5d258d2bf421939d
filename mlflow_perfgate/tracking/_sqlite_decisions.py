"""Decision runs read straight from a local SQLite store: the fast path of ``decisions``.

MLflow's client reads a run whole, through its ORM: on a store of 1,000 decisions (each about 30
metrics, 20 tags and 20 params) ``search_runs`` takes over 2 s here, and importing MLflow another
1.7 s, which a user pays for every ``mlflow-perfgate decisions``. This module reads the same rows
(MLflow's ``experiments``, ``runs``, ``tags``, ``params`` and ``latest_metrics`` tables, opened
read-only) with ``sqlite3``: the same runs (active ones of an active experiment, newest first,
ties by run id as MLflow orders them), the same values (a NaN metric as NaN).

It answers only where it can answer exactly as MLflow would; everywhere else it returns ``None``
and the caller asks MLflow, which also gives every error its usual words: not a SQLite URI, a
file that is not there or not a store this reader knows (a missing table or column), an
experiment that is not found or is deleted, a database busy or locked.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ._decision_frame import DECISION_KINDS, RunRecord, check_decision_filters, frame_of
from ._schema import TAG
from ._store import local_store_path, store_scheme

__all__ = ["decision_records", "decisions_frame", "default_uri", "sqlite_path"]

_DEFAULT_EXPERIMENT_ID = "0"


def default_uri() -> str | None:
    """The tracking URI MLflow would use in this process, where it is knowable without MLflow.

    ``MLFLOW_TRACKING_URI`` when set; unset, MLflow's default is ``sqlite:///mlflow.db`` unless a
    ``./mlruns`` folder holds data (then a file store): ``None`` whenever ``mlruns`` exists at all.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return None if os.path.exists("mlruns") else "sqlite:///mlflow.db"


def sqlite_path(uri: str | None) -> str | None:
    """The database file of a ``sqlite:///`` URI that names an existing file; ``None`` otherwise."""
    if not uri or store_scheme(uri) != "sqlite" or "?" in uri:
        return None
    path = local_store_path(uri)
    return path if path is not None and os.path.isfile(path) else None


def _experiment_id(connection: sqlite3.Connection, experiment_name: str | None) -> str | None:
    if experiment_name is None:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or None
    if experiment_name is None:
        experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or _DEFAULT_EXPERIMENT_ID
        row = connection.execute("SELECT experiment_id, lifecycle_stage FROM experiments WHERE experiment_id = ?",
                                 (experiment_id,)).fetchone()
    else:
        if not isinstance(experiment_name, str) or not experiment_name.strip():
            return None
        row = connection.execute("SELECT experiment_id, lifecycle_stage FROM experiments WHERE name = ?",
                                 (experiment_name,)).fetchone()
    if row is None or row[1] != "active":
        return None  # MLflow's path says what is wrong
    return str(row[0])


def decisions_frame(uri: str | None, experiment_name: str | None, group: str | None, suite: str | None,
                    through_mlflow, kind: str = "decision"):
    """The frame of ``tracking.decisions``: read here where this reader can answer exactly, else from
    ``through_mlflow(experiment_name, group, suite, kind)`` (the records MLflow's client reads)."""
    check_decision_filters(group, suite, kind)
    records = decision_records(uri, experiment_name, group, suite, kind)
    if records is None:
        records = through_mlflow(experiment_name, group, suite, kind)
    return frame_of(records, group, suite, kind)


def decision_records(uri: str | None, experiment_name: str | None = None,
                     group: str | None = None, suite: str | None = None,
                     kind: str = "decision") -> list[RunRecord] | None:
    """The decision runs (``kind="suite"``: suite runs) of an experiment (of ``group`` / ``suite`` where
    given), newest first; ``None`` where this reader cannot answer exactly as MLflow would (see the
    module docstring)."""
    path = sqlite_path(uri)
    if path is None:
        return None
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.5)
    except sqlite3.Error:
        return None
    with contextlib.closing(connection):
        try:
            return _read(connection, experiment_name, group, suite, kind)
        except sqlite3.Error:  # a missing table or column, a busy or locked file, not a database
            return None


def _read(connection: sqlite3.Connection, experiment_name: str | None, group: str | None,
          suite: str | None, kind: str = "decision") -> list[RunRecord] | None:
    experiment_id = _experiment_id(connection, experiment_name)
    if experiment_id is None:
        return None
    conditions = [(TAG.KIND, DECISION_KINDS[kind])]
    if group is not None:
        conditions.append((TAG.GROUP, group))
    if suite is not None:
        conditions.append((TAG.SUITE, suite))
    joins = " ".join(f"JOIN tags t{i} ON t{i}.run_uuid = r.run_uuid AND t{i}.key = ? AND t{i}.value = ?"
                     for i in range(len(conditions)))
    arguments = [value for pair in conditions for value in pair]
    connection.execute("BEGIN")  # one snapshot for the runs and their rows
    runs = connection.execute(
        f"SELECT r.run_uuid, r.experiment_id, r.start_time FROM runs r {joins} "
        "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' ORDER BY r.start_time DESC, r.run_uuid",
        [*arguments, experiment_id]).fetchall()
    chosen = f"SELECT r.run_uuid FROM runs r {joins} WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'"
    found: dict[str, tuple[dict, dict, dict]] = {run_id: ({}, {}, {}) for run_id, _, _ in runs}
    for index, (table, columns) in enumerate((("tags", "key, value"), ("params", "key, value"),
                                              ("latest_metrics", "key, value, is_nan"))):
        for row in connection.execute(f"SELECT run_uuid, {columns} FROM {table} WHERE run_uuid IN ({chosen})",
                                      [*arguments, experiment_id]):
            held = found.get(row[0])
            if held is None:
                continue
            if table == "latest_metrics":
                held[index][row[1]] = float("nan") if row[3] else float(row[2])
            else:
                held[index][row[1]] = row[2]
    connection.execute("COMMIT")
    return [RunRecord(run_id=run_id, experiment_id=str(experiment), start_time=int(start or 0), tags=found[run_id][0],
                      params=found[run_id][1], metrics=found[run_id][2])
            for run_id, experiment, start in runs]
