"""Attempts, the evaluator and decision runs against a real SQLite store and a real server."""

from __future__ import annotations

import json
import os
import time

import pytest
from mlflow.entities import Param
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.tracking import TAG

from helpers import CANDIDATE, CONDITIONS, all_runs, log_series


def test_accept_writes_a_decision_run_with_nested_attempts(tracking_uri, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    ids = log_series("g-accept")
    result = pg.evaluate_group("g-accept")
    assert result["decision"] == "accept"
    assert result["failed_checks"] == []
    assert result["changed_variable"] == "checkpoint"
    assert (result["baseline_value"], result["candidate_value"]) == ("false", "true")
    assert result["baseline"]["median_ms"] == 100 and result["candidate"]["median_ms"] == 89
    assert sorted(result["run_ids"]) == sorted(ids)

    client = MlflowClient()
    decision = client.get_run(result["decision_run_id"])
    tags, params, metrics = decision.data.tags, decision.data.params, decision.data.metrics
    assert tags[TAG.KIND] == "decision" and tags[TAG.DECISION] == "accept"
    assert tags[TAG.GROUP] == "g-accept" and tags[TAG.REASON] == "declared_thresholds_checked"
    assert tags[TAG.FAILED_CHECKS] == ""
    assert "ACCEPT" in tags[TAG.NOTE] and "checkpoint" in tags[TAG.NOTE]
    assert params["perfgate.min_valid_runs"] == "5" and params["perfgate.maximum_p95_ratio"] == "1.05"
    assert params["perfgate.changed_variable"] == "checkpoint" and params["perfgate.candidate_value"] == "true"
    assert metrics["baseline_median_ms"] == 100 and metrics["candidate_p95_ms"] == 91
    assert metrics["observed_improvement"] == pytest.approx(0.11)
    assert decision.info.status == "FINISHED"
    for run_id in ids:
        assert client.get_run(run_id).data.tags[TAG.PARENT] == result["decision_run_id"]
    artifacts = {a.path for a in client.list_artifacts(result["decision_run_id"], "perfgate")}
    assert {"perfgate/decision.json", "perfgate/report.md", "perfgate/latency.png",
            "perfgate/attempts.json"} <= artifacts
    path = client.download_artifacts(result["decision_run_id"], "perfgate/decision.json", str(tmp_path))
    payload = json.loads(open(path).read())
    assert sorted(payload["run_ids"]) == sorted(ids) and payload["decision"] == "accept"
    assert "ACCEPT" in summary.read_text()


def test_reject_keeps_failed_attempt_in_the_denominator(tracking_uri):
    log_series("g-reject")
    pg.log_attempt("g-reject", "candidate", CANDIDATE, ok=False, failure="timeout")
    result = pg.evaluate_group("g-reject")
    assert result["decision"] == "reject"
    assert result["failed_checks"] == ["failure_rate_ok"]
    assert result["candidate"]["failure_rate"] == 1 / 6
    assert result["candidate"]["failure_reasons"] == ["timeout"]
    assert "FAILED: candidate failure rate 16.7%" in result["messages"]["failure_rate_ok"]
    frame = pg.decisions(group="g-reject")
    assert list(frame["decision"]) == ["reject"]
    assert frame.iloc[0]["failed_checks"] == ["failure_rate_ok"]


def test_rerun_when_too_few_valid_runs(sqlite_uri):
    log_series("g-rerun", (100, 101), (80, 81))
    result = pg.evaluate_group("g-rerun")
    assert (result["decision"], result["reason"]) == ("rerun", "insufficient_valid_runs")
    assert result["failed_checks"] == []


def test_thresholds_are_passed_through(sqlite_uri):
    log_series("g-thr", (100, 101), (80, 81))
    result = pg.evaluate_group("g-thr", min_valid_runs=2, min_improvement=0.3)
    assert result["decision"] == "reject" and result["failed_checks"] == ["improvement_ok"]
    params = MlflowClient().get_run(result["decision_run_id"]).data.params
    assert params["perfgate.min_valid_runs"] == "2" and params["perfgate.min_improvement"] == "0.3"


def test_blocked_by_correctness_comes_first(sqlite_uri):
    log_series("g-blocked")
    bad = {"evidence_type": "correctness", "status": "invalid", "run_valid": False,
           "issues": ["numerical"], "first_failure": "blocks.0.mlp", "reproducible": True}
    # a wrong conditions set as well: correctness still comes first
    pg.log_attempt("g-blocked", "candidate", {**CANDIDATE, "dtype": "bf16"}, latency_ms=50, quality=0.1,
                   validity=bad)
    result = pg.evaluate_group("g-blocked")
    assert result["decision"] == "blocked_by_correctness"
    assert result["issues"] == ["numerical"] and result["first_failure"] == "blocks.0.mlp"
    run = MlflowClient().get_run(result["decision_run_id"])
    assert run.data.tags[TAG.DECISION] == "blocked_by_correctness"
    assert "blocks.0.mlp" in run.data.tags[TAG.NOTE]


def _bare_run(group, arm, status=None, start_time=None):
    """A run as a crashed process leaves it: tags only, never reported."""
    client = MlflowClient()
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    experiment_id = client.get_experiment_by_name(name).experiment_id if name else "0"
    run = client.create_run(experiment_id, start_time=start_time, tags={
        TAG.KIND: "attempt", TAG.GROUP: group, TAG.ARM: arm})
    if status:
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


@pytest.mark.parametrize("status", ["FAILED", "KILLED"])
def test_crashed_attempt_counts_as_failed(sqlite_uri, status):
    log_series("g-crash")
    crashed = _bare_run("g-crash", "candidate", status)
    result = pg.evaluate_group("g-crash")
    assert result["candidate"]["attempted_runs"] == 6 and result["candidate"]["failed_runs"] == 1
    assert "crashed" in result["candidate"]["failure_reasons"][0]
    assert result["decision"] == "reject" and "failure_rate_ok" in result["failed_checks"]
    assert crashed in result["run_ids"]


def test_stale_and_running_attempts(sqlite_uri):
    log_series("g-stale")
    two_hours_ago = int((time.time() - 7200) * 1000)
    _bare_run("g-stale", "baseline", start_time=two_hours_ago)
    result = pg.evaluate_group("g-stale", maximum_failure_rate=0.5)
    assert result["baseline"]["failed_runs"] == 1
    assert result["baseline"]["failure_reasons"][0].startswith("stale")
    _bare_run("g-stale", "candidate")  # young: still in progress
    result = pg.evaluate_group("g-stale", maximum_failure_rate=0.5)
    assert (result["decision"], result["reason"]) == ("rerun", "attempts_in_progress")
    # a shorter stale limit turns it into a failure
    time.sleep(1.1)
    result = pg.evaluate_group("g-stale", maximum_failure_rate=0.5, stale_after_s=1)
    assert result["reason"] == "declared_thresholds_checked"
    assert result["candidate"]["failed_runs"] == 1


INJECTIONS = [
    "x' OR '1'='1", 'x" OR "1"="1', "both'\"quotes", "back\\slash\\", "100%", "g_", "a%",
    "tags.\"perfgate.kind\" = 'attempt'", "new\nline", "日本語 group",
]


@pytest.mark.parametrize("group", INJECTIONS)
def test_injection_shaped_group_names_match_only_themselves(tracking_uri, group):
    # neighbours that a LIKE, a broken quote or a case-insensitive match would catch
    for neighbour in ("x", "g", group.upper() if group.upper() != group else group + "X"):
        log_series(neighbour, (500,), (500,))
    ids = log_series(group)
    result = pg.evaluate_group(group)
    assert sorted(result["run_ids"]) == sorted(ids)
    assert result["decision"] == "accept"
    frame = pg.decisions(group=group)
    assert list(frame["group"]) == [group]


def test_single_variable_rule_names_the_keys(sqlite_uri):
    log_series("g-two", candidate={**CANDIDATE, "dtype": "bf16"})
    with pytest.raises(ValueError, match=r"\['checkpoint', 'dtype'\]"):
        pg.evaluate_group("g-two")
    log_series("g-none", candidate=CONDITIONS)
    with pytest.raises(ValueError, match="do not differ"):
        pg.evaluate_group("g-none")
    log_series("g-arm")
    pg.log_attempt("g-arm", "baseline", {**CONDITIONS, "batch_size": 8}, latency_ms=100, quality=0.9)
    with pytest.raises(ValueError, match=r"baseline attempts do not share.*batch_size"):
        pg.evaluate_group("g-arm")
    assert pg.decisions().empty  # no decision was written for a broken comparison


def test_canonical_conditions_do_not_look_like_a_change(sqlite_uri):
    log_series("g-canon", conditions={**CONDITIONS, "input_shape": "(4, 128)", "checkpoint": "False"},
               candidate={**CONDITIONS, "input_shape": [4, 128], "checkpoint": "true"})
    result = pg.evaluate_group("g-canon")
    assert result["changed_variable"] == "checkpoint"
    params = MlflowClient().get_run(result["run_ids"][0]).data.params
    assert params["input_shape"] == "[4, 128]" and params["checkpoint"] == "false"


def test_retried_write_is_counted_once(sqlite_uri):
    log_series("g-dup")
    pg.log_attempt("g-dup", "candidate", CANDIDATE, ok=False, failure="oom", attempt_id="a-1")
    pg.log_attempt("g-dup", "candidate", CANDIDATE, ok=False, failure="oom", attempt_id="a-1")
    result = pg.evaluate_group("g-dup")
    assert result["candidate"]["attempted_runs"] == 6
    assert len(result["duplicate_run_ids"]) == 1


def test_decisions_frame(sqlite_uri):
    from mlflow_perfgate.tracking import DECISION_COLUMNS

    empty = pg.decisions()
    assert list(empty.columns) == DECISION_COLUMNS and empty.empty
    log_series("g-a")
    log_series("g-b", (100, 101), (80, 81))
    first = pg.evaluate_group("g-a")
    second = pg.evaluate_group("g-b")
    frame = pg.decisions()
    assert list(frame["run_id"]) == [second["decision_run_id"], first["decision_run_id"]]
    assert list(frame["decision"]) == ["rerun", "accept"]
    assert frame.iloc[1]["baseline_median_ms"] == 100.0
    assert list(pg.decisions(group="g-a")["group"]) == ["g-a"]


def test_evaluate_errors(sqlite_uri):
    with pytest.raises(ValueError, match="does not exist"):
        pg.evaluate_group("g", experiment_name="missing")
    with pytest.raises(ValueError, match="no attempts"):
        pg.evaluate_group("nothing-here")
    log_series("g-err")
    with pytest.raises(ValueError, match="unknown thresholds"):
        pg.evaluate_group("g-err", min_improvment=0.1)
    with pytest.raises(ValueError, match="min_improvement"):
        pg.evaluate_group("g-err", min_improvement=1.5)
    with pytest.raises(ValueError, match="min_valid_runs"):
        pg.evaluate_group("g-err", min_valid_runs=2.0)


def test_non_finite_stored_latency_is_refused_not_judged(sqlite_uri):
    client = MlflowClient()
    log_series("g-inf")
    run_id = _bare_run("g-inf", "candidate")
    client.log_batch(run_id, params=[Param(k, pg.tracking.canonical_value(v)) for k, v in CANDIDATE.items()])
    client.log_metric(run_id, "latency_ms", float("inf"))
    client.log_metric(run_id, "quality", 0.9)
    client.set_tag(run_id, TAG.OK, "true")
    client.set_terminated(run_id)
    with pytest.raises(ValueError, match="non-finite latency_ms"):
        pg.evaluate_group("g-inf")


LONG = "x" * 6001
BAD_INPUTS = [
    (dict(arm="other"), "arm must be one of"),
    (dict(conditions={**CONDITIONS, "bad key!": 1}), "not accepted by MLflow"),
    (dict(conditions={**CONDITIONS, "note": LONG}), "would truncate"),
    (dict(conditions={**CONDITIONS, "lr": float("nan")}), "must be finite"),
    (dict(conditions={}), "at least one condition"),
    (dict(latency_ms=float("nan")), "latency_ms must be finite"),
    (dict(latency_ms=float("inf")), "latency_ms must be finite"),
    (dict(latency_ms=-1.0), "latency_ms must be > 0"),
    (dict(latency_ms=None), "needs latency_ms"),
    (dict(quality=float("-inf")), "quality must be finite"),
    (dict(quality="high"), "quality must be a number"),
    (dict(ok="yes"), "ok must be True or False"),
    (dict(ok=False, latency_ms=None, quality=None), "needs a non-empty failure"),
    (dict(failure="timeout"), "cannot have a failure"),
    (dict(ok=False, failure="f" * 8001, latency_ms=None, quality=None), "would truncate"),
    (dict(group="g" * 8001), "would truncate"),
    (dict(group=""), "group must be a non-empty string"),
    (dict(metrics={"peak_mem_mib": float("nan")}), "must be finite"),
    (dict(tags={"t": "v" * 8001}), "would truncate"),
    (dict(validity={"evidence_type": "correctness"}), "validity: correctness record is missing"),
    (dict(validity={"evidence_type": "correctness", "status": "valid", "run_valid": True, "issues": ["x"],
                    "first_failure": None, "reproducible": False}), "validity: run_valid=True contradicts"),
]


@pytest.mark.parametrize("change, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_refused_before_anything_is_written(sqlite_uri, change, message):
    kwargs = dict(group="bad", arm="baseline", conditions=CONDITIONS, latency_ms=10.0, quality=0.9)
    kwargs.update(change)
    with pytest.raises(ValueError, match=message):
        pg.log_attempt(kwargs.pop("group"), kwargs.pop("arm"), kwargs.pop("conditions"), **kwargs)
    assert all_runs() == []


def test_attempt_context_manager(sqlite_uri):
    client = MlflowClient()
    with pg.attempt("ctx", "baseline", CONDITIONS) as recorder:
        # the run and its conditions exist while the body runs
        assert client.get_run(recorder.run_id).data.params["batch_size"] == "4"
        recorder.report(latency_ms=12.5, quality=0.9, metrics={"peak_mem_mib": 3.0})
    run = client.get_run(recorder.run_id)
    assert run.info.status == "FINISHED" and run.data.tags[TAG.OK] == "true"
    assert run.data.metrics["latency_ms"] == 12.5 and run.data.metrics["peak_mem_mib"] == 3.0

    with pytest.raises(RuntimeError, match="boom"):
        with pg.attempt("ctx", "candidate", CANDIDATE) as failing:
            raise RuntimeError("boom")
    run = client.get_run(failing.run_id)
    assert run.info.status == "FAILED" and run.data.tags[TAG.OK] == "false"
    assert run.data.tags[TAG.FAILURE] == "exception: RuntimeError: boom"

    with pytest.raises(ValueError, match="must call report"):
        with pg.attempt("ctx", "candidate", CANDIDATE) as silent:
            pass
    assert client.get_run(silent.run_id).data.tags[TAG.FAILURE].startswith("no_result")

    with pytest.raises(ValueError, match="latency_ms must be finite"):
        with pg.attempt("ctx", "candidate", CANDIDATE) as bad:
            bad.report(latency_ms=float("nan"), quality=0.9)
    assert client.get_run(bad.run_id).data.tags[TAG.OK] == "false"

    with pg.attempt("ctx", "candidate", CANDIDATE) as explicit:
        explicit.fail("out of memory")
    assert client.get_run(explicit.run_id).data.tags[TAG.FAILURE] == "out of memory"
    result = pg.evaluate_group("ctx", min_valid_runs=1)
    assert result["candidate"]["attempted_runs"] == 4 and result["candidate"]["failed_runs"] == 4


def test_contention_figures_histories_and_status_are_logged_and_refused_when_bad(sqlite_uri):
    run_id = pg.log_attempt("hist", "baseline", CONDITIONS, latency_ms=11.0, quality=0.9, step_times_ms=[10, 11, 30],
                            metrics={"runq_wait_ms": 21.5, "wait_share": 0.42, "uncontended_latency_ms": 10.5},
                            histories={"step_wait_share": [0.0, None, 0.7]}, contention_status="measured")
    client = MlflowClient()
    run = client.get_run(run_id)
    assert run.data.tags[TAG.CONTENTION_STATUS] == "measured"
    assert run.data.metrics["uncontended_latency_ms"] == 10.5 and run.data.metrics["wait_share"] == 0.42
    history = client.get_metric_history(run_id, "step_wait_share")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (2, 0.7)]  # the step index is kept
    for bad, message in [(dict(histories={"step_time_ms": [1.0]}), "history 'step_time_ms' is the attempt's own"),
                         (dict(histories={"h": [float("nan")]}), "history 'h' must be finite"),
                         (dict(histories={"h": "1,2"}), "history 'h' must be a list of numbers"),
                         (dict(histories={"perfgate.x": [1.0]}), "history .perfgate.x. is reserved"),
                         (dict(metrics={"h": 1.0}, histories={"h": [1.0]}), "also given as a metric"),
                         (dict(metrics={"uncontended_latency_ms": 0.0}), "must be > 0"),
                         (dict(contention_status="maybe"), "contention_status must be 'measured' or")]:
        with pytest.raises(ValueError, match=message):
            pg.log_attempt("hist-bad", "baseline", CONDITIONS, latency_ms=11.0, quality=0.9, **bad)
    assert len(all_runs()) == 1


def test_evaluate_judges_the_uncontended_latency_when_asked(sqlite_uri):
    for arm, conditions, raw, quiet in (("baseline", CONDITIONS, (100, 150, 101, 160, 99), (100, 100, 101, 100, 99)),
                                        ("candidate", CANDIDATE, (90, 150, 89, 91, 92), (90, 89, 89, 91, None))):
        for r, q in zip(raw, quiet):
            extra = {} if q is None else {"uncontended_latency_ms": q}
            pg.log_attempt("quiet", arm, conditions, latency_ms=r, quality=0.9, metrics=extra or None)
    raw = pg.evaluate_group("quiet", method="robust", dry_run=True)
    assert raw["latency"] == "raw" and raw["baseline"]["median_ms"] == 101
    result = pg.evaluate_group("quiet", method="robust", latency="uncontended")
    assert result["decision"] == "accept" and result["baseline"]["median_ms"] == 100
    assert result["candidate"]["contended_runs"] == 1
    assert any("1 of 5 successful candidate attempts have no uncontended_latency_ms" in w for w in result["warnings"])
    assert all("uncontended_latency_ms" in a for a in result["attempts"] if a["arm"] == "baseline")
    decision = MlflowClient().get_run(result["decision_run_id"]).data
    assert decision.tags[TAG.LATENCY] == "uncontended" and decision.metrics["candidate_contended_runs"] == 1
