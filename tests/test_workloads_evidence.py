"""Time and memory evidence records, the operator profile, and what the rules make of them."""

from __future__ import annotations

import json

import pytest

from mlflow_perfgate.rules import synthesize_evidence
from mlflow_perfgate.workloads import (
    collect_memory_evidence,
    collect_time_evidence,
    make_workload,
    probe_correctness,
    profile_operators,
)

SMALL = {"input_shape": (2, 32)}


@pytest.fixture
def workload():
    built = make_workload("tinylm", SMALL)
    yield built
    built.close()


def test_time_record_has_the_spec_fields(workload):
    record = collect_time_evidence(workload, steps=2)
    assert record["evidence_type"] == "time" and record["status"] == "measured"
    assert record["share_denominator"] == "sum_of_nonoverlapping_stages"
    assert record["interpretation_limit"] == "hotspot_is_candidate_not_root_cause"
    assert record["workload"] == {"model": "TinyLM", "input_shape": [2, 32], "batch_size": 2,
                                  "dtype": "fp32", "device": "cpu", "scope": "training_step"}
    names = [stage["name"] for stage in record["stages"]]
    assert names == ["dataloader", "forward", "backward", "optimizer"]
    assert [h["name"] for h in record["hotspots"]] == sorted(
        names, key=lambda n: -next(s["total_ms"] for s in record["stages"] if s["name"] == n))
    assert record["hotspot"] == record["hotspots"][0]
    assert all(stage["calls"] == 2 for stage in record["stages"])
    assert sum(h["share_pct"] for h in record["hotspots"]) == pytest.approx(100, abs=0.3)
    assert record["step_totals_ms"] and all(t > 0 for t in record["step_totals_ms"])


def test_memory_record_has_the_spec_fields(workload):
    record = collect_memory_evidence(workload)
    assert record["evidence_type"] == "memory" and record["status"] == "estimated"
    assert record["unit"] == "MiB"
    assert record["interpretation_limit"] == "directional_evidence_not_strategy_decision"
    objects = record["objects"]
    assert set(objects) == {"parameters", "gradients", "optimizer_state", "activation"}
    assert objects["gradients"] == objects["parameters"]
    # AdamW has not stepped: its two moments per parameter are projected.
    assert objects["optimizer_state"] == pytest.approx(2 * objects["parameters"])
    assert record["methods"]["optimizer_state"] == "projected_adam_moments"
    assert record["dominant_object"] == max(objects, key=objects.get)
    assert record["reserved_mib"] == pytest.approx(sum(objects.values()))
    assert 0 < record["reserved_mib"] <= record["capacity_mib"]
    assert record["capacity_source"] == "host_total_ram"
    json.dumps(record)


def test_optimizer_state_is_measured_after_a_step(workload):
    workload.step()
    record = collect_memory_evidence(workload)
    assert record["methods"]["optimizer_state"] == "tensor_bytes"
    # exp_avg and exp_avg_sq per parameter, plus a scalar step count each.
    assert record["objects"]["optimizer_state"] >= 2 * record["objects"]["parameters"]


def test_memory_estimate_does_not_train(workload):
    before = [p.detach().clone() for p in workload.model.parameters()]
    collect_memory_evidence(workload)
    assert all((a == b).all() for a, b in zip(before, workload.model.parameters()))
    assert all(p.grad is None for p in workload.model.parameters())


def test_capacity_is_clamped_with_a_note(workload):
    record = collect_memory_evidence(workload, capacity_mib=0.001)
    assert record["reserved_mib"] == record["capacity_mib"] == 0.001
    assert record["unclamped_reserved_mib"] > 0.001
    assert record["capacity_source"] == "given" and "clamped" in record["notes"][-1]
    with pytest.raises(ValueError, match="capacity_mib must be a positive number"):
        collect_memory_evidence(workload, capacity_mib=0)


def test_checkpointing_reduces_estimated_activations():
    plain = make_workload("tinylm", {**SMALL, "input_shape": (4, 64)})
    checkpointed = make_workload("tinylm", {**SMALL, "input_shape": (4, 64), "checkpoint": True})
    a = collect_memory_evidence(plain)["objects"]["activation"]
    b = collect_memory_evidence(checkpointed)["objects"]["activation"]
    assert b < 0.5 * a


def test_rules_accept_the_bundle(workload):
    workload.step()
    bundle = {
        "validity": probe_correctness(workload),
        "time": collect_time_evidence(workload, steps=2),
        "memory": collect_memory_evidence(workload),
    }
    result = synthesize_evidence(bundle)
    assert result["status"] in {"ready_for_experiment", "need_more_evidence"}
    assert result["observation_sources"] == {"time": "measured", "memory": "estimated"}
    # A capacity close to the estimate turns it into memory pressure.
    tight = collect_memory_evidence(workload, capacity_mib=bundle["memory"]["reserved_mib"] * 1.05)
    pressed = synthesize_evidence({**bundle, "memory": tight})
    assert pressed["primary_signal"] == "memory"
    assert pressed["dominant_object"] == tight["dominant_object"]


def test_profile_writes_table_and_trace(workload, tmp_path):
    paths = profile_operators(workload, tmp_path / "profile", steps=1, warmup=0)
    table = open(paths["operator_table"]).read()
    assert "aten::" in table and "Self CPU" in table
    trace = json.load(open(paths["chrome_trace"]))
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"dataloader", "forward", "backward", "optimizer"} <= names


def test_stage_methods_are_required():
    class StepOnly:
        def step(self):
            return 0.0

        def quality(self):
            return 0.0

    with pytest.raises(TypeError, match="missing: \\['next_batch'"):
        collect_time_evidence(StepOnly())
