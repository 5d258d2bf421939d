"""The fixed conditions a factory declares beside its code, read in a child process.

A factory of your own may say which conditions it fixes, so that a comparison of it needs no
``--set`` for them::

    def make(conditions):
        ...

    make.perfgate_conditions = {"model": "mlp", "input_shape": "64,512", "batch_size": 64,
                                "dtype": "fp32", "device": "cpu", "measurement_method": "wall_ms"}

``compare --workload mybench:make --change hidden=256`` then records these as the baseline's
fixed conditions where no ``--set`` gives them, and refuses a ``--set`` that disagrees with
one, naming both values (``harness``). The module is imported in a child process
(``python -m mlflow_perfgate.workloads._declared NAME``, in the current directory, as an
attempt's child imports it), or, given a runner, in a child of that runner (the ``declare`` task:
a fork runner's warm server forks it, with torch imported already, instead of a fresh interpreter
importing it again): its imports, torch's included, never run in the comparison's own process.
No torch here.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._names import HF_PREFIX, workload_target

__all__ = ["ATTRIBUTE", "DeclarationUnreadable", "declared_conditions", "write_declaration"]

#: The factory's attribute that declares its fixed conditions.
ATTRIBUTE = "perfgate_conditions"
#: How long reading a declaration may take (the module's imports, torch's, on a busy machine).
_TIMEOUT_S = 120.0
_PLAIN = (str, int, float, bool)
#: The child's exit code where the module or its factory is not there (the comparison goes on; the
#: workload's own check refuses it with its own message).
_UNREADABLE = 4
#: Where the declaration is malformed (refused, with the child's reason).
_MALFORMED = 3
#: Where the module's import failed, crashed or exited (:class:`DeclarationUnreadable`).
_IMPORT_FAILED = 5


class DeclarationUnreadable(ValueError):
    """The module's import failed, crashed or exited while its declaration was read: a comparison given every
    condition goes on (each attempt's child meets the failure again and fails, counted), else is refused."""


def declared_conditions(workload: str, timeout_s: float = _TIMEOUT_S, runner: Any = None) -> dict:
    """The conditions ``workload``'s factory declares (``factory.perfgate_conditions``); ``{}`` where it
    declares none, or is a built-in or Hugging Face name.

    ``runner``: an :class:`~._runner.AttemptRunner` whose child reads it (``run_task``, the
    ``declare`` task); without one, a fresh interpreter does.

    Raises:
        DeclarationUnreadable: the module's import failed, crashed or exited (a ``ValueError``).
        ValueError: the declaration is not a mapping of condition names to plain values (a string,
            a number, a boolean, a list of them); the message names the workload and what to fix.
    """
    prefix, sep, _ = workload.strip().partition(":")
    if not sep or prefix.lower() == HF_PREFIX:
        return {}
    workload_target(workload)  # a malformed name: its own message
    if runner is not None:
        return _declared_by(runner, workload, timeout_s)
    # where this process finds modules, and the current directory (where an attempt's child looks)
    found = [os.getcwd(), *(entry for entry in sys.path if entry and os.path.isdir(entry))]
    path = os.pathsep.join(dict.fromkeys([*found, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
    try:
        done = subprocess.run([sys.executable, "-m", __name__, workload], capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "PYTHONPATH": path})
    except subprocess.TimeoutExpired:
        raise ValueError(f"workload {workload!r}: importing its module to read its declared conditions took over "
                         f"{timeout_s:g} s") from None
    if done.returncode == _UNREADABLE:  # no such module or factory: the workload's own check says so, later
        return {}
    why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    if done.returncode == _MALFORMED:
        raise ValueError(why)
    if done.returncode != 0:  # its import failed or crashed: each attempt's child meets it again
        raise DeclarationUnreadable(f"workload {workload!r}: its declared conditions ({ATTRIBUTE}) could not be "
                                    f"read: {why}")
    # the last line: whatever the module itself wrote on import (below the Python level too) comes before it
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        raise DeclarationUnreadable(f"workload {workload!r}: reading its declared conditions ({ATTRIBUTE}) gave no "
                                    f"answer (its output ended: {done.stdout[-200:]!r})") from None


def _unreadable(workload: str, why: str) -> DeclarationUnreadable:
    return DeclarationUnreadable(f"workload {workload!r}: its declared conditions ({ATTRIBUTE}) could not be read: {why}")


def _declared_by(runner: Any, workload: str, timeout_s: float) -> dict:
    """:func:`declared_conditions` read by a child of ``runner`` (:func:`write_declaration`)."""
    from ._attempt import exit_reason
    from ._wire import FormatError, read_json

    if getattr(runner, "declares", None) == workload:  # its server read it first thing, before its warm-up
        try:
            stored = runner.declaration(timeout_s)
        except ValueError:
            raise ValueError(f"workload {workload!r}: importing its module to read its declared conditions took "
                             f"over {timeout_s:g} s") from None
        if "crashed" in stored:
            raise _unreadable(workload, f"importing its module {stored['crashed']}")
        return _answer(workload, stored, timeout_s)
    with tempfile.TemporaryDirectory(prefix="perfgate-declared-") as tmp:
        result_path = Path(tmp) / "result.json"
        try:
            ended = runner.run_task({"task": "declare", "workload": workload}, result_path, Path(tmp) / "child.log",
                                    float(timeout_s))
        except ValueError:  # the name did not resolve (the server's check): read as without a runner, which
            return declared_conditions(workload, timeout_s)  # tells a module not there from its failing import
        if ended.timed_out:
            raise ValueError(f"workload {workload!r}: importing its module to read its declared conditions took over "
                             f"{timeout_s:g} s")
        if ended.reason is not None:  # the runner's own failure (its server died)
            raise _unreadable(workload, ended.reason)
        try:
            stored = read_json(result_path, "the declared conditions")
        except (OSError, FormatError):
            stored = None
    if ended.exitcode != 0 or stored is None:
        last = (ended.log_tail or "").strip().splitlines()
        raise _unreadable(workload, last[-1] if last else exit_reason(ended.exitcode))
    return _answer(workload, stored, timeout_s)


def _answer(workload: str, stored: dict, timeout_s: float) -> dict:
    """The declaration from what a runner's child wrote (the ``declare`` task)."""
    if "refused" in stored:  # as above
        return declared_conditions(workload, timeout_s)
    if "import_failed" in stored:
        raise _unreadable(workload, str(stored["import_failed"]))
    if "malformed" in stored:
        raise ValueError(str(stored["malformed"]))
    return dict(stored["declared"])


def write_declaration(workload: str, result_path: str) -> None:
    """In a runner's child (the ``declare`` task), the workload's module imported already: write its
    factory's declaration (``{"declared": ...}``, or ``{"malformed": why}``) to ``result_path``."""
    from ._interface import resolve_workload
    from ._wire import write_json_atomic

    factory = resolve_workload(workload)
    try:
        declared = getattr(factory, ATTRIBUTE, None)
    except Exception as error:  # noqa: BLE001 - its own code (a property that raises): said as such
        write_json_atomic(result_path, {"import_failed": f"reading {ATTRIBUTE} raised {type(error).__name__}: {error}"})
        return
    try:
        found = _checked(workload, declared or {})
    except ValueError as error:
        write_json_atomic(result_path, {"malformed": str(error)})
        return
    write_json_atomic(result_path, {"declared": found})


def _checked(workload: str, declared) -> dict:
    if not isinstance(declared, Mapping):
        raise ValueError(f"workload {workload!r}: {ATTRIBUTE} must be a dict of condition names to values, got "
                         f"{type(declared).__name__}")
    found = {}
    for key, value in declared.items():
        plain = isinstance(value, _PLAIN) or (isinstance(value, (list, tuple)) and
                                              all(isinstance(item, _PLAIN) for item in value))
        if not isinstance(key, str) or not key or not plain:
            raise ValueError(f"workload {workload!r}: {ATTRIBUTE} must map condition names to strings, numbers, "
                             f"booleans or lists of them; got {key!r}: {value!r}")
        found[key] = list(value) if isinstance(value, tuple) else value
    return found


def main(argv: list[str]) -> int:
    """Print the declaration as JSON; exit :data:`_UNREADABLE` where the module or factory is not there,
    1 (with the reason) where the declaration is malformed or the module fails on import."""
    workload = argv[0]
    module_name, function_name = workload_target(workload)
    with contextlib.redirect_stdout(sys.stderr):  # a module that prints on import: its words go to stderr
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # the module itself (or a package above it) is not there; a module it imports is its own failure
            if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
                return _UNREADABLE
            print(f"{type(error).__name__}: {error}", file=sys.stderr)
            return _IMPORT_FAILED
        except BaseException as error:  # noqa: BLE001 - anything its import does (sys.exit too) is its own
            print(f"importing {module_name} raised {type(error).__name__}: {error}", file=sys.stderr)
            return _IMPORT_FAILED
        factory = getattr(module, function_name, None)
        if not callable(factory):
            return _UNREADABLE
        declared = getattr(factory, ATTRIBUTE, None)
        try:
            found = {} if declared is None else _checked(workload, declared)
        except ValueError as error:
            print(str(error), file=sys.stderr)
            return _MALFORMED
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
