"""A benchmark's history: change points over revisions (with failures kept) and bisect.

Series with known change points are simulated with fixed seeds (lognormal attempt noise with
sigma 0.05, as ``benchmarks/bench_history.py``); rates (false positives in noise, detection of
a 20% step) are checked on small seeded samples with loose bounds, in the manner of asv's
``_check_ci``; the statistic against its definition computed by brute force; bisect against
every position of the first bad revision in histories of several lengths.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlflow_perfgate.errors import InputError, MissingField, PolicyError, RuleTypeError
from mlflow_perfgate.rules._history import (
    BISECT_STATUSES,
    DIRECTIONS,
    HISTORY_SETTINGS,
    LABELS,
    SIGNALS,
    TESTS,
    BisectStep,
    ChangePoint,
    RevisionSample,
    bisect_next,
    energy_statistic,
    find_change_points,
    revision_samples,
)

REPO = Path(__file__).resolve().parents[1]


def history(seed, ratios, attempts=5, sigma=0.05, failed=None, contention=0.0):
    """Revisions ``r0, r1, ...`` at positions 0, 1, ...: ``attempts`` latencies around ``100 * ratio``."""
    rng = np.random.default_rng(seed)
    samples = []
    for index, ratio in enumerate(ratios):
        latencies = 100.0 * ratio * np.exp(rng.normal(0.0, sigma, attempts))
        if contention:
            latencies *= np.where(rng.random(attempts) < contention, rng.uniform(1.5, 3.0, attempts), 1.0)
        samples.append(RevisionSample(f"r{index}", index, tuple(float(x) for x in latencies),
                                      0 if failed is None else failed[index]))
    return samples


def summary(change_points):
    return [(cp.index, cp.label, cp.direction) for cp in change_points]


# --- records --------------------------------------------------------------------------------------


def test_revision_sample_summarises_its_attempts():
    sample = RevisionSample("abc", 3, [101.0, 99.0, 100.0, 140.0], 1, quality=0.9)
    assert sample.latencies_ms == (101.0, 99.0, 100.0, 140.0)  # a list becomes a tuple
    assert (sample.attempted, sample.valid, sample.failure_rate) == (5, 4, 0.2)
    assert sample.median_ms == 100.5
    assert sample.p95_ms == 140.0  # nearest rank: ceil(4 * 0.95) = 4th
    assert sample.to_dict() == {"revision": "abc", "order": 3, "latencies_ms": [101.0, 99.0, 100.0, 140.0],
                                "failed": 1, "quality": 0.9, "attempted": 5, "valid": 4, "failure_rate": 0.2,
                                "median_ms": 100.5, "p95_ms": 140.0}
    failed_only = RevisionSample("def", 1.5e9, (), 3)
    assert (failed_only.failure_rate, failed_only.median_ms, failed_only.p95_ms) == (1.0, None, None)
    with pytest.raises(AttributeError):
        sample.failed = 0  # frozen


@pytest.mark.parametrize("kwargs, words", [
    ({"revision": ""}, "revision must be a non-empty string"),
    ({"revision": None}, "revision must be a non-empty string"),
    ({"order": float("nan")}, "order of revision 'r' must be a finite number"),
    ({"order": True}, "order of revision 'r'"),
    ({"order": "yesterday"}, "order of revision 'r'"),
    ({"latencies_ms": (100.0, 0.0)}, "latencies_ms of revision 'r' must hold finite numbers > 0"),
    ({"latencies_ms": (float("inf"),)}, "latencies_ms of revision 'r'"),
    ({"latencies_ms": (True,)}, "latencies_ms of revision 'r'"),
    ({"latencies_ms": ("100",)}, "latencies_ms of revision 'r'"),
    ({"latencies_ms": "100"}, "latencies_ms of revision 'r' must be a sequence"),
    ({"latencies_ms": 100.0}, "latencies_ms of revision 'r' must be a sequence"),
    ({"failed": -1}, "failed of revision 'r' must be an integer >= 0"),
    ({"failed": 1.0}, "failed of revision 'r'"),
    ({"latencies_ms": (), "failed": 0}, "revision 'r' has no attempt"),
    ({"quality": float("nan")}, "quality of revision 'r'"),
])
def test_revision_sample_refuses_bad_fields_by_name(kwargs, words):
    fields = {"revision": "r", "order": 0, "latencies_ms": (100.0,), "failed": 0, **kwargs}
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        RevisionSample(**fields)


def test_change_point_to_dict_holds_every_field_as_plain_values():
    found = find_change_points(history(1, [1.0] * 10 + [1.2] * 10))
    assert len(found) == 1
    as_dict = found[0].to_dict()
    assert list(as_dict) == [field for field in ChangePoint.__dataclass_fields__]
    assert as_dict["signals"] == ["latency"]
    json.dumps(as_dict)  # plain values only


# --- the statistic --------------------------------------------------------------------------------


def _energy_by_definition(values, tau):
    x, y = values[:tau], values[tau:]
    n, m = len(x), len(y)
    cross = sum(abs(a - b) for a in x for b in y) * 2 / (n * m)
    within_x = sum(abs(a - b) for a, b in itertools.combinations(x, 2)) / math.comb(n, 2) if n > 1 else 0.0
    within_y = sum(abs(a - b) for a, b in itertools.combinations(y, 2)) / math.comb(m, 2) if m > 1 else 0.0
    return n * m / (n + m) * (cross - within_x - within_y)


def test_energy_statistic_matches_its_definition():
    rng = np.random.default_rng(0)
    for size in (2, 3, 7, 30, 300):  # 300 spans several blocks of rows when batched
        values = rng.normal(size=size)
        expected = [_energy_by_definition(list(values), tau) for tau in range(1, size)] if size < 40 else None
        got = energy_statistic(values)
        assert got.shape == (size - 1,)
        if expected is not None:
            assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
        batch = np.stack([values, values[::-1], values + 5.0])
        rows = energy_statistic(batch)
        assert np.allclose(rows[0], got) and np.allclose(rows[2], got)  # shift-invariant
        assert np.allclose(rows[1], energy_statistic(values[::-1]))
    assert energy_statistic([1.0]).shape == (0,)
    ints = rng.integers(-3000, 3000, size=25).astype(np.int16)
    assert np.allclose(energy_statistic(ints), energy_statistic(ints.astype(float)), rtol=1e-12)
    # a hand-computed case: X = [0], Y = [1, 3]: 2/2 * (1 + 3) - 0 - |1 - 3| = 2, times 1 * 2 / 3
    assert energy_statistic([0.0, 1.0, 3.0])[0] == pytest.approx(4 / 3)


# --- known change points --------------------------------------------------------------------------


@pytest.mark.parametrize("test", TESTS)
def test_a_20_percent_step_is_a_regression_at_its_revision(test):
    found = find_change_points(history(1, [1.0] * 10 + [1.2] * 10), test=test)
    assert summary(found) == [(10, "regression", "slower")]
    cp = found[0]
    assert (cp.revision, cp.previous_revision) == ("r10", "r9")
    assert cp.signals == ("latency",)
    assert cp.ratio == pytest.approx(1.2, rel=0.03)
    assert cp.ratio_low <= cp.ratio <= cp.ratio_high and cp.ratio_low > 1.1
    assert cp.p_value <= 0.01 and cp.failure_p_value is None
    assert (cp.revisions_before, cp.revisions_after, cp.attempts_before, cp.attempts_after) == (10, 10, 50, 50)
    assert (cp.failure_rate_before, cp.failure_rate_after) == (0.0, 0.0)
    assert cp.median_after_ms / cp.median_before_ms == pytest.approx(cp.ratio)


@pytest.mark.parametrize("test", TESTS)
def test_a_20_percent_speedup_is_an_improvement(test):
    found = find_change_points(history(2, [1.0] * 10 + [0.8] * 10), test=test)
    assert summary(found) == [(10, "improvement", "faster")]
    assert found[0].ratio == pytest.approx(0.8, rel=0.03)


@pytest.mark.parametrize("test", TESTS)
def test_two_changes_are_both_found(test):
    found = find_change_points(history(3, [1.0] * 10 + [1.2] * 10 + [0.9] * 10), test=test)
    assert summary(found) == [(10, "regression", "slower"), (20, "improvement", "faster")]
    # each is measured between its neighbouring segments, not against the whole history
    assert (found[0].revisions_before, found[0].revisions_after) == (10, 10)
    assert found[1].ratio == pytest.approx(0.9 / 1.2, rel=0.03)


def test_a_slow_drift_is_found_as_slowdowns_only():
    # 1% per revision over 20 revisions: no single step, 21% in all
    for seed in range(5):
        found = find_change_points(history(seed, list(np.linspace(1.0, 1.21, 21))))
        assert found, seed
        assert all(cp.direction == "slower" for cp in found), summary(found)
        assert any(cp.label == "regression" for cp in found), summary(found)
        assert all(4 <= cp.index <= 17 for cp in found), summary(found)


def test_a_small_significant_step_is_suspicious_unless_the_declared_minimum_allows_it():
    samples = history(4, [1.0] * 15 + [1.03] * 15, sigma=0.01)
    found = find_change_points(samples)
    assert summary(found) == [(15, "suspicious", "slower")]
    assert found[0].ratio < 1.05
    assert summary(find_change_points(samples, min_magnitude=0.02)) == [(15, "regression", "slower")]


def test_a_failure_rate_jump_with_unchanged_latency_is_a_regression():
    failed = [0] * 10 + [2] * 10  # 0 of 5 failed before r10; 2 of 7 after (5 successes each)
    found = find_change_points(history(5, [1.0] * 20, failed=failed))
    assert summary(found) == [(10, "regression", "more_failures")]
    cp = found[0]
    assert cp.signals == ("failure_rate",)
    assert cp.failure_p_value <= 0.01 and cp.p_value > 0.01
    assert (cp.failure_rate_before, cp.failure_rate_after) == (0.0, 20 / 70)
    assert (cp.attempts_before, cp.attempts_after) == (50, 70)
    assert cp.ratio == pytest.approx(1.0, abs=0.05)


def test_failures_falling_is_an_improvement_and_more_failures_outweighs_a_speedup():
    failed = [3] * 10 + [0] * 10
    assert summary(find_change_points(history(6, [1.0] * 20, failed=failed))) == [
        (10, "improvement", "fewer_failures")]
    faster_but_failing = find_change_points(history(7, [1.0] * 10 + [0.8] * 10, failed=[0] * 10 + [3] * 10))
    assert summary(faster_but_failing) == [(10, "regression", "more_failures")]
    assert faster_but_failing[0].signals == ("latency", "failure_rate")


@pytest.mark.parametrize("test", TESTS)
def test_a_single_outlier_revision_is_never_a_regression(test):
    for seed in range(10):
        samples = history(seed, [1.0] * 10 + [1.3] + [1.0] * 10)
        found = find_change_points(samples, test=test)
        assert all(cp.label == "suspicious" for cp in found), (seed, summary(found))


def test_a_single_broken_revision_is_suspicious_not_a_regression():
    newest = history(8, [1.0] * 20) + [RevisionSample("r20", 20, (), 5)]  # every attempt failed
    found = find_change_points(newest)
    assert summary(found) == [(20, "suspicious", "more_failures")]
    cp = found[0]
    assert (cp.failure_rate_before, cp.failure_rate_after, cp.revisions_after) == (0.0, 1.0, 1)
    assert cp.ratio is None and cp.p_value is None  # no latency after it
    assert summary(find_change_points(newest + [RevisionSample("r21", 21, (), 5)])) == [
        (20, "regression", "more_failures")]  # two broken revisions in a row: a regression
    middle = history(8, [1.0] * 21)
    middle[10] = RevisionSample("r10", 10, (), 5)
    assert all(cp.label == "suspicious" for cp in find_change_points(middle))


def test_trailing_revisions_need_support_to_be_a_regression():
    two = history(9, [1.0] * 30 + [1.2] * 2)
    assert summary(find_change_points(two)) == [(30, "regression", "slower")]
    assert summary(find_change_points(two, min_support=3)) == [(30, "suspicious", "slower")]
    one = history(9, [1.0] * 30 + [1.2])
    assert find_change_points(one) == []  # a permutation test cannot tell one revision from an outlier
    assert summary(find_change_points(one, test="t")) == [(30, "suspicious", "slower")]


def test_min_segment_keeps_splits_away_from_the_ends():
    samples = history(10, [1.0] * 20 + [1.2] * 2)
    assert summary(find_change_points(samples, test="t")) == [(20, "regression", "slower")]
    for min_segment in (3, 5):
        found = find_change_points(samples, test="t", min_segment=min_segment)
        assert all(min_segment <= cp.index <= len(samples) - min_segment for cp in found)
        assert all(min(cp.revisions_before, cp.revisions_after) >= min_segment for cp in found)
    assert find_change_points(samples, min_segment=12) == []  # no split leaves 12 on each side


def test_quality_is_carried_into_the_figures():
    samples = [RevisionSample(s.revision, s.order, s.latencies_ms, 0, 0.9 if s.order < 10 else 0.8)
               for s in history(11, [1.0] * 10 + [1.2] * 10)]
    cp = find_change_points(samples)[0]
    assert (cp.quality_before, cp.quality_after) == (pytest.approx(0.9), pytest.approx(0.8))
    assert find_change_points(history(11, [1.0] * 10 + [1.2] * 10))[0].quality_before is None


# --- rates on seeded series -----------------------------------------------------------------------


@pytest.mark.parametrize("test", TESTS)
def test_false_positive_rate_in_pure_noise_stays_near_alpha(test):
    alpha, series = 0.05, 150
    hits = sum(bool(find_change_points(history(1000 + seed, [1.0] * 20), alpha=alpha, test=test))
               for seed in range(series))
    # binomial(150, 0.05): mean 7.5, sd 2.7; the bound is about 3 sd above
    assert hits / series <= alpha + 0.05, hits


def test_false_positive_rate_with_a_steady_failure_rate_stays_near_twice_alpha():
    alpha, series = 0.05, 100
    hits = 0
    for seed in range(series):
        rng = random.Random(seed)
        failed = [sum(rng.random() < 0.1 for _ in range(5)) for _ in range(20)]
        hits += bool(find_change_points(history(2000 + seed, [1.0] * 20, failed=failed), alpha=alpha))
    assert hits / series <= 2 * alpha + 0.05, hits  # two tests, each at alpha


def test_detection_rate_of_a_20_percent_step():
    # 5 attempts per revision, 10 revisions each side (the full figures: benchmarks/bench_history.py)
    def rate(contention, series):
        return sum(any(cp.index == 10 and cp.label == "regression"
                       for cp in find_change_points(history(3000 + seed, [1.0] * 10 + [1.2] * 10,
                                                            contention=contention)))
                   for seed in range(series)) / series

    assert rate(0.0, 40) >= 0.95  # lognormal, sigma 0.05: measured 100%
    assert rate(0.2, 40) >= 0.5  # a fifth of the attempts 1.5-3x slower: measured 71% (400 histories)


# --- determinism and edges ------------------------------------------------------------------------


def test_same_input_same_output_whatever_the_order_given():
    samples = history(12, [1.0] * 8 + [1.2] * 8 + [0.9] * 8, contention=0.1)
    first = find_change_points(samples)
    assert first == find_change_points(list(samples))
    shuffled = list(samples)
    random.Random(1).shuffle(shuffled)
    assert find_change_points(shuffled) == first
    assert first, "the history has a change to be found"
    clear = history(12, [1.0] * 10 + [1.2] * 10)
    assert {summary(find_change_points(clear, seed=seed))[0] for seed in range(4)} == {(10, "regression", "slower")}


@pytest.mark.parametrize("samples", [[], [RevisionSample("a", 0, (100.0,))],
                                     [RevisionSample("a", 0, (100.0,)), RevisionSample("b", 1, (200.0,))]])
def test_too_short_histories_have_no_change_point(samples):
    assert find_change_points(samples) == []
    assert find_change_points(samples, test="t") == []


def test_histories_without_spread_or_without_successes():
    flat = [RevisionSample(f"r{i}", i, (100.0, 100.0)) for i in range(12)]
    assert find_change_points(flat) == [] and find_change_points(flat, test="t") == []
    stepped = [RevisionSample(f"r{i}", i, (100.0 if i < 6 else 130.0,) * 2) for i in range(12)]
    assert summary(find_change_points(stepped)) == [(6, "regression", "slower")]
    assert summary(find_change_points(stepped, test="t")) == [(6, "regression", "slower")]
    all_failed = [RevisionSample(f"r{i}", i, (), 3) for i in range(12)]
    assert find_change_points(all_failed) == []
    # revisions without a success keep their failures; their latency is absent, not zero
    gappy = history(13, [1.0] * 10 + [1.2] * 10)
    gappy[5] = RevisionSample("r5", 5, (), 1)
    gappy[15] = RevisionSample("r15", 15, (), 1)
    cp, = find_change_points(gappy)
    assert (cp.index, cp.label) == (10, "regression")
    assert cp.failure_rate_before == pytest.approx(1 / 46)


def test_commit_times_order_the_history():
    base = history(14, [1.0] * 10 + [1.2] * 10)
    timed = [RevisionSample(s.revision, 1.7e9 + 3600.0 * s.order, s.latencies_ms) for s in reversed(base)]
    found = find_change_points(timed)
    assert [(cp.index, cp.revision) for cp in found] == [(10, "r10")]


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, words", [
    ({"alpha": 0}, "alpha must be in the range (0, 1)"),
    ({"alpha": 1.0}, "alpha must be in the range (0, 1)"),
    ({"alpha": float("nan")}, "alpha must be finite"),
    ({"min_magnitude": 1.0}, "min_magnitude must be in the range [0, 1)"),
    ({"min_magnitude": -0.01}, "min_magnitude must be in the range [0, 1)"),
    ({"min_segment": 0}, "min_segment must be a positive integer"),
    ({"min_segment": 2.0}, "min_segment must be a positive integer"),
    ({"min_support": True}, "min_support must be a positive integer"),
    ({"confidence": 1.5}, "confidence must be in the range (0, 1)"),
    ({"permutations": 10}, "permutations must be >= 19"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"test": "ks"}, "test must be one of ['permutation', 't']"),
    ({"alpha": 0.0005}, r"alpha must be >= 1 / \(permutations \+ 1\) = 0.001"),
])
def test_arguments_out_of_range_are_refused_by_name(kwargs, words):
    with pytest.raises(PolicyError, match=words if "\\" in words else
                       words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        find_change_points(history(0, [1.0] * 4), **kwargs)


def test_alpha_below_the_permutation_resolution_is_allowed_with_enough_permutations_or_the_t_test():
    samples = history(1, [1.0] * 10 + [1.2] * 10)
    assert find_change_points(samples, alpha=0.0005, test="t")
    assert find_change_points(samples, alpha=0.0005, permutations=1999)


def test_every_setting_is_declared_once_with_its_default():
    names = [setting.name for setting in HISTORY_SETTINGS]
    assert names == ["alpha", "min_magnitude", "min_segment", "min_support", "confidence", "permutations", "seed"]
    import inspect

    parameters = inspect.signature(find_change_points).parameters
    for setting in HISTORY_SETTINGS:
        assert parameters[setting.name].default == setting.default, setting.name
    assert parameters["test"].default == TESTS[0]
    assert LABELS == ("regression", "improvement", "suspicious")
    assert set(SIGNALS) == {"latency", "failure_rate"} and len(DIRECTIONS) == 4


@pytest.mark.parametrize("samples, error, words", [
    (None, RuleTypeError, "samples must be a list of RevisionSample"),
    ("abc", RuleTypeError, "samples must be a list of RevisionSample"),
    ([{"revision": "a"}], RuleTypeError, r"samples\[0\] must be a RevisionSample"),
    ([RevisionSample("a", 0, (1.0,)), RevisionSample("a", 1, (1.0,))], InputError, "revision 'a' appears twice"),
    ([RevisionSample("a", 0, (1.0,)), RevisionSample("b", 0, (1.0,))], InputError, "share order 0"),
])
def test_bad_samples_are_refused(samples, error, words):
    with pytest.raises(error, match=words):
        find_change_points(samples)


def test_revision_samples_groups_attempt_records():
    attempts = [
        {"revision": "b", "commit_time": 20, "ok": True, "latency_ms": 110.0, "quality": 0.8},
        {"revision": "a", "commit_time": 10, "ok": True, "latency_ms": 100.0, "quality": 0.9},
        {"revision": "a", "commit_time": 10, "ok": False, "failure": "timeout"},
        {"revision": "a", "commit_time": 10, "ok": True, "latency_ms": 102.0, "quality": 0.7},
        {"revision": "b", "commit_time": 20, "ok": True, "latency_ms": 112.0},
    ]
    a, b = revision_samples(attempts, order_key="commit_time")
    assert (a.revision, a.order, a.latencies_ms, a.failed, a.quality) == ("a", 10, (100.0, 102.0), 1,
                                                                          pytest.approx(0.8))
    assert (b.revision, b.latencies_ms, b.failed, b.quality) == ("b", (110.0, 112.0), 0, 0.8)
    with pytest.raises(MissingField, match="attempt 0 has no 'order'"):
        revision_samples(attempts)
    with pytest.raises(InputError, match="disagree on commit_time"):
        revision_samples([*attempts, {"revision": "a", "commit_time": 11, "ok": False}], order_key="commit_time")
    with pytest.raises(MissingField, match="is ok but has no 'latency_ms'"):
        revision_samples([{"revision": "a", "order": 1, "ok": True}])
    with pytest.raises(InputError, match="ok must be True or False"):
        revision_samples([{"revision": "a", "order": 1, "ok": "yes"}])
    with pytest.raises(RuleTypeError, match="attempt 0 must be a dict"):
        revision_samples(["a"])


# --- bisect ---------------------------------------------------------------------------------------


def _bisect(names, first_bad, known=None, skipped=()):
    """Bisect ``good, names..., bad`` when ``first_bad`` (an index into names, len = bad) is the answer."""
    verdicts = dict(known or {})
    for name in skipped:
        verdicts[name] = "skip"
    asked = []
    while True:
        step = bisect_next([(name, verdicts.get(name)) for name in names], "good", "bad")
        if step.status != "next":
            return step, asked
        assert step.revision not in verdicts, "a verdict already known was asked again"
        asked.append(step.revision)
        verdicts[step.revision] = "reject" if names.index(step.revision) >= first_bad else "accept"


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 7, 8, 9, 16, 33])
def test_bisect_finds_every_first_bad_revision_in_log2_steps(length):
    names = [f"c{i}" for i in range(length)]
    for first_bad in range(length + 1):
        step, asked = _bisect(names, first_bad)
        expected = names[first_bad] if first_bad < length else "bad"
        assert (step.status, step.revision, step.candidates) == ("found", expected, (expected,))
        assert len(asked) <= math.ceil(math.log2(length + 1)), (first_bad, asked)
        assert step.steps_left == 0


def test_bisect_reuses_known_verdicts_and_proposes_the_middle():
    names = [f"c{i}" for i in range(15)]
    first = bisect_next([(name, None) for name in names], "good", "bad")
    assert (first.status, first.revision, first.steps_left) == ("next", "c7", 4)
    assert first.candidates == (*names, "bad")
    known = {"c3": "accept", "c11": "reject", "c5": "rerun"}  # rerun: not decided, may be asked
    step = bisect_next([(name, known.get(name)) for name in names], "good", "bad")
    assert (step.good, step.bad) == ("c3", "c11")
    assert step.candidates == tuple(names[4:12]) and step.revision == "c7"
    found, asked = _bisect(names, 9, known={"c3": "accept", "c11": "reject"})
    assert found.revision == "c9" and len(asked) <= 3


def test_bisect_with_good_and_bad_in_the_list_reads_only_between_them():
    known = [("old", "reject"), ("good", "accept"), ("a", None), ("b", None), ("bad", "reject"), ("new", "accept")]
    step = bisect_next(known, "good", "bad")
    assert (step.status, step.revision, step.candidates) == ("next", "a", ("a", "b", "bad"))
    assert bisect_next(dict(known), "good", "bad") == step  # a mapping in history order works too
    assert bisect_next([("a", "accept"), ("b", "reject")], "good", "bad").revision == "b"


def test_bisect_never_proposes_a_skipped_revision_and_says_when_only_those_remain():
    names = ["c0", "c1", "c2", "c3", "c4"]
    step = bisect_next([(n, "skip" if n == "c2" else None) for n in names], "good", "bad")
    assert step.status == "next" and step.revision in ("c1", "c3")
    for first_bad in range(6):
        step, asked = _bisect(names, first_bad, skipped=("c2",))
        assert "c2" not in asked
        if first_bad in (2, 3):  # c2 skipped: it or c3 is the first bad, no way to tell
            assert (step.status, step.revision, step.candidates) == ("ambiguous", None, ("c2", "c3"))
        else:
            assert step.revision == (names + ["bad"])[first_bad]
    blocked = bisect_next([("a", "blocked_by_correctness"), ("b", "skip")], "good", "bad")
    assert (blocked.status, blocked.candidates) == ("ambiguous", ("a", "b", "bad"))


def test_bisect_step_to_dict():
    step = bisect_next([("a", None)], "good", "bad")
    assert step.to_dict() == {"status": "next", "revision": "a", "good": "good", "bad": "bad",
                              "candidates": ["a", "bad"], "steps_left": 1}
    assert step.status in BISECT_STATUSES and isinstance(step, BisectStep)


@pytest.mark.parametrize("known, good, bad, words", [
    ([], "x", "x", "good and bad must be two revisions"),
    ([], "", "bad", "good must be a non-empty revision name"),
    ([("bad", None), ("good", None)], "good", "bad", "good .'good'. must come before bad"),
    ([("a", "maybe")], "good", "bad", "the verdict of revision 'a' must be one of"),
    ([("a", None), ("a", None)], "good", "bad", "revision 'a' appears twice"),
    ([("a", "reject"), ("b", "accept")], "good", "bad", "'b' was accepted after 'a' was rejected"),
    ([("good", "reject"), ("a", None)], "good", "bad", "good .'good'. was judged a regression"),
    ([("a", None), ("bad", "accept")], "good", "bad", "bad .'bad'. was judged no regression"),
    ([("", None)], "good", "bad", "the revision must be a non-empty string"),
])
def test_bisect_refuses_contradictions_by_name(known, good, bad, words):
    with pytest.raises(InputError, match=words):
        bisect_next(known, good, bad)


@pytest.mark.parametrize("known", [None, "abc", [("a",)], [3]])
def test_bisect_refuses_malformed_known(known):
    with pytest.raises(RuleTypeError):
        bisect_next(known, "good", "bad")


# --- purity ---------------------------------------------------------------------------------------


def test_importing_history_loads_neither_mlflow_nor_torch():
    code = ("import json, sys\nimport mlflow_perfgate.rules._history\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'torch', 'scipy'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []  # scipy too: it loads on first use
