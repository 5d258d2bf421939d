"""Hostile code contained: what a workload does beyond failing, under both runners (real processes, no mocks).

Each test is one way a hostile user broke a comparison: steps lost with a failure, processes
that outlived it, a thread count recorded as asked, attempts that outlived a killed supervisor,
a ``sys.exit`` read as an accept, a bad module leaving runs behind, module code run in the
caller, a diagnosis that died with its workload.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

import mlflow_perfgate.workloads as workloads
from mlflow_perfgate.cli import main
from mlflow_perfgate.harness import compare
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.workloads import run_attempt

from configs import SPEC, SPEC_FLAGS
from helpers import running

HOSTILE = "tests.workloads_fixtures.hostile"
FIXTURES = "tests.workloads_fixtures"
REPO = Path(__file__).resolve().parents[1]
FIXED = {"model": "Hostile", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
         "measurement_method": "wall_ms", "warmup": 0, "steps": 2}
FIXED_SETS = [item for key, value in FIXED.items() for item in ("--set", f"{key}={value}")]
#: How long a killed process may take to be gone (the kernel's signal, a keeper's sweep).
GONE_S = 10.0

needs_fork = pytest.mark.skipif(not workloads.fork_available(), reason="the fork runner needs os.fork on Linux")
needs_prctl = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment needs prctl (Linux)")


@pytest.fixture(params=["in_process", "spawn", "fork"])
def mode(request):
    """``run_attempt``'s arguments for each way an attempt runs."""
    if request.param == "in_process":
        return {"supervised": False}
    return {"runner": None if request.param == "spawn" else request.getfixturevalue("fork_runner")}


def _assert_gone(pids: list[int], within_s: float = GONE_S) -> None:
    deadline = time.monotonic() + within_s
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [pid for pid in pids if running(pid)]
    for pid in alive:  # leave nothing behind, whatever the assertion says
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after {within_s}s: {alive}"


# -- 1. a failed attempt keeps the steps it completed -------------------------------------------


@pytest.mark.parametrize(
    ("factory", "conditions", "kept", "failure"),
    [
        # warm-up call 1, measured calls 2 and 3, the measured call 4 raises
        ("raiser", {"fail_at": 3}, 2, "exception: RuntimeError: boom"),
        ("quality_raiser", {}, 3, "exception: RuntimeError: quality boom"),
        ("probe_raiser", {}, 3, "exception: RuntimeError: probe boom"),
        ("exiter", {"fail_at": 2}, 1, "exited: sys.exit(0) inside the workload"),
    ],
)
def test_a_failed_attempt_keeps_the_steps_it_completed(factory, conditions, kept, failure, mode):
    result = run_attempt(f"{HOSTILE}:{factory}", conditions, warmup=1, steps=3, timeout_s=60, **mode)
    assert result.ok is False and result.failure == failure, result.failure_detail
    assert len(result.step_times_ms) == kept and all(t >= 0 for t in result.step_times_ms)
    assert result.latency_ms is None and result.quality is None
    if result.contention_status == "measured":
        for name in ("step_wait_ms", "step_wait_share", "step_cpu_ms", "step_nivcsw"):
            assert len(getattr(result, name)) == kept, name
        assert result.cpu_ms == pytest.approx(sum(result.step_cpu_ms))


def test_a_failed_attempts_steps_reach_its_history(sqlite_uri):
    result = compare(f"{HOSTILE}:raiser", {**FIXED, "fail_at": 1000}, {"fail_at": 1}, attempts=1, supervised=False,
                     progress=False, min_valid_runs=1, **SPEC)
    client = MlflowClient()
    candidate = next(a for a in result["attempts"] if a["arm"] == "candidate")
    assert client.get_run(candidate["run_id"]).data.tags[TAG.OK] == "false"
    # steps=2: the first measured step completed, the second raised
    assert len(client.get_metric_history(candidate["run_id"], "step_time_ms")) == 1


# -- 2. descendants in sessions of their own end with the attempt -------------------------------


@needs_prctl
@pytest.mark.parametrize(
    ("then", "timeout_s", "failure"),
    [
        ("return", 60, None),
        # long enough for a spawned child to start and get there under load
        ("sleep", 20, "timeout after 20.0s"),
        ("kill", 60, "killed by signal SIGKILL"),
        ("exit", 60, "exited with code 0"),
    ],
)
def test_processes_in_sessions_of_their_own_end_with_the_attempt(then, timeout_s, failure, runner, tmp_path):
    pid_file = tmp_path / "pids.json"
    result = run_attempt(f"{HOSTILE}:daemonizer", {"pid_file": str(pid_file), "then": then}, warmup=0, steps=1,
                         probe=False, timeout_s=timeout_s, runner=runner)
    assert result.failure == failure, result.failure_detail
    pids = json.loads(pid_file.read_text())
    # One sleeper in a session of its own, one orphaned by a double fork: no killpg reaches them.
    # Under the spawn runner, the child's parent is its keeper, which ends with it.
    _assert_gone([pids["child"], *pids["sessions"], *([pids["parent"]] if runner is None else [])])
    if runner is not None:
        assert runner.status()["threads"] == 1  # the server is fine, and serves on


# -- 3. the thread count is the one measured during the steps -----------------------------------


def test_the_thread_count_is_the_one_measured_not_the_one_asked_for(mode):
    before = torch.get_num_threads()
    changed = run_attempt(f"{HOSTILE}:thread_changer", {"set_threads": 1, "at_call": 2}, warmup=0, steps=3,
                          threads=2, probe=False, timeout_s=60, **mode)
    assert changed.ok, changed.failure_detail
    assert (changed.threads_requested, changed.torch_threads) == (2, 1)
    assert "pinned to 2 but measured 2 (1 step), 1 (2 steps) after the measured steps" in changed.threads_note
    steady = run_attempt(f"{HOSTILE}:raiser", {"fail_at": 99}, warmup=0, steps=2, threads=2, probe=False,
                         timeout_s=60, **mode)
    assert (steady.threads_requested, steady.torch_threads, steady.threads_note) == (2, 2, None)
    assert torch.get_num_threads() == before


def test_the_measured_thread_count_is_the_attempts_fingerprint(sqlite_uri):
    conditions = {**FIXED, "set_threads": 2, "steps": 2}
    result = compare(f"{HOSTILE}:thread_changer", conditions, {"set_threads": 1}, attempts=1, supervised=False,
                     threads=2, progress=False, min_valid_runs=1, env_mismatch="warn", **SPEC)
    tags = {a["arm"]: MlflowClient().get_run(a["run_id"]).data.tags for a in result["attempts"]}
    assert tags["baseline"]["perfgate.env.torch_threads"] == "2"
    assert tags["candidate"]["perfgate.env.torch_threads"] == "1"


# -- 4. no attempt outlives a supervisor killed with kill -9 -------------------------------------

_SUPERVISOR = textwrap.dedent("""
    import signal
    import sys
    from mlflow_perfgate.workloads import run_attempt

    # Ctrl-C raises KeyboardInterrupt here even when this test runs as a background job, which
    # inherits SIGINT ignored (Python then installs no handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    runner, pid_file = sys.argv[1:]
    run_attempt("tests.workloads_fixtures.hostile:daemonizer", {"pid_file": pid_file, "then": "sleep"},
                warmup=0, steps=1, probe=False, timeout_s=600, runner=runner)
""")


@needs_prctl
@pytest.mark.parametrize("kind", ["spawn", pytest.param("fork", marks=needs_fork)])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "interrupt"])
def test_nothing_outlives_a_supervisor_killed_or_interrupted(kind, signum, tmp_path):
    script, pid_file = tmp_path / "supervisor.py", tmp_path / "pids.json"
    script.write_text(_SUPERVISOR)
    log = tmp_path / "supervisor.log"
    with open(log, "wb") as handle:
        supervisor = subprocess.Popen([sys.executable, str(script), kind, str(pid_file)], cwd=REPO,
                                      stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not pid_file.exists() and supervisor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), log.read_text()[-3000:]
        pids = json.loads(pid_file.read_text())
        # kill -9: nothing runs in the supervisor any more, the kernel's parent-death signals do
        # it all; an interrupt: the runner ends the tree it supervises.
        os.kill(supervisor.pid, signum)
        supervisor.wait(timeout=60)
    finally:
        supervisor.kill()
        supervisor.wait()
    # The attempt's child, its parent (the spawn runner's keeper, or the fork runner's server)
    # and the processes it started in sessions of their own.
    assert pids["parent"] != os.getpid()
    _assert_gone([pids["child"], pids["parent"], *pids["sessions"]])


# -- 5. sys.exit inside the workload is a failed attempt, never an accept -----------------------


def test_keyboard_interrupt_stays_an_interrupt():
    before = torch.get_num_threads()
    with pytest.raises(KeyboardInterrupt):
        run_attempt(f"{HOSTILE}:interrupter", {"fail_at": 1}, warmup=0, steps=2, threads=1, supervised=False)
    assert torch.get_num_threads() == before


def test_sys_exit_0_in_an_in_process_step_is_no_accept(sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", f"{HOSTILE}:exiter", *FIXED_SETS, "--set", "fail_at=1000",
              "--change", "fail_at=0", "--attempts", "1", "--in-process", "--min-valid-runs", "1", "--no-progress",
              *SPEC_FLAGS])
    assert exit_info.value.code == 3  # rerun: the candidate has no valid attempt
    assert "decision run:" in capsys.readouterr().out
    run = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("Default").experiment_id],
        filter_string=f"tags.`{TAG.ARM}` = 'candidate'")[0]
    assert run.data.tags[TAG.FAILURE] == "exited: sys.exit(0) inside the workload"


def test_a_sys_exit_that_escapes_the_comparison_is_one_line_not_exit_0(sqlite_uri, monkeypatch, capsys):
    # In-process, the module is imported here: its sys.exit(0) at import reaches the command line.
    monkeypatch.setenv("PERFGATE_HOSTILE_IMPORT", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", f"{FIXTURES}.exit_on_import:make", *FIXED_SETS, "--set", "fail_at=1",
              "--change", "fail_at=0", "--attempts", "1", "--in-process", "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "compare stopped before a decision was logged: sys.exit(0)" in err
    assert MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()]) == []


# -- 6. a workload module that does not import writes nothing ------------------------------------


@pytest.mark.parametrize("how", [["--in-process"], ["--runner", "spawn"],
                                 pytest.param(["--runner", "fork"], marks=needs_fork)])
def test_a_workload_module_that_does_not_exist_writes_nothing(how, sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", "no_such_module_xyz:make", *FIXED_SETS, "--set", "fail_at=1",
              "--change", "fail_at=0", "--attempts", "1", "--no-progress", "--timeout", "120", *how])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err
    assert "no module 'no_such_module_xyz'" in err and "nothing was run or logged" in err
    assert "PYTHONPATH=" in err  # issue 28: where it looked and the fix
    assert MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()]) == []


# -- 7. the workload's module is imported in children only ---------------------------------------


def test_the_workload_module_is_imported_in_children_only(runner, tmp_path, monkeypatch):
    marker = tmp_path / "imports"
    monkeypatch.setenv("PERFGATE_IMPORT_MARKER", str(marker))
    name, module = f"{FIXTURES}.import_marker:make", f"{FIXTURES}.import_marker"
    assert module not in sys.modules
    checker = runner or workloads.attempt_runner("spawn")
    assert checker.check(name, timeout_s=120) is None
    result = run_attempt(name, {}, warmup=0, steps=1, probe=False, timeout_s=120, runner=runner)
    assert result.ok, result.failure_detail
    with pytest.raises(ValueError, match="has no callable 'nope'"):
        checker.check(f"{FIXTURES}.import_marker:nope", timeout_s=120)
    importers = marker.read_text().split()
    assert importers and str(os.getpid()) not in importers
    assert module not in sys.modules


# -- 8. a diagnosis is supervised: a crash or a hang fails it, in one line -----------------------


@pytest.mark.parametrize(
    ("do", "how", "failure"),
    [
        ("segfault", ["--timeout", "120"], "killed by signal SIGSEGV"),
        ("sleep", ["--timeout", "3"], "timeout after 3.0s"),
        ("exit", ["--in-process"], "exited: sys.exit(0) inside the workload"),
    ],
)
def test_a_workload_that_crashes_or_hangs_fails_its_diagnosis(do, how, failure, sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--workload", f"{HOSTILE}:staged_hostile", *FIXED_SETS, "--set", f"do={do}", "--steps", "2",
              "--threads", "1", *how])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err
    assert f"diagnosis failed: {failure}" in err
    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("Default").experiment_id])
    assert len(runs) == 1
    assert runs[0].info.status == "FAILED" and runs[0].info.run_id in err
    assert runs[0].data.tags[TAG.KIND] == "diagnosis" and runs[0].data.tags[TAG.FAILURE] == failure
    assert runs[0].data.tags[TAG.END_REASON] == f"diagnosis failed: {failure}"


@pytest.mark.parametrize(
    ("do", "timeout_s", "failure"),
    [
        ("segfault", 120.0, "killed by signal SIGSEGV"),
        ("sleep", 3.0, "timeout after 3.0s"),
        ("exit", 120.0, "exited: sys.exit(0) inside the workload"),
    ],
)
def test_a_diagnosis_forked_by_the_warm_server_fails_as_a_spawned_one(do, timeout_s, failure, sqlite_uri):
    from mlflow_perfgate.errors import WorkloadFailed
    from mlflow_perfgate.harness import diagnose

    with workloads.attempt_runner("fork") as runner:
        with pytest.raises(WorkloadFailed, match=re.escape(f"diagnosis failed: {failure}")):
            diagnose(f"{HOSTILE}:staged_hostile", {**FIXED, "do": do}, steps=2, threads=1, timeout_s=timeout_s,
                     runner=runner)
        # the server outlived its child's crash, hang or exit: the next task is forked by the same one
        assert runner.status()["torch_ops"] == 0 and runner.servers_started == 1
    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("Default").experiment_id])
    assert [(r.info.status, r.data.tags[TAG.FAILURE]) for r in runs] == [("FAILED", failure)]


def test_a_pipeline_diagnoses_and_compares_in_children_of_one_warm_server(sqlite_uri, tmp_path):
    from mlflow_perfgate.harness import pipeline

    marker = tmp_path / "marker"
    name = f"{HOSTILE}:marked_tinylm"
    conditions = {"model": "TinyLM", "input_shape": "2,16", "batch_size": 2, "dtype": "fp32", "device": "cpu",
                  "measurement_method": "wall_ms", "checkpoint": False, "steps": 2, "warmup": 0,
                  "marker": str(marker)}
    with workloads.attempt_runner("fork", workload=name) as runner:
        server = runner.status()["pid"]
        out = pipeline(name, conditions, attempts=2, steps=2, threads=1, timeout_s=120, capacity_mib=5.0,
                       fallback_change={"checkpoint": True},
                       progress=False, runner=runner, min_valid_runs=2, **SPEC)
        assert runner.servers_started == 1 and runner.status()["pid"] == server
    assert out["decision"] is not None and len(out["change"]) == 1
    rows = [line.split() for line in marker.read_text().splitlines()]
    # the diagnosis's child and each attempt's (2 per arm), every one forked by that one server
    assert len({pid for pid, _, _ in rows}) == len(rows) == 5
    assert {(parent, flag) for _, parent, flag in rows} == {(str(server), "1")}


def test_a_supervised_diagnosis_pins_its_threads(sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--workload", f"{HOSTILE}:staged_hostile", *FIXED_SETS, "--steps", "2", "--threads", "1",
              "--timeout", "120", "--format", "json"])
    assert exit_info.value.code in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert report["bundle"]["time"]["torch_threads"] == 1
    assert MlflowClient().get_run(report["diagnosis_run_id"]).info.status == "FINISHED"


@pytest.mark.parametrize("runner", ["auto", "spawn"])
def test_a_pipeline_whose_diagnosis_crashes_stops_there_in_one_line(runner, sqlite_uri, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["pipeline", "--workload", f"{HOSTILE}:staged_hostile", "--set", "do=segfault", *FIXED_SETS,
              "--steps", "2", "--threads", "1", "--timeout", "120", "--fallback-change", "do=nothing",
              "--no-progress", "--gate", "--runner", runner])
    assert exit_info.value.code == 2
    assert "diagnosis failed: killed by signal SIGSEGV" in capsys.readouterr().err
    kinds = [r.data.tags.get(TAG.KIND) for r in
             MlflowClient().search_runs([MlflowClient().get_experiment_by_name("Default").experiment_id])]
    assert kinds == ["diagnosis"]
