"""A benchmark whose code lives in the repository under bisection: ``bench.py`` of each revision's checkout.

``bench.py`` sets ``DELAY_S``; one step sleeps that long. Used by ``tests/test_history_e2e.py``.
"""

from __future__ import annotations

import importlib.util
import time

from mlflow_perfgate.history import revision_worktree


class _Bench:
    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def step(self) -> float:
        time.sleep(self.delay_s)
        return 0.0

    def quality(self) -> float:
        return 1.0


def make(conditions):
    path = revision_worktree(conditions) / "bench.py"
    spec = importlib.util.spec_from_file_location(f"bench_{conditions['revision']}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _Bench(float(module.DELAY_S))
