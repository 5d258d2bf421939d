"""``mlflow-perfgate calibrate``: the statistics (pure, hand-computed and simulated)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mlflow_perfgate.errors import InputError
from mlflow_perfgate.rules import Policy
from mlflow_perfgate.rules._calibration import (MAX_AUTO_ROUNDS, MAX_ROUNDS, age_text, arm_figures, auto_rounds,
                                                detectable_effect, paired_floor, power_test, rounds_needed, spreads)
from mlflow_perfgate.rules._stats import min_pairs_signed_rank, robust_sigma, step_quantile
from mlflow_perfgate.rules._statistical import too_few_to_decide

ARE = 3 / math.pi  # the signed-rank test's efficiency against the t-test for normal data
IMPROVEMENT = power_test(Policy(method="paired"))  # alpha 0.02, power 0.8


# --- the statistics (rules._calibration: pure) ----------------------------------------------------


def test_the_floor_is_the_fewest_rounds_with_which_the_paired_method_can_accept():
    assert IMPROVEMENT.floor == 6 == min_pairs_signed_rank(0.02)  # 2^-5 = 1/32 is not below 0.02
    for policy in (Policy(method="paired"), Policy(method="paired", alpha=0.1, min_valid_runs=2),
                   Policy(method="paired", mode="non_regression", confidence=0.98, min_valid_runs=1)):
        floor = paired_floor(policy)
        assert too_few_to_decide(policy, floor) is None and too_few_to_decide(policy, floor - 1) is not None
    assert paired_floor(Policy(method="paired", alpha=0.1, min_valid_runs=2)) == 4  # 1/16 < 0.1
    assert paired_floor(Policy(method="paired", min_valid_runs=9)) == 9  # min_valid_runs above the test's floor
    assert paired_floor(Policy(method="robust")) == 6  # the paired method's, whatever the policy's method


def test_zero_spread_detects_any_effect_from_the_floor_and_nothing_below_it():
    assert detectable_effect(0.0, 5, IMPROVEMENT) is None  # below the floor: it cannot accept at all
    assert detectable_effect(0.0, 6, IMPROVEMENT) == 0.0
    assert detectable_effect(0.03, 5, IMPROVEMENT) is None
    assert rounds_needed(0.0, 0.001, IMPROVEMENT) == 6
    assert rounds_needed(0.0, 0.05, power_test(Policy(method="paired", min_valid_runs=12))) == 12


def test_detectable_effect_is_the_hand_computed_t_approximation():
    # 10 rounds, spread 2%: delta = (t_{0.98, 9} + t_{0.8, 9}) * 0.02 / sqrt(10 * 3/pi), a speedup 1 - exp(-delta)
    z = stats.t.isf(0.02, 9) + stats.t.ppf(0.8, 9)
    delta = z * 0.02 / math.sqrt(10 * ARE)
    assert detectable_effect(0.02, 10, IMPROVEMENT) == pytest.approx(1 - math.exp(-delta), rel=1e-12)
    assert 0.020 < detectable_effect(0.02, 10, IMPROVEMENT) < 0.022
    # non_regression at 90%: a one-sided test at 0.05, the effect a margin exp(delta) - 1
    test = power_test(Policy(method="paired", mode="non_regression"), power=0.9)
    assert (test.level, test.floor) == (pytest.approx(0.05), 5)
    z = stats.t.isf(0.05, 19) + stats.t.ppf(0.9, 19)
    assert detectable_effect(0.04, 20, test) == pytest.approx(math.expm1(z * 0.04 / math.sqrt(20 * ARE)), rel=1e-12)
    assert "signed-rank interval" in test.describe() and "Wilcoxon signed-rank" in IMPROVEMENT.describe()


@pytest.mark.parametrize("spread", [0.004, 0.03, 0.2])
def test_rounds_needed_and_the_detectable_effect_are_inverse(spread):
    previous = 1.0
    for n in (6, 7, 10, 13, 20, 40, 100):
        effect = detectable_effect(spread, n, IMPROVEMENT)
        assert effect < previous  # more rounds resolve smaller effects
        previous = effect
        assert rounds_needed(spread, effect, IMPROVEMENT) == n
        assert rounds_needed(spread, effect * 1.02, IMPROVEMENT) <= n
        assert rounds_needed(spread, effect * 0.98, IMPROVEMENT) > n


def test_rounds_needed_grows_with_the_spread_squared_and_stops_at_the_cap():
    small, large = rounds_needed(0.02, 0.01, IMPROVEMENT), rounds_needed(0.04, 0.01, IMPROVEMENT)
    assert 3.6 < large / small < 4.4  # about 4x: n ~ s^2 (the t quantiles shrink a little as n grows)
    assert rounds_needed(0.5, 0.001, IMPROVEMENT) == MAX_ROUNDS


def test_the_planned_rounds_reach_their_power_with_the_exact_signed_rank_test():
    """Simulated: normal noise, the effect detectable at n, scipy's exact one-sided Wilcoxon at alpha."""
    rng = np.random.default_rng(7)
    for n in (10, 20):
        delta = IMPROVEMENT.shift(detectable_effect(0.02, n, IMPROVEMENT))
        d = rng.normal(-delta, 0.02, size=(3000, n))
        power = float(np.mean(stats.wilcoxon(d, alternative="less", axis=1).pvalue < 0.02))
        assert 0.75 <= power <= 0.86, (n, power)


def test_arm_figures_are_the_attempt_s_and_refuse_what_is_no_step_time():
    steps = [31.0, 30.5, 160.0, 32.0, 29.9, 140.0, 30.1, 33.0, 210.0, 30.2]
    figures = arm_figures(31.5, steps, None)
    assert figures == {"latency_ms": 31.5, "step_p10_ms": step_quantile(steps, 0.1), "fastest_step_ms": 29.9,
                       "uncontended_latency_ms": None}
    for bad in ([], [1.0, 0.0]):
        with pytest.raises(InputError, match="step time"):
            arm_figures(1.0, bad)
    with pytest.raises(InputError, match="uncontended_latency_ms must be a finite number > 0"):
        arm_figures(1.0, [1.0], -2.0)


def test_spreads_are_the_paired_method_s_over_the_rounds_holding_each_figure():
    ratios = [1.01, 0.98, 1.03, 0.99, 1.0, 1.2]
    rounds = [{"baseline": {"latency_ms": 100.0, "uncontended_latency_ms": 90.0 if i < 1 else None},
               "candidate": {"latency_ms": 100.0 * r, "uncontended_latency_ms": 91.0}} for i, r in enumerate(ratios)]
    found = spreads(rounds)
    raw = found["raw"]
    assert raw.rounds == 6 and raw.log_ratios == pytest.approx([math.log(r) for r in ratios], abs=1e-12)
    assert raw.spread == pytest.approx(robust_sigma(np.log(ratios)))  # 1.4826 MAD: the 1.2 round barely moves it
    assert raw.sd == pytest.approx(np.std(np.log(ratios), ddof=1)) and raw.sd > 2 * raw.spread
    assert found["uncontended"].rounds == 1 and found["uncontended"].spread is None  # a spread needs 2 rounds
    assert found["p10"].rounds == 0 and found["p10"].to_dict()["spread"] is None
    identical = spreads([{"baseline": {"latency_ms": 5.0}, "candidate": {"latency_ms": 5.0}}] * 3)["raw"]
    assert identical.spread == 0.0 and identical.log_ratios == (0.0, 0.0, 0.0)


def test_auto_rounds_plan_for_the_policy_s_smallest_effect():
    plan = auto_rounds(0.03, Policy(method="paired", min_improvement=0.05))
    assert plan["rounds"] == rounds_needed(0.03, 0.05, IMPROVEMENT) and plan["effect_name"] == "min_improvement"
    assert not plan["capped"] and plan["detectable_at_rounds"] <= 0.05
    margin = auto_rounds(0.03, Policy(method="paired", mode="non_regression", margin=0.02))
    assert margin["effect"] == 0.02 and margin["rounds"] == rounds_needed(
        0.03, 0.02, power_test(Policy(method="paired", mode="non_regression")))
    capped = auto_rounds(0.3, Policy(method="paired", min_improvement=0.01))
    assert capped["capped"] and capped["rounds"] == MAX_AUTO_ROUNDS and capped["needed"] > MAX_AUTO_ROUNDS
    assert capped["detectable_at_rounds"] > 0.01
    with pytest.raises(InputError, match="min_improvement is 0: no number of rounds detects an effect of 0"):
        auto_rounds(0.03, Policy(method="paired", min_improvement=0.0))


@pytest.mark.parametrize("call, needle", [
    (lambda: rounds_needed(-0.1, 0.05, IMPROVEMENT), "spread must be a finite number >= 0"),
    (lambda: rounds_needed(math.nan, 0.05, IMPROVEMENT), "spread must be"),
    (lambda: rounds_needed(0.02, 1.0, IMPROVEMENT), "effect must be a float in the range"),
    (lambda: rounds_needed(0.02, 0.0, IMPROVEMENT), "effect must be a float in the range"),
    (lambda: detectable_effect(0.02, 0, IMPROVEMENT), "rounds must be a positive integer"),
    (lambda: power_test(Policy(method="paired"), power=1.0), "power must be a float in the range"),
])
def test_the_statistics_refuse_bad_input(call, needle):
    with pytest.raises(InputError, match=needle):
        call()


def test_age_text():
    assert [age_text(s) for s in (3, 600, 5 * 3600, 3 * 86400)] == ["3 s", "10 min", "5.0 h", "3.0 d"]
