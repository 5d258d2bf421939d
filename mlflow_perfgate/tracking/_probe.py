"""Is a tracking server there: one short ``/health`` probe, remembered, without importing MLflow.

The client (``_client``) asks before its operations, and a command that only reads asks before
MLflow's import (``cli.reads_only``), so a dead or silent server is one line at once, and is
asked once: what a probe found is remembered for the process (:data:`UP_FOR_S`, :data:`DOWN_FOR_S`).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request

from ..errors import StoreUnavailable
from ._redact import redact_uri

__all__ = ["DOWN_FOR_S", "PROBE_TIMEOUT_S", "RETRYABLE_STATUS", "UP_FOR_S", "ensure_reachable", "mark_down"]

#: A tracking server found down is taken as down for this long, without asking again: a series
#: of attempts then writes each one to the journal at once instead of waiting on every one.
DOWN_FOR_S = 30.0
#: A server that answered is not asked again for this long before the next operation.
UP_FOR_S = 60.0
#: The probe's limit for connecting and for the answer (MLflow's own calls have 15 s each, retried).
PROBE_TIMEOUT_S = 4.0
#: HTTP answers that mean "not now" (a proxy while the server restarts, rate limiting), not "no".
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_DOWN: dict[str, float] = {}
_UP: dict[str, float] = {}


def _is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def mark_down(tracking_uri: str) -> None:
    """Remember that the server did not answer: the next calls within :data:`DOWN_FOR_S` fail at once."""
    if _is_http(tracking_uri):
        _DOWN[redact_uri(tracking_uri)] = time.monotonic()
        _UP.pop(redact_uri(tracking_uri), None)


def ensure_reachable(tracking_uri: str, *, series: bool = False) -> None:
    """Fail fast when a tracking server is down; a no-op for a local store.

    Any HTTP answer (even 401 or 404) means the server is there; a refused connection, no answer
    within :data:`PROBE_TIMEOUT_S`, or a retryable status (429, 502, 503, 504) means it is not.
    With ``series`` (the attempts of a comparison), a server found down in the last
    :data:`DOWN_FOR_S` is not asked again: each attempt goes to the journal at once. A command
    of its own (``evaluate``, ``sync``) always asks.

    Raises:
        StoreUnavailable: the server is down.
    """
    if not _is_http(tracking_uri):
        return
    key, now = redact_uri(tracking_uri), time.monotonic()
    if series and key in _DOWN and now - _DOWN[key] < DOWN_FOR_S:
        raise StoreUnavailable(f"{key} did not answer {now - _DOWN[key]:.0f} s ago; not asking again for "
                               f"{DOWN_FOR_S:.0f} s")
    if key in _UP and now - _UP[key] < UP_FOR_S:
        return
    try:
        with urllib.request.urlopen(_health_url(tracking_uri), timeout=PROBE_TIMEOUT_S):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in RETRYABLE_STATUS:
            mark_down(tracking_uri)
            raise StoreUnavailable(f"{key} answered HTTP {exc.code} (not available now); check the server "
                                   "and any proxy in front of it") from None
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, a malformed URI
        mark_down(tracking_uri)
        reason = getattr(exc, "reason", None) or exc
        raise StoreUnavailable(f"{key} could not be reached ({reason}); check that the server is up and "
                               "MLFLOW_TRACKING_URI is right") from None
    _DOWN.pop(key, None)
    _UP[key] = now


def _health_url(tracking_uri: str) -> str:
    """The server's ``/health`` (an open endpoint: asked without the URI's credentials or query)."""
    parts = urllib.parse.urlsplit(tracking_uri)
    path = parts.path.rstrip("/") + "/health"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], path, "", ""))
