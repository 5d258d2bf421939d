"""Nothing lost: the journal keeps attempts through a server outage; sync and reap mend the store."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import TAG, AttemptDeferred, parse_duration, reap, sync

from conftest import free_port, start_mlflow_server, stop_server
from helpers import CANDIDATE, CONDITIONS


@pytest.mark.slow
@pytest.mark.server
def test_server_killed_mid_series_then_sync_loses_nothing(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "journal.jsonl"))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    process, url = start_mlflow_server(tmp_path / "srv", port)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    series = [("baseline", CONDITIONS, 100 + i) for i in range(5)] + [("candidate", CANDIDATE, 88 + i) for i in range(5)]
    logged, deferred = [], []
    try:
        for index, (arm, conditions, latency) in enumerate(series):
            if index == 4:
                stop_server(process)  # the server dies in the middle of the series
            try:
                logged.append(pg.log_attempt("outage", arm, conditions, latency_ms=latency, quality=0.9,
                                             experiment_name="outage"))
            except AttemptDeferred as exc:
                assert "mlflow-perfgate sync" in str(exc)
                deferred.append(exc.attempt_id)
        assert len(logged) == 4 and len(deferred) == 6
        with pytest.raises(Exception):
            pg.evaluate_group("outage", experiment_name="outage")
        process, url = start_mlflow_server(tmp_path / "srv", port)  # same store, same port
        assert sync() == {"pending_before": 6, "sent": 6, "already_present": 0}
        assert sync() == {"pending_before": 0, "sent": 0, "already_present": 0}  # idempotent
        result = pg.evaluate_group("outage", experiment_name="outage")
        assert len(result["run_ids"]) == 10 and result["duplicate_run_ids"] == []
        assert result["baseline"]["attempted_runs"] == 5 and result["candidate"]["attempted_runs"] == 5
        assert result["decision"] == "accept"
        attempt_ids = [a["attempt_id"] for a in result["attempts"]]
        assert len(set(attempt_ids)) == 10 and set(deferred) <= set(attempt_ids)
    finally:
        stop_server(process)


def test_unsynced_journal_entries_block_a_verdict(sqlite_uri, tmp_path, monkeypatch):
    import json

    from helpers import log_series

    journal = tmp_path / "journal.jsonl"
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(journal))
    log_series("jr")
    client = MlflowClient()
    journal.write_text(json.dumps({"type": "attempt", "attempt_id": "lost-1", "group": "jr",
                                   "tracking_uri": client.tracking_uri}) + "\n" + "{torn line")
    result = pg.evaluate_group("jr")
    assert (result["decision"], result["reason"]) == ("rerun", "attempts_not_synced")
    assert "mlflow-perfgate sync" in result["warnings"][0]


def test_journal_always_mode_on_a_local_store(sqlite_uri, tmp_path, monkeypatch):
    from mlflow_perfgate.tracking import _journal

    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "j.jsonl"))
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL_MODE", "always")
    run_id = pg.log_attempt("j", "baseline", CONDITIONS, latency_ms=1, quality=1)
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert len(lines) == 2 and run_id in lines[1]
    assert _journal.pending() == []


def test_reap_marks_stale_attempts_killed(sqlite_uri, capsys):
    client = MlflowClient()
    old = client.create_run("0", start_time=int((time.time() - 7200) * 1000),
                            tags={TAG.KIND: "attempt", TAG.GROUP: "r", TAG.ARM: "baseline"})
    young = client.create_run("0", tags={TAG.KIND: "attempt", TAG.GROUP: "r", TAG.ARM: "baseline"})
    other = client.create_run("0", start_time=int((time.time() - 7200) * 1000), tags={"x": "not ours"})
    assert reap(parse_duration("1h")) == [old.info.run_id]
    run = client.get_run(old.info.run_id)
    assert run.info.status == "KILLED" and run.data.tags[TAG.FAILURE].startswith("reaped: RUNNING")
    assert client.get_run(young.info.run_id).info.status == "RUNNING"
    assert client.get_run(other.info.run_id).info.status == "RUNNING"
    # the evaluator counts it as failed with the reaper's reason
    pg.log_attempt("r", "candidate", CANDIDATE, latency_ms=1, quality=1)
    assert reap(1.0, group="r") == []
    with pytest.raises(SystemExit) as exit_info:
        main(["reap", "--older-than", "soon"])
    assert exit_info.value.code == 2 and "duration" in capsys.readouterr().err


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds
