"""A new SQLite store's tables are made on a side file during compare's start-up (issue 26), and
put in place only once the workload is found good: a refused comparison still creates nothing,
and a store that appears meanwhile (a twin's) is never replaced. Real SQLite stores, real MLflow."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.errors import InputError
from mlflow_perfgate.harness import compare
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.tracking._prepare import PreparedStore, prepare_new_store

HOSTILE = "tests.workloads_fixtures.hostile:raiser"
FIXED = {"model": "Hostile", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
         "measurement_method": "wall_ms", "warmup": 0, "steps": 2, "fail_at": 1000}
QUICK = dict(attempts=2, supervised=False, progress=False, min_valid_runs=2, allow_undecidable=True)


def test_nothing_is_prepared_where_there_is_nothing_to_make(tmp_path):
    existing = tmp_path / "there.db"
    existing.write_bytes(b"")
    for uri in (f"sqlite:///{existing}", "http://127.0.0.1:5000", "sqlite://", "sqlite:///:memory:",
                f"sqlite:///{tmp_path}/no/such/folder/m.db", f"{tmp_path}/mlruns", None,
                f"sqlite:///{tmp_path}/m.db?timeout=5"):
        assert prepare_new_store(uri) is None, uri
    assert list(tmp_path.iterdir()) == [existing]


def test_a_compare_on_a_new_store_makes_it_and_leaves_no_side_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")
    result = compare(HOSTILE, FIXED, {"fail_at": 999}, group="new", **QUICK)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "mlruns") == ["m.db"]
    runs = MlflowClient().search_runs(["0"])
    assert result["comparison_run_id"] in {r.info.run_id for r in runs}
    assert sum(r.data.tags.get(TAG.KIND) == "attempt" for r in runs) == 4
    # the default experiment's artifacts go where MLflow would have put them
    assert MlflowClient().get_experiment("0").artifact_location == str(tmp_path / "mlruns" / "0")


def test_a_refused_workload_still_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(InputError, match="no callable 'no_such_factory'.*nothing was run or logged"):
        compare("tests.workloads_fixtures.hostile:no_such_factory", FIXED, {"fail_at": 999}, **QUICK)
    assert list(tmp_path.iterdir()) == []  # no store, no side file


def test_a_store_made_meanwhile_is_never_replaced(tmp_path):
    target = tmp_path / "m.db"
    prepared = PreparedStore(str(target))
    # a twin, another process, makes the store first
    code = ("import sys; from mlflow.tracking import MlflowClient\n"
            "print(MlflowClient(tracking_uri=sys.argv[1]).create_experiment(\"twin's\"))")
    done = subprocess.run([sys.executable, "-c", code, f"sqlite:///{target}"], capture_output=True, text=True,
                          timeout=120, check=True)
    twin = done.stdout.strip().splitlines()[-1]
    client = MlflowClient(tracking_uri=f"sqlite:///{target}")
    assert prepared.commit() is False
    assert client.get_experiment(twin).name == "twin's"  # theirs stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]
    discarded = PreparedStore(str(tmp_path / "other.db"))
    discarded.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]
    made = PreparedStore(str(tmp_path / "made.db"))
    assert made.commit() is True and os.path.getsize(tmp_path / "made.db") > 0
    assert [e.name for e in MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/made.db").search_experiments()] == [
        "Default"]


def test_a_pipeline_on_a_new_store_makes_it_once_its_workload_is_found_good(tmp_path, monkeypatch):
    from mlflow_perfgate.harness import pipeline

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(InputError, match="no callable 'no_such_factory'"):
        pipeline("tests.workloads_fixtures.hostile:no_such_factory", FIXED, attempts=2, supervised=False,
                 progress=False)
    assert list(tmp_path.iterdir()) == []  # refused: no store, no side file
    conditions = {"input_shape": "2,16", "steps": 2, "warmup": 1}
    out = pipeline("tinylm", conditions, attempts=2, steps=2, supervised=False, progress=False, min_valid_runs=2,
                   fallback_change={"checkpoint": True}, allow_undecidable=True)
    assert out["decision"] is not None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "mlruns") == ["m.db"]


def _dump(path) -> list[str]:
    """A store's schema and rows, in an order of their own: MLflow's migrations declare a table's
    constraints in an order that changes between interpreters (a set's), so each statement's lines
    are sorted too; the Default experiment's times are its creation's, everything else must be the same."""
    import sqlite3

    with sqlite3.connect(path) as connection:
        lines = sorted(connection.iterdump())
    lines = [re.sub(r",\d{13},\d{13},", ",<time>,<time>,", line) if "INTO \"experiments\"" in line else line
             for line in lines]
    return ["\n".join(sorted(part.strip().rstrip(",") for part in line.split("\n"))) for line in lines]


def test_a_store_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    from mlflow_perfgate.tracking import _prepare

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir()
    second_dir.mkdir()
    monkeypatch.chdir(first_dir)
    first = prepare_new_store(f"sqlite:///{first_dir}/m.db")
    assert first.commit() and os.path.isfile(_prepare._template_path())  # MLflow made it, and it was kept
    monkeypatch.chdir(second_dir)
    second = prepare_new_store(f"sqlite:///{second_dir}/m.db")
    assert second.commit() and second.error is None
    store = _get_sqlalchemy_store(f"sqlite:///{tmp_path}/mlflow-made.db", None)  # MLflow's own, here
    store.engine.dispose()
    assert _dump(second_dir / "m.db") == _dump(tmp_path / "mlflow-made.db")
    # and it is a store MLflow uses: its Default experiment where MLflow would put it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{second_dir}/m.db")
    default = MlflowClient().get_experiment("0")
    assert default.artifact_location == str(second_dir / "mlruns" / "0")
    assert MlflowClient().create_run("0").info.run_id


def test_a_torn_template_is_dropped_and_mlflow_makes_the_store(tmp_path, monkeypatch):
    from mlflow_perfgate.tracking import _prepare

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    template = _prepare._template_path()
    os.makedirs(os.path.dirname(template))
    with open(template, "wb") as handle:
        handle.write(b"SQLite format 3\x00 torn")
    prepared = prepare_new_store(f"sqlite:///{tmp_path}/m.db")
    assert prepared.commit() and prepared.error is None
    assert MlflowClient(f"sqlite:///{tmp_path}/m.db").get_experiment("0").name == "Default"
    with open(template, "rb") as handle:
        assert handle.read(100) != b"SQLite format 3\x00 torn"  # replaced by a good one
    monkeypatch.setenv("MLFLOW_PERFGATE_STORE_TEMPLATE", "off")
    assert _prepare._template_path() is None
