"""The kernel's word on contention around each measured step: run-queue wait, CPU time, switches.

Method. Before a step's clock starts and after it stops (so the reads are outside the timed
region), :class:`ContentionSampler` takes a snapshot of the current process:

- **run-queue wait**: for every thread in ``/proc/<pid>/task/``, the second field of
  ``/proc/<pid>/task/<tid>/schedstat``: the nanoseconds the thread has spent runnable but waiting
  for a CPU (the kernel's ``sched_info.run_delay``; fields are ``exec_runtime run_delay
  pcount``, see the kernel's ``Documentation/scheduler/sched-stats.rst``, "/proc/<pid>/schedstat",
  and ``proc_pid_schedstat`` in ``fs/proc/base.c``). It needs ``CONFIG_SCHED_INFO`` (set by
  every mainstream distribution kernel), not the ``kernel.sched_schedstats`` sysctl.
- **CPU time and involuntary context switches**: ``getrusage(RUSAGE_SELF)`` (``ru_utime +
  ru_stime`` and ``ru_nivcsw``; ``getrusage(2)``). For ``RUSAGE_SELF`` the kernel adds the
  counts of threads that have already exited (kept in the process's ``signal_struct``), so these
  two figures are exact and never decrease, whatever threads come and go. The same counts per
  thread are ``nonvoluntary_ctxt_switches`` in ``/proc/<pid>/task/<tid>/status`` (``proc(5)``).

A step's figures are the differences of its two snapshots; its **wait share** is its run-queue
wait divided by its wall time (the clock's step time). The wait is summed over threads, so a
step whose several threads all queue can show a share above 1 (thread-seconds of waiting per
second of wall); with one busy thread it is the fraction of the step spent waiting for a CPU.
Only the threads of this process count: DataLoader workers (``num_workers > 0``) are processes
of their own, and their waits are not in the figures.

Threads that come and go. The kernel keeps no run-queue wait for threads that have exited, so
the wait is a sum over threads, matched by thread id:

- a thread seen in both snapshots adds its own difference;
- a thread seen only after the step was born during it and adds its whole count (all of it
  accrued inside the interval); so does a thread whose count went *down*, which can only be a
  new thread that reused an exited one's id;
- a thread seen only before the step exited during it: the wait it accrued between the first
  snapshot and its exit is lost (it is counted as 0), and the step records
  ``threads_exited``, so an undercount is visible. A thread born and gone within one step is not
  seen at all. The difference is therefore never negative, and nothing raises.

Timing details. ``run_delay`` is credited when a waiting thread gets the CPU, so another
thread's wait that spans a snapshot is counted in the step in which it ends; the thread taking
the snapshot (the one running the step) is running, so its own count is always up to date.
A snapshot reads ``getrusage`` and the reading thread's ``schedstat`` first, then every other
thread, then the reading thread and ``getrusage`` again; an interval uses the first snapshot's
last readings and the second's first ones. So the step's CPU time and its runner's wait cover the
clock's interval to within a few microseconds, and a preemption while ``/proc`` is being read
(likely enough on a busy machine: a wait that starts in a 100 µs window lasts a time slice or
more) does not land in the step. Other threads' waits are read a little further from the
clock.

Cost. Each thread's ``schedstat`` stays open between snapshots and is re-read with ``pread`` at
offset 0 (procfs regenerates it), so a snapshot is a listing of ``task/``, one ``pread`` per
thread (two for the reader) and two ``getrusage`` calls. The cost of a step's two snapshots is
kept per step (``sampling_us``; a snapshot right after a step costs several times a warm one,
since the step has evicted what the read needs from the caches) and measured in
``benchmarks/bench_contention.py``. :meth:`ContentionSampler.close` (or the sampler as a
context manager) releases the descriptors.

Where ``/proc/<pid>/task`` or its ``schedstat`` files are missing (macOS, Windows, a kernel
without ``CONFIG_SCHED_INFO``), the sampler records nothing: :meth:`ContentionSampler.sample`
returns ``None``, :attr:`ContentionSampler.status` says why, and a
:class:`ContentionUnavailableWarning` is issued once per reason and process. Pure stdlib.
"""

from __future__ import annotations

import os
import statistics
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

try:
    import resource
except ImportError:  # Windows: no getrusage
    resource = None  # type: ignore[assignment]

__all__ = [
    "ContentionSampler",
    "ContentionUnavailableWarning",
    "ProcessSnapshot",
    "StepContention",
    "CONTENTION_WAIT_SHARE_BOUND",
    "MEASURED",
    "summarize_steps",
    "uncontended_latency",
]

#: :attr:`ContentionSampler.status` when the sampler reads the kernel's figures.
MEASURED = "measured"
#: A measured step is *quiet* when its wait share is at most this (:func:`uncontended_latency`).
#: From ``benchmarks/bench_contention.py`` (TinyLM on 2 CPUs, one torch thread): quiet steps had a
#: wait share P95 of 0.006, steps under one or two busy neighbours per core medians of 0.57 and
#: above; 0.05 is eight times the quiet P95 and a tenth of the contended median.
CONTENTION_WAIT_SHARE_BOUND = 0.05
_DEFAULT_ROOT = "/proc"
_READ_BYTES = 128
#: Reasons already warned about in this process (the warning is issued once per reason).
_warned: set[str] = set()


class ContentionUnavailableWarning(RuntimeWarning):
    """The kernel's contention figures cannot be read here; steps carry none."""


@dataclass(frozen=True)
class ProcessSnapshot:
    """The process's counters at one instant.

    The figures of the process and of the thread taking the snapshot (the one that runs the
    step) are read at both ends of the snapshot: an interval between two snapshots takes the
    first one's last readings and the second one's first, so the time spent reading ``/proc``
    (and a preemption while doing so) stays out of the step's figures.

    Attributes:
        runq_wait_ns: each live thread's cumulative run-queue wait (ns), by thread id; for the
            reading thread, its last reading.
        cpu_ns: the process's CPU time (user + system, all threads, exited ones included), read
            last.
        nivcsw: the process's involuntary context switches (all threads, exited ones included),
            read last.
        cpu_ns_first: ``cpu_ns`` read first (``None``: the same as ``cpu_ns``).
        nivcsw_first: ``nivcsw`` read first (``None``: the same as ``nivcsw``).
        reader_tid: the thread that took the snapshot (``None``: not recorded).
        reader_wait_ns_first: its run-queue wait, read first (``None``: as in ``runq_wait_ns``).
    """

    runq_wait_ns: dict[int, int]
    cpu_ns: int
    nivcsw: int
    cpu_ns_first: int | None = None
    nivcsw_first: int | None = None
    reader_tid: int | None = None
    reader_wait_ns_first: int | None = None


@dataclass(frozen=True)
class StepContention:
    """The kernel's figures for one step (the difference of two snapshots).

    Attributes:
        runq_wait_ms: run-queue wait summed over the process's threads.
        cpu_ms: CPU time of the process.
        nivcsw: involuntary context switches of the process.
        wall_ms: the step's wall time (the clock's), the denominator of ``wait_share``.
        wait_share: ``runq_wait_ms / wall_ms`` (``None`` when ``wall_ms`` is 0).
        threads: threads alive at the second snapshot.
        threads_exited: threads that exited between the snapshots (their wait since the first
            snapshot is missing from ``runq_wait_ms``).
        sampling_us: time spent taking the two snapshots (outside the timed region).
    """

    runq_wait_ms: float
    cpu_ms: float
    nivcsw: int
    wall_ms: float
    wait_share: float | None
    threads: int
    threads_exited: int
    sampling_us: float = 0.0


class ContentionSampler:
    """Reads the current process's run-queue wait, CPU time and involuntary switches.

    Args:
        root: where procfs is mounted. A directory without ``<pid>/task`` in it (a nonexistent
            path, for a test) behaves as a system without /proc.
        warn: issue a :class:`ContentionUnavailableWarning` (once per reason and process) when
            nothing can be recorded. Attempts pass ``False``: their result carries
            ``contention_status`` instead, and a warning must not fail a run under
            ``-W error``.

    Attributes:
        status: :data:`MEASURED`, or ``"unavailable: <why>"`` when nothing can be recorded.
    """

    def __init__(self, root: str | os.PathLike = _DEFAULT_ROOT, *, warn: bool = True) -> None:
        self.root = os.fspath(root)
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()
        self.status = self._probe()
        if warn and self.status != MEASURED and self.status not in _warned:
            _warned.add(self.status)
            warnings.warn(f"contention figures not recorded: {self.status}", ContentionUnavailableWarning,
                          stacklevel=2)

    @property
    def available(self) -> bool:
        """Whether :meth:`sample` returns snapshots."""
        return self.status == MEASURED

    def _task_dir(self) -> str:
        # The pid is read on every snapshot, so a sampler that crosses a fork reads the child.
        return os.path.join(self.root, str(os.getpid()), "task")

    def _probe(self) -> str:
        if resource is None:
            return "unavailable: no getrusage on this platform"
        task_dir = self._task_dir()
        if not os.path.isdir(task_dir):
            return f"unavailable: {task_dir} not found (no Linux /proc on this system)"
        own = os.path.join(task_dir, str(os.getpid()), "schedstat")
        try:
            fields = _read(own).split()
            int(fields[1])
        except (OSError, IndexError, ValueError) as error:
            return f"unavailable: cannot read run-queue wait from {own} ({type(error).__name__})"
        return MEASURED

    def sample(self) -> ProcessSnapshot | None:
        """A snapshot of the process now, or ``None`` when the sampler is unavailable."""
        if not self.available:
            return None
        if self._pid != os.getpid():  # forked: the cached descriptors are the parent's threads
            self.close()
            self._pid = os.getpid()
        task_dir = self._task_dir()
        reader = threading.get_native_id()
        # Readings in this order: the reader and the process first, every other thread, the
        # reader and the process last (the module docstring says why).
        first = resource.getrusage(resource.RUSAGE_SELF)
        reader_first = self._wait_of(task_dir, reader)
        live = set()
        waits: dict[int, int] = {}
        for name in os.listdir(task_dir):
            tid = int(name)
            live.add(tid)
            if tid == reader:
                continue
            wait = self._wait_of(task_dir, tid)
            if wait is not None:  # else it exited after the listing: absent from this snapshot
                waits[tid] = wait
        for tid in [tid for tid in self._fds if tid not in live]:
            os.close(self._fds.pop(tid))
        reader_last = self._wait_of(task_dir, reader)
        last = resource.getrusage(resource.RUSAGE_SELF)
        if reader_last is not None:
            waits[reader] = reader_last
        return ProcessSnapshot(runq_wait_ns=waits, cpu_ns=_cpu_ns(last), nivcsw=last.ru_nivcsw,
                               cpu_ns_first=_cpu_ns(first), nivcsw_first=first.ru_nivcsw,
                               reader_tid=reader, reader_wait_ns_first=reader_first)

    def _wait_of(self, task_dir: str, tid: int) -> int | None:
        """A thread's cumulative run-queue wait (ns), ``None`` when it has exited."""
        data = self._read_thread(task_dir, tid)
        fields = data.split() if data is not None else ()
        return int(fields[1]) if len(fields) >= 2 else None

    def _read_thread(self, task_dir: str, tid: int) -> str | None:
        """A thread's schedstat line, through a descriptor kept open between snapshots.

        ``pread`` at offset 0 makes procfs generate the line afresh, so a kept descriptor costs
        one system call a thread instead of three (open, read, close). A descriptor of an exited
        thread answers ``ESRCH``; the path is then opened once more, in case a new thread reused
        the id.
        """
        for _ in range(2):
            fd = self._fds.get(tid)
            if fd is None:
                try:
                    fd = os.open(f"{task_dir}/{tid}/schedstat", os.O_RDONLY)
                except (FileNotFoundError, ProcessLookupError):
                    return None
                self._fds[tid] = fd
            try:
                return os.pread(fd, _READ_BYTES, 0).decode("ascii")
            except ProcessLookupError:
                os.close(self._fds.pop(tid))
        return None

    def close(self) -> None:
        """Close the descriptors kept between snapshots (the sampler reopens them if used again)."""
        while self._fds:
            _, fd = self._fds.popitem()
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "ContentionSampler":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @staticmethod
    def delta(before: ProcessSnapshot, after: ProcessSnapshot, wall_ms: float,
              sampling_us: float = 0.0) -> StepContention:
        """The figures of the interval between two snapshots (see the module for the method).

        Args:
            before: the snapshot taken before the step's clock started.
            after: the snapshot taken after it stopped.
            wall_ms: the step's wall time.
            sampling_us: the cost of taking the two snapshots, to keep with the figures.

        Raises:
            ValueError: ``wall_ms`` is negative or not finite.
        """
        if not wall_ms >= 0 or wall_ms == float("inf"):
            raise ValueError(f"wall_ms must be a finite number >= 0, got {wall_ms!r}")
        wait_ns = 0
        for tid, now in after.runq_wait_ns.items():
            then = before.runq_wait_ns.get(tid)
            if tid == after.reader_tid and after.reader_wait_ns_first is not None:
                now = after.reader_wait_ns_first
            # Born during the interval, or a new thread that reused an exited one's id.
            wait_ns += now if then is None or now < then else now - then
        exited = sum(1 for tid in before.runq_wait_ns if tid not in after.runq_wait_ns)
        wait_ms = wait_ns / 1e6
        cpu_ns = after.cpu_ns if after.cpu_ns_first is None else after.cpu_ns_first
        nivcsw = after.nivcsw if after.nivcsw_first is None else after.nivcsw_first
        return StepContention(
            runq_wait_ms=wait_ms,
            # max(): getrusage's CPU time is monotonic; the guard only protects the record.
            cpu_ms=max(0, cpu_ns - before.cpu_ns) / 1e6,
            nivcsw=max(0, nivcsw - before.nivcsw),
            wall_ms=float(wall_ms),
            wait_share=wait_ms / wall_ms if wall_ms > 0 else None,
            threads=len(after.runq_wait_ns),
            threads_exited=exited,
            sampling_us=float(sampling_us),
        )


def _cpu_ns(usage) -> int:
    return round((usage.ru_utime + usage.ru_stime) * 1e9)


def _read(path: str) -> str:
    """One small procfs file, with the fewest system calls (no buffered file object)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, _READ_BYTES).decode("ascii")
    finally:
        os.close(fd)



def uncontended_latency(step_times_ms: Sequence[float], step_wait_share: Sequence[float | None],
                        bound: float = CONTENTION_WAIT_SHARE_BOUND) -> tuple[float | None, int]:
    """The median of an attempt's quiet steps, and how many steps were quiet.

    A step is quiet when its wait share (run-queue wait over wall time) is at most ``bound``;
    a step without a wait share (zero wall time) is not. The figure is the ``statistics.median``
    of the quiet steps' times, or ``None`` when fewer than half the steps are quiet (the attempt
    is *contended*: what is left is too little, and too selected, to stand for it). Half exactly
    is enough: 5 quiet steps of 10 give the median of those 5. No step is dropped from the
    attempt itself: its ``latency_ms`` and step history keep every step.

    Args:
        step_times_ms: the measured steps' wall times.
        step_wait_share: each step's wait share, parallel to ``step_times_ms``.
        bound: the largest wait share of a quiet step (default
            :data:`CONTENTION_WAIT_SHARE_BOUND`).

    Returns:
        ``(median of the quiet steps or None, number of quiet steps)``; ``(None, 0)`` for no steps.

    Raises:
        ValueError: the two sequences differ in length, or ``bound`` is not a finite number >= 0.
    """
    if len(step_times_ms) != len(step_wait_share):
        raise ValueError(f"step_wait_share must have one value per step ({len(step_times_ms)}), "
                         f"got {len(step_wait_share)}")
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 <= bound < float("inf"):
        raise ValueError(f"bound must be a finite number >= 0, got {bound!r}")
    quiet = [time for time, share in zip(step_times_ms, step_wait_share) if share is not None and share <= bound]
    if not quiet or 2 * len(quiet) < len(step_times_ms):
        return None, len(quiet)
    return statistics.median(quiet), len(quiet)


def summarize_steps(steps: Sequence[StepContention], status: str | None) -> dict:
    """An attempt's contention figures from its measured steps, keyed as ``AttemptResult`` fields.

    Args:
        steps: the measured steps' figures (``TimedSteps.contention``).
        status: the sampler's status (``TimedSteps.contention_status``); ``None`` when no sampler
            ran.

    Returns:
        ``contention_status`` always; when the status is :data:`MEASURED`, also the sums over the
        steps (``runq_wait_ms``, ``cpu_ms``, ``nivcsw``), ``wait_share`` (total wait over total
        step wall time; ``None`` for no steps), the per-step lists ``step_wait_ms``,
        ``step_wait_share``, ``step_cpu_ms`` and ``step_nivcsw``, and the quiet steps' figure
        ``uncontended_latency_ms`` with their count ``uncontended_steps``
        (:func:`uncontended_latency` on the steps' wall times).
    """
    if status != MEASURED:
        return {"contention_status": status}
    wall_ms = sum(step.wall_ms for step in steps)
    wait_ms = sum(step.runq_wait_ms for step in steps)
    uncontended, quiet = uncontended_latency([step.wall_ms for step in steps], [step.wait_share for step in steps])
    return {
        "contention_status": status,
        "runq_wait_ms": wait_ms,
        "cpu_ms": sum(step.cpu_ms for step in steps),
        "nivcsw": sum(step.nivcsw for step in steps),
        "wait_share": wait_ms / wall_ms if wall_ms > 0 else None,
        "step_wait_ms": [step.runq_wait_ms for step in steps],
        "step_wait_share": [step.wait_share for step in steps],
        "step_cpu_ms": [step.cpu_ms for step in steps],
        "step_nivcsw": [step.nivcsw for step in steps],
        "uncontended_latency_ms": uncontended,
        "uncontended_steps": quiet,
    }
