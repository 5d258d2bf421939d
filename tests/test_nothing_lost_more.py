"""Nothing lost, nothing leaked, nothing meaningless (issue 28): each fault against the real parts.

A real ``mlflow server`` (the session's) behind the fault proxy of ``tests/fault_proxy.py`` loses
answers, resets connections while the server is "restarting", and lets requests through again;
everything else runs against a real SQLite store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import TAG, AttemptDeferred, reap, sync
from mlflow_perfgate.tracking import _client, _journal

from conftest import REPO
from fault_proxy import FaultProxy
from helpers import BASELINE_MS, CANDIDATE, CANDIDATE_MS, CONDITIONS, log_series


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def proxied(mlflow_server, monkeypatch, tmp_path):
    """The session's real server behind a fault proxy; a fresh experiment; the journal on."""
    proxy = FaultProxy(int(mlflow_server.rsplit(":", 1)[1]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.url)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", f"more-{time.time_ns()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "journal.jsonl"))
    try:
        yield proxy
    finally:
        proxy.close()


def _runs(group: str) -> list:
    client = MlflowClient()
    experiment = client.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"])
    ids = [experiment.experiment_id] if experiment else ["0"]
    return [run for run in client.search_runs(ids, max_results=5000) if run.data.tags.get(TAG.GROUP) == group]


def _server_back() -> None:
    _client._DOWN.clear()  # the series' memory of the outage: a new command asks again
    _client._UP.clear()


def _jsonl(path: Path, lines: int) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(lines):
            arm = "baseline" if index % 4 in (0, 3) else "candidate"  # ABBA
            ms = (100.0 if arm == "baseline" else 88.0) + (index % 3) * 0.5
            handle.write(json.dumps({"arm": arm, "set": {"checkpoint": arm == "candidate"}, "latency_ms": ms,
                                     "quality": 0.9}) + "\n")
    return path


_SETS = ("--set", "model=TinyLM", "--set", "input_shape=4,128", "--set", "batch_size=4", "--set", "dtype=fp32",
         "--set", "device=cpu", "--set", "repeats=5", "--set", "measurement_method=wall")


# 1. a server restarted during record --from-jsonl: every line reaches MLflow or the journal ---------

@pytest.mark.server
def test_a_server_restarted_during_record_from_jsonl_loses_no_line(proxied, tmp_path, capsys):
    lines = 40
    source = _jsonl(tmp_path / "attempts.jsonl", lines)
    seen: dict = {}

    def restart_after_some_requests():  # the server goes away once about 10 lines are written
        while proxied.requests < 30:
            time.sleep(0.002)
        seen["connections"] = proxied.connections
        proxied.mode = "reset"

    flipper = threading.Thread(target=restart_after_some_requests, daemon=True)
    flipper.start()
    code, out, err = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "restart", *_SETS)
    flipper.join(5)
    written = out.split()
    waiting = _journal.pending(group="restart")
    assert code == 2 and 0 < len(written) < lines
    assert len(written) + len(waiting) == lines  # no line lost: in MLflow or in the journal
    last = err.strip().splitlines()[-1]
    assert f"{len(waiting)} of {lines} attempts are kept in the journal" in last
    assert f"{len(written)} are in MLflow" in last and "mlflow-perfgate sync" in last
    # once found down, the rest went to the journal without asking the server for each line
    assert proxied.connections - seen["connections"] <= 2
    proxied.mode = "pass"  # the server is back
    _server_back()
    code, out, _ = run_cli(capsys, "sync")
    assert code == 0 and out.startswith(f"{len(waiting)} sent, 0 already present")
    result = pg.evaluate_group("restart")
    assert result["baseline"]["attempted_runs"] + result["candidate"]["attempted_runs"] == lines
    assert result["duplicate_run_ids"] == [] and result["decision"] == "accept"
    # recording the same file again (a retried CI step) writes nothing twice
    code, out, err = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "restart", *_SETS)
    assert code == 0 and len(out.split()) == lines and f"{lines} of {lines} attempts were in MLflow already" in err
    attempts = [run for run in _runs("restart") if run.data.tags.get(TAG.KIND) == "attempt"]
    assert len(attempts) == lines and len({run.data.tags[TAG.ATTEMPT_ID] for run in attempts}) == lines
    assert {run.info.status for run in attempts} == {"FINISHED"}


def test_record_from_jsonl_again_is_idempotent_and_appended_lines_are_new(sqlite_uri, tmp_path, capsys):
    source = _jsonl(tmp_path / "a.jsonl", 6)
    code, first, _ = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "again", *_SETS)
    assert code == 0 and len(first.split()) == 6
    code, second, err = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "again", *_SETS)
    assert code == 0 and second.split() == first.split() and "6 of 6 attempts were in MLflow already" in err
    with open(source, "a", encoding="utf-8") as handle:  # the file grows: the old lines keep their ids
        handle.write(json.dumps({"arm": "candidate", "set": {"checkpoint": True}, "failure": "bench.py exited 1"}) + "\n")
    code, third, err = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "again", *_SETS)
    assert code == 0 and third.split()[:6] == first.split() and len(set(third.split())) == 7
    ids = {run.data.tags[TAG.ATTEMPT_ID] for run in _runs_local("again")}
    assert len(_runs_local("again")) == 7 and len(ids) == 7 and all(i.startswith("jsonl-") for i in ids)
    # the same file under another group names other attempts (a journal marks attempts by id alone)
    code, other, _ = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "another", *_SETS)
    assert code == 0 and not set(other.split()) & set(third.split())
    assert not ids & {run.data.tags[TAG.ATTEMPT_ID] for run in _runs_local("another")}
    # an explicit attempt_id is the user's: two lines with one are still refused
    (tmp_path / "dup.jsonl").write_text('{"arm": "baseline", "latency_ms": 1, "quality": 1, "attempt_id": "x"}\n' * 2)
    code, _, err = run_cli(capsys, "record", "--from-jsonl", str(tmp_path / "dup.jsonl"), "--group", "d", *_SETS)
    assert code == 2 and "attempt_id 'x' is given on line 1 already" in err


def _runs_local(group: str) -> list:
    return [run for run in MlflowClient().search_runs(["0"], max_results=5000)
            if run.data.tags.get(TAG.GROUP) == group]


# 2. two syncs at once store each attempt once -----------------------------------------------------

_SYNC = """
import json, os, sys, time
from pathlib import Path
from mlflow_perfgate.tracking import sync
from mlflow_perfgate.tracking import _maintenance  # imported before the barrier: both start together
here = Path(sys.argv[1])
(here / f"ready-{sys.argv[2]}").touch()
while not (here / "go").exists():
    time.sleep(0.001)
counts = sync()
print(json.dumps({"sent": counts["sent"], "present": counts["already_present"], "before": counts["pending_before"]}))
"""


@pytest.mark.server
def test_two_syncs_at_once_store_each_attempt_once(proxied, tmp_path, capsys):
    proxied.mode = "reset"  # the server is down while the attempts are recorded: all wait in the journal
    source = _jsonl(tmp_path / "attempts.jsonl", 12)
    code, _, err = run_cli(capsys, "record", "--from-jsonl", str(source), "--group", "twins", *_SETS)
    assert code == 2 and "12 of 12 attempts are kept in the journal" in err
    proxied.mode = "pass"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    twins = [subprocess.Popen([sys.executable, "-c", _SYNC, str(tmp_path), str(n)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready-{n}").exists() for n in range(2)):  # a barrier: both wait on one file
        assert time.time() < deadline and all(t.poll() is None for t in twins), [t.communicate() for t in twins]
        time.sleep(0.01)
    (tmp_path / "go").touch()
    answers = []
    for twin in twins:
        out, err = twin.communicate(timeout=120)
        assert twin.returncode == 0, err
        answers.append(json.loads(out))
    assert sorted(answer["sent"] for answer in answers) == [0, 12]  # one sent them, the other found none waiting
    attempts = [run for run in _runs("twins") if run.data.tags.get(TAG.KIND) == "attempt"]
    assert len(attempts) == 12 and len({run.data.tags[TAG.ATTEMPT_ID] for run in attempts}) == 12
    assert _journal.pending() == []


def test_a_sync_waits_a_bounded_time_for_its_twin_then_says_so(sqlite_uri, tmp_path, monkeypatch, capsys):
    from mlflow_perfgate.tracking import _maintenance

    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "journal.jsonl"))
    with _maintenance._replay_lock(1):  # a twin replaying the journal
        started = time.monotonic()
        with pytest.raises(_maintenance.JournalBusy, match="held the journal's lock"):
            sync(lock_wait_s=0.3)
        assert 0.3 <= time.monotonic() - started < 5
        monkeypatch.setattr(_maintenance, "SYNC_LOCK_WAIT_S", 0.2)
        monkeypatch.setattr(_maintenance.sync, "__kwdefaults__", {"lock_wait_s": 0.2})
        code, _, err = run_cli(capsys, "sync")
        assert code == 2 and "this sync sent nothing" in err
    assert sync() == {"pending_before": 0, "sent": 0, "already_present": 0}  # released: the next one runs


# 3. what the UI shows is what the verdict counted ---------------------------------------------------

@pytest.mark.server
def test_an_attempt_created_twice_is_counted_once_and_shown_once(proxied, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # MLflow's client sends a lost creation again
    log_series("twice", BASELINE_MS, CANDIDATE_MS[:-1])
    proxied.lose_answers("runs/create", 1)
    pg.log_attempt("twice", "candidate", CANDIDATE, latency_ms=CANDIDATE_MS[-1], quality=0.895)
    assert len(proxied.lost) == 1
    [first, second] = [run for run in _runs("twice") if run.data.tags.get(TAG.ATTEMPT_ID) ==
                       _runs_of_last_attempt("twice")]
    statuses = sorted(run.info.status for run in (first, second))
    assert statuses == ["FINISHED", "RUNNING"]  # counted once, shown twice: the fault
    result = pg.evaluate_group("twice")
    assert result["candidate"]["attempted_runs"] == len(CANDIDATE_MS) and result["decision"] == "accept"
    [extra] = [run for run in (first, second) if run.info.status == "RUNNING"]
    [kept] = [run for run in (first, second) if run.info.status == "FINISHED"]
    assert result["reconciled_run_ids"] == [extra.info.run_id]
    again = MlflowClient().get_run(extra.info.run_id)
    assert again.info.status == "KILLED" and again.data.tags[TAG.DUPLICATE_OF] == kept.info.run_id
    assert again.data.tags[TAG.FAILURE].startswith("duplicate: run " + kept.info.run_id)
    assert any("shown otherwise than counted" in w for w in result["warnings"])
    # evaluated again: the same decision, the duplicate still set aside (never counted in its place)
    result = pg.evaluate_group("twice")
    assert result["candidate"]["attempted_runs"] == len(CANDIDATE_MS) and result["decision"] == "accept"
    assert extra.info.run_id in result["duplicate_run_ids"] and result["reconciled_run_ids"] == []
    # reap ends one the same way (a second lost creation, a started attempt's this time)
    from mlflow_perfgate.tracking import start_attempt

    proxied.lose_answers("runs/create", 1)
    started = start_attempt("twice", "baseline", CONDITIONS)
    started.finish(latency_ms=100.0, quality=0.9)
    [orphan] = [run for run in _runs("twice") if run.data.tags.get(TAG.ATTEMPT_ID) == started.attempt_id
                and run.info.run_id != started.run_id]
    assert orphan.info.status == "RUNNING"
    assert reap(3600, group="twice") == [orphan.info.run_id]
    assert MlflowClient().get_run(orphan.info.run_id).data.tags[TAG.DUPLICATE_OF] == started.run_id


def _runs_of_last_attempt(group: str) -> str:
    counts: dict = {}
    for run in _runs(group):
        counts[run.data.tags.get(TAG.ATTEMPT_ID)] = counts.get(run.data.tags.get(TAG.ATTEMPT_ID), 0) + 1
    [attempt_id] = [key for key, value in counts.items() if value == 2]
    return attempt_id


@pytest.mark.server
def test_an_orphan_decision_run_is_ended_by_reap_and_the_evaluator(proxied, monkeypatch):
    from mlflow_perfgate.tracking._environment import process_identity

    log_series("orphan-decision")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    proxied.lose_answers("runs/create", 1)  # the decision run's creation: sent again, the first left behind
    result = pg.evaluate_group("orphan-decision")
    assert result["decision"] == "accept" and len(proxied.lost) == 1
    [orphan] = [run for run in _runs("orphan-decision") if run.data.tags.get(TAG.KIND) == "decision"
                and run.info.run_id != result["decision_run_id"]]
    assert orphan.info.status == "RUNNING" and TAG.DECISION not in orphan.data.tags
    assert reap(3600, group="orphan-decision") == [orphan.info.run_id]
    ended = MlflowClient().get_run(orphan.info.run_id)
    assert ended.info.status == "KILLED"
    assert ended.data.tags[TAG.END_REASON].startswith(f"duplicate: decision run {result['decision_run_id']}")
    # one whose writer died before its decision (a lost answer with retries off: the evaluator failed)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    pg.log_attempt("orphan-decision", "candidate", CANDIDATE, latency_ms=88.5, quality=0.895)
    proxied.lose_answers("runs/create", 1)
    with pytest.raises(Exception):
        pg.evaluate_group("orphan-decision")
    _server_back()
    [dead] = [run for run in _runs("orphan-decision") if run.data.tags.get(TAG.KIND) == "decision"
              and run.info.status == "RUNNING"]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    MlflowClient().set_tag(dead.info.run_id, TAG.SUPERVISOR, process_identity(child.pid))  # as if it wrote it
    child.kill()  # and died
    child.wait()
    result = pg.evaluate_group("orphan-decision")  # the evaluator applies the rule to what it read
    assert dead.info.run_id in result["reconciled_run_ids"]
    ended = MlflowClient().get_run(dead.info.run_id)
    assert ended.info.status == "KILLED" and ended.data.tags[TAG.END_REASON].startswith("supervisor_died")


@pytest.mark.server
def test_a_lost_log_batch_answer_never_leaves_an_ok_run_shown_failed(proxied, monkeypatch, capsys):
    log_series("batch", BASELINE_MS, CANDIDATE_MS[:-1])
    # with the journal: the outcome landed, only its answer was lost; sync finds it and ends the run as counted
    proxied.lose_answers("log-batch", 1)
    with pytest.raises(AttemptDeferred):
        pg.log_attempt("batch", "candidate", CANDIDATE, latency_ms=CANDIDATE_MS[-1], quality=0.895)
    [waiting] = _journal.pending()
    [run] = [r for r in _runs("batch") if r.data.tags.get(TAG.ATTEMPT_ID) == waiting["attempt_id"]]
    assert run.data.tags[TAG.OK] == "true" and run.info.status == "RUNNING"  # not shown FAILED
    _server_back()
    code, out, _ = run_cli(capsys, "sync")
    assert code == 0 and out.startswith("0 sent, 1 already present") and "1 runs shown otherwise" in out
    assert MlflowClient().get_run(run.info.run_id).info.status == "FINISHED"
    # without the journal the writer ends it FAILED; reap and the evaluator end it as its outcome says
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL_MODE", "never")
    for fixer in ("reap", "evaluate"):
        proxied.lose_answers("log-batch", 1)
        with pytest.raises(Exception):
            pg.log_attempt("batch", "baseline", CONDITIONS, latency_ms=101.0, quality=0.9)
        _server_back()
        [shown] = [r for r in _runs("batch") if r.info.status == "FAILED"]
        assert shown.data.tags[TAG.OK] == "true"  # counted ok, shown FAILED: the fault
        if fixer == "reap":
            assert reap(3600) == [shown.info.run_id]  # no group: found by its contradiction alone
        else:
            result = pg.evaluate_group("batch")
            assert result["reconciled_run_ids"] == [shown.info.run_id]
        assert MlflowClient().get_run(shown.info.run_id).info.status == "FINISHED"
    result = pg.evaluate_group("batch")
    assert result["baseline"]["attempted_runs"] == len(BASELINE_MS) + 2 and result["reconciled_run_ids"] == []


def test_a_fix_for_a_run_a_twin_deleted_meanwhile_is_passed(sqlite_uri):
    # the race CI met: an evaluator reads the group, a twin that lost the claim of the decision
    # discards its own decision run (KILLED, deleted), then the first one ends that run as counted
    from mlflow_perfgate.errors import StoreRefused
    from mlflow_perfgate.tracking import _reconcile
    from mlflow_perfgate.tracking._schema import TAG

    client = MlflowClient()
    gone, kept = (client.create_run("0", tags={TAG.KIND: "decision"}) for _ in range(2))
    client.set_terminated(gone.info.run_id, "KILLED")
    client.delete_run(gone.info.run_id)
    fixes = [_reconcile.Fix(run.info.run_id, "KILLED", "duplicate", {TAG.END_REASON: "duplicate"})
             for run in (gone, kept)]
    assert _reconcile.apply(client, fixes) == [kept.info.run_id]  # the deleted one is passed, not reported
    assert client.get_run(kept.info.run_id).info.status == "KILLED"
    assert client.get_run(gone.info.run_id).info.lifecycle_stage == "deleted"
    with pytest.raises(StoreRefused):  # a refusal of a run still there is not swallowed
        _reconcile.apply(client, [_reconcile.Fix(kept.info.run_id, "KILLED", "x", {"k" * 300: "x"})])
