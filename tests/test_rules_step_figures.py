"""The decision judges what users mean: the typical step, the mean step and the step tail, on every
shape of change (a scale, a periodic stall, a fast path, slower first steps, a bimodal step time).

Records are built as the tracking layer writes them from the step times (median, mean, nearest-rank
P95, the fastest step and the Harrell-Davis 10th percentile). Whatever the method, latency option
or mode, a slower candidate is never accepted; a uniformly faster one is.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from mlflow_perfgate.rules import decide
from mlflow_perfgate.rules._stats import nearest_rank, step_quantile

METHODS = ("seed", "robust", "paired")
LATENCIES = ("raw", "p10", "fastest")
MODES = ("improvement", "non_regression")


def record(steps, pair):
    steps = [float(s) for s in steps]
    return {"ok": True, "latency_ms": statistics.median(steps), "quality": 0.9, "pair": pair,
            "step_mean_ms": sum(steps) / len(steps), "step_p95_ms": nearest_rank(sorted(steps), 0.95),
            "fastest_step_ms": min(steps), "step_p10_ms": step_quantile(steps, 0.1)}


def arm(shape, seed, rounds=10, steps=30):
    rng = np.random.default_rng(seed)
    return [record(shape(10 * np.exp(rng.normal(0, 0.03, steps)), rng), r) for r in range(rounds)]


def same(s, rng):
    return s


def scaled(factor):
    return lambda s, rng: s * factor


def stall(s, rng):  # every 5th step 3x: median unchanged, mean +40%, throughput -29%
    s = s.copy()
    s[::5] *= 3
    return s


def fast_path(s, rng):  # 1 step in 4 35% faster, the others 12% slower: p10 reads "faster"
    s = s.copy()
    rest = np.ones(len(s), bool)
    rest[::4] = False
    s[::4] *= 0.65
    s[rest] *= 1.12
    return s


def slow_first(s, rng):  # the first 3 measured steps 2.5x (a warm-up that leaked into the steps)
    s = s.copy()
    s[:3] *= 2.5
    return s


def bimodal(s, rng):  # half the steps 30% slower, at random
    s = s.copy()
    s[rng.random(len(s)) < 0.5] *= 1.3
    return s


SLOWER = {"stall": stall, "fast_path": fast_path, "slow_first": slow_first, "bimodal": bimodal,
          "uniformly 10% slower": scaled(1.10)}


@pytest.mark.parametrize("shape", sorted(SLOWER))
def test_a_slower_candidate_of_any_shape_is_rejected_by_every_method_latency_and_mode(shape):
    base, cand = arm(same, 1), arm(SLOWER[shape], 2)
    for method in METHODS:
        for latency in LATENCIES:
            for mode in MODES:
                result = decide(base, cand, method=method, latency=latency, mode=mode)
                assert result["decision"] == "reject", (shape, method, latency, mode, result["messages"])


def test_the_stall_is_seen_by_the_mean_step_and_the_step_tail_where_the_median_is_blind():
    result = decide(arm(same, 1), arm(stall, 2), method="paired", latency="p10", mode="non_regression")
    assert {"mean_step_ok", "step_tail_ok"} <= set(result["failed_checks"])
    assert result["no_regression_ok"] is True  # the tested figure alone would have passed it
    assert result["mean_step_ratio"] == pytest.approx(1.4, rel=0.05)
    assert result["candidate"]["mean_step_ms"] > 1.3 * result["baseline"]["mean_step_ms"]


def test_the_fast_path_is_not_called_faster_on_its_10th_percentile():
    result = decide(arm(same, 1), arm(fast_path, 2), method="paired", latency="p10")
    assert result["improvement_ok"] is True  # what the low quantile alone says
    assert result["decision"] == "reject" and "typical_step_ok" in result["failed_checks"]
    assert "typical step" in result["messages"]["typical_step_ok"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("latency", LATENCIES)
def test_a_uniform_speedup_is_still_accepted(method, latency):
    result = decide(arm(same, 1), arm(scaled(0.85), 2), method=method, latency=latency)
    assert result["decision"] == "accept", result["messages"]
    assert {"mean_step_ok", "step_tail_ok"} <= set(result["messages"])


def test_records_without_step_figures_are_judged_as_before():
    """``record`` without steps: one figure per attempt, the specification's P95 over attempts only."""
    base = [{"ok": True, "latency_ms": 100.0 + i, "quality": 0.9} for i in range(6)]
    cand = [{"ok": True, "latency_ms": 80.0 + i, "quality": 0.9} for i in range(6)]
    result = decide(base, cand, method="robust")
    assert result["decision"] == "accept"
    assert not {"typical_step_ok", "mean_step_ok", "step_tail_ok"} & set(result["messages"])
    assert "mean_step_ms" not in result["candidate"]
