"""Method, mode, environment fingerprints and contention flags, through the evaluator."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.tracking import TAG

from helpers import CANDIDATE, CONDITIONS, log_series

BASE = tuple(100 + (i % 5) * 0.5 for i in range(10))


def test_every_decision_logs_both_methods(sqlite_uri):
    log_series("both", BASE, tuple(v * 0.8 for v in BASE))
    seed = pg.evaluate_group("both")
    robust = pg.evaluate_group("both", method="robust")
    assert seed["method"] == "seed" and robust["method"] == "robust"
    assert seed["decision"] == robust["decision"] == "accept"
    assert seed["robust"]["p_value"] == pytest.approx(robust["p_value"])
    assert robust["seed"]["observed_improvement"] == pytest.approx(seed["observed_improvement"])
    assert robust["ratio_ci_high"] < 1
    run = MlflowClient().get_run(seed["decision_run_id"])
    assert run.data.tags["perfgate.robust_decision"] == "accept"
    # the companion's figures under its prefix; the headline is the seed's own (a ratio of medians, no test)
    assert {"robust_p_value", "robust_ratio_estimate", "robust_ratio_ci_low", "robust_ratio_ci_high"} <= \
        set(run.data.metrics)
    assert run.data.metrics["robust_p_value"] == pytest.approx(robust["p_value"])
    assert run.data.metrics["ratio_estimate"] == pytest.approx(1 - seed["observed_improvement"])
    assert "p_value" not in run.data.metrics and "ratio_ci_low" not in run.data.metrics
    assert run.data.tags[TAG.HEADLINE] == "deciding"
    assert "Mann-Whitney" in run.data.tags[TAG.NOTE]


def test_non_regression_mode(sqlite_uri):
    log_series("same", BASE, BASE)
    assert pg.evaluate_group("same", method="robust", mode="non_regression")["decision"] == "accept"
    log_series("slow", BASE, tuple(v * 1.2 for v in BASE))
    result = pg.evaluate_group("slow", method="robust", mode="non_regression", margin=0.05)
    assert result["decision"] == "reject" and "no_regression_ok" in result["failed_checks"]
    params = MlflowClient().get_run(result["decision_run_id"]).data.params
    assert params["perfgate.margin"] == "0.05" and params["perfgate.alpha"] == "0.02"


def test_rerun_carries_recommended_attempts(sqlite_uri):
    noisy_base = (100, 120, 90, 110, 95)
    log_series("noisy", noisy_base, (97, 118, 88, 104, 93))
    result = pg.evaluate_group("noisy", method="robust")
    assert (result["decision"], result["reason"]) == ("rerun", "inconclusive")
    assert result["recommended_attempts"] > 5
    assert f"about {result['recommended_attempts']} attempts per arm" in \
        MlflowClient().get_run(result["decision_run_id"]).data.tags[TAG.NOTE]


def test_environment_mismatch_fail_warn_ignore(sqlite_uri):
    log_series("env", environment={"host": "a"})
    pg.log_attempt("env", "candidate", CANDIDATE, latency_ms=89, quality=0.895, environment={"host": "b"})
    with pytest.raises(ValueError, match="different environments.*host: 'a' \\(10 runs\\), 'b' \\(1 runs\\)"):
        pg.evaluate_group("env")
    empty = pg.decisions()
    assert empty.empty
    warned = pg.evaluate_group("env", env_mismatch="warn")
    # an empty result has a full one's figure and time dtypes (they were object)
    full = pg.decisions()
    for name in ("baseline_median_ms", "p_value", "start_time"):
        assert empty[name].dtype == full[name].dtype, name
    assert any(w.startswith("environment differs: host") for w in warned["warnings"])
    assert "environment differs" in MlflowClient().get_run(warned["decision_run_id"]).data.tags[TAG.NOTE]
    assert pg.evaluate_group("env", env_mismatch="ignore")["warnings"] == []


def test_changed_variable_excuses_its_fingerprint_key(sqlite_uri):
    base = {**CONDITIONS, "revision": "aaa"}
    for v in (100, 101, 99, 100, 100):
        pg.log_attempt("rev", "baseline", base, latency_ms=v, quality=0.9, environment={"git_revision": "aaa"})
        pg.log_attempt("rev", "candidate", {**base, "revision": "bbb"}, latency_ms=v * 0.8, quality=0.9,
                       environment={"git_revision": "bbb"})
    assert pg.evaluate_group("rev")["decision"] == "accept"


def test_contention_is_flagged_never_dropped(sqlite_uri):
    ids = log_series("cont", BASE, tuple(v * 0.8 for v in BASE[:9]) + (400,))
    result = pg.evaluate_group("cont", method="robust", maximum_p95_ratio=5)
    assert result["candidate"]["attempted_runs"] == 10 and result["candidate"]["valid_runs"] == 10
    assert result["contention_runs"]["candidate"] == [ids[-1]]
    assert any("possible contention" in w and ids[-1] in w for w in result["warnings"])


def test_evaluate_group_refuses_options_beside_a_policy_rather_than_ignoring_them(sqlite_uri):
    # found by a hostile run: policy=Policy(), maximum_failure_rate=0.2 judged at 0.0 without a word
    import mlflow_perfgate as pg
    from helpers import log_series

    log_series("both")
    for options in ({"maximum_failure_rate": 0.2}, {"method": "robust"}, {"method": "seed"}, {"alpha": 0.05}):
        with pytest.raises(pg.errors.PolicyError, match=r"give either policy or the options it holds, not both"):
            pg.evaluate_group("both", policy=pg.rules.Policy(method="robust"), **options)
    assert pg.evaluate_group("both", policy=pg.rules.Policy())["decision"] == "accept"
