"""Importing this module calls ``sys.exit(0)`` (when armed, see ``import_hostile``)."""

import sys

from .import_hostile import armed, make  # noqa: F401 - the factory

if armed():
    sys.exit(0)
