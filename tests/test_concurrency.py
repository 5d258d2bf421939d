"""Several processes logging attempts of one group at once lose nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg

from helpers import AT_BARRIER, start_racers

WRITER = Path(__file__).with_name("writer.py")


@pytest.mark.slow
def test_eight_concurrent_writers_lose_nothing(tracking_uri):
    experiment = os.environ.pop("MLFLOW_EXPERIMENT_NAME")  # the workers race to create it
    workers, per_worker = 8, 3
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    processes = [subprocess.Popen([sys.executable, str(WRITER), "conc", experiment, str(w), str(per_worker)],
                                  env=env, stderr=subprocess.PIPE, text=True) for w in range(workers)]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    client = MlflowClient()
    default_runs = client.search_runs(["0"], filter_string="tags.\"perfgate.group\" = 'conc'")
    assert default_runs == []  # no racer fell back to the Default experiment
    result = pg.evaluate_group("conc", experiment_name=experiment, min_valid_runs=3)
    assert len(result["run_ids"]) == workers * per_worker
    ids = {a["attempt_id"] for a in result["attempts"]}
    assert ids == {f"w{w}-{i}" for w in range(workers) for i in range(per_worker)}
    assert result["baseline"]["attempted_runs"] + result["candidate"]["attempted_runs"] == 24
    assert result["duplicate_run_ids"] == []


_TAGGER = """
import sys
from mlflow.tracking import MlflowClient
from mlflow_perfgate.tracking import _client
client = MlflowClient()
""" + AT_BARRIER + """
run_id, who = sys.argv[1], sys.argv[2]
for i in range(60):
    _client.retrying(lambda: client.set_tag(run_id, f"t{i}", who))
"""


@pytest.mark.slow
def test_writers_setting_the_same_new_tags_at_once_all_succeed(tracking_uri, tmp_path):
    # MLflow's SQL store writes a tag by reading, then inserting: two writers of one new tag can
    # both insert, and the loser's insert violates the table's unique key. Seen in CI-like load
    # as a racing suite evaluation exiting 2 while nesting the entries (mlflow.parentRunId).
    from conftest import REPO

    client = MlflowClient()
    experiment = client.create_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
    run_id = client.create_run(experiment).info.run_id
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = start_racers(_TAGGER, [[run_id, str(w)] for w in range(6)], tmp_path / "barrier", env=env,
                             stderr=subprocess.PIPE, text=True)
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    tags = client.get_run(run_id).data.tags
    assert all(tags.get(f"t{i}") in {str(w) for w in range(6)} for i in range(60))


_FIRST_USE = AT_BARRIER + (
    "from mlflow_perfgate.tracking._client import client, resolve_experiment\n"
    "c = client()\n"
    "experiment = resolve_experiment(c, 'race', create=True)\n"
    "c.set_terminated(c.create_run(experiment).info.run_id)\n"
)


def test_processes_opening_one_fresh_sqlite_store_at_once_all_succeed(tmp_path):
    # MLflow creates and migrates a SQLite store's tables in the first process that opens it; four
    # at once (pytest -n 4, two CI jobs on one file) raced in the migrations and all but one died
    # ("table ... already exists", "Online migration expected to match one row").
    from conftest import REPO

    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": uri}
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    processes = start_racers(_FIRST_USE, [[] for _ in range(4)], tmp_path / "barrier", env=env,
                             stderr=subprocess.PIPE, text=True)
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("race")
    assert len(client.search_runs([experiment.experiment_id])) == 4
