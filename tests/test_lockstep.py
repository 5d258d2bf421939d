"""Lockstep rounds: one child per arm, their measured steps alternated by the parent (``workloads._lockstep``).

Real children of real runners (fork and spawn), real pipes and signals: nothing is mocked.
"""

from __future__ import annotations

import os
import sys

import pytest

from mlflow_perfgate.workloads import SiteRunner, run_lockstep
from mlflow_perfgate.workloads._gate import REPLY_SIZE, decode_reply, encode_reply
from mlflow_perfgate.workloads._interleave import step_positions
from mlflow_perfgate.workloads._lockstep import lockstep_sequence

HOSTILE = "tests.workloads_fixtures.lockstep_hostile:make"
FINE = {"mode": "fine", "step_ms": 1.0, "warmup": 1, "steps": 6}


def test_the_sequence_is_one_process_order_and_the_longer_arm_finishes_alone():
    lead, other = step_positions(4)
    order = lockstep_sequence(4, 4)
    assert tuple(i for i, arm in enumerate(order) if arm == 0) == lead
    assert tuple(i for i, arm in enumerate(order) if arm == 1) == other
    assert lockstep_sequence(2, 3) == [0, 1, 1, 0, 1]
    assert lockstep_sequence(3, 1) == [0, 1, 0, 0]
    assert lockstep_sequence(0, 2) == [1, 1]


def test_a_reply_is_whole_or_refused():
    assert decode_reply(encode_reply(12.5)) == 12.5
    assert decode_reply(encode_reply(None)) is None
    assert len(encode_reply(1.0)) == REPLY_SIZE
    for junk in (b"zzzzzzzzz", b"d", encode_reply(1.0)[:-1], b"d" + b"\xff" * 8):
        with pytest.raises(ValueError):
            decode_reply(junk)


@pytest.fixture(scope="module")
def site_runner():
    with SiteRunner("fork", HOSTILE, sites=(None, None)) as runner:
        yield runner


@pytest.mark.parametrize("kind", ["fork", "spawn"])
def test_each_arm_is_measured_in_its_own_child_in_the_shared_order(kind, site_runner):
    if kind == "fork":
        a, b = site_runner.run_lockstep(HOSTILE, FINE, {**FINE, "step_ms": 3.0}, threads=1, timeout_s=60)
    else:
        a, b = run_lockstep(HOSTILE, FINE, {**FINE, "step_ms": 3.0}, threads=1, timeout_s=60, runner="spawn")
    assert a.ok and b.ok, (a.failure_detail, b.failure_detail)
    assert a.runner == b.runner == kind
    assert len(a.step_times_ms) == len(b.step_times_ms) == 6
    assert (a.step_order, b.step_order) == step_positions(6)
    assert b.latency_ms > 2 * a.latency_ms  # each child timed its own step: 3 ms against 1 ms
    assert a.after_gate_s is not None and a.gate_wait_s is not None
    assert a.torch_state is None  # the process was its own


def test_duet_steps_both_arms_at_once(site_runner):
    a, b = site_runner.run_lockstep(HOSTILE, FINE, FINE, threads=1, timeout_s=60, duet=True)
    assert a.ok and b.ok
    assert a.step_order == b.step_order == tuple(range(6))


def test_arms_may_differ_in_steps_and_warmup(site_runner):
    a, b = site_runner.run_lockstep(HOSTILE, FINE, {**FINE, "steps": 9, "warmup": 0}, threads=1, timeout_s=60)
    assert a.ok and b.ok
    assert (len(a.step_times_ms), len(b.step_times_ms)) == (6, 9)
    assert (a.steps, b.steps, a.warmup, b.warmup) == (6, 9, 1, 0)
    assert sorted(a.step_order + b.step_order) == list(range(15))


@pytest.mark.parametrize("mode, failure", [
    ("kill", "killed by signal SIGKILL"),
    ("segv", "killed by signal SIGSEGV"),
    ("exit", "exited with code 3"),
    ("raise", "exception: RuntimeError: the candidate's step broke"),
])
@pytest.mark.parametrize("leading", ["baseline", "candidate"])
def test_a_crashing_arm_fails_its_own_attempt_and_the_other_stands(site_runner, mode, failure, leading):
    hostile = {**FINE, "mode": mode, "fail_at": 3}  # one warm-up step, two measured steps, then the failure
    pair = (FINE, hostile) if leading == "baseline" else (hostile, FINE)
    results = site_runner.run_lockstep(HOSTILE, *pair, threads=1, timeout_s=60)
    good, bad = results if leading == "baseline" else results[::-1]
    assert good.ok and len(good.step_times_ms) == 6, good.failure_detail
    assert not bad.ok and bad.failure.startswith(failure), (bad.failure, bad.failure_detail)
    assert len(bad.step_times_ms) == 2  # the steps it answered before it died are kept
    assert len(bad.step_order) == 2


def test_a_hanging_arm_times_out_alone_and_its_wait_is_not_the_other_arms(site_runner):
    hostile = {**FINE, "mode": "hang", "fail_at": 2, "sleep_s": 600}
    good, bad = site_runner.run_lockstep(HOSTILE, FINE, hostile, threads=1, timeout_s=4)
    assert bad.failure.startswith("timeout after 4"), bad.failure
    # the baseline waited 4 s for the hung candidate, and still had its own limit for its own steps
    assert good.ok and len(good.step_times_ms) == 6, good.failure_detail


def test_a_child_that_leaves_the_protocol_fails_its_own_attempt(site_runner):
    good, bad = site_runner.run_lockstep(HOSTILE, FINE, {**FINE, "mode": "garble", "fail_at": 3}, threads=1,
                                         timeout_s=60)
    assert good.ok and len(good.step_times_ms) == 6
    assert not bad.ok and "left the lockstep protocol" in bad.failure_detail, (bad.failure, bad.failure_detail)


def test_a_round_cancelled_before_its_gate_measures_nothing_and_ends_both_children(site_runner):
    pending = site_runner.begin_lockstep(HOSTILE, FINE, FINE, threads=1, timeout_s=60)
    pending.cancel()
    pending.cancel()  # twice is once
    a, b = site_runner.run_lockstep(HOSTILE, FINE, FINE, threads=1, timeout_s=60)  # the runners are free again
    assert a.ok and b.ok


def test_a_round_cancelled_midway_ends_both_children_and_frees_the_runners(site_runner):
    pending = site_runner.begin_lockstep(HOSTILE, FINE, {**FINE, "mode": "hang", "fail_at": 2}, threads=1,
                                         timeout_s=60)
    pending.open()
    pending.children[0].gate.send(b"n")  # the lead steps; the round is then stopped
    pending.cancel()
    a, b = site_runner.run_lockstep(HOSTILE, FINE, FINE, threads=1, timeout_s=60)
    assert a.ok and b.ok


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs this process may run on")
@pytest.mark.parametrize("how", ["lockstep", "duet", "lockstep, not held"])
def test_both_children_of_a_lockstep_round_share_the_same_cpu_and_duet_s_do_not(site_runner, tmp_path, how,
                                                                                 monkeypatch):
    if how == "lockstep, not held":
        monkeypatch.setenv("MLFLOW_PERFGATE_LOCKSTEP_CPUS", "none")
    conditions = {**FINE, "report_cpus": str(tmp_path)}
    a, b = site_runner.run_lockstep(HOSTILE, conditions, conditions, threads=1, timeout_s=60, duet=how == "duet")
    assert a.ok and b.ok
    seen = sorted(path.read_text() for path in tmp_path.glob("cpus-*.txt"))
    assert len(seen) == 2
    everywhere = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    if how == "lockstep":
        assert seen == [str(max(os.sched_getaffinity(0)))] * 2  # one core, as one process's arms share one
    else:
        assert seen == [everywhere] * 2


def test_a_site_in_a_worktree_reads_the_checkout_s_folders_there(tmp_path, monkeypatch):
    """A folder of the checkout on PYTHONPATH (the pytest plugin's test folders) is read at its place in
    the arm's worktree, never in the checkout; a working folder the revision lacks falls back to its
    nearest folder there."""
    from mlflow_perfgate.workloads._site import Site, site_env

    checkout, worktree = tmp_path / "checkout", tmp_path / "worktree"
    (checkout / "tests" / "new").mkdir(parents=True)
    (worktree / "tests").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(checkout / "tests"), "/elsewhere"]))
    here = Site(python=sys.executable, cwd=str(checkout / "tests" / "new"), path=(str(checkout),))
    moved = here.moved(checkout, worktree, label="worktree of x")
    assert moved.cwd == str(worktree / "tests")  # tests/new is not in the revision
    entries = site_env(moved)["PYTHONPATH"].split(os.pathsep)
    assert entries == [str(worktree), str(worktree / "tests"), "/elsewhere"]
    assert not any(entry.startswith(str(checkout)) for entry in entries)
