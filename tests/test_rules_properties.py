"""Property-based tests of the rules: invariants that must hold for every input, not just the examples."""

from __future__ import annotations

import statistics

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mlflow_perfgate.rules import (
    changed_keys,
    design_single_variable_experiment,
    evaluate_regression,
    percentile,
    summarize_repeated_runs,
    synthesize_evidence,
    top_hotspots,
)

SETTINGS = settings(max_examples=200, deadline=None, database=None)
CHECKS = ["failure_rate_ok", "quality_ok", "p95_ok", "improvement_ok"]

positive_floats = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
positive_latency = st.one_of(st.integers(min_value=1, max_value=10_000), positive_floats)
fractions = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
qualities = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 0.895, 1.0])


def ok_run(latency, quality):
    return {"ok": True, "latency_ms": latency, "quality": quality}


def fail_run(reason):
    return {"ok": False} if reason is None else {"ok": False, "failure": reason}


successful_runs = st.builds(ok_run, positive_latency, qualities)
failed_attempts = st.builds(fail_run, st.sampled_from([None, "timeout", "oom"]))
attempts = st.lists(st.one_of(successful_runs, failed_attempts), max_size=15)
int_arm = st.lists(st.builds(ok_run, st.integers(min_value=1, max_value=1000), qualities), min_size=1, max_size=10)


@st.composite
def arm(draw, low, high):
    """One arm's attempts: mostly successes with integer latencies in [low, high], a few failures."""
    runs = draw(st.lists(st.builds(ok_run, st.integers(min_value=low, max_value=high), qualities),
                         min_size=3, max_size=12))
    runs += draw(st.lists(failed_attempts, max_size=1))
    return draw(st.permutations(runs))


# random attempts rarely reach the checks; these arms (a baseline around 100 ms, a candidate
# between 60 and 115 ms) reach accept, reject and rerun alike
baseline_arm = st.one_of(attempts, arm(98, 104), arm(95, 110))
candidate_arm = st.one_of(attempts, arm(60, 90), arm(60, 115))

thresholds = st.fixed_dictionaries({
    "min_valid_runs": st.integers(min_value=1, max_value=6),
    "min_improvement": st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.5]),
    "quality_tolerance": st.sampled_from([0.0, 0.01, 0.25]),
    "maximum_failure_rate": st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]),
    "maximum_p95_ratio": st.sampled_from([1.0, 1.05, 1.5, 3.0]),
})


# ---- percentile -------------------------------------------------------------------------------

@SETTINGS
@given(st.lists(positive_latency, min_size=1, max_size=40), fractions)
def test_percentile_is_one_of_the_values(values, fraction):
    assert percentile(values, fraction) in values


@SETTINGS
@given(st.lists(positive_latency, min_size=1, max_size=40), fractions, fractions)
def test_percentile_is_monotone_in_fraction(values, a, b):
    low, high = sorted((a, b))
    assert percentile(values, low) <= percentile(values, high)


@SETTINGS
@given(st.lists(positive_latency, min_size=1, max_size=40), fractions, st.randoms(use_true_random=False))
def test_percentile_ignores_order_and_spans_min_to_max(values, fraction, rng):
    shuffled = list(values)
    rng.shuffle(shuffled)
    assert percentile(shuffled, fraction) == percentile(values, fraction)
    assert percentile(values, 0) == min(values) and percentile(values, 1) == max(values)
    assert min(values) <= percentile(values, fraction) <= max(values)


# ---- summarize_repeated_runs ------------------------------------------------------------------

@SETTINGS
@given(attempts)
def test_summary_counts_add_up(runs):
    summary = summarize_repeated_runs(runs)
    assert summary["attempted_runs"] == len(runs)
    assert summary["valid_runs"] + summary["failed_runs"] == summary["attempted_runs"]
    assert len(summary["failure_reasons"]) == summary["failed_runs"]
    if runs:
        assert summary["failure_rate"] == summary["failed_runs"] / summary["attempted_runs"]
        assert 0 <= summary["failure_rate"] <= 1
    else:
        assert summary["failure_rate"] is None


@SETTINGS
@given(attempts)
def test_summary_statistics_over_successful_runs_only(runs):
    summary = summarize_repeated_runs(runs)
    latencies = [run["latency_ms"] for run in runs if run["ok"]]
    if not latencies:
        assert summary["median_ms"] is None and summary["p95_ms"] is None and summary["quality"] is None
        return
    assert summary["median_ms"] == statistics.median(latencies)
    assert summary["p95_ms"] == percentile(latencies, 0.95)
    assert summary["p95_ms"] in latencies
    assert min(latencies) <= summary["median_ms"] <= max(latencies)


# ---- evaluate_regression ----------------------------------------------------------------------

@SETTINGS
@given(baseline_arm, candidate_arm, thresholds)
def test_decision_consistent_with_checks(baseline, candidate, limits):
    result = evaluate_regression(baseline, candidate, **limits)
    assert result["decision"] in {"accept", "reject", "rerun"}
    if "failed_checks" not in result:
        assert result["decision"] == "rerun"
        assert result["reason"] in {"insufficient_valid_runs", "unreliable_baseline"}
        assert not any(key in result for key in CHECKS)
        return
    assert result["reason"] == "declared_thresholds_checked"
    assert result["failed_checks"] == [key for key in CHECKS if not result[key]]
    if any(result[key] is False for key in CHECKS):
        assert result["decision"] != "accept"
    assert (result["decision"] == "accept") == (result["failed_checks"] == [])
    assert result["decision"] in {"accept", "reject"}
    assert result["required_improvement"] >= limits["min_improvement"]


@SETTINGS
@given(baseline_arm, candidate_arm, thresholds, st.lists(failed_attempts, min_size=1, max_size=10),
       st.randoms(use_true_random=False))
def test_more_candidate_failures_never_turn_into_accept(baseline, candidate, limits, extra, rng):
    before = evaluate_regression(baseline, candidate, **limits)["decision"]
    more = candidate + extra
    rng.shuffle(more)
    after = evaluate_regression(baseline, more, **limits)["decision"]
    if before in {"reject", "rerun"}:
        assert after != "accept"
    if before == "rerun":
        assert after == "rerun"


@SETTINGS
@given(st.lists(st.builds(ok_run, positive_latency, qualities), min_size=1, max_size=12), thresholds)
def test_candidate_identical_to_baseline_shows_no_improvement(baseline, limits):
    result = evaluate_regression(baseline, list(baseline), **limits)
    if "observed_improvement" in result:
        assert result["observed_improvement"] == 0
        assert result["p95_ok"] and result["quality_ok"]
        assert result["decision"] == ("accept" if result["required_improvement"] == 0 and result["failure_rate_ok"]
                                      else "reject")


@SETTINGS
@given(st.one_of(int_arm, arm(95, 110)), st.one_of(int_arm, arm(60, 115)), st.lists(failed_attempts, max_size=3),
       st.lists(failed_attempts, max_size=3), thresholds, st.sampled_from([2, 4]))
def test_scaling_latencies_keeps_the_decision(baseline, candidate, b_fail, c_fail, limits, factor):
    # integer latencies times a power of two stay exact, so every ratio is bit-for-bit the same
    def scaled(runs):
        return [{**run, "latency_ms": run["latency_ms"] * factor} if run["ok"] else run for run in runs]

    before = evaluate_regression(baseline + b_fail, candidate + c_fail, **limits)
    after = evaluate_regression(scaled(baseline + b_fail), scaled(candidate + c_fail), **limits)
    assert after["decision"] == before["decision"]
    assert after["reason"] == before["reason"]
    assert after.get("failed_checks") == before.get("failed_checks")
    if "observed_improvement" in before:
        assert after["observed_improvement"] == before["observed_improvement"]
        assert after["baseline_noise"] == before["baseline_noise"]


# ---- top_hotspots -----------------------------------------------------------------------------

events = st.lists(
    st.fixed_dictionaries({
        "name": st.sampled_from(["forward", "backward", "optimizer", "dataloader", "h2d"]),
        "total_ms": st.one_of(st.integers(min_value=0, max_value=10_000),
                              st.floats(min_value=0, max_value=1e6, allow_nan=False)),
        "calls": st.integers(min_value=1, max_value=100),
    }),
    min_size=1, max_size=12,
)


@SETTINGS
@given(events, st.integers(min_value=-2, max_value=15))
def test_hotspots_sorted_descending_and_shares_in_range(items, topk):
    assume(sum(item["total_ms"] for item in items) > 0)
    result = top_hotspots(items, topk=topk)
    assert len(result) == max(0, min(topk, len(items)))
    totals = [item["total_ms"] for item in result]
    assert totals == sorted(totals, reverse=True)
    shares = [item["share_pct"] for item in result]
    assert all(0 <= share <= 100 for share in shares)
    assert shares == sorted(shares, reverse=True)
    # the returned events are the longest ones
    if result:
        assert totals[0] == max(item["total_ms"] for item in items)


# ---- synthesize_evidence ----------------------------------------------------------------------

VALID = {"evidence_type": "correctness", "status": "valid", "run_valid": True,
         "issues": [], "first_failure": None, "reproducible": False}


@SETTINGS
@given(st.floats(min_value=0, max_value=100, allow_nan=False), st.integers(min_value=1, max_value=256),
       st.floats(min_value=0, max_value=1, allow_nan=False), st.floats(min_value=0.01, max_value=1, allow_nan=False),
       st.floats(min_value=0, max_value=100, allow_nan=False))
def test_synthesis_signal_follows_the_thresholds(share, capacity, fill, capacity_alert, hotspot_alert):
    reserved = round(capacity * fill)
    workload = {"model": "TinyLM"}
    bundle = {
        "validity": VALID,
        "time": {"evidence_type": "time", "status": "measured", "workload": workload,
                 "hotspot": {"name": "backward", "share_pct": share}},
        "memory": {"evidence_type": "memory", "status": "measured", "workload": dict(workload), "unit": "MiB",
                   "dominant_object": "activation", "reserved_mib": reserved, "capacity_mib": capacity},
    }
    result = synthesize_evidence(bundle, capacity_alert, hotspot_alert)
    if reserved / capacity >= capacity_alert:
        expected = "memory"
    elif share >= hotspot_alert:
        expected = "time"
    else:
        expected = "none"
    assert result["primary_signal"] == expected
    assert result["status"] == ("need_more_evidence" if expected == "none" else "ready_for_experiment")


# ---- design_single_variable_experiment / changed_keys -----------------------------------------

values = st.one_of(st.integers(min_value=-5, max_value=64), st.text(max_size=4), st.booleans(), st.none())
FIXED = {"model": "TinyLM", "input_shape": (4, 128), "device": "cpu", "repeats": 5,
         "measurement_method": "cpu_wall_training_step_ms"}


@st.composite
def baseline_and_change(draw):
    mutable = draw(st.fixed_dictionaries(
        {"batch_size": values, "dtype": values},
        optional={"checkpoint": values, "num_workers": values, "compile": values},
    ))
    variable = draw(st.sampled_from(sorted(mutable)))
    new_value = draw(values.filter(lambda value: value != mutable[variable]))
    return {**FIXED, **mutable}, variable, new_value


@SETTINGS
@given(baseline_and_change())
def test_changed_keys_of_a_plan_is_the_changed_variable(case):
    baseline, variable, new_value = case
    evidence = {"status": "ready_for_experiment", "hypothesis": "h"}
    plan = design_single_variable_experiment(evidence, baseline, {variable: new_value})
    assert plan["action"] == "run_comparison"
    assert changed_keys(plan) == [variable] == [plan["changed_variable"]]
    assert set(plan["fixed_conditions"]) == set(baseline) - {variable}
    assert plan["candidate"] == {**baseline, variable: new_value}
