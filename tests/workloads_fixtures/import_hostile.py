"""Shared by the ``*_on_import`` modules: their module-level misbehaviour, and a factory.

Each of those modules misbehaves when it is imported with ``PERFGATE_HOSTILE_IMPORT=1`` in the
environment, and only then, so that a stray import (a tool walking the package) is harmless.
They are meant for the fork runner, whose server imports a workload's module in a child first;
the spawn runner imports it in the caller, which they would crash or hang.
"""

from __future__ import annotations

import os

from .hostile import _Hostile


def armed() -> bool:
    return os.environ.get("PERFGATE_HOSTILE_IMPORT") == "1"


def make(conditions: dict) -> _Hostile:
    """A workload whose steps succeed (``fail_at`` is ignored)."""
    return _Hostile({"fail_at": 10**9}, lambda: 1.0)
