"""Child process of a spawned attempt: ``python -m mlflow_perfgate.workloads._child SPEC RESULT``.

Started contained (``python -m mlflow_perfgate._contain keep ...``: a parent-death signal and
a subreaper before any import). Reads the spec (versioned JSON, ``_wire``) from ``SPEC``, runs
its task in this process and writes what came of it to ``RESULT``: first to a temporary name,
then renamed, so the parent never reads half a file. A crash before the rename leaves no
result, and the parent reports the exit code or signal instead. The fork runner's children run
:func:`run_spec` too, forked from the attempt server instead of started here.

The spec's ``task`` says what to run: ``attempt`` (the default) an attempt, ``check`` only
whether the workload's name resolves (its module imported here, never in the caller),
``diagnose`` the evidence collection of a diagnosis (``_diagnosis``), ``declare`` the conditions
its factory declares (``_declared``). Whichever it is, the
workload's name is resolved first: a name that does not resolve is written as a refusal
(``_attempt.write_refusal``), which the caller raises as ``ValueError``.
"""

from __future__ import annotations

import faulthandler
import os
import sys

from .._contain import kill_tree
from ._attempt import execute_in_process, failed_before_start, write_refusal, write_result
from ._failures import describe_failure
from ._interface import resolve_workload
from ._interleave import INTERLEAVED, run_interleaved_spec
from ._lockstep import LOCKSTEP, run_lockstep_spec
from ._wire import read_json, write_json_atomic

__all__ = ["exit_now", "main", "run_spec"]


def run_spec(spec: dict, result_path: str) -> int:
    """Run the task of ``spec`` here, write what came of it to ``result_path``; return the exit code.

    A spec of kind ``interleaved`` is a step-interleaved pair of attempts (``_interleave``), one of
    kind ``lockstep`` one arm of a lockstep round (``_lockstep``).
    """
    task = spec.get("task", "attempt")
    try:
        resolve_workload(spec["workload"])
    except ValueError as error:
        write_refusal(result_path, str(error))
        return 0
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the module's own code failed: data
        if task == "check":
            # Not a name that does not resolve: the attempts will fail, each saying why.
            write_json_atomic(result_path, {"checked": spec["workload"], "import_failed": describe_failure(error)})
        elif task == "declare":
            write_json_atomic(result_path, {"import_failed": describe_failure(error)})
        elif task == "diagnose":
            from ._diagnosis import write_diagnosis_failure

            write_diagnosis_failure(result_path, error)
        else:
            write_result(result_path, failed_before_start(spec, error))
        return 0
    if task == "check":
        write_json_atomic(result_path, {"checked": spec["workload"]})
    elif task == "declare":
        from ._declared import write_declaration

        write_declaration(spec["workload"], result_path)
    elif task == "diagnose":
        from ._diagnosis import run_diagnosis_spec

        run_diagnosis_spec(spec, result_path)
    elif spec.get("kind") == INTERLEAVED:
        return run_interleaved_spec(spec, result_path)
    elif spec.get("kind") == LOCKSTEP:
        return run_lockstep_spec(spec, result_path)
    else:
        result = execute_in_process(
            spec["workload"], spec["conditions"], warmup=spec["warmup"], steps=spec["steps"],
            threads=spec["threads"], probe=spec["probe"], timeout_s=None, memory=spec.get("memory", True),
            measures=tuple(spec.get("measures", ())),
        )
        write_result(result_path, result)
    return 0


def exit_now(code: int) -> None:
    """End the child as soon as its result is written: end its descendants, flush, ``os._exit``.

    Skipping interpreter shutdown means a thread the workload left running cannot hold the
    child (and the attempt) to its timeout after the result is already written. The child is a
    subreaper, so every process the workload started, even one in a session of its own whose
    parent already exited, is still below it and is killed here: nothing outlives the attempt.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not change the exit code
            pass
    kill_tree()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the task described by ``argv = [SPEC, RESULT]``; return the exit code."""
    # A segfault then leaves a Python traceback in the log the parent keeps.
    faulthandler.enable()
    spec_path, result_path = argv if argv is not None else sys.argv[1:]
    spec = read_json(spec_path, "the attempt spec")["spec"]
    return run_spec(spec, result_path)


if __name__ == "__main__":
    exit_now(main())
