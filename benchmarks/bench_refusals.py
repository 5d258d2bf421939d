"""How long a newcomer waits for the one line that says what they got wrong (issue 28, point 3).

Each mistake is made as a user makes it: the real ``mlflow-perfgate`` entry point in a fresh
process (its imports included), in a fresh temporary folder with its own SQLite URI, the
machine otherwise as it is. Printed per mistake: the median wall time over ``--repeats`` runs
against the 2 s target, the exit code, the line it printed, and whether anything was left in
the folder (a refusal before anything runs creates no store).

The mistakes:

1. ``typo``: a misspelt key in ``--change`` on the built-in workload (``chekpoint=true``):
   refused before anything runs (the changed variable must be declared in the baseline, with
   ``did you mean``);
2. ``module``: a workload module that is not on the path (``mymod:factory``);
3. ``uri``: a misspelt store scheme (``sqllite:///mlflow.db``), and a server that cannot be
   reached (``http://127.0.0.1:9``);
4. ``unread`` (not one of the three, measured beside them): a key declared and changed
   consistently but never read by the factory (``--set chekpoint=false --change
   chekpoint=true``): refused after the first attempt of each arm, so its time includes the
   attempt runner's start and two attempts;
5. ``help``, ``help-program``, ``usage``: ``compare --help``, ``mlflow-perfgate --help`` and a usage
   error (issue 26: 0.5 s each).

Usage: ``python benchmarks/bench_refusals.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 2.0
TINY = ["--set=input_shape=2,16", "--set=steps=2", "--set=warmup=1"]
FIXED = ["--set=model=m", "--set=input_shape=4,8", "--set=batch_size=4", "--set=dtype=fp32", "--set=device=cpu",
         "--set=measurement_method=wall", "--set=checkpoint=false"]
MISTAKES = {
    "typo": (["compare", "--workload", "tinylm", *TINY, "--change", "chekpoint=true"], None),
    "module": (["compare", "--workload", "mymod:factory", *FIXED, "--change", "checkpoint=true"], None),
    "uri-scheme": (["evaluate", "--group", "g"], "sqllite:///mlflow.db"),
    "uri-unreachable": (["evaluate", "--group", "g"], "http://127.0.0.1:9"),
    "unread": (["compare", "--workload", "tinylm", *TINY, "--set=chekpoint=false", "--change", "chekpoint=true",
                "--attempts", "2", "--min-valid-runs", "2", "--allow-undecidable", "--no-progress"], None),
    # issue 26's: --help (the command's and the program's) and a usage error (target 0.5 s each)
    "help": (["compare", "--help"], None),
    "help-program": (["--help"], None),
    "usage": (["compare", "--attempts", "x"], None),
}
TARGETS_S = {"help": 0.5, "help-program": 0.5, "usage": 0.5}


def run_once(argv: list[str], uri: str | None) -> tuple[float, int, str, list[str]]:
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        env["MLFLOW_TRACKING_URI"] = uri or f"sqlite:///{folder}/m.db"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mlflow_perfgate", *argv], capture_output=True, text=True,
                              cwd=folder, env=env, timeout=300)
        elapsed = time.perf_counter() - start
        lines = [line for line in done.stderr.splitlines() if line and not line.startswith("warning:")]
        return elapsed, done.returncode, lines[-1] if lines else "", sorted(os.listdir(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(MISTAKES))
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(f"{'mistake':<16} {'median s':>8} {'target':>6} {'ratio':>6}  exit  left  line")
    for name in args.only.split(","):
        argv, uri = MISTAKES[name]
        runs = [run_once(argv, uri) for _ in range(args.repeats)]
        median = statistics.median(r[0] for r in runs)
        _, code, line, left = runs[-1]
        target = TARGETS_S.get(name, TARGET_S)
        print(f"{name:<16} {median:8.2f} {target:6.1f} {median / target:6.2f}  {code:>4}  {len(left):>4}  "
              f"{line[:160]}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
