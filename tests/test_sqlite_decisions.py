"""The ``decisions`` fast path: a local SQLite store read directly gives MLflow's rows, exactly."""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.tracking._decision_frame import frame_of
from mlflow_perfgate.tracking._queries import mlflow_decision_records
from mlflow_perfgate.tracking._sqlite_decisions import decision_records, default_uri, sqlite_path

from helpers import log_series


def _both(**query):
    fast = decision_records(mlflow.get_tracking_uri(), **query)
    assert fast is not None, "the SQLite reader declined a store it should read"
    slow = mlflow_decision_records(query.get("experiment_name"), query.get("group"), query.get("suite"))
    return frame_of(fast, query.get("group"), query.get("suite")), frame_of(slow, query.get("group"),
                                                                           query.get("suite"))


def _decided_store():
    log_series("g-a")
    log_series("g-b", (100, 101), (80, 81))
    log_series("g-c", (100, 101, 102, 103, 104), (120, 121, 122, 123, 124))
    decided = [pg.evaluate_group(group) for group in ("g-a", "g-b", "g-c")]
    client = MlflowClient()
    # a second decision of g-a (a re-evaluation), one deleted, a suite's, and a NaN figure
    again = pg.evaluate_group("g-a", min_improvement=0.5)
    client.delete_run(decided[1]["decision_run_id"])
    client.set_tag(decided[2]["decision_run_id"], TAG.SUITE, "nightly")
    client.log_metric(again["decision_run_id"], "observed_improvement", float("nan"))
    return decided, again


def test_the_sqlite_reader_gives_mlflow_s_rows(sqlite_uri):
    decided, again = _decided_store()
    for query in ({}, {"group": "g-a"}, {"group": "g-b"}, {"suite": "nightly"}, {"group": "g-c", "suite": "nightly"},
                  {"group": "nothing"}):
        fast, slow = _both(**query)
        pd.testing.assert_frame_equal(fast, slow)
    fast, _ = _both()
    assert decided[1]["decision_run_id"] not in set(fast["run_id"])  # deleted: not listed
    assert len(fast) == 3 and fast.iloc[0]["run_id"] == again["decision_run_id"]  # newest first
    assert pd.isna(fast.iloc[0]["observed_improvement"])
    assert list(pg.decisions(suite="nightly")["group"]) == ["g-c"]


def test_a_named_experiment_and_the_environment_s(sqlite_uri, monkeypatch):
    log_series("g-x", experiment_name="perf")
    pg.evaluate_group("g-x", experiment_name="perf")
    fast, slow = _both(experiment_name="perf")
    pd.testing.assert_frame_equal(fast, slow)
    assert list(fast["group"]) == ["g-x"]
    assert _both()[0].empty  # the Default experiment holds none
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "perf")
    assert list(_both()[0]["group"]) == ["g-x"]
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", fast.iloc[0]["experiment_id"])
    assert list(_both()[0]["group"]) == ["g-x"]


def test_the_reader_declines_what_mlflow_must_answer(sqlite_uri, tmp_path):
    uri = mlflow.get_tracking_uri()
    assert decision_records(uri, experiment_name="missing") is None  # MLflow says it does not exist
    client = MlflowClient()
    client.delete_experiment(client.create_experiment("gone"))
    assert decision_records(uri, experiment_name="gone") is None  # deleted: MLflow's words
    with pytest.raises(ValueError, match="does not exist|deleted"):
        pg.decisions(experiment_name="missing")
    assert decision_records("http://127.0.0.1:5000") is None
    assert decision_records(f"sqlite:///{tmp_path}/absent.db") is None
    not_a_store = tmp_path / "plain.db"
    not_a_store.write_text("not a database")
    assert decision_records(f"sqlite:///{not_a_store}") is None
    assert sqlite_path("sqlite://") is None  # in memory


def test_the_default_uri_is_mlflow_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    found = subprocess.run([sys.executable, "-c", "import mlflow; print(mlflow.get_tracking_uri())"],
                           capture_output=True, text=True, cwd=tmp_path, check=True,
                           env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}).stdout.strip()
    assert sqlite_path(found) is None  # no file yet
    assert os.path.abspath(found.split("sqlite:///", 1)[1]) == os.path.abspath(
        default_uri().split("sqlite:///", 1)[1])
    (tmp_path / "mlruns").mkdir()
    assert default_uri() is None  # MLflow may choose a file store: its client decides


def test_the_cli_lists_decisions_without_importing_mlflow(sqlite_uri):
    log_series("g-cli")
    result = pg.evaluate_group("g-cli")
    # cli.main, not the console script's entry: that one ends the process itself (cli.entry)
    code = ("import sys\nimport mlflow_perfgate.__main__\nfrom mlflow_perfgate.cli import main\n"
            "try:\n    main(['decisions', '--format', 'csv'])\n"
            "except SystemExit:\n    pass\n"
            "print('MLFLOW-IMPORTED' if 'mlflow' in sys.modules else 'NO-MLFLOW')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert result["decision_run_id"] in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "NO-MLFLOW"
