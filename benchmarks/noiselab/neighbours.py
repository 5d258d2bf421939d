"""The lab's neighbours: busy processes it starts and ends by PID, steady or on seeded bursty schedules.

Each neighbour also ends itself within 0.1 s when the lab's process is gone (its parent pid
changes), when the lease file the lab touches before every attempt goes stale, or at the end of
its schedule.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Sequence

#: The contention conditions: no neighbour, one busy neighbour per core, two bursty ones.
CONDITIONS = ("quiet", "steady", "bursty")
#: A bursty neighbour's on and off periods are drawn uniformly from this range (s).
BURST_RANGE = (0.5, 3.0)
BURSTY_NEIGHBOURS = 2

#: A busy neighbour. argv: core (-1: not pinned), parent pid, lease file, lease seconds, horizon
#: seconds. stdin: one JSON line {"t0": time.monotonic() of the schedule's start, "on": [[start,
#: end], ...] seconds after t0}. It spins during its on-intervals and sleeps between them, and
#: ends at the end of its schedule, when its parent is gone or when the lease goes stale.
_NEIGHBOUR = r"""
import json, os, sys, time
core, parent, lease, lease_s, horizon = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
spec = json.loads(sys.stdin.readline())
t0, on = float(spec["t0"]), spec["on"]
if core >= 0:
    os.sched_setaffinity(0, {core})
print("ready", flush=True)
end = min(t0 + horizon, t0 + (on[-1][1] if on else 0.0))

def alive():
    if os.getppid() != parent:
        return False
    try:
        return time.time() - os.stat(lease).st_mtime < lease_s
    except OSError:
        return False

i = 0
while time.monotonic() < end and alive():
    now = time.monotonic() - t0
    while i < len(on) and on[i][1] <= now:
        i += 1
    if i >= len(on):
        break
    start, stop = on[i]
    if now < start:
        time.sleep(min(start - now, 0.1))
        continue
    until = min(t0 + stop, time.monotonic() + 0.1)
    while time.monotonic() < until:
        pass
"""


def loadavg() -> str:
    """``/proc/loadavg`` as it reads (``cat /proc/loadavg``), or why not."""
    try:
        with open("/proc/loadavg") as handle:
            return handle.read().strip()
    except OSError:
        return "no /proc/loadavg"


def burst_schedule(seed: int, horizon_s: float, low: float = BURST_RANGE[0],
                   high: float = BURST_RANGE[1]) -> list[tuple[float, float]]:
    """A bursty neighbour's on-intervals ``[(start, end), ...]`` (seconds from its start).

    Periods alternate on and off, each drawn uniformly from ``[low, high]`` by
    ``random.Random(seed)``; whether the first period is on is the generator's first draw. The
    last interval is clipped at ``horizon_s``. The same seed gives the same schedule.

    Raises:
        ValueError: ``low`` or ``high`` is not positive, ``high < low``, or ``horizon_s < 0``.
    """
    if not 0 < low <= high or not horizon_s >= 0:
        raise ValueError(f"need 0 < low <= high and horizon_s >= 0, got low={low!r}, high={high!r}, "
                         f"horizon_s={horizon_s!r}")
    rng = random.Random(seed)
    on = rng.random() < 0.5
    t, intervals = 0.0, []
    while t < horizon_s:
        period = rng.uniform(low, high)
        if on:
            intervals.append((t, min(t + period, horizon_s)))
        t += period
        on = not on
    return intervals


def busy_neighbours(schedules: Sequence[Sequence[tuple[float, float]]], t0: float, start: float,
                    end: float) -> float:
    """The mean number of neighbours on during ``[start, end]`` (absolute times, schedules from ``t0``)."""
    if end <= start:
        return float(sum(any(a <= start - t0 < b for a, b in s) for s in schedules))
    busy = 0.0
    for schedule in schedules:
        for a, b in schedule:
            busy += max(0.0, min(b + t0, end) - max(a + t0, start))
    return busy / (end - start)


class Neighbours:
    """Busy neighbour processes the lab starts and ends by PID (a context manager).

    Args:
        schedules: one list of on-intervals per neighbour (seconds from the common start).
        cores: the core each neighbour is pinned to (-1: not pinned).
        lease_s: a neighbour ends itself when the lease file is older than this.
        horizon_s: and at most this long after the common start.
    """

    def __init__(self, schedules: list[list[tuple[float, float]]], cores: list[int], lease_s: float,
                 horizon_s: float):
        self.schedules, self.cores = schedules, cores
        self.lease_s, self.horizon_s = lease_s, horizon_s
        self.processes: list[subprocess.Popen] = []
        self.t0 = 0.0
        self._dir = tempfile.TemporaryDirectory(prefix="noise-lab-lease-")
        self.lease = os.path.join(self._dir.name, "lease")

    def __enter__(self) -> "Neighbours":
        self.renew()
        # A common start, late enough for every neighbour to be up.
        self.t0 = time.monotonic() + 0.3 + 0.2 * len(self.schedules)
        try:
            for schedule, core in zip(self.schedules, self.cores):
                process = subprocess.Popen(
                    [sys.executable, "-c", _NEIGHBOUR, str(core), str(os.getpid()), self.lease, str(self.lease_s),
                     str(self.horizon_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                self.processes.append(process)
                process.stdin.write(json.dumps({"t0": self.t0, "on": schedule}) + "\n")
                process.stdin.close()
                if process.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"neighbour {process.pid} did not start")
        except BaseException:
            self.stop()
            raise
        time.sleep(max(0.0, self.t0 - time.monotonic()) + 0.2)  # on the run queues before the first attempt
        return self

    def renew(self) -> None:
        """Touch the lease: the neighbours live on while the lab does."""
        with open(self.lease, "a"):
            pass
        os.utime(self.lease)

    def check(self) -> None:
        """Raise if a neighbour ended before its time (the condition would no longer be what it says)."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"neighbour {process.pid} ended early (exit {process.returncode}): the block ran "
                                   f"past its horizon of {self.horizon_s:.0f} s or lost its lease")

    def busy(self, start: float, end: float) -> float:
        return busy_neighbours(self.schedules, self.t0, start, end)

    def stop(self) -> None:
        """End the neighbours the lab started, by PID."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=10)
            process.stdout.close()
        self.processes = []

    def __exit__(self, *exc_info) -> None:
        self.stop()
        self._dir.cleanup()


def neighbour_plan(condition: str, seed: int, block: int, horizon_s: float,
                   cores: list[int]) -> tuple[list[list[tuple[float, float]]], list[int]]:
    """The schedules and cores of a condition's neighbours in one block."""
    if condition == "quiet":
        return [], []
    if condition == "steady":
        return [[(0.0, horizon_s)] for _ in cores], list(cores)
    if condition == "bursty":
        return ([burst_schedule(seed * 1_000_003 + block * 101 + index, horizon_s) for index in range(BURSTY_NEIGHBOURS)],
                [cores[index % len(cores)] for index in range(BURSTY_NEIGHBOURS)])
    raise ValueError(f"condition must be one of {list(CONDITIONS)}, got {condition!r}")
