"""``mlflow-perfgate calibrate`` and ``compare --rounds auto``: the statistics (pure, hand-computed and
simulated), and the whole path on a real SQLite store with a real tiny TinyLM in real children."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from mlflow_perfgate.calibrate import calibrate
from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import InputError, PolicyError, WorkloadFailed
from mlflow_perfgate.harness import calibration_identity
from mlflow_perfgate.rules import Policy
from mlflow_perfgate.rules._calibration import (MAX_AUTO_ROUNDS, MAX_ROUNDS, age_text, arm_figures, auto_rounds,
                                                detectable_effect, paired_floor, power_test, rounds_needed, spreads)
from mlflow_perfgate.rules._stats import min_pairs_signed_rank, robust_sigma, step_quantile
from mlflow_perfgate.rules._statistical import too_few_to_decide
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.tracking._calibration import calibration_key, latest_calibration

REPO = Path(__file__).resolve().parents[1]
ARE = 3 / math.pi  # the signed-rank test's efficiency against the t-test for normal data
TINY = ["--set", "input_shape=2,16"]
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


# --- bad input, before anything runs ------------------------------------------------------------------


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize("argv, needle", [
    (["calibrate", "--rounds", "1"], "Invalid value for '--rounds'"),
    (["calibrate", "--effect", "1.5"], "Invalid value for '--effect'"),
    (["calibrate", "--effect", "0"], "Invalid value for '--effect'"),
    (["calibrate", "--power", "1"], "Invalid value for '--power'"),
    (["calibrate", "--latency", "slowest"], "Invalid value for '--latency'"),
    (["calibrate", "--set", "input_shape"], "expected KEY=VALUE"),
    (["calibrate", "--set", "steps=5"], "steps is given twice, 30 and as the condition steps='5'"),
    (["calibrate", "--workload", "no_such_module_x:make", "--set", "model=m", "--set", "input_shape=1",
      "--set", "batch_size=1", "--set", "dtype=fp32", "--set", "device=cpu", "--set", "measurement_method=w"],
     "no_such_module_x"),
    (["calibrate", "--workload", "mine:make", "--set", "model=m"], "missing the fixed conditions"),
    (["compare", "--change", "checkpoint=true", "--rounds", "0"], "expected a positive integer or auto, got '0'"),
    (["compare", "--change", "checkpoint=true", "--rounds", "3", "--attempts", "3"], "give --rounds or --attempts"),
    (["compare", "--change", "checkpoint=true", "--rounds", "auto", "--method", "seed"],
     "got method 'seed': pass --method paired, or give the rounds"),
    # a calibration of its own interleaving: whole attempts' noise is not step-interleaved rounds'
    (["compare", "--change", "checkpoint=true", "--rounds", "auto", "--interleave", "attempts"],
     "--latency p10 --interleave attempts` first"),
    (["compare", "--change", "checkpoint=true", "--rounds", "auto", "--interleave", "lockstep"],
     "--latency p10 --interleave lockstep` first"),
    # compare's defaults are what a calibration measures: the command to run names them, threads included
    (["compare", "--change", "checkpoint=true", "--rounds", "auto"],
     "run `mlflow-perfgate calibrate --workload tinylm --steps 30 --warmup 2 --threads 1 --latency p10` first"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_logged(sqlite_uri, capsys, argv, needle):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert MlflowClient().search_runs(["0"]) == []


def test_the_python_api_refuses_bad_arguments_before_anything_runs(sqlite_uri):
    for kwargs, needle in (({"rounds": 1}, "rounds must be an integer >= 2"), ({"effects": ()}, "at least one effect"),
                           ({"effects": (0.05, 2.0)}, "effect must be"), ({"steps": 0}, "steps must be an integer"),
                           ({"warmup": -1}, "warmup must be an integer >= 0"), ({"horizons": (0,)}, "horizon"),
                           ({"timeout_s": 0}, "timeout_s must be")):
        with pytest.raises(InputError, match=needle):
            calibrate("tinylm", {"input_shape": "2,16"}, progress=False, **kwargs)
    with pytest.raises(PolicyError, match="alpha must be"):
        calibrate("tinylm", {"input_shape": "2,16"}, alpha=1.5, progress=False)
    assert MlflowClient().search_runs(["0"]) == []


# --- end to end on the real store ---------------------------------------------------------------------


def _perfgate(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "mlflow_perfgate", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_calibrate_then_compare_rounds_auto_end_to_end(sqlite_uri, capsys):
    # the comparison whose rounds a calibration will plan: paired, p10, steps interleaved; a large
    # min_improvement and alpha 0.1 keep the plan at the floor (4 rounds) whatever this machine's noise
    compare_argv = ["compare", *TINY, "--set", "steps=4", "--set", "warmup=1", "--change", "checkpoint=true",
                    "--rounds", "auto", "--method", "paired", "--interleave", "steps", "--latency", "p10",
                    "--threads", "1", "--alpha", "0.1", "--min-valid-runs", "3", "--min-improvement", "0.6",
                    "--experiment", "cal", "--no-progress", "--format", "json"]
    code, out, err = run_cli(capsys, *compare_argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--rounds auto found no calibration of 'tinylm' with these conditions and threads on this host" in err
    assert MlflowClient().get_experiment_by_name("cal") is None  # nothing was created or logged
    command = err.split("run `", 1)[1].split("` first", 1)[0]
    assert command == ("mlflow-perfgate calibrate --workload tinylm --set input_shape=2,16 --steps 4 --warmup 1 "
                       "--threads 1 --latency p10 --experiment cal")

    # the command the error gives, as written (fewer rounds than its default, and JSON)
    completed = _perfgate(*shlex.split(command)[1:], "--rounds", "4", "--no-progress", "--format", "json")
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads(completed.stdout)
    assert summary["rounds_asked"] == 4 and summary["complete_rounds"] + summary["failed_rounds"] == 4
    assert [r["lead"] for r in summary["rounds"]] == ["baseline", "candidate", "baseline", "candidate"]  # ABBA
    assert all(len(r["baseline"]["step_times_ms"]) == 4 for r in summary["rounds"] if r["complete"])
    assert "Wilcoxon signed-rank" in summary["test"]["test"] and summary["test"]["floor"] == 6
    assert summary["advice"] and summary["latency"] == "p10"

    client = MlflowClient()
    run = client.get_run(summary["calibration_run_id"])
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert run.info.status == "FINISHED" and tags[TAG.KIND] == "calibration"
    assert tags[TAG.CALIBRATION_KEY] == calibration_key(summary["identity"])
    assert summary["identity"]["conditions"]["steps"] == "4" and "repeats" not in summary["identity"]["conditions"]
    assert tags["perfgate.env.host"] == summary["identity"]["host"] and tags["perfgate.env.torch_threads"] == "1"
    assert tags[TAG.CALIBRATION_ADVICE] == summary["advice"] and "Wilcoxon" in tags[TAG.CALIBRATION_TEST]
    assert params["input_shape"] == "[2, 16]" and params["steps"] == "4" and params["perfgate.threads"] == "1"
    assert params["perfgate.alpha"] == "0.02" and params["perfgate.effects"] == "0.02,0.05,0.1"
    assert "| latency | figure | rounds | spread |" in tags[TAG.NOTE]
    # the spread logged is the one the artifact's rounds give, recomputed here from their step times
    folder = client.download_artifacts(run.info.run_id, "perfgate")
    stored = json.loads((Path(folder) / "calibration.json").read_text())
    assert stored["format_version"] == 1 and len(stored["rounds"]) == 4
    complete = [r for r in stored["rounds"] if r["complete"]]
    p10 = [math.log(step_quantile(r["candidate"]["step_times_ms"], 0.1) / step_quantile(r["baseline"]["step_times_ms"],
                                                                                          0.1)) for r in complete]
    assert metrics["spread_step_p10_ms"] == pytest.approx(robust_sigma(np.asarray(p10)), abs=1e-9)
    assert metrics["rounds_step_p10_ms"] == len(complete) and metrics["sd_latency_ms"] >= 0
    assert metrics["complete_rounds"] == summary["complete_rounds"]

    # compare --rounds auto, now: the rounds the calibration's p10 spread calls for under compare's policy
    code, out, err = run_cli(capsys, *compare_argv)
    assert code in (0, 1, 3), err
    result = json.loads(out)
    policy = Policy(method="paired", latency="p10", alpha=0.1, min_valid_runs=3, min_improvement=0.6)
    expected = auto_rounds(metrics["spread_step_p10_ms"], policy)["rounds"]
    assert expected == 4 and result["rounds_auto"]["rounds"] == expected
    assert result["rounds_auto"]["calibration_run_id"] == run.info.run_id and result["pairs"] <= expected
    assert len([a for a in result["attempts"] if a["arm"] == "baseline"]) == expected
    assert f"rounds auto: 4 rounds from calibration {run.info.run_id} (" in err and " old): step_p10_ms spread" in err
    comparison = client.get_run(result["comparison_run_id"]).data
    assert comparison.tags[TAG.CALIBRATION_RUN] == run.info.run_id
    assert 0 <= int(comparison.tags[TAG.CALIBRATION_AGE]) < 600
    assert comparison.tags[TAG.ROUNDS_AUTO] == result["rounds_auto"]["text"]
    assert comparison.params["repeats"] == "4"
    assert comparison.tags[TAG.CONFIGURATION].endswith(", 4 rounds")  # the rounds it planned, not "auto"


@pytest.mark.slow
def test_the_latest_finished_calibration_of_the_same_identity_is_the_one_found(sqlite_uri):
    conditions = {"input_shape": "2,16"}
    first = calibrate("tinylm", conditions, rounds=3, steps=3, warmup=1, supervised=False, progress=False)
    other = calibrate("tinylm", conditions, rounds=3, steps=4, warmup=1, supervised=False, progress=False)
    second = calibrate("tinylm", conditions, rounds=3, steps=3, warmup=1, supervised=False, progress=False,
                       effects=(0.1,), latency="raw")
    assert first["identity"] == second["identity"] != other["identity"]
    found = latest_calibration(first["identity"])
    assert found.run_id == second["calibration_run_id"] != first["calibration_run_id"]
    assert found.spread("latency_ms") == pytest.approx(next(f for f in second["figures"]
                                                            if f["latency"] == "raw")["spread"])
    assert latest_calibration(other["identity"]).run_id == other["calibration_run_id"]
    # the per-figure log ratios are those of the rounds' own figures
    for item in second["figures"]:
        complete = [r for r in second["rounds"] if r["complete"] and r["baseline"]["figures"][item["key"]] is not None
                    and r["candidate"]["figures"][item["key"]] is not None]
        assert item["log_ratios"] == pytest.approx([math.log(r["candidate"]["figures"][item["key"]]
                                                             / r["baseline"]["figures"][item["key"]])
                                                    for r in complete], abs=1e-11)
        assert set(item["needed"]) == {0.1} and all(v is None or v >= 6 for v in item["needed"].values())
    # the identity holds the threads asked for (compare's default, 1, when none) and the host, not the git revision
    base = {**conditions, "steps": 3, "warmup": 1}
    from mlflow_perfgate.harness import base_conditions

    identity = calibration_identity("tinylm", base_conditions("tinylm", base, 7), 1)
    assert identity == first["identity"] and "git_revision" not in identity and identity["threads"] == "1"
    assert calibration_identity("tinylm", base_conditions("tinylm", base, 7), None) != identity
    assert latest_calibration(first["identity"], experiment_name="no-such-experiment") is None


def test_a_calibration_whose_rounds_all_fail_is_a_failed_run_auto_never_reads(sqlite_uri):
    fixed = {"model": "Hostile", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
             "measurement_method": "wall_ms", "fail_at": 0}
    with pytest.raises(WorkloadFailed, match=r"calibration failed: only 0 of 2 rounds completed in both arms .*boom"):
        calibrate("tests.workloads_fixtures.hostile:raiser", fixed, rounds=2, steps=2, warmup=0, supervised=False,
                  progress=False)
    run, = MlflowClient().search_runs(["0"])
    assert run.info.status == "FAILED" and run.data.tags[TAG.KIND] == "calibration"
    assert "only 0 of 2 rounds" in run.data.tags[TAG.END_REASON] and run.data.metrics["failed_rounds"] == 2
    from mlflow_perfgate.harness import base_conditions

    identity = calibration_identity("tests.workloads_fixtures.hostile:raiser",
                                    base_conditions("x", {**fixed, "steps": 2, "warmup": 0}, 1), 1)
    assert run.data.tags[TAG.CALIBRATION_KEY] == calibration_key(identity)
    assert latest_calibration(identity) is None  # FAILED: compare --rounds auto never plans from it


@pytest.mark.slow
def test_calibrate_text_output(sqlite_uri, capsys):
    code, out, err = run_cli(capsys, "calibrate", *TINY, "--rounds", "3", "--steps", "3", "--warmup", "1",
                             "--in-process", "--no-progress", "--effect", "0.05", "--mode", "non_regression")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("calibration of tinylm: ") and "3 measured steps per arm" in lines[0]
    assert lines[1].startswith("test: the paired method's 90% signed-rank interval ending below 1 + margin")
    header = next(line for line in lines if line.startswith("latency "))
    assert header.split() == ["latency", "figure", "rounds", "spread", "sd", "margin", "at", "5", "margin", "at",
                              "10", "margin", "at", "20", "margin", "at", "40", "rounds", "for", "5%"]
    rows = {line.split()[0]: line.split() for line in lines if line.split()[:1] in (["raw"], ["p10"], ["fastest"])}
    assert rows["p10"][1] == "step_p10_ms" and rows["raw"][1] == "latency_ms"
    assert any(line.startswith("advice: ") for line in lines)
    assert lines[-2].startswith("calibration run: ") and lines[-1].startswith("see it: ")


def test_the_docs_calibrate_command_is_the_one_compare_rounds_auto_asks_for(sqlite_uri, capsys):
    from helpers import blocks, doc_section

    block, = blocks(doc_section("how-to/ci.md", "How many rounds this runner needs"), "bash")
    calibrate_line, compare_line = block.replace("\\\n", " ").strip().splitlines()
    # the documented comparison, as written, in a store without a calibration: refused before anything runs
    code, _, err = run_cli(capsys, *shlex.split(compare_line)[1:], "--no-progress")
    assert code == 2 and f"run `{calibrate_line}` first" in err, err
    assert MlflowClient().search_runs(["0"]) == []
