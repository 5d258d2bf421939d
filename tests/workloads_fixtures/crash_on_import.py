"""Importing this module segfaults (when armed, see ``import_hostile``)."""

import ctypes

from .import_hostile import armed, make  # noqa: F401 - the factory

if armed():
    ctypes.string_at(0)
