"""The suite's error control on noise-lab pools (``benchmarks/noise_lab_suite.py``), on hand-made pools.

Nothing here runs an attempt: the pools are lognormal rows in the CSV's shape, so the windows'
evidence, the gate over drawn suites and the table's rows can be checked where the answer is known.
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import noise_lab as lab  # noqa: E402
import noise_lab_suite as nls  # noqa: E402


def _pool(rounds: int, effect: float, seed: int, step_mode: str = "process") -> dict:
    rng = random.Random(seed)
    pool = {}
    for r in range(rounds):
        shared = rng.lognormvariate(0, 0.02)  # a round's load, seen by both arms
        pool[r] = [{"arm": arm, "round": r, "ok": True, "failure": None, "quality": 0.5, "wall_s": 1.0,
                    "latency_ms": 20.0 * factor * shared * rng.lognormvariate(0, 0.01),
                    "uncontended_latency_ms": None, "condition": "quiet", "effect": effect, "step_mode": step_mode}
                   for arm, factor in (("baseline", 1.0), ("candidate", 1.0 + effect))]
    return pool


def test_every_window_gives_one_entry_of_evidence_in_time_order():
    evidence = nls.pool_evidence(_pool(14, 0.2, seed=1), 10, "paired", "raw")
    assert len(evidence) == 5  # rounds 0-9, 1-10, ..., 4-13
    assert all(item.verdict == "reject" for item in evidence)  # 20% slower, 1% noise: clear


def test_the_gate_finds_the_slowed_entry_and_holds_the_identical_ones():
    identical = nls.pool_evidence(_pool(30, 0.0, seed=2), 10, "paired", "raw")
    slowed = nls.pool_evidence(_pool(30, 0.2, seed=3), 10, "paired", "raw")
    rates = nls.suite_rates(identical, slowed, entries=20, suites=40, rng=np.random.default_rng(0))
    assert set(rates) == {"own", "holm", "bh", "found_holm", "found_bh", "beside"}
    assert rates["found_holm"] == rates["found_bh"] == 1.0
    assert rates["holm"] == rates["beside"] == 0.0  # identical arms within 5%: nothing to reject
    assert rates["holm"] <= rates["own"] or rates["own"] == 0.0


def test_the_table_has_a_row_per_condition_and_method(tmp_path, capsys):
    path = tmp_path / "lab.csv"
    rows = [row for effect, seed in ((0.0, 4), (0.2, 5)) for rows_ in _pool(12, effect, seed).values()
            for row in rows_]
    # The interleave hook's identical arms beside the process rounds, their round numbers the same:
    # judged with them, each window would hold two attempts per arm and round.
    rows += [row for rows_ in _pool(12, 0.5, seed=6, step_mode="steps").values() for row in rows_
             if not row.update(effect=0.0)]
    fields = list(lab.FIELDS)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for seq, row in enumerate(rows):
            full = dict.fromkeys(fields, "")
            full.update({key: value for key, value in row.items() if key in full})
            full.update(seq=seq, cycle=0, block=0, position=0, extra_units=0, unit_size=128, started_s=float(seq),
                        ok="true", torch_threads=2, quality=0.5)
            writer.writerow(full)
    assert nls.main([str(path), "--suites", "5", "--n", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line.startswith("| quiet |")]
    assert [line.split("|")[2].strip() for line in table] == ["robust", "paired"]
    assert table[1].split("|")[3].strip() == "3 (1)"  # 12 rounds: 3 windows of 10, 1 disjoint
    assert [line.split("|")[4].strip() for line in table] == ["0.0%", "0.0%"]  # no 50%-slower rows pooled in
    assert "process rounds" in lines[0]
    assert nls.main([str(path), "--suites", "5", "--n", "10", "--step-mode", "steps"]) == 0
    out = capsys.readouterr().out
    assert "steps rounds" in out and "no identical or 20%-slower pool" in out
