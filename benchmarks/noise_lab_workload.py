"""TinyLM plus a fixed amount of extra work per step: the noise lab's true effects.

``benchmarks/noise_lab.py`` names the factory ``noise_lab_workload:make`` and puts this
directory on ``sys.path``, which the attempt runners pass on to every child (``PYTHONPATH`` and
the fork server's request path), so the children import this module as the parent does.

The extra work is ``extra_units`` products of two fixed ``unit_size`` x ``unit_size`` fp32
matrices into a preallocated output (``torch.mm(a, b, out=...)``), run at the end of every
training step, inside the step's clock. The inputs are drawn once from a seeded generator in
[-1, 1), and each product overwrites the same output, so every unit costs the same whatever
came before (no growth towards infinities or denormals, no allocation). The model, its data and
its quality are TinyLM's, untouched: only the step's time changes.
"""

from __future__ import annotations

import random

import torch

from mlflow_perfgate.workloads import integer
from mlflow_perfgate.workloads.tinylm import TinyLMConfig, TinyLMWorkload

__all__ = ["SHAPES", "ExtraWorkTinyLM", "make"]

DEFAULT_UNIT_SIZE = 128
#: Shapes of the candidate's step times (``shape``), as ``tests/workloads_fixtures/shapes.py`` has
#: them, as multiples of the plain step (``step_units`` of extra work is one plain step): ``stall``
#: every 5th measured step 3x (median unchanged, mean +40%), ``fast_path`` 1 step in 4 at 0.65x and
#: the others 1.12x (p10 35% faster, typical +12%, mean +0.25%), ``slow_first`` the first 3 of 30
#: measured steps 2.5x (typical unchanged, mean +15%), ``bimodal`` half the steps, at random, 1.3x
#: (mean +15%).
SHAPES = ("none", "stall", "fast_path", "slow_first", "bimodal")


class ExtraWorkTinyLM(TinyLMWorkload):
    """TinyLM whose :meth:`step` ends with ``extra_units`` fixed matrix products.

    The stage methods (``next_batch``, ``forward``, ``backward``, ``optimizer_step``) are
    TinyLM's, so the correctness probe and the memory estimate see TinyLM; only the timed
    ``step`` carries the extra work.
    """

    def __init__(self, config: TinyLMConfig, extra_units: int, unit_size: int, shape: str = "none",
                 step_units: int = 0, warmup: int = 0):
        super().__init__(config)
        self.extra_units = extra_units
        self.unit_size = unit_size
        self.shape, self.step_units, self.warmup = shape, step_units, warmup
        self.calls = 0
        self._shape_rng = random.Random(config.seed + 104729)
        generator = torch.Generator().manual_seed(config.seed + 7919)
        shape = (unit_size, unit_size)
        self._a = torch.rand(shape, generator=generator) * 2 - 1
        self._b = torch.rand(shape, generator=generator) * 2 - 1
        self._out = torch.empty(shape)

    def factor(self, measured: int) -> float:
        """How many times the plain step this measured step takes, by ``shape`` (1 before it is measured)."""
        if measured < 0 or self.shape == "none":
            return 1.0
        if self.shape == "stall":
            return 3.0 if measured % 5 == 0 else 1.0
        if self.shape == "fast_path":
            return 0.65 if measured % 4 == 0 else 1.12
        if self.shape == "slow_first":
            return 2.5 if measured < 3 else 1.0
        if self.shape == "bimodal":
            return 1.3 if self._shape_rng.random() < 0.5 else 1.0
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {self.shape!r}")

    def extra_work(self, units: int | None = None) -> None:
        """The extra work of one step: ``extra_units``, or ``units``."""
        for _ in range(self.extra_units if units is None else units):
            torch.mm(self._a, self._b, out=self._out)

    def step(self) -> torch.Tensor:
        measured, self.calls = self.calls - self.warmup, self.calls + 1
        loss = super().step()
        factor = self.factor(measured)
        self.extra_work(None if factor == 1.0 else max(0, round(self.extra_units + (factor - 1) * self.step_units)))
        return loss


def make(conditions: dict) -> ExtraWorkTinyLM:
    """The factory (``noise_lab_workload:make``).

    Args:
        conditions: TinyLM's conditions (see ``mlflow_perfgate.workloads.tinylm.make_workload``)
            plus ``extra_units`` (int >= 0, default 0: plain TinyLM), ``unit_size`` (int >= 1,
            default 128), ``shape`` (one of :data:`SHAPES`, default ``none``) and ``step_units``
            (the extra units that cost one plain step, for the shapes); ``threads_set`` (int >= 1:
            the factory calls ``torch.set_num_threads``; 0, the default, leaves the attempt's).

    Raises:
        ValueError: a condition has a bad value (the message names it).
    """
    units = integer(conditions, "extra_units", 0, minimum=0)
    size = integer(conditions, "unit_size", DEFAULT_UNIT_SIZE, minimum=1)
    shape = str(conditions.get("shape", "none"))
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {shape!r}")
    threads = integer(conditions, "threads_set", 0, minimum=0)
    if threads:  # process-wide state a factory sets: step interleaving must give each arm its own
        torch.set_num_threads(threads)
    return ExtraWorkTinyLM(TinyLMConfig.from_conditions(conditions), units, size, shape=shape,
                           step_units=integer(conditions, "step_units", 0, minimum=0),
                           warmup=integer(conditions, "warmup", 2, minimum=0))
