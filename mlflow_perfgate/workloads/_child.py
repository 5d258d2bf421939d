"""Child process of a supervised attempt: ``python -m mlflow_perfgate.workloads._child SPEC RESULT``.

Reads the attempt spec (JSON) from ``SPEC``, runs the attempt in this process and writes the
:class:`AttemptResult` as JSON to ``RESULT``: first to a temporary name, then renamed, so the
parent never reads half a file. A crash before the rename leaves no result, and the parent
reports the exit code or signal instead.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys

from ._attempt import execute_in_process


def main(argv: list[str] | None = None) -> int:
    """Run the attempt described by ``argv = [SPEC, RESULT]``; return the exit code."""
    # A segfault then leaves a Python traceback in the log the parent keeps.
    faulthandler.enable()
    spec_path, result_path = argv if argv is not None else sys.argv[1:]
    with open(spec_path) as handle:
        spec = json.load(handle)
    result = execute_in_process(
        spec["workload"], spec["conditions"], warmup=spec["warmup"], steps=spec["steps"],
        threads=spec["threads"], probe=spec["probe"], timeout_s=None,
    )
    partial = result_path + ".partial"
    with open(partial, "w") as handle:
        json.dump(result.to_dict(), handle)
    os.replace(partial, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
