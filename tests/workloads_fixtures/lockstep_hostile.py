"""One factory for both arms of a lockstep round, whose ``mode`` condition picks how its step behaves.

``tests.workloads_fixtures.lockstep_hostile:make``: ``mode`` ``fine`` (a step of about a millisecond)
or, from step ``fail_at`` on (counting warm-up steps), ``kill`` (SIGKILL to its own process),
``segv`` (a null read), ``exit`` (``os._exit(3)``), ``hang`` (sleeps ``sleep_s``), ``raise`` (an
exception), ``garble`` (writes junk into every pipe it holds open for writing, as a workload that
leaves the lockstep protocol would, then steps normally). ``build`` and ``width`` make a factory
that fails (``make``'s docstring). ``quality_s``: the quality (the tail, after the measured steps) sleeps
that long, first writing a file into the folder ``tail_marker`` names. Standard library only.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import stat
import time


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _garble() -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                os.write(fd, b"zzzzzzzzz")
        except OSError:
            pass


class _Stepper:
    def __init__(self, conditions: dict):
        report = conditions.get("report_cpus")  # a folder: each child writes the CPUs it may run on there
        if report:
            with open(os.path.join(str(report), f"cpus-{os.getpid()}.txt"), "w") as handle:
                handle.write(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        self.mode = str(conditions.get("mode", "fine"))
        self.fail_at = int(conditions.get("fail_at", 3))
        self.step_s = float(conditions.get("step_ms", 1.0)) / 1e3
        self.sleep_s = float(conditions.get("sleep_s", 600))
        self.quality_s = float(conditions.get("quality_s", 0))
        self.tail_marker = conditions.get("tail_marker")
        self.calls = 0

    def step(self) -> float:
        self.calls += 1
        if self.mode != "fine" and self.calls > self.fail_at:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.mode == "segv":
                ctypes.string_at(0)
            elif self.mode == "exit":
                os._exit(3)
            elif self.mode == "hang":
                time.sleep(self.sleep_s)
            elif self.mode == "raise":
                raise RuntimeError("the candidate's step broke")
            elif self.mode == "garble" and self.calls == self.fail_at + 1:
                _garble()
        _busy(self.step_s)
        return 1.0

    def quality(self) -> float:
        if self.tail_marker:  # a folder: the tail (after the measured steps) says it began
            open(os.path.join(str(self.tail_marker), f"tail-{os.getpid()}-{time.monotonic_ns()}"), "w").close()
        time.sleep(self.quality_s)
        return 0.5


def make(conditions: dict) -> _Stepper | None:
    """``build=none``: the factory returns no workload; ``width``: an integer the factory parses (``eight``
    is refused as a condition it cannot read, a ``ValueError``)."""
    int(conditions.get("width", 1))
    if conditions.get("build") == "none":
        return None
    return _Stepper(conditions)
