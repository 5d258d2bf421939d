"""The robust comparison, the seed rule's non-regression mode, sequential levels and contention flags.

Statistics are checked against scipy with fixed seeds, against small cases worked out by hand,
and (the interval's coverage, the sequential levels' overall error) by small seeded
simulations with loose bounds, in the manner of asv's ``_check_ci``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, norm

from mlflow_perfgate.rules import decide, evaluate_regression
from mlflow_perfgate.rules._records import interval_text, level_text
from mlflow_perfgate.rules._robust import (
    ROBUST,
    _interval_rank,
    _u_null_cdf,
    evaluate_robust,
    evaluate_seed_non_regression,
    explain_robust_checks,
    flag_contention,
    hodges_lehmann_ratio,
    recommended_attempts,
)
from mlflow_perfgate.rules._sequential import alpha_spent, sequential_alpha, sequential_thresholds
from mlflow_perfgate.rules._stats import min_attempts_mann_whitney

REPO = Path(__file__).resolve().parents[1]
BASELINE_MS = (100, 102, 99, 101, 100)
CANDIDATE_MS = (88, 90, 89, 91, 87)


def runs(latencies, quality=0.9):
    return [{"ok": True, "latency_ms": float(value), "quality": quality, "failure": None} for value in latencies]


def failed(count, reason="exception: RuntimeError: boom"):
    return [{"ok": False, "failure": reason} for _ in range(count)]


def lognormal(rng, n, ratio=1.0, sigma=0.03, median=100.0):
    return list(median * ratio * np.exp(rng.normal(0.0, sigma, n)))


# --- the statistics -----------------------------------------------------------------------------


def test_u_null_distribution_by_hand():
    # m = n = 2: the 6 orderings give U = 0, 1, 2, 2, 3, 4
    assert np.allclose(_u_null_cdf(2, 2), np.array([1, 2, 4, 5, 6]) / 6)
    # m = 1: U is uniform on 0..n
    assert np.allclose(_u_null_cdf(1, 4), np.arange(1, 6) / 5)
    assert np.allclose(_u_null_cdf(3, 5), _u_null_cdf(5, 3))


@pytest.mark.parametrize(("m", "n"), [(3, 4), (5, 5), (8, 6), (2, 8)])
def test_u_null_distribution_matches_scipy_exact(m, n):
    rng = np.random.default_rng(m * 100 + n)
    for _ in range(5):
        x, y = rng.normal(size=m), rng.normal(size=n)
        result = mannwhitneyu(x, y, method="exact", alternative="less")
        assert _u_null_cdf(m, n)[int(result.statistic)] == pytest.approx(result.pvalue, rel=1e-9)


def test_interval_rank_by_hand_and_normal_approximation():
    # Hollander & Wolfe: m = n = 5 at 95% uses the 3rd and 23rd of 25 differences, P(U <= 2) = 4/252
    assert _interval_rank(5, 5, 0.95) == 3
    # 1 + 1 attempts (2 orderings) or 3 + 4 (35) cannot give a 95% bound: P(U = 0) > 2.5%
    assert _interval_rank(1, 1, 0.95) == 0
    assert _interval_rank(3, 4, 0.95) == 0
    assert _interval_rank(4, 4, 0.95) == 1  # P(U = 0) = 1/70
    # the normal approximation used above 50 per arm agrees with the exact rank at 50
    spread = math.sqrt(50 * 50 * 101 / 12)
    assert abs(_interval_rank(50, 50, 0.95) - math.floor(1250.5 - norm.isf(0.025) * spread)) <= 1
    assert _interval_rank(60, 60, 0.95) == math.floor(1800.5 - norm.isf(0.025) * math.sqrt(3600 * 121 / 12))


def test_hodges_lehmann_by_hand():
    # log differences {0, log 2, log 2, log 4}: the median is log 2
    assert hodges_lehmann_ratio([1, 2], [2, 4])["ratio_estimate"] == pytest.approx(2.0)
    # {0, -log 2, -log 4}: the median is -log 2
    assert hodges_lehmann_ratio([1, 2, 4], [1])["ratio_estimate"] == pytest.approx(0.5)
    # {0, -log 2, log 4, log 2}: the median is (0 + log 2) / 2
    assert hodges_lehmann_ratio([10, 20], [10, 40])["ratio_estimate"] == pytest.approx(math.sqrt(2))
    # a slow outlier moves the estimate by one rank only
    clean = hodges_lehmann_ratio([10, 11, 12, 13, 14], [9, 10, 11, 12, 13])["ratio_estimate"]
    spoiled = hodges_lehmann_ratio([10, 11, 12, 13, 140], [9, 10, 11, 12, 13])["ratio_estimate"]
    assert spoiled == pytest.approx(clean, rel=0.05)


def test_interval_is_the_order_statistics_of_the_differences():
    rng = np.random.default_rng(7)
    base, cand = lognormal(rng, 5), lognormal(rng, 5, 0.9)
    diffs = np.sort(np.subtract.outer(np.log(cand), np.log(base)).ravel())
    result = hodges_lehmann_ratio(base, cand, confidence=0.95)
    assert result["ratio_ci_low"] == pytest.approx(math.exp(diffs[2]))
    assert result["ratio_ci_high"] == pytest.approx(math.exp(diffs[22]))
    assert result["ratio_estimate"] == pytest.approx(math.exp(diffs[12]))
    assert result["ratio_ci_low"] <= result["ratio_estimate"] <= result["ratio_ci_high"]


def test_interval_is_scale_invariant_and_antisymmetric():
    rng = np.random.default_rng(3)
    base, cand = lognormal(rng, 9), lognormal(rng, 11, 1.1)
    forward = hodges_lehmann_ratio(base, cand)
    scaled = hodges_lehmann_ratio([v * 1000 for v in base], [v * 1000 for v in cand])
    backward = hodges_lehmann_ratio(cand, base)
    for key in ("ratio_estimate", "ratio_ci_low", "ratio_ci_high"):
        assert scaled[key] == pytest.approx(forward[key])
    assert backward["ratio_estimate"] == pytest.approx(1 / forward["ratio_estimate"])
    assert backward["ratio_ci_low"] == pytest.approx(1 / forward["ratio_ci_high"])


@pytest.mark.parametrize(("m", "n", "noise"), [(6, 8, "lognormal"), (10, 10, "contended"), (60, 55, "lognormal")])
def test_interval_coverage_by_simulation(m, n, noise):
    """A factor between the arms lies in the 90% interval about 90% of the time, whatever the noise."""
    rng = np.random.default_rng(m * n)
    true_ratio, reps, covered = 0.8, 400, 0
    for _ in range(reps):
        base = np.exp(rng.normal(0, 0.1, m))
        cand = true_ratio * np.exp(rng.normal(0, 0.1, n))
        if noise == "contended":
            base[rng.random(m) < 0.1] *= 3
            cand[rng.random(n) < 0.1] *= 3
        result = hodges_lehmann_ratio(base, cand, confidence=0.9)
        covered += result["ratio_ci_low"] <= true_ratio <= result["ratio_ci_high"]
    assert 0.85 <= covered / reps <= 0.97


def test_hodges_lehmann_n1_and_all_equal():
    one = hodges_lehmann_ratio([2.0], [1.0])
    assert one["ratio_estimate"] == pytest.approx(0.5)
    assert (one["ratio_ci_low"], one["ratio_ci_high"], one["confidence"]) == (None, None, 0.95)
    same = hodges_lehmann_ratio([5.0] * 6, [5.0] * 6)
    assert same["ratio_estimate"] == same["ratio_ci_low"] == same["ratio_ci_high"] == 1.0


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0], [float("nan")], [float("inf")], None, "12", [True]])
def test_hodges_lehmann_rejects_bad_latencies(bad):
    with pytest.raises(ValueError):
        hodges_lehmann_ratio(bad, [1.0])


@pytest.mark.parametrize("confidence", [0, 1, -0.5, 1.5, float("nan")])
def test_hodges_lehmann_rejects_bad_confidence(confidence):
    with pytest.raises(ValueError, match="confidence"):
        hodges_lehmann_ratio([1.0, 2.0], [1.0, 2.0], confidence=confidence)


@pytest.mark.parametrize(("m", "n", "ratio"), [(5, 5, 0.9), (7, 9, 1.0), (10, 10, 0.95), (20, 30, 1.1)])
@pytest.mark.parametrize("mode", ["improvement", "non_regression"])
def test_p_value_is_scipys_one_sided_mann_whitney(m, n, ratio, mode):
    rng = np.random.default_rng(m + n)
    base, cand = lognormal(rng, m), lognormal(rng, n, ratio)
    result = evaluate_robust(runs(base), runs(cand), mode=mode)
    alternative = "less" if mode == "improvement" else "greater"
    assert result["p_value"] == mannwhitneyu(cand, base, alternative=alternative).pvalue


# --- evaluate_robust: improvement mode ----------------------------------------------------------


def test_improvement_accepts_the_specifications_example():
    result = evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS))
    assert result["decision"] == "accept"
    assert result["method"] == "robust" and result["mode"] == "improvement"
    assert result["improvement_ok"] is True and result["failed_checks"] == []
    assert result["ratio_estimate"] == pytest.approx(0.89, abs=0.005)
    assert result["ratio_ci_low"] < result["ratio_estimate"] < result["ratio_ci_high"] < 0.95
    assert result["p_value"] < 0.02
    assert (result["alpha"], result["confidence"]) == (0.02, 0.90)
    spec = evaluate_regression(runs(BASELINE_MS), runs(CANDIDATE_MS))
    for key in ("baseline", "candidate", "baseline_noise", "observed_improvement", "maximum_failure_rate",
                "maximum_p95_ratio", "failure_rate_ok", "quality_ok"):
        assert result[key] == spec[key], key


def test_improvement_accepts_a_speedup_the_noise_proxy_rejects():
    """One contended baseline attempt sets the specification's bar at 30%; the rank test is not moved by it."""
    base = [100, 101, 99, 100, 102, 98, 100, 101, 99, 130]
    cand = [90, 91, 89, 90, 92, 88, 90, 91, 89, 90]
    spec = evaluate_regression(runs(base), runs(cand))
    assert spec["decision"] == "reject" and spec["failed_checks"] == ["improvement_ok"]
    result = evaluate_robust(runs(base), runs(cand))
    assert result["decision"] == "accept"
    assert result["contention"] == {"baseline": [9], "candidate": []}


def test_improvement_needs_both_significance_and_size():
    # significant but about 2%: the interval rules out 5%, so reject
    base = [100, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.3, 99.7, 100.0]
    cand = [v * 0.98 for v in base]
    result = evaluate_robust(runs(base), runs(cand))
    assert result["p_value"] < 0.025
    assert result["ratio_ci_low"] > 0.95
    assert result["improvement_ok"] is False
    assert result["decision"] == "reject" and result["failed_checks"] == ["improvement_ok"]
    assert result["reason"] == "declared_thresholds_checked"


def test_improvement_inconclusive_answers_rerun_with_attempts():
    rng = np.random.default_rng(11)
    base, cand = lognormal(rng, 5, sigma=0.15), lognormal(rng, 5, 0.93, sigma=0.15)
    result = evaluate_robust(runs(base), runs(cand))
    assert result["improvement_ok"] is None
    assert result["decision"] == "rerun" and result["reason"] == "inconclusive"
    assert result["failed_checks"] == []
    assert isinstance(result["recommended_attempts"], int) and result["recommended_attempts"] > 5


def test_identical_arms_are_never_accepted_as_an_improvement():
    same = [100, 101, 99, 100, 102, 98]
    result = evaluate_robust(runs(same), runs(same))
    assert result["decision"] != "accept"
    assert result["ratio_estimate"] == 1.0


def test_a_failed_check_rejects_even_an_undecided_improvement():
    rng = np.random.default_rng(11)
    base, cand = lognormal(rng, 5, sigma=0.15), lognormal(rng, 5, 0.93, sigma=0.15)
    result = evaluate_robust(runs(base), runs(cand, quality=0.5))
    assert result["quality_ok"] is False and result["improvement_ok"] is None
    assert result["decision"] == "reject" and result["failed_checks"] == ["quality_ok"]
    assert result["recommended_attempts"] is None


def test_candidate_failures_reject():
    result = evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS) + failed(1))
    assert result["failure_rate_ok"] is False and result["decision"] == "reject"
    assert "failure_rate_ok" in result["failed_checks"]


def test_one_contended_attempt_does_not_fail_the_p95_check():
    base = [100, 101, 99, 100, 102, 98, 100, 101, 99, 100]
    cand = [80, 81, 79, 80, 82, 78, 80, 81, 79, 250]  # the slowest attempt is the P95
    assert evaluate_regression(runs(base), runs(cand))["p95_ok"] is False
    result = evaluate_robust(runs(base), runs(cand))
    assert result["p95_ratio"] > 1.05 and result["p95_p_value"] >= 0.025
    assert result["p95_ok"] is True and result["decision"] == "accept"
    assert result["contention"]["candidate"] == [9]


def test_a_heavier_tail_fails_the_p95_check():
    base = [100, 101, 99, 100, 102, 98, 100, 101, 99, 100, 100, 101, 99, 100, 102, 98, 100, 101, 99, 100]
    cand = [80, 81, 79, 80, 82, 78, 80, 81, 79, 80, 81, 79, 200, 210, 220, 230, 240, 250, 260, 270]
    result = evaluate_robust(runs(base), runs(cand))
    assert result["p95_p_value"] < 0.025
    assert result["p95_ok"] is False and result["decision"] == "reject"
    assert "p95_ok" in result["failed_checks"]


def test_exceedance_p_value_by_hand():
    # 10 + 10 attempts, baseline P95 = its maximum; P(top 4 of 20 all candidates) = 10*9*8*7 / (20*19*18*17)
    base = [100.0] * 10
    cand = [80.0] * 6 + [200.0] * 4
    result = evaluate_robust(runs(base), runs(cand), mode="non_regression")
    assert result["p95_p_value"] == pytest.approx(5040 / 116280)


# --- evaluate_robust: non-regression mode -------------------------------------------------------


def test_non_regression_accepts_identical_arms():
    rng = np.random.default_rng(5)
    base, cand = lognormal(rng, 10, sigma=0.01), lognormal(rng, 10, sigma=0.01)
    result = evaluate_robust(runs(base), runs(cand), mode="non_regression")
    assert result["no_regression_ok"] is True and result["ratio_ci_high"] <= 1.05
    assert result["decision"] == "accept" and result["required_improvement"] == -0.05
    assert "improvement_ok" not in result


def test_non_regression_rejects_a_clear_slowdown():
    rng = np.random.default_rng(5)
    base, cand = lognormal(rng, 10, sigma=0.01), lognormal(rng, 10, 1.2, sigma=0.01)
    result = evaluate_robust(runs(base), runs(cand), mode="non_regression")
    assert result["no_regression_ok"] is False and result["ratio_ci_low"] > 1.05
    assert result["decision"] == "reject" and "no_regression_ok" in result["failed_checks"]


def test_non_regression_straddling_the_margin_is_inconclusive():
    rng = np.random.default_rng(5)
    base, cand = lognormal(rng, 6, sigma=0.05), lognormal(rng, 6, 1.05, sigma=0.05)
    result = evaluate_robust(runs(base), runs(cand), mode="non_regression", maximum_p95_ratio=2.0)
    assert result["ratio_ci_low"] <= 1.05 < result["ratio_ci_high"]
    assert result["no_regression_ok"] is None
    assert (result["decision"], result["reason"]) == ("rerun", "inconclusive")
    assert result["recommended_attempts"] > 6


def test_non_regression_margin_moves_the_boundary():
    rng = np.random.default_rng(5)
    base, cand = lognormal(rng, 10, sigma=0.01), lognormal(rng, 10, 1.2, sigma=0.01)
    result = evaluate_robust(runs(base), runs(cand), mode="non_regression", margin=0.5, maximum_p95_ratio=1.5)
    assert result["decision"] == "accept" and result["required_improvement"] == -0.5


# --- evaluate_robust: preconditions, n = 1, all equal -------------------------------------------


def test_early_reruns_keep_the_specifications_reasons():
    short = evaluate_robust(runs(BASELINE_MS[:3]), runs(CANDIDATE_MS))
    assert (short["decision"], short["reason"]) == ("rerun", "insufficient_valid_runs")
    assert short["method"] == "robust" and "failure_rate_ok" not in short
    assert short["recommended_attempts"] >= 5
    shaky = evaluate_robust(runs(BASELINE_MS) + failed(1), runs(CANDIDATE_MS), mode="non_regression")
    assert (shaky["decision"], shaky["reason"]) == ("rerun", "unreliable_baseline")
    assert shaky["mode"] == "non_regression" and shaky["recommended_attempts"] is None
    empty = evaluate_robust([], [])
    assert (empty["decision"], empty["reason"], empty["recommended_attempts"]) == (
        "rerun", "insufficient_valid_runs", None)


def test_one_attempt_per_arm():
    result = evaluate_robust(runs([100]), runs([50]), min_valid_runs=1)
    assert result["ratio_estimate"] == pytest.approx(0.5)
    assert result["ratio_ci_low"] is None and result["ratio_ci_high"] is None
    assert result["p_value"] == mannwhitneyu([50], [100], alternative="less").pvalue
    assert (result["decision"], result["reason"]) == ("rerun", "inconclusive")
    assert result["recommended_attempts"] is None
    assert explain_robust_checks(result)["improvement_ok"].startswith("INCONCLUSIVE")


def test_all_equal_arms():
    same = runs([100.0] * 8)
    improvement = evaluate_robust(same, same)
    assert improvement["p_value"] == 1.0
    assert improvement["ratio_estimate"] == improvement["ratio_ci_low"] == improvement["ratio_ci_high"] == 1.0
    assert improvement["decision"] == "reject" and improvement["failed_checks"] == ["improvement_ok"]
    ci = evaluate_robust(same, same, mode="non_regression")
    assert ci["decision"] == "accept" and ci["contention"] == {"baseline": [], "candidate": []}


def test_contention_indices_point_into_the_run_lists():
    base = runs([100, 101]) + failed(1) + runs([99, 300, 100, 101])
    cand = runs([90] * 6)
    result = evaluate_robust(base, cand, maximum_failure_rate=0.5)
    assert result["contention"]["baseline"] == [4]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"mode": "faster"}, "mode"),
    ({"margin": -0.1}, "margin"),
    ({"margin": float("nan")}, "margin"),
    ({"alpha": 0.0}, "alpha"),
    ({"alpha": 1.0}, "alpha"),
    ({"confidence": 1.0}, "confidence"),
    ({"min_valid_runs": 0}, "min_valid_runs"),
    ({"min_improvement": 1.0}, "min_improvement"),
    ({"maximum_p95_ratio": 0.9}, "maximum_p95_ratio"),
])
def test_evaluate_robust_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS), **kwargs)


def test_evaluate_robust_rejects_bad_records_like_the_specification():
    with pytest.raises(KeyError):
        evaluate_robust([{"ok": True, "latency_ms": 1.0}] * 5, runs(CANDIDATE_MS))
    with pytest.raises(ValueError):
        evaluate_robust([{"ok": "yes", "latency_ms": 1.0, "quality": 1.0}] * 5, runs(CANDIDATE_MS))
    with pytest.raises(ValueError):
        evaluate_robust(None, runs(CANDIDATE_MS))


def test_result_is_json_serialisable():
    result = evaluate_robust(runs([100]), runs([50]), min_valid_runs=1)
    json.dumps(result, allow_nan=False)
    json.dumps(evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS)), allow_nan=False)


def test_explain_robust_checks_names_values_and_thresholds():
    result = evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS), mode="non_regression")
    messages = explain_robust_checks(result, quality_tolerance=0.01)
    assert list(messages) == ["failure_rate_ok", "quality_ok", "p95_ok", "no_regression_ok"]
    assert "1 + margin = 1.050" in messages["no_regression_ok"]
    assert messages["no_regression_ok"].startswith("ok")
    assert explain_robust_checks(evaluate_robust([], [])) == {}


# --- the seed rule's non-regression mode --------------------------------------------------------


def test_seed_non_regression_accepts_and_rejects():
    ok = evaluate_seed_non_regression(runs(BASELINE_MS), runs(BASELINE_MS))
    assert ok["decision"] == "accept" and ok["no_regression_ok"] is True
    assert ok["method"] == "seed" and ok["mode"] == "non_regression" and ok["margin"] == 0.05
    assert "improvement_ok" not in ok
    # baseline noise (102 - 100) / 100 = 2% < margin: the bar is -5%
    assert ok["required_improvement"] == -0.05
    slower = evaluate_seed_non_regression(runs(BASELINE_MS), runs([v * 1.2 for v in BASELINE_MS]),
                                          maximum_p95_ratio=2.0)
    assert slower["decision"] == "reject" and slower["failed_checks"] == ["no_regression_ok"]


def test_seed_non_regression_uses_the_noise_proxy_and_keeps_the_p95_check():
    # one slow baseline attempt makes the proxy 30%: a 20% slowdown passes
    base = [100, 100, 100, 100, 100, 100, 100, 100, 100, 130]
    lenient = evaluate_seed_non_regression(runs(base), runs([120] * 10))
    assert lenient["required_improvement"] == pytest.approx(-0.3)
    assert lenient["no_regression_ok"] is True and lenient["decision"] == "accept"
    # one slow candidate attempt fails the specification's P95 check; the robust rule passes it
    tight, spoiled = runs([100] * 10), runs([100] * 9 + [130])
    strict = evaluate_seed_non_regression(tight, spoiled)
    assert strict["p95_ok"] is False and strict["decision"] == "reject"
    assert evaluate_robust(tight, spoiled, mode="non_regression")["decision"] == "accept"
    spec = evaluate_regression(tight, spoiled)
    for key in ("failure_rate_ok", "quality_ok", "p95_ok", "baseline_noise", "observed_improvement"):
        assert strict[key] == spec[key]


def test_seed_non_regression_early_reruns_and_errors():
    short = evaluate_seed_non_regression(runs(BASELINE_MS[:2]), runs(CANDIDATE_MS))
    assert (short["decision"], short["reason"], short["method"]) == ("rerun", "insufficient_valid_runs", "seed")
    with pytest.raises(ValueError, match="margin"):
        evaluate_seed_non_regression(runs(BASELINE_MS), runs(CANDIDATE_MS), margin=-1)
    with pytest.raises(ValueError, match="min_valid_runs"):
        evaluate_seed_non_regression(runs(BASELINE_MS), runs(CANDIDATE_MS), min_valid_runs=0)


# --- recommended_attempts -----------------------------------------------------------------------


def test_recommended_attempts_formula_by_hand():
    # spreads from the MAD of logs: [1, e^s, e^-s] has MAD s for both arms
    s = 0.1
    base = list(np.exp([0.0, s, -s]) * 100)
    cand = list(np.exp([0.0, s, -s]) * 100)
    sigma = 1.482602218505602 * s
    z = norm.isf(0.05) + norm.ppf(0.8)
    expected = math.ceil(z * z * 2 * sigma ** 2 / math.log(1.05) ** 2 / (3 / math.pi))
    assert recommended_attempts(base, cand, margin=0.05) == expected


def test_recommended_attempts_grows_with_dispersion():
    rng = np.random.default_rng(2)
    shape_b, shape_c = rng.normal(0, 1, 12), rng.normal(0, 1, 12)
    previous = 0
    for sigma in (0.005, 0.01, 0.02, 0.04, 0.08):
        base = list(100 * np.exp(sigma * shape_b))
        cand = list(103 * np.exp(sigma * shape_c))
        attempts = recommended_attempts(base, cand, margin=0.0)
        assert attempts >= previous
        previous = attempts
    assert previous > 2


def test_recommended_attempts_shrinks_with_distance_and_is_capped():
    rng = np.random.default_rng(2)
    base = lognormal(rng, 10, sigma=0.05)
    shape = rng.normal(0, 0.05, 10)
    near = recommended_attempts(base, list(100 * 1.04 * np.exp(shape)), margin=0.05)
    far = recommended_attempts(base, list(100 * 1.3 * np.exp(shape)), margin=0.05)
    assert far < near
    same = recommended_attempts([100, 101, 99], [105, 106.05, 103.95], margin=0.05)
    assert same == 1000


def test_recommended_attempts_not_estimable():
    assert recommended_attempts([100], [100, 101], margin=0.05) is None
    assert recommended_attempts([100, 100], [100, 100], margin=0.0) is None
    assert recommended_attempts([100, 100], [100, 100], margin=0.05) == 2


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"margin": -1.0}, "margin"), ({"margin": 0.05, "alpha": 0}, "alpha"), ({"margin": 0.05, "power": 1}, "power"),
])
def test_recommended_attempts_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        recommended_attempts([1.0, 2.0], [1.0, 2.0], **kwargs)


# --- sequential looks ---------------------------------------------------------------------------


def test_obrien_fleming_spending_by_hand():
    assert alpha_spent(0.5, 0.05) == pytest.approx(2 * norm.sf(norm.isf(0.025) / math.sqrt(0.5)))
    assert alpha_spent(0.5, 0.05) == pytest.approx(0.005575, abs=1e-6)
    assert alpha_spent(0.0, 0.05) == 0.0 and alpha_spent(1.0, 0.05) == 0.05
    assert alpha_spent(0.5, 0.05, spending="pocock") == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 2))


@pytest.mark.parametrize("max_looks", [1, 2, 5, 10])
@pytest.mark.parametrize("alpha", [0.01, 0.025, 0.05])
def test_sequential_alpha_increases_and_sums_to_alpha(max_looks, alpha):
    levels = [sequential_alpha(look, max_looks, alpha) for look in range(1, max_looks + 1)]
    assert all(level > 0 for level in levels)
    assert levels == sorted(levels)
    assert sum(levels) <= alpha + 1e-12
    assert sum(levels) == pytest.approx(alpha)
    pocock = [sequential_alpha(look, max_looks, alpha, spending="pocock") for look in range(1, max_looks + 1)]
    assert sum(pocock) == pytest.approx(alpha) and sum(pocock) <= alpha + 1e-12


def test_sequential_alpha_with_unequal_looks():
    levels = [sequential_alpha(5, 30, previous=0), sequential_alpha(10, 30, previous=5), sequential_alpha(30, 30, previous=10)]
    assert sum(levels) == pytest.approx(0.05)


def test_sequential_looks_keep_the_overall_error_by_simulation():
    """Five looks at a normal statistic under the null: the chance of any false rejection stays <= alpha."""
    rng = np.random.default_rng(0)
    looks, reps = 5, 20000
    sums = np.cumsum(rng.normal(size=(reps, looks)), axis=1)
    z = sums / np.sqrt(np.arange(1, looks + 1))
    bars = np.array([norm.isf(sequential_alpha(look, looks, 0.05)) for look in range(1, looks + 1)])
    overall = (z > bars).any(axis=1).mean()
    naive = (z > norm.isf(0.05)).any(axis=1).mean()
    assert overall <= 0.05 + 0.005
    assert naive > 0.1  # what the spending prevents


def test_sequential_thresholds():
    first = sequential_thresholds(1, 4)
    last = sequential_thresholds(4, 4)
    assert first["alpha"] < last["alpha"] < 0.02
    assert 0.90 < last["confidence"] < first["confidence"] < 1
    assert sum(sequential_thresholds(look, 4)["alpha"] for look in range(1, 5)) == pytest.approx(0.02)


@pytest.mark.parametrize(("args", "kwargs", "field"), [
    ((0, 5), {}, "look"), ((6, 5), {}, "look"), ((1, 0), {}, "max_looks"), ((2, 5, 1.5), {}, "alpha"),
    ((2, 5), {"previous": 2}, "previous"), ((2, 5), {"spending": "linear"}, "spending"),
])
def test_sequential_alpha_rejects_bad_arguments(args, kwargs, field):
    with pytest.raises(ValueError, match=field):
        sequential_alpha(*args, **kwargs)


# --- flag_contention ----------------------------------------------------------------------------


def test_flag_contention_flags_a_clear_outlier_only():
    assert flag_contention([10, 10.2, 9.9, 10.1, 10, 9.8, 10.3, 10, 9.9, 30]) == [9]
    assert flag_contention([30, 10, 10.1, 9.9, 10, 29]) == [0, 5]


def test_flag_contention_never_flags_fast_attempts_or_a_tight_arm():
    assert flag_contention([10.0] * 8) == []
    assert flag_contention([10, 10, 10, 10, 10, 11]) == []  # MAD 0: the 25% floor applies
    assert flag_contention([10, 10, 10, 10, 10, 13]) == [5]
    assert flag_contention([10, 10.1, 9.9, 10, 2]) == []
    assert flag_contention([]) == [] and flag_contention([10]) == []


def test_flag_contention_rejects_bad_input():
    with pytest.raises(ValueError, match="k"):
        flag_contention([1.0, 2.0], k=0)
    with pytest.raises(ValueError, match="min_excess"):
        flag_contention([1.0, 2.0], min_excess=-0.1)
    with pytest.raises(ValueError):
        flag_contention([1.0, 0.0])


# --- purity -------------------------------------------------------------------------------------


def test_robust_modules_load_neither_mlflow_nor_torch():
    code = (
        "import json, sys\n"
        "import mlflow_perfgate.rules._robust, mlflow_perfgate.rules._sequential\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'torch'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []


# --- fixes found on the noise lab's samples (each case failed before) ---------------------------


def test_a_candidate_that_failed_every_attempt_is_rejected_like_one_that_failed_some():
    # before: rerun (insufficient_valid_runs), while one failure among 5 successes rejected
    result = evaluate_robust(runs(BASELINE_MS), failed(5))
    assert (result["decision"], result["reason"]) == ("reject", "unreliable_candidate")
    assert result["failed_checks"] == ["failure_rate_ok"] and result["failure_rate_ok"] is False
    assert result["recommended_attempts"] is None
    message = decide(runs(BASELINE_MS), failed(5), method="robust")["messages"]["failure_rate_ok"]
    assert message.startswith("FAILED: candidate failure rate 100.0% (5 of 5)")
    assert "whatever further attempts bring: at least 5 of 10 = 50.0% even if the 5 attempts still needed" in message


def test_known_failures_reject_once_no_further_attempt_can_pass():
    # maximum_failure_rate 0: one failure among 4 successes rejects at once (a fifth success cannot help)
    one = evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS[:4]) + failed(1))
    assert (one["decision"], one["reason"]) == ("reject", "unreliable_candidate")
    # maximum 0.5: 5 failures and the 5 successes still needed give 5 / 10, not above: rerun
    half = evaluate_robust(runs(BASELINE_MS), failed(5), maximum_failure_rate=0.5)
    assert (half["decision"], half["reason"]) == ("rerun", "insufficient_valid_runs")
    # 6 failures: at best 6 / 11 > 0.5
    more = evaluate_robust(runs(BASELINE_MS), failed(6), maximum_failure_rate=0.5)
    assert (more["decision"], more["reason"]) == ("reject", "unreliable_candidate")
    # an insufficient or unreliable baseline does not shield a hopeless candidate
    assert evaluate_robust(runs(BASELINE_MS[:2]), failed(2))["decision"] == "reject"
    assert evaluate_robust(runs(BASELINE_MS) + failed(1), runs(CANDIDATE_MS) + failed(1),
                           maximum_failure_rate=0.1)["reason"] == "unreliable_candidate"
    # maximum 1: failures never decide; the note says the candidate failed every attempt
    tolerant = decide(runs(BASELINE_MS), failed(3, "oom"), method="robust", maximum_failure_rate=1.0)
    assert (tolerant["decision"], tolerant["reason"]) == ("rerun", "insufficient_valid_runs")
    assert tolerant["messages"]["candidate_failed_every_attempt"] == \
        "NOTE: the candidate failed every one of its 3 attempts (oom)"
    # enough successes: the full checks run and failure_rate_ok fails there, as before
    full = evaluate_robust(runs(BASELINE_MS), runs(CANDIDATE_MS) + failed(1))
    assert full["reason"] == "declared_thresholds_checked" and "failure_rate_ok" in full["failed_checks"]


@pytest.mark.parametrize("scale", [1, 2, 0.5, 10, 1.9, 0.37, 1000])
def test_a_ratio_exactly_at_the_threshold_decides_the_same_in_any_unit(scale):
    # before: 200 vs 190 ms rejected while 100 vs 95 accepted (their log ratios round apart)
    faster = evaluate_robust(runs([100 * scale] * 10), runs([95 * scale] * 10))
    assert faster["improvement_ok"] is True and faster["decision"] == "accept"
    assert faster["ratio_estimate"] == pytest.approx(0.95, rel=1e-12)
    slower = evaluate_robust(runs([100 * scale] * 10), runs([105 * scale] * 10), mode="non_regression",
                             maximum_p95_ratio=1.5)
    assert slower["no_regression_ok"] is True and slower["decision"] == "accept"
    over = evaluate_robust(runs([100 * scale] * 10), runs([105.01 * scale] * 10), mode="non_regression",
                           maximum_p95_ratio=1.5)
    assert over["decision"] == "reject"


def test_advice_never_below_the_fewest_attempts_that_can_reach_alpha():
    # 1 / C(2n, n) < alpha: 1/20 = 0.05 is not below 0.05; 1/2 is not below 0.5; 1/924 is not below 0.001
    assert [min_attempts_mann_whitney(a) for a in (0.02, 0.05, 0.0501, 0.5, 0.51, 1e-3)] == [4, 4, 3, 2, 1, 7]
    # 2 attempts per arm can never give p < 0.02 (the smallest is 1/6): before, the advice was 3
    two = evaluate_robust(runs([100, 101]), runs([50, 51]), min_valid_runs=2)
    assert two["decision"] == "rerun" and two["recommended_attempts"] >= 4
    three = evaluate_robust(runs([100, 101, 99]), runs([60, 70, 80]), min_valid_runs=3)
    assert three["decision"] == "rerun" and three["recommended_attempts"] >= 4
    # at the first of four looks the spent alpha is far smaller, and so is the smallest p-value needed
    first = decide(runs([100, 101, 99, 102, 98]), runs([60, 70, 80, 65, 75]), method="robust", look=1, max_looks=4)
    n = first["recommended_attempts"]
    assert first["decision"] == "rerun" and n >= min_attempts_mann_whitney(first["alpha"])
    assert 1 / math.comb(2 * n, n) < first["alpha"]


def test_messages_say_above_or_below_alpha_truthfully():
    rng = np.random.default_rng(11)
    base, cand = lognormal(rng, 5, sigma=0.15), lognormal(rng, 5, 0.93, sigma=0.15)
    undecided = decide(runs(base), runs(cand), method="robust")
    assert undecided["p_value"] > 0.02
    text = undecided["messages"]["improvement_ok"]
    assert f"p = {undecided['p_value']:.3g} above alpha 0.02" in text and "below alpha" not in text
    accepted = decide(runs(BASELINE_MS), runs(CANDIDATE_MS), method="robust")
    assert f"p = {accepted['p_value']:.3g} below alpha 0.02" in accepted["messages"]["improvement_ok"]
    # a slower candidate at a spent first look: before, "p = 0.998 below alpha 0.00043"
    slow = decide(runs(BASELINE_MS * 2), runs([v * 1.2 for v in BASELINE_MS * 2]), method="robust", look=1,
                  max_looks=3)
    assert slow["p_value"] > 0.99 and slow["alpha"] < 0.001
    assert f"above alpha {slow['alpha']:.3g}" in slow["messages"]["improvement_ok"]
    assert "p = 1 above alpha 0.02" in accepted["messages"]["p95_ok"]


def test_an_unbounded_interval_and_odd_levels_read_sensibly():
    one = decide(runs([100]), runs([50]), method="robust", min_valid_runs=1)
    text = one["messages"]["improvement_ok"]
    assert "90% interval unbounded on both sides: too few attempts for a bound" in text
    assert "n/a" not in text and "unbounded to unbounded" not in text
    assert interval_text(None, 0.98, 0.9) == "90% interval unbounded below, up to 0.980"
    assert interval_text(0.91, None, 0.9) == "90% interval from 0.910, unbounded above"
    assert interval_text(0.91, 0.98, 0.95) == "95% interval 0.910 to 0.980"
    for confidence, text in [(0.9, "90%"), (0.95, "95%"), (0.999, "99.9%"), (0.99996, "99.996%"),
                             (1 - 2e-12, "99.9999999998%"), (1e-12, "0.0000000001%"), (0.5, "50%")]:
        assert level_text(confidence) == text
    # a companion that computed nothing says so, not "n/a% interval n/a to n/a"
    early = decide(runs(BASELINE_MS[:2]), runs(CANDIDATE_MS[:2]), method="seed")
    assert ROBUST.describe(early["robust"]) == "no statistics computed (insufficient_valid_runs)"
    late = decide(runs(BASELINE_MS), runs(CANDIDATE_MS), method="seed", look=1, max_looks=10)
    assert "100%" not in ROBUST.describe(late["robust"]) and "0%" not in ROBUST.describe(late["robust"])
