"""A stop by the operator is not a failure of an arm: the attempts it cut short are withdrawn (KILLED,
excluded, listed), and ``--resume`` completes the planned rounds and judges identical arms as identical.
Real processes, real signals, a real store; nothing depends on the machine being quiet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.tracking import TAG

from conftest import REPO

HOSTILE = "tests.workloads_fixtures.lockstep_hostile:make"
SETS = ["--set=model=m", "--set=input_shape=1,1", "--set=batch_size=1", "--set=dtype=fp32", "--set=device=cpu",
        "--set=measurement_method=wall_ms", "--set=warmup=1", "--set=steps=30", "--set=step_ms=12", "--set=width=1"]
#: (12 ms steps: a round takes about 0.8 s, so the stop lands within a round of the poll that saw two, on a busy
#: machine too: with 2 ms steps, rounds ran on past the planned 6 while a loaded poll looked)
#: identical arms: the candidate changes a condition the factory parses and ignores
COMPARE = [sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", HOSTILE, *SETS, "--change", "width=2",
           "--attempts", "6", "--group", "stopped", "--no-progress", "--mode", "non_regression", "--margin", "0.5"]


def attempts() -> list:
    return MlflowClient().search_runs(["0"], f"tags.\"{TAG.KIND}\" = 'attempt'", max_results=200)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stopped_comparison_resumed_completes_its_rounds_and_counts_no_stop_as_a_failure(sqlite_uri, signum):
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri}
    process = subprocess.Popen(COMPARE, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:  # two rounds written, the third running
        if sum(run.info.status == "FINISHED" for run in attempts()) >= 4:
            break
        time.sleep(0.1)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err
    left = attempts()
    assert all(run.info.status != "RUNNING" for run in left)
    cut = [run for run in left if run.info.status == "KILLED"]
    for run in cut:  # what the stop cut short: withdrawn, never a failure of its arm
        assert run.data.tags[TAG.EXCLUDED] == "true", run.data.tags
        assert "stopped by the operator" in run.data.tags[TAG.FAILURE]
    counted = [run for run in left if run.data.tags.get(TAG.EXCLUDED) != "true"]  # measured, written whole
    assert all(run.info.status == "FINISHED" and run.data.tags[TAG.OK] == "true" for run in counted)
    complete_before = len({run.data.tags[TAG.PAIR] for run in counted if run.data.tags[TAG.ARM] == "baseline"} &
                          {run.data.tags[TAG.PAIR] for run in counted if run.data.tags[TAG.ARM] == "candidate"})
    assert complete_before < 6
    resumed = subprocess.run([*COMPARE, "--resume", "--format", "json"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode in (0, 3), resumed.stderr  # identical arms: accepted, or not yet decided; never reject
    assert f"{complete_before} of its 6 planned rounds are complete" in resumed.stderr
    import json

    result = json.loads(resumed.stdout)
    assert result["reason"] not in ("unreliable_candidate", "unreliable_baseline")
    assert sorted(result["excluded_runs"]) == sorted(run.info.run_id for run in cut)
    if cut:  # the report lists what the stop withdrew, and why
        [listed] = [w for w in result["warnings"] if "withdrawn or forgotten, not judged" in w]
        assert all(run.info.run_id in listed for run in cut) and "stopped by the operator (SIG" in listed, listed
    for arm in ("baseline", "candidate"):
        assert result[arm]["failed_runs"] == 0 and result[arm]["attempted_runs"] == 6


def test_a_resume_under_another_policy_is_refused_naming_both_unless_a_new_plan_is_asked(sqlite_uri, capsys):
    from mlflow_perfgate.cli import main

    argv = [a if a != "--set=steps=30" else "--set=steps=3" for a in COMPARE[3:]]  # the plan, not the measurement

    def run(*extra) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--allow-undecidable", *extra])
        return exit_info.value.code, capsys.readouterr().err

    code, err = run("--fixed-rounds")  # one look: a group whose looks reached their cap cannot be resumed at all
    assert code in (0, 3), err
    before = len(attempts())
    code, err = run("--resume", "--margin", "0.1")
    assert code == 2 and "was planned under another policy (margin 0.5 -> 0.1)" in err and "--new-plan" in err, err
    assert len(attempts()) == before  # nothing run
    code, err = run("--resume", "--margin", "0.1", "--new-plan")
    assert code in (0, 3) and "under a new plan (margin changed)" in err, err
    assert len(attempts()) == before + 12


@pytest.mark.slow
def test_a_twin_resume_of_a_running_comparison_is_refused(sqlite_uri):
    """Two writers of one group would take the same round numbers: the second is refused before it runs."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri}
    long = [a if a != "--set=steps=30" else "--set=steps=3000" for a in COMPARE]  # still running when the twin comes
    first = subprocess.Popen(long, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and first.poll() is None and not attempts():
            time.sleep(0.1)
        twin = subprocess.run([*long, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert twin.returncode == 2, twin.stderr
        assert "is being run by another process (on this host" in twin.stderr and "wait for it to end" in twin.stderr
    finally:
        first.send_signal(signal.SIGTERM)  # the first writer is stopped: what it holds stays its own
        _, err = first.communicate(timeout=300)
    assert first.returncode == 143, err
    pairs = [(run.data.tags[TAG.ARM], run.data.tags[TAG.PAIR]) for run in attempts()]
    assert pairs and len(pairs) == len(set(pairs))  # no round number twice: the twin started none


_SUITE = """
[suite]
name = "stopped"
interleave = "{order}"

[defaults]
workload = "{workload}"
attempts = 4
set = {{model = "m", input_shape = "1,1", batch_size = 1, dtype = "fp32", device = "cpu", measurement_method = "wall_ms", warmup = 1, steps = 30, step_ms = 2, width = 1}}
thresholds = {{min_valid_runs = 2}}
mode = "non_regression"

[[entry]]
name = "one"
change = {{width = 2}}

[[entry]]
name = "two"
change = {{width = 3}}
"""


def _stop_after_finished(process, count: int, signum) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        if sum(run.info.status == "FINISHED" for run in attempts()) >= count:
            break
        time.sleep(0.1)
    process.send_signal(signum)


def _nothing_running_and_nothing_measured_lost() -> list:
    runs = MlflowClient().search_runs(["0"], max_results=500)
    assert all(run.info.status != "RUNNING" for run in runs), [(run.data.tags.get(TAG.KIND), run.info.status)
                                                              for run in runs if run.info.status == "RUNNING"]
    for run in runs:
        if run.data.tags.get(TAG.KIND) == "attempt" and run.info.status == "KILLED":
            assert run.data.tags[TAG.EXCLUDED] == "true" and "stopped by the operator" in run.data.tags[TAG.FAILURE]
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("order", ["rounds", "entries"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stopped_suite_leaves_no_run_running_and_withdraws_what_it_cut(sqlite_uri, tmp_path, order, signum):
    # The suite's stop is compare's: the round measured before it written, the attempts in flight withdrawn,
    # the entries' comparison runs and the suite run KILLED (entries run whole, one after another, too).
    (tmp_path / "suite.toml").write_text(_SUITE.format(order=order, workload=HOSTILE), encoding="utf-8")
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "mlflow_perfgate", "suite", "run", str(tmp_path / "suite.toml"),
                                "--no-progress"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _stop_after_finished(process, 2, signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err
    runs = _nothing_running_and_nothing_measured_lost()
    kinds = {run.data.tags.get(TAG.KIND): run.info.status for run in runs if run.data.tags.get(TAG.KIND) != "attempt"}
    assert kinds == {"suite": "KILLED", "comparison": "KILLED"}, kinds
    assert sum(run.info.status == "FINISHED" for run in runs) >= 2  # what was measured before the stop stays


_PYTEST_GATE = """
import pytest

@pytest.mark.perfgate(workload="{workload}", conditions={conditions!r}, change={{"width": 2}}, attempts=4,
                      mode="non_regression", min_valid_runs=2)
def test_one():
    pass

@pytest.mark.perfgate(workload="{workload}", conditions={conditions!r}, change={{"width": 3}}, attempts=4,
                      mode="non_regression", min_valid_runs=2)
def test_two():
    pass

def test_after():
    pass
"""


@pytest.mark.slow
def test_a_sigterm_under_pytest_ends_the_session_with_its_runs_ended(sqlite_uri, tmp_path):
    conditions = {"model": "m", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
                  "measurement_method": "wall_ms", "warmup": 1, "steps": 30, "step_ms": 2, "width": 1}
    (tmp_path / "test_gate.py").write_text(_PYTEST_GATE.format(workload=HOSTILE, conditions=conditions))
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "pytest", "--perfgate", "-p", "no:cacheprovider", "-rA",
                                str(tmp_path / "test_gate.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    _stop_after_finished(process, 2, signal.SIGTERM)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 143, out[-3000:]
    assert "the session stops" in out and "PASSED test_gate.py::test_after" not in out, out[-3000:]
    runs = _nothing_running_and_nothing_measured_lost()
    assert {run.info.status for run in runs if run.data.tags.get(TAG.KIND) == "suite"} == {"KILLED"}


@pytest.mark.slow
@pytest.mark.parametrize("interleave", ["steps", "lockstep"])
def test_a_stop_during_a_round_s_tail_waits_for_it_and_writes_the_round(sqlite_uri, tmp_path, interleave):
    # The measured steps were over, each arm's quality still running: the stop used to cancel the round and
    # withdraw both measured attempts. It now waits for the tail (briefly) and writes them.
    markers = tmp_path / "tails"
    markers.mkdir()
    argv = [a for a in COMPARE if a != "--set=steps=30"] + [
        "--set=steps=5", "--set=quality_s=0.4", f"--set=tail_marker={markers}", "--interleave", interleave]
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri}
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None and not any(markers.iterdir()):
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    runs = _nothing_running_and_nothing_measured_lost()
    first = [run for run in runs if run.data.tags.get(TAG.KIND) == "attempt" and run.data.tags[TAG.PAIR] == "0"]
    assert sorted(run.info.status for run in first) == ["FINISHED", "FINISHED"], \
        [(run.info.status, run.data.tags.get(TAG.FAILURE)) for run in first]
    assert all(run.data.tags[TAG.OK] == "true" for run in first)


_PIPELINE = [sys.executable, "-m", "mlflow_perfgate", "pipeline", "--set", "input_shape=2,16", "--set", "warmup=1",
             "--steps", "2", "--comparison-steps", "30", "--attempts", "8", "--fallback-change", "checkpoint=true",
             "--no-progress"]


@pytest.mark.slow
@pytest.mark.parametrize("command, signum", [
    (_PIPELINE, signal.SIGTERM),
    ([*COMPARE, "--until-decisive", "--max-attempts", "12"], signal.SIGINT),
], ids=["pipeline-sigterm", "until-decisive-ctrl-c"])
def test_the_main_job_and_a_decisive_comparison_stop_as_compare_does(sqlite_uri, command, signum):
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _stop_after_finished(process, 2, signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err
    runs = _nothing_running_and_nothing_measured_lost()
    [comparison] = [run for run in runs if run.data.tags.get(TAG.KIND) == "comparison"]
    assert comparison.info.status == "KILLED" and "stopped before its decision" in comparison.data.tags[TAG.END_REASON]
    assert sum(run.info.status == "FINISHED" and run.data.tags.get(TAG.KIND) == "attempt" for run in runs) >= 2


def test_a_stop_a_library_swallowed_is_raised_again_where_the_comparison_goes_on():
    """matplotlib's import catches ``Exception`` around a class whose ``__set_name__`` may be running when
    SIGTERM comes (Python wraps what it raises in ``RuntimeError``): the stop must not be lost."""
    from mlflow_perfgate.harness import Terminated
    from mlflow_perfgate.harness._signals import stop_handled, stop_if_signalled, terminate_as_exception

    with terminate_as_exception():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except BaseException:  # noqa: BLE001 - swallowed, as that import does
            pass
        with pytest.raises(Terminated):
            stop_if_signalled()
        stop_if_signalled()  # raised once
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Terminated:
            stop_handled()  # it reached the comparison: nothing to raise again
        stop_if_signalled()
