"""What a tracking URI names, checked without importing MLflow: the command line answers a
misspelled scheme or a missing local store at once, before MLflow's import and before MLflow
would create anything.

- :func:`scheme_problem`: the URI's scheme is none MLflow has a store for (``sqllite:///...``):
  MLflow's built-in schemes (:data:`BUILTIN_SCHEMES`) and those of installed plugins (entry
  points ``mlflow.tracking_store``), as MLflow's own store registry knows them.
- :func:`read_only` and :func:`require_existing_store`: a command that only reads never creates a
  store: a SQLite file or a file store's folder that does not exist is refused, in one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import os
import urllib.parse
import urllib.request
from typing import Iterable

from ..errors import InputError
from ._redact import redact_uri

__all__ = ["BUILTIN_SCHEMES", "local_store_path", "read_only", "require_existing_store", "require_writable_store",
           "scheme_problem", "store_scheme", "unknown_scheme_text"]

#: The schemes MLflow's tracking store registry holds without plugins ("" is a plain path: a file store).
BUILTIN_SCHEMES = ("", "databricks", "databricks-uc", "file", "http", "https", "mssql", "mysql", "postgresql",
                   "sqlite", "uc")
DATABASE_SCHEMES = ("postgresql", "mysql", "sqlite", "mssql")
_PLUGIN_GROUP = "mlflow.tracking_store"

_READ_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("perfgate_read_only", default=False)


@contextlib.contextmanager
def read_only():
    """A block (or, as a decorator, a function) that only reads the tracking store.

    Within it, ``_client.client()`` refuses a local store that does not exist (a SQLite file, a
    file store's folder) with one line naming it, instead of letting MLflow create the folder,
    the database and its Default experiment, then answer that they hold nothing.
    """
    token = _READ_ONLY.set(True)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def store_scheme(uri: str) -> str:
    """The scheme MLflow picks a store by (as ``mlflow.utils.uri.get_uri_scheme``): a database
    dialect's driver dropped (``postgresql+psycopg2`` -> ``postgresql``), a Windows drive -> ``""``."""
    if uri in ("databricks", "databricks-uc", "uc"):
        return uri
    scheme = urllib.parse.urlparse(uri).scheme
    for database in DATABASE_SCHEMES:
        if scheme.lower().startswith(database):
            return database
    if len(scheme) == 1 and scheme.isalpha():
        return ""
    return scheme


def _plugin_schemes() -> list[str]:
    try:
        from importlib.metadata import entry_points

        return [entry.name for entry in entry_points(group=_PLUGIN_GROUP)]
    except Exception:  # a broken distribution's metadata: MLflow's own check still runs later
        return []


def scheme_problem(uri: str | None) -> str | None:
    """One line when MLflow has no store for the URI's scheme; ``None`` when it has (or no URI)."""
    if not uri:
        return None
    schemes = (*BUILTIN_SCHEMES, *_plugin_schemes())
    if store_scheme(uri) in schemes:
        return None
    return unknown_scheme_text(uri, schemes)


def unknown_scheme_text(uri: str, schemes: Iterable[str]) -> str:
    """One line for a tracking URI whose scheme MLflow has no store for (``sqllite:///mlflow.db``)."""
    scheme = uri.partition(":")[0]
    known = sorted({s for s in schemes if s})
    close = difflib.get_close_matches(scheme.lower(), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"the tracking URI {redact_uri(uri)} has a scheme MLflow has no store for, {scheme!r}{hint}; it accepts "
            f"{', '.join(known)} or a plain path (e.g. sqlite:///mlflow.db, http://127.0.0.1:5000, "
            "postgresql://host/db); check MLFLOW_TRACKING_URI")


def local_store_path(uri: str) -> str | None:
    """The file (SQLite) or folder (file store) a local tracking URI names; ``None`` for any other
    store (a server, a database server, SQLite in memory)."""
    scheme = store_scheme(uri)
    if scheme == "sqlite":  # sqlite:///relative.db, sqlite:////abs.db, sqlite+pysqlite:///...
        rest = uri.partition(":")[2]
        if not rest.startswith("///"):
            return None  # sqlite:// is in memory
        path = rest[3:].split("?", 1)[0]
        return None if path in ("", ":memory:") or path.startswith("file:") else os.path.abspath(path)
    if scheme == "file":
        path = urllib.request.url2pathname(urllib.parse.urlsplit(uri).path)
        return os.path.abspath(path) if path else None
    if scheme == "":  # a plain path: a file store
        return os.path.abspath(uri) if uri else None
    return None


def require_writable_store(uri: str) -> None:
    """Refuse, in one line and before anything runs, a local store this process cannot write.

    A SQLite file needs its file and its folder writable (SQLite writes a journal beside it); a
    store that does not exist yet, the nearest folder that does (where it will be made); a file
    store, its folder. Servers and database servers answer for themselves.

    Raises:
        InputError: the store, or its folder, is read-only for this process.
    """
    path = local_store_path(uri)
    if path is None:
        return
    is_sqlite = store_scheme(uri) == "sqlite"
    if os.path.exists(path):
        blocked = [p for p in ([path, os.path.dirname(path)] if is_sqlite else [path]) if not os.access(p, os.W_OK)]
    else:
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        blocked = [parent] if parent and not os.access(parent, os.W_OK) else []
    if blocked:
        raise InputError(f"the MLflow store at {redact_uri(uri)} cannot be written: {blocked[0]} is read-only for this "
                         "process; this command records runs: make it writable, or point MLFLOW_TRACKING_URI at a "
                         "store you can write (decisions and report only read); nothing was run or logged")


def require_existing_store(uri: str) -> None:
    """Refuse a local store that does not exist (nothing is created).

    Raises:
        InputError: the SQLite file or the file store's folder is not there.
    """
    path = local_store_path(uri)
    if path is None or os.path.exists(path):
        return
    folder = os.path.dirname(path)
    missing = f"{path} does not exist" if os.path.isdir(folder) else f"neither {path} nor its folder exists"
    raise InputError(f"no MLflow store at {redact_uri(uri)}: {missing}; this command works on runs already recorded "
                     "and creates no store (nothing was created): check MLFLOW_TRACKING_URI and the working directory "
                     "(sqlite:///mlflow.db is the mlflow.db of the current directory)")
