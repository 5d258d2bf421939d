"""A new local SQLite store made beside the comparison's start-up, put in place only once it may be written.

MLflow creates a SQLite store's tables the first time a client touches it: about 2 s of
migrations on a 2-core machine, which ``compare`` would otherwise pay after the attempt server's
warm-up and the workload's check. :func:`prepare_new_store` runs those migrations in a thread,
on a side file in the store's own folder (``.<name>.perfgate-<pid>-<hex>.tmp``), while the server
warms up; :meth:`PreparedStore.commit`, called once the workload is found good, links the side
file to the store's name (``os.link``: it never replaces a store that appeared meanwhile, a
twin's or anyone's, and that store is then used as it is) and removes it;
:meth:`PreparedStore.discard`, called when the comparison is refused, removes it. So a
refused comparison still creates nothing. A process killed in between leaves the side file
behind: a hidden ``.tmp`` beside the store, never read.

The tables are MLflow's own (``mlflow.tracking._tracking_service.utils._get_sqlalchemy_store``,
as MLflow makes them for that URI), with the same default artifact root, resolved the same way
from this process's working directory.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid

from ._store import local_store_path, store_scheme

__all__ = ["PreparedStore", "prepare_new_store"]


class PreparedStore:
    """The migrations of a new SQLite store, running on a side file (see the module docstring)."""

    def __init__(self, target: str):
        self.target = target
        folder, name = os.path.split(target)
        self.side = os.path.join(folder, f".{name}.perfgate-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._make, name="perfgate-store-migrations", daemon=True)
        self._thread.start()

    def _make(self) -> None:
        try:
            if _from_template(self.side):
                return
            from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

            store = _get_sqlalchemy_store(f"sqlite:///{self.side}", None)
            store.engine.dispose()  # no connection stays open on the file once it is linked
            _keep_template(self.side)
        except BaseException as exc:  # noqa: BLE001 - then MLflow makes the store itself, as before
            self.error = exc

    def commit(self) -> bool:
        """Put the prepared store in place unless a store is there already; ``True`` when it was."""
        self._thread.join()
        try:
            if self.error is not None:
                return False
            try:
                os.link(self.side, self.target)
            except FileExistsError:  # a twin (or anyone) made it meanwhile: theirs stands
                return False
            except OSError:  # no hard links here: a rename that never replaces cannot be had, so MLflow makes it
                return False
            return True
        finally:
            self._remove_side()

    def discard(self) -> None:
        """Remove the side file (the comparison was refused: nothing is created)."""
        self._thread.join()
        self._remove_side()

    def _remove_side(self) -> None:
        for path in (self.side, self.side + "-journal", self.side + "-wal", self.side + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def prepare_new_store(uri: str | None) -> PreparedStore | None:
    """Start making a new local SQLite store for ``uri``; ``None`` when there is nothing to make.

    Nothing is made for a store that exists, a URI that is not a SQLite file (a server, a
    database, a file store, SQLite in memory), a folder that does not exist (MLflow says so, as
    before) or a URI with options (``?...``).
    """
    if not uri or store_scheme(uri) != "sqlite" or "?" in uri:
        return None
    path = local_store_path(uri)
    if path is None or os.path.exists(path) or not os.path.isdir(os.path.dirname(path)):
        return None
    return PreparedStore(path)


# -- the template ------------------------------------------------------------------------------
#
# A new store's tables are the same for one MLflow version; only its Default experiment's row
# differs (its artifact location, resolved from the working directory, and its times). So the
# first store made is kept, empty, as a template in the user's cache; later ones are a copy of
# it with that row written as MLflow writes it. About 2 s of migrations become a file copy.

_TEMPLATE_ENV = "MLFLOW_PERFGATE_STORE_TEMPLATE"  # "off": always run MLflow's migrations


def _template_path() -> str | None:
    if os.environ.get(_TEMPLATE_ENV, "").lower() in ("off", "0", "false", "never"):
        return None
    import mlflow

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "mlflow-perfgate", f"empty-sqlite-store-mlflow-{mlflow.__version__}.db")


def _default_experiment_row() -> tuple[str, int]:
    """The Default experiment's artifact location and creation time, as MLflow would write them now."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.tracking._tracking_service.utils import _SERVER_ARTIFACT_ROOT_ENV_VAR
    from mlflow.utils.time import get_current_time_millis
    from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

    root = os.environ.get(_SERVER_ARTIFACT_ROOT_ENV_VAR, DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    return str(append_to_uri_path(resolve_uri_if_local(root), "0")), get_current_time_millis()


def _from_template(side: str) -> bool:
    """The side file as a copy of the template, its Default experiment written for here; ``False``
    when there is no template (or it cannot be used: then MLflow makes the store)."""
    import shutil
    import sqlite3

    template = _template_path()
    if template is None or not os.path.isfile(template):
        return False
    try:
        shutil.copyfile(template, side)
        location, now = _default_experiment_row()
        with contextlib.closing(sqlite3.connect(side)) as connection, connection:
            changed = connection.execute(
                "UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                "WHERE experiment_id = 0 AND name = 'Default'", (location, now, now)).rowcount
            held = connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        if changed != 1 or held:
            raise sqlite3.DatabaseError("not an empty store")
        return True
    except (OSError, sqlite3.Error) as exc:  # MLflow makes this store
        with contextlib.suppress(OSError):
            os.unlink(side)
        if isinstance(exc, sqlite3.Error):  # a torn or foreign template (not a side file that cannot be written)
            with contextlib.suppress(OSError):
                os.unlink(template)
        return False


def _keep_template(side: str) -> None:
    """Keep a copy of a store MLflow just made (empty) as the template; a racing twin's copy is as good."""
    import shutil

    template = _template_path()
    if template is None or os.path.exists(template):
        return
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(template), exist_ok=True)
        partial = f"{template}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        try:
            shutil.copyfile(side, partial)
            os.replace(partial, template)  # whole or not at all
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)

