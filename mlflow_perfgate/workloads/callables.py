"""Two zero-argument callables as one workload: a baseline and a candidate implementation.

The workload behind ``mlflow_perfgate.workloads.callables:make_workload`` (the pytest plugin's
``baseline=``/``candidate=`` declarations use it). Its conditions name both callables, in both
arms, and the one variable that differs is ``impl``: ``baseline`` or ``candidate``, so the
specification's single-variable rule holds as for any other change::

    conditions = {"baseline_callable": "mypkg.ops:slow_sum", "candidate_callable": "mypkg.ops:fast_sum",
                  "impl": "baseline", ...}    # the candidate arm: impl = "candidate"

One step calls the chosen callable ``calls_per_step`` times (default 1); what it returns is
ignored. A callable has no quality of its own, so :meth:`CallableWorkload.quality` is the same
constant in both arms (the quality gate always passes; correctness is the ordinary tests' job).
Each callable is imported by name in the attempt's process (a supervised attempt's child), so
it must be a module-level function (or an attribute path under one) that ``module:name``
reaches: a lambda or a function defined inside another is refused, saying so.

No torch here: the attempt's own machinery imports it; the callables need not.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["ARMS", "IMPL", "WORKLOAD", "CallableWorkload", "callable_conditions", "callable_name",
           "make_workload", "resolve_callable"]

#: The workload name to run two callables.
WORKLOAD = "mlflow_perfgate.workloads.callables:make_workload"
#: The condition that differs between the arms, and its two values.
IMPL = "impl"
ARMS = ("baseline", "candidate")
#: The fixed conditions the specification requires of every baseline, as a pair of callables states them.
DEFAULT_CONDITIONS = {"model": "python_callable", "input_shape": "none", "batch_size": 1, "dtype": "none",
                      "device": "cpu", "measurement_method": "wall_median_step_ms"}


def callable_name(function: Any, role: str = "callable") -> str:
    """``"module:qualname"`` of a module-level callable, the name its attempt's process imports it by.

    Raises:
        ValueError: not callable, or not reachable by name (a lambda, a nested function, no module).
    """
    if not callable(function):
        raise ValueError(f"{role} must be a callable taking no arguments, got {function!r}")
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        raise ValueError(f"{role} {qualname or function!r} (module {module!r}) cannot be imported by name in the "
                         "attempt's process: define it at the top level of an importable module")
    name = f"{module}:{qualname}"
    if resolve_callable(name) is not function:
        raise ValueError(f"{role} {name!r} does not name the function given (it is shadowed or rebound): define it "
                         "at the top level of its module under its own name")
    return name


def resolve_callable(name: str) -> Callable[[], Any]:
    """The callable behind ``"module:qualname"``.

    Raises:
        ValueError: a malformed name, a module that cannot be imported, no such attribute, not callable.
    """
    if not isinstance(name, str):
        raise ValueError(f"a callable's name must be 'module:qualname', got {name!r}")
    module_name, sep, qualname = name.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"a callable's name must be 'module:qualname', got {name!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"callable {name!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"callable {name!r}: module {module_name!r} has no {qualname!r}")
    if not callable(target):
        raise ValueError(f"callable {name!r} is not callable")
    return target


def callable_conditions(baseline: Any, candidate: Any, conditions: dict | None = None) -> tuple[dict, dict]:
    """The baseline's conditions and the change for a pair of callables: ``(conditions, {"impl": "candidate"})``.

    ``conditions`` (fixed, both arms) may override the defaults of the specification's fixed
    conditions (``model``, ``input_shape``, ...) and add ``calls_per_step``, ``steps``, ``warmup``.

    Raises:
        ValueError: a callable that cannot be imported by name, the same callable twice, or
            ``conditions`` that name the callables or ``impl`` themselves.
    """
    if conditions is not None and not isinstance(conditions, dict):
        raise ValueError(f"conditions must be a dict of fixed conditions, got {conditions!r}")
    conditions = dict(conditions or {})
    taken = sorted({IMPL, "baseline_callable", "candidate_callable"} & set(conditions))
    if taken:
        raise ValueError(f"conditions {taken} are set from baseline= and candidate=; leave them out")
    names = {arm: callable_name(function, arm) for arm, function in zip(ARMS, (baseline, candidate))}
    if names["baseline"] == names["candidate"]:
        raise ValueError(f"baseline and candidate are the same callable {names['baseline']!r}: the comparison would "
                         "compare it with itself")
    return ({**DEFAULT_CONDITIONS, **conditions, "baseline_callable": names["baseline"],
             "candidate_callable": names["candidate"], IMPL: "baseline"}, {IMPL: "candidate"})


class CallableWorkload:
    """One arm of a pair of callables: ``step()`` calls it ``calls_per_step`` times."""

    def __init__(self, function: Callable[[], Any], calls_per_step: int = 1):
        self.function = function
        self.calls_per_step = calls_per_step

    def step(self) -> None:
        for _ in range(self.calls_per_step):
            self.function()

    def quality(self) -> float:
        """The same in both arms: a callable has no quality of its own."""
        return 1.0

    def close(self) -> None:
        """Nothing to release."""


def make_workload(conditions: dict) -> CallableWorkload:
    """Build the arm ``conditions['impl']`` names (the workload factory of a pair of callables).

    Raises:
        ValueError: ``impl`` is neither ``baseline`` nor ``candidate``, its callable cannot be
            found, or ``calls_per_step`` is not an integer >= 1.
    """
    from ._conditions import integer

    impl = str(conditions.get(IMPL, "")).strip()
    if impl not in ARMS:
        raise ValueError(f"{IMPL} must be one of {list(ARMS)}, got {conditions.get(IMPL)!r}")
    name = conditions.get(f"{impl}_callable")
    if not name:
        raise ValueError(f"{impl}_callable must name the {impl}'s callable as 'module:qualname'")
    return CallableWorkload(resolve_callable(str(name)), integer(conditions, "calls_per_step", 1, minimum=1))
