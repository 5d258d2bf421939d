"""Policy(latency="uncontended"): the rules judge each attempt's quiet-step latency where it has one."""

from __future__ import annotations

import pytest

from mlflow_perfgate import rules
from mlflow_perfgate.errors import PolicyError
from mlflow_perfgate.rules import Policy
from mlflow_perfgate.rules._records import REASONS, ArmSummary


def runs(raw, quiet, quality=0.9):
    """Successful attempt records with a raw latency and, where given, an uncontended one."""
    return [{"ok": True, "latency_ms": r, "quality": quality, **({} if q is None else {"uncontended_latency_ms": q})}
            for r, q in zip(raw, quiet)]


# Raw latencies hide a 10% improvement under two contended attempts per arm; the quiet steps show it.
BASE = runs([100, 150, 101, 160, 99], [100, 100, 101, 100, 99])
CAND = runs([90, 150, 89, 91, 160], [90, 89, 89, 91, 90])


def test_the_policy_option_is_validated_and_defaults_to_raw():
    assert Policy().latency == "raw" and Policy().latency_key == "latency_ms"
    policy = Policy(latency="uncontended")
    assert policy.latency_key == "uncontended_latency_ms" and Policy(**policy.options()) == policy
    assert policy != Policy() and policy.replace(latency="raw") == Policy()
    with pytest.raises(PolicyError, match=r"latency must be one of \['raw', 'uncontended', 'fastest', 'p10'\], got 'quiet'"):
        Policy(latency="quiet")


def test_the_option_changes_which_latency_is_judged():
    raw = rules.decide(BASE, CAND, method="robust")
    quiet = rules.decide(BASE, CAND, method="robust", latency="uncontended")
    assert (raw["baseline"]["median_ms"], raw["candidate"]["median_ms"]) == (101, 91)
    assert (quiet["baseline"]["median_ms"], quiet["candidate"]["median_ms"]) == (100, 90)
    assert quiet["baseline"]["p95_ms"] == 101 and raw["baseline"]["p95_ms"] == 160
    assert raw["decision"] == "rerun" and quiet["decision"] == "accept"
    assert quiet["contention_ok"] is True and quiet["baseline_contended_runs"] == 0
    assert "contention_ok" not in raw and "contended_runs" not in raw["baseline"]
    assert quiet["baseline"]["latency_key"] == "uncontended_latency_ms"
    # the seed method judges the same figures (its noise proxy is then the quiet one)
    seed = rules.decide(BASE, CAND, latency="uncontended")
    assert seed["decision"] == "accept" and seed["baseline_noise"] == pytest.approx(1 / 100)


def test_an_attempt_without_the_figure_is_judged_raw_and_counted():
    cand = runs([90, 150, 89, 91, 160], [90, None, 89, 91, 90])
    summary = ArmSummary.from_runs(cand, latency_key="uncontended_latency_ms")
    assert summary.latencies == (90, 150, 89, 91, 90) and summary.contended_runs == 1
    result = rules.decide(BASE, cand, method="robust", latency="uncontended")
    assert result["candidate_contended_runs"] == 1 and result["candidate"]["contended_runs"] == 1
    assert result["candidate"]["valid_runs"] == 5  # never dropped


def test_more_than_half_contended_is_a_contention_rerun_never_a_drop():
    cand = runs([90, 150, 89, 91, 160], [90, None, None, None, 90])
    for method in ("seed", "robust", "paired"):
        result = rules.decide(BASE, cand, method=method, latency="uncontended")
        assert (result["decision"], result["reason"]) == ("rerun", "contention"), method
        assert result["contention_ok"] is None and result["candidate"]["valid_runs"] == 5
        assert "3 of 5 candidate successful attempts have no uncontended latency" in result["messages"]["contention_ok"]
        # every judging method's companion says the same
        assert result["robust"]["decision"] == result["seed"]["decision"] == "rerun"
    assert "contention" in REASONS
    # half exactly is not more than half
    half = runs([90, 150, 89, 91], [90, None, None, 89])
    assert rules.decide(BASE[:4], half, latency="uncontended", min_valid_runs=4)["contention_ok"] is True


def test_a_failure_reject_and_the_preconditions_stand_under_contention():
    contended = runs([90, 150, 89, 91, 160], [None] * 5)
    failed = [*contended, {"ok": False, "failure": "timeout"}]
    result = rules.decide(BASE, failed, method="robust", latency="uncontended")
    assert result["decision"] == "reject" and "failure_rate_ok" in result["failed_checks"]
    assert result["contention_ok"] is None
    few = rules.decide(BASE, contended[:3], latency="uncontended")
    assert (few["decision"], few["reason"]) == ("rerun", "insufficient_valid_runs")
    assert few["candidate_contended_runs"] == 3


def test_the_specifications_functions_always_read_latency_ms():
    summary = rules.summarize_repeated_runs(BASE)
    assert summary["median_ms"] == 101 and "contended_runs" not in summary
    assert rules.evaluate_regression(BASE, CAND)["baseline"]["median_ms"] == 101


def test_a_bad_uncontended_figure_is_refused():
    with pytest.raises(ValueError, match="uncontended_latency_ms of a successful run must be a finite number > 0"):
        rules.decide(runs([100] * 5, [0.0] * 5), CAND, latency="uncontended")
