"""The lockstep lab's judging (``benchmarks/lab_lockstep.py``), on hand-made comparisons with known truths:
nothing here runs ``compare`` (its neighbour kinds are ``lab_neighbours``'s, tested there)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import lab_lockstep as lab  # noqa: E402


def comparison(ratio: float, rounds: int, *, seed: int = 0, spread: float = 0.005, kind: str = "quiet",
               source: str = "lockstep", effect: float = 0.0) -> dict:
    """A comparison's row whose candidate's steps are ``ratio`` times the baseline's, round by round."""
    rng = random.Random(seed)
    attempts = []
    for pair in range(rounds):
        base = 10.0 * (1 + rng.uniform(-0.05, 0.05))  # the machine's drift, shared by both arms of a round
        cand = base * ratio * (1 + rng.gauss(0, spread))
        for arm, ms in (("baseline", base), ("candidate", cand)):
            attempts.append({"arm": arm, "pair": pair, "state": "ok", "latency_ms": ms, "step_p10_ms": ms * 0.97,
                             "fastest_step_ms": ms * 0.95, "step_mean_ms": ms * 1.01, "step_p95_ms": ms * 1.05})
    return {"kind": kind, "source": source, "effect": effect, "index": seed, "rounds": rounds, "wall_s": 10.0,
            "exit": 0, "load": 0.1, "decision": None, "attempts": attempts}


def test_each_comparison_is_judged_on_its_first_ten_rounds_and_on_all_of_them():
    found = lab.verdicts(comparison(0.85, 20))
    assert {key[0] for key in found} == {10, 20}
    assert found[(10, "paired/p10", "improvement")] == found[(20, "paired/p10", "improvement")] == "accept"
    assert found[(10, "paired/p10", "non_regression")] == "accept"  # no slower: faster
    assert lab.verdicts(comparison(1.15, 10))[(10, "paired/p10", "non_regression")] == "reject"
    assert (20, "paired/p10", "improvement") not in lab.verdicts(comparison(1.0, 10))


def test_rates_count_separate_comparisons_and_the_offline_judge_is_checked_against_the_command():
    rows = [comparison(1.15, 10, seed=i, effect=0.15) for i in range(5)]
    rows[0]["decision"] = "reject"  # the command's own answer, improvement mode: agrees
    rows[1]["decision"] = "accept"  # disagrees
    found = lab.analyse(rows)
    assert found["counts"][("quiet", "lockstep", 0.15, 10, "paired/p10", "non_regression")] == [5, 5]
    assert found["counts"][("quiet", "lockstep", 0.15, 10, "paired/p10", "improvement")] == [0, 5]
    assert found["agree"] == [1, 2]


@pytest.mark.parametrize("k, n, low, high", [(0, 20, 0.0, 0.1684), (20, 20, 0.8316, 1.0), (10, 20, 0.2720, 0.7280)])
def test_exact_bounds_of_a_rate(k, n, low, high):
    found = lab.clopper_pearson(k, n)
    assert found == pytest.approx((low, high), abs=1e-4)


def test_the_report_names_a_missed_target_and_its_kind():
    rows = [comparison(1.0, 10, seed=i, spread=0.2) for i in range(8)]  # identical arms, far too noisy a machine
    rows += [comparison(1.15, 10, seed=i, effect=0.15, spread=0.3) for i in range(8)]
    text = lab.report(lab.analyse(rows), ["quiet"])
    line = next(row for row in text.splitlines() if row.startswith("| 15% slowdown rejected"))
    assert "MISS" in line and "(quiet)" in line
