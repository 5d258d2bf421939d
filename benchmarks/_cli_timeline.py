"""``mlflow-perfgate`` as users type it, with a timeline of where its wall time goes.

``python benchmarks/_cli_timeline.py compare ...`` runs exactly what ``python -m mlflow_perfgate
compare ...`` runs (the CLI's entry, in this fresh process), and writes to ``$PERFGATE_TIMELINE``
(a JSON file) the moments, on ``time.monotonic()`` (every process reads it alike), at which:

- ``process``: this process began (from ``/proc/self/stat``);
- ``server_spawned`` / ``server_ready``: the fork runner's server was started / said it had warmed up
  (its own ``ready_at``);
- ``open_done``: the comparison was open (the store read, the comparison run made);
- ``rounds``: for each round, ``gate`` (its child let through to its measured steps), ``measured``
  (its measured steps over), ``tail_done`` (its child ended: tail over), and the parent's writes:
  ``report`` (``[begin, end]`` of writing the previous round) and ``starts`` (its runs started);
- ``decide`` (``[begin, end]``) and ``closed`` (the runner closed).

Nothing is timed inside a measured step: the hooks wrap the harness's own calls (``_round``'s
gate, its ``finish``, the writes). ``bench_efficiency.py`` reads the files.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import time


def _process_start() -> float:
    """This process's start on the monotonic clock (``/proc/self/stat``'s starttime, in clock ticks since boot)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    started_ticks = int(fields[19])
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    # CLOCK_MONOTONIC and the boot-time clock agree up to suspends, none on this machine
    return time.monotonic() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))


TIMELINE: dict = {"process": _process_start(), "rounds": [], "report": [], "starts": []}


def _now() -> float:
    return time.monotonic()


def _wrap(owner, name: str, before=None, after=None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        if before:
            before(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                after(*args, **kwargs)

    setattr(owner, name, wrapped)


def _install() -> None:
    from mlflow_perfgate.harness import _comparison, _comparison_run
    from mlflow_perfgate.workloads import _runner

    rounds = TIMELINE["rounds"]

    def spawned(*args, **kwargs):
        TIMELINE.setdefault("server_spawned", _now())

    _wrap(_runner._Server, "__init__", before=spawned)
    read = _runner._Server.read_new_event

    def read_new_event(self, deadline):
        event = read(self, deadline)
        if event and event.get("event") == "ready" and "server_ready" not in TIMELINE:
            TIMELINE["server_ready"] = event.get("ready_at", _now())
        return event

    _runner._Server.read_new_event = read_new_event

    def gate(self):
        if self.child.opened is None:
            rounds.append({"gate": _now()})

    _wrap(_runner._GatedPair, "open", before=gate)

    def measured_done(self):
        if rounds and "measured" not in rounds[-1]:
            rounds[-1]["measured"] = _now()

    _wrap(_runner._GatedPair, "measured", after=measured_done)

    def finished(self):
        if rounds:
            rounds[-1].setdefault("measured", _now())
            rounds[-1]["tail_done"] = _now()

    _wrap(_runner._GatedPair, "finish", after=finished)
    span = {}

    def spanned(key):
        def begin(*args, **kwargs):
            span[key] = _now()

        def end(*args, **kwargs):
            TIMELINE[key].append([span.pop(key), _now()])
        return begin, end

    for key, owner, name in (("report", _comparison.Comparison, "_report_round"),
                             ("starts", _comparison_run.ComparisonRun, "_start")):
        begin, end = spanned(key)
        _wrap(owner, name, before=begin, after=end)
    _wrap(_comparison_run.ComparisonRun, "open", after=lambda *a, **k: TIMELINE.__setitem__("open_done", _now()))
    _wrap(_comparison.Comparison, "decide", before=lambda *a, **k: TIMELINE.__setitem__("decide_begin", _now()),
          after=lambda *a, **k: TIMELINE.__setitem__("decide_end", _now()))
    _wrap(_comparison_run.ComparisonRun, "close", after=lambda *a, **k: TIMELINE.__setitem__("closed", _now()))


def _write() -> None:
    path = os.environ.get("PERFGATE_TIMELINE")
    if path:
        with open(path, "w") as handle:
            json.dump(TIMELINE, handle)


def main() -> None:
    _install()
    atexit.register(_write)  # the CLI ends through os._exit after running the exit handlers
    from mlflow_perfgate.cli import entry

    sys.argv = ["mlflow-perfgate", *sys.argv[1:]]
    entry()


if __name__ == "__main__":
    main()
