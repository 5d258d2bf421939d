"""The noise lab's pure parts (``benchmarks/noise_lab.py``), on tiny hand-made inputs.

Nothing here runs an attempt or starts a neighbour: the schedules, the calibration
arithmetic, the resampling windows, the uncontended latency, the records a window gives
``rules.decide``, the reference tools' verdicts, the rates, the targets and the CSV round trip.
"""

from __future__ import annotations

import csv
import math
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import noise_lab as lab  # noqa: E402

from mlflow_perfgate.rules._stats import step_quantile  # noqa: E402


# --- schedules ---------------------------------------------------------------------------------


def test_burst_schedule_is_seeded_alternating_and_bounded():
    schedule = lab.burst_schedule(7, 60.0)
    assert schedule == lab.burst_schedule(7, 60.0)
    assert schedule != lab.burst_schedule(8, 60.0)
    for start, end in schedule:
        assert 0 <= start < end <= 60.0
        assert end - start <= 3.0 + 1e-12
        if end < 60.0:
            assert end - start >= 0.5 - 1e-12
    for (_, end), (start, _) in zip(schedule, schedule[1:]):
        assert 0.5 - 1e-12 <= start - end <= 3.0 + 1e-12  # an off period between two on ones
    # Roughly half the time on, over a long horizon.
    on = sum(end - start for start, end in lab.burst_schedule(1, 3600.0))
    assert 0.4 * 3600 < on < 0.6 * 3600


def test_burst_schedule_refuses_bad_ranges():
    with pytest.raises(ValueError, match="low <= high"):
        lab.burst_schedule(1, 10.0, low=2.0, high=1.0)
    assert lab.burst_schedule(1, 0.0) == []


def test_busy_neighbours_averages_the_overlap():
    schedules = [[(0.0, 2.0)], [(1.0, 3.0)]]
    t0 = 100.0
    assert lab.busy_neighbours(schedules, t0, 100.0, 102.0) == pytest.approx(1.5)  # 2 s + 1 s over 2 s
    assert lab.busy_neighbours(schedules, t0, 103.0, 104.0) == 0.0
    assert lab.busy_neighbours(schedules, t0, 101.5, 101.5) == 2.0  # an instant: neighbours on then
    assert lab.busy_neighbours([], t0, 100.0, 101.0) == 0.0


def test_neighbour_plan_per_condition():
    assert lab.neighbour_plan("quiet", 1, 0, 60.0, [0, 1]) == ([], [])
    schedules, cores = lab.neighbour_plan("steady", 1, 0, 60.0, [0, 1])
    assert schedules == [[(0.0, 60.0)], [(0.0, 60.0)]] and cores == [0, 1]
    schedules, cores = lab.neighbour_plan("bursty", 1, 0, 60.0, [0])
    assert len(schedules) == 2 and cores == [0, 0] and schedules[0] != schedules[1]
    assert lab.neighbour_plan("bursty", 1, 0, 60.0, [0, 1]) == lab.neighbour_plan("bursty", 1, 0, 60.0, [0, 1])
    with pytest.raises(ValueError, match="condition"):
        lab.neighbour_plan("loud", 1, 0, 60.0, [0])


def test_block_plan_alternates_and_splits_the_rounds():
    plan = lab.block_plan(["quiet", "steady", "bursty"], 5, 2)
    assert plan == [(0, "quiet", 3), (0, "steady", 3), (0, "bursty", 3),
                    (1, "bursty", 2), (1, "steady", 2), (1, "quiet", 2)]
    assert lab.block_plan(["quiet"], 1, 2) == [(0, "quiet", 1)]


# --- calibration ---------------------------------------------------------------------------------


def test_extra_fraction_gives_the_ratio():
    assert lab.extra_fraction(0.2) == 0.2
    assert lab.extra_fraction(0.0) == 0.0
    assert lab.extra_fraction(-0.2) == pytest.approx(0.25)  # 1 / 1.25 = 0.8
    assert lab.extra_fraction(-0.05) == pytest.approx(0.05 / 0.95)
    with pytest.raises(ValueError, match="effect"):
        lab.extra_fraction(-1.0)


def test_unit_cost_is_the_median_round_difference():
    # Rounds: plain 20 ms; 100 units cost 10, 11 and 30 ms (one contended round): median 11 / 100.
    assert lab.unit_cost_ms([20.0, 20.0, 20.0], [30.0, 31.0, 50.0], 100) == pytest.approx(0.11)
    with pytest.raises(ValueError, match="did not show"):
        lab.unit_cost_ms([20.0, 21.0], [20.0, 20.0], 100)
    with pytest.raises(ValueError, match="as many"):
        lab.unit_cost_ms([20.0], [30.0, 31.0], 100)
    with pytest.raises(ValueError, match="units"):
        lab.unit_cost_ms([20.0], [30.0], 0)


def test_arm_units_put_the_work_on_the_right_arm():
    step, unit = 20.0, 0.1
    assert lab.arm_units(0.0, step, unit) == (0, 0)
    assert lab.arm_units(0.2, step, unit) == (0, 40)  # 4 ms on the candidate
    assert lab.arm_units(-0.2, step, unit) == (50, 0)  # 5 ms on the baseline: 20 / 25 = 0.8
    assert lab.arm_units(0.05, step, unit) == (0, 10)
    for effect in (-0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2):
        units = lab.arm_units(effect, step, unit)
        assert lab.expected_ratio(units, step, unit) == pytest.approx(1 + effect, abs=0.003)
    with pytest.raises(ValueError, match="> 0"):
        lab.arm_units(0.1, 0.0, unit)


def test_effect_list():
    assert lab.effect_list([0.05, 0.2]) == [0.0, -0.05, -0.2, 0.05, 0.2]


# --- windows and latencies -----------------------------------------------------------------------


def test_windows_are_consecutive_rounds_in_time_order():
    assert lab.windows([3, 1, 0, 2, 4], 3) == [[0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert lab.windows(range(5), 2, stride=2) == [[0, 1], [2, 3]]
    assert lab.windows(range(5), 5) == [[0, 1, 2, 3, 4]]
    assert lab.windows(range(4), 5) == []
    assert lab.windows([0, 0, 1], 2) == [[0, 1]]  # a round is one round however many rows it holds
    with pytest.raises(ValueError, match="positive"):
        lab.windows(range(5), 0)


def test_uncontended_latency_keeps_the_quiet_steps():
    times = [10.0, 11.0, 30.0, 12.0]
    assert lab.uncontended_latency(times, [0.0, 0.05, 0.9, 0.01]) == 11.0  # 30 ms dropped
    assert lab.uncontended_latency(times, [0.0, 0.5, 0.9, 0.01]) == 11.0  # half kept: still a figure
    assert lab.uncontended_latency(times, [0.0, 0.5, 0.9, 0.6]) is None  # a quarter kept
    assert lab.uncontended_latency(times, [None, 0.0, None, None]) is None
    assert lab.uncontended_latency(times, None) is None
    assert lab.uncontended_latency([], []) is None
    assert lab.uncontended_latency(times, [0.2] * 4, bound=0.3) == 11.5


def _row(arm, round_, latency, *, ok=True, uncontended=None, wall=1.0, condition="quiet", effect=0.0, **extra):
    return {"arm": arm, "round": round_, "ok": ok, "failure": None if ok else "timeout after 1.0s",
            "latency_ms": latency if ok else None, "quality": 0.5 if ok else None,
            "uncontended_latency_ms": uncontended, "wall_s": wall, "condition": condition, "effect": effect,
            "step_mode": "process", **extra}


def test_window_records_keep_failures_and_leave_out_figureless_attempts():
    rows = [_row("baseline", 0, 10.0, uncontended=9.0), _row("candidate", 0, 11.0),
            _row("candidate", 1, None, ok=False), _row("baseline", 1, 12.0, uncontended=10.0)]
    base, cand = lab.window_records(rows, "raw")
    assert base == [{"ok": True, "latency_ms": 10.0, "quality": 0.5, "pair": 0},
                    {"ok": True, "latency_ms": 12.0, "quality": 0.5, "pair": 1}]
    assert cand == [{"ok": True, "latency_ms": 11.0, "quality": 0.5, "pair": 0},
                    {"ok": False, "failure": "timeout after 1.0s", "pair": 1}]
    base, cand = lab.window_records(rows, "uncontended")
    assert [r["latency_ms"] for r in base] == [9.0, 10.0]
    assert cand == [{"ok": False, "failure": "timeout after 1.0s", "pair": 1}]  # no uncontended figure: left out
    # fastest: each attempt's fastest measured step; an attempt without steps gives no figure
    rows[0]["step_times_ms"], rows[1]["step_times_ms"] = [10.5, 9.5, 11.0], []
    base, cand = lab.window_records(rows, "fastest")
    assert [r["latency_ms"] for r in base] == [9.5]
    assert cand == [{"ok": False, "failure": "timeout after 1.0s", "pair": 1}]
    # p10: the 10th percentile of its steps, as the harness writes it (Harrell-Davis)
    base, cand = lab.window_records(rows, "p10")
    assert base[0]["latency_ms"] == pytest.approx(step_quantile([10.5, 9.5, 11.0], 0.1)) and len(base) == 1
    assert 9.5 < base[0]["latency_ms"] < 10.5
    with pytest.raises(ValueError, match="latency"):
        lab.window_records(rows, "cpu")


# --- the reference rules -------------------------------------------------------------------------


def test_asv_marks_and_verdicts():
    pytest.importorskip("asv")
    base = [100.0 + i for i in range(10)]
    faster = [80.0 + i for i in range(10)]
    assert lab.asv_mark(base, faster, 1.05) == "-"
    assert lab.asv_mark(faster, base, 1.05) == "+"
    assert lab.asv_mark(base, [b * 1.01 for b in base], 1.05) == " "
    assert lab.asv_mark(base, [], 1.05) == "x"
    assert lab.asv_verdict(base, faster, "improvement") == "accept"
    assert lab.asv_verdict(faster, base, "non_regression") == "reject"
    assert lab.asv_verdict(base, list(base), "improvement") == "reject"  # within the factor: not faster
    assert lab.asv_verdict(base, list(base), "non_regression") == "accept"
    # Beyond the factor but far too noisy to be significant: asv cannot tell.
    noisy_b, noisy_c = [50.0, 150.0, 100.0, 60.0, 140.0], [45.0, 140.0, 90.0, 55.0, 135.0]
    assert lab.asv_mark(noisy_b, noisy_c, 1.05) == "~"
    assert lab.asv_verdict(noisy_b, noisy_c, "improvement") == "rerun"


def test_pyperf_verdicts():
    pytest.importorskip("pyperf")
    base = [100.0 + i for i in range(10)]
    assert lab.pyperf_verdict(base, [80.0 + i for i in range(10)], "improvement") == "accept"
    assert lab.pyperf_verdict(base, [97.0 + i for i in range(10)], "improvement") == "reject"  # significant, 3%
    assert lab.pyperf_verdict(base, [120.0 + i for i in range(10)], "non_regression") == "reject"
    assert lab.pyperf_verdict(base, [103.0 + i for i in range(10)], "non_regression") == "accept"
    assert lab.pyperf_verdict(base, list(reversed(base)), "improvement") == "rerun"  # not significant
    assert lab.pyperf_verdict(base, [], "improvement") == "rerun"
    # pyperf's FIXME, kept: samples of unequal sizes make its t-test raise and count as significant.
    assert lab.pyperf_verdict(base, [90.0] + base[:-2], "improvement") == "reject"


# --- rates, targets, tables ----------------------------------------------------------------------


def test_rate_of_a_cell():
    counts = Counter({"accept": 1, "reject": 2, "rerun": 1})
    assert lab.rate(counts, "accept") == 0.25
    assert lab.rate(counts, "reject") == 0.5
    assert lab.rate(Counter(), "accept") is None
    assert lab.rate(None, "accept") is None


def _pools(rounds: int, seed: int = 3, sizes=(0.20,)) -> dict:
    """Separate-process pools under one quiet condition: lognormal noise, sigma 2% shared by a round's arms."""
    rng = random.Random(seed)
    pools = {}
    for effect in lab.effect_list(sizes):
        pool = {}
        for r in range(rounds):
            shared = rng.lognormvariate(0, 0.02)  # the round's load: both arms see it
            # (Distinct values throughout: tied log ratios send the signed-rank test to its slow
            # sign-flip enumeration.)
            pool[r] = [_row("baseline", r, 20.0 * shared * rng.lognormvariate(0, 0.01), effect=effect,
                            uncontended=20.0 * shared * rng.lognormvariate(0, 0.005)),
                       _row("candidate", r, 20.0 * (1 + effect) * shared * rng.lognormvariate(0, 0.01),
                            effect=effect, uncontended=20.0 * (1 + effect) * shared * rng.lognormvariate(0, 0.005))]
        pools[("quiet", effect)] = pool
    return pools


def test_summary_counts_every_window_and_its_wall_time():
    pools = _pools(12)
    judges = lab.available_judges()  # asv's and pyperf's when installed (the bench extra)
    summary = lab.summarize(pools, [10], stride=1, judges=judges)
    assert summary["windows"][("quiet", 0.0, 10)] == (3, 1)  # 3 sliding windows, 1 disjoint
    assert summary["walls"][("quiet", 0.0, 10)] == [20.0, 20.0, 20.0]  # 10 rounds x 2 attempts x 1 s
    for judge in judges:
        for latency in lab.LATENCIES:
            for mode in lab.MODES:
                assert sum(summary["counts"][lab.Cell("quiet", -0.2, 10, judge, latency, mode)].values()) == 3
    # A clear 20% speedup with 10 rounds and 1% noise: every statistical judge accepts it.
    for judge in ("robust", "paired") + tuple(j for j in judges if j in lab.REFERENCES):
        assert lab.cell_rate(summary, "quiet", -0.2, 10, judge, "raw", "improvement", "accept") == 1.0
        assert lab.cell_rate(summary, "quiet", 0.2, 10, judge, "raw", "non_regression", "reject") == 1.0


def _summary_of(rates: dict) -> dict:
    """A summary whose cells hold 100 windows with the given accept/reject/rerun shares."""
    counts = {}
    for cell, (accept, reject) in rates.items():
        counts[cell] = Counter({"accept": round(100 * accept), "reject": round(100 * reject),
                                "rerun": 100 - round(100 * accept) - round(100 * reject)})
    return {"counts": counts, "walls": {}, "windows": {}}


def _cells(judge, *, false_accept, false_alarm, speedup, slowdown, latency="raw", condition="steady"):
    """Cells at n = 10 and 20 for one judge: one rate for every speedup and every slowdown."""
    rates = {}
    for n in (10, 20):
        rates[lab.Cell(condition, 0.0, n, judge, latency, "improvement")] = (false_accept, 0.5)
        rates[lab.Cell(condition, 0.0, n, judge, latency, "non_regression")] = (0.9, false_alarm)
        for size in lab.EFFECT_SIZES:
            rates[lab.Cell(condition, -size, n, judge, latency, "improvement")] = (speedup, 0.0)
            rates[lab.Cell(condition, size, n, judge, latency, "non_regression")] = (0.0, slowdown)
    return rates


def test_targets_pass_and_fail_on_hand_made_rates():
    rates = {**_cells("paired", false_accept=0.01, false_alarm=0.03, speedup=0.95, slowdown=0.92),
             **_cells("asv", false_accept=0.00, false_alarm=0.00, speedup=0.50, slowdown=0.40),
             **_cells("pyperf", false_accept=0.05, false_alarm=0.10, speedup=0.97, slowdown=0.60)}
    summary = _summary_of(rates)
    targets = {t.name.split(" (")[0]: t for t in lab.check_targets(summary, "steady", "paired", "raw", [10, 20])}
    assert [t.key for t in targets.values()] == list(lab.TARGET_KEYS)
    assert targets["false accept <= 2% at every n"].held
    assert targets["false alarm <= 5% at every n"].held
    assert targets["accept a 20% speedup >= 90% at n=10"].held
    assert targets["detect a 20% slowdown >= 90% at n=10"].held
    assert targets["accept a 10% speedup >= 80% at n=20"].held
    assert targets["reruns <= 20% for a 20% effect at n=10"].held  # 5% and 8% reruns
    # asv errs less (0%) than paired (1% and 3%): only 1 point allowed above it.
    errors = targets["error rates <= asv's and pyperf's + 1 point"]
    assert not errors.held and "non_regression n=10 vs asv" in errors.detail
    assert "improvement n=10 vs asv" not in errors.detail  # 1% <= 0% + 1 point
    power = targets["power >= asv's and pyperf's in every effect cell"]
    assert not power.held and "-20% n=10 vs pyperf" in power.detail and "vs asv" not in power.detail
    # The reference tools are checked on the absolute targets only.
    names = [t.name for t in lab.check_targets(summary, "steady", "asv", "raw", [10, 20])]
    assert not any("asv's" in name for name in names)


def test_targets_skip_sizes_not_collected():
    summary = _summary_of(_cells("robust", false_accept=0.0, false_alarm=0.0, speedup=1.0, slowdown=1.0))
    names = [t.name for t in lab.check_targets(summary, "steady", "robust", "raw", [10])]
    assert "accept a 10% speedup >= 80% at n=20" not in names
    assert "accept a 20% speedup >= 90% at n=10" in names


def test_recommend_prefers_more_targets_then_raw():
    rates = {**_cells("paired", false_accept=0.0, false_alarm=0.0, speedup=1.0, slowdown=1.0),
             **_cells("paired", false_accept=0.0, false_alarm=0.0, speedup=1.0, slowdown=1.0, latency="uncontended"),
             **_cells("robust", false_accept=0.10, false_alarm=0.0, speedup=1.0, slowdown=1.0),
             **_cells("seed", false_accept=0.0, false_alarm=0.0, speedup=0.2, slowdown=0.2)}
    for judge in lab.REFERENCES:
        rates.update(_cells(judge, false_accept=0.0, false_alarm=0.0, speedup=0.5, slowdown=0.5))
    best, scored = lab.recommend(_summary_of(rates), ["steady"], [10, 20])
    assert best == ("paired", "raw")  # as good as uncontended: the raw latency needs nothing new
    assert all(t.held for t in scored[("paired", "raw")])


def test_markdown_table_shows_rates_in_percent():
    pools = _pools(6)
    judges = lab.available_judges()
    summary = lab.summarize(pools, [5], judges=judges)
    lines = lab.markdown_table(summary, "quiet", [5], judges=judges)
    assert lines[0].startswith("| judge | latency | n | windows (indep.) | false accept | false alarm |")
    assert len(lines) == 2 + len(judges) * len(lab.LATENCIES)
    paired = next(line for line in lines if line.startswith("| paired | raw | 5 |"))
    cells = [cell.strip() for cell in paired.strip("|").split("|")]
    assert cells[3] == "2 (1)"
    assert cells[4] == "0.0"  # identical arms: the signed-rank test cannot reach alpha with 5 rounds
    assert cells[-1] == "10.0"  # 5 rounds x 2 attempts x 1 s
    reruns = lab.rerun_table(summary, "quiet", [5], judges=judges)
    assert reruns[0].startswith("| judge | latency | n | improvement +0% | improvement -5% |")
    paired = next(line for line in reruns if line.startswith("| paired | raw | 5 |"))
    cells = [cell.strip() for cell in paired.strip("|").split("|")]
    counts = summary["counts"][lab.Cell("quiet", 0.0, 5, "paired", "raw", "improvement")]
    assert cells[3] == f"{100 * counts['rerun'] / sum(counts.values()):.1f}"
    assert cells[4] == "–"  # -5% not collected
    wall = lab.wall_table(summary, "quiet", [5], [0.0, 0.2])
    assert wall[2] == "| 5 | 10.0 | 10.0 |"


# --- the CSV -------------------------------------------------------------------------------------


class _Result:
    ok = True
    failure = None
    latency_ms = 12.5
    quality = 0.13
    wall_s = 0.8
    wait_share = 0.02
    step_times_ms = (12.0, 12.5, 30.0, 12.6)
    step_wait_share = (0.0, 0.01, 0.7, None)
    torch_threads = 2
    runner = "fork"


def test_csv_round_trip(tmp_path):
    row = lab.attempt_row(_Result(), seq=0, condition="bursty", cycle=1, block=4, effect=-0.1, arm="baseline",
                          round_=3, position=1, step_mode="process", units=12, unit_size=128, started_s=5.25,
                          neighbours_on=1.5, load="1.50 1.20 1.00 2/300 99", wait_bound=0.05)
    assert row["uncontended_latency_ms"] == 12.25  # 12.0 and 12.5 kept of 4 steps: half, their median
    path = tmp_path / "attempts.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=lab.FIELDS)
        writer.writeheader()
        writer.writerow(row)
    (read,) = lab.read_rows(str(path))
    assert read["ok"] is True and read["failure"] is None
    assert read["effect"] == -0.1 and read["round"] == 3 and read["loadavg_1m"] == 1.5
    assert read["step_times_ms"] == [12.0, 12.5, 30.0, 12.6]
    assert read["step_wait_share"] == [0.0, 0.01, 0.7, None]
    assert read["uncontended_latency_ms"] == 12.25 and read["torch_threads"] == 2
    assert lab.pools_of([read]) == {("bursty", -0.1): {3: [read]}}
    import gzip  # the committed results are gzipped: read the same

    zipped = tmp_path / "attempts.csv.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert lab.read_rows(str(zipped)) == [read]


def test_the_committed_lab_results_read_as_they_are():
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "noise_lab"
    rows = lab.read_rows(str(results / "full.csv.gz"))
    assert len(rows) > 1000 and {row["arm"] for row in rows} == {"baseline", "candidate"}


def test_fit_simulation_reads_plain_attempts_only():
    rows = [_row("baseline", r, 20.0 * math.exp(0.01 * (r % 5 - 2)), extra_units=0, torch_threads=2)
            for r in range(20)]
    rows.append(_row("baseline", 20, 60.0, extra_units=0, torch_threads=2))  # a contended attempt: 3x
    rows.append(_row("baseline", 21, 60.0, extra_units=0, torch_threads=2))
    rows.append(_row("candidate", 22, 500.0, extra_units=40, torch_threads=2))  # extra work: not plain
    rows.append(_row("baseline", 23, 500.0, extra_units=0, torch_threads=1))  # another thread count
    fit = lab.fit_simulation(rows, threads=2)["quiet"]
    assert fit["attempts"] == 22
    assert fit["median_ms"] == pytest.approx(20.0)
    assert fit["sigma"] == pytest.approx(1.482602218505602 * 0.01, rel=1e-6)
    assert fit["fraction"] == pytest.approx(2 / 22)
    assert fit["factors"] == pytest.approx((3.0, 3.0))


# --- identical arms sharing one process (compare --interleave steps) --------------------------------


class _Args:
    warmup, steps, threads, timeout, no_probe = 2, 10, None, 60.0, False
    unit_size, wait_bound, seed, interleave_rounds = 128, 0.05, 1, 3
    conditions = ["quiet"]


def test_interleave_hook_collects_and_reports_shared_process_rounds(monkeypatch, tmp_path, capsys):
    import mlflow_perfgate.workloads as workloads

    calls = []

    def execute(workload, conditions_a, conditions_b, *, warmup, steps, threads, timeout_s, probe, supervised,
                runner):
        calls.append((workload, (conditions_a, conditions_b)))
        first = dict(vars(_Result))
        return (type("R", (), first)(), type("R", (), {**first, "latency_ms": 12.5 * (1 + 0.01 * len(calls))})())

    monkeypatch.setattr(workloads, "run_interleaved", execute)
    path = tmp_path / "hook.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=lab.FIELDS)
        writer.writeheader()
        lab.interleave_hook(_Args(), None, {"unit_size": 128}, writer=writer, lab_t0=0.0, seq=10)
    assert len(calls) == 3 and calls[0][0] == lab.WORKLOAD and calls[0][1][0] == calls[0][1][1]
    rows = lab.read_rows(str(path))
    assert [(r["seq"], r["arm"], r["round"], r["step_mode"]) for r in rows[:2]] == [
        (10, "baseline", 0, "steps"), (11, "candidate", 0, "steps")]
    lab.report_interleaved(rows, [])
    out = capsys.readouterr().out
    assert "| quiet | steps | 3 | 1.0" in out


def test_the_lab_recommends_among_the_latency_options_compare_has():
    from mlflow_perfgate.rules._policy import LATENCIES

    assert lab.COMPARE_LATENCIES == LATENCIES


def test_a_reused_calibration_bounds_longer_attempts_by_their_steps():
    # a calibration measured at 2 + 10 steps, reused at 30 measured steps: the neighbours' time bound
    # must grow with the attempts (a first run past its horizon lost its neighbours mid-block)
    calibration = {"attempt_wall_s": 0.36}
    assert lab.attempt_wall_s(calibration, 2, 10) == pytest.approx(0.36)
    assert lab.attempt_wall_s(calibration, 2, 30) == pytest.approx(0.36 * 32 / 12)
    assert lab.attempt_wall_s({**calibration, "warmup": 2, "steps": 30}, 2, 30) == pytest.approx(0.36)
    assert lab.attempt_wall_s(calibration, 1, 2) == pytest.approx(0.36)  # never below what was measured


def test_the_judged_step_mode_never_pools_the_two_kinds_of_rounds():
    process = [{"step_mode": "process", "effect": effect} for effect in (0.0, 0.2)]
    hook = [{"step_mode": "steps", "effect": 0.0}]  # the interleave hook's identical arms beside a process run
    steps = [{"step_mode": "steps", "effect": effect} for effect in (0.0, 0.2)]
    assert lab.judged_mode(process + hook) == "process"
    assert lab.judged_mode(steps) == "steps"  # a --step-mode steps run
    assert lab.judged_mode(hook) == "steps"
    assert lab.judged_mode(process + hook, "steps") == "steps"  # asked for


def test_a_step_interleaved_round_counts_its_one_child_once():
    separate = [{"step_mode": "process", "wall_s": 1.0}, {"step_mode": "process", "wall_s": 1.5}]
    shared = [{"step_mode": "steps", "wall_s": 1.8}, {"step_mode": "steps", "wall_s": 1.8}]
    assert lab.round_wall_s(separate) == 2.5
    assert lab.round_wall_s(shared) == 1.8
