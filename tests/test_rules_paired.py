"""The paired method: the signed-rank statistics, its decisions on ABBA rounds, and its hand-over to the robust method.

Statistics are checked against scipy with fixed seeds, against small cases worked out by hand
(n = 1, 2, 3, all equal, zeros, ties), against brute force (the Walsh averages, the sign
flips), and (the interval's coverage) by seeded simulations with loose bounds, in the manner of
asv's ``_check_ci``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm, rankdata, wilcoxon

from mlflow_perfgate.rules import METHODS, Policy, decide, judge
from mlflow_perfgate.rules._paired import MIN_ROUNDS, PAIRED, complete_rounds
from mlflow_perfgate.rules._records import ArmSummary
from mlflow_perfgate.rules._robust import ROBUST
from mlflow_perfgate.rules._sequential import sequential_thresholds
from mlflow_perfgate.rules._stats import (
    hodges_lehmann_paired_ratio,
    log_ratios,
    min_pairs_signed_rank,
    paired_log_shift,
    recommended_pairs,
    signed_rank_interval_rank,
    signed_rank_null_cdf,
    signed_rank_test,
    walsh_averages,
)

REPO = Path(__file__).resolve().parents[1]


def abba(baseline, candidate, quality=0.9, start=0):
    """Attempt records of interleaved rounds: round i holds baseline[i] and candidate[i]."""
    assert len(baseline) == len(candidate)
    b = [{"ok": True, "latency_ms": float(v), "quality": quality, "pair": start + i} for i, v in enumerate(baseline)]
    c = [{"ok": True, "latency_ms": float(v), "quality": quality, "pair": start + i} for i, v in enumerate(candidate)]
    return b, c


def unpaired(latencies, quality=0.9):
    return [{"ok": True, "latency_ms": float(v), "quality": quality} for v in latencies]


def failed(count, pair=None, reason="timeout"):
    return [{"ok": False, "failure": reason, **({} if pair is None else {"pair": pair + i})} for i in range(count)]


def loaded(rng, n, ratio=0.8, load=0.3, noise=0.02, median=100.0):
    """A busy runner: each round's load multiplies both of its attempts; each attempt has its own small noise."""
    shared = np.exp(rng.normal(0.0, load, n))
    base = median * shared * np.exp(rng.normal(0.0, noise, n))
    cand = median * ratio * shared * np.exp(rng.normal(0.0, noise, n))
    return list(base), list(cand)


def brute_sign_flip_p(d, alternative):
    """The signed-rank p-value by enumerating every sign flip (zeros dropped, ties at average ranks)."""
    d = np.asarray([x for x in d if x != 0], dtype=float)
    ranks = rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    stats = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product((0, 1), repeat=d.size)]
    stats = np.asarray(stats)
    less, greater = np.mean(stats <= observed + 1e-9), np.mean(stats >= observed - 1e-9)
    if alternative == "less":
        return less
    if alternative == "greater":
        return greater
    return min(1.0, 2 * min(less, greater))


# --- the null distribution and the interval's rank ----------------------------------------------


def test_signed_rank_null_distribution_by_hand():
    assert np.allclose(signed_rank_null_cdf(0), [1.0])
    assert np.allclose(signed_rank_null_cdf(1), [0.5, 1.0])
    assert np.allclose(signed_rank_null_cdf(2), [0.25, 0.5, 0.75, 1.0])
    # subsets of {1, 2, 3}: sums 0, 1, 2, 3, 3, 4, 5, 6
    assert np.allclose(np.diff(signed_rank_null_cdf(3), prepend=0) * 8, [1, 1, 1, 2, 1, 1, 1])
    cdf = signed_rank_null_cdf(12)
    pmf = np.diff(cdf, prepend=0)
    assert cdf[-1] == 1.0 and np.allclose(pmf, pmf[::-1])  # symmetric about n(n+1)/4
    assert not cdf.flags.writeable


@pytest.mark.parametrize("n", [4, 7, 10, 20, 35, 50])
def test_signed_rank_null_distribution_matches_scipy_exact(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        d = rng.normal(0.1, 1.0, n)
        result = wilcoxon(d, alternative="less", method="exact")
        assert signed_rank_null_cdf(n)[int(result.statistic)] == pytest.approx(result.pvalue, rel=1e-12)


def test_interval_rank_by_hand_and_normal_approximation():
    # Hollander & Wolfe's table: n = 10, P(T+ <= 10) = 0.042 <= 0.05 < P(T+ <= 11); P(T+ <= 8) = 0.024
    assert signed_rank_interval_rank(10, 0.90) == 11
    assert signed_rank_interval_rank(10, 0.95) == 9
    # the fewest pairs for a bound: 2^-n <= (1 - confidence) / 2
    assert signed_rank_interval_rank(4, 0.90) == 0 and signed_rank_interval_rank(5, 0.90) == 1
    assert signed_rank_interval_rank(5, 0.95) == 0 and signed_rank_interval_rank(6, 0.95) == 1
    assert signed_rank_interval_rank(1, 0.5) == 0
    # above 50 pairs, the normal approximation; it agrees with the exact rank at 50
    spread = math.sqrt(50 * 51 * 101 / 24)
    assert abs(signed_rank_interval_rank(50, 0.9) - math.floor(50 * 51 / 4 + 0.5 - norm.isf(0.05) * spread)) <= 1
    n = 80
    expected = math.floor(n * (n + 1) / 4 + 0.5 - norm.isf(0.05) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    assert signed_rank_interval_rank(n, 0.9) == expected


def test_fewest_pairs_that_can_reach_alpha():
    assert min_pairs_signed_rank(0.02) == 6  # 1/32 = 0.031 is not below 0.02; 1/64 is
    assert min_pairs_signed_rank(0.05) == 5
    assert min_pairs_signed_rank(1 / 32) == 6  # p = alpha is not below alpha
    assert min_pairs_signed_rank(0.6) == 1
    assert 2.0 ** -min_pairs_signed_rank(1e-4) < 1e-4 <= 2.0 ** -(min_pairs_signed_rank(1e-4) - 1)


# --- the test -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 6, 10, 25, 50, 80])
@pytest.mark.parametrize("alternative", ["less", "greater", "two-sided"])
def test_p_value_is_scipys_wilcoxon(n, alternative):
    rng = np.random.default_rng(1000 + n)
    for shift in (-0.3, 0.0, 0.2):
        d = rng.normal(shift, 1.0, n)
        p_value, how = signed_rank_test(d, alternative)
        assert p_value == wilcoxon(d, alternative=alternative).pvalue
        assert how == ("exact" if n <= 50 else "normal approximation")
        if n <= 50:
            assert p_value == pytest.approx(wilcoxon(d, alternative=alternative, method="exact").pvalue)


def test_p_value_by_hand():
    assert signed_rank_test([-0.1], "less") == (0.5, "exact")
    assert signed_rank_test([-0.1], "greater")[0] == 1.0
    assert signed_rank_test([-0.1], "two-sided")[0] == 1.0
    assert signed_rank_test([-0.1, -0.2], "less")[0] == 0.25
    assert signed_rank_test([-0.1, -0.2, -0.3], "less")[0] == 0.125
    # T+ = 1 (the +0.1 has rank 1): P(T+ <= 1) = 2/8
    assert signed_rank_test([0.1, -0.2, -0.3], "less")[0] == pytest.approx(0.25)
    # all equal: no non-zero difference, no evidence either way
    assert signed_rank_test([0.0] * 5, "less") == (1.0, "no non-zero difference")
    assert signed_rank_test([0.0] * 60, "greater") == (1.0, "no non-zero difference")


def test_zeros_are_dropped_and_ties_ranked_by_average():
    # a zero: scipy enumerates the sign flips; T+ = 0 of the three non-zero ones: 1/8
    p_value, how = signed_rank_test([0.0, -0.1, -0.2, -0.3], "less")
    assert p_value == pytest.approx(0.125) and how == "exact (sign flips; ties or zeros)"
    rng = np.random.default_rng(4)
    for n in (4, 7, 11, 13):
        d = np.round(rng.normal(-0.1, 0.2, n), 1)  # rounded: ties and zeros
        for alternative in ("less", "greater", "two-sided"):
            p_value, how = signed_rank_test(d, alternative)
            assert p_value == pytest.approx(brute_sign_flip_p(d, alternative)), (d, alternative)
            assert p_value == pytest.approx(wilcoxon(d, alternative=alternative).pvalue)
    d = np.round(rng.normal(0, 0.2, 30), 1)  # ties above 13 pairs: the normal approximation
    assert signed_rank_test(d, "less") == (wilcoxon(d, alternative="less").pvalue, "normal approximation")


# --- the estimate and the interval --------------------------------------------------------------


def test_hodges_lehmann_is_the_median_of_the_walsh_averages_by_hand():
    assert paired_log_shift(np.array([0.1]), None)[0] == pytest.approx(0.1)
    assert paired_log_shift(np.array([0.0, 0.2]), None)[0] == pytest.approx(0.1)  # {0, 0.1, 0.2}
    # {0, 0, 0, 0.15, 0.15, 0.3}: the median is (0 + 0.15) / 2
    assert paired_log_shift(np.array([0.0, 0.0, 0.3]), None)[0] == pytest.approx(0.075)
    assert paired_log_shift(np.array([0.05] * 7), 0.9) == (0.05, 0.05, 0.05)


@pytest.mark.parametrize("n", [1, 2, 5, 9, 16, 31])
def test_hodges_lehmann_against_brute_force(n):
    rng = np.random.default_rng(n)
    d = rng.standard_t(3, n)
    walsh = [(d[i] + d[j]) / 2 for i in range(n) for j in range(i, n)]
    assert sorted(walsh_averages(d)) == pytest.approx(sorted(walsh))
    shift, low, high = paired_log_shift(d, 0.9)
    assert shift == pytest.approx(statistics.median(walsh))
    k = signed_rank_interval_rank(n, 0.9)
    if k == 0:
        assert low is None and high is None
    else:
        ordered = sorted(walsh)
        assert (low, high) == (pytest.approx(ordered[k - 1]), pytest.approx(ordered[len(walsh) - k]))
        assert low <= shift <= high


def test_interval_inverts_the_signed_rank_test():
    """T+(d - theta) is the number of Walsh averages above theta (Tukey), so the bounds are where the test turns."""
    rng = np.random.default_rng(8)
    d = rng.normal(-0.1, 0.1, 12)
    walsh = np.sort(walsh_averages(d))
    for theta in np.linspace(walsh[0] - 0.01, walsh[-1] + 0.01, 41):
        assert wilcoxon(d - theta, alternative="greater").statistic == np.sum(walsh > theta)
    _, low, high = paired_log_shift(d, 0.9)
    k = signed_rank_interval_rank(12, 0.9)
    tail = signed_rank_null_cdf(12)[k - 1]
    assert tail <= 0.05 < signed_rank_null_cdf(12)[k]
    # just outside a bound the one-sided exact test rejects at the tail level; just inside it does not
    eps = 1e-9
    assert wilcoxon(d - (low - eps), alternative="greater", method="exact").pvalue <= tail + 1e-12
    assert wilcoxon(d - (low + eps), alternative="greater", method="exact").pvalue > tail
    assert wilcoxon(d - (high + eps), alternative="less", method="exact").pvalue <= tail + 1e-12


@pytest.mark.parametrize(("n", "noise"), [(8, "lognormal"), (15, "contended"), (60, "lognormal")])
def test_interval_coverage_by_simulation(n, noise):
    """A factor between the arms lies in the 90% interval about 90% of the time, whatever the shared load."""
    rng = np.random.default_rng(100 + n)
    true_ratio, reps, covered = 0.8, 400, 0
    for _ in range(reps):
        base, cand = loaded(rng, n, true_ratio, load=0.5, noise=0.05)
        if noise == "contended":  # a neighbour slows one attempt now and then, in either arm
            base = [v * (3 if rng.random() < 0.1 else 1) for v in base]
            cand = [v * (3 if rng.random() < 0.1 else 1) for v in cand]
        result = hodges_lehmann_paired_ratio(base, cand, confidence=0.9)
        covered += result["ratio_ci_low"] <= true_ratio <= result["ratio_ci_high"]
    assert 0.85 <= covered / reps <= 0.97


def test_paired_ratio_is_unit_free_and_antisymmetric():
    rng = np.random.default_rng(3)
    base, cand = loaded(rng, 12)
    forward = hodges_lehmann_paired_ratio(base, cand)
    scaled = hodges_lehmann_paired_ratio([v * 1000 for v in base], [v * 1000 for v in cand])
    backward = hodges_lehmann_paired_ratio(cand, base)
    for key in ("ratio_estimate", "ratio_ci_low", "ratio_ci_high"):
        assert scaled[key] == pytest.approx(forward[key], rel=1e-9)
    assert backward["ratio_estimate"] == pytest.approx(1 / forward["ratio_estimate"])
    assert backward["ratio_ci_low"] == pytest.approx(1 / forward["ratio_ci_high"])
    assert forward["pairs"] == 12 and forward["confidence"] == 0.95


def test_log_ratios_tie_in_any_unit():
    assert log_ratios([200, 100, 2], [190, 95, 1.9]).tolist() == [round(math.log(0.95), 12)] * 3
    assert log_ratios([100.0], [100.0]).tolist() == [0.0]


@pytest.mark.parametrize(("base", "cand"), [([], []), ([1.0], [1.0, 2.0]), ([0.0], [1.0]), ([1.0], [float("nan")]),
                                             (None, [1.0])])
def test_paired_ratio_rejects_bad_input(base, cand):
    with pytest.raises(ValueError):
        hodges_lehmann_paired_ratio(base, cand)


def test_recommended_pairs_formula_by_hand():
    s = 0.1
    d = np.array([-0.05, -0.05 + s, -0.05 - s])  # MAD s, centre -0.05
    sigma = 1.482602218505602 * s
    z = norm.isf(0.05) + norm.ppf(0.8)
    expected = math.ceil(z * z * sigma ** 2 / 0.05 ** 2 / (3 / math.pi))
    assert recommended_pairs(d, margin=0.0) == expected
    assert recommended_pairs(d[:1], margin=0.0) is None
    assert recommended_pairs(np.zeros(4), margin=0.0) is None
    assert recommended_pairs(np.zeros(4), margin=0.05) == 2
    assert recommended_pairs(np.array([0.01, -0.01, 0.0]), margin=0.0) == 1000
    with pytest.raises(ValueError, match="margin"):
        recommended_pairs(d, margin=-1)


# --- rounds -------------------------------------------------------------------------------------


def test_complete_rounds_use_each_arms_median_and_skip_incomplete_rounds():
    b = [{"ok": True, "latency_ms": v, "quality": 1, "pair": p} for v, p in
         [(100, 0), (104, 0), (90, 0), (110, 1), (120, 2), (130, 3)]] + [{"ok": True, "latency_ms": 50, "quality": 1}]
    c = [{"ok": True, "latency_ms": v, "quality": 1, "pair": p} for v, p in [(80, 0), (99, 1), (97, 1), (95, 3)]]
    c += failed(1, pair=2)
    rounds, base, cand = complete_rounds(ArmSummary.from_runs(b), ArmSummary.from_runs(c))
    assert rounds == [0, 1, 3]  # round 2's candidate failed; the unpaired 50 ms has no round
    assert base == [100, 110, 130] and cand == [80, 98, 95]


# --- decisions: improvement ---------------------------------------------------------------------


def test_paired_accepts_a_speedup_the_unpaired_test_cannot_see():
    """On a busy runner the load between rounds hides a 20% speedup from Mann-Whitney; within a round it cancels."""
    rng = np.random.default_rng(2)
    b, c = abba(*loaded(rng, 10, 0.8, load=0.4))
    robust = decide(b, c, method="robust")
    paired = decide(b, c, method="paired")
    assert robust["decision"] == "rerun"
    assert paired["decision"] == "accept" and paired["method"] == "paired" and paired["reason"] == \
        "declared_thresholds_checked"
    assert paired["improvement_ok"] is True and paired["failed_checks"] == []
    assert paired["pairs"] == 10 and paired["p_value_method"] == "exact"
    assert paired["ratio_ci_low"] < paired["ratio_estimate"] < paired["ratio_ci_high"] < 0.95
    d = np.round(np.log([r["latency_ms"] for r in c]) - np.log([r["latency_ms"] for r in b]), 12)
    assert paired["p_value"] == wilcoxon(d, alternative="less").pvalue
    assert paired["p_value"] == 2 ** -10  # every round faster
    assert "Wilcoxon signed-rank (exact) p = 0.000977 below alpha 0.02" in paired["messages"]["improvement_ok"]
    # both methods' figures, whichever decides
    assert paired["robust"]["decision"] == "rerun" and paired["paired"]["p_value"] == paired["p_value"]
    assert robust["paired"]["decision"] == "accept" and robust["paired"]["pairs"] == 10


def test_below_the_signed_rank_floor_the_paired_method_cannot_accept_and_advises_the_floor():
    """No t-test stands in below the floor any more: 5 rounds each faster give p = 1/32 > 0.02."""
    rng = np.random.default_rng(2)
    b, c = abba(*loaded(rng, 5, 0.8, load=0.4))
    result = decide(b, c, method="paired")
    assert (result["decision"], result["reason"], result["method"], result["pairs"]) == (
        "rerun", "inconclusive", "paired", 5)
    assert result["p_value_method"] == "exact" and result["p_value"] == 1 / 32
    assert result["recommended_attempts"] == 6  # 2^-6 < 0.02: the fewest rounds that can accept
    assert "Wilcoxon signed-rank (exact)" in result["messages"]["improvement_ok"]
    assert PAIRED.describe(result).startswith("one-sided Wilcoxon signed-rank p = ")
    # at 0.05 the signed-rank test reaches 1/32 with 5 rounds
    assert decide(b, c, method="paired", alpha=0.05)["decision"] == "accept"


@pytest.mark.parametrize("alpha", [0.02, 0.005])
def test_the_paired_method_falsely_accepts_at_most_alpha_on_symmetric_noise_at_any_size(alpha):
    """Identical arms, noise symmetric about no change (normal, heavy-tailed, bimodal), 3 to 8 rounds.

    Where ``2^-n >= alpha`` no accept is possible at all (the old t-test accepted 3.3% of bimodal
    5-round comparisons at alpha 0.02, 6.4x alpha at 0.005)."""
    rng = np.random.default_rng(12)
    draws = {"normal": lambda n: rng.normal(0.0, 0.05, n), "t2": lambda n: 0.05 * rng.standard_t(2, n),
             "bimodal": lambda n: rng.choice([-0.1, 0.1], n) + rng.normal(0, 0.005, n)}
    for name, draw in draws.items():
        for n in (3, 5, 6, 8):
            accepted = 0
            for _ in range(150):
                d = draw(n)
                b = [{"ok": True, "latency_ms": 100.0, "quality": 0.9, "pair": i} for i in range(n)]
                c = [{"ok": True, "latency_ms": 100.0 * math.exp(x), "quality": 0.9, "pair": i}
                     for i, x in enumerate(d)]
                accepted += decide(b, c, method="paired", alpha=alpha, min_valid_runs=3, min_improvement=0.0,
                                   maximum_p95_ratio=10.0)["decision"] == "accept"
            # 150 draws: the binomial's 99.9% upper bound at rate alpha
            assert accepted / 150 <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / 150), (name, n, accepted)
            if 2.0 ** -n >= alpha:
                assert accepted == 0, (name, n)


def test_advice_counts_the_signed_rank_floor():
    for candidate in ([80, 81, 79, 101], [80, 81, 79, 82]):
        advised = decide(*abba([100] * 4, candidate), method="paired", min_valid_runs=4)
        assert (advised["decision"], advised["reason"]) == ("rerun", "inconclusive")
        assert advised["recommended_attempts"] == 6  # a 20% speedup: the floor is what is missing


def test_paired_power_beats_the_unpaired_test_on_a_loaded_runner():
    rng = np.random.default_rng(2)
    accepted = {"robust": 0, "paired": 0}
    for _ in range(40):
        b, c = abba(*loaded(rng, 10, 0.8, load=0.3, noise=0.05))
        for method in accepted:
            accepted[method] += decide(b, c, method=method)["decision"] == "accept"
    assert accepted["paired"] >= 30 and accepted["paired"] > 2 * accepted["robust"]


def test_paired_rejects_a_significant_but_too_small_improvement():
    rng = np.random.default_rng(5)
    b, c = abba(*loaded(rng, 12, 0.98, load=0.3, noise=0.002))
    result = decide(b, c, method="paired")
    assert result["p_value"] < 0.02 and result["ratio_ci_low"] > 0.95
    assert result["improvement_ok"] is False and result["decision"] == "reject"
    assert result["failed_checks"] == ["improvement_ok"]


def test_paired_inconclusive_answers_rerun_with_attempts():
    rng = np.random.default_rng(11)
    b, c = abba(*loaded(rng, 6, 0.93, load=0.3, noise=0.1))
    result = decide(b, c, method="paired")
    assert result["improvement_ok"] is None and (result["decision"], result["reason"]) == ("rerun", "inconclusive")
    assert result["recommended_attempts"] >= 7


def test_identical_rounds_are_never_an_improvement():
    rng = np.random.default_rng(6)
    base, _ = loaded(rng, 8)
    b, c = abba(base, base)
    result = decide(b, c, method="paired")
    assert result["ratio_estimate"] == result["ratio_ci_low"] == result["ratio_ci_high"] == 1.0
    assert result["p_value"] == 1.0 and result["p_value_method"] == "no non-zero difference"
    assert result["decision"] == "reject" and result["failed_checks"] == ["improvement_ok"]
    assert decide(b, c, method="paired", mode="non_regression")["decision"] == "accept"


def test_a_failed_check_rejects_and_failures_stay_in_the_denominator():
    rng = np.random.default_rng(1)
    base, cand = loaded(rng, 10, 0.8, load=0.4)
    b, c = abba(base, cand, quality=0.9)
    c_poor = [{**run, "quality": 0.5} for run in c]
    result = decide(b, c_poor, method="paired")
    assert result["quality_ok"] is False and result["decision"] == "reject"
    with_failure = decide(b, c + failed(1, pair=10), method="paired")
    assert with_failure["failure_rate_ok"] is False and "failure_rate_ok" in with_failure["failed_checks"]
    assert with_failure["pairs"] == 10


def test_the_tail_check_is_the_exceedance_test():
    base = [100, 101, 99, 100, 102, 98, 100, 101, 99, 100]
    cand = [80, 81, 79, 80, 82, 78, 80, 81, 79, 250]  # one contended attempt is the P95
    result = decide(*abba(base, cand), method="paired")
    assert result["p95_ratio"] > 1.05 and result["p95_ok"] is True and result["p95_p_value"] >= 0.02
    heavy = [80, 81, 79, 80, 82, 200, 210, 220, 230, 240]
    result = decide(*abba(base, heavy), method="paired", mode="non_regression", margin=1.0)
    assert result["p95_ok"] is False and result["p95_p_value"] < 0.02


# --- decisions: non-regression ------------------------------------------------------------------


def test_non_regression_accepts_rejects_and_straddles():
    rng = np.random.default_rng(7)
    same = decide(*abba(*loaded(rng, 10, 1.0, load=0.3, noise=0.005)), method="paired", mode="non_regression")
    assert same["no_regression_ok"] is True and same["ratio_ci_high"] <= 1.05 and same["decision"] == "accept"
    assert "improvement_ok" not in same and same["required_improvement"] == -0.05
    slow = decide(*abba(*loaded(rng, 10, 1.2, load=0.3, noise=0.005)), method="paired", mode="non_regression",
                  maximum_p95_ratio=2.0)
    assert slow["no_regression_ok"] is False and slow["ratio_ci_low"] > 1.05 and slow["decision"] == "reject"
    edge = decide(*abba(*loaded(rng, 8, 1.05, load=0.3, noise=0.05)), method="paired", mode="non_regression",
                  maximum_p95_ratio=2.0)
    assert edge["ratio_ci_low"] <= 1.05 < edge["ratio_ci_high"] and edge["no_regression_ok"] is None
    assert (edge["decision"], edge["reason"]) == ("rerun", "inconclusive") and edge["recommended_attempts"] > 8
    assert "one-sided Wilcoxon signed-rank (exact) p (slower)" in edge["messages"]["no_regression_ok"]


@pytest.mark.parametrize("scale", [1, 2, 0.5, 10, 1.9, 0.37, 1000])
def test_a_ratio_exactly_at_the_threshold_decides_the_same_in_any_unit(scale):
    rng = np.random.default_rng(12)
    base = [100 * scale * v for v in np.exp(rng.normal(0, 0.3, 10))]
    faster = decide(*abba(base, [v * 0.95 for v in base]), method="paired")
    assert faster["ratio_estimate"] == pytest.approx(0.95, rel=1e-9)
    assert faster["improvement_ok"] is True and faster["decision"] == "accept"
    slower = decide(*abba(base, [v * 1.05 for v in base]), method="paired", mode="non_regression")
    assert slower["no_regression_ok"] is True and slower["decision"] == "accept"
    over = decide(*abba(base, [v * 1.0501 for v in base]), method="paired", mode="non_regression")
    assert over["no_regression_ok"] is False and over["decision"] == "reject"


def test_hopeless_candidate_failures_reject_at_once():
    rng = np.random.default_rng(13)
    b, c = abba(*loaded(rng, 4))
    # 4 complete rounds, a fifth candidate attempt failed: with maximum_failure_rate 0 no success can help
    result = decide(b + [{"ok": True, "latency_ms": 100.0, "quality": 0.9, "pair": 4}], c + failed(1, pair=4),
                    method="paired")
    assert (result["decision"], result["reason"], result["method"]) == ("reject", "unreliable_candidate", "paired")
    assert result["failed_checks"] == ["failure_rate_ok"] and result["pairs"] == 4
    # with maximum_failure_rate 0.5 one failure in 5 attempts (and 1 still needed) is not hopeless
    tolerant = decide(b + [{"ok": True, "latency_ms": 100.0, "quality": 0.9, "pair": 4}], c + failed(1, pair=4),
                      method="paired", maximum_failure_rate=0.5)
    assert (tolerant["decision"], tolerant["reason"]) == ("rerun", "insufficient_valid_runs")
    # every candidate attempt failed: no complete round, the robust method judges and rejects
    none = decide(b, failed(4, pair=0), method="paired")
    assert (none["decision"], none["reason"], none["method"]) == ("reject", "unreliable_candidate", "robust")
    assert none["paired_fallback"].startswith("only 0 complete ABBA rounds")
    assert none["messages"]["candidate_failed_every_attempt"] == \
        "NOTE: the candidate failed every one of its 4 attempts (timeout)"


# --- preconditions, looks, fallback ---------------------------------------------------------------


def test_preconditions_keep_the_specifications_reasons():
    rng = np.random.default_rng(9)
    base, cand = loaded(rng, 4)
    short = decide(*abba(base, cand), method="paired")
    assert (short["decision"], short["reason"], short["method"]) == ("rerun", "insufficient_valid_runs", "paired")
    # a 20% speedup on 4 rounds: what is missing is significance at alpha 0.02, which the
    # signed-rank test can give from 6 rounds
    assert short["recommended_attempts"] >= 6 and short["pairs"] == 4
    b, c = abba(*loaded(rng, 6))
    shaky = decide(b + failed(1, pair=6), c, method="paired", maximum_failure_rate=0.1)
    assert (shaky["decision"], shaky["reason"]) == ("rerun", "unreliable_baseline")


def test_sequential_looks_spend_alpha_as_the_robust_rule_does():
    rng = np.random.default_rng(1)
    b, c = abba(*loaded(rng, 10, 0.8, load=0.4))
    first = decide(b, c, method="paired", look=1, max_looks=4)
    spent = sequential_thresholds(1, 4, alpha=0.02, confidence=0.9)
    assert first["alpha"] == spent["alpha"] and first["confidence"] == spent["confidence"]
    assert decide(b, c, method="robust", look=1, max_looks=4)["alpha"] == first["alpha"]
    # 10 rounds cannot reach the first look's tiny alpha (2^-10 > alpha): rerun, advice at least the fewest that can
    assert first["p_value"] == 2 ** -10 > first["alpha"] and first["p_value_method"] == "exact"
    assert first["decision"] == "rerun"
    assert 2.0 ** -first["recommended_attempts"] < first["alpha"]
    assert f"above alpha {first['alpha']:.3g}" in first["messages"]["improvement_ok"]


def test_without_rounds_the_robust_method_judges_and_says_so():
    rng = np.random.default_rng(1)
    base, cand = loaded(rng, 10, 0.8, load=0.4)
    result = decide(unpaired(base), unpaired(cand), method="paired")
    robust = decide(unpaired(base), unpaired(cand), method="robust")
    assert result["method"] == "robust"  # only a decision made with the paired statistics says paired
    assert result["paired_fallback"] == "no ABBA rounds recorded: judged by the robust method"
    assert result["messages"]["paired_fallback"] == "NOTE: no ABBA rounds recorded: judged by the robust method"
    for key in ("decision", "reason", "p_value", "ratio_estimate", "ratio_ci_low", "ratio_ci_high",
                "recommended_attempts"):
        assert result[key] == robust[key], key
    # the paired summary shows no robust figure under its own names
    assert result["paired"] == {"decision": robust["decision"], "reason": robust["reason"], "judged_by": "robust",
                                "note": "NOTE: no ABBA rounds recorded: judged by the robust method"}
    assert "p_value" not in robust["paired"] and robust["paired"]["judged_by"] == "robust"
    assert PAIRED.describe(robust["paired"]).startswith("judged by the robust method (NOTE: no ABBA rounds")


def test_fewer_than_two_complete_rounds_fall_back_too():
    b = unpaired([100] * 5) + [{"ok": True, "latency_ms": 100.0, "quality": 0.9, "pair": 0}]
    c = unpaired([80] * 5) + [{"ok": True, "latency_ms": 80.0, "quality": 0.9, "pair": 0}]
    result = decide(b, c, method="paired")
    assert MIN_ROUNDS == 2 and result["method"] == "robust"
    assert result["paired_fallback"].startswith("only 1 complete ABBA round (a round needs a successful attempt")
    assert result["paired_fallback"].endswith(": judged by the robust method")


def test_policy_judge_and_registry():
    policy = Policy(method="paired", mode="non_regression", margin=0.1)
    assert policy.method == "paired" and "paired" in METHODS and METHODS["paired"] is PAIRED
    with pytest.raises(ValueError, match="judged by the seed method"):
        Policy(method="paired", objective="memory")
    rng = np.random.default_rng(1)
    b, c = abba(*loaded(rng, 10, 1.0, load=0.4, noise=0.01))
    decision = judge(b, c, policy)
    assert decision.method == "paired" and set(decision.companions) == {"seed", "robust", "paired"}
    # the decision run's metric names: no clash with the robust method's
    paired_metrics = {figure.metric_name for figure in PAIRED.figures if figure.metric_name}
    robust_metrics = {figure.metric_name for figure in ROBUST.figures if figure.metric_name}
    assert paired_metrics.isdisjoint(robust_metrics)
    assert {"paired_p_value", "paired_ratio_estimate", "paired_ratio_ci_low", "paired_ratio_ci_high",
            "paired_pairs", "paired_p95_p_value", "paired_recommended_attempts"} == paired_metrics
    assert {figure.name for figure in PAIRED.figures} == {
        "p_value", "p_value_method", "ratio_estimate", "ratio_ci_low", "ratio_ci_high", "pairs", "p95_p_value",
        "alpha", "confidence", "recommended_attempts"}
    assert "Wilcoxon signed-rank p" in PAIRED.describe(decision.companions["paired"])


def test_result_is_json_serialisable():
    rng = np.random.default_rng(1)
    for n in (2, 3, 10):
        b, c = abba(*loaded(rng, n))
        json.dumps(decide(b, c, method="paired", min_valid_runs=2), allow_nan=False)
    json.dumps(decide(unpaired([100]), unpaired([50]), method="paired", min_valid_runs=1), allow_nan=False)


def test_two_rounds_are_judged_with_an_unbounded_interval():
    b, c = abba([100, 120], [80, 95])
    result = decide(b, c, method="paired", min_valid_runs=2)
    assert result["method"] == "paired" and result["pairs"] == 2
    assert result["ratio_ci_low"] is None and result["ratio_ci_high"] is None and result["p_value"] == 0.25
    assert result["decision"] == "rerun" and result["recommended_attempts"] >= 6  # the signed-rank floor
    assert "90% interval unbounded on both sides: too few attempts for a bound" in result["messages"]["improvement_ok"]


def test_paired_module_loads_neither_mlflow_nor_torch():
    code = (
        "import json, sys\n"
        "import mlflow_perfgate.rules._paired\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'torch'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []
