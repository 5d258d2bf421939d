"""The contention sampler: the kernel's run-queue wait, CPU time and switches around each step.

No test asserts a timing. The loaded test compares the same work on the same core with and
without two busy neighbours it starts (pinned there, bounded in time, ended by PID), so other
load on the machine moves both runs alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from mlflow_perfgate.workloads import AttemptResult, run_attempt
from mlflow_perfgate.workloads._contention import (
    CONTENTION_WAIT_SHARE_BOUND,
    MEASURED,
    ContentionSampler,
    ContentionUnavailableWarning,
    ProcessSnapshot,
    StepContention,
    summarize_steps,
    uncontended_latency,
)
from mlflow_perfgate.workloads._timing import time_steps

linux_proc = pytest.mark.skipif(not os.path.isdir(f"/proc/{os.getpid()}/task"), reason="needs Linux /proc")

#: A busy neighbour: pins itself to a core, says so, spins until its deadline (or its kill).
_HOG = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "print('ready', flush=True)\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
)
_HOG_LIFETIME_S = 20.0


def _spin(n: int = 400_000) -> int:
    """Pure-Python CPU work, about 30-60 ms here; never sleeps, so all its wall is CPU or wait."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def _measure_on(core: int, sampler: ContentionSampler, steps: int = 2):
    """Run ``_spin`` steps with this thread pinned to ``core``; the affinity is restored."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        _spin(50_000)  # untimed: the move to the core (a wait of its own) happens here
        samples = time_steps(_spin, steps, sampler=sampler)
    finally:
        os.sched_setaffinity(0, previous)
    return summarize_steps(samples.contention, samples.contention_status)


def _start_hogs(core: int, count: int) -> list[subprocess.Popen]:
    hogs = []
    try:
        for _ in range(count):
            hog = subprocess.Popen([sys.executable, "-c", _HOG, str(core), str(_HOG_LIFETIME_S)],
                                   stdout=subprocess.PIPE, text=True)
            hogs.append(hog)
            assert hog.stdout.readline().strip() == "ready"
    except BaseException:
        _stop_hogs(hogs)
        raise
    return hogs


def _stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()  # by PID: only the processes this test started
    for hog in hogs:
        hog.wait(timeout=10)
        hog.stdout.close()


@linux_proc
def test_wait_share_is_large_when_two_busy_neighbours_share_the_core():
    sampler = ContentionSampler()
    assert sampler.status == MEASURED
    cores = sorted(os.sched_getaffinity(0))
    # The quietest core the test may use: other work on the machine moves both runs alike there.
    quiet_by_core = {core: _measure_on(core, sampler) for core in cores}
    core = min(cores, key=lambda c: quiet_by_core[c]["wait_share"])
    quiet = quiet_by_core[core]
    hogs = _start_hogs(core, 2)
    try:
        loaded = _measure_on(core, sampler)
    finally:
        _stop_hogs(hogs)
    quiet_after = _measure_on(core, sampler)
    sampler.close()
    figures = f"quiet {quiet} / loaded {loaded} / quiet after {quiet_after}"
    # Two neighbours on the core take two thirds of it under fair scheduling: share ~0.67.
    assert loaded["wait_share"] > 0.3, figures
    assert loaded["wait_share"] > max(quiet["wait_share"], quiet_after["wait_share"]), figures
    # The relative check that holds whatever else runs there: each neighbour adds about one unit
    # of waiting per unit of the work's own CPU time (2 in theory; 1 is the bound).
    def waits_per_cpu(run):
        return run["runq_wait_ms"] / run["cpu_ms"]

    assert waits_per_cpu(loaded) - max(waits_per_cpu(quiet), waits_per_cpu(quiet_after)) > 1.0, figures
    assert loaded["nivcsw"] >= 1, figures  # the neighbours preempted the work
    assert len(loaded["step_wait_share"]) == 2 and all(s > 0 for s in loaded["step_wait_share"]), figures


@linux_proc
def test_threads_that_exit_or_start_mid_step_never_make_a_delta_negative():
    release, go = threading.Event(), threading.Event()

    def short_lived():
        _spin(50_000)  # accrue CPU time and, on 2 cores, some run-queue wait
        go.wait(30)  # alive at the first snapshot, gone before the second

    def long_lived():
        release.wait(30)

    dying = [threading.Thread(target=short_lived) for _ in range(4)]
    born = [threading.Thread(target=long_lived) for _ in range(2)]
    for thread in dying:
        thread.start()
    sampler = ContentionSampler()
    before = sampler.sample()
    dying_ids = [thread.native_id for thread in dying]
    assert all(tid in before.runq_wait_ns for tid in dying_ids)
    go.set()
    for thread in dying:
        thread.join()
    _wait_until_gone(dying_ids)
    for thread in born:
        thread.start()
    after = sampler.sample()
    try:
        step = sampler.delta(before, after, wall_ms=1.0)
        assert step.runq_wait_ms >= 0 and step.cpu_ms >= 0 and step.nivcsw >= 0
        assert step.threads_exited >= len(dying_ids)
        assert all(thread.native_id in after.runq_wait_ns for thread in born)
        assert step.threads == len(after.runq_wait_ns)
    finally:
        release.set()
        for thread in born:
            thread.join()
        sampler.close()


@linux_proc
def test_a_kept_descriptor_of_an_exited_thread_reads_as_absent():
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(30,))
    thread.start()
    sampler = ContentionSampler()
    assert thread.native_id in sampler.sample().runq_wait_ns  # its schedstat is now kept open
    tid = thread.native_id
    release.set()
    thread.join()
    _wait_until_gone([tid])
    # The thread exited between a listing and the read: the kept descriptor answers ESRCH.
    assert sampler._read_thread(sampler._task_dir(), tid) is None
    assert tid not in sampler._fds
    sampler.close()


def _wait_until_gone(tids: list[int], timeout_s: float = 10.0) -> None:
    """A joined thread's /proc entry goes a moment after ``join()`` returns."""
    deadline = time.monotonic() + timeout_s
    while any(os.path.exists(f"/proc/{os.getpid()}/task/{tid}") for tid in tids):
        assert time.monotonic() < deadline, f"threads {tids} still listed after {timeout_s}s"
        time.sleep(0.005)


def _snapshot(waits: dict[int, int], cpu_ns: int = 0, nivcsw: int = 0) -> ProcessSnapshot:
    return ProcessSnapshot(runq_wait_ns=waits, cpu_ns=cpu_ns, nivcsw=nivcsw)


def test_delta_by_thread_id_hand_computed():
    before = _snapshot({1: 5_000_000, 2: 7_000_000, 3: 9_000_000}, cpu_ns=10_000_000, nivcsw=4)
    # 1 waited 1 ms more; 2 exited (its last wait lost, counted 0); 3's count went down: a new
    # thread reused the id, all 0.5 ms of it counted; 4 was born and waited 2 ms.
    after = _snapshot({1: 6_000_000, 3: 500_000, 4: 2_000_000}, cpu_ns=14_000_000, nivcsw=7)
    step = ContentionSampler.delta(before, after, wall_ms=10.0, sampling_us=12.5)
    assert step.runq_wait_ms == pytest.approx(3.5)
    assert step.cpu_ms == pytest.approx(4.0)
    assert step.nivcsw == 3
    assert step.wait_share == pytest.approx(0.35)
    assert (step.threads, step.threads_exited, step.sampling_us) == (3, 1, 12.5)
    # Everything exited: nothing negative.
    gone = ContentionSampler.delta(before, _snapshot({}, cpu_ns=10_000_000, nivcsw=4), wall_ms=1.0)
    assert (gone.runq_wait_ms, gone.cpu_ms, gone.nivcsw, gone.threads_exited) == (0.0, 0.0, 0, 3)
    assert ContentionSampler.delta(before, before, wall_ms=0.0).wait_share is None
    # The reading thread's and the process's first readings close the interval: what the second
    # snapshot spent reading /proc (3 ms of CPU, a 2 ms preemption) stays out of the step.
    read_before = ProcessSnapshot({1: 5_000_000, 2: 1_000_000}, cpu_ns=10_000_000, nivcsw=4, reader_tid=1)
    read_after = ProcessSnapshot({1: 8_000_000, 2: 1_500_000}, cpu_ns=17_000_000, nivcsw=6,
                                 cpu_ns_first=14_000_000, nivcsw_first=5, reader_tid=1,
                                 reader_wait_ns_first=6_000_000)
    step = ContentionSampler.delta(read_before, read_after, wall_ms=6.0)
    assert (step.runq_wait_ms, step.cpu_ms, step.nivcsw) == (pytest.approx(1.5), pytest.approx(4.0), 1)
    with pytest.raises(ValueError, match="wall_ms must be a finite number >= 0"):
        ContentionSampler.delta(before, after, wall_ms=-1.0)


def _fake_proc(root: Path, threads: dict[str, str | None]) -> Path:
    """A procfs-shaped tree for this pid: ``{tid: schedstat line, or None for no file}``."""
    task = root / str(os.getpid()) / "task"
    for tid, line in threads.items():
        (task / tid).mkdir(parents=True, exist_ok=True)
        if line is not None:
            (task / tid / "schedstat").write_text(line)
    return task


def test_sampler_reads_a_procfs_tree_by_thread_id(tmp_path):
    own = str(os.getpid())
    # Thread 900001 is listed but its file is gone (it exited between the listing and the read).
    task = _fake_proc(tmp_path, {own: "10 2000000 3\n", "900001": None})
    sampler = ContentionSampler(root=tmp_path)
    assert sampler.status == MEASURED
    before = sampler.sample()
    assert before.runq_wait_ns == {int(own): 2_000_000}
    (task / own / "schedstat").write_text("20 3500000 4\n")
    _fake_proc(tmp_path, {"900002": "1 250000 1\n"})
    step = sampler.delta(before, sampler.sample(), wall_ms=5.0)
    sampler.close()
    assert step.runq_wait_ms == pytest.approx(1.75)
    assert step.wait_share == pytest.approx(0.35)
    assert (step.threads, step.threads_exited) == (2, 0)


def test_no_proc_records_nothing_and_says_so_once(tmp_path):
    missing = tmp_path / "no-proc"
    with pytest.warns(ContentionUnavailableWarning, match="not found"):
        sampler = ContentionSampler(root=missing)
    assert not sampler.available
    assert sampler.status.startswith("unavailable: ") and str(missing) in sampler.status
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = ContentionSampler(root=missing)  # said once already: silent now
        quiet = ContentionSampler(root=tmp_path / "other", warn=False)
    assert again.sample() is None and not quiet.available
    samples = time_steps(lambda: None, 3, sampler=sampler)
    assert len(samples.times_ms) == 3 and samples.contention == []
    assert samples.contention_status == sampler.status
    fields = summarize_steps(samples.contention, samples.contention_status)
    assert fields == {"contention_status": sampler.status}
    result = AttemptResult(ok=True, latency_ms=1.0, quality=0.5, step_times_ms=samples.times_ms, **fields)
    assert result.runq_wait_ms is None and result.step_wait_share is None
    assert AttemptResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_proc_without_schedstat_is_unavailable(tmp_path):
    _fake_proc(tmp_path, {str(os.getpid()): None})  # a kernel without CONFIG_SCHED_INFO
    with pytest.warns(ContentionUnavailableWarning, match="cannot read run-queue wait"):
        sampler = ContentionSampler(root=tmp_path)
    assert sampler.sample() is None


def test_steps_without_a_sampler_carry_no_figures():
    samples = time_steps(lambda: None, 2)
    assert samples.contention == [] and samples.contention_status is None
    assert summarize_steps(samples.contention, None) == {"contention_status": None}


@linux_proc
def test_supervised_attempt_carries_the_figures_through_json():
    result = run_attempt("tinylm", {"input_shape": "(2, 16)", "seed": 0}, warmup=1, steps=3, threads=1,
                         probe=False)
    assert result.ok and result.supervised, result.failure_detail
    assert result.contention_status == MEASURED
    for name in ("step_wait_ms", "step_wait_share", "step_cpu_ms", "step_nivcsw"):
        assert len(getattr(result, name)) == 3, name
    assert result.runq_wait_ms == pytest.approx(sum(result.step_wait_ms))
    assert result.wait_share == pytest.approx(result.runq_wait_ms / sum(result.step_times_ms))
    assert result.cpu_ms == pytest.approx(sum(result.step_cpu_ms)) and result.cpu_ms > 0
    assert result.nivcsw == sum(result.step_nivcsw) and type(result.nivcsw) is int
    assert AttemptResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_attempt_result_validates_the_contention_fields():
    base = {"ok": True, "latency_ms": 2.0, "quality": 0.5, "step_times_ms": [1.0, 3.0]}
    with pytest.raises(ValueError, match="step_wait_ms must have one value per step"):
        AttemptResult(**base, step_wait_ms=[0.1])
    with pytest.raises(ValueError, match="wait_share must be a finite number >= 0 or None"):
        AttemptResult(**base, wait_share=-0.1)
    with pytest.raises(ValueError, match="nivcsw must be a finite number >= 0 or None"):
        AttemptResult(**base, nivcsw=True)
    with pytest.raises(ValueError, match="contention_status must be"):
        AttemptResult(**base, contention_status="maybe")
    full = AttemptResult(**base, contention_status=MEASURED, runq_wait_ms=0.5, cpu_ms=3.5, wait_share=0.125,
                         nivcsw=2, step_wait_ms=[0.1, 0.4], step_wait_share=[0.1, 0.4 / 3],
                         step_cpu_ms=[1.0, 2.5], step_nivcsw=[0, 2])
    assert full.step_wait_ms == (0.1, 0.4)
    assert full.to_dict()["step_nivcsw"] == [0, 2]
    assert AttemptResult.from_dict(json.loads(json.dumps(full.to_dict()))) == full


def test_uncontended_latency_is_the_median_of_the_quiet_steps_by_hand():
    assert CONTENTION_WAIT_SHARE_BOUND == 0.05
    times = [10.0, 11.0, 30.0, 12.0, 40.0, 13.0]
    # all quiet: the median of every step (the bound itself is quiet)
    assert uncontended_latency(times, [0.0, 0.01, 0.05, 0.0, 0.002, 0.0]) == (12.5, 6)
    # half contended: 3 quiet steps of 6 are enough, their median
    assert uncontended_latency(times, [0.0, 0.01, 0.6, 0.0, 0.9, 0.051]) == (11.0, 3)
    # mostly contended: 2 quiet of 6 is a contended attempt; a step without a share is not quiet
    assert uncontended_latency(times, [0.0, None, 0.6, 0.0, 0.9, 0.3]) == (None, 2)
    assert uncontended_latency([], []) == (None, 0)
    assert uncontended_latency([5.0], [0.04], bound=0.01) == (None, 0)
    with pytest.raises(ValueError, match="one value per step"):
        uncontended_latency([1.0, 2.0], [0.0])
    with pytest.raises(ValueError, match="bound must be a finite number >= 0"):
        uncontended_latency([1.0], [0.0], bound=-0.1)


def test_summarize_steps_carries_the_uncontended_figure():
    def step(wall_ms, wait_ms):
        return StepContention(runq_wait_ms=wait_ms, cpu_ms=wall_ms, nivcsw=0, wall_ms=wall_ms,
                              wait_share=wait_ms / wall_ms, threads=1, threads_exited=0)

    fields = summarize_steps([step(10.0, 0.0), step(20.0, 15.0), step(12.0, 0.1)], MEASURED)
    assert (fields["uncontended_latency_ms"], fields["uncontended_steps"]) == (11.0, 2)
    result = AttemptResult(ok=True, latency_ms=12.0, quality=1.0, step_times_ms=(10.0, 20.0, 12.0), **fields)
    assert AttemptResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    with pytest.raises(ValueError, match="uncontended_steps must be an integer in"):
        AttemptResult(ok=True, latency_ms=12.0, quality=1.0, step_times_ms=(10.0,), uncontended_steps=2)
    with pytest.raises(ValueError, match="uncontended_latency_ms must be a finite number > 0"):
        AttemptResult(ok=True, latency_ms=12.0, quality=1.0, uncontended_latency_ms=0.0)
