"""Nothing lost: the journal keeps attempts through a server outage; sync and reap mend the store."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import TAG, parse_duration, reap, sync

from configs import SPEC
from conftest import free_port, start_mlflow_server, stop_server
from helpers import CANDIDATE, CONDITIONS


@pytest.mark.slow
@pytest.mark.server
def test_server_killed_in_the_middle_of_a_comparison_then_sync_loses_nothing(tmp_path, monkeypatch):
    from mlflow_perfgate.harness import compare

    port = free_port()
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "journal.jsonl"))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = {"process": start_mlflow_server(tmp_path / "srv", port)[0]}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    seen = []

    def kill_after_two(arm, result):
        seen.append(arm)
        if len(seen) == 2:
            stop_server(server["process"])  # the server dies in the middle of the comparison

    try:
        with pytest.raises(Exception):  # the final evaluate cannot reach the server
            compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 2}, {"checkpoint": True}, attempts=3,
                    group="outage", experiment_name="outage", supervised=False, progress=False,
                    on_attempt=kill_after_two, min_valid_runs=3, env_mismatch="warn", **SPEC)
        assert len(seen) == 6  # the series went on without the server
        server["process"] = start_mlflow_server(tmp_path / "srv", port)[0]  # same store, same port
        assert sync() == {"pending_before": 4, "sent": 4, "already_present": 0}
        assert sync() == {"pending_before": 0, "sent": 0, "already_present": 0}  # idempotent
        result = pg.evaluate_group("outage", experiment_name="outage", min_valid_runs=3, env_mismatch="warn")
        assert len(result["run_ids"]) == 6 and result["duplicate_run_ids"] == []
        assert result["baseline"]["attempted_runs"] == 3 and result["candidate"]["attempted_runs"] == 3
        assert len({a["attempt_id"] for a in result["attempts"]}) == 6
        # synced attempts nest under the comparison, which now holds the decision
        assert result["decision_run_id"] == MlflowClient().get_run(result["run_ids"][-1]).data.tags[TAG.PARENT]
    finally:
        stop_server(server["process"])


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
