"""The broadened lab's own parts (``benchmarks/lab_neighbours.py``): its neighbours start and end by
PID, its effects are sized from the calibration, and its judging reads what each configuration says.

Nothing here runs ``compare``: the rows are hand-made, with known truths.
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import lab_neighbours as lab  # noqa: E402


@pytest.mark.parametrize("kind", ["membw", "duty", "storm", "drift", "mix", "torchjob", "disk", "square"])
def test_each_neighbour_kind_starts_and_is_ended_by_pid(kind):
    plan = lab.neighbour_plan(kind, 0.01)
    assert plan
    with lab.Neighbours(plan, horizon_s=30) as hood:
        pids = [p.pid for p in hood.processes]
        hood.check()  # alive while the block runs
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            import os

            os.kill(pid, 0)


def test_a_neighbour_ends_itself_at_its_horizon():
    with lab.Neighbours(lab.neighbour_plan("duty", 0.01), horizon_s=0.5) as hood:
        time.sleep(2.0)
        with pytest.raises(RuntimeError, match="ended early"):
            hood.check()


def test_candidate_units_give_the_effect():
    calibration = {"step_ms": 10.0, "unit_ms": 0.1, "base_units": 100, "base_step_ms": 20.0}
    for effect in (-0.15, -0.07, 0.0, 0.07, 0.15):
        units = lab.candidate_units(effect, calibration)
        ratio = (10.0 + units * 0.1) / 20.0
        assert ratio == pytest.approx(1 + effect, abs=0.005)


def _rows(kind, effect, rounds=12, noise=0.01, seed=1):
    rng = random.Random(seed)
    rows = []
    for pair in range(rounds):
        shared = math.exp(rng.gauss(0, 0.1))  # what moves both arms in a round
        for arm, factor in (("baseline", 1.0), ("candidate", 1 + effect)):
            steps = [10 * shared * factor * math.exp(rng.gauss(0, noise)) for _ in range(30)]
            steps.sort()
            rows.append({"kind": kind, "effect": effect, "arm": arm, "ok": True, "pair": pair, "wall_s": 1.0,
                         "load": 1.0, "latency_ms": (steps[14] + steps[15]) / 2, "step_p10_ms": steps[3],
                         "fastest_step_ms": steps[0], "step_mean_ms": sum(steps) / 30, "step_p95_ms": steps[28]})
    return rows


def test_analysis_reads_each_configuration_s_verdicts():
    rows = _rows("quiet", 0.0) + _rows("quiet", -0.15, seed=2) + _rows("quiet", 0.15, seed=3)
    found = lab.analyse(rows, [10], configs=("paired/raw", "pyperf"))
    rates = found["rates"]
    assert rates[("quiet", -0.15, 10, "paired/raw", "improvement")] == (1.0, 3)  # 3 windows of 10 in 12 rounds
    assert rates[("quiet", 0.15, 10, "paired/raw", "non_regression")][0] == 1.0
    assert rates[("quiet", 0.0, 10, "paired/raw", "improvement")][0] == 0.0
    assert found["spread"][("quiet", "latency_ms")] < 0.05  # the shared factor cancels within a round
    text = lab.report(found, ["quiet"], [10], configs=("paired/raw", "pyperf"))
    assert "identical falsely accepted <= 2%" in text and "| +0.15 | 10 |" in text


def test_the_lab_workload_shapes_its_candidate_s_steps():
    """The validity cases' truth, step by step: a stall every 5th measured step, a fast path, slow first steps."""
    import noise_lab_workload

    conditions = {"input_shape": "2,16", "warmup": 2, "extra_units": 10, "step_units": 20}
    stall = noise_lab_workload.make({**conditions, "shape": "stall"})
    assert [stall.factor(i) for i in (-1, 0, 1, 4, 5, 10)] == [1.0, 3.0, 1.0, 1.0, 3.0, 3.0]
    fast = noise_lab_workload.make({**conditions, "shape": "fast_path"})
    factors = [fast.factor(i) for i in range(8)]
    assert factors.count(0.65) == 2 and factors.count(1.12) == 6
    assert sum(factors) / 8 == pytest.approx(1.0025) and sorted(factors)[4] == 1.12  # mean flat, typical +12%
    first = noise_lab_workload.make({**conditions, "shape": "slow_first"})
    assert [first.factor(i) for i in range(5)] == [2.5, 2.5, 2.5, 1.0, 1.0]
    assert noise_lab_workload.make({**conditions, "shape": "none"}).factor(0) == 1.0
    done = []
    stall.extra_work = lambda units=None: done.append(units)
    for _ in range(8):  # 2 warm-up steps, then measured steps 0..5: the stall at 0 and 5
        stall.step()
    assert done == [None, None, 50, None, None, None, None, 50]  # 10 + (3 - 1) x 20 units
    with pytest.raises(ValueError, match="shape must be one of"):
        noise_lab_workload.make({**conditions, "shape": "spiky"})


def test_the_validity_report_marks_an_accepted_slower_candidate():
    rows = _rows("quiet", 0.3, seed=4)  # slower in every figure: never accepted, rejected
    for row in rows:
        row["effect"] = "stall"
    found = lab.analyse(rows, [10], configs=("paired/raw", "pyperf"))
    text = lab.report_validity(found, ["quiet"], [10], configs=("paired/raw", "pyperf"))
    assert "| quiet | stall | 10 | 0% / 100% [3] |" in text
    assert "| never accepted (any shape, any n) | ok 0%" in text and "| stall rejected >= 90%, n=10 | ok 100%" in text
    for row in rows:  # the same rows read as a speedup: an accepted "slower" candidate is a MISS
        if row["arm"] == "candidate":
            for key in ("latency_ms", "step_p10_ms", "fastest_step_ms", "step_mean_ms", "step_p95_ms"):
                row[key] /= 1.69
    text = lab.report_validity(lab.analyse(rows, [10], configs=("paired/raw",)), ["quiet"], [10],
                               configs=("paired/raw",))
    assert "| never accepted (any shape, any n) | MISS 100%" in text


def test_the_decisive_report_gives_medians_per_cell():
    rows = [{"kind": "quiet", "effect": -0.15, "mode": "improvement", "decision": d, "reason": None, "rounds": r,
             "wall_s": w, "measured_s": m, "load": 1.0}
            for d, r, w, m in (("accept", 6, 9.0, 3.0), ("accept", 8, 12.0, 4.0), ("rerun", 20, 30.0, 10.0))]
    text = lab.report_decisive(rows, ["quiet"])
    assert "| quiet | -0.15 | improvement | 2/3 | 1 | 8 | 12.0 | 4.0 | 3.00 | 1.00 |" in text


def test_the_threads_report_sets_each_interleaving_beside_the_truth():
    rows = []
    for mode, factor in (("attempts", 0.75), ("steps", 0.78)):
        for row in _rows("quiet", factor - 1, rounds=4, seed=5):
            rows.append({**row, "effect": f"threads:{mode}", "decision": "accept"})
    text = lab.report_threads(rows, ["quiet"])
    line = next(line for line in text.splitlines() if line.startswith("| quiet |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert float(cells[1]) == pytest.approx(0.75, abs=0.02) and float(cells[2]) == pytest.approx(0.78, abs=0.02)
    assert cells[5:7] == ["accept", "accept"]
    assert "| duty |" not in lab.report_threads(rows, ["quiet", "duty"])  # a kind not collected is left out
