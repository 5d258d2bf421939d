"""A new local SQLite store made beside the comparison's start-up, put in place only once it may be written.

MLflow creates a SQLite store's tables the first time a client touches it: about 2 s of
migrations on this 2-core machine, which ``compare`` used to pay after the attempt server's
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
            from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

            store = _get_sqlalchemy_store(f"sqlite:///{self.side}", None)
            store.engine.dispose()  # no connection stays open on the file once it is linked
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
