"""The objective follows the hypothesis: TinyLM checkpointing judged on memory and on latency."""

from __future__ import annotations

import pytest

import mlflow_perfgate as pg
from mlflow_perfgate.harness import compare

SHAPE = {"input_shape": "4,64", "warmup": 1, "steps": 4}


@pytest.mark.slow
def test_checkpointing_accepted_on_memory_and_rejected_on_latency(sqlite_uri):
    # A generous latency budget: on a shared 2-core machine checkpointing's cost swings widely;
    # what this test pins is that the objective, not the noise, changes the verdict.
    memory = compare("tinylm", SHAPE, {"checkpoint": True}, attempts=3, supervised=False, progress=False,
                     objective="memory", min_valid_runs=3, maximum_latency_cost=10.0, env_mismatch="warn")
    assert memory["objective"] == "memory"
    assert memory["memory_reduction"] >= 0.10, memory["messages"]
    assert memory["decision"] == "accept", (memory["reason"], memory["failed_checks"], memory["messages"])
    latency = pg.evaluate_group(memory["group"], objective="latency", min_valid_runs=3, env_mismatch="warn")
    assert latency["decision"] == "reject" and "improvement_ok" in latency["failed_checks"]
    assert latency["decision_run_id"] != memory["decision_run_id"]
    frame = pg.decisions(group=memory["group"])
    assert list(frame["objective"]) == ["latency", "memory"]
    assert frame.iloc[1]["memory_reduction"] == pytest.approx(memory["memory_reduction"])
    assert frame.iloc[1]["candidate_median_peak_mem_mib"] < frame.iloc[1]["baseline_median_peak_mem_mib"]


def test_comparison_objective_is_used_by_a_later_evaluate(sqlite_uri):
    result = compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 2}, {"checkpoint": True},
                     attempts=2, supervised=False, progress=False, objective="memory", min_valid_runs=2,
                     maximum_latency_cost=5.0, env_mismatch="warn")
    again = pg.evaluate_group(result["group"], min_valid_runs=2, maximum_latency_cost=5.0, env_mismatch="warn")
    assert again["objective"] == "memory"  # read from the comparison run


@pytest.mark.slow
def test_until_decisive_adds_interleaved_pairs_up_to_the_cap(sqlite_uri):
    result = compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 2}, {"checkpoint": True},
                     attempts=2, supervised=False, progress=False, method="robust", min_valid_runs=2,
                     until_decisive=True, max_attempts=4, env_mismatch="warn")
    per_arm = result["baseline"]["attempted_runs"]
    assert per_arm == result["candidate"]["attempted_runs"] and 2 <= per_arm <= 4
    if result["decision"] == "rerun":
        assert per_arm == 4
    assert result["method"] == "robust" and result["robust"]["p_value"] is not None
