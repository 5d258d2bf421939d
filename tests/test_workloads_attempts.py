"""Attempts: supervised failure modes under both runners, the warm fork server, results, ABBA order, arguments."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mlflow_perfgate.workloads as workloads
from mlflow_perfgate import rules
from mlflow_perfgate.workloads import AttemptResult, interleave, run_attempt
from mlflow_perfgate.workloads._attempt import child_env

from helpers import running

HOSTILE = "tests.workloads_fixtures.hostile"
FIXTURES = "tests.workloads_fixtures"
TINY = {"input_shape": "(2, 16)", "seed": 0}

needs_fork = pytest.mark.skipif(not workloads.fork_available(), reason="the fork runner needs os.fork on Linux")


@pytest.mark.parametrize(
    ("factory", "conditions", "timeout_s", "expected"),
    [
        ("killer", {}, 60, "killed by signal SIGKILL"),
        ("segfault", {}, 60, "killed by signal SIGSEGV"),
        ("sleeper", {"fail_at": 1}, 3.0, "timeout after 3.0s"),
        ("oom", {}, 60, "out_of_memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"),
        ("memory_error", {}, 60, "out_of_memory: MemoryError: cannot allocate host buffer"),
        ("raiser", {"fail_at": 2}, 60, "exception: RuntimeError: boom"),
    ],
)
def test_supervised_failure_becomes_result(factory, conditions, timeout_s, expected, runner):
    result = run_attempt(f"{HOSTILE}:{factory}", conditions, warmup=1, steps=3, timeout_s=timeout_s,
                         runner=runner)
    assert result.ok is False
    assert result.failure == expected
    assert result.supervised is True
    assert result.latency_ms is None and result.quality is None
    assert result.wall_s < timeout_s + 5
    json.dumps(result.to_dict())


def test_supervised_signal_exit_codes_are_kept(runner):
    result = run_attempt(f"{HOSTILE}:killer", {}, warmup=0, steps=1, runner=runner)
    assert result.exitcode == -9
    assert "before writing its result" in result.failure_detail


def test_non_finite_loss_is_localised_by_the_probe(runner):
    result = run_attempt(f"{HOSTILE}:nan_loss", {}, warmup=0, steps=2, runner=runner)
    assert result.failure == "non_finite_loss"
    assert "warmup" not in result.failure_detail and "step 0" in result.failure_detail
    rules.validate_validity_report(result.validity)
    assert result.validity["issues"] == ["numerical"]
    assert result.validity["first_failure"] == "body.bad"
    assert result.validity["reproducible"] is True


def test_successful_supervised_attempt(runner):
    # One DataLoader worker: the child's own children must start and end cleanly too.
    conditions = {**TINY, "num_workers": 1}
    result = run_attempt("tinylm", conditions, warmup=1, steps=4, threads=1, runner=runner)
    assert result.ok, result.failure_detail
    assert result.failure is None and result.exitcode == 0
    assert len(result.step_times_ms) == 4
    assert result.latency_ms == statistics.median(result.step_times_ms)
    assert result.torch_threads == 1
    assert 0 <= result.quality <= 1
    assert result.mem_status == "estimated" and result.peak_mem_mib > 0
    assert result.tokens_per_step == 32
    assert result.throughput_tok_s == pytest.approx(32 * 1e3 / result.latency_ms)
    assert result.conditions == conditions
    assert rules.validate_validity_report(result.validity)["performance_action"] == "continue"
    # The record travels as JSON and comes back equal.
    assert AttemptResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    # The same attempt in this process trains the same model.
    in_process = run_attempt("tinylm", conditions, warmup=1, steps=4, threads=1, supervised=False,
                             probe=False)
    assert in_process.ok and in_process.supervised is False and in_process.validity is None
    assert in_process.quality == result.quality
    assert in_process.final_loss == pytest.approx(result.final_loss, rel=1e-6)


def test_global_state_and_leaked_threads_stay_in_their_child(runner):
    polluted = run_attempt(f"{HOSTILE}:polluter", {}, warmup=0, steps=1, probe=False, timeout_s=60,
                           runner=runner)
    # The non-daemon thread it leaves does not hold the child past its result.
    assert polluted.ok, polluted.failure_detail
    checked = run_attempt(f"{HOSTILE}:pollution_checker", {}, warmup=0, steps=1, probe=False, timeout_s=60,
                          runner=runner)
    assert checked.ok, checked.failure_detail


def test_runner_kinds_and_the_record_of_which_ran():
    assert run_attempt(f"{HOSTILE}:raiser", {"fail_at": 99}, warmup=0, steps=1, probe=False,
                       supervised=False).runner is None
    with pytest.raises(ValueError, match="runner must be one of"):
        run_attempt("tinylm", {}, runner="thread")
    with pytest.raises(ValueError, match="supervised attempts only"):
        run_attempt("tinylm", {}, supervised=False, runner="spawn")
    with pytest.raises(ValueError, match="runner must be one of"):
        workloads.attempt_runner("vfork")
    with pytest.raises(ValueError, match="workload must be one of"):
        workloads.attempt_runner("spawn", workload="no-colon")


def test_spawn_is_used_where_fork_is_not_available(monkeypatch):
    monkeypatch.setattr("mlflow_perfgate.workloads._runner.fork_available", lambda: False)
    with workloads.attempt_runner("auto") as runner:
        assert isinstance(runner, workloads.SpawnRunner)
    with pytest.raises(ValueError, match="needs os.fork on Linux"):
        workloads.attempt_runner("fork")
    result = run_attempt(f"{HOSTILE}:raiser", {"fail_at": 0}, warmup=0, steps=1, runner="auto")
    assert (result.runner, result.failure) == ("spawn", "exception: RuntimeError: boom")


@needs_fork
def test_fork_server_runs_no_torch_op_and_forks_with_one_thread(fork_runner, monkeypatch):
    # threads=2 and a DataLoader worker: the children start thread pools and processes of their own.
    result = fork_runner.run("tinylm", {**TINY, "num_workers": 1}, warmup=1, steps=2, threads=2)
    assert result.ok and result.runner == "fork" and result.torch_threads == 2, result.failure_detail
    # A positive control: a module whose import runs torch operations and starts a thread is
    # seen doing so in the importing child, and never imported in the server.
    monkeypatch.setenv("PERFGATE_HOSTILE_IMPORT", "1")
    unsafe = f"{FIXTURES}.ops_on_import:make"
    assert fork_runner.run(unsafe, {}, warmup=0, steps=1, probe=False, timeout_s=60).ok
    status = fork_runner.status()
    assert status["threads"] == 1
    assert status["cuda_initialized"] is False
    assert status["torch_ops"] == 0
    assert "mlflow_perfgate.workloads.tinylm" in status["preloaded"]
    assert f"{FIXTURES}.ops_on_import" not in status["preloaded"]
    reason = status["not_preloaded"][unsafe]
    assert "torch operation(s)" in reason and "other thread(s) running" in reason
    # The server is a separate process that the attempts left as it was.
    assert status["pid"] != os.getpid() and fork_runner.servers_started == 1


@needs_fork
def test_the_fork_server_reports_a_fresh_torch_thread_count_for_a_caller_without_torch(fork_runner):
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True, env=child_env())
    status = fork_runner.status()
    # read in a forked child: the server itself still runs on one thread, no torch op
    assert status["default_threads"] == int(fresh.stdout) and status["threads"] == 1 and status["torch_ops"] == 0
    # this caller imported torch: its own count is the default (it may have set it)
    assert fork_runner.default_threads() == torch.get_num_threads()


@needs_fork
def test_a_workload_import_that_crashes_or_hangs_is_a_failed_attempt(monkeypatch):
    monkeypatch.setenv("PERFGATE_HOSTILE_IMPORT", "1")
    with workloads.attempt_runner("fork") as runner:
        hung = runner.run(f"{FIXTURES}.hang_on_import:make", {}, warmup=0, steps=1, timeout_s=5)
        assert hung.failure == "timeout after 5.0s" and hung.runner == "fork"
        crashed = runner.run(f"{FIXTURES}.crash_on_import:make", {}, warmup=0, steps=1, timeout_s=60)
        assert crashed.failure == "killed by signal SIGSEGV"
        assert "importing workload module 'tests.workloads_fixtures.crash_on_import'" in crashed.failure_detail
        # The next attempt of the same module imports it in its own child, and crashes there.
        again = runner.run(f"{FIXTURES}.crash_on_import:make", {}, warmup=0, steps=1, timeout_s=60)
        assert again.failure == "killed by signal SIGSEGV"
        assert "before writing its result" in again.failure_detail
        # The comparison goes on, on the same server.
        fine = runner.run(f"{HOSTILE}:raiser", {"fail_at": 99}, warmup=0, steps=2, timeout_s=60)
        assert fine.ok and runner.servers_started == 1
        assert runner.status()["threads"] == 1


@needs_fork
def test_the_server_dying_mid_attempt_fails_that_attempt_and_the_next_gets_a_fresh_server(tmp_path):
    pid_file = tmp_path / "child.pid"
    with workloads.attempt_runner("fork", workload=HOSTILE + ":server_killer") as runner:
        died = runner.run(f"{HOSTILE}:server_killer", {"pid_file": str(pid_file)}, warmup=0, steps=1,
                          timeout_s=60)
        assert died.ok is False and died.failure == "attempt server died: killed by signal SIGKILL"
        assert died.wall_s < 30
        # The child it left behind (sleeping, in a session of its own) was killed with it.
        orphan = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while running(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(orphan)
        after = runner.run(f"{HOSTILE}:raiser", {"fail_at": 99}, warmup=0, steps=1, timeout_s=120)
        assert after.ok and runner.servers_started == 2


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("raiser", "exception: RuntimeError: boom"),
        ("oom", "out_of_memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"),
        ("memory_error", "out_of_memory: MemoryError: cannot allocate host buffer"),
        ("nan_loss", "non_finite_loss"),
        ("nan_quality", "non_finite_quality"),
        ("not_a_workload", "exception: TypeError"),
        ("broken_factory", "invalid_conditions: flavour must be one of ['plain'], got None"),
    ],
)
def test_in_process_failure_becomes_result(factory, expected):
    result = run_attempt(f"{HOSTILE}:{factory}", {}, warmup=1, steps=2, supervised=False)
    assert result.ok is False
    assert result.failure.startswith(expected)
    assert result.supervised is False and result.exitcode is None


def test_in_process_timeout_is_checked_between_steps():
    result = run_attempt(f"{HOSTILE}:sleeper", {"sleep_s": 0.3, "fail_at": 0}, warmup=0, steps=50,
                         timeout_s=0.5, supervised=False)
    assert result.failure == "timeout after 0.5s"
    # The step that crossed the deadline finished: a hung step would never be interrupted here.
    assert 1 <= len(result.step_times_ms) <= 2
    assert "deadline passed after measured step" in result.failure_detail


def test_threads_are_pinned_and_restored():
    before = torch.get_num_threads()
    result = run_attempt("tinylm", TINY, warmup=0, steps=1, threads=1, supervised=False, probe=False)
    assert result.ok and result.torch_threads == 1
    assert torch.get_num_threads() == before


def test_steps_may_come_from_conditions_but_not_disagree():
    result = run_attempt(f"{HOSTILE}:raiser", {"steps": "3", "warmup": 0, "fail_at": 99}, supervised=False)
    assert result.ok and result.steps == 3 and result.warmup == 0 and len(result.step_times_ms) == 3
    with pytest.raises(ValueError, match="steps=2 disagrees"):
        run_attempt("tinylm", {"steps": 3}, steps=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workload_name": "nope"}, "workload must be one of"),
        ({"workload_name": "no_such_module_xyz:make"}, "cannot import module"),
        ({"steps": 0}, "steps must be an integer >= 1"),
        ({"warmup": -1}, "warmup must be an integer >= 0"),
        ({"threads": 0}, "threads must be a positive integer"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
        ({"conditions": {"x": object()}}, "JSON-serialisable"),
    ],
)
def test_bad_arguments_raise(kwargs, message, runner):
    arguments = {"workload_name": "tinylm", "conditions": {}, "runner": runner, **kwargs}
    with pytest.raises(ValueError, match=message):
        run_attempt(arguments.pop("workload_name"), arguments.pop("conditions"), **arguments)


def test_attempt_result_validates_its_states():
    with pytest.raises(ValueError, match="cannot have a failure"):
        AttemptResult(ok=True, failure="x", latency_ms=1.0, quality=1.0)
    with pytest.raises(ValueError, match="finite latency_ms"):
        AttemptResult(ok=True, quality=1.0)
    with pytest.raises(ValueError, match="failure reason"):
        AttemptResult(ok=False)
    with pytest.raises(ValueError, match="unknown AttemptResult fields"):
        AttemptResult.from_dict({"ok": False, "failure": "x", "colour": 1})
    failed = AttemptResult(ok=False, failure="timeout after 1.0s", step_times_ms=[1, 2])
    assert failed.step_times_ms == (1.0, 2.0)
    assert failed.to_dict()["step_times_ms"] == [1.0, 2.0]


def test_stored_results_carry_a_format_version_checked_on_read(tmp_path):
    from mlflow_perfgate.workloads import _attempt, _wire

    result = AttemptResult(ok=True, latency_ms=2.0, quality=0.5, runner="fork")
    path = tmp_path / "result.json"
    _attempt.write_result(path, result)
    assert json.loads(path.read_text())["format"] == _wire.FORMAT
    assert not (tmp_path / "result.json.partial").exists()
    payload, note = _attempt.read_payload(path)
    assert AttemptResult.from_dict(payload) == result and note is None
    # A bare dict (before versions) or another version is refused, not guessed at.
    for stored in (result.to_dict(), {"format": _wire.FORMAT + 1, "result": result.to_dict()}):
        path.write_text(json.dumps(stored))
        payload, note = _attempt.read_payload(path)
        assert payload is None and note.startswith("unreadable result") and "format" in note
    assert _attempt.read_payload(tmp_path / "missing.json") == (None, None)
    with pytest.raises(_wire.FormatError, match="this reader knows format"):
        _wire.decode_line(b'{"event": "ready"}', "an event")
    with pytest.raises(ValueError, match="runner must be one of"):
        AttemptResult(ok=False, failure="x", runner="thread")


def test_results_feed_the_rules():
    runs = [AttemptResult(ok=True, latency_ms=10.0 + i, quality=0.5).to_dict() for i in range(3)]
    runs.append(AttemptResult(ok=False, failure="killed by signal SIGKILL").to_dict())
    summary = rules.summarize_repeated_runs(runs)
    assert summary["failed_runs"] == 1 and summary["failure_reasons"] == ["killed by signal SIGKILL"]


def test_interleave_abba():
    assert interleave(0) == []
    assert interleave(1) == ["baseline", "candidate"]
    assert interleave(4) == ["baseline", "candidate", "candidate", "baseline",
                             "baseline", "candidate", "candidate", "baseline"]
    assert interleave(3, arms=("a", "b")) == ["a", "b", "b", "a", "a", "b"]
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match="n must be an integer >= 0"):
            interleave(bad)


@given(st.integers(min_value=0, max_value=200))
def test_interleave_balances_arms_and_positions(n):
    order = interleave(n)
    assert len(order) == 2 * n and order.count("baseline") == order.count("candidate") == n
    pairs = [order[i:i + 2] for i in range(0, len(order), 2)]
    assert all(sorted(pair) == ["baseline", "candidate"] for pair in pairs)
    # Each arm goes first in half of the pairs (one more for the first arm when n is odd).
    assert sum(pair[0] == "baseline" for pair in pairs) == (n + 1) // 2


def test_exported_names_are_exactly_the_public_ones():
    for name in workloads.__all__:  # names load on first use: each resolves
        getattr(workloads, name)
    public = {name for name in vars(workloads) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(workloads, name)).__name__ == "module"}
    # what the face lends the product's other layers (workloads._PRODUCT) is no public name
    assert set(workloads.__all__) == public - modules - set(workloads._PRODUCT)
    assert not set(workloads.__all__) & set(workloads._PRODUCT)
    assert workloads.__all__ == sorted(workloads.__all__)


def test_the_side_that_starts_children_imports_no_torch():
    code = (
        "import sys\n"
        "from mlflow_perfgate.workloads import RUNNER_KINDS, AttemptRunner, attempt_runner, interleave, "
        "run_attempt, run_diagnosis, run_interleaved\n"
        "import mlflow_perfgate.harness, mlflow_perfgate.suite\n"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_workloads_layer_imports_neither_mlflow_nor_tracking():
    code = (
        "import sys, mlflow_perfgate.workloads, mlflow_perfgate.workloads.tinylm, "
        "mlflow_perfgate.workloads._child, mlflow_perfgate.workloads._server\n"
        "bad = sorted(m for m in sys.modules if m == 'mlflow' or m.startswith(('mlflow.', "
        "'mlflow_perfgate.tracking', 'mlflow_perfgate.cli')))\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- Step-level interleaving: both arms in one child, their measured steps A B B A ...

def test_step_positions_and_arguments_of_an_interleaved_pair():
    from mlflow_perfgate.workloads._interleave import step_positions

    assert step_positions(4) == ((0, 3, 4, 7), (1, 2, 5, 6)) and step_positions(1) == ((0,), (1,))
    with pytest.raises(ValueError, match="both need the same steps, got 2 and 3"):
        workloads.run_interleaved("tinylm", {"steps": 2}, {"steps": 3}, supervised=False)
    with pytest.raises(ValueError, match="supervised attempts only"):
        workloads.run_interleaved("tinylm", {}, {}, supervised=False, runner="spawn")
    with pytest.raises(NotImplementedError, match="does not run step-interleaved attempts"):
        workloads.AttemptRunner().run_interleaved("tinylm", {}, {})


def test_an_interleaved_pair_of_tinylm_attempts(runner):
    base, cand = {**TINY}, {**TINY, "checkpoint": "true"}
    lead, other = workloads.run_interleaved("tinylm", base, cand, warmup=1, steps=2, threads=1, timeout_s=240,
                                            runner=runner)
    for result, conditions, order in ((lead, base, (0, 3)), (other, cand, (1, 2))):
        assert result.ok, result.failure_detail
        assert result.supervised and result.runner == ("spawn" if runner is None else "fork")
        assert result.conditions == conditions and result.step_order == order and len(result.step_times_ms) == 2
        assert result.latency_ms == statistics.median(result.step_times_ms) and result.torch_threads == 1
        assert rules.validate_validity_report(result.validity)["run_valid"] is True
        assert result.mem_status == "estimated" and result.peak_mem_mib > 0
        assert result.contention_status is not None
        assert AttemptResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert (lead.wall_s, lead.exitcode) == (other.wall_s, other.exitcode)  # one child
    # each arm trains as it would alone: the same quality as an attempt of its own
    alone = run_attempt("tinylm", cand, warmup=1, steps=2, threads=1, supervised=False, probe=False)
    assert other.quality == alone.quality


def test_a_failing_arm_fails_only_its_own_attempt(runner):
    lead, other = workloads.run_interleaved(f"{HOSTILE}:raiser", {"fail_at": 1000}, {"fail_at": 1}, warmup=0,
                                            steps=3, timeout_s=60, runner=runner)
    assert lead.ok and lead.step_order == (0, 3, 4) and len(lead.step_times_ms) == 3
    assert other.failure == "exception: RuntimeError: boom" and "RuntimeError: boom" in other.failure_detail
    assert other.step_order == (1,) and len(other.step_times_ms) == 1 and other.latency_ms is None
    # the leading arm failing (the runner's own result of the child) leaves the other its own result
    lead, other = workloads.run_interleaved(f"{HOSTILE}:raiser", {"fail_at": 0}, {"fail_at": 1000}, warmup=0,
                                            steps=2, timeout_s=60, runner=runner)
    assert lead.failure == "exception: RuntimeError: boom" and lead.step_order == () and lead.exitcode == 0
    assert other.ok and other.step_order == (1, 2)
    # a factory that refuses its conditions is that arm's failure too
    lead, other = workloads.run_interleaved(f"{HOSTILE}:broken_factory", {}, {}, warmup=0, steps=1,
                                            supervised=False)
    assert lead.failure.startswith("invalid_conditions: flavour must be one of") and other.failure == lead.failure


def test_a_crash_of_the_shared_child_fails_the_arm_that_crashed_it_and_withdraws_the_other(runner):
    lead, other = workloads.run_interleaved(f"{HOSTILE}:killer", {"fail_at": 1000}, {"fail_at": 1}, warmup=0,
                                            steps=3, timeout_s=60, runner=runner)
    assert other.failure == "killed by signal SIGKILL" and other.exitcode == -9 and other.supervised
    assert other.failed_in == "step" and not other.withdrawn
    assert lead.withdrawn and lead.failure.startswith("withdrawn: the round's shared child ended (killed by signal "
                                                      "SIGKILL) in the other arm's measured step")
    assert lead.conditions == {"fail_at": 1000} and other.conditions == {"fail_at": 1}


def test_arms_on_two_devices_cannot_share_a_child():
    lead, other = workloads.run_interleaved(f"{FIXTURES}.placed:make", {"device": "cpu"}, {"device": "meta"},
                                            warmup=0, steps=1, supervised=False)
    for result in (lead, other):
        assert result.failure == ("invalid_conditions: step interleaving runs both arms in one process on one "
                                  "device; they are on cpu and meta") and result.step_times_ms == ()
    assert all(r.ok for r in workloads.run_interleaved(f"{FIXTURES}.placed:make", {}, {}, warmup=0, steps=1,
                                                         supervised=False))
