"""Tracking costs on a SQLite store, as ratios measured in one run.

1. Logging one attempt: ``log_attempt`` (create with tags, one ``log_batch``, terminate)
   against the naive fluent API (``start_run``, ``log_params``, one ``log_metric`` per metric,
   ``set_tags``, ``end_run``). Target: at most 0.75.
2. ``evaluate_group`` against one raw ``MlflowClient.search_runs`` of the same group, in
   experiments of 200, 2,000 and 10,000 runs. Targets: the search-and-rules part at most 1.2
   times the raw search; the whole evaluate at 10,000 runs at most twice its cost at 200.

The experiments are filled with attempts of other groups written straight into MLflow's own
tables (the schema MLflow's SQL store uses), so that building 10,000 runs takes seconds; the
judged group itself is logged through ``log_attempt``.

Usage: python benchmarks/bench_tracking.py [--sizes 200,2000,10000] [--attempts 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

import mlflow  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

import mlflow_perfgate as pg  # noqa: E402
from mlflow_perfgate.tracking import _client, _group, _judge  # noqa: E402
from mlflow_perfgate.tracking._schema import TAG, canonical_conditions, group_key  # noqa: E402

CONDITIONS = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
              "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False}


def timed(call, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_logging(root: Path, count: int) -> tuple[float, float]:
    uri = f"sqlite:///{root}/log.sqlite"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    experiment = "logging"
    MlflowClient().create_experiment(experiment)
    mlflow.set_experiment(experiment)
    ours, naive = [], []
    for index in range(count):  # interleaved, so drift hits both alike
        start = time.perf_counter()
        pg.log_attempt("bench", "baseline", CONDITIONS, latency_ms=100 + index, quality=0.9,
                       experiment_name=experiment, metrics={"peak_mem_mib": 12.0})
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        mlflow.start_run()
        mlflow.log_params(canonical_conditions(CONDITIONS))
        mlflow.log_metric("latency_ms", 100 + index)
        mlflow.log_metric("quality", 0.9)
        mlflow.log_metric("peak_mem_mib", 12.0)
        mlflow.set_tags({TAG.KIND: "attempt", TAG.GROUP: "naive", TAG.ARM: "baseline", TAG.OK: "true"})
        mlflow.end_run()
        naive.append(time.perf_counter() - start)
    return statistics.median(ours), statistics.median(naive)


def fill(uri: str, experiment_id: str, runs: int) -> None:
    """Insert ``runs`` finished attempts of other groups (20 a group) into MLflow's tables."""
    import sqlalchemy
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag

    engine = sqlalchemy.create_engine(uri)
    params = canonical_conditions(CONDITIONS)
    now = int(time.time() * 1000)
    rows = {SqlRun: [], SqlTag: [], SqlParam: [], SqlMetric: [], SqlLatestMetric: []}
    for index in range(runs):
        run_id = uuid.uuid4().hex
        group = f"other-{index // 20}"
        rows[SqlRun].append(dict(run_uuid=run_id, name=f"filler-{index}", source_type="LOCAL", source_name="",
                                 entry_point_name="", user_id="bench", status="FINISHED", start_time=now - index,
                                 end_time=now - index, source_version="", lifecycle_stage="active",
                                 artifact_uri=f"/tmp/none/{run_id}", experiment_id=int(experiment_id)))
        tags = {TAG.KIND: "attempt", TAG.GROUP: group, TAG.GROUP_KEY: group_key(group),
                TAG.ARM: ("baseline", "candidate")[index % 2], TAG.OK: "true", TAG.ATTEMPT_ID: run_id}
        rows[SqlTag] += [dict(key=k, value=v, run_uuid=run_id) for k, v in tags.items()]
        rows[SqlParam] += [dict(key=k, value=v, run_uuid=run_id) for k, v in params.items()]
        for key, value in (("latency_ms", 100.0 + index % 7), ("quality", 0.9)):
            metric = dict(key=key, value=value, timestamp=now, step=0, is_nan=False, run_uuid=run_id)
            rows[SqlMetric].append(metric)
            rows[SqlLatestMetric].append(metric)
    with engine.begin() as connection:
        for model, values in rows.items():
            if values:
                connection.execute(model.__table__.insert(), values)
    engine.dispose()


def bench_evaluate(root: Path, size: int, attempts: int, repeats: int) -> dict:
    uri = f"sqlite:///{root}/eval-{size}.sqlite"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    experiment_id = client.create_experiment(f"size-{size}")
    fill(uri, experiment_id, size - attempts)
    group = "judged"
    for index in range(attempts):
        arm = ("baseline", "candidate")[index % 2]
        pg.log_attempt(group, arm, {**CONDITIONS, "checkpoint": arm == "candidate"},
                       latency_ms=100 - 10 * (arm == "candidate") + index % 3, quality=0.9,
                       experiment_name=f"size-{size}")
    filter_string = f"tags.\"{TAG.GROUP}\" = '{group}'"
    raw = timed(lambda: client.search_runs([experiment_id], filter_string=filter_string, max_results=1000), repeats)

    policy = pg.Policy(min_valid_runs=attempts // 2)

    def search_and_rules():
        views, _ = _group.load_group(group, experiment_id, _client.client(), stale_after_s=3600)
        _judge.judge_views(views, policy, "fail")

    ours = timed(search_and_rules, repeats)
    whole = timed(lambda: pg.evaluate_group(group, experiment_name=f"size-{size}",
                                            min_valid_runs=attempts // 2), max(3, repeats // 2))
    found = len(client.search_runs([experiment_id], max_results=50000))
    return {"size": found, "raw_search_s": raw, "search_and_rules_s": ours, "evaluate_s": whole}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,2000,10000")
    parser.add_argument("--attempts", type=int, default=20, help="attempts in the judged group")
    parser.add_argument("--log-count", type=int, default=60, help="attempts logged each way")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chdir(root)  # artifacts of the sqlite store land here
        ours, naive = bench_logging(root, args.log_count)
        print(f"logging one attempt: log_attempt {ours * 1000:.1f} ms, naive fluent API {naive * 1000:.1f} ms, "
              f"ratio {ours / naive:.2f} (target <= 0.75)")
        rows = [bench_evaluate(root, int(size), args.attempts, args.repeats) for size in args.sizes.split(",")]
    print()
    print(f"{'runs':>7} {'raw search':>11} {'search+rules':>13} {'ratio':>6} {'evaluate':>9}")
    for row in rows:
        print(f"{row['size']:>7} {row['raw_search_s'] * 1000:>9.1f}ms {row['search_and_rules_s'] * 1000:>11.1f}ms "
              f"{row['search_and_rules_s'] / row['raw_search_s']:>6.2f} {row['evaluate_s'] * 1000:>7.0f}ms")
    worst = max(row["search_and_rules_s"] / row["raw_search_s"] for row in rows)
    print(f"\nsearch-and-rules / raw search, worst: {worst:.2f} (target <= 1.2)")
    print(f"evaluate at {rows[-1]['size']} runs / at {rows[0]['size']} runs: "
          f"{rows[-1]['evaluate_s'] / rows[0]['evaluate_s']:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
