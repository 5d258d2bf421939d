"""A trivial workload on the device its conditions name (``tests.workloads_fixtures.placed:make``)."""

from __future__ import annotations

import torch


class Placed:
    def __init__(self, conditions: dict):
        self.device = torch.device(conditions.get("device", "cpu"))

    def step(self) -> float:
        return 1.0

    def quality(self) -> float:
        return 0.5


def make(conditions: dict) -> Placed:
    return Placed(conditions)
