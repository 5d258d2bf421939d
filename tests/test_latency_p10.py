"""latency="p10": the rules judge each attempt's 10th percentile of its measured steps (``step_p10_ms``).

The figure is the Harrell-Davis estimate (``rules._stats.step_quantile``), written from the step
times themselves wherever an attempt is logged (``log_attempt``, ``record``, the harness); a
successful attempt without it cannot be judged so, and says so.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy.stats import beta

import mlflow_perfgate as pg
from mlflow_perfgate import rules
from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import InputError, MissingField
from mlflow_perfgate.harness import compare
from mlflow_perfgate.rules import Policy
from mlflow_perfgate.rules._policy import LATENCIES
from mlflow_perfgate.rules._stats import step_quantile

from helpers import CANDIDATE, CONDITIONS


def harrell_davis(values, p):
    """Harrell and Davis (1982), eq. (1.2), written out: a Beta-weighted mean of the order statistics."""
    x, n = np.sort(values), len(values)
    a, b = p * (n + 1), (1 - p) * (n + 1)
    edges = beta.cdf(np.arange(n + 1) / n, a, b)
    return float(np.dot(np.diff(edges), x))


@pytest.mark.parametrize("steps", [[12.0, 11.0], [5.0, 1.0, 3.0, 2.0, 4.0], list(np.linspace(30, 90, 30)),
                                   [31.0, 30.5, 160.0, 32.0, 29.9, 140.0, 30.1, 33.0, 210.0, 30.2]])
def test_step_quantile_is_the_harrell_davis_estimate(steps):
    assert step_quantile(steps, 0.1) == pytest.approx(harrell_davis(steps, 0.1), rel=1e-12)
    assert min(steps) <= step_quantile(steps, 0.1) <= step_quantile(steps, 0.5) <= max(steps)


def test_step_quantile_rests_on_the_fastest_steps_where_a_neighbour_stretches_the_rest():
    # 30 steps: a third stretched 3 to 7 times by a busy neighbour, the others near 30 ms
    rng = np.random.default_rng(3)
    clean = 30 * np.exp(rng.normal(0, 0.03, 30))
    stretched = np.where(rng.random(30) < 1 / 3, clean * rng.uniform(3, 7, 30), clean)
    assert step_quantile(stretched, 0.1) == pytest.approx(step_quantile(clean, 0.1), rel=0.02)
    assert np.median(stretched) > np.median(clean)  # the median of steps moves, the low quantile barely


def test_step_quantile_refuses_what_is_no_step_time():
    assert step_quantile([7.5], 0.1) == 7.5
    for bad in ([], [1.0, 0.0], [1.0, math.nan], [1.0, math.inf]):
        with pytest.raises(InputError, match="needs at least one step time"):
            step_quantile(bad, 0.1)
    with pytest.raises(InputError, match="fraction must be"):
        step_quantile([1.0, 2.0], 1.0)


def test_the_policy_names_the_10th_percentile():
    policy = Policy(latency="p10")
    assert policy.latency_key == "step_p10_ms" and Policy(**policy.options()) == policy
    assert "p10" in LATENCIES


def test_an_attempt_without_its_10th_percentile_is_an_error_never_a_mixed_figure():
    base = [{"ok": True, "latency_ms": 100.0, "quality": 0.9, "step_p10_ms": 98.0}] * 4
    base = base + [{"ok": True, "latency_ms": 100.0, "quality": 0.9}]
    cand = [{"ok": True, "latency_ms": 90.0, "quality": 0.9, "step_p10_ms": 88.0}] * 5
    with pytest.raises(MissingField,
                       match=r"^baseline: 1 of 5 successful runs lack 'step_p10_ms', which latency='p10'"):
        rules.decide(base, cand, method="robust", latency="p10")
    decided = rules.decide(base[:4] + base[:1], cand, method="seed", latency="p10")
    assert "median 10th-percentile step 88 ms against baseline 98 ms" in decided["messages"]["improvement_ok"]


def test_log_attempt_writes_the_10th_percentile_from_the_step_times(sqlite_uri):
    steps = [12.5, 11.0, 12.0, 13.0]
    run_id = pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=12.25, quality=0.9, step_times_ms=steps)
    metrics = MlflowClient().get_run(run_id).data.metrics
    assert metrics["step_p10_ms"] == pytest.approx(harrell_davis(steps, 0.1)) and metrics["fastest_step_ms"] == 11.0
    failed = pg.log_attempt("p10", "baseline", CONDITIONS, ok=False, failure="oom", step_times_ms=steps)
    assert "step_p10_ms" not in MlflowClient().get_run(failed).data.metrics
    with pytest.raises(InputError, match="is the 10th percentile of step_times_ms"):
        pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, step_times_ms=steps,
                       metrics={"step_p10_ms": 11.0})
    # the same figure, given as well, is no conflict
    pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=12.25, quality=0.9, step_times_ms=steps,
                   metrics={"step_p10_ms": harrell_davis(steps, 0.1)})
    # given without steps (a harness of one's own): positive, and not above the typical step
    with pytest.raises(InputError, match="must be"):
        pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, metrics={"step_p10_ms": -1})
    with pytest.raises(InputError, match="the fastest step cannot be slower than the 10th percentile"):
        pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=10.0, quality=0.9,
                       metrics={"step_p10_ms": 5.0, "fastest_step_ms": 8.0})
    with pytest.raises(InputError, match="10th-percentile step cannot be slower than its typical one"):
        pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, metrics={"step_p10_ms": 20.0})
    # written from the steps it may pass a median of tied steps (every step has weight): still logged
    tied = [10.0, 10.0, 10.0, 400.0]
    run_id = pg.log_attempt("p10", "baseline", CONDITIONS, latency_ms=10.0, quality=0.9, step_times_ms=tied)
    assert MlflowClient().get_run(run_id).data.metrics["step_p10_ms"] == pytest.approx(harrell_davis(tied, 0.1))


def test_evaluate_judges_the_10th_percentile_and_the_report_says_so(sqlite_uri, capsys):
    # every attempt: twenty steps, half stretched by a neighbour; the candidate's clean steps 10% faster
    rng = np.random.default_rng(7)
    for arm, conditions, clean in (("baseline", CONDITIONS, 100.0), ("candidate", CANDIDATE, 90.0)):
        for _ in range(6):
            steps = [float(clean * rng.uniform(1.0, 1.02) * (rng.choice([1, 2.5]))) for _ in range(20)]
            pg.log_attempt("p10-eval", arm, conditions, latency_ms=float(np.median(steps)), quality=0.9,
                           step_times_ms=steps)
    decided = pg.evaluate_group("p10-eval", method="robust", latency="p10")
    assert decided["decision"] == "accept"
    assert decided["baseline"]["latency_key"] == "step_p10_ms"
    assert 100 <= decided["baseline"]["median_ms"] <= 102 and 90 <= decided["candidate"]["median_ms"] <= 91.8
    run = MlflowClient().get_run(decided["decision_run_id"])
    assert run.data.tags["perfgate.latency"] == "p10"
    assert "latency judged: `p10` (each attempt's 10th percentile of its measured steps" in decided["report"]
    assert all("step_p10_ms" in a for a in decided["attempts"])
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--group", "p10-eval", "--method", "robust", "--latency", "p10", "--format", "json"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and json.loads(out)["candidate"]["latency_key"] == "step_p10_ms"
    assert set(pg.decisions(group="p10-eval")["latency"]) == {"p10"}


def test_evaluate_refuses_p10_on_attempts_logged_without_steps(sqlite_uri, capsys):
    for value in (100.0, 101.0, 99.0):
        pg.log_attempt("p10-no-steps", "baseline", CONDITIONS, latency_ms=value, quality=0.9)
        pg.log_attempt("p10-no-steps", "candidate", CANDIDATE, latency_ms=value - 9, quality=0.9)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--group", "p10-no-steps", "--latency", "p10"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "lack 'step_p10_ms'" in err and "latency='raw'" in err


def test_a_supervised_step_interleaved_round_logs_each_arm_s_10th_percentile(sqlite_uri):
    result = compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 4}, {"checkpoint": True}, attempts=1,
                     progress=False, min_valid_runs=1, env_mismatch="warn", timeout_s=120, latency="p10",
                     interleave="steps", method="seed")
    client = MlflowClient()
    assert {a["arm"] for a in result["attempts"]} == {"baseline", "candidate"}
    for attempt in result["attempts"]:
        run = client.get_run(attempt["run_id"])
        steps = [m.value for m in client.get_metric_history(run.info.run_id, "step_time_ms")]
        assert len(steps) == 4 and run.data.metrics["step_p10_ms"] == pytest.approx(harrell_davis(steps, 0.1))
    assert result["baseline"]["latency_key"] == "step_p10_ms"


def test_the_suite_gate_tests_the_figure_the_entry_judged_not_the_raw_latency(sqlite_uri):
    # found in review: the gate's boundary p-value was computed on latency_ms whatever the entry judged
    from mlflow_perfgate.rules._suite import entry_evidence

    rng = np.random.default_rng(11)
    # the candidate's clean steps 30% slower; a neighbour stretched most of the baseline's steps and few of
    # the candidate's, so the medians say the reverse
    for arm, conditions, clean, busy in (("baseline", CONDITIONS, 100.0, 0.7), ("candidate", CANDIDATE, 130.0, 0.2)):
        for pair in range(8):
            steps = [float(clean * rng.uniform(1.0, 1.01) * (3.0 if rng.random() < busy else 1.0)) for _ in range(30)]
            pg.log_attempt("p10-suite", arm, conditions, latency_ms=float(np.median(steps)), quality=0.9,
                           step_times_ms=steps)
    for latency in ("p10", "fastest", "raw"):
        result = pg.evaluate_group("p10-suite", method="robust", mode="non_regression", latency=latency,
                                   dry_run=True)
        from_result = entry_evidence("e", result)
        key = result["baseline"].get("latency_key", "latency_ms")
        runs = {arm: [{"ok": True, "latency_ms": a[key], "quality": a["quality"]} for a in result["attempts"]
                      if a["arm"] == arm] for arm in ("baseline", "candidate")}
        by_hand = entry_evidence("e", result | {"baseline": {}, "latency": "raw"}, baseline_runs=runs["baseline"],
                                 candidate_runs=runs["candidate"])
        assert from_result.tests == by_hand.tests, latency
    assert entry_evidence("e", pg.evaluate_group("p10-suite", method="robust", mode="non_regression",
                                                 latency="p10", dry_run=True)).tests["no_regression_ok"] < 1e-3
