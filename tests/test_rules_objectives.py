"""Objectives: memory and throughput, with hand-computed figures; latency stays the specification's."""

import pytest

from mlflow_perfgate.rules import evaluate_regression
from mlflow_perfgate.rules._objectives import evaluate_objective, objective_for_signal


def runs(latencies, quality=0.9, **metric_lists):
    out = []
    for index, latency in enumerate(latencies):
        run = {"ok": True, "latency_ms": latency, "quality": quality}
        for key, values in metric_lists.items():
            run[key] = values[index]
        out.append(run)
    return out


BASE_MS = [100, 100, 101, 99, 100]
BASE_MEM = [200, 200, 200, 200, 200]


def test_latency_objective_is_the_specification():
    b = runs(BASE_MS)
    c = runs([88, 90, 89, 91, 87])
    result = evaluate_objective(b, c)
    exact = evaluate_regression(b, c)
    assert {k: result[k] for k in exact} == exact and result["objective"] == "latency"


def test_memory_accept_hand_computed():
    b = runs(BASE_MS, peak_mem_mib=BASE_MEM)
    c = runs([128, 126, 127, 129, 128], peak_mem_mib=[70, 70, 71, 70, 69])  # checkpointing
    result = evaluate_objective(b, c, objective="memory")
    assert result["decision"] == "accept", result["messages"]
    assert result["memory_reduction"] == pytest.approx((200 - 70) / 200)  # 0.65
    assert result["latency_cost"] == pytest.approx(0.28)  # median 128 vs 100
    assert result["candidate"]["median_peak_mem_mib"] == 70
    # P95 ratio 129 / 101 = 1.277 <= 1.05 * 1.3 = 1.365
    assert result["p95_ok"]
    # the same change judged on latency is rejected
    assert evaluate_objective(b, c, objective="latency")["decision"] == "reject"


def test_memory_rejects_too_small_a_reduction_and_too_high_a_cost():
    b = runs(BASE_MS, peak_mem_mib=BASE_MEM)
    small = runs(BASE_MS, peak_mem_mib=[185] * 5)  # 7.5% < 10%
    result = evaluate_objective(b, small, objective="memory")
    assert result["failed_checks"] == ["memory_reduction_ok"]
    assert "7.5%" in result["messages"]["memory_reduction_ok"] and "200 MiB" in result["messages"]["memory_reduction_ok"]
    slow = runs([140] * 5, peak_mem_mib=[100] * 5)  # cost 40% > 30%
    result = evaluate_objective(b, slow, objective="memory")
    assert "latency_cost_ok" in result["failed_checks"] and "p95_ok" in result["failed_checks"]
    assert result["latency_cost"] == pytest.approx(0.40)


def test_memory_boundaries_are_inclusive():
    b = runs([100] * 5, peak_mem_mib=[100] * 5)
    c = runs([130] * 5, peak_mem_mib=[90] * 5)  # exactly 10% less memory, exactly 30% slower
    result = evaluate_objective(b, c, objective="memory", maximum_p95_ratio=1.0)
    assert result["memory_reduction_ok"] and result["latency_cost_ok"] and result["p95_ok"]
    assert result["decision"] == "accept"


def test_throughput_mirrors_latency():
    b = runs(BASE_MS, throughput_tok_s=[1000, 1000, 990, 1010, 1000])
    c = runs(BASE_MS, throughput_tok_s=[1200, 1190, 1210, 1200, 1200])
    result = evaluate_objective(b, c, objective="throughput")
    # baseline median 1000, nearest-rank P5 of 5 = the smallest, 990: noise 1%
    assert result["baseline_noise"] == pytest.approx(0.01)
    assert result["observed_improvement"] == pytest.approx(0.2)
    assert result["decision"] == "accept"
    worse = runs(BASE_MS, throughput_tok_s=[1020] * 5)
    result = evaluate_objective(b, worse, objective="throughput")
    assert result["failed_checks"] == ["improvement_ok"]
    tail = runs(BASE_MS, throughput_tok_s=[1300, 1300, 1300, 1300, 500])
    assert not evaluate_objective(b, tail, objective="throughput")["p95_ok"]


def test_objective_preconditions_and_errors():
    b = runs(BASE_MS, peak_mem_mib=BASE_MEM)
    assert evaluate_objective(b[:2], b[:2], objective="memory")["reason"] == "insufficient_valid_runs"
    failed = b + [{"ok": False, "failure": "oom"}]
    result = evaluate_objective(b, failed, objective="memory")
    assert "failure_rate_ok" in result["failed_checks"]
    with pytest.raises(ValueError, match="objective must be one of"):
        evaluate_objective(b, b, objective="energy")
    with pytest.raises(KeyError, match="throughput_tok_s"):
        evaluate_objective(b, b, objective="throughput")
    with pytest.raises(ValueError, match="min_memory_reduction"):
        evaluate_objective(b, b, objective="memory", min_memory_reduction=1.0)
    with pytest.raises(ValueError, match="peak_mem_mib"):
        evaluate_objective(b, runs(BASE_MS, peak_mem_mib=[float("nan")] * 5), objective="memory")


def test_objective_for_signal():
    assert objective_for_signal("memory") == "memory"
    assert objective_for_signal("time") == "latency"
    assert objective_for_signal("none") == "latency"


def test_objective_boundaries_decide_the_same_in_any_unit():
    """Before: 3 -> 2.7 MiB (exactly 10% less) and 0.7 -> 0.91 ms (exactly 30% slower) were both refused."""
    b = runs([0.7] * 5, peak_mem_mib=[3] * 5)
    c = runs([0.91] * 5, peak_mem_mib=[2.7] * 5)
    result = evaluate_objective(b, c, objective="memory")
    assert result["memory_reduction"] == pytest.approx(0.10) and result["latency_cost"] == pytest.approx(0.30)
    assert result["memory_reduction_ok"] and result["latency_cost_ok"] and result["decision"] == "accept"
    for scale in (1, 10, 0.1, 7):
        scaled = evaluate_objective(runs([100] * 5, peak_mem_mib=[30 * scale] * 5),
                                    runs([130] * 5, peak_mem_mib=[27 * scale] * 5), objective="memory")
        assert scaled["decision"] == "accept", scale
    # exactly 5% more throughput at 3 tok/s (0.04999999999999997 as computed)
    tp = evaluate_objective(runs(BASE_MS, throughput_tok_s=[3] * 5), runs(BASE_MS, throughput_tok_s=[3.15] * 5),
                            objective="throughput")
    assert tp["improvement_ok"] is True and tp["decision"] == "accept"
    short = evaluate_objective(runs(BASE_MS, throughput_tok_s=[3] * 5), runs(BASE_MS, throughput_tok_s=[3.149] * 5),
                               objective="throughput")
    assert short["failed_checks"] == ["improvement_ok"]
