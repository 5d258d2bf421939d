"""Several processes logging attempts of one group at once lose nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg

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
