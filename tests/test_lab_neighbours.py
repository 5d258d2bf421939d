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


@pytest.mark.parametrize("kind", ["membw", "duty", "storm", "drift", "mix"])
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
