"""Figures an objective's entry measures in the attempt's own process (its ``measure``).

An objective that judges a figure no attempt logs by itself names it (``Objective.metric``) and
says how an attempt measures it (``Objective.measure``): the attempt calls it after its measured
steps and ``quality()``, with the live workload and what the attempt has measured so far, and the
figure travels in :attr:`AttemptResult.figures` to the attempt run's metrics, where the rules read it.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Iterable

from ..rules import OBJECTIVES, to_python

__all__ = ["check_measures", "measure_figures"]


def check_measures(measures: Iterable[str], supervised: bool = False) -> tuple[str, ...]:
    """The objective names, each registered with a ``measure``; ``ValueError`` naming one that is not.

    A supervised attempt's child is a fresh interpreter: it has the built-ins and the installed
    plugins' objectives, not one registered by hand in this process, which is refused here.
    """
    if isinstance(measures, str):
        raise ValueError(f"measures must be a sequence of objective names, got the string {measures!r}")
    names = tuple(measures)
    for name in names:
        try:
            entry = OBJECTIVES.require(name)
        except Exception as error:  # PolicyError: an unknown objective, with the plugins' hint
            raise ValueError(str(error)) from None
        if entry.measure is None or not entry.metric:
            raise ValueError(f"the {name} objective measures nothing in an attempt (it has no measure and metric): "
                             "its figure is one every attempt logs already")
        if supervised and not OBJECTIVES.in_every_process(name):
            raise ValueError(f"the {name} objective was registered in this process only, and a supervised attempt's "
                             "child (a fresh interpreter) cannot measure it: install it as a plugin (entry point "
                             "'mlflow_perfgate.objectives') or run the attempts in this process (supervised=False)")
    return names


def measure_figures(measures: Iterable[str], workload: Any, facts: dict) -> dict[str, float]:
    """Each objective's figure, by its metric name; ``None`` from a measure leaves its figure out.

    Raises:
        RuntimeError: a measure raised, or returned what is not a finite number > 0 (the
            attempt fails with this reason: its judged figure is missing).
    """
    figures: dict[str, float] = {}
    shown = MappingProxyType(dict(facts))
    for name in measures:
        entry = OBJECTIVES.require(name)
        try:
            value = entry.measure(workload, shown)
        except Exception as error:  # noqa: BLE001 - said as the attempt's failure
            raise RuntimeError(f"the {name} objective's measure failed: {type(error).__name__}: {error}") from error
        if value is None:
            continue
        value = to_python(value)  # a numpy or torch scalar as the number it holds
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise RuntimeError(f"the {name} objective's measure returned {value!r} for {entry.metric}; it must be a "
                               "finite number > 0, or None")
        figures[entry.metric] = float(value)
    return figures
