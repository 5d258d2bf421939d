"""Attempt runners: what starts the child process of each supervised attempt.

Two kinds, one contract (an attempt starts from a clean process, and every way its child can
end becomes an :class:`AttemptResult`):

* ``spawn``: a fresh ``python -m mlflow_perfgate.workloads._child`` per attempt. Each pays the
  interpreter's start, ``import torch`` and ``torch._dynamo`` (seconds) before its first step.
* ``fork``: one warm attempt server per runner (``_server``) imports all that once, and forks a
  fresh child for every attempt. The server runs no torch operation, so forking stays safe.
  Linux only.

``attempt_runner("auto")`` picks ``fork`` where it is available, else ``spawn``.
"""

from __future__ import annotations

import collections
import itertools
import dataclasses
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ._attempt import (
    _CONTAIN_MODULE,
    DEFAULT_TIMEOUT_S,
    AttemptResult,
    Spawned,
    WorkloadRefused,
    caller_threads,
    child_env,
    end_child,
    exit_reason,
    kill_group,
    prepare_spec,
    read_payload,
    result_of_ending,
    run_spawned,
    spawn_contained,
    spawned_result,
    start_contained,
    wait_contained,
)
from ._failures import tail
from ._gate import MEASURED, Gate
from ._interleave import pair_results, prepare_interleaved_spec, run_pair
from ._names import workload_target
from ._site import Site, site_env
from ._wire import FormatError, decode_line, encode_line, read_json

__all__ = ["AttemptRunner", "ForkRunner", "PendingPair", "RUNNER_KINDS", "SpawnRunner", "attempt_runner",
           "fork_available"]

#: The kinds ``attempt_runner`` and ``run_attempt(runner=...)`` accept.
RUNNER_KINDS = ("auto", "fork", "spawn")
_SERVER_MODULE = "mlflow_perfgate.workloads._server"
#: How long a server may take to warm up (imports, under load) before it counts as dead. Not
#: charged to an attempt's timeout: the server's start is the runner's, once per comparison.
_START_LIMIT_S = 300.0
#: After a timeout kill, how long the server may take to report the child's end.
_REAP_GRACE_S = 10.0
#: How long a cancelled pair's child may take to read its stopped gate and end before it is killed
#: (it has measured nothing: one still importing or warming up is killed rather than waited for).
_CANCEL_GRACE_S = 1.0
#: How often a spawned pair waiting for its child's ``measured`` byte looks whether the child ended.
_POLL_S = 0.01
#: How long a server asked to exit may take before it is killed.
_EXIT_GRACE_S = 5.0
_READ_CHUNK = 65536


def fork_available() -> bool:
    """Whether the fork runner can run here: ``os.fork`` on Linux.

    Elsewhere fork is missing (Windows) or unsafe beside system frameworks (macOS).
    """
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def runner_kind(kind: Any) -> str:
    """``'fork'`` or ``'spawn'`` for a kind name (``'auto'`` resolved here).

    Raises:
        ValueError: not one of :data:`RUNNER_KINDS`, or ``'fork'`` where it is not available.
    """
    if kind not in RUNNER_KINDS:
        raise ValueError(f"runner must be one of {list(RUNNER_KINDS)} or an AttemptRunner, got {kind!r}")
    if kind == "auto":
        return "fork" if fork_available() else "spawn"
    if kind == "fork" and not fork_available():
        raise ValueError(f"runner='fork' needs os.fork on Linux, and this is {sys.platform}; use 'spawn' or 'auto'")
    return kind


class AttemptRunner:
    """Runs supervised attempts, each in a child process of its own. Not thread-safe to share.

    Use it as a context manager (or call :meth:`close`): a fork runner holds a server process.
    """

    kind: str = ""

    def run(self, workload_name: str, conditions: dict, *, warmup: int | None = None,
            steps: int | None = None, threads: int | None = None, probe: bool = True,
            timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
            measures: tuple[str, ...] = ()) -> AttemptResult:
        """Run one supervised attempt; the arguments are :func:`run_attempt`'s.

        Raises:
            ValueError: bad arguments, as :func:`run_attempt` says.
        """
        raise NotImplementedError

    def run_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                        warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                        probe: bool = True,
                        timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                        measures: tuple[str, ...] = ()) -> tuple[AttemptResult, AttemptResult]:
        """Run one attempt of each arm in one supervised child, their measured steps interleaved
        (``_interleave``); the arguments are :func:`run_interleaved`'s. A crash of the child fails the
        arm whose code was running and withdraws the other's attempt (``pair_results``).

        Raises:
            ValueError: bad arguments, as :func:`run_interleaved` says.
            NotImplementedError: a runner of another kind that does not run step-interleaved pairs.
        """
        raise NotImplementedError(f"{type(self).__name__} does not run step-interleaved attempts")

    def begin_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                          warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                          probe: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                          measures: tuple[str, ...] = ()) -> "PendingPair":
        """Begin :meth:`run_interleaved`'s pair now and let its measured steps wait (``_gate``).

        The child starts, builds both arms and warms them up while the caller goes on (to log
        the previous round, say); its measured steps wait until :meth:`PendingPair.finish`,
        which returns what :meth:`run_interleaved` would. The runner is held until then: finish
        or cancel the pair before the runner's next call. Here (a runner of a caller's own) nothing
        begins ahead: ``finish`` runs the pair then.

        Raises:
            ValueError: bad arguments, as :func:`run_interleaved` says.
        """
        arguments = dict(warmup=warmup, steps=steps, threads=threads, probe=probe, timeout_s=timeout_s,
                         memory=memory, measures=measures)
        return _DeferredPair(lambda: self.run_interleaved(workload_name, conditions_a, conditions_b, **arguments))

    def check(self, workload_name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
        """Whether a workload's name resolves, found in a child: its module is never imported here.

        What a comparison calls before it writes anything. A runner that cannot check (one of
        a caller's own subclasses) says nothing: ``None``.

        Args:
            workload_name: the workload, as :meth:`run` takes it.
            timeout_s: how long the import may take.

        Returns:
            ``None`` when the module imported and has the factory; otherwise why the import
            failed in a way that the attempts will meet and report themselves (it crashed,
            hung past ``timeout_s`` or raised).

        Raises:
            ValueError: a malformed name, or a name that does not resolve (no such module,
                an ``ImportError``, no such factory): :class:`WorkloadRefused`.
        """
        workload_target(workload_name)
        return None

    def default_threads(self) -> int:
        """The torch thread count of an attempt that names none: torch's count in this process.

        The fork runner's caller need not import torch: it asks its server then (the count a
        fresh interpreter starts with, read in a forked child).
        """
        return caller_threads()

    def run_task(self, spec: dict, result_path: Path, log_path: Path, timeout_s: float) -> Spawned:
        """Run a child task other than an attempt (``spec['task']``, e.g. ``'diagnose'``), contained.

        The child runs ``_child.run_spec(spec, result_path)``, its output going to ``log_path``;
        the caller reads the result. Here (and for the spawn runner) a spawned, contained child
        (:func:`spawn_contained`); the fork runner forks it from its warm server.

        Returns:
            How it ended: a :class:`Spawned`, whose ``reason`` says why when the runner itself
            failed (its server died), not the child.

        Raises:
            ValueError: the workload's name does not resolve (:class:`WorkloadRefused`), found
                by the fork runner's server before it forked the child.
        """
        return spawn_contained(spec, result_path, timeout_s, log_path)

    def close(self) -> None:
        """Release what the runner holds. Safe to call twice."""

    def __enter__(self) -> "AttemptRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SpawnRunner(AttemptRunner):
    """A fresh interpreter per attempt (``python -m mlflow_perfgate.workloads._child``).

    As supervised attempts ran before runners existed, except that the caller never imports the
    workload's module: each child resolves the name first and refuses one that does not
    resolve (``ValueError`` from :meth:`run`). Every child imports torch again.
    """

    kind = "spawn"

    def __init__(self, site: Site | None = None) -> None:
        #: Where its children run (``None``: here, as this process is now; ``_site``).
        self.site = site

    def run(self, workload_name: str, conditions: dict, *, warmup: int | None = None,
            steps: int | None = None, threads: int | None = None, probe: bool = True,
            timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
            measures: tuple[str, ...] = ()) -> AttemptResult:
        spec = prepare_spec(workload_name, conditions, warmup=warmup, steps=steps, threads=threads,
                            timeout_s=timeout_s, probe=probe, supervised=True, memory=memory,
                            measures=measures)
        return dataclasses.replace(run_spawned(spec, float(timeout_s), self.site), conditions=dict(conditions))

    def run_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                        warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                        probe: bool = True,
                        timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                        measures: tuple[str, ...] = ()) -> tuple[AttemptResult, AttemptResult]:
        return run_pair(lambda spec, limit: run_spawned(spec, limit, self.site), workload_name, conditions_a,
                        conditions_b, warmup=warmup, steps=steps, threads=threads, probe=probe, timeout_s=timeout_s,
                        import_workload=self.site is None, memory=memory, measures=measures)

    def begin_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                          warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                          probe: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                          measures: tuple[str, ...] = ()) -> PendingPair:
        """The pair's interpreter starts now (its imports, build and warm-up beside the caller)."""
        spec = prepare_interleaved_spec(workload_name, conditions_a, conditions_b, warmup=warmup, steps=steps,
                                        threads=threads, timeout_s=timeout_s, probe=probe, supervised=True,
                                        import_workload=self.site is None, memory=memory, measures=measures)
        return _GatedPair(self.begin_child(spec, float(timeout_s), ("pair_result", "pair_progress")), conditions_a,
                          conditions_b)

    def begin_child(self, spec: dict, timeout_s: float, files: tuple[str, ...] = ()) -> "_GatedChild":
        """A child for ``spec`` begun now, gated (:class:`_GatedChild`): its interpreter starts at once."""
        return _SpawnChild(spec, timeout_s, files, self.site)

    def run_task(self, spec: dict, result_path: Path, log_path: Path, timeout_s: float) -> Spawned:
        return spawn_contained(spec, result_path, timeout_s, log_path, self.site)

    def check(self, workload_name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
        workload_target(workload_name)
        with tempfile.TemporaryDirectory(prefix="perfgate-check-") as tmp:
            result_path = Path(tmp) / "result.json"
            ended = spawn_contained({"task": "check", "workload": workload_name}, result_path, float(timeout_s),
                                    Path(tmp) / "child.log", self.site)
            if ended.timed_out:
                return f"importing its module did not finish within {float(timeout_s)}s"
            try:
                stored = read_json(result_path, "the check's result")
            except (OSError, FormatError) as error:
                return f"the importing child {exit_reason(ended.exitcode)} ({error})\n{ended.log_tail}"
        if "refused" in stored:
            raise WorkloadRefused(str(stored["refused"]))
        return stored.get("import_failed")


class _ServerGone(Exception):
    """The attempt server's events pipe ended (it died) or its requests pipe broke."""


@dataclasses.dataclass
class _Ending:
    """How one request to the server ended, before it becomes a result."""

    how: str  # "exited", "timeout", "server_died", "refused"
    phase: str = "attempt"
    exitcode: int | None = None
    note: str = ""
    reason: str = ""
    #: How long the request waited for the server to finish warming up.
    waited_s: float = 0.0


class PendingPair:
    """A step-interleaved pair begun ahead (:meth:`AttemptRunner.begin_interleaved`).

    End it with exactly one of :meth:`finish` and :meth:`cancel`; :meth:`open` and
    :meth:`measured` may come before :meth:`finish`.
    """

    def open(self) -> None:
        """Let the child's measured steps run (open its gate); :meth:`finish` opens it if not yet."""

    def measured(self) -> bool:
        """Open the gate and wait until the child's measured steps are over: ``True`` then (its
        quality, memory record and probe still to come); ``False`` when the child ended first,
        its time ran out, or this pair cannot tell (then nothing is waited for)."""
        return False

    def finish(self) -> tuple[AttemptResult, AttemptResult]:
        """Let the child's measured steps run (open its gate) and return both arms' results, as
        :meth:`AttemptRunner.run_interleaved` returns them; ``after_gate_s`` says how long from
        the gate's opening to the child's end."""
        raise NotImplementedError

    def cancel(self) -> None:
        """End the child: one not let through its gate ends without measuring; one let through
        is given a moment to end, else killed."""
        raise NotImplementedError


class _DeferredPair(PendingPair):
    """Nothing begun ahead: :meth:`finish` runs the whole pair."""

    def __init__(self, run) -> None:
        self._run = run

    def finish(self) -> tuple[AttemptResult, AttemptResult]:
        return self._run()

    def cancel(self) -> None:
        pass


class _GatedChild:
    """A child begun ahead with a gate (``_gate``): its temporary directory, result and log.

    What both runners' begun children share; a step-interleaved pair (:class:`_GatedPair`) holds
    one, a lockstep round (:class:`~._lockstep.LockstepPair`) two. ``files`` names spec entries
    that get a path in the child's directory (``pair_result``).
    """

    def __init__(self, spec: dict, timeout_s: float, files: tuple[str, ...] = ()) -> None:
        self.timeout_s = timeout_s
        self._tmp = tempfile.TemporaryDirectory(prefix="perfgate-gated-")
        tmp = Path(self._tmp.name)
        self.result_path, self.log_path = tmp / "result.json", tmp / "child.log"
        try:
            self.log_path.touch()
            self.gate = Gate(tmp)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.spec = {**spec, **{name: str(tmp / f"{name}.json") for name in files}, "gate": self.gate.path}
        self.started = time.perf_counter()
        self.opened: float | None = None  # perf_counter() at the gate's opening
        self.deadline = 0.0  # monotonic(): the child's time limit, from the gate's opening
        self.done = False

    def open(self) -> None:
        if self.done:
            raise ValueError("this child was finished or cancelled already")
        if self.opened is None:
            self.gate.open()
            self.opened, self.deadline = time.perf_counter(), time.monotonic() + self.timeout_s

    def extend(self, seconds: float) -> None:
        """Push the child's limit back by ``seconds`` the parent spent on another child meanwhile."""
        self.deadline += seconds

    def wait_reply(self, size: int) -> bytes | None:
        """The child's next reply of ``size`` bytes (``_gate``), waited for until the child ends or its
        limit passes (then ``None``)."""
        raise NotImplementedError

    def wait_measured(self) -> bool:
        """Until the child says its measured steps are over (``True``), ends, or its limit passes."""
        if not self.gate.measured and self.wait_reply(1) == MEASURED:
            self.gate.measured = True
        return self.gate.measured

    def lead(self) -> AttemptResult:
        """Follow the child to its end (its gate open) or its limit: the runner's result of it."""
        raise NotImplementedError

    def kill(self) -> None:
        """End the child now (its result is how it ended: killed)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """End the child: one not let through ends without measuring; one let through is given a moment
        to end, else killed."""
        if self.done:
            return
        try:
            self.gate.stop()
            self._end_unmeasured()
        finally:
            self.release()

    def _end_unmeasured(self) -> None:
        """Wait briefly for the child told to stop, else kill it."""
        raise NotImplementedError

    def release(self) -> None:
        if self.done:
            return
        self.done = True
        self.gate.close()
        self._tmp.cleanup()


class _SpawnChild(_GatedChild):
    """A spawned child begun ahead: the interpreter's start and imports run beside the caller too."""

    def __init__(self, spec: dict, timeout_s: float, files: tuple[str, ...] = (), site: Site | None = None) -> None:
        super().__init__(spec, timeout_s, files)
        try:
            self.process = start_contained(self.spec, self.result_path, self.log_path, site)
        except BaseException:
            self.release()
            raise

    def lead(self) -> AttemptResult:
        ended = wait_contained(self.process, max(0.0, self.deadline - time.monotonic()), self.log_path, self.started)
        return spawned_result(self.spec, ended, self.result_path, self.timeout_s)

    def wait_reply(self, size: int) -> bytes | None:
        while (reply := self.gate.read_reply(size)) is None:
            if self.process.poll() is not None or time.monotonic() >= self.deadline:
                return None
            select.select([self.gate.measured_fd], [], [], _POLL_S)
        return reply

    def kill(self) -> None:
        end_child(self.process.pid)

    def _end_unmeasured(self) -> None:
        wait_contained(self.process, _CANCEL_GRACE_S, self.log_path, self.started)


class _ForkChild(_GatedChild):
    """A child of the fork runner's server begun ahead; the runner is held (its lock) until the end.

    One more may be begun while the child holding the runner is past its measured steps (its
    tail: quality, memory record, probe): the server forks it at once (``ahead``), so that its
    start, build and warm-up run beside that tail, not after it; the runner passes to it when
    the first ends. Their events are told apart by their requests' ids.
    """

    def __init__(self, runner: "ForkRunner", spec: dict, timeout_s: float, files: tuple[str, ...] = ()) -> None:
        super().__init__(spec, timeout_s, files)
        self.runner = runner
        self.ended = False  # the child's end was read (and held) while waiting for a reply
        self.pid: int | None = None
        holds = runner._take(self)  # False: begun beside the holder's tail, the runner passed on later
        try:
            self.server = runner._live_server()
            request = runner._request("run", self.result_path, self.log_path, spec=self.spec,
                                      **({} if holds else {"ahead": True}))
            self.request_id = request["id"]
            # what ended it already (the server died or never warmed up), else None: sent
            self.early, self.waited_s = runner._send(self.server, request)
        except BaseException:
            self.release()
            raise

    def _follow(self, deadline: float) -> _Ending:
        if self.early is not None:
            return self.early
        try:
            return self.runner._events(self.server, deadline, self.request_id)
        except BaseException:  # an interrupt: nothing of the request may outlive the server
            self.runner._discard(self.server)
            raise

    def _see(self, event: dict) -> None:
        """Note this child's start (its pid) and end from one of its request's events."""
        attempt = event.get("phase", "attempt") == "attempt"  # not the child that vets the import
        if event.get("event") == "started" and attempt:
            self.pid = event.get("pid")
        if event.get("event") == "done" or (event.get("event") == "exited" and attempt):
            self.ended = True

    def wait_reply(self, size: int) -> bytes | None:
        if self.early is not None:
            return None
        server = self.server
        for event in list(server.held):  # read ahead by the child begun before this one (its tail overlapped)
            if event.get("id") == self.request_id:
                self._see(event)
        try:
            events = server.process.stdout.fileno()
        except ValueError:  # the server was discarded (it died while the child before this one ran)
            self.ended = True
            return None
        try:
            while (reply := self.gate.read_reply(size)) is None:
                if self.ended:
                    return None
                # an event read here (the child's start, its end) is kept for _events
                while b"\n" in server.buffer or select.select([events], [], [], 0)[0]:
                    event = server.read_new_event(time.monotonic())
                    if event is None:
                        break
                    server.hold(event)
                    if not _for(event, self.request_id):
                        continue  # the other child's (begun ahead, or the one whose tail this one's start overlaps)
                    self._see(event)
                    if self.ended:
                        return self.gate.read_reply(size)
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    return None
                select.select([self.gate.measured_fd, events], [], [], remaining)
        except _ServerGone:  # _events finds it again and says how it ended
            self.ended = True
            return None
        return reply

    def lead(self) -> AttemptResult:
        ending = self._follow(self.deadline)
        ending.waited_s = self.waited_s
        return self.runner._result_of(self.spec, ending, time.perf_counter() - self.started - self.waited_s,
                                      self.result_path, self.log_path, self.timeout_s)

    def kill(self) -> None:
        # not announced yet: every child of the server but another request's (one begun beside it)
        for pid in {self.pid} if self.pid is not None else self.server.children_of(self.request_id):
            kill_group(pid)

    def _end_unmeasured(self) -> None:
        self._follow(time.monotonic() + _CANCEL_GRACE_S)  # past it, the time-out's path kills the child

    def release(self) -> None:
        if self.done:
            return
        self.runner._give_back(self)
        super().release()


class _GatedPair(PendingPair):
    """A step-interleaved pair begun ahead: one gated child holding both arms."""

    def __init__(self, child: _GatedChild, conditions_a: dict, conditions_b: dict) -> None:
        self.child = child
        self.conditions = (dict(conditions_a), dict(conditions_b))

    def open(self) -> None:
        if self.child.done:
            raise ValueError("this pair was finished or cancelled already")
        self.child.open()

    def measured(self) -> bool:
        self.open()
        return self.child.wait_measured()

    def finish(self) -> tuple[AttemptResult, AttemptResult]:
        if self.child.done:
            raise ValueError("this pair was finished or cancelled already")
        child = self.child
        try:
            child.open()
            lead = child.lead()
            after = time.perf_counter() - child.opened
            results = pair_results(lead, child.spec["pair_result"], *self.conditions, child.spec["pair_progress"])
            return tuple(dataclasses.replace(result, after_gate_s=after) for result in results)
        finally:
            child.release()

    def cancel(self) -> None:
        self.child.cancel()


def _for(event: dict, request_id: Any) -> bool:
    """Whether ``event`` is the reader's of request ``request_id``: its own, or one of no request
    (``ready``, ``status``, a server of an earlier release, which names none)."""
    return "id" not in event or event["id"] == request_id


class _Server:
    """The runner's side of one attempt server process."""

    def __init__(self, scratch: Path, number: int, preload: str | None, site: Site | None = None,
                 declare: bool = False) -> None:
        self.log_path = scratch / f"server-{number}.log"
        # Contained (_contain run): it dies with this process, and adopts its children's orphans.
        command = [sys.executable if site is None else site.python, "-m", _CONTAIN_MODULE, "run", str(os.getpid()),
                   _SERVER_MODULE]
        if preload:
            command += ["--preload", preload, str(scratch), *(["--declare"] if declare else [])]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            env=site_env(site), cwd=None if site is None else site.cwd,
                                            start_new_session=True, bufsize=0)
        self.ready = False
        self.info: dict = {}
        #: The exit code of the child that read the workload's declaration (``--declare``), once reported.
        self.declared_exit: int | None = None
        #: Children the server announced and has not reported ended (their process groups), and the
        #: request each was forked for (where the server names it).
        self.children: set[int] = set()
        self.request_of: dict[int, Any] = {}
        self.buffer = b""
        #: Events read ahead (a begun pair waiting for its ``measured`` byte, or another request's
        #: child in flight beside), returned first, in order, to their request's reader.
        self.held: collections.deque = collections.deque()
        self.finalizer = weakref.finalize(self, _Server._kill_process, self.process, self.children)

    @staticmethod
    def _kill_process(process: subprocess.Popen, children: set[int]) -> None:
        if process.poll() is None:
            # The server and its whole tree (a subreaper, it holds every process below it, even
            # one that left its child's session), then its own process group.
            end_child(process.pid)
        for pid in list(children):
            kill_group(pid)
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        process.wait()

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: dict) -> None:
        data = memoryview(encode_line(message))
        try:
            while data:
                data = data[self.process.stdin.write(data):]
        except (BrokenPipeError, ValueError, OSError) as error:
            raise _ServerGone(str(error)) from error

    def read_event(self, deadline: float | None, request_id: Any = None) -> dict | None:
        """The next event of request ``request_id`` (or one of no request: ``ready``, ``status``; a
        server of an earlier release names none), or ``None`` once ``deadline`` (a
        ``time.monotonic()``) has passed. Another request's events are held for it."""
        for index, event in enumerate(self.held):  # in the order they came
            if _for(event, request_id):
                del self.held[index]
                return event
        while True:
            event = self.read_new_event(deadline)
            if event is None or _for(event, request_id):
                return event
            self.hold(event)

    def hold(self, event: dict) -> None:
        """Keep an event read ahead for its request's reader."""
        self.held.append(event)

    def read_new_event(self, deadline: float | None) -> dict | None:
        """:meth:`read_event`, past the events held."""
        try:
            fd = self.process.stdout.fileno()
        except ValueError:  # closed: the server was discarded (killed) while a child begun beside another waited
            raise _ServerGone("its events pipe was closed") from None
        while b"\n" not in self.buffer:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                raise _ServerGone("its events pipe ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            event = decode_line(line, "an event from the attempt server")
        except FormatError as error:
            raise _ServerGone(str(error)) from error
        if event.get("event") == "started":
            self.children.add(event["pid"])
            if "id" in event:
                self.request_of[event["pid"]] = event["id"]
        elif event.get("event") == "exited":
            self.children.discard(event["pid"])
            self.request_of.pop(event["pid"], None)
        elif event.get("event") == "ready":
            self.ready, self.info = True, event
        elif event.get("event") == "declared":
            self.declared_exit = event.get("exitcode")
        return event

    def children_of(self, request_id: Any) -> set[int]:
        """The children in flight of request ``request_id``, and those of no known request (not another's)."""
        return {pid for pid in self.children if self.request_of.get(pid, request_id) == request_id}

    def wait_ready(self, deadline: float) -> bool:
        while not self.ready:
            if self.read_event(deadline) is None:
                return False
        return True

    def death(self) -> str:
        """How the server ended (waits briefly for it), for ``attempt server died: <how>``."""
        try:
            code = self.process.wait(timeout=_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        return exit_reason(code)

    def log_tail(self) -> str:
        try:
            return tail(self.log_path.read_text(errors="replace"))
        except OSError:
            return ""

    def kill(self) -> None:
        self.finalizer()

    def close(self) -> None:
        if self.alive() and self.ready:  # warming up, it reads no request: it is ended below, at once
            try:
                self.send({"op": "exit"})
                self.process.stdin.close()
                self.process.wait(timeout=_EXIT_GRACE_S)
            except (_ServerGone, OSError, subprocess.TimeoutExpired):
                pass
        self.finalizer()


class ForkRunner(AttemptRunner):
    """A warm attempt server that forks a fresh child for every attempt (Linux).

    The server starts when the runner is made (it warms up while the caller does other work)
    and is replaced when it dies: the attempt in flight then fails with ``attempt server died:
    <how>`` and the next one starts a fresh server. The caller never imports the workload's
    module: the server imports it once, after a forked child did so first; a name that does not
    resolve raises ``ValueError`` from :meth:`run`, as with the spawn runner.

    Args:
        workload: the workload most attempts will run; its module is imported in the server
            (under the same supervision) as soon as it has warmed up.

    Attributes:
        servers_started: how many server processes this runner has started.
    """

    kind = "fork"

    def __init__(self, workload: str | None = None, site: Site | None = None, declare: bool = False) -> None:
        if not fork_available():
            raise ValueError(f"the fork runner needs os.fork on Linux, and this is {sys.platform}")
        if workload is not None:
            workload_target(workload)
        self._workload = workload
        #: Its first server reads ``workload``'s declared conditions before it warms up (:meth:`declaration`).
        self._declare = declare and workload is not None
        #: Where its server and children run (``None``: here, as this process is now; ``_site``).
        self.site = site
        self._lock = threading.Lock()
        #: The begun child that holds the runner (its lock), and one begun beside its tail (or None).
        self._holder: _ForkChild | None = None
        self._beside: _ForkChild | None = None
        self._slots = threading.Lock()  # guards the two above
        self._scratch = tempfile.TemporaryDirectory(prefix="perfgate-runner-")
        self._server: _Server | None = None
        self._closed = False
        self.servers_started = 0
        self._start_server()

    def __repr__(self) -> str:
        pid = self._server.process.pid if self._server else None
        return f"ForkRunner(workload={self._workload!r}, server_pid={pid}, closed={self._closed})"

    def _start_server(self) -> _Server:
        self.servers_started += 1
        self._server = _Server(Path(self._scratch.name), self.servers_started, self._workload, self.site,
                               declare=self._declare and self.servers_started == 1)
        return self._server

    @property
    def declares(self) -> str | None:
        """The workload whose declaration this runner's first server reads (made with ``declare``), else ``None``."""
        return self._workload if self._declare else None

    def declaration_ready(self) -> bool:
        """Whether :meth:`declaration` would answer now (the runner was made with ``declare``)."""
        return self._declare and (Path(self._scratch.name, "declared.json").exists() or self._declaration_ended())

    def declaration(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
        """What the first server's child read of the workload's declaration (made with ``declare``), as the
        ``declare`` task writes it (``{"declared": ...}``, ``{"malformed": ...}``, ``{"import_failed": ...}``,
        ``{"refused": ...}``), or ``{"crashed": how}`` where that child (or the server) died first.

        Raises:
            ValueError: the runner was not made with ``declare``, or nothing came within ``timeout_s``.
        """
        if not self._declare:
            raise ValueError("this ForkRunner was not made to read a declaration (declare=True)")
        path = Path(self._scratch.name, "declared.json")
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if self._declaration_ended():  # it ended, and wrote nothing (or only now)
                break
            if time.monotonic() > deadline:
                raise ValueError(f"reading the declaration took over {timeout_s:g} s")
            time.sleep(0.005)
        try:
            return read_json(path, "the declared conditions")
        except (OSError, FormatError):
            server = self._server
            code = None if server is None else server.declared_exit
            return {"crashed": exit_reason(code) if code is not None else "the attempt server died"}

    def _declaration_ended(self) -> bool:
        """Whether the first server reported the end of its declaration child, or died (the events read
        now, without waiting, where no one else is reading them)."""
        server = self._server
        if server is None or server.declared_exit is not None or not server.alive():
            return True
        if not self._lock.acquire(blocking=False):
            return False
        try:
            while server.declared_exit is None and (b"\n" in server.buffer or select.select(
                    [server.process.stdout.fileno()], [], [], 0)[0]):
                event = server.read_new_event(time.monotonic())
                if event is None:
                    break
                if event.get("event") != "declared":
                    server.hold(event)
        except _ServerGone:
            return True
        finally:
            self._lock.release()
        return server.declared_exit is not None

    def _live_server(self) -> _Server:
        if self._closed:
            raise ValueError("this ForkRunner is closed")
        if self._server is None or not self._server.alive():
            if self._server is not None:
                self._server.kill()
            self._start_server()
        return self._server

    def _take(self, child: _ForkChild) -> bool:
        """Hold the runner for ``child`` (``True``), or, while the child holding it is past its measured
        steps and none is begun beside it yet, let ``child`` begin beside its tail (``False``)."""
        with self._slots:
            holder = self._holder
            if holder is not None and self._beside is None and holder.gate.measured and not holder.done:
                self._beside = child
                return False
        self._lock.acquire()
        with self._slots:
            self._holder = child
        return True

    def _give_back(self, child: _ForkChild) -> None:
        """``child`` has ended: the runner passes to the child begun beside it, or is free."""
        with self._slots:
            if self._beside is child:
                self._beside = None
                return
            if self._holder is not child:
                return
            self._holder, self._beside = self._beside, None
            if self._holder is not None:  # the lock stays held, now for it
                return
        self._lock.release()

    def _discard(self, server: _Server) -> None:
        server.kill()
        if self._server is server:
            self._server = None

    def status(self, timeout_s: float = 120.0) -> dict:
        """The server's own account of itself (waits for it to warm up).

        Returns:
            ``pid``, ``threads`` (its ``Threads:`` count), ``cuda_initialized``,
            ``torch_ops`` (aten operations seen during its imports), ``preloaded`` (workload
            modules imported there), ``not_preloaded`` (workload -> why not), ``warm_failures``,
            ``warm_s``, ``default_threads`` (torch's thread count in a fresh interpreter, read
            in a forked child: an attempt's default when the caller has not imported torch)
            and ``containment`` (``'parent-death signal, subreaper'``, or why
            ``prctl`` is unavailable here).

        Raises:
            RuntimeError: the server died or did not answer within ``timeout_s``.
        """
        with self._lock:
            server = self._live_server()
            deadline = time.monotonic() + timeout_s
            try:
                if server.wait_ready(deadline):
                    server.send({"op": "status"})
                    while (event := server.read_event(deadline)) is not None:
                        if event.get("event") == "status":
                            return {k: v for k, v in event.items() if k not in ("event", "format")}
            except _ServerGone as error:
                self._discard(server)
                raise RuntimeError(f"the attempt server died: {error}\n{server.log_tail()}") from error
            except BaseException:
                self._discard(server)
                raise
            # Whatever it is doing, the next attempt gets a server in a known state.
            self._discard(server)
            raise RuntimeError(f"the attempt server did not answer within {timeout_s}s")

    def default_threads(self, timeout_s: float = _START_LIMIT_S) -> int:
        """torch's thread count here when the caller has imported torch (it may have set it),
        else the count the server's forked child found in a fresh torch (the server itself
        runs nothing of torch); the wait for the server's warm-up is not an attempt's.
        """
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "get_num_threads"):
            return torch.get_num_threads()
        with self._lock:
            server = self._live_server()
            try:
                ready = server.wait_ready(time.monotonic() + timeout_s)
            except _ServerGone:
                ready = False
            found = server.info.get("default_threads") if ready else None
        return found if type(found) is int and found >= 1 else caller_threads()

    def run(self, workload_name: str, conditions: dict, *, warmup: int | None = None,
            steps: int | None = None, threads: int | None = None, probe: bool = True,
            timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
            measures: tuple[str, ...] = ()) -> AttemptResult:
        spec = prepare_spec(workload_name, conditions, warmup=warmup, steps=steps,
                            threads=self.default_threads() if threads is None else threads,
                            timeout_s=timeout_s, probe=probe, supervised=True, memory=memory,
                            measures=measures)
        with self._lock:
            result = self._run_spec(spec, float(timeout_s))
        return dataclasses.replace(result, conditions=dict(conditions))

    def run_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                        warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                        probe: bool = True,
                        timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                        measures: tuple[str, ...] = ()) -> tuple[AttemptResult, AttemptResult]:
        def run_spec(spec: dict, limit: float) -> AttemptResult:
            with self._lock:
                return self._run_spec(spec, limit)

        return run_pair(run_spec, workload_name, conditions_a, conditions_b, warmup=warmup, steps=steps,
                        threads=self.default_threads() if threads is None else threads, probe=probe,
                        timeout_s=timeout_s, import_workload=False, memory=memory,
                        measures=measures)

    def begin_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                          warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                          probe: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                          measures: tuple[str, ...] = ()) -> PendingPair:
        """The server forks the pair's child now; it waits at its gate once both arms are warm."""
        spec = prepare_interleaved_spec(workload_name, conditions_a, conditions_b, warmup=warmup, steps=steps,
                                        threads=self.default_threads() if threads is None else threads,
                                        timeout_s=timeout_s, probe=probe, supervised=True, import_workload=False,
                                        memory=memory, measures=measures)
        return _GatedPair(self.begin_child(spec, float(timeout_s), ("pair_result", "pair_progress")), conditions_a,
                          conditions_b)

    def begin_child(self, spec: dict, timeout_s: float, files: tuple[str, ...] = ()) -> "_GatedChild":
        """A child for ``spec`` begun now, gated (:class:`_GatedChild`): the server forks it at once; the
        runner is held until it is finished or cancelled."""
        return _ForkChild(self, spec, timeout_s, files)

    def _request(self, op: str, result_path: Path, log_path: Path, **fields: Any) -> dict:
        return _request(op, result_path, log_path, self.site, **fields)

    def check(self, workload_name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
        """The server's supervised import is the check (:meth:`AttemptRunner.check`)."""
        workload_target(workload_name)
        with self._lock, tempfile.TemporaryDirectory(prefix="perfgate-check-") as tmp:
            request = self._request("check", Path(tmp) / "result.json", Path(tmp) / "child.log", workload=workload_name)
            ending = self._follow_request(request, time.monotonic() + float(timeout_s))
        if ending.how == "refused":
            raise WorkloadRefused(ending.note)
        if ending.how == "timeout":
            return f"importing its module did not finish within {float(timeout_s)}s"
        if ending.how == "server_died":
            return f"the attempt server died while it checked the workload: {ending.reason}"
        return ending.note or None

    def run_task(self, spec: dict, result_path: Path, log_path: Path, timeout_s: float) -> Spawned:
        """A forked child of the warm server runs the task (:meth:`AttemptRunner.run_task`).

        The server's warm-up is not charged to ``timeout_s`` (nor to ``wall_s``), as for an attempt.
        """
        started = time.perf_counter()
        Path(log_path).touch()
        with self._lock:
            ending = self._follow_request(self._request("run", result_path, log_path, spec=spec),
                                          time.monotonic() + float(timeout_s))
        if ending.how == "refused":
            raise WorkloadRefused(ending.note)
        log_tail = tail(Path(log_path).read_text(errors="replace"))
        if ending.note:
            log_tail = f"{ending.note}\n{log_tail}" if log_tail else ending.note
        exitcode = ending.exitcode if isinstance(ending.exitcode, int) else -9
        return Spawned(exitcode=exitcode, timed_out=ending.how == "timeout",
                       wall_s=time.perf_counter() - started - ending.waited_s, log_tail=log_tail,
                       reason=f"attempt server died: {ending.reason}" if ending.how == "server_died" else None)

    def _run_spec(self, spec: dict, timeout_s: float) -> AttemptResult:
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        with tempfile.TemporaryDirectory(prefix="perfgate-attempt-") as tmp:
            result_path, log_path = Path(tmp) / "result.json", Path(tmp) / "child.log"
            log_path.touch()
            # an interrupt discards the server: the next attempt gets a fresh one
            ending = self._follow_request(self._request("run", result_path, log_path, spec=spec), deadline)
            # The server's warm-up is the runner's, once: not this attempt's time.
            wall_s = time.perf_counter() - started - ending.waited_s
            return self._result_of(spec, ending, wall_s, result_path, log_path, timeout_s)

    def _result_of(self, spec: dict, ending: _Ending, wall_s: float, result_path: Path, log_path: Path,
                   timeout_s: float) -> AttemptResult:
        """The attempt's result from how its request ended (the child's result file still there)."""
        log_tail = tail(log_path.read_text(errors="replace"))
        payload = note = None
        if ending.how == "exited" and ending.phase == "attempt":
            payload, note = read_payload(result_path)
        if ending.how == "refused":
            raise WorkloadRefused(ending.note)
        if note:
            log_tail = f"{note}\n{log_tail}"
        if ending.note:
            log_tail = f"{ending.note}\n{log_tail}" if log_tail else ending.note
        if ending.how == "server_died":
            return AttemptResult(ok=False, failure=f"attempt server died: {ending.reason}", failure_detail=log_tail,
                                 torch_threads=spec["threads"], threads_requested=spec["threads"],
                                 workload=spec["workload"], warmup=spec["warmup"],
                                 steps=spec["steps"], supervised=True, wall_s=wall_s, runner="fork")
        died_detail = None
        if ending.phase == "import":
            module, _ = workload_target(spec["workload"])
            died_detail = f"the child died importing workload module {module!r}, before the attempt began"
        return result_of_ending(spec, timeout_s=timeout_s, runner="fork", wall_s=wall_s, exitcode=ending.exitcode,
                                timed_out=ending.how == "timeout", payload=payload, log_tail=log_tail,
                                died_detail=died_detail)

    def _follow_request(self, request: dict, deadline: float) -> _Ending:
        """:meth:`_exchange` with the live server (the caller holds the lock); on an interrupt the
        server is discarded: nothing of the request may outlive it, and its state is unknown."""
        server = self._live_server()
        try:
            return self._exchange(server, request, deadline)
        except BaseException:
            self._discard(server)
            raise

    def _exchange(self, server: _Server, request: dict, deadline: float) -> _Ending:
        """Send one run request and follow its events to the end, the deadline enforced here.

        The wait for the server to finish warming up is not charged to the attempt's deadline.
        """
        early, waited_s = self._send(server, request)
        ending = early or self._events(server, deadline + waited_s, request.get("id"))
        ending.waited_s = waited_s
        return ending

    def _send(self, server: _Server, request: dict) -> tuple[_Ending | None, float]:
        """Wait for the server's warm-up, then send ``request``: ``(None, the wait)``, or how the
        request ended already (the server died, or did not warm up in time)."""
        waited = time.monotonic()
        try:
            ready = server.wait_ready(waited + _START_LIMIT_S)
        except _ServerGone:
            return self._server_died(server, None), time.monotonic() - waited
        if not ready:
            self._discard(server)
            return _Ending("server_died", reason=f"it did not start within {_START_LIMIT_S}s",
                           note=f"the attempt server's log:\n{server.log_tail()}"), time.monotonic() - waited
        waited_s = time.monotonic() - waited
        try:
            server.send(request)
        except _ServerGone:
            return self._server_died(server, None), waited_s
        return None, waited_s

    def _events(self, server: _Server, deadline: float, request_id: Any = None) -> _Ending:
        """Follow a sent request's events to its ``done``, the deadline enforced here."""
        child = None
        try:
            while True:
                event = server.read_event(deadline, request_id)
                if event is None:
                    return self._time_out(server, child, request_id)
                kind = event.get("event")
                if kind == "started":
                    child = event["pid"]
                elif kind == "done":
                    if event.get("outcome") == "refused":
                        return _Ending("refused", note=event.get("message", ""))
                    if child is not None:
                        # Workers orphaned by a crashed child would otherwise outlive the attempt.
                        kill_group(child)
                    return _Ending("exited", phase=event.get("phase", "attempt"), exitcode=event.get("exitcode"),
                                   note=event.get("note") or "")
        except _ServerGone:
            return self._server_died(server, child)

    def _server_died(self, server: _Server, child: int | None) -> _Ending:
        """The server ended mid-request: its children (sessions of their own) go with it."""
        how = server.death()
        for pid in set(server.children) | ({child} if child is not None else set()):
            kill_group(pid)
        self._discard(server)
        return _Ending("server_died", reason=how, note=f"the attempt server's log:\n{server.log_tail()}")

    def _time_out(self, server: _Server, child: int | None, request_id: Any = None) -> _Ending:
        """Kill the request's child (its process group) and collect the server's report of its end;
        another child in flight beside it (begun ahead) is left alone."""
        grace = time.monotonic() + _REAP_GRACE_S
        exitcode = None
        try:
            # A child the server forked but had not announced yet is announced within the grace.
            while True:
                for pid in {child} if child is not None else server.children_of(request_id):
                    kill_group(pid)
                event = server.read_event(grace, request_id)
                if event is None:
                    self._discard(server)
                    return _Ending("timeout", exitcode=exitcode, note="the attempt server did not report the end")
                if event.get("event") == "started":
                    child = event["pid"]
                    kill_group(child)
                elif event.get("event") == "exited":
                    exitcode = event.get("exitcode")
                elif event.get("event") == "done":
                    if child is not None:
                        kill_group(child)
                    return _Ending("timeout", exitcode=event.get("exitcode", exitcode))
        except _ServerGone:
            self._server_died(server, child)
            return _Ending("timeout", exitcode=exitcode)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._server is not None:
                self._server.close()
                self._server = None
            self._scratch.cleanup()


#: Request ids, unique in this process (each runner's server sees its own, increasing).
_REQUEST_IDS = itertools.count(1)


def _request(op: str, result_path: Path, log_path: Path, site: Site | None = None, **fields: Any) -> dict:
    """A request to the server for a child: its ``id`` (which its events carry), where it writes, and
    its directory, environment and ``sys.path``: this process's now (the child runs as a spawned one
    would, here), or ``site``'s."""
    fields = {"id": next(_REQUEST_IDS), **fields}
    if site is None:
        return {"op": op, **fields, "result": str(result_path), "log": str(log_path), "cwd": os.getcwd(),
                "env": child_env(), "path": [os.path.abspath(p) for p in sys.path if p]}
    return {"op": op, **fields, "result": str(result_path), "log": str(log_path), "cwd": site.cwd,
            "env": site_env(site), "path": list(site.path)}


def attempt_runner(kind: str = "auto", workload: str | None = None, *, declare: bool = False) -> AttemptRunner:
    """A runner for many supervised attempts; use it as a context manager.

    Args:
        kind: ``'fork'`` (a warm server forks each attempt's child; Linux), ``'spawn'`` (a fresh
            interpreter per attempt) or ``'auto'`` (fork where available, else spawn).
        workload: for the fork runner, the workload whose module the server imports as soon as
            it has warmed up (else at its first attempt); checked for its form here.
        declare: for the fork runner, its server first reads ``workload``'s declared conditions in a
            child, torch imported and nothing more (:meth:`ForkRunner.declaration`).

    Returns:
        A :class:`ForkRunner` (its server already starting) or a :class:`SpawnRunner`.

    Raises:
        ValueError: an unknown kind, ``'fork'`` where fork is not available, or a malformed
            workload name.
    """
    resolved = runner_kind(kind)
    if workload is not None:
        workload_target(workload)
    return ForkRunner(workload, declare=declare) if resolved == "fork" else SpawnRunner()
