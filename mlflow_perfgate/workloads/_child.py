"""Child process of a spawned attempt: ``python -m mlflow_perfgate.workloads._child SPEC RESULT``.

Reads the attempt spec (versioned JSON, ``_wire``) from ``SPEC``, runs the attempt in this
process and writes the :class:`AttemptResult` to ``RESULT``: first to a temporary name, then
renamed, so the parent never reads half a file. A crash before the rename leaves no result, and
the parent reports the exit code or signal instead. The fork runner's children run
:func:`run_spec` too, forked from the attempt server instead of started here.
"""

from __future__ import annotations

import faulthandler
import os
import sys

from ._attempt import execute_in_process, write_result
from ._interleave import INTERLEAVED, run_interleaved_spec
from ._wire import read_json

__all__ = ["exit_now", "main", "run_spec"]


def run_spec(spec: dict, result_path: str) -> int:
    """Run the attempt ``spec`` here, write its result to ``result_path``; return the exit code.

    A spec of kind ``interleaved`` is a step-interleaved pair of attempts (``_interleave``).
    """
    if spec.get("kind") == INTERLEAVED:
        return run_interleaved_spec(spec, result_path)
    result = execute_in_process(
        spec["workload"], spec["conditions"], warmup=spec["warmup"], steps=spec["steps"],
        threads=spec["threads"], probe=spec["probe"], timeout_s=None,
    )
    write_result(result_path, result)
    return 0


def exit_now(code: int) -> None:
    """End the child as soon as its result is written: flush what it printed, then ``os._exit``.

    Skipping interpreter shutdown means a thread the workload left running cannot hold the
    child (and the attempt) to its timeout after the result is already written; the parent
    SIGKILLs the child's process group afterwards, so nothing it started outlives the attempt.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not change the exit code
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the attempt described by ``argv = [SPEC, RESULT]``; return the exit code."""
    # A segfault then leaves a Python traceback in the log the parent keeps.
    faulthandler.enable()
    spec_path, result_path = argv if argv is not None else sys.argv[1:]
    spec = read_json(spec_path, "the attempt spec")["spec"]
    return run_spec(spec, result_path)


if __name__ == "__main__":
    exit_now(main())
