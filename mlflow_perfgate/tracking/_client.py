"""The MLflow client, experiment resolution, batched writes and paginated reads."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import re
import shlex
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Iterable, TypeVar

import mlflow
from mlflow.entities import Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.tracking.registry import UnsupportedModelRegistryStoreURIException

from ..errors import InputError, StoreRefused, StoreUnavailable
from ._probe import _DOWN, _UP, RETRYABLE_STATUS, ensure_reachable, mark_down  # noqa: F401 (_DOWN, _UP: tests)
from ._redact import redact_text, redact_uri
from ._store import _READ_ONLY, local_store_path, read_only, require_existing_store, unknown_scheme_text
from ._schema import MAX_ENTITIES_PER_BATCH, MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH, UI_ADDRESS

__all__ = ["client", "log_batch", "read_only", "redact_text", "redact_uri", "require_existing_store", "resolve_experiment",
           "retrying", "run_link", "search_all", "store_error"]

T = TypeVar("T")
#: Page size of a search: MLflow's default page, which every store and server accepts.
PAGE_SIZE = 1000
DEFAULT_EXPERIMENT_ID = "0"
_LOCK_RETRIES = 8
#: Short, explicit HTTP limits for our own calls (MLflow's defaults, 120 s and 7 retries with
#: backoff, take minutes to report a dead server). A user's own settings win.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}
_UNREACHABLE_MARKERS = ("Connection refused", "Max retries exceeded", "Read timed out", "timed out",
                        "Failed to establish a new connection", "Connection aborted", "RemoteDisconnected",
                        "Name or service not known")
# (tracking URI, experiment name) -> id, for the life of the process: a series of attempts
# resolves its experiment once, not once per attempt.
_KNOWN_EXPERIMENTS: dict[tuple[str, str], str] = {}
# SQLite files whose tables this process has made sure of (under the folder's lock, once).
_SQLITE_READY: set[str] = set()


@contextlib.contextmanager
def _sqlite_ready(uri: str):
    """Hold a lock on a SQLite store's folder while this process first opens it (once per process).

    MLflow creates and migrates a SQLite store's tables when a process first opens it (the
    client's constructor does). Two processes opening the same fresh file at once (``pytest -n 2``,
    two CI jobs, a suite beside a compare) race in those migrations, and all but one fail ("table
    ... already exists", "duplicate column name"): the first to take the lock creates the tables,
    the others then find them made.
    """
    import fcntl

    from ._store import store_scheme

    path = local_store_path(uri) if store_scheme(uri) == "sqlite" else None
    fd = None
    if path is not None and path not in _SQLITE_READY:
        try:
            fd = os.open(os.path.dirname(path), os.O_RDONLY)
        except OSError:  # no folder: MLflow's own error says so
            fd = None
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
        _SQLITE_READY.add(path)
    finally:
        os.close(fd)  # the lock goes with the descriptor


def client(*, probe: bool = True) -> MlflowClient:
    """A client for the current tracking URI (``MLFLOW_TRACKING_URI`` or MLflow's default).

    Against a tracking server, the server is first probed (``/health``, a few seconds at most,
    at most once a minute) so that a dead or silent server is reported at once, not after
    MLflow's minute of timeouts and retries; ``probe=False`` leaves that to :func:`ensure_reachable`.

    MLflow prints a "View run" link on every terminated run against a server, which costs an
    extra ``get_run`` request per attempt and pollutes the stdout of ``record``: turned off
    unless the user set the variable.

    Within :func:`read_only`, a local store (a SQLite file, a file store's folder) that does not
    exist is refused, not created. A URI whose scheme MLflow has no store for is refused in one line.

    Raises:
        StoreUnavailable: the server is down (probed now, or found down in the last 30 s).
        InputError: an unknown scheme; within :func:`read_only`, a local store that does not exist.
    """
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if _READ_ONLY.get():
        require_existing_store(mlflow.get_tracking_uri())
    try:
        with _sqlite_ready(mlflow.get_tracking_uri()):
            mlflow_client = MlflowClient()
    except UnsupportedModelRegistryStoreURIException as exc:
        raise InputError(unknown_scheme_text(mlflow.get_tracking_uri(), exc.supported_uri_schemes)) from None
    if probe:
        ensure_reachable(mlflow_client.tracking_uri)
    return mlflow_client


def ui_link(tracking_uri: str, page: str) -> str:
    """Where a person opens ``page`` (``#/experiments/...``) of the MLflow UI: on a tracking server, the
    server's own address (credentials removed); for a local store, no address at all but the ``mlflow ui``
    command that serves it, and the page to open at the address it prints."""
    uri = redact_uri(tracking_uri)
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    return f"mlflow ui --backend-store-uri {shlex.quote(uri)}, then open {UI_ADDRESS}{page}"


def run_link(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """Where a person opens a run (:func:`ui_link`)."""
    return ui_link(tracking_uri, f"#/experiments/{experiment_id}/runs/{run_id}")


_RETRYABLE_CODES = frozenset({"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"})
_TOO_MANY = re.compile(r"too many (\d{3}) error responses")
_STATUS = re.compile(r"(?:Response code|status code|HTTP) (\d{3})")
#: A refusal (4xx) is final: replaying the request would be refused again.
_FINAL_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST",
                          "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST", "INVALID_STATE"})


def _status(text: str) -> int | None:
    match = _TOO_MANY.search(text) or _STATUS.search(text)
    return int(match.group(1)) if match else None


def is_unreachable(exc: BaseException) -> bool:
    """Whether an error means the tracking server could not be reached or answered "not now".

    Refused and timed-out connections, and the retryable answers 429, 502, 503 and 504 (a reverse
    proxy while the server restarts), are outages: what was sent may be sent again later.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StoreUnavailable):
            return True
        if getattr(exc, "error_code", None) in _RETRYABLE_CODES:
            return True
        text = str(exc)
        status = _status(text)
        if status is not None:
            return status in RETRYABLE_STATUS
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        name = type(exc).__name__
        if name in ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "MaxRetryError",
                    "NewConnectionError", "ProtocolError", "RemoteDisconnected"):
            return True
        if any(marker in text for marker in _UNREACHABLE_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_final_refusal(exc: BaseException) -> bool:
    """Whether the store answered with a definite no (bad credentials, permission, bad request).

    Anything else that is not an outage (a 500, say) may pass on its own: what was sent stays
    pending in the journal for ``sync`` rather than being given up.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "error_code", None) in _FINAL_CODES and _status(str(exc)) is None:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def short_error(exc: BaseException) -> str:
    """The first line of an error, short enough for one line of output."""
    text = " ".join(str(exc).split())
    for marker in _UNREACHABLE_MARKERS:
        if marker in text:
            return marker.lower().strip(" (")
    return text[:300]


def refusal_text(exc: BaseException) -> str | None:
    """A tracking server's 401 / 403 in words, instead of MLflow's HTTP dump; ``None`` for other errors."""
    code = getattr(exc, "error_code", None)
    if code not in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return None
    raw = os.environ.get("MLFLOW_TRACKING_URI") or ""
    uri = redact_uri(raw) or "the tracking server"
    in_uri, uri_user = _uri_credentials(raw)  # http://user:password@host: credentials given, in the URI
    env_user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    user = env_user or uri_user
    match = re.search(r"endpoint (/\S+)", str(exc))
    where = f" on {match.group(1)}" if match else ""
    if code == "UNAUTHENTICATED":
        if env_user:
            return (f"{uri} did not accept the credentials of user {user!r} (HTTP 401{where}): check "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
        if in_uri:
            who = f" of user {user!r}" if user else ""
            return (f"{uri} did not accept the credentials{who} written in MLFLOW_TRACKING_URI (HTTP 401{where}): "
                    "check them, or set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD instead")
        if os.environ.get("MLFLOW_TRACKING_TOKEN"):
            return f"{uri} did not accept the token in MLFLOW_TRACKING_TOKEN (HTTP 401{where}): check it"
        return (f"{uri} requires a login (HTTP 401{where}): set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD")
    return (f"user {user!r} may not do this on {uri} (HTTP 403 permission denied{where}): recording attempts "
            "and writing decisions need EDIT permission on the experiment; ask its owner or an admin")


def _uri_credentials(uri: str) -> tuple[bool, str | None]:
    """Whether a URI carries credentials (``http://user:password@host``), and its user name (never
    the password; ``None`` for a lone token, ``http://token@host``)."""
    try:
        userinfo = urllib.parse.urlsplit(uri).netloc.rpartition("@")[0]
    except ValueError:
        return False, None
    if not userinfo:
        return False, None
    name, sep, _ = userinfo.partition(":")
    return True, (urllib.parse.unquote(name) or None) if sep else None


def store_error(exc: BaseException) -> StoreRefused | StoreUnavailable | None:
    """The error the user sees for a failed store call: refused (it answered no) or unavailable."""
    if isinstance(exc, (StoreRefused, StoreUnavailable)):
        return exc
    refusal = refusal_text(exc)
    if refusal is not None:
        return StoreRefused(refusal)
    if is_unreachable(exc):
        where = redact_uri(os.environ.get("MLFLOW_TRACKING_URI") or "") or "the tracking store"
        return StoreUnavailable(f"{where} could not be reached ({redact_text(short_error(exc))}); check that the "
                                "server is up and MLFLOW_TRACKING_URI is right")
    if isinstance(exc, MlflowException):
        return StoreRefused(f"the tracking store refused the request: {redact_text(short_error(exc))}")
    return None


def _current_uri() -> str:
    return mlflow.get_tracking_uri()


def current_store() -> str:
    """The tracking store in use, as a message may name it (credentials off)."""
    return redact_uri(_current_uri())


#: A lost race on a row another writer inserted first (SQLite, PostgreSQL, MySQL): MLflow's SQL
#: store writes a tag by reading, then inserting or updating, so two writers of one new tag can
#: both decide to insert.
_RACE_MARKERS = ("UNIQUE constraint failed", "duplicate key value violates unique constraint", "Duplicate entry")


def retrying(call: Callable[[], T]) -> T:
    """Run a store call, retrying while SQLite reports its database locked, or the call lost a race.

    A locked SQLite write rolls back whole, so a retry never writes twice. Concurrent writer
    processes on one SQLite file meet this under load. So does a write that lost an insert race
    (two processes setting the same new tag on one run: one insert violates the table's unique
    key and its transaction rolls back): the retry finds the row and updates it, or, for a param
    (which may not change), is refused as a param already set, which the caller reads back. Other
    store errors are raised at once as :class:`StoreRefused` or :class:`StoreUnavailable` (the
    original as their cause).
    """
    for attempt in range(_LOCK_RETRIES):
        try:
            return call()
        except Exception as exc:
            text = str(exc) if isinstance(exc, MlflowException) else ""
            # "already exists" (an experiment another process created) is an answer, not a lost race
            raced = getattr(exc, "error_code", None) != "RESOURCE_ALREADY_EXISTS" and any(
                marker in text for marker in _RACE_MARKERS)
            locked = "database is locked" in text or raced
            if locked and attempt < _LOCK_RETRIES - 1:
                time.sleep(0.05 * (2**attempt) * (1 + random.random()))
                continue
            translated = store_error(exc)
            if isinstance(translated, StoreUnavailable):
                mark_down(_current_uri())
            if translated is None or translated is exc:
                raise
            raise translated from exc
    raise AssertionError("unreachable")


def resolve_experiment(mlflow_client: MlflowClient, experiment_name: str | None, *, create: bool) -> str:
    """The experiment id for a name; without one, ``MLFLOW_EXPERIMENT_NAME`` /
    ``MLFLOW_EXPERIMENT_ID``, then MLflow's Default experiment.

    Creating is race-safe: the loser of a concurrent create reads the winner's experiment,
    never falls back to Default (which ``mlflow.set_experiment`` in each worker can do).

    Raises:
        InputError: the experiment does not exist and ``create`` is false, or it is deleted.
    """
    if experiment_name is None:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or None
        if experiment_name is None:
            experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or DEFAULT_EXPERIMENT_ID
            experiment = retrying(lambda: mlflow_client.get_experiment(experiment_id))
            if experiment.lifecycle_stage != "active":
                raise InputError(f"experiment id {experiment_id} is deleted")
            return experiment.experiment_id
    if not isinstance(experiment_name, str) or not experiment_name.strip():
        raise InputError(f"experiment_name must be a non-empty string, got {experiment_name!r}")
    cache_key = (mlflow_client.tracking_uri, experiment_name)
    if cache_key in _KNOWN_EXPERIMENTS:
        return _KNOWN_EXPERIMENTS[cache_key]
    experiment_id = _lookup_or_create(mlflow_client, experiment_name, create)
    _KNOWN_EXPERIMENTS[cache_key] = experiment_id
    return experiment_id


def experiment_label(experiment_name: str | None, experiment_id: str) -> str:
    """An experiment in words, for a message: ``experiment 'x' (id 3)``, ``the Default experiment (id 0)``."""
    name = experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        return f"experiment {name!r} (id {experiment_id})"
    if experiment_id == DEFAULT_EXPERIMENT_ID:
        return f"the Default experiment (id {experiment_id})"
    return f"experiment id {experiment_id}"


def _lookup_or_create(mlflow_client: MlflowClient, experiment_name: str, create: bool) -> str:
    experiment = retrying(lambda: mlflow_client.get_experiment_by_name(experiment_name))
    if experiment is None:
        if not create:
            raise InputError(f"experiment {experiment_name!r} does not exist in {redact_uri(mlflow_client.tracking_uri)}")
        try:
            return retrying(lambda: mlflow_client.create_experiment(experiment_name))
        except StoreRefused:
            experiment = retrying(lambda: mlflow_client.get_experiment_by_name(experiment_name))
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise InputError(
            f"experiment {experiment_name!r} is deleted; restore it or choose another name"
        )
    return experiment.experiment_id


#: Writes of one run each (a tag per attempt) sent to a server this many at a time.
RUN_WRITE_THREADS = 8


def for_each_run(mlflow_client: MlflowClient, items: list[T], write: Callable[[T], object]) -> None:
    """``write(item)`` for each item, one run's write each: to a server :data:`RUN_WRITE_THREADS` at a
    time (MLflow has no request that writes many runs), to a local store one after another (one
    writer at a time is what SQLite allows anyway). A write that fails is raised."""
    if len(items) < 4 or not str(mlflow_client.tracking_uri).startswith(("http://", "https://")):
        for item in items:
            write(item)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=RUN_WRITE_THREADS) as pool:
        list(pool.map(write, items))


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def log_batch(mlflow_client: MlflowClient, run_id: str, *, params: dict | None = None,
              metrics: list[Metric] | None = None, tags: dict | None = None) -> None:
    """Write params, metrics and tags in as few ``log_batch`` requests as MLflow's limits allow."""
    params_list = [Param(k, v) for k, v in (params or {}).items()]
    tags_list = [RunTag(k, v) for k, v in (tags or {}).items()]
    metrics_list = list(metrics or [])
    while params_list or tags_list or metrics_list:
        # one request: up to 100 params+tags and 1000 metrics, 1000 entities in all
        room = MAX_PARAMS_TAGS_PER_BATCH
        batch_params, params_list = params_list[:room], params_list[room:]
        room -= len(batch_params)
        batch_tags, tags_list = tags_list[:room], tags_list[room:]
        room = min(MAX_METRICS_PER_BATCH, MAX_ENTITIES_PER_BATCH - len(batch_params) - len(batch_tags))
        batch_metrics, metrics_list = metrics_list[:room], metrics_list[room:]
        retrying(lambda: mlflow_client.log_batch(
            run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags
        ))


def search_all(mlflow_client: MlflowClient, experiment_ids: list[str], filter_string: str,
               *, order_by: list[str] | None = None, view: int = ViewType.ACTIVE_ONLY) -> list:
    """All runs matching a filter, one paginated search (pages of :data:`PAGE_SIZE`)."""
    runs: list = []
    token = None
    while True:
        page = retrying(lambda: mlflow_client.search_runs(
            experiment_ids, filter_string=filter_string, run_view_type=view,
            max_results=PAGE_SIZE, order_by=order_by, page_token=token,
        ))
        runs.extend(page)
        token = page.token
        if not token:
            return runs
