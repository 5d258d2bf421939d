"""A workload whose step time has a declared shape, for the validity cases of the decision.

``shape`` (a condition, the variable a comparison changes): ``none`` (every step ``base_ms``),
``scale`` (every step ``factor`` x), ``stall`` (every 5th step 3x: median unchanged, mean
+40%), ``fast_path`` (1 step in 4 35% faster, the others 12% slower: the 10th-percentile step
reads faster, the typical step is slower), ``slow_first`` (the first 3 measured steps 2.5x),
``bimodal`` (half the steps, at random, 1.3x). The step sleeps: it loads no CPU, so the shape
is what the clock sees on a busy test machine too.
"""

from __future__ import annotations

import random
import time


class Shaped:
    tokens_per_step = 1

    def __init__(self, conditions: dict):
        self.shape = str(conditions.get("shape", "none"))
        self.base_s = float(conditions.get("base_ms", 4.0)) / 1e3
        self.factor = float(conditions.get("factor", 1.0))
        self.warmup = int(conditions.get("warmup", 0))
        self.calls = 0
        self.rng = random.Random(int(conditions.get("seed", 0)))

    def _factor(self, measured: int) -> float:
        if self.shape == "scale":
            return self.factor
        if self.shape == "stall":
            return 3.0 if measured % 5 == 0 else 1.0
        if self.shape == "fast_path":
            return 0.65 if measured % 4 == 0 else 1.12
        if self.shape == "slow_first":
            return 2.5 if measured < 3 else 1.0
        if self.shape == "bimodal":
            return 1.3 if self.rng.random() < 0.5 else 1.0
        return 1.0

    def step(self) -> float:
        measured = self.calls - self.warmup
        self.calls += 1
        time.sleep(self.base_s * (self._factor(measured) if measured >= 0 else 1.0))
        return 1.0

    def quality(self) -> float:
        return 0.5


def shaped(conditions: dict) -> Shaped:
    return Shaped(conditions)


class Stateful:
    """A workload whose factory sets process-wide torch state from its conditions, and whose steps
    record what they ran under: ``quality()`` is the mean thread count its steps saw, plus 10 when
    every step ran with float64 as the default dtype.

    Conditions: ``threads_set`` (``torch.set_num_threads``), ``dtype_set`` (``float32`` or
    ``float64``: ``torch.set_default_dtype``), ``env_set`` (written to ``OMP_WAIT_POLICY``: an
    environment variable OpenMP reads at start-up, which no step can switch), ``mode`` (declared
    per-process when ``declare`` is true).
    """

    tokens_per_step = 1

    def __init__(self, conditions: dict):
        import os

        import torch

        self.torch = torch
        if "threads_set" in conditions:
            torch.set_num_threads(int(conditions["threads_set"]))
        if "dtype_set" in conditions:
            torch.set_default_dtype(getattr(torch, str(conditions["dtype_set"])))
        if "env_set" in conditions:
            os.environ["OMP_WAIT_POLICY"] = str(conditions["env_set"])
        if str(conditions.get("declare", "false")).lower() == "true":
            self.per_process_conditions = ("mode",)
        self.seen: list[tuple[int, bool]] = []

    def step(self) -> float:
        torch = self.torch
        self.seen.append((torch.get_num_threads(), torch.get_default_dtype() == torch.float64))
        time.sleep(0.002)
        return 1.0

    def quality(self) -> float:
        threads = sum(t for t, _ in self.seen) / len(self.seen)
        return threads + (10.0 if all(f64 for _, f64 in self.seen) else 0.0)


def stateful(conditions: dict) -> Stateful:
    return Stateful(conditions)
