"""The fork runner's warm attempt server: ``python -m mlflow_perfgate.workloads._server``.

One server serves one runner (one comparison). It pays once for what every fresh interpreter
pays per attempt (``import torch``, ``torch._dynamo``, which the first optimizer pulls in,
scipy, this package) and then forks a fresh child for every attempt, so each attempt still
starts from a clean process: whatever the workload does (a segfault, ``os._exit``, a SIGKILL, a
hang, a leaked thread, a change to global state) happens in its child and ends with it.

It must stay safe to fork, so it never runs a torch operation: no intra-op thread pool (OpenMP
keeps its threads and forgets them in a child), no CUDA context (which a forked child cannot
use). What proves it, reported by ``status``: ``threads`` (``Threads:`` of
``/proc/self/status``) is 1, ``cuda_initialized`` is false, and ``torch_ops``, the aten
operations a counting ``TorchDispatchMode`` saw during every import the server made after torch
itself, is 0. A workload's module is imported here only after a forked child imported it first
and saw the same (no operation, no thread left running, no CUDA); otherwise each attempt's
child imports it itself, as a spawned child would. An import that crashes or hangs does so in
that child.

Protocol: one versioned JSON object a line (``_wire``), requests on stdin, events on stdout; the
server's own log is stderr. Requests ``run`` (an attempt), ``check`` (whether a workload's name
resolves: the supervised import alone), ``status`` and ``exit``; end of stdin (the runner is
gone) also ends the server, and with it the attempts in flight. A request's events are
``started`` and ``exited`` for each child (with its pid, so that the runner can kill its process
group on a timeout) and a last ``done`` (``outcome`` ``exited``, ``checked`` or ``refused``, a
workload name that cannot be resolved); each carries the request's ``id`` where it had one. The
server reports how its children end; the runner enforces timeouts and turns every ending into
an :class:`AttemptResult`.

One child runs at a time, but for one: a ``run`` request marked ``ahead`` that arrives while a
child runs (the runner sends one once that child's measured steps are over, for the next round)
is forked at once, so that its start, build and warm-up run beside the other's tail; it waits at
its gate meanwhile. It is followed once the running child has ended (and what that child left
is killed, the ahead child spared).

Containment (``mlflow_perfgate._contain``): the server starts under ``_contain run``, with a
parent-death SIGTERM towards the runner, which it handles by killing its whole tree; it is a
subreaper and, after each child has ended, kills and reaps whatever that child left. Each child
arms a parent-death SIGKILL towards the server first thing, becomes a subreaper itself and kills
its descendants when it ends (``_child.exit_now``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import gc
import importlib
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _contain
from ._attempt import exit_reason, kill_group
from ._child import exit_now, run_spec
from ._interface import resolve_workload, workload_target
from ._wire import FormatError, decode_line, encode_line, read_json, write_json_atomic

__all__ = ["Server", "WARM_MODULES", "main", "settle", "thread_count"]

#: Imported in the server so that no forked child pays for them. Each runs no torch operation
#: (the op counter checks, every start). ``torch._dynamo`` is the big one: the first optimizer
#: imports it (1-3 s); ``multiprocessing``'s fork pieces serve DataLoader workers.
WARM_MODULES = (
    "torch.optim",
    "torch._dynamo",
    "torch.utils.checkpoint",
    "torch.utils.data",
    "torch.autograd.graph",
    "torch.profiler",
    "torch.profiler._cupti_monitor",
    "multiprocessing.popen_fork",
    "multiprocessing.queues",
    "multiprocessing.synchronize",
    # what an attempt's and a diagnosis's child run, imported where they run (the runner's
    # side imports no torch), so here, once
    "mlflow_perfgate.workloads._evidence",
    "mlflow_perfgate.workloads._probe",
    "mlflow_perfgate.workloads._timing",
    "mlflow_perfgate.workloads._diagnosis",
    "mlflow_perfgate.workloads.tinylm",
)

_READ_CHUNK = 65536
#: Poll interval for a child's exit where ``os.pidfd_open`` is missing.
_POLL_S = 0.005


class _OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while it is active (and runs them unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


class _ParentGone(Exception):
    """Standard input ended: the runner closed it or died."""


def thread_count() -> int | None:
    """This process's threads, from ``/proc/self/status`` (``None`` where there is no /proc)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def settle() -> None:
    """Fork once with nothing to do, so that thread pools which end at fork end here too.

    OpenBLAS (bundled with numpy and scipy) starts its worker threads when the library loads
    and stops them in a ``pthread_atfork`` handler before every fork; the server never calls
    BLAS, so after this they are gone for good and the server forks with one thread.
    """
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def default_threads() -> int | None:
    """torch's intra-op thread count in a fresh interpreter, read in a forked child (the server
    itself never asks torch: even that may start its thread pool's runtime). ``None`` if the
    child could not say. Its fork settles the server as :func:`settle`'s does."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, str(torch.get_num_threads()).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 64)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    try:
        return int(answer)
    except ValueError:
        return None


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when child ``pid`` ends (``None`` where there is none: poll)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


@dataclasses.dataclass
class _Ahead:
    """A child forked ahead, beside the running one: its pid, its request and its ``pidfd``."""

    pid: int
    request: dict
    pidfd: int | None

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class Server:
    """The request loop; every child it forks leaves through :func:`exit_now`, never back here."""

    def __init__(self, requests: int, events: int) -> None:
        self.requests, self.events = requests, events
        # What this interpreter started with; every child gets them back.
        self.initial_handlers = {}
        for number in signal.valid_signals():
            try:
                self.initial_handlers[number] = signal.getsignal(number)
            except (OSError, ValueError):
                pass
        self.ops = _OpCounter()
        self.buffer = b""
        self.verdicts: dict[str, dict] = {}
        self.preloaded: list[str] = []
        self.warm_failures: dict[str, str] = {}
        self.started = time.perf_counter()
        self.warm_s = 0.0
        self.default_threads: int | None = None
        #: The ``id`` of the request being served (its events carry it).
        self.serving: Any = None
        #: A child forked ahead (``run`` with ``ahead``) while another runs.
        self.ahead: _Ahead | None = None

    # -- protocol ---------------------------------------------------------------------------

    def send(self, message: dict, request_id: Any = None) -> None:
        """Write one event; ``request_id`` (default: the request being served) is its ``id``."""
        request_id = self.serving if request_id is None else request_id
        if request_id is not None and "id" not in message:
            message = {**message, "id": request_id}
        data = encode_line(message)
        try:
            while data:
                data = data[os.write(self.events, data):]
        except BrokenPipeError:
            raise _ParentGone() from None

    def _fill(self) -> None:
        chunk = os.read(self.requests, _READ_CHUNK)
        if not chunk:
            raise _ParentGone()
        self.buffer += chunk

    def next_request(self) -> dict:
        while b"\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\n", 1)
        return decode_line(line, "a request to the attempt server")

    def wait_child(self, pid: int) -> int:
        """Wait for child ``pid`` to end and return its exit code (negative: a signal).

        Standard input is watched meanwhile: if the runner goes away, the child's process
        group is killed and the server ends; a ``run`` request marked ``ahead`` is forked at
        once (:meth:`take_ahead`). Once the child has ended, whatever it left is killed: the
        server is a subreaper, so a process the child started in a session of its own, orphaned
        when the child died (a crash, a kill on a timeout), is the server's now. A child forked
        ahead is spared, with what is below it.
        """
        pidfd = _pidfd(pid)
        try:
            self.take_ahead()  # one read with the request before this child's
            while True:
                ahead = self.ahead
                watched = [fd for fd in (self.requests, pidfd, ahead and ahead.pidfd) if fd is not None]
                polling = pidfd is None or (ahead is not None and ahead.pidfd is None)
                ready, _, _ = select.select(watched, [], [], _POLL_S if polling else None)
                if pidfd is None or pidfd in ready:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        return os.waitstatus_to_exitcode(status)
                if ahead is not None and (ahead.pidfd is None or ahead.pidfd in ready):
                    self.ahead_ended(pid)
                if self.requests in ready:
                    try:
                        self._fill()
                    except _ParentGone:
                        _contain.kill_tree()
                        kill_group(pid)
                        os.waitpid(pid, 0)
                        raise
                    self.take_ahead()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            # The server's children were this one and one forked ahead: every other is an orphan it adopted.
            spared = () if self.ahead is None else (self.ahead.pid,)
            _contain.kill_tree(spare=spared)
            _contain.reap_children(spare=spared)

    def ahead_ended(self, running: int) -> None:
        """If the child forked ahead has ended while child ``running`` still runs (it was cancelled at
        its gate, or it died), what it left is killed and its ``exited`` and ``done`` are sent now."""
        ahead = self.ahead
        done, status = os.waitpid(ahead.pid, os.WNOHANG)
        if not done:
            return
        self.ahead = None
        ahead.close()
        _contain.kill_tree(spare=(running,))
        _contain.reap_children(spare=(running,))
        exitcode = os.waitstatus_to_exitcode(status)
        request_id = ahead.request.get("id")
        self.send({"event": "exited", "pid": ahead.pid, "phase": "attempt", "exitcode": exitcode}, request_id)
        self.send({"event": "done", "outcome": "exited", "phase": "attempt", "exitcode": exitcode}, request_id)

    def take_ahead(self) -> None:
        """Fork the next request's child now if it is a ``run`` marked ``ahead`` whose workload was
        vetted already (one at a time); every other request waits in the buffer for its turn."""
        if self.ahead is not None or b"\n" not in self.buffer:
            return
        line, rest = self.buffer.split(b"\n", 1)
        request = decode_line(line, "a request to the attempt server")
        if request.get("op") != "run" or not request.get("ahead"):
            return
        spec = request["spec"]
        verdict = self.verdicts.get(spec.get("workload"))
        if verdict is None or "refused" in verdict:
            return  # vetted (a child and a wait of its own) or refused in its turn
        self.buffer = rest
        pid = self.fork_child(request, lambda: run_spec(spec, request["result"]))
        self.ahead = _Ahead(pid, request, _pidfd(pid))
        self.send({"event": "started", "pid": pid, "phase": "attempt"}, request.get("id"))

    # -- children ---------------------------------------------------------------------------

    def become_child(self, request: dict, server: int) -> None:
        """In a freshly forked child: a session, stdio, signals, directory and environment of its own.

        First of all it dies with the server (``server``, its parent: a parent-death
        ``SIGKILL``, which the workload cannot handle) and becomes a subreaper, so that what
        it starts stays below it until it ends (``_child.exit_now``).
        """
        _contain.die_with_parent(server, signal.SIGKILL)
        _contain.become_subreaper()
        # Its own session and process group: the runner's killpg on a timeout ends its workers too.
        os.setsid()
        for number, handler in self.initial_handlers.items():
            try:
                if signal.getsignal(number) != handler:
                    signal.signal(number, handler)
            except (OSError, ValueError, TypeError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        # The server's pipes are the protocol's: the child must not hold them (the runner sees
        # the server's end as the end of its events pipe) and writes to its attempt log only.
        os.close(self.requests)
        os.close(self.events)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        self.buffer = b""
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        faulthandler.enable()

    def fork_child(self, request: dict, body) -> int:
        """Fork a child that runs ``body()`` (its exit code) and never returns here."""
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self.become_child(request, server)
                code = body()
            except SystemExit as error:
                code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
                if not isinstance(error.code, (int, type(None))):
                    print(error.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 - reported in the attempt log, as a crash
                traceback.print_exc()
            finally:
                exit_now(code)
        return pid

    def vet(self, workload: str, request: dict) -> tuple[dict, int | None]:
        """Import ``workload``'s module in a forked child first; preload it here if that was safe.

        Returns:
            The verdict (``{"refused": message}``, or ``{"preload": bool, "reason": ...}``) and,
            when the importing child did not end normally, its exit code.
        """
        verdict_path = Path(request["result"]).with_name("import.json")
        module_name, _ = workload_target(workload)
        if module_name in sys.modules:
            # Imported already (a warm module): only the factory's name is left to check.
            try:
                resolve_workload(workload)
            except ValueError as error:
                return {"refused": str(error)}, None
            if module_name not in self.preloaded:
                self.preloaded.append(module_name)
            return {"preload": True, "reason": None}, None

        def body() -> int:
            ops = _OpCounter()
            try:
                with ops:
                    resolve_workload(workload)
            except ValueError as error:
                verdict = {"refused": str(error)}
            except BaseException as error:  # noqa: BLE001 - the attempt's own child will say it again
                verdict = {"preload": False, "reason": f"importing it raised {type(error).__name__}: {error}",
                           "import_failed": True}
                traceback.print_exc()
            else:
                settle()
                problems = []
                if ops.count:
                    problems.append(f"its import ran {ops.count} torch operation(s)")
                threads = thread_count()
                if threads not in (None, 1):
                    problems.append(f"its import left {threads - 1} other thread(s) running")
                if torch.cuda.is_initialized():
                    problems.append("its import initialised CUDA")
                verdict = {"preload": not problems, "reason": "; ".join(problems) or None}
            write_json_atomic(verdict_path, {"verdict": verdict})
            return 0

        pid = self.fork_child(request, body)
        self.send({"event": "started", "pid": pid, "phase": "import"})
        exitcode = self.wait_child(pid)
        self.send({"event": "exited", "pid": pid, "phase": "import", "exitcode": exitcode})
        if exitcode != 0:
            return {"preload": False, "reason": f"the importing child {exit_reason(exitcode)}",
                    "import_failed": True}, exitcode
        try:
            verdict = read_json(verdict_path, "the import verdict")["verdict"]
        except (OSError, FormatError, KeyError) as error:
            verdict = {"preload": False, "reason": f"no verdict from the importing child ({error})"}
        if verdict.get("preload"):
            try:
                with self.ops:
                    importlib.import_module(module_name)
            except Exception as error:  # noqa: BLE001 - its children will import it themselves
                verdict = {"preload": False, "reason": f"importing it here raised {type(error).__name__}: {error}"}
            else:
                if thread_count() not in (None, 1):
                    settle()
                if module_name not in self.preloaded:
                    self.preloaded.append(module_name)
                gc.freeze()
        return verdict, None

    def verdict(self, workload: str, request: dict) -> tuple[dict, int | None]:
        """The workload's import verdict, vetted (:meth:`vet`) on its first request only, with the
        request's ``path`` on ``sys.path`` first; ``died``: the vetting child's exit code when the
        import itself crashed or hung this time, else ``None``."""
        for entry in request.get("path", []):
            if entry not in sys.path:
                sys.path.append(entry)
        verdict = self.verdicts.get(workload)
        if verdict is not None:
            return verdict, None
        verdict, died = self.vet(workload, request)
        self.verdicts[workload] = verdict
        return verdict, died

    def refused(self, verdict: dict) -> bool:
        """Whether the name does not resolve; if so the request's ``done`` event (``refused``) is sent."""
        if "refused" in verdict:
            self.send({"event": "done", "outcome": "refused", "message": verdict["refused"]})
            return True
        return False

    def check(self, request: dict) -> None:
        """Whether ``request['workload']`` resolves: its import vetted in a child (:meth:`vet`), once.

        Its ``done`` event is ``refused`` (the name does not resolve) or ``checked``, with a
        ``note`` when the import failed otherwise (it crashed, hung or raised: the attempts
        will fail, each saying why).
        """
        verdict, _ = self.verdict(request["workload"], request)
        if self.refused(verdict):
            return
        note = verdict.get("reason") if verdict.get("import_failed") else None
        self.send({"event": "done", "outcome": "checked", "phase": "import", "note": note})

    def run(self, request: dict) -> None:
        spec = request["spec"]
        verdict, died = self.verdict(spec["workload"], request)
        if died is not None:
            # The import itself crashed, or the runner killed it on a timeout: that ends
            # this attempt; the next one's child imports the module by itself.
            self.send({"event": "done", "outcome": "exited", "phase": "import", "exitcode": died})
            return
        if self.refused(verdict):
            return
        pid = self.fork_child(request, lambda: run_spec(spec, request["result"]))
        self.send({"event": "started", "pid": pid, "phase": "attempt"})
        self.follow(pid)

    def follow(self, pid: int) -> None:
        """Wait for the attempt's child ``pid`` to end; its ``exited`` and ``done`` events."""
        exitcode = self.wait_child(pid)
        self.send({"event": "exited", "pid": pid, "phase": "attempt", "exitcode": exitcode})
        self.send({"event": "done", "outcome": "exited", "phase": "attempt", "exitcode": exitcode})

    def status(self) -> dict:
        return {
            "event": "status",
            "pid": os.getpid(),
            "threads": thread_count(),
            "cuda_initialized": torch.cuda.is_initialized(),
            "torch_ops": self.ops.count,
            "preloaded": list(self.preloaded),
            "not_preloaded": {name: v.get("reason") or v.get("refused")
                              for name, v in self.verdicts.items() if not v.get("preload")},
            "warm_failures": dict(self.warm_failures),
            "warm_s": self.warm_s,
            "default_threads": self.default_threads,
            "containment": _contain.UNAVAILABLE or "parent-death signal, subreaper",
        }

    # -- life -------------------------------------------------------------------------------

    def warm_up(self) -> None:
        for name in WARM_MODULES:
            try:
                with self.ops:
                    importlib.import_module(name)
            except Exception as error:  # noqa: BLE001 - a child imports what it needs anyway
                self.warm_failures[name] = f"{type(error).__name__}: {error}"
        self.default_threads = default_threads()  # a fork: the thread pools that end at fork end here (settle)
        # Objects that exist now are never collected in a child: a collection there then does
        # not write to (and copy) every page the server shares with it.
        gc.collect()
        gc.freeze()
        self.warm_s = time.perf_counter() - self.started

    def declare(self, workload: str, scratch: str) -> int:
        """Fork a child that writes ``workload``'s declared conditions to ``SCRATCH/declared.json`` (the
        ``declare`` task) now, torch imported and nothing more: the runner reads the file as soon as it
        is there, while the server goes on warming up. Its pid, reaped at :meth:`serve`'s ``ready``."""
        request = {"result": os.path.join(scratch, "declared.json"), "log": os.path.join(scratch, "declared.log"),
                   "cwd": os.getcwd(), "env": dict(os.environ)}
        return self.fork_child(request, lambda: run_spec({"task": "declare", "workload": workload}, request["result"]))

    def serve(self, preload: str | None = None, scratch: str | None = None, declare: bool = False) -> int:
        try:
            declaring = self.declare(preload, scratch) if declare and preload else None
            self.warm_up()
            if declaring is not None:  # how it ended (a crash leaves no file: the runner reads it here)
                _, status = os.waitpid(declaring, 0)
                self.send({"event": "declared", "exitcode": os.waitstatus_to_exitcode(status)})
            # ready_at: this machine's monotonic clock, which every process reads alike (for benchmarks)
            self.send({**self.status(), "event": "ready", "ready_at": time.monotonic()})
            if preload:
                # The runner's workload, while the runner prepares its first attempt (whose
                # deadline covers what is left of this). The importing child's pid is announced,
                # so a timeout kills it; if it dies, each attempt's child imports the module itself.
                request = {"result": os.path.join(scratch, "preload-result.json"),
                           "log": os.path.join(scratch, "preload.log"), "cwd": os.getcwd(),
                           "env": dict(os.environ)}
                self.verdicts[preload], _ = self.vet(preload, request)
            while True:
                if self.ahead is not None:  # forked while the previous child ran: followed now
                    ahead, self.ahead = self.ahead, None
                    ahead.close()
                    self.serving = ahead.request.get("id")
                    self.follow(ahead.pid)
                    continue
                request = self.next_request()
                self.serving = request.get("id")
                op = request.get("op")
                if op == "run":
                    self.run(request)
                elif op == "check":
                    self.check(request)
                elif op == "status":
                    self.send(self.status())
                elif op == "exit":
                    return 0
                else:
                    self.send({"event": "error", "message": f"unknown op {op!r}"})
        except _ParentGone:
            return 0


def main(argv: list[str] | None = None) -> int:
    """``_server [--preload WORKLOAD SCRATCH_DIR [--declare]]``: serve the runner on stdin and stdout
    (``--declare``: read the workload's declared conditions first, :meth:`Server.declare`)."""
    argv = sys.argv[1:] if argv is None else argv
    preload = scratch = None
    if argv[:1] == ["--preload"]:
        preload, scratch = argv[1], argv[2]
    declare = "--declare" in argv[3:]
    # The protocol gets its own descriptors; fd 0 reads nothing and fd 1 joins the log (stderr),
    # so nothing printed here can corrupt a message.
    requests, events = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    faulthandler.enable()
    server = Server(requests, events)
    # Started by ``_contain run``: a parent-death SIGTERM towards the runner, and a subreaper.
    # The runner gone, nothing below the server may outlive it (children get their SIGTERM
    # back, as every other handler, in become_child).
    signal.signal(signal.SIGTERM, _end_everything)
    code = server.serve(preload, scratch, declare)
    # Served: nothing is left to write but the log. An interpreter's teardown with torch loaded
    # costs every comparison 0.2-0.3 s at its end (a frozen heap, torch's modules), for nothing.
    _contain.kill_tree()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _end_everything(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    _contain.kill_tree()
    os._exit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
