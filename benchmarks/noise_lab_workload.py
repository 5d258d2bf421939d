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

import torch

from mlflow_perfgate.workloads import integer
from mlflow_perfgate.workloads.tinylm import TinyLMConfig, TinyLMWorkload

__all__ = ["ExtraWorkTinyLM", "make"]

DEFAULT_UNIT_SIZE = 128


class ExtraWorkTinyLM(TinyLMWorkload):
    """TinyLM whose :meth:`step` ends with ``extra_units`` fixed matrix products.

    The stage methods (``next_batch``, ``forward``, ``backward``, ``optimizer_step``) are
    TinyLM's, so the correctness probe and the memory estimate see TinyLM; only the timed
    ``step`` carries the extra work.
    """

    def __init__(self, config: TinyLMConfig, extra_units: int, unit_size: int):
        super().__init__(config)
        self.extra_units = extra_units
        self.unit_size = unit_size
        generator = torch.Generator().manual_seed(config.seed + 7919)
        shape = (unit_size, unit_size)
        self._a = torch.rand(shape, generator=generator) * 2 - 1
        self._b = torch.rand(shape, generator=generator) * 2 - 1
        self._out = torch.empty(shape)

    def extra_work(self) -> None:
        """The fixed extra work of one step."""
        for _ in range(self.extra_units):
            torch.mm(self._a, self._b, out=self._out)

    def step(self) -> torch.Tensor:
        loss = super().step()
        self.extra_work()
        return loss


def make(conditions: dict) -> ExtraWorkTinyLM:
    """The factory (``noise_lab_workload:make``).

    Args:
        conditions: TinyLM's conditions (see ``mlflow_perfgate.workloads.tinylm.make_workload``)
            plus ``extra_units`` (int >= 0, default 0: plain TinyLM) and ``unit_size`` (int >= 1,
            default 128).

    Raises:
        ValueError: a condition has a bad value (the message names it).
    """
    units = integer(conditions, "extra_units", 0, minimum=0)
    size = integer(conditions, "unit_size", DEFAULT_UNIT_SIZE, minimum=1)
    return ExtraWorkTinyLM(TinyLMConfig.from_conditions(dict(conditions)), units, size)
