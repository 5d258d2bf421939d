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
    assert (frame.iloc[0]["method"], frame.iloc[0]["latency"]) == ("seed", "raw")  # how it was judged


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
    _bare_run("g-stale", "candidate", start_time=int((time.time() - 30) * 1000))  # young: still in progress
    result = pg.evaluate_group("g-stale", maximum_failure_rate=0.5)
    assert (result["decision"], result["reason"]) == ("rerun", "attempts_in_progress")
    # a stale limit shorter than its 30 s of age turns it into a failure (no sleep against the limit)
    result = pg.evaluate_group("g-stale", maximum_failure_rate=0.5, stale_after_s=10)
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


def test_numpy_and_torch_values_are_read_as_the_numbers_they_hold(sqlite_uri):
    import numpy as np
    import torch

    for pair, (shape, latency) in enumerate([(np.array([4, 128]), np.float32(100.0)), (torch.tensor([4, 128]), 101.0)]):
        for arm, conditions in (("baseline", CONDITIONS), ("candidate", CANDIDATE)):
            pg.log_attempt("g-np", arm, {**conditions, "input_shape": shape, "batch_size": np.int64(4)},
                           latency_ms=latency, quality=0.9, pair=np.int64(pair) if pair else torch.tensor(pair))
    runs = [r for r in all_runs() if r.data.tags.get(TAG.GROUP) == "g-np"]
    assert len(runs) == 4 and {r.data.params["input_shape"] for r in runs} == {"[4, 128]"}
    assert sorted(r.data.tags[TAG.PAIR] for r in runs) == ["0", "0", "1", "1"]
    assert {r.data.params["batch_size"] for r in runs} == {"4"}
    with pytest.raises(ValueError, match=r"pair must be an integer >= 0.*got True"):
        pg.log_attempt("g-np", "baseline", CONDITIONS, latency_ms=100.0, quality=0.9, pair=np.bool_(True))
    with pytest.raises(ValueError, match=r"condition 'input_shape' must hold only finite numbers"):
        pg.log_attempt("g-np", "baseline", {**CONDITIONS, "input_shape": np.array([4.0, np.nan])},
                       latency_ms=100.0, quality=0.9)


def test_a_library_float_condition_is_the_number_it_holds():
    """numpy's float64 is a float whose repr is ``np.float64(0.1)``: as a param it is ``0.1``, the same as 0.1."""
    import numpy as np
    import pandas as pd
    import torch

    from mlflow_perfgate.tracking import canonical_value

    for value in (np.float64(0.1), np.float32(0.5), pd.Series([0.1]).iloc[0], torch.tensor(0.5)):
        assert canonical_value(value) == repr(float(value)), value
    assert canonical_value(np.float64(0.1)) == canonical_value(0.1) == "0.1"
    assert canonical_value(np.int64(3)) == canonical_value(3) == "3"


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


def test_every_verdict_has_its_reason_in_words_on_the_run_and_in_decisions(sqlite_uri):
    log_series("w-reject")
    pg.log_attempt("w-reject", "candidate", CANDIDATE, ok=False, failure="timeout")
    reject = pg.evaluate_group("w-reject")
    log_series("w-rerun", (100, 101), (80, 81))
    rerun = pg.evaluate_group("w-rerun")
    log_series("w-accept")
    accept = pg.evaluate_group("w-accept")
    client = MlflowClient()
    texts = {r["group"]: client.get_run(r["decision_run_id"]).data.tags[TAG.REASON_TEXT]
             for r in (reject, rerun, accept)}
    assert texts["w-reject"] == ("failure_rate_ok failed: candidate failure rate 16.7% (1 of 6) against "
                                 "maximum_failure_rate 0.0% (baseline 0.0%)")
    assert texts["w-rerun"] == ("an arm has fewer successful attempts than min_valid_runs: baseline 2 of 2 "
                                "attempts succeeded, candidate 2 of 2; min_valid_runs 5")
    assert texts["w-accept"].startswith("every declared check passed (failure_rate_ok, quality_ok, p95_ok")
    assert f"- reason: `declared_thresholds_checked`: {texts['w-reject']}" in reject["report"]
    frame = pg.decisions().set_index("group")
    assert frame.loc["w-reject", "reason_text"] == texts["w-reject"]
    assert frame.loc["w-reject", "failed_checks"] == ["failure_rate_ok"]
    assert frame.loc["w-rerun", "reason_text"] == texts["w-rerun"]


def test_blocked_and_in_progress_reasons_in_words(sqlite_uri):
    log_series("w-blocked")
    bad = {"evidence_type": "correctness", "status": "invalid", "run_valid": False,
           "issues": ["numerical"], "first_failure": "blocks.0.mlp", "reproducible": True}
    pg.log_attempt("w-blocked", "candidate", CANDIDATE, latency_ms=50, quality=0.1, validity=bad)
    blocked = pg.evaluate_group("w-blocked")
    assert pg.tracking.decisions(group="w-blocked").iloc[0]["reason_text"] == (
        "an attempt failed its correctness probe: issues numerical; first failure blocks.0.mlp; 1 invalid attempts")
    assert "reproducible: true" in blocked["report"]  # booleans as the params spell them
    log_series("w-running")
    _bare_run("w-running", "candidate")
    running = pg.evaluate_group("w-running")
    assert running["reason"] == "attempts_in_progress"
    assert "some attempts are still running; evaluate again when they end: 1 still running" in running["report"]


def test_the_run_name_carries_the_verdict(sqlite_uri):
    from mlflow_perfgate.tracking import start_comparison

    client = MlflowClient()
    log_series("n-plain")
    first = pg.evaluate_group("n-plain")
    assert client.get_run(first["decision_run_id"]).info.run_name == "ACCEPT: decision n-plain"
    comparison = start_comparison("n-cmp", CONDITIONS, "checkpoint")
    log_series("n-cmp", parent_run_id=comparison)
    decided = pg.evaluate_group("n-cmp")
    assert decided["decision_run_id"] == comparison
    assert client.get_run(comparison).info.run_name == "ACCEPT: compare n-cmp"
    again = pg.evaluate_group("n-cmp", min_improvement=0.5)  # decided before: a new decision nests under it
    run = client.get_run(again["decision_run_id"])
    assert run.info.run_name == "REJECT: decision" and run.data.tags[TAG.RUN_NAME] == "REJECT: decision"
    assert client.get_run(comparison).info.run_name == "ACCEPT: compare n-cmp"
    from mlflow_perfgate.tracking._decision_run import verdict_name

    assert verdict_name("compare g: a: REJECT", "rerun") == "RERUN: compare g: a"
    assert verdict_name("decision", "blocked_by_correctness") == "BLOCKED BY CORRECTNESS: decision"
    assert verdict_name("ACCEPT: compare g", "reject") == "REJECT: compare g"  # decided again: replaced
    assert verdict_name("RERUN: decision: ACCEPT", "accept") == "ACCEPT: decision"  # both forms, an earlier release's


def test_attempts_recorded_under_a_project_run_get_a_proper_decision_run(sqlite_uri, monkeypatch, capsys):
    """``mlflow run -e record`` nests its attempt under the project run (MLFLOW_RUN_ID), which is no comparison."""
    from mlflow_perfgate.cli import main

    client = MlflowClient()
    project = client.create_run("0", tags={"mlflow.project.entryPoint": "record"}).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", project)
    sets = [f"--set={k}={pg.tracking.canonical_value(v)}" for k, v in CONDITIONS.items() if k != "checkpoint"]
    for arm, checkpoint, latencies in (("baseline", "false", (100, 102)), ("candidate", "true", (80, 81))):
        for latency in latencies:
            with pytest.raises(SystemExit) as exit_info:
                main(["record", "--group", "proj", "--arm", arm, *sets, f"--set=checkpoint={checkpoint}",
                      f"--latency-ms={latency}", "--quality=0.9"])
            assert exit_info.value.code == 0
    run_ids = capsys.readouterr().out.split()
    assert {client.get_run(r).data.tags[TAG.PARENT] for r in run_ids} == {project}
    monkeypatch.delenv("MLFLOW_RUN_ID")
    result = pg.evaluate_group("proj", min_valid_runs=2)
    decision = client.get_run(result["decision_run_id"])
    assert decision.info.run_id != project and decision.info.status == "FINISHED"
    assert decision.data.tags[TAG.KIND] == "decision" and decision.data.tags[TAG.DECISION] == "accept"
    assert decision.data.tags[TAG.PARENT] == project  # project run > decision > attempts
    assert {client.get_run(r).data.tags[TAG.PARENT] for r in run_ids} == {decision.info.run_id}
    assert TAG.DECISION not in client.get_run(project).data.tags


def test_memory_and_throughput_decisions_plot_their_metric(sqlite_uri, tmp_path):
    client = MlflowClient()
    for objective, metric in (("memory", "peak_mem_mib"), ("throughput", "throughput_tok_s")):
        group = f"plot-{objective}"
        for i, (b, c) in enumerate(zip((100, 102, 99, 101, 100), (104, 103, 105, 102, 104))):
            pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=b, quality=0.9, metrics={metric: 1500.0 + i})
            pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=c, quality=0.9, metrics={metric: 950.0 + i})
        pg.log_attempt(group, "candidate", CANDIDATE, ok=False, failure="timeout")
        result = pg.evaluate_group(group, objective=objective)
        artifacts = {a.path for a in client.list_artifacts(result["decision_run_id"], "perfgate")}
        assert {"perfgate/latency.png", f"perfgate/{objective}.png"} <= artifacts
        assert all(a[metric] > 0 for a in result["attempts"] if a["ok"])  # the plotted values, in decision.json
        path = client.download_artifacts(result["decision_run_id"], f"perfgate/{objective}.png", str(tmp_path))
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "perfgate/memory.png" not in {a.path for a in client.list_artifacts(
        pg.evaluate_group("plot-memory", objective="latency")["decision_run_id"], "perfgate")}


def test_the_plot_names_the_variable_reads_plainly_and_keeps_failures_apart(sqlite_uri):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection

    from mlflow_perfgate.tracking import _report

    log_series("plot", (1034.5, 1040.2, 1029.9, 1050.0, 1038.0), (900.1, 905, 899, 910, 902))
    pg.log_attempt("plot", "candidate", CANDIDATE, ok=False, failure="timeout")
    pg.log_attempt("plot", "candidate", CANDIDATE, ok=False, failure="oom")
    result = pg.evaluate_group("plot", maximum_failure_rate=0.5)
    fig = _report.metric_figure(result)
    try:
        main, lane = fig.axes
        ticks = [t.get_text() for t in lane.get_xticklabels()]
        assert ticks == ["checkpoint=false\n(baseline), 5 ok", "checkpoint=true\n(candidate), 5 ok"]
        texts = [t.get_text() for t in main.texts]
        assert "median 1,038 ms" in texts and "P95 1,050 ms" in texts and "median 902 ms" in texts
        fig.canvas.draw()
        labels = [t.get_text() for t in main.get_yticklabels()]
        assert labels and all("e+" not in label and "e-" not in label for label in labels)
        assert any("," in label for label in labels)  # 1,000 and up with a thousands separator
        # the failures are in their own lane, with their count, and not among the latencies
        assert [t.get_text() for t in lane.texts] == ["2 failed"]
        points = [len(c.get_offsets()) for c in main.collections if isinstance(c, PathCollection)]
        assert points == [5, 5]
        crosses = [len(c.get_offsets()) for c in lane.collections if isinstance(c, PathCollection)]
        assert crosses == [2]
    finally:
        plt.close(fig)


def test_headlines_follow_the_objective_and_a_memory_accept_never_says_faster(sqlite_uri):
    from mlflow_perfgate.rules import OBJECTIVES
    from mlflow_perfgate.tracking import decision_summary

    for name in OBJECTIVES:  # every objective has an accept headline for each of its modes
        assert set(OBJECTIVES[name].modes) <= set(OBJECTIVES[name].headlines), name
    expected = {"latency": "ACCEPT: the candidate is faster",
                "memory": "ACCEPT: the candidate needs less memory within its latency budget",
                "throughput": "ACCEPT: the candidate has a higher throughput"}
    for objective, metric, slower in (("memory", "peak_mem_mib", True), ("throughput", "throughput_tok_s", True),
                                      ("latency", "peak_mem_mib", False)):
        group = f"h-{objective}"
        for i in range(5):  # the candidate: a little slower (memory), or as fast (throughput), and better
            pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=100 + i, quality=0.9,
                           metrics={metric: 1000.0 + i if objective != "throughput" else 100.0 + i})
            pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=(110 + i) if slower else 80 + i, quality=0.9,
                           metrics={metric: 500.0 + i if objective != "throughput" else 200.0 + i})
        result = pg.evaluate_group(group, objective=objective)
        assert result["decision"] == "accept", (objective, result["reason"], result.get("messages"))
        note = MlflowClient().get_run(result["decision_run_id"]).data.tags[TAG.NOTE]
        for text in (result["report"], note, "\n".join(decision_summary(result))):
            assert expected[objective] in text
            if objective != "latency":
                assert "faster" not in text, (objective, text)


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


def test_the_report_table_and_plot_show_each_attempts_contention(sqlite_uri, tmp_path):
    from mlflow_perfgate.tracking._report import attempts_table, contention_lines, metric_figure

    for arm, conditions, latencies in (("baseline", CONDITIONS, (100, 101, 99, 100)),
                                       ("candidate", CANDIDATE, (90, 91, 89, 120))):
        for index, latency in enumerate(latencies):
            busy = arm == "candidate" and index == 3  # more than half its steps waited: no uncontended figure
            metrics = {"wait_share": 0.8 if busy else 0.01, "runq_wait_ms": 96.0 if busy else 1.0}
            if not busy:
                metrics["uncontended_latency_ms"] = float(latency)
            pg.log_attempt("busy", arm, conditions, latency_ms=latency, quality=0.9, metrics=metrics)
    pg.log_attempt("busy", "candidate", CANDIDATE, ok=False, failure="timeout after 1.0s")
    result = pg.evaluate_group("busy", method="robust", dry_run=True)
    candidate = [a for a in result["attempts"] if a["arm"] == "candidate" and a["ok"]]
    assert sorted(a["wait_share"] for a in candidate) == [0.01, 0.01, 0.01, 0.8]
    assert contention_lines(result)[-2:] == ["- baseline: median wait share 0.01; 0 of 4 successful attempts contended",
                                            "- candidate: median wait share 0.01; 1 of 4 successful attempts contended"]
    table = attempts_table(result)
    assert sorted(v for v in table["runq_wait_ms"] if v is not None) == [1.0] * 7 + [96.0]
    assert table["wait_share"].count(None) == 1  # the failed attempt measured nothing
    figure = metric_figure(result)
    try:
        labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
        assert labels == ["contended"]
        from matplotlib.collections import PathCollection

        hollow = [c for c in figure.axes[0].collections if isinstance(c, PathCollection)
                  and c.get_facecolors().size == 0]
        assert [tuple(c.get_offsets()[0])[1] for c in hollow] == [120.0]
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
    logged = pg.evaluate_group("busy", method="robust")
    assert "### Contention" in logged["report"] and "1 of 4 successful attempts contended" in logged["report"]
    # Attempts that measured nothing: no section, no columns.
    pg.log_attempt("plain", "baseline", CONDITIONS, latency_ms=10.0, quality=0.9)
    plain = pg.evaluate_group("plain", dry_run=True)
    assert contention_lines(plain) == [] and "wait_share" not in attempts_table(plain)
