"""A round's child begun ahead (``begin_interleaved``): it waits, warm, at its gate; both runners."""

from __future__ import annotations

import os
import time

import pytest

from mlflow_perfgate.workloads import attempt_runner
from mlflow_perfgate.workloads._gate import CANCELLED, Gate, wait_at_gate
from mlflow_perfgate.workloads._interleave import execute_interleaved

TINY = {"vocab": 64, "d_model": 16, "seq_len": 8, "batch": 2, "layers": 1, "steps": 4, "warmup": 1}


def test_a_gate_opened_before_the_child_reads_it_lets_it_through(tmp_path):
    gate = Gate(tmp_path)
    gate.open()
    gate.stop()  # too late: an opened gate stays open
    try:
        assert wait_at_gate(gate.path)[0] is True
    finally:
        gate.close()
    assert wait_at_gate(str(tmp_path / "missing"))[0] is False


def test_a_stopped_gate_measures_nothing_in_process(tmp_path):
    gate = Gate(tmp_path)
    gate.stop()
    try:
        a, b = execute_interleaved("tinylm", TINY, {**TINY, "checkpoint": True}, warmup=1, steps=4, threads=1,
                                   probe=True, timeout_s=60.0, gate=gate.path)
    finally:
        gate.close()
    for result in (a, b):
        assert not result.ok and result.failure == CANCELLED
        assert result.step_times_ms == () and result.gate_wait_s is not None


@pytest.mark.parametrize("kind", ["fork", "spawn"])
def test_a_begun_pair_waits_at_its_gate_and_a_cancelled_one_leaves_the_runner_usable(kind):
    with attempt_runner(kind, "tinylm") as runner:
        begun = time.perf_counter()
        pending = runner.begin_interleaved("tinylm", TINY, {**TINY, "checkpoint": True}, threads=1)
        time.sleep(0.5)  # the caller's own work (the previous round's logging)
        assert pending.measured() is True  # the child's measured steps are over, its tail to come
        a, b = pending.finish()
        elapsed = time.perf_counter() - begun
        assert a.ok and b.ok, (a.failure, a.failure_detail)
        assert len(a.step_times_ms) == len(b.step_times_ms) == 4
        assert a.gate_wait_s is not None and a.after_gate_s is not None and a.after_gate_s > 0
        # the wait at the gate is not the attempt's time
        assert 0 <= a.wall_s and a.wall_s + a.gate_wait_s <= elapsed + 0.01

        runner.begin_interleaved("tinylm", TINY, TINY, threads=1).cancel()
        # a child that measures nothing (both arms refused) says nothing: measured() waits for its end
        pending = runner.begin_interleaved("tests.workloads_fixtures.hostile:broken_factory", {}, {}, threads=1,
                                           warmup=0, steps=1)
        assert pending.measured() is False
        a, b = pending.finish()
        assert not a.ok and a.failure.startswith("invalid_conditions") and not b.ok
        a, b = runner.run_interleaved("tinylm", TINY, {**TINY, "checkpoint": True}, threads=1)
        assert a.ok and b.ok and a.gate_wait_s is None and a.after_gate_s is None


def _compare_whose_callback_fails_at(attempt: int) -> tuple[list, list]:
    """A 3-round step-interleaved compare whose caller's callback raises at its ``attempt``-th
    attempt (after that attempt is written); the attempt runs and the comparison runs it left."""
    from mlflow.tracking import MlflowClient

    from mlflow_perfgate.harness import compare
    from mlflow_perfgate.tracking import TAG

    seen = []

    def refuse(arm, result):
        seen.append(result)
        if len(seen) == attempt:
            raise RuntimeError("the caller's callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 2}, {"checkpoint": True}, attempts=3,
                min_valid_runs=3, progress=False, interleave="steps", allow_undecidable=True, runner="fork",
                on_attempt=refuse)
    runs = MlflowClient().search_runs(["0"], max_results=100)
    return ([run for run in runs if run.data.tags.get(TAG.KIND) == "attempt"],
            [run for run in runs if run.data.tags.get(TAG.KIND) == "comparison"])


def test_a_round_whose_predecessor_cannot_be_logged_never_measures_and_leaves_no_run(sqlite_uri):
    """The next round's child is begun before the previous round is logged; when that logging
    fails (here the caller's callback, on the first round), the child is cancelled at its gate and
    no run of it exists."""
    from mlflow_perfgate.tracking import TAG

    attempts, comparison = _compare_whose_callback_fails_at(2)
    assert len(attempts) == 2 and {run.data.tags[TAG.ARM] for run in attempts} == {"baseline", "candidate"}
    assert [run.info.status for run in comparison] == ["KILLED"]


def test_the_runs_started_beside_a_childs_tail_are_withdrawn_when_the_round_before_cannot_be_logged(sqlite_uri):
    """Once a round is logged, the next round's runs are started while the current child finishes
    (after its measured steps). When the current round's logging then fails, those runs were never
    measured: they end KILLED and excluded ('withdrawn'), so that no count judges them."""
    from mlflow_perfgate.tracking import TAG
    from mlflow_perfgate.tracking._group import attempt_state

    attempts, comparison = _compare_whose_callback_fails_at(4)
    assert [run.info.status for run in comparison] == ["KILLED"]
    by_pair = {}
    for run in attempts:
        by_pair.setdefault(int(run.data.tags[TAG.PAIR]), []).append(run)
    assert sorted(by_pair) == [0, 1, 2] and all(len(pair) == 2 for pair in by_pair.values())
    for run in by_pair[0] + by_pair[1]:  # measured and logged (the callback failed after the write)
        assert run.info.status == "FINISHED" and run.data.tags[TAG.OK] == "true"
    for run in by_pair[2]:  # started ahead, never let through its gate
        assert run.info.status == "KILLED"
        state, reason = attempt_state(run.data.tags, run.info.status, run.info.start_time, run.info.start_time, 3600)
        assert state == "excluded" and reason.startswith("withdrawn: compare stopped (") and "callback failed" in reason
        assert reason.endswith("before this attempt's round ran")
        assert "step_time_ms" not in run.data.metrics


SLOW_TAIL = "tests.workloads_fixtures.hostile:slow_tail"


def _server_children(runner) -> list[int]:
    """The fork runner's server's children now (its attempts' children), from ``/proc``."""
    pid = runner._server.process.pid
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            found.extend(int(item) for item in handle.read().split())
    return found


def _until(condition, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {limit_s} s: {what}"
        time.sleep(0.01)


def test_the_next_round_s_child_starts_beside_the_tail_of_the_one_before(tmp_path):
    """Begun while the holding child is past its measured steps, a second child is forked at once (not
    after that child's end): two children of the server at a time, each with its own result."""
    release = tmp_path / "release"
    held = {"release": str(release)}
    with attempt_runner("fork", SLOW_TAIL) as runner:
        first = runner.begin_interleaved(SLOW_TAIL, held, held, threads=1, warmup=0, steps=2)
        assert first.measured() is True  # its tail now waits for `release`
        second = runner.begin_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=3)
        _until(lambda: len(_server_children(runner)) == 2, "the second child forked beside the first one's tail")
        release.touch()
        a, b = first.finish()
        assert a.ok and b.ok and len(a.step_times_ms) == 2, (a.failure, a.failure_detail)
        c, d = second.finish()  # the first one's end (what it left killed) spared it
        assert c.ok and d.ok and len(c.step_times_ms) == len(d.step_times_ms) == 3, (c.failure, c.failure_detail)
        # one begun beside a tail and cancelled ends without measuring; the runner is whole after
        release.unlink()
        first = runner.begin_interleaved(SLOW_TAIL, held, held, threads=1, warmup=0, steps=2)
        assert first.measured() is True
        runner.begin_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=2).cancel()
        release.touch()
        assert all(r.ok for r in first.finish())
        assert all(r.ok for r in runner.run_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=2))


def test_a_child_killed_on_its_time_limit_spares_the_one_begun_beside_it(tmp_path):
    never = {"release": str(tmp_path / "never")}
    with attempt_runner("fork", SLOW_TAIL) as runner:
        first = runner.begin_interleaved(SLOW_TAIL, never, never, threads=1, warmup=0, steps=2, timeout_s=5)
        assert first.measured() is True  # its tail waits past its limit
        second = runner.begin_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=2)
        a, b = first.finish()
        assert not a.ok and "timeout" in a.failure, a.failure
        c, d = second.finish()
        assert c.ok and d.ok, (c.failure, c.failure_detail)


def test_a_child_that_dies_beside_a_tail_is_reported_at_once_when_its_turn_comes(tmp_path):
    """Begun beside the tail of the one before, a child whose factory ends its process is seen ended as
    soon as its round comes (its end was read while the first one was followed), not at its limit."""
    release = tmp_path / "release"
    held = {"release": str(release)}
    dying_factory = "tests.workloads_fixtures.hostile:exits_in_factory"
    with attempt_runner("fork", SLOW_TAIL) as runner:
        runner.check(dying_factory)  # vetted: a workload's first request vets its import in a turn of its own
        first = runner.begin_interleaved(SLOW_TAIL, held, held, threads=1, warmup=0, steps=2)
        assert first.measured() is True
        marker = {"marker": str(tmp_path / "built")}
        dying = runner.begin_interleaved(dying_factory, marker, marker, threads=1, warmup=0, steps=2, timeout_s=120)
        _until(lambda: (tmp_path / "built").exists(), "the second child's factory ran")
        _until(lambda: len(_server_children(runner)) == 1, "the second child ended and was reaped")
        release.touch()
        assert all(r.ok for r in first.finish())  # following it, the runner read the second one's end too
        dying.open()
        dying.child.deadline = time.monotonic()  # no time to wait: it must know its end from what was read
        known = dying.child.wait_reply(1) is None and dying.child.ended  # (not waited for up to its limit)
        a, b = dying.finish()
        assert known and not a.ok and "code 4" in a.failure, (known, a.failure)


def test_the_server_killed_with_two_children_in_flight_fails_both_and_the_runner_goes_on(tmp_path):
    release = tmp_path / "release"
    held = {"release": str(release)}
    with attempt_runner("fork", SLOW_TAIL) as runner:
        first = runner.begin_interleaved(SLOW_TAIL, held, held, threads=1, warmup=0, steps=2)
        assert first.measured() is True
        second = runner.begin_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=2)
        _until(lambda: len(_server_children(runner)) == 2, "the second child forked beside the first one's tail")
        os.kill(runner._server.process.pid, 9)
        for pending in (first, second):
            a, b = pending.finish()
            assert not a.ok and a.failure.startswith("attempt server died"), a.failure
        release.touch()
        assert all(r.ok for r in runner.run_interleaved(SLOW_TAIL, {}, {}, threads=1, warmup=0, steps=2))
