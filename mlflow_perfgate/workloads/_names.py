"""Workload names: what module and factory a name stands for, found without importing anything.

Apart from the rest of the interface (``_interface``), so that the side of a supervised
attempt that only starts children (the runners, ``run_attempt``'s checks) needs no torch.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["BUILTIN_WORKLOADS", "HF_PREFIX", "require_importable", "workload_target"]

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


def require_importable(name: str, *, child: bool = True) -> None:
    """Refuse at once a workload whose module cannot be found, importing nothing (no torch).

    Only the module's top-level package is looked for (``importlib.util.find_spec``, which runs
    no code of it), on ``sys.path`` and, with ``child``, in the current directory too: a
    supervised attempt's child runs ``python -m`` there, so it finds a module this process may
    not (the ``mlflow-perfgate`` script's path does not hold the current directory). Whatever
    goes wrong past that (an ``ImportError`` inside the module, no such factory) the slower
    check in a child answers.

    Raises:
        ValueError: a malformed name (:func:`workload_target`), or a module found nowhere: the
            message says where it looked and how to put the module on the path.
    """
    module_name, _ = workload_target(name)
    top = module_name.split(".")[0]
    given = name.strip()
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        stem = os.path.splitext(os.path.basename(module_name.rstrip("/" + os.sep)))[0]
        raise ValueError(f"workload {given!r} names a file, not a module: name the module as Python imports it "
                         f"('{stem}:{given.rpartition(':')[2]}'), from the folder that holds {stem}.py or with that "
                         "folder in PYTHONPATH")
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a broken entry of sys.modules: the child's check says more
        return
    cwd = os.getcwd()
    if found or (child and importlib.machinery.PathFinder.find_spec(top, [cwd]) is not None):
        return
    head = [os.path.abspath(entry) for entry in sys.path if entry][:3]
    where = f"in the current directory ({cwd}) nor " if child else ""
    raise ValueError(
        f"workload {given!r}: no module {top!r} ({top}.py or a {top}/ package) {where}on "
        f"sys.path ({', '.join(head)}, ...); run from the folder that holds {top}.py, or put that folder on the "
        f"path: PYTHONPATH=/path/to/folder mlflow-perfgate ... (PYTHONPATH=. in the folder itself)")
