"""compare and diagnose end to end: real TinyLM attempts on the CPU, a real SQLite store."""

from __future__ import annotations

import json
import math
import os

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
import mlflow_perfgate.workloads as pg_workloads
from mlflow_perfgate.cli import main
from mlflow_perfgate.harness import candidate_change_for, compare
from mlflow_perfgate.rules._sequential import sequential_thresholds, spent_between
from mlflow_perfgate.tracking import TAG

from configs import SPEC

TINY = {"input_shape": "2,16", "warmup": 1, "steps": 3}
HOSTILE_OK = "tests.workloads_fixtures.hostile:raiser"
FIXED = {"model": "Hostile", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
         "measurement_method": "wall_ms", "warmup": 0, "steps": 2}


def test_compare_nests_interleaved_attempts_under_the_decided_comparison(sqlite_uri):
    result = compare("tinylm", TINY, {"checkpoint": True}, attempts=2, supervised=False, progress=False,
                     min_valid_runs=2, env_mismatch="warn", **SPEC)
    client = MlflowClient()
    comparison = client.get_run(result["comparison_run_id"])
    assert result["decision_run_id"] == result["comparison_run_id"]
    assert comparison.data.tags[TAG.DECISION] == result["decision"] in ("accept", "reject", "rerun")
    assert comparison.data.tags[TAG.KIND] == "decision" and comparison.info.status == "FINISHED"
    assert comparison.data.params["perfgate.changed_variable"] == "checkpoint"
    assert comparison.data.params["input_shape"] == "[2, 16]"
    attempts = sorted(result["attempts"], key=lambda a: a["start_time"])
    assert [a["arm"] for a in attempts] == ["baseline", "candidate", "candidate", "baseline"]
    for attempt in attempts:
        run = client.get_run(attempt["run_id"])
        assert run.data.tags[TAG.PARENT] == comparison.info.run_id
        assert run.data.tags[TAG.RUN_VALID] == "true"
        assert "peak_mem_mib" in run.data.metrics and "throughput_tok_s" in run.data.metrics
        assert len(client.get_metric_history(run.info.run_id, "step_time_ms")) == 3
        assert run.data.tags["perfgate.env.torch_threads"].isdigit()


@pytest.mark.slow
def test_hostile_candidate_that_kills_itself_is_a_counted_failure(sqlite_uri):
    conditions = {**FIXED, "fail_at": 1000}
    result = compare("tests.workloads_fixtures.hostile:killer", conditions, {"fail_at": 0}, attempts=2,
                     progress=False, timeout_s=60, min_valid_runs=2, **SPEC)
    # the specification: an arm without min_valid_runs successes cannot be judged, whatever killed it
    assert (result["decision"], result["reason"]) == ("rerun", "insufficient_valid_runs")
    assert result["candidate"]["failed_runs"] == 2 and result["candidate"]["attempted_runs"] == 2
    assert all("SIGKILL" in reason for reason in result["candidate"]["failure_reasons"])
    assert result["baseline"]["valid_runs"] == 2


@pytest.fixture
def servers(monkeypatch):
    """Every attempt server a fork runner starts during the test."""
    from mlflow_perfgate.workloads import _runner

    started = []
    original = _runner._Server.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(_runner._Server, "__init__", spy)
    return started


@pytest.mark.skipif(not pg_workloads.fork_available(), reason="the fork runner needs os.fork on Linux")
def test_compare_runs_its_attempts_through_one_warm_server_closed_at_the_end(sqlite_uri, servers):
    seen = []
    result = compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 999}, attempts=2, progress=False, timeout_s=60,
                     min_valid_runs=2, on_attempt=lambda arm, attempt: seen.append(attempt.runner),
                     allow_undecidable=True)
    assert seen == ["fork"] * 4 and result["baseline"]["valid_runs"] == 2
    assert len(servers) == 1 and servers[0].process.poll() is not None
    # Interrupted after its first attempt, the comparison still closes its server.
    with pytest.raises(KeyboardInterrupt):
        compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 999}, attempts=2, progress=False, timeout_s=60,
                on_attempt=lambda arm, attempt: (_ for _ in ()).throw(KeyboardInterrupt()), allow_undecidable=True)
    assert len(servers) == 2 and servers[1].process.poll() is not None
    with pytest.raises(ValueError, match="runner must be one of"):
        compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 999}, attempts=1, progress=False, runner="thread",
                allow_undecidable=True)


@pytest.mark.slow
@pytest.mark.skipif(not pg_workloads.fork_available(), reason="the fork runner needs os.fork on Linux")
def test_a_workload_whose_import_crashes_is_failed_attempts_not_a_dead_comparison(sqlite_uri, monkeypatch):
    """The attempts record the crash (the comparison goes on to its first round's end); both arms failing
    there is a setup error, not a verdict: exit 2 naming both, nothing judged."""
    from mlflow_perfgate.errors import WorkloadFailed

    monkeypatch.setenv("PERFGATE_HOSTILE_IMPORT", "1")
    with pytest.raises(WorkloadFailed, match=r"neither arm ran its first round \(baseline: killed by signal SIGSEGV; "
                                             r"candidate: killed by signal SIGSEGV\)"):
        compare("tests.workloads_fixtures.crash_on_import:make", {**FIXED, "fail_at": 0}, {"fail_at": 1}, attempts=1,
                progress=False, timeout_s=60, runner="fork", min_valid_runs=1, **SPEC)
    attempts = MlflowClient().search_runs(["0"], f"tags.\"{TAG.KIND}\" = 'attempt'")
    assert sorted(run.data.tags[TAG.FAILURE] for run in attempts) == ["killed by signal SIGSEGV"] * 2
    assert pg.decisions().empty


def test_compare_refuses_a_non_single_change(sqlite_uri):
    with pytest.raises(ValueError, match="exactly one"):
        compare("tinylm", TINY, {"checkpoint": True, "dtype": "bf16"}, attempts=1, progress=False)
    with pytest.raises(ValueError, match="fixed"):
        compare("tinylm", TINY, {"device": "cuda"}, attempts=1, progress=False)
    with pytest.raises(ValueError, match="really change"):
        compare("tinylm", TINY, {"checkpoint": "false"}, attempts=1, progress=False)
    assert pg.decisions().empty


def test_diagnose_logs_a_diagnosis_run_with_a_plan(sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--set", "input_shape=2,16", "--steps", "2", "--capacity-mib", "1",
              "--format", "json"])
    assert exit_info.value.code in (0, None)
    report = json.loads(capsys.readouterr().out)
    # a 1 MiB budget: the run is under memory pressure, so the plan is activation checkpointing
    assert report["synthesis"]["primary_signal"] == "memory"
    assert report["plan"]["changed_variable"] == "checkpoint" and report["objective"] == "memory"
    assert "--change checkpoint=true" in report["command"] and "--objective memory" in report["command"]
    run = MlflowClient().get_run(report["diagnosis_run_id"])
    assert run.data.tags[TAG.KIND] == "diagnosis"
    artifacts = {a.path for a in MlflowClient().list_artifacts(run.info.run_id, "perfgate")}
    assert {"perfgate/evidence.json", "perfgate/synthesis.json", "perfgate/plan.json"} <= artifacts


def test_candidate_change_mapping():
    base = {"checkpoint": False, "num_workers": 0, "dtype": "fp32"}
    assert candidate_change_for({"primary_signal": "memory"}, base) == {"checkpoint": True}
    assert candidate_change_for({"primary_signal": "time", "hotspot": "dataloader"}, base) == {"num_workers": 2}
    assert candidate_change_for({"primary_signal": "time", "hotspot": "dataloader"}, {"num_workers": 3}) == {"num_workers": 6}
    assert candidate_change_for({"primary_signal": "time", "hotspot": "backward"}, base) == {"dtype": "bf16"}
    assert candidate_change_for({"primary_signal": "none"}, base) is None
    assert candidate_change_for({"primary_signal": "memory"}, {**base, "checkpoint": "true"}) is None


def test_diagnosis_run_spans_the_diagnosis_and_keeps_the_profiler_off_the_terminal(sqlite_uri, tmp_path,
                                                                                   monkeypatch, capfd):
    (tmp_path / "timed_tinylm.py").write_text(
        "import time\nfrom pathlib import Path\nfrom mlflow_perfgate.workloads import tinylm\n\n"
        "def make(conditions):\n"
        "    Path('built_at').write_text(repr(time.time()))\n"
        "    return tinylm.make_workload(conditions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    conditions = {**TINY, "model": "TinyLM", "batch_size": 2, "dtype": "fp32", "device": "cpu",
                  "measurement_method": "wall_median_step_ms", "checkpoint": False}
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--workload", "timed_tinylm:make", *[f"--set={k}={v}" for k, v in conditions.items()],
              "--steps", "2", "--capacity-mib", "1"])
    assert exit_info.value.code in (0, None)
    out, err = capfd.readouterr()
    assert "profiler_start" not in err and "profiler_stop" not in err  # torch.profiler's own lines
    assert "single change: checkpoint: false -> true" in out  # booleans spelled as the params hold them
    assert "why: memory pressure" in out
    assert "True" not in out and "False" not in out
    run_id = next(line.split(": ")[1] for line in out.splitlines() if line.startswith("diagnosis run: "))
    run = MlflowClient().get_run(run_id)
    built_ms = float((tmp_path / "built_at").read_text()) * 1000
    assert run.info.start_time <= built_ms <= run.info.end_time  # the run was open while the workload was built
    assert "single change: `checkpoint`: `false` -> `true`" in run.data.tags[TAG.NOTE]
    profile = {a.path for a in MlflowClient().list_artifacts(run_id, "perfgate/profile")}
    assert "perfgate/profile/operators.txt" in profile
    if "perfgate/profile/profiler.log" in profile:  # kept for whoever needs it
        path = MlflowClient().download_artifacts(run_id, "perfgate/profile/profiler.log", str(tmp_path))
        assert open(path).read().strip()


def test_pipeline_prints_the_change_as_the_params_spell_it(sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["pipeline", "--set", "input_shape=2,16", "--set", "steps=2", "--set", "warmup=1", "--steps", "2",
              "--attempts", "1", "--capacity-mib", "1", "--min-valid-runs", "1", "--in-process", "--no-progress"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "comparison: checkpoint=true from the diagnosis's plan, objective memory" in out


def test_a_supervised_attempts_contention_figures_reach_mlflow(sqlite_uri):
    seen = {}
    result = compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 2}, {"checkpoint": True}, attempts=1,
                     progress=False, min_valid_runs=1, env_mismatch="warn", timeout_s=120, **SPEC,
                     on_attempt=lambda arm, attempt: seen.setdefault(arm, attempt))
    client = MlflowClient()
    for attempt in result["attempts"]:
        outcome, run = seen[attempt["arm"]], client.get_run(attempt["run_id"])
        assert outcome.supervised and run.data.tags[TAG.CONTENTION_STATUS] == outcome.contention_status
        if outcome.contention_status != "measured":  # no /proc here: the status says why, no figures
            assert outcome.contention_status.startswith("unavailable: ")
            assert "runq_wait_ms" not in run.data.metrics
            continue
        for key in ("runq_wait_ms", "cpu_ms", "wait_share", "nivcsw", "uncontended_steps"):
            assert run.data.metrics[key] == pytest.approx(getattr(outcome, key)), key
        history = client.get_metric_history(run.info.run_id, "step_wait_share")
        history = sorted((m.step, m.value) for m in history)
        assert [step for step, _ in history] == [0, 1]
        assert [value for _, value in history] == pytest.approx(outcome.step_wait_share)
        # the quiet steps' figure is there exactly when the attempt was not contended
        assert run.data.metrics.get("uncontended_latency_ms") == (
            None if outcome.uncontended_latency_ms is None else pytest.approx(outcome.uncontended_latency_ms))
        assert "step_order" not in run.data.metrics  # an attempt that had its process to itself


@pytest.mark.parametrize("runner", ["fork", "spawn"])
def test_compare_interleave_steps_pairs_one_attempt_per_arm_per_child(sqlite_uri, runner):
    if runner == "fork" and not pg_workloads.fork_available():
        pytest.skip("the fork runner needs os.fork on Linux")
    seen = []
    result = compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 999}, attempts=2, progress=False,
                     timeout_s=60, min_valid_runs=2, interleave="steps", runner=runner, method="paired",
                     on_attempt=lambda arm, attempt: seen.append((arm, attempt)), allow_undecidable=True)
    # one child per round: the arm that leads alternates (ABBA over rounds), both share the child's wall time
    assert [arm for arm, _ in seen] == ["baseline", "candidate", "candidate", "baseline"]
    assert [a.step_order for _, a in seen] == [(0, 3), (1, 2), (0, 3), (1, 2)]
    assert all(a.runner == runner for _, a in seen) and seen[0][1].wall_s == seen[1][1].wall_s
    assert result["method"] == "paired" and result["pairs"] == 2
    client = MlflowClient()
    assert client.get_run(result["comparison_run_id"]).data.tags[TAG.INTERLEAVE] == "steps"
    pairs = {}
    for attempt in result["attempts"]:
        pairs.setdefault(attempt["pair"], []).append(attempt["arm"])
        history = client.get_metric_history(attempt["run_id"], "step_order")
        assert sorted(int(m.value) for m in history) in ([0, 3], [1, 2])
    assert {pair: sorted(arms) for pair, arms in pairs.items()} == {0: ["baseline", "candidate"],
                                                                  1: ["baseline", "candidate"]}


def test_compare_says_first_when_its_method_cannot_decide_with_so_few_attempts(sqlite_uri, capsys):
    result = compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 999}, attempts=2, progress=False,
                     supervised=False, min_valid_runs=2, interleave="steps", method="paired", allow_undecidable=True,
                     latency="raw")
    err = capsys.readouterr().err  # said without progress too: CI runs with --no-progress
    assert ("warning: the paired method cannot accept with 2 attempts per arm: at alpha = 0.02 its signed-rank "
            "test needs at least 6 complete ABBA rounds (2 give a smallest p-value of 1/4), so this comparison can "
            "answer reject or rerun, never accept; pass --attempts 6 or more (attempts=6)") in err
    assert result["decision"] == "rerun" and result["recommended_attempts"] >= 6, result["messages"]


def test_evaluate_judges_a_sequential_comparison_s_group_at_the_look_it_reached(sqlite_uri):
    """evaluate of what compare --until-decisive collected spends alpha as the comparison did.

    Judged again at one look with the full alpha, the same rounds could be accepted where the
    sequential design answered rerun. Looks count attempts per arm (the information fraction).
    """
    result = compare("tinylm", {**TINY, "checkpoint": True}, {"checkpoint": False}, attempts=3, supervised=False,
                     progress=False, min_valid_runs=2, env_mismatch="warn", method="paired", until_decisive=True,
                     max_attempts=5, group="seq", allow_undecidable=True)
    tags = MlflowClient().get_run(result["comparison_run_id"]).data.tags
    look = int(tags[TAG.LOOK])
    assert tags[TAG.MAX_LOOKS] == "5" and look in (3, 5)
    previous = 0.0 if look == 3 else 0.6  # the first look at 3 of 5 attempts per arm, the second at 5
    assert float(tags[TAG.LOOK_PREVIOUS]) == previous and float(tags[TAG.LOOK_SPENT]) == look / 5
    spent = spent_between(look / 5, previous, alpha=0.02)["alpha"]
    assert result["alpha"] == spent
    again = pg.tracking.evaluate_group("seq", method="paired", min_valid_runs=2, env_mismatch="warn")
    assert again["alpha"] == spent and again["p_value_method"] == result["p_value_method"]
    assert f"judged at look {look} of 5: these attempts were collected by a sequential comparison" in \
        " ".join(again["warnings"])
    single = pg.tracking.evaluate_group("seq", method="paired", min_valid_runs=2, env_mismatch="warn",
                                        look=1, max_looks=1)
    assert single["alpha"] == 0.02 and not any("judged at look" in w for w in single["warnings"])
    # the test behind the p-value is a column of decisions()
    rows = pg.decisions(group="seq")
    assert rows.iloc[0]["p_value_method"] == single["deciding"]["test"] == \
        f"Wilcoxon signed-rank ({single['p_value_method']})"
    assert set(rows["p_value_method"]) <= {f"Wilcoxon signed-rank ({how})" for how in (
        "exact", "exact (sign flips; ties or zeros)", single["p_value_method"], result["p_value_method"])}


def test_too_few_to_decide_knows_each_exact_test_s_floor():
    from mlflow_perfgate.rules._statistical import too_few_to_decide

    assert "Mann-Whitney test needs at least 4 attempts per arm (3 give a smallest p-value of 1/20)" in \
        too_few_to_decide(pg.rules.Policy(method="robust"), 3)
    assert too_few_to_decide(pg.rules.Policy(method="robust"), 4) is None
    # the signed-rank test needs 6 rounds at 0.02 (5 give at best 1/32): no t-test stands in below it
    assert "signed-rank test needs at least 6 complete ABBA rounds (5 give a smallest p-value of 1/32)" in \
        too_few_to_decide(pg.rules.Policy(method="paired"), 5)
    assert too_few_to_decide(pg.rules.Policy(method="paired"), 6) is None
    assert "at least 7" in too_few_to_decide(pg.rules.Policy(method="paired", alpha=0.01), 6)  # signed-rank: 7
    # --until-decisive judges every look by the signed-rank test, at the last look's spent alpha
    looks_from_2 = lambda most: 1 + math.ceil(max(0, most - 2) / 2)  # noqa: E731 - compare's looks from 2 attempts
    assert too_few_to_decide(pg.rules.Policy(method="paired"), 6, looks_for=looks_from_2) == (
        "the paired method cannot accept with 6 attempts per arm: at the last of its 3 looks' alpha = 0.0156 its "
        "signed-rank test needs at least 7 complete ABBA rounds (6 give a smallest p-value of 1/64), so this "
        "comparison can answer reject or rerun, never accept; pass --max-attempts 7 or more (max_attempts=7)")
    assert 2 ** -6 > sequential_thresholds(3, 3, alpha=0.02)["alpha"]  # why 6 rounds cannot: 1/64 is above it
    # one look only (--attempts 6 --max-attempts 6): a single look at the full alpha
    assert too_few_to_decide(pg.rules.Policy(method="paired"), 6, looks_for=lambda most: [most]) is None
    # looks placed by attempts (compare's: from 6, every 2): the last look spends what 12 of 14 left
    positions = lambda most: list(range(6, most, 2)) + [most]  # noqa: E731
    last = spent_between(1.0, 12 / 14, alpha=0.02)["alpha"]
    assert 2 ** -6 > last > 2 ** -7  # 7 rounds can reach it, 6 cannot
    assert too_few_to_decide(pg.rules.Policy(method="paired"), 14, looks_for=positions) is None
    # where the signed-rank floor is the lower one (alpha 0.1: 4 rounds, 1/16), it stands alone
    assert "signed-rank test needs at least 4 complete ABBA rounds (3 give a smallest p-value of 1/8)" in \
        too_few_to_decide(pg.rules.Policy(method="paired", alpha=0.1), 3)
    assert too_few_to_decide(pg.rules.Policy(method="seed"), 1) is None  # no test, no floor
    # non_regression accepts on the interval's upper bound: 5 rounds (2^-5 <= 5%), 3 per arm (1/20) at 90%
    paired_nr = pg.rules.Policy(method="paired", mode="non_regression")
    assert "its 90% interval has an upper bound only from 5 complete ABBA rounds" in too_few_to_decide(paired_nr, 4)
    assert too_few_to_decide(paired_nr, 5) is None
    robust_nr = pg.rules.Policy(method="robust", mode="non_regression")
    assert "from 3 attempts per arm" in too_few_to_decide(robust_nr, 2) and too_few_to_decide(robust_nr, 3) is None


def test_compare_interleave_steps_a_failing_arm_and_in_process(sqlite_uri):
    result = compare(HOSTILE_OK, {**FIXED, "fail_at": 1000}, {"fail_at": 1}, attempts=1, progress=False,
                     supervised=False, min_valid_runs=1, interleave="steps", method="seed")
    assert result["baseline"]["valid_runs"] == 1
    assert result["candidate"]["failure_reasons"] == ["exception: RuntimeError: boom"]


@pytest.mark.parametrize("change, needle", [({"device": "cuda"}, "so they must share the device; the changed "
                                                                  "variable is 'device'"),
                                            ({"steps": 3}, "so they must share steps")])
def test_interleave_steps_is_refused_before_anything_runs_when_the_arms_cannot_share_a_process(
        sqlite_uri, change, needle, capsys):
    with pytest.raises(pg.errors.InputError, match=needle):
        compare("tinylm", TINY, change, attempts=1, progress=False, interleave="steps")
    with pytest.raises(pg.errors.InputError, match="interleave must be one of"):
        compare("tinylm", TINY, {"checkpoint": True}, attempts=1, progress=False, interleave="rounds")
    (variable, value), = change.items()
    with pytest.raises(SystemExit) as info:
        main(["compare", "--change", f"{variable}={value}", "--interleave", "steps", "--no-progress"])
    assert info.value.code == 2 and needle in " ".join(capsys.readouterr().err.split())
    client = MlflowClient()
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


def test_resume_goes_on_spending_alpha_from_the_looks_recorded_on_the_group(sqlite_uri, capsys):
    """compare --resume of a sequential group spends only what its recorded looks left (no restart at look 1)."""
    conditions, change = {**FIXED, "fail_at": 1000}, {"fail_at": 999}
    how = dict(progress=False, supervised=False, min_valid_runs=2, method="paired", group="resumed",
               allow_undecidable=True)
    first = compare(HOSTILE_OK, conditions, change, attempts=2, **how)
    assert "optional stopping" not in capsys.readouterr().err
    # as a sequential comparison stopped at half its information would have left it
    client = MlflowClient()
    for key, value in ((TAG.LOOK, "2"), (TAG.MAX_LOOKS, "4"), (TAG.LOOK_PREVIOUS, "0.0"), (TAG.LOOK_SPENT, "0.5")):
        client.set_tag(first["comparison_run_id"], key, value)
    again = compare(HOSTILE_OK, conditions, change, attempts=2, until_decisive=True, max_attempts=2, resume=True,
                    **how)
    tags = client.get_run(first["comparison_run_id"]).data.tags
    assert (tags[TAG.LOOK], tags[TAG.MAX_LOOKS], tags[TAG.LOOK_PREVIOUS], tags[TAG.LOOK_SPENT]) == ("4", "4", "0.5",
                                                                                                    "1.0")
    assert again["alpha"] == pytest.approx(spent_between(1.0, 0.5, alpha=0.02)["alpha"]) and again["alpha"] < 0.02
    # a later evaluate judges at the same levels
    assert pg.tracking.evaluate_group("resumed", method="paired", min_valid_runs=2)["alpha"] == again["alpha"]
    # nothing left to spend: refused before anything runs
    with pytest.raises(pg.errors.InputError, match="already spent all of alpha"):
        compare(HOSTILE_OK, conditions, change, attempts=2, until_decisive=True, max_attempts=4, resume=True, **how)


def test_resume_of_a_group_decided_at_a_single_look_says_it_is_optional_stopping(sqlite_uri, capsys):
    conditions, change = {**FIXED, "fail_at": 1000}, {"fail_at": 999}
    how = dict(progress=False, supervised=False, min_valid_runs=2, method="paired", group="single",
               allow_undecidable=True)
    compare(HOSTILE_OK, conditions, change, attempts=2, **how)
    capsys.readouterr()
    compare(HOSTILE_OK, conditions, change, attempts=2, resume=True, **how)
    assert "was already decided at a single look; a decision on more attempts is optional stopping" in \
        capsys.readouterr().err


def test_a_comparison_that_cannot_mean_anything_is_refused_before_anything_runs(sqlite_uri, capsys):
    """Issue 28: attempts below min_valid_runs (a certain rerun) or below the method's floor are refused."""
    conditions, change = {**FIXED, "fail_at": 1000}, {"fail_at": 999}
    with pytest.raises(pg.errors.InputError, match=r"4 attempts per arm can never reach min_valid_runs=5.*"
                                                   r"--allow-undecidable"):
        compare(HOSTILE_OK, conditions, change, attempts=4, progress=False, supervised=False)
    with pytest.raises(pg.errors.InputError, match=r"paired method cannot accept with 5 attempts.*--allow-undecidable"):
        compare(HOSTILE_OK, conditions, change, attempts=5, progress=False, supervised=False, method="paired")
    assert MlflowClient().search_runs(["0"]) == []  # nothing logged
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", HOSTILE_OK, *[f"--set={k}={v}" for k, v in conditions.items()],
              "--change", "fail_at=999", "--attempts", "2", "--in-process", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and "min_valid_runs=5" in err
    # allowed: it runs, and says first that it cannot accept
    result = compare(HOSTILE_OK, conditions, change, attempts=2, progress=False, supervised=False,
                     allow_undecidable=True)
    assert result["reason"] == "insufficient_valid_runs"


def test_non_regression_goes_on_while_undecided_by_default_up_to_twice_its_rounds(sqlite_uri):
    """The no-op gate (issue 41): non_regression mode adds rounds while undecided, to 2x, unless told not to.

    Three rounds cannot decide (the paired interval needs five), so the first look is a rerun and the
    comparison goes on: looks at 3, 5 and 6 rounds of identical arms, against a margin no noise clears.
    """
    how = dict(supervised=False, progress=False, min_valid_runs=2, env_mismatch="warn", mode="non_regression",
               margin=1e-9, maximum_p95_ratio=1e-9 + 1, allow_undecidable=True, interleave="steps")
    same = ({**FIXED, "fail_at": 1000}, {"fail_at": 999})
    result = compare(HOSTILE_OK, *same, attempts=3, group="gate", **how)
    per_arm = [a["arm"] for a in result["attempts"]].count("baseline")
    assert per_arm == 6 or (per_arm == 5 and result["decision"] != "rerun"), (result["decision"], per_arm)
    tags = MlflowClient().get_run(result["comparison_run_id"]).data.tags
    assert tags[TAG.MAX_LOOKS] == "6" and tags[TAG.LOOK] == str(per_arm)
    assert "3 rounds (up to 6 while undecided)" in tags[TAG.CONFIGURATION]
    assert "until_decisive" in tags[TAG.CONFIGURATION].split("defaults: ")[1]
    fixed = compare(HOSTILE_OK, *same, attempts=3, group="fixed", until_decisive=False, **how)
    assert [a["arm"] for a in fixed["attempts"]].count("baseline") == 3 and fixed["decision"] == "rerun"
    assert "while undecided" not in MlflowClient().get_run(fixed["comparison_run_id"]).data.tags[TAG.CONFIGURATION]
    # --max-attempts sets the non_regression cap; improvement mode keeps one look
    capped = compare(HOSTILE_OK, *same, attempts=3, group="capped", max_attempts=4, **how)
    assert [a["arm"] for a in capped["attempts"]].count("baseline") == 4
    improvement = compare(HOSTILE_OK, *same, attempts=3, group="impr", **{**how, "mode": "improvement"})
    assert [a["arm"] for a in improvement["attempts"]].count("baseline") == 3


def test_the_cli_s_fixed_rounds_turns_the_non_regression_default_off(sqlite_uri, capsys):
    fixed = [f"--set={key}={value}" for key, value in FIXED.items()]
    args = ["compare", "--workload", HOSTILE_OK, *fixed, "--set", "fail_at=1000", "--change", "fail_at=999",
            "--interleave", "steps", "--attempts", "3", "--min-valid-runs", "2", "--env-mismatch", "warn",
            "--mode", "non_regression", "--margin", "1e-9", "--maximum-p95-ratio", "1.000000001", "--in-process",
            "--allow-undecidable", "--no-progress", "--format", "json", "--fixed-rounds"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 3
    result = json.loads(capsys.readouterr().out)
    assert [a["arm"] for a in result["attempts"]].count("baseline") == 3


def test_evaluate_without_a_mode_asks_the_comparison_s_question(sqlite_uri):
    """A group compared with --mode non_regression, judged again without a mode, is asked whether it is
    no slower (with its margin), not whether it is faster: a later evaluate never changes the question
    silently. A mode given is kept."""
    compare("tinylm", TINY, {"checkpoint": True}, attempts=3, supervised=False, progress=False, min_valid_runs=2,
            env_mismatch="warn", method="robust", mode="non_regression", margin=0.3, group="asked",
            until_decisive=False, allow_undecidable=True)
    again = pg.evaluate_group("asked", min_valid_runs=2, env_mismatch="warn")
    assert (again["mode"], again["margin"], again["method_asked"]) == ("non_regression", 0.3, "robust")
    assert "no_regression_ok" in again["messages"]
    asked = pg.evaluate_group("asked", min_valid_runs=2, env_mismatch="warn", mode="improvement")
    assert asked["mode"] == "improvement" and "improvement_ok" in asked["messages"]


def test_one_policy_travels_from_the_caller_to_the_decision(sqlite_uri):
    """A Policy given to compare is the one the decision is made by: what it was given is judged as
    given, what it left out is configured (the method here), and nothing else is read back; given
    beside the options it holds, or beside another objective, it is refused before anything runs.
    A later evaluate with a Policy that leaves the mode out asks the comparison's own question; a
    settled one is judged exactly as it is."""
    policy = pg.rules.Policy(mode="non_regression", margin=0.3, min_valid_runs=2)
    assert policy.given == {"mode", "margin", "min_valid_runs"}
    result = compare("tinylm", TINY, {"checkpoint": True}, attempts=3, supervised=False, progress=False,
                     env_mismatch="warn", policy=policy, group="carried", until_decisive=False,
                     allow_undecidable=True)
    assert (result["mode"], result["margin"], result["method_asked"]) == ("non_regression", 0.3, "paired")
    tags = MlflowClient().get_run(result["comparison_run_id"]).data.tags
    assert json.loads(tags[TAG.POLICY])["method"] == "paired"  # configured, since the policy left it out
    for wrong, said in (({"method": "robust"}, "give either policy or the options it holds"),
                        ({"objective": "memory", "policy": policy.replace(objective="latency")}, "disagree")):
        with pytest.raises(pg.errors.InputError, match=said):
            compare("tinylm", TINY, {"checkpoint": True}, attempts=3, supervised=False, progress=False,
                    **{"policy": policy, **wrong})
    again = pg.evaluate_group("carried", env_mismatch="warn", policy=pg.rules.Policy(min_valid_runs=2))
    assert (again["mode"], again["margin"], again["method_asked"]) == ("non_regression", 0.3, "paired")
    settled = pg.evaluate_group("carried", env_mismatch="warn", policy=pg.rules.Policy(min_valid_runs=2).settled())
    assert (settled["mode"], settled["method_asked"]) == ("improvement", "seed")


#: A user's module: ``make`` declares TinyLM's fixed conditions, ``bad`` a malformed declaration.
_DECLARES = (
    "from mlflow_perfgate.workloads.tinylm import make_workload\n\n\n"
    "def make(conditions):\n    return make_workload(conditions)\n\n\n"
    "make.perfgate_conditions = {'model': 'TinyLM', 'input_shape': '2,16', 'batch_size': 2, 'dtype': 'fp32',\n"
    "                            'device': 'cpu', 'measurement_method': 'wall_ms', 'checkpoint': 'false'}\n\n\n"
    "def bad(conditions):\n    return make_workload(conditions)\n\n\n"
    "bad.perfgate_conditions = ['model']\n")


def test_a_factory_s_declared_conditions_are_recorded_and_a_set_that_disagrees_is_refused(sqlite_uri, tmp_path,
                                                                                       monkeypatch):
    """One flag for your own workload: the factory declares its fixed conditions beside its code
    (``make.perfgate_conditions``), so ``compare --workload mine:make --change checkpoint=true`` runs."""
    (tmp_path / "declares.py").write_text(_DECLARES)
    monkeypatch.chdir(tmp_path)  # where a user's module is: the current directory
    monkeypatch.syspath_prepend(str(tmp_path))  # in-process attempts import it here
    result = compare("declares:make", {"warmup": 1, "steps": 3}, {"checkpoint": True}, attempts=2, supervised=False,
                     progress=False, min_valid_runs=2, env_mismatch="warn", **SPEC)
    params = MlflowClient().get_run(result["comparison_run_id"]).data.params
    assert (params["model"], params["input_shape"], params["batch_size"], params["measurement_method"]) == \
        ("TinyLM", "[2, 16]", "2", "wall_ms")
    with pytest.raises(pg.errors.InputError,
                       match=r"--set batch_size=4 disagrees with what workload 'declares:make' declares "
                             r"\(perfgate_conditions: batch_size=2\)"):
        compare("declares:make", {"warmup": 1, "steps": 3, "batch_size": "4"}, {"checkpoint": True}, attempts=2,
                supervised=False, progress=False, min_valid_runs=2, env_mismatch="warn", **SPEC)
    every = {"model": "Other", "input_shape": "2,16", "batch_size": "02", "dtype": "fp32", "device": "cpu",
             "measurement_method": "wall_ms", "checkpoint": "false", "warmup": 1, "steps": 3}
    with pytest.raises(pg.errors.InputError, match=r"--set model=Other disagrees .* \(perfgate_conditions: model=TinyLM\)"):
        compare("declares:make", every, {"checkpoint": True}, attempts=2, supervised=False, progress=False,
                min_valid_runs=2, env_mismatch="warn", **SPEC)  # read though every condition is given
    from mlflow_perfgate.harness import with_declared_conditions

    assert with_declared_conditions("declares:make", {**every, "model": "TinyLM"})["batch_size"] == "02"  # 02 is 2
    (tmp_path / "noisy.py").write_text("print('hello from import')\n" + (tmp_path / "declares.py").read_text())
    assert with_declared_conditions("noisy:make", {})["model"] == "TinyLM"  # what it prints is no answer
    (tmp_path / "needs_dep.py").write_text("import needs_dep_not_installed  # noqa\n\n\ndef make(c):\n    pass\n")
    with pytest.raises(pg.errors.InputError, match="No module named 'needs_dep_not_installed'"):
        with_declared_conditions("needs_dep:make", {})
    assert with_declared_conditions("not_here_at_all:make", {}) == {}  # no such module: the workload check says so
    with pytest.raises(pg.errors.InputError, match="perfgate_conditions must be a dict of condition names to values, got list"):
        compare("declares:bad", {"warmup": 1, "steps": 3}, {"checkpoint": True}, attempts=2, supervised=False,
                progress=False, min_valid_runs=2, env_mismatch="warn", **SPEC)


def test_a_declaration_is_read_through_the_comparison_s_warm_server_with_the_same_answers(sqlite_uri, tmp_path,
                                                                                         monkeypatch):
    """Supervised by the fork runner, ``compare`` makes its runner first and reads the declaration in a
    child of its warm server (torch imported there already), not in a fresh interpreter: the same
    answers and refusals; a comparison refused after the read leaves no server behind."""
    from mlflow_perfgate import _contain
    from mlflow_perfgate.harness import with_declared_conditions
    from mlflow_perfgate.workloads import attempt_runner

    (tmp_path / "declares.py").write_text(_DECLARES)
    (tmp_path / "needs_dep.py").write_text("import needs_dep_not_installed  # noqa\n\n\ndef make(c):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    with attempt_runner("fork", "declares:make") as runner:  # a child of its warm server reads each
        assert with_declared_conditions("declares:make", {}, runner=runner)["batch_size"] == 2
        with pytest.raises(pg.errors.InputError, match="No module named 'needs_dep_not_installed'"):
            with_declared_conditions("needs_dep:make", {}, runner=runner)
        assert with_declared_conditions("not_here_at_all:make", {}, runner=runner) == {}
        with pytest.raises(pg.errors.InputError, match="perfgate_conditions must be a dict"):
            with_declared_conditions("declares:bad", {}, runner=runner)
    # made to declare: the server reads it first thing, before its own warm-up
    monkeypatch.setenv("PERFGATE_HOSTILE_IMPORT", "1")  # crash_on_import's import segfaults (in the child)
    for name, expected in (("declares:make", "batch_size"), ("needs_dep:make", "No module named 'needs_dep_not"),
                           ("declares:bad", "perfgate_conditions must be a dict"), ("declares:nothing", {}),
                           ("tests.workloads_fixtures.crash_on_import:make", "could not be read: importing its "
                                                                               "module")):
        with attempt_runner("fork", name, declare=True) as runner:
            assert runner.declares == name
            if isinstance(expected, dict):
                assert with_declared_conditions(name, {}, runner=runner) == expected
            elif expected == "batch_size":
                assert with_declared_conditions(name, {}, runner=runner)["batch_size"] == 2
            else:
                with pytest.raises(pg.errors.InputError, match=expected):
                    with_declared_conditions(name, {}, runner=runner)
    before = set(_contain.descendants(os.getpid()))
    result = compare("declares:make", {"warmup": 1, "steps": 3}, {"checkpoint": True}, attempts=2, runner="fork",
                     progress=False, min_valid_runs=2, env_mismatch="warn", allow_undecidable=True, **SPEC)
    params = MlflowClient().get_run(result["comparison_run_id"]).data.params
    assert (params["model"], params["batch_size"], params["measurement_method"]) == ("TinyLM", "2", "wall_ms")
    with pytest.raises(pg.errors.InputError, match=r"--set batch_size=4 disagrees"):
        compare("declares:make", {"warmup": 1, "steps": 3, "batch_size": "4"}, {"checkpoint": True}, attempts=2,
                runner="fork", progress=False, min_valid_runs=2, env_mismatch="warn", **SPEC)
    assert set(_contain.descendants(os.getpid())) <= before  # the runner made for the read was closed
