"""The main job as a user meets it: ``mlflow run . --env-manager local`` leaves a decision in the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.tracking import TAG

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mlflow_run_main_entry_point_leaves_a_decision(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    completed = subprocess.run(
        [sys.executable, "-m", "mlflow", "run", str(REPO), "--env-manager", "local", "--experiment-name", "main-job",
         "-P", "attempts=2", "-P", "steps=2", "-P", "warmup=1", "-P", "input_shape=2,16", "-P", "capacity_mib=1",
         "-P", "min_valid_runs=2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "diagnosis: ready_for_experiment, primary signal memory" in completed.stdout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    frame = pg.decisions(experiment_name="main-job")
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["changed_variable"] == "checkpoint" and row["objective"] == "memory"
    assert row["decision"] in ("accept", "reject", "rerun")
    client = MlflowClient()
    decision = client.get_run(row["run_id"])
    project_run_id = decision.data.tags[TAG.PARENT]  # the comparison nests under the project's run
    assert client.get_run(project_run_id).data.tags.get("mlflow.project.entryPoint") == "main"
    kinds = {r.data.tags.get(TAG.KIND) for r in client.search_runs([decision.info.experiment_id])}
    assert {"diagnosis", "decision", "attempt"} <= kinds
