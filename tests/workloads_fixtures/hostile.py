"""Factories of workloads that fail in every way an attempt can fail.

Each is named ``tests.workloads_fixtures.hostile:<factory>`` and imported in the attempt's child
process, so none of them needs anything beyond the standard library and torch.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

import torch
from torch import nn

from mlflow_perfgate.workloads import Workload


class _Hostile:
    """A step-and-quality workload whose step fails after ``fail_at`` good steps."""

    tokens_per_step = 8

    def __init__(self, conditions: dict, action):
        self.fail_at = int(conditions.get("fail_at", 0))
        self.calls = 0
        self.action = action

    def step(self) -> float:
        self.calls += 1
        if self.calls > self.fail_at:
            return self.action()
        return 1.0

    def quality(self) -> float:
        return 0.5


def _sigkill():
    os.kill(os.getpid(), signal.SIGKILL)


def _segfault():
    # Reading address 0 is a real invalid access, not a signal sent by hand.
    ctypes.string_at(0)


def killer(conditions: dict) -> _Hostile:
    """``step()`` sends SIGKILL to its own process."""
    return _Hostile(conditions, _sigkill)


def segfault(conditions: dict) -> _Hostile:
    """``step()`` dereferences a null pointer (SIGSEGV)."""
    return _Hostile(conditions, _segfault)


def sleeper(conditions: dict) -> _Hostile:
    """``step()`` sleeps for ``conditions['sleep_s']`` (default 60) seconds."""
    seconds = float(conditions.get("sleep_s", 60))
    return _Hostile(conditions, lambda: time.sleep(seconds))


def oom(conditions: dict) -> _Hostile:
    """``step()`` raises ``torch.OutOfMemoryError`` as the CUDA caching allocator does."""

    def action():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    return _Hostile(conditions, action)


def memory_error(conditions: dict) -> _Hostile:
    """``step()`` raises ``MemoryError`` as a failed host allocation does."""

    def action():
        raise MemoryError("cannot allocate host buffer")

    return _Hostile(conditions, action)


def raiser(conditions: dict) -> _Hostile:
    """``step()`` raises ``RuntimeError('boom')``."""

    def action():
        raise RuntimeError("boom")

    return _Hostile(conditions, action)


def low_quality(conditions: dict) -> _Hostile:
    """Steps are fine; ``quality()`` is 0.004, a random-weight model's (``fail_at`` is read, as raiser's)."""
    workload = _Hostile(conditions, lambda: 1.0)
    workload.quality = lambda: 0.004
    return workload


def lazy_reader(conditions: dict) -> _Hostile:
    """Keeps the conditions and reads ``mode`` in its first step, not in the factory."""
    workload = _Hostile(conditions, lambda: 1.0)
    workload.fail_at = 10**9
    workload.step = lambda: (conditions.get("mode"), 1.0)[1]
    return workload


def nan_quality(conditions: dict) -> _Hostile:
    """Steps are fine; ``quality()`` is NaN."""
    workload = _Hostile({"fail_at": 10**9}, lambda: 1.0)
    workload.quality = lambda: float("nan")
    return workload


def slow_tail(conditions: dict) -> _Hostile:
    """Steps are fine; ``quality()`` (its tail) waits until the file ``conditions['release']`` exists,
    for up to 120 s (at once without ``release``)."""
    workload = _Hostile({"fail_at": 10**9}, lambda: 1.0)
    release = conditions.get("release")

    def quality() -> float:
        deadline = time.monotonic() + 120
        while release and not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
        return 0.5

    workload.quality = quality
    return workload


def exits_in_factory(conditions: dict):
    """The factory ends its process (``os._exit(4)``) before any step, first creating the file
    ``conditions['marker']`` where it is given."""
    if conditions.get("marker"):
        open(conditions["marker"], "w").close()
    os._exit(4)


def broken_factory(conditions: dict):
    """The factory itself raises ``ValueError`` for a condition."""
    raise ValueError(f"flavour must be one of ['plain'], got {conditions.get('flavour')!r}")


def not_a_workload(conditions: dict):
    """Returns something without ``step``/``quality``."""
    return object()


class NaNAfter(nn.Module):
    """Identity until poisoned, then every output is NaN."""

    def __init__(self):
        super().__init__()
        self.poisoned = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float("nan") if self.poisoned else x


class _NaNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.ModuleDict({"first": nn.Linear(4, 4), "bad": NaNAfter()})
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body["bad"](self.body["first"](x)))


class NaNLossWorkload(Workload):
    """A staged workload whose ``body.bad`` module turns every activation into NaN."""

    tokens_per_step = 8

    def __init__(self, conditions: dict):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.model = _NaNNet()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.batch = torch.ones(2, 4)

    def next_batch(self) -> torch.Tensor:
        return self.batch

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch).pow(2).mean()

    def quality(self) -> float:
        return 0.0

    def expected_output_shape(self, batch: torch.Tensor) -> tuple[int, ...]:
        return (batch.shape[0], 2)


def nan_loss(conditions: dict) -> NaNLossWorkload:
    """Every loss is NaN, produced by the module ``body.bad``."""
    return NaNLossWorkload(conditions)


def _parent_is_attempt_server() -> bool:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            return b"mlflow_perfgate.workloads._server" in handle.read()
    except OSError:
        return False


def server_killer(conditions: dict) -> _Hostile:
    """``step()`` SIGKILLs the fork runner's attempt server (its parent), then sleeps.

    Writes its pid to ``conditions['pid_file']`` first, so a test can see that the runner ended
    the orphaned child too. Anywhere but under the attempt server it only raises: its parent
    would be the test process itself.
    """

    def action():
        if not _parent_is_attempt_server():
            raise RuntimeError("server_killer runs only as a child of the attempt server")
        with open(conditions["pid_file"], "w") as handle:
            handle.write(str(os.getpid()))
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)

    return _Hostile(conditions, action)


#: Changed by :func:`polluter` in its own process; :func:`pollution_checker` expects it untouched.
POLLUTED = False


def polluter(conditions: dict) -> _Hostile:
    """Leaves a non-daemon thread running and changes global state (torch, environment, module).

    Every later attempt must still start clean: see :func:`pollution_checker`.
    """
    global POLLUTED
    POLLUTED = True
    os.environ["PERFGATE_POLLUTED"] = "1"
    torch.set_default_dtype(torch.float64)
    threading.Thread(target=time.sleep, args=(3600,), name="perfgate-leaked", daemon=False).start()
    return _Hostile({"fail_at": 10**9}, lambda: 1.0)


def pollution_checker(conditions: dict) -> _Hostile:
    """Raises in ``step()`` if anything :func:`polluter` changed is still changed here."""

    def action():
        found = []
        if POLLUTED:
            found.append("module global")
        if "PERFGATE_POLLUTED" in os.environ:
            found.append("environment")
        if torch.get_default_dtype() != torch.float32:
            found.append(f"default dtype {torch.get_default_dtype()}")
        if any(t.name == "perfgate-leaked" for t in threading.enumerate()):
            found.append("leaked thread")
        if found:
            raise RuntimeError(f"polluted: {', '.join(found)}")
        return 1.0

    return _Hostile(conditions, action)


# -- contained: what a hostile workload does beyond failing (tests/test_contained.py) --------------


def exiter(conditions: dict) -> _Hostile:
    """``step()`` calls ``sys.exit(conditions['code'])`` (default 0) after ``fail_at`` good steps."""
    code = int(conditions.get("code", 0))
    return _Hostile(conditions, lambda: sys.exit(code))


def interrupter(conditions: dict) -> _Hostile:
    """``step()`` raises ``KeyboardInterrupt`` after ``fail_at`` good steps (a Ctrl-C, not a failure)."""

    def action():
        raise KeyboardInterrupt()

    return _Hostile(conditions, action)


def quality_raiser(conditions: dict) -> _Hostile:
    """Every step is fine; ``quality()`` raises ``RuntimeError('quality boom')``."""
    workload = _Hostile({"fail_at": 10**9}, lambda: 1.0)

    def quality():
        raise RuntimeError("quality boom")

    workload.quality = quality
    return workload


class _ProbeRaiser(Workload):
    """A staged workload that trains fine; only the correctness probe's output-contract check raises."""

    tokens_per_step = 8

    def __init__(self, conditions: dict):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.model = nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.batch = torch.ones(2, 4)

    def next_batch(self) -> torch.Tensor:
        return self.batch

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch).pow(2).mean()

    def quality(self) -> float:
        return 0.5

    def expected_output_shape(self, batch: torch.Tensor) -> tuple[int, ...]:
        raise RuntimeError("probe boom")


def probe_raiser(conditions: dict) -> _ProbeRaiser:
    """Steps, quality and memory are fine; the probe raises ``RuntimeError('probe boom')``."""
    return _ProbeRaiser(conditions)


def thread_changer(conditions: dict) -> _Hostile:
    """Steps call ``torch.set_num_threads(conditions['set_threads'])`` from call ``at_call`` (default 1) on."""
    threads = int(conditions.get("set_threads", 1))
    at_call = int(conditions.get("at_call", 1))
    workload = _Hostile({"fail_at": 10**9}, lambda: 1.0)

    def step() -> float:
        workload.calls += 1
        if workload.calls >= at_call:
            torch.set_num_threads(threads)
        return 1.0

    workload.step = step
    return workload


#: A process that sleeps for ten minutes, started by :func:`daemonizer`.
_SLEEPER = "import time; time.sleep(600)"
#: Started by :func:`daemonizer`: starts a sleeper in a session of its own, prints its pid, exits
#: at once, so the sleeper is orphaned (a double fork, as a daemon does).
_DOUBLE_FORK = (
    "import subprocess, sys\n"
    f"p = subprocess.Popen([sys.executable, '-c', {_SLEEPER!r}], start_new_session=True,\n"
    "                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(p.pid)\n"
)


def daemonizer(conditions: dict) -> _Hostile:
    """``step()`` leaves processes no process-group kill reaches, then does ``conditions['then']``.

    It starts a sleeper in a session of its own (``start_new_session=True``) and another
    through a double fork (its parent exits at once, so it is orphaned), and writes
    ``{"child": <this process>, "parent": <its parent>, "sessions": [<the two sleepers>]}`` to
    ``conditions['pid_file']``. Then: ``return`` (the attempt ends well), ``sleep`` (for an
    hour: the attempt times out), ``kill`` (SIGKILL to this process) or ``exit`` (``os._exit(0)``
    without a result).
    """
    then = conditions.get("then", "return")

    def action():
        direct = subprocess.Popen([sys.executable, "-c", _SLEEPER], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        orphan = int(subprocess.run([sys.executable, "-c", _DOUBLE_FORK], check=True, capture_output=True,
                                    text=True).stdout)
        record = {"child": os.getpid(), "parent": os.getppid(), "sessions": [direct.pid, orphan]}
        partial = conditions["pid_file"] + ".partial"
        with open(partial, "w") as handle:
            json.dump(record, handle)
        os.replace(partial, conditions["pid_file"])
        if then == "sleep":
            time.sleep(3600)
        elif then == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif then == "exit":
            os._exit(0)
        return 1.0

    return _Hostile({"fail_at": 0}, action)


class _StagedHostile(_ProbeRaiser):
    """A staged workload whose ``forward`` does ``conditions['do']`` from call ``at_call`` (default 1) on."""

    def __init__(self, conditions: dict):
        super().__init__(conditions)
        self.do = conditions.get("do", "nothing")
        self.at_call = int(conditions.get("at_call", 1))
        self.marker = conditions.get("marker")
        self.calls = 0

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls >= self.at_call:
            if self.do == "segfault":
                _segfault()
            elif self.do == "sleep":
                time.sleep(3600)
            elif self.do == "exit":
                sys.exit(0)
            elif self.do == "raise":
                raise RuntimeError("forward boom")
            elif self.do == "mark_parent":
                with open(self.marker, "a") as handle:
                    handle.write(f"{os.getpid()} {os.getppid()} {int(_parent_is_attempt_server())}\n")
        return super().forward(batch)

    def expected_output_shape(self, batch: torch.Tensor) -> None:
        return None


def staged_hostile(conditions: dict) -> _StagedHostile:
    """For a diagnosis: ``forward`` segfaults, sleeps, calls ``sys.exit(0)``, raises, or
    (``mark_parent``) appends ``<pid> <parent pid> <1 if the parent is the attempt server>`` to
    ``conditions['marker']`` (``do``)."""
    return _StagedHostile(conditions)


def marked_tinylm(conditions: dict):
    """TinyLM that, when built, appends ``<pid> <parent pid> <1 if the parent is the attempt server>``
    to ``conditions['marker']``: which process built each diagnosis's and attempt's workload."""
    from mlflow_perfgate.workloads import make_workload

    with open(conditions["marker"], "a") as handle:
        handle.write(f"{os.getpid()} {os.getppid()} {int(_parent_is_attempt_server())}\n")
    return make_workload("tinylm", {k: v for k, v in conditions.items() if k != "marker"})
