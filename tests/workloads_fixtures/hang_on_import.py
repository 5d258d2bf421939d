"""Importing this module hangs for an hour (when armed, see ``import_hostile``)."""

import time

from .import_hostile import armed, make  # noqa: F401 - the factory

if armed():
    time.sleep(3600)
