"""A decision travels through ``tracking`` as records; the public dict is made once, at the boundary.

``evaluate_group``'s return value and the decision run's ``decision.json`` are the same dict (the
report aside, which is ``report.md``); a dry run gives the same judged keys; the decision run's
tags, params and metrics read the record's fields and agree with the dict.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate import rules
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.tracking._evaluation import Change, Evaluation, Judged

from helpers import CANDIDATE, log_series


def _decision_json(run_id, tmp_path):
    path = MlflowClient().download_artifacts(run_id, "perfgate/decision.json", str(tmp_path))
    return json.loads(open(path).read())


@pytest.mark.parametrize("method", ["seed", "robust"])
def test_the_returned_dict_is_decision_json(sqlite_uri, tmp_path, method):
    log_series(f"rec-{method}")
    pg.log_attempt(f"rec-{method}", "candidate", CANDIDATE, ok=False, failure="timeout")
    dry = pg.evaluate_group(f"rec-{method}", method=method, dry_run=True)
    result = pg.evaluate_group(f"rec-{method}", method=method)
    payload = _decision_json(result["decision_run_id"], tmp_path)
    assert payload.pop("format_version") == 1
    expected = json.loads(json.dumps({k: v for k, v in result.items() if k != "report"}, default=str))
    assert payload == expected
    # a dry run judged the same: every judged key agrees, and it names no run written
    written = {"decision_run_id", "decision_run_url", "view_key", "view_url", "report", "reconciled_run_ids",
               "warnings"}
    assert {k: v for k, v in dry.items() if k not in written} == {k: v for k, v in result.items()
                                                                    if k not in written}
    assert (dry["decision_run_id"], dry["report"], dry["view_url"]) == (None, None, None)
    run = MlflowClient().get_run(result["decision_run_id"])
    tags, metrics = run.data.tags, run.data.metrics
    assert (tags[TAG.DECISION], tags[TAG.REASON], tags[TAG.METHOD]) == (result["decision"], result["reason"],
                                                                          result["method"])
    assert tags[TAG.FAILED_CHECKS] == ",".join(result["failed_checks"])
    assert tags[TAG.VIEW_KEY] == result["view_key"] and result["view_url"].endswith(result["view_key"])
    assert metrics["candidate_failure_rate"] == pytest.approx(result["candidate"]["failure_rate"])
    for name, summary in result.items():
        if name in ("seed", "robust", "paired") and isinstance(summary, dict) and "decision" in summary:
            assert tags[TAG.method_decision(name)] == summary["decision"]


def test_blocked_and_in_progress_answers_keep_their_layout(sqlite_uri):
    log_series("rec-blocked")
    bad = {"evidence_type": "correctness", "status": "invalid", "run_valid": False,
           "issues": ["numerical"], "first_failure": "blocks.0.mlp", "reproducible": True}
    pg.log_attempt("rec-blocked", "candidate", CANDIDATE, latency_ms=50, quality=0.1, validity=bad)
    result = pg.evaluate_group("rec-blocked", dry_run=True)
    assert (result["decision"], result["reason"], result["failed_checks"]) == (
        "blocked_by_correctness", "run_invalid", ["run_valid"])
    assert result["issues"] == ["numerical"] and result["reproducible"] is True
    assert "messages" not in result and "contention_runs" not in result  # the evaluator's own answer
    assert result["method"] == "seed" and result["candidate"]["attempted_runs"] == 6


def test_an_evaluation_overrides_its_verdict_without_touching_the_rule_s():
    runs = [{"ok": True, "latency_ms": 10.0 + i, "quality": 1.0, "run_id": f"r{i}"} for i in range(5)]
    policy = rules.Policy()
    decision = rules.judge(runs, runs, policy)
    judged = Judged(decision, Change("x", "1", "2"), failed_checks=tuple(decision.failed_checks),
                    contention_runs={})
    evaluation = Evaluation(group="g", experiment_id="0", policy=policy, judged=judged, views=(), attempts=(),
                            decision_key="k", verdict=decision.verdict, reason=decision.reason)
    later = evaluation.decided("rerun", "attempts_not_synced")
    assert later.to_dict()["decision"] == "rerun" and later.to_dict()["reason"] == "attempts_not_synced"
    assert evaluation.to_dict()["decision"] == decision.verdict  # the record it came from is unchanged
    assert later.to_dict()["messages"] == decision.messages
    assert later.to_dict()["changed_variable"] == "x"


def test_the_attempts_view_reads_arm_outcome_round_and_the_judged_figure_first_in_the_arm_s_colour(sqlite_uri):
    from mlflow_perfgate.tracking._schema import ARM_COLORS

    ids = log_series("rec-view")
    result = pg.evaluate_group("rec-view", latency="raw")
    client = MlflowClient()
    experiment = client.get_experiment(result["experiment_id"])
    state = json.loads(experiment.tags[f"mlflow.sharedViewState.{result['view_key']}"])
    # the figures rounded (tags: MLflow's table cannot round a metric; tests/test_ui_views.py)
    assert state["selectedColumns"][:5] == ["tags.`perfgate.arm`", "tags.`perfgate.ok`", "tags.`perfgate.pair`",
                                            "tags.`perfgate.rounded.latency_ms`", "tags.`perfgate.rounded.quality`"]
    assert state["selectedColumns"][5:] == ["params.`checkpoint`", "tags.`perfgate.failure`"]
    for run_id in ids:
        run = client.get_run(run_id)
        assert run.data.tags[TAG.RUN_COLOR] == ARM_COLORS[run.data.tags[TAG.ARM]]
    note = client.get_run(result["decision_run_id"]).data.tags[TAG.NOTE]
    # what the change did, then why: both above the fold
    assert note.splitlines()[2].startswith("- estimate (seed): the typical step (median of the steps): an improvement")
    assert note.splitlines()[3].startswith("- reason: `declared_thresholds_checked`")


def test_the_project_run_a_decision_nests_under_carries_its_verdict_in_its_name(sqlite_uri):
    client = MlflowClient()
    project = client.create_run("0", run_name="painted-owl-7", tags={"mlflow.project.entryPoint": "main"})
    ids = log_series("rec-project")
    for run_id in ids:
        client.set_tag(run_id, TAG.PARENT, project.info.run_id)
    result = pg.evaluate_group("rec-project")
    assert result["decision"] == "accept"
    assert client.get_run(project.info.run_id).info.run_name == "ACCEPT: painted-owl-7"  # seen in the run list
    # a run of ours is never renamed for a decision under it (a comparison run is named by its own)
    assert client.get_run(result["decision_run_id"]).info.run_name.startswith("ACCEPT: ")


def test_a_comparison_under_a_project_run_names_it_after_its_verdict(sqlite_uri):
    from mlflow_perfgate.harness import compare

    client = MlflowClient()
    project = client.create_run("0", run_name="main-job", tags={"mlflow.project.entryPoint": "main"}).info.run_id
    result = compare("tinylm", {"input_shape": "2,16", "steps": 2, "warmup": 0}, {"checkpoint": True}, attempts=2,
                     min_valid_runs=2, supervised=False, progress=False, parent_run_id=project,
                     allow_undecidable=True)
    verdict = result["decision"].upper().replace("_", " ")
    assert client.get_run(project).info.run_name == f"{verdict}: main-job"
    assert client.get_run(result["decision_run_id"]).data.tags[TAG.PARENT] == project
