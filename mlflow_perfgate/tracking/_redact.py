"""The one place that takes credentials out of a URI or a text before it is shown or stored.

Pure standard library (no mlflow): the command line redacts its error lines with it without
importing MLflow, and the journal redacts what it writes.

What goes: the user-info of a URI (``http://user:secret@host`` -> ``http://host``, for any
scheme: ``postgresql://user:pw@db/x`` too), and the value of a query parameter that names a
secret (``?token=...``, ``?access_token=``, ``?password=``, ``?api_key=``, ``?sig=``, AWS's
``X-Amz-Signature`` / ``X-Amz-Credential`` / ``X-Amz-Security-Token``, ...), which becomes
``***``. In a free text (an error message), every URI it holds is redacted so, and so is any
password or token of the current tracking configuration (``MLFLOW_TRACKING_URI``'s,
``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_TOKEN``) wherever it appears, whatever shape
the text gave it.
"""

from __future__ import annotations

import os
import re
import urllib.parse

__all__ = ["MASK", "redact_text", "redact_uri"]

MASK = "***"

#: A query parameter whose value is a secret: a name holding one of these words (case ignored).
_SECRET_NAME = (r"[A-Za-z0-9_.\-]*(?:token|passw(?:or)?d|pwd|secret|signature|credential|api[_\-]?key|apikey|auth)"
                r"[A-Za-z0-9_.\-]*|sig|key|pass")
_SECRET_PARAM = re.compile(rf"(?i)((?:^|[?&;])(?:{_SECRET_NAME})=)([^&;#\s'\"<>]*)")
#: ``scheme://user:password@`` (or ``scheme://token@``) anywhere in a text.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#'\"<>]*@")
#: A secret of the configuration is searched for in texts only from this length on: a shorter
#: one would mask ordinary words.
_MIN_SECRET_LEN = 6


def redact_uri(uri: str) -> str:
    """A URI without the credentials it may hold.

    ``http://user:secret@host:5000/p?token=abc&x=1`` -> ``http://host:5000/p?token=***&x=1``. A
    URI without credentials is returned unchanged (the same string).
    """
    if not isinstance(uri, str):
        return uri
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:  # a malformed URI (an unclosed IPv6 bracket): redact it as text
        return _redact_patterns(uri)
    netloc = parts.netloc.rpartition("@")[2]
    query = _SECRET_PARAM.sub(lambda m: m.group(1) + (MASK if m.group(2) else ""), parts.query)
    if netloc == parts.netloc and query == parts.query:
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def _redact_patterns(text: str) -> str:
    text = _USERINFO.sub(r"\1", text)
    return _SECRET_PARAM.sub(lambda m: m.group(1) + (MASK if m.group(2) else ""), text)


def _configured_secrets() -> set[str]:
    """The passwords and tokens the current tracking configuration holds, as given and as decoded."""
    found = {os.environ.get("MLFLOW_TRACKING_PASSWORD") or "", os.environ.get("MLFLOW_TRACKING_TOKEN") or ""}
    uri = os.environ.get("MLFLOW_TRACKING_URI") or ""
    try:
        parts = urllib.parse.urlsplit(uri)
        userinfo = parts.netloc.rpartition("@")[0]
        found.add(userinfo.partition(":")[2] if ":" in userinfo else userinfo)  # a password, or a lone token
        found.update(m.group(2) for m in _SECRET_PARAM.finditer(parts.query))
    except ValueError:
        pass
    found |= {urllib.parse.unquote(secret) for secret in found}
    return {secret for secret in found if len(secret) >= _MIN_SECRET_LEN}


def redact_text(text: str) -> str:
    """A text (an error message, a journal line) with every credential taken out.

    The URIs in it lose their user-info and secret query values (as :func:`redact_uri`), and any
    password or token of the current tracking configuration is masked wherever it appears.
    """
    if not isinstance(text, str) or not text:
        return text
    text = _redact_patterns(text)
    for secret in sorted(_configured_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
