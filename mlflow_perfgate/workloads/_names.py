"""Workload names: what module and factory a name stands for, found without importing anything.

Apart from the rest of the interface (``_interface``), so that the side of a supervised
attempt that only starts children (the runners, ``run_attempt``'s checks) needs no torch.
"""

from __future__ import annotations

__all__ = ["BUILTIN_WORKLOADS", "HF_PREFIX", "workload_target"]

#: Built-in short names for factories.
BUILTIN_WORKLOADS: dict[str, str] = {"tinylm": "mlflow_perfgate.workloads.tinylm:make_workload"}

#: The prefix of a workload name that wraps a Hugging Face model factory: ``hf:module:function``.
HF_PREFIX = "hf"


def workload_target(name: str) -> tuple[str, str]:
    """The module and function a workload name stands for, without importing anything.

    Raises:
        ValueError: the name is neither built in nor of the form ``module:function``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"workload must be a non-empty string, got {name!r}")
    target = BUILTIN_WORKLOADS.get(name.strip().lower(), name.strip())
    prefix, sep, rest = target.partition(":")
    if sep and prefix.lower() == HF_PREFIX:
        target = rest  # hf:module:function: the user's module is what gets imported
    module_name, sep, function_name = target.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(
            f"workload must be one of {sorted(BUILTIN_WORKLOADS)}, 'module:function' or "
            f"'hf:module:function', got {name!r}"
        )
    return module_name, function_name
