"""The workload interface: what the attempt runner, the probe and the evidence collectors call.

A workload is built by a *factory* named ``"module:function"`` that takes the conditions dict.
The runner needs only ``step()`` and ``quality()``; the correctness probe, the stage timer and
the memory estimate need the stage methods and ``model`` that :class:`Workload` documents.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from ._names import BUILTIN_WORKLOADS, HF_PREFIX, workload_target
from ._reads import READ_ATTRIBUTE, ConditionReads, read_conditions_of

__all__ = [
    "BUILTIN_WORKLOADS",
    "STAGES",
    "Workload",
    "WorkloadProtocol",
    "make_workload",
    "resolve_workload",
]


from ._base import STAGES, Workload, WorkloadProtocol  # noqa: E402,F401 - the interface's names, as before


def resolve_workload(name: str) -> Callable[[dict], Any]:
    """Find the factory behind a workload name.

    Args:
        name: a built-in short name (``"tinylm"``), ``"package.module:function"``, or
            ``"hf:package.module:function"`` for a factory of a Hugging Face ``transformers``
            model that the built-in adapter turns into a workload (see
            :func:`~mlflow_perfgate.workloads.hf_workload`).

    Returns:
        The factory, a callable taking the conditions dict.

    Raises:
        ValueError: the name is neither built in nor of the form ``module:function`` or
            ``hf:module:function``, the module or function cannot be found, or an ``hf:``
            name is given and ``transformers`` is not installed.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"workload must be a non-empty string, got {name!r}")
    prefix, sep, rest = name.strip().partition(":")
    if sep and prefix.lower() == HF_PREFIX:
        from ._hf import resolve_hf_factory  # imports transformers only when asked for

        return resolve_hf_factory(rest)
    module_name, function_name = workload_target(name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"workload {name!r}: cannot import module {module_name!r}: {error}") from error
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ValueError(f"workload {name!r}: module {module_name!r} has no callable {function_name!r}")
    return factory


def make_workload(name: str, conditions: dict | None = None) -> Any:
    """Build a workload from its name and conditions.

    Raises:
        ValueError: unknown workload name, or the factory rejected a condition.
        TypeError: the factory returned an object without callable ``step`` and ``quality``.
    """
    reads = ConditionReads(conditions or {})  # what the factory reads: did a changed variable reach it?
    workload = resolve_workload(name)(reads)
    if not isinstance(workload, WorkloadProtocol):
        raise TypeError(
            f"workload {name!r} factory returned {type(workload).__name__}, which lacks callable "
            "step() and quality()"
        )
    if getattr(workload, READ_ATTRIBUTE, None) is None:  # an adapter may have said it; read when described
        try:
            setattr(workload, READ_ATTRIBUTE, reads)
        except (AttributeError, TypeError):  # slots or a frozen object: nothing is claimed
            pass
    return workload


def describe_workload(workload: Any) -> dict:
    """The workload dict of the evidence records, for workloads without :meth:`Workload.describe`."""
    describe = getattr(workload, "describe", None)
    if callable(describe):
        return dict(describe())
    return Workload.describe(workload)


def device_of(workload: Any) -> torch.device:
    """The workload's device, CPU when it does not say."""
    return torch.device(getattr(workload, "device", None) or "cpu")


def missing_stages(workload: Any) -> list[str]:
    """Names of the stage methods the workload lacks (empty when it has all four)."""
    return [method for _, method in STAGES if not callable(getattr(workload, method, None))]
