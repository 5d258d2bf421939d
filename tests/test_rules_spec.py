"""Every assertion of the specification's verification blocks (Q1 to Q4), on our rules."""

import pytest

from mlflow_perfgate.rules import (
    changed_keys,
    design_single_variable_experiment,
    evaluate_regression,
    summarize_repeated_runs,
    synthesize_evidence,
    top_hotspots,
    validate_validity_report,
)

VALID = {
    "evidence_type": "correctness", "status": "valid", "run_valid": True,
    "issues": [], "first_failure": None, "reproducible": False,
}
INVALID = {
    "evidence_type": "correctness", "status": "invalid", "run_valid": False,
    "issues": ["numerical"], "first_failure": "mlp", "reproducible": True,
}
EVENTS = [
    {"name": "forward", "total_ms": 38, "calls": 2},
    {"name": "backward", "total_ms": 74, "calls": 2},
    {"name": "optimizer", "total_ms": 18, "calls": 1},
    {"name": "dataloader", "total_ms": 52, "calls": 4},
]
WORKLOAD = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32",
            "device": "cpu", "scope": "training_step"}
BASELINE = {
    "model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
    "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False, "num_workers": 0,
}


@pytest.fixture
def bundle():
    hotspots = top_hotspots(EVENTS)
    time_evidence = {
        "evidence_type": "time", "status": "constructed_example", "workload": dict(WORKLOAD),
        "share_denominator": "sum_of_nonoverlapping_stages", "hotspot": hotspots[0],
        "interpretation_limit": "hotspot_is_candidate_not_root_cause",
    }
    memory_evidence = {
        "evidence_type": "memory", "status": "constructed_example", "workload": dict(WORKLOAD),
        "unit": "MiB", "dominant_object": "activation", "reserved_mib": 61, "capacity_mib": 64,
        "interpretation_limit": "directional_evidence_not_strategy_decision",
    }
    return {"validity": validate_validity_report(VALID), "time": time_evidence, "memory": memory_evidence}


def test_q1_validity_gate():
    ok, failed = validate_validity_report(VALID), validate_validity_report(INVALID)
    assert ok["performance_action"] == "continue"
    assert failed["performance_action"] == "stop_and_fix"
    assert failed["first_failure"] == "mlp"
    assert failed["reproducible"]
    assert {k: ok[k] for k in VALID} == VALID


@pytest.mark.parametrize("change", [{"issues": ["numerical"]}, {"run_valid": "True"}, {"first_failure": "loss"}])
def test_q1_contradictory_records_rejected(change):
    with pytest.raises(ValueError):
        validate_validity_report({**VALID, **change})


def test_q2_hotspots_and_bundle(bundle):
    hotspots = top_hotspots(EVENTS)
    assert [item["name"] for item in hotspots] == ["backward", "dataloader"]
    assert hotspots[0]["share_pct"] == round(74 / 182 * 100, 1)
    assert top_hotspots([], topk=2) == []
    assert bundle["time"]["evidence_type"] == "time"
    assert bundle["memory"]["evidence_type"] == "memory"
    assert bundle["time"]["hotspot"]["name"] == "backward"
    assert bundle["memory"]["reserved_mib"] < bundle["memory"]["capacity_mib"]
    assert bundle["time"]["workload"] == bundle["memory"]["workload"]


def test_q3_synthesis(bundle):
    capacity = synthesize_evidence(bundle)
    input_bundle = {
        "validity": VALID,
        "time": {**bundle["time"], "hotspot": {"name": "dataloader", "share_pct": 55.0}},
        "memory": {**bundle["memory"], "reserved_mib": 24},
    }
    input_evidence = synthesize_evidence(input_bundle)
    invalid = synthesize_evidence({"validity": INVALID})
    assert capacity["primary_signal"] == "memory"
    assert capacity["status"] == "ready_for_experiment"
    assert capacity["capacity_ratio"] == round(61 / 64, 3)
    assert "activation" in capacity["hypothesis"]
    assert input_evidence["primary_signal"] == "time"
    assert input_evidence["hotspot"] == "dataloader"
    assert "dataloader" in input_evidence["hypothesis"]
    assert invalid["status"] == "blocked_by_correctness"
    assert invalid["primary_signal"] == "correctness"
    assert invalid["issues"] == ["numerical"]
    assert capacity["thresholds"]["capacity_alert_ratio"] == 0.90
    assert capacity["thresholds"]["hotspot_alert_share_pct"] == 40.0
    assert capacity["observation_sources"]["memory"] == "constructed_example"
    with pytest.raises(ValueError):
        synthesize_evidence({**bundle, "memory": {**bundle["memory"], "workload": {"model": "OtherModel"}}})


def test_q4_plans_and_regression(bundle):
    capacity = synthesize_evidence(bundle)
    input_evidence = synthesize_evidence({
        "validity": VALID,
        "time": {**bundle["time"], "hotspot": {"name": "dataloader", "share_pct": 55.0}},
        "memory": {**bundle["memory"], "reserved_mib": 24},
    })
    invalid = synthesize_evidence({"validity": INVALID})
    memory_plan = design_single_variable_experiment(capacity, BASELINE, {"checkpoint": True})
    input_plan = design_single_variable_experiment(input_evidence, BASELINE, {"num_workers": 2})
    blocked_plan = design_single_variable_experiment(invalid, BASELINE)
    assert changed_keys(memory_plan) == ["checkpoint"]
    assert changed_keys(input_plan) == ["num_workers"]
    assert "num_workers" not in input_plan["fixed_conditions"]
    assert blocked_plan["action"] == "fix_correctness_first" and blocked_plan["candidate"] is None
    assert memory_plan["action"] == "run_comparison"
    assert memory_plan["candidate"] == {**BASELINE, "checkpoint": True}

    baseline_runs = [{"ok": True, "latency_ms": v, "quality": 0.900} for v in (100, 102, 99, 101, 100)]
    clean = [{"ok": True, "latency_ms": v, "quality": 0.895} for v in (88, 90, 89, 91, 87)]
    with_timeout = clean + [{"ok": False, "failure": "timeout"}]
    result = evaluate_regression(baseline_runs, with_timeout)
    assert result["candidate"]["failed_runs"] == 1
    assert result["candidate"]["failure_rate"] == 1 / 6
    assert result["candidate"]["failure_reasons"] == ["timeout"]
    assert result["decision"] == "reject"
    assert "failure_rate_ok" in result["failed_checks"]
    assert evaluate_regression(baseline_runs, clean)["decision"] == "accept"
    assert evaluate_regression(baseline_runs[:2], clean[:2])["decision"] == "rerun"
    runs = [{"ok": True, "latency_ms": x, "quality": 1} for x in [1, 2, 3, 100]]
    assert summarize_repeated_runs(runs)["median_ms"] == 2.5
    many_timeouts = clean + [{"ok": False, "failure": "timeout"}] * 50
    assert evaluate_regression(baseline_runs, many_timeouts)["decision"] == "reject"
    tail = [{"ok": True, "latency_ms": x, "quality": 0.9} for x in [80, 80, 80, 80, 200]]
    assert not evaluate_regression(baseline_runs, tail)["p95_ok"]
    poor = [{**run, "quality": 0.5} for run in clean]
    assert not evaluate_regression(baseline_runs, poor)["quality_ok"]
    with pytest.raises(ValueError):
        summarize_repeated_runs([{"ok": True, "latency_ms": float("nan"), "quality": 0.9}])


def test_accept_figures_by_hand():
    baseline_runs = [{"ok": True, "latency_ms": v, "quality": 0.900} for v in (100, 102, 99, 101, 100)]
    clean = [{"ok": True, "latency_ms": v, "quality": 0.895} for v in (88, 90, 89, 91, 87)]
    result = evaluate_regression(baseline_runs, clean)
    # baseline median 100, nearest-rank P95 of 5 samples = the 5th = 102
    assert result["baseline"]["median_ms"] == 100 and result["baseline"]["p95_ms"] == 102
    assert result["baseline_noise"] == pytest.approx(0.02)
    assert result["required_improvement"] == 0.05
    assert result["observed_improvement"] == pytest.approx(0.11)
    assert result["failed_checks"] == []
    assert result["reason"] == "declared_thresholds_checked"
    assert result["maximum_failure_rate"] == 0.0 and result["maximum_p95_ratio"] == 1.05
