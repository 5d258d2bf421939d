"""How a workload's failure is told, shared by a whole attempt (``_attempt``), a step-interleaved
pair (``_interleave``) and the runners (``_runner``): a leaf, importing nothing of theirs."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["DETAIL_CHARS", "can_inspect", "describe_exception", "describe_failure", "system_exit_reason", "tail",
           "timeout_reason"]

#: Characters of a traceback or child log kept in ``failure_detail``.
DETAIL_CHARS = 4000
_OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory")


def describe_exception(error: BaseException) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    label = f"{type(error).__name__}: {message}" if message else type(error).__name__
    torch = sys.modules.get("torch")  # the workload's code imported it, if it raised one of its errors
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), MemoryError) if t)
    if isinstance(error, oom_types) or (
        isinstance(error, RuntimeError) and any(m in message.lower() for m in _OOM_MARKERS)
    ):
        return f"out_of_memory: {label}"
    return f"exception: {label}"


def tail(text: str) -> str:
    """The end of a long text (a traceback, a child's log), after ``...``."""
    return text if len(text) <= DETAIL_CHARS else "..." + text[-DETAIL_CHARS:]


def timeout_reason(timeout_s: float) -> str:
    return f"timeout after {float(timeout_s)}s"


def can_inspect(workload: Any) -> bool:
    """Whether the probe and the memory estimate apply (a model and the stage methods)."""
    import torch

    from ._interface import missing_stages

    return isinstance(getattr(workload, "model", None), torch.nn.Module) and not missing_stages(workload)


def system_exit_reason(error: SystemExit) -> str:
    return f"exited: sys.exit({error.code!r}) inside the workload"


def describe_failure(error: BaseException) -> str:
    """The failure reason of an exception or a ``SystemExit`` raised by the workload's code."""
    return system_exit_reason(error) if isinstance(error, SystemExit) else describe_exception(error)
