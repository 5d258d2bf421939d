"""How long ``mlflow-perfgate decisions`` takes on a store of 1,000 decisions (issue 26: at most 1.5 s).

The store is a temporary SQLite file. One decision is real: a small comparison of TinyLM
(unsupervised, tiny steps) judged by ``evaluate_group``. The other decisions are copies of its
decision run, each under a group of its own, with the same tags, params and metrics (a decision
run holds about 40 metrics and 40 tags): what the query reads is what a store of real decisions
holds. The attempts are not copied (the query reads decision runs only, by tag). Printed: the
median wall time over ``--repeats`` fresh processes of the real entry point, for the table and
for ``--format json``, beside the target, and the number of rows each printed.

Usage: ``python benchmarks/bench_decisions_query.py [--decisions 1000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 1.5
#: The queries timed: label, arguments of ``mlflow-perfgate``.
QUERIES = {"decisions": ["decisions"], "decisions --format json": ["decisions", "--format", "json"]}


def build_store(uri: str, count: int) -> None:
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from mlflow_perfgate import harness
    from mlflow_perfgate.tracking import TAG

    result = harness.compare("tinylm", {"input_shape": [2, 16], "steps": 3, "warmup": 1}, {"checkpoint": True},
                             attempts=3, min_valid_runs=3, supervised=False, progress=False,
                             allow_undecidable=True)
    client = MlflowClient(uri)
    source = client.get_run(result["decision_run_id"])
    tags = {k: v for k, v in source.data.tags.items() if not k.startswith("mlflow.")}
    params = [Param(k, v) for k, v in source.data.params.items()]
    started = time.perf_counter()
    for index in range(count - 1):
        group = f"copy-{index:04d}"
        run = client.create_run(source.info.experiment_id, tags={**tags, TAG.GROUP: group},
                                run_name=f"decision {group}")
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in source.data.metrics.items()]
        client.log_batch(run.info.run_id, metrics=metrics, params=params,
                         tags=[RunTag("mlflow.runName", f"decision {group}")])
        client.set_terminated(run.info.run_id)
        if (index + 1) % 200 == 0:
            print(f"  {index + 2} decisions written ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(f"store: {count} decision runs ({len(source.data.metrics)} metrics, {len(tags)} tags, "
          f"{len(params)} params each)")


def time_query(uri: str, argv: list[str], repeats: int) -> tuple[float, int]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    walls, lines = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mlflow_perfgate", *argv], capture_output=True, text=True,
                              env=env, timeout=300)
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr[-2000:]}")
        lines = len(done.stdout.splitlines())
    return statistics.median(walls), lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        build_store(uri, args.decisions)
        print(f"{'query':>24} {'median s':>9} {'lines':>6}  target")
        for label, argv in QUERIES.items():
            wall, lines = time_query(uri, argv, args.repeats)
            verdict = "ok" if wall <= TARGET_S else "MISS"
            print(f"{label:>24} {wall:>9.2f} {lines:>6}  <= {TARGET_S} s: {verdict}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
