"""Importing this module appends the importing process's pid to ``$PERFGATE_IMPORT_MARKER`` (when set).

So a test sees which processes ran the module's code: only children may (never the caller).
"""

import os

from .import_hostile import make  # noqa: F401 - the factory

_MARKER = os.environ.get("PERFGATE_IMPORT_MARKER")
if _MARKER:
    with open(_MARKER, "a") as _handle:
        _handle.write(f"{os.getpid()}\n")
