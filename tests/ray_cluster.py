"""A small Ray cluster on loopback for the tests: a head and worker nodes started with ``ray start --block``.

Every node is one ``ray start`` process this module started (``subprocess.Popen``, a session of
its own) with the processes below it (Ray moves its workers into sessions of their own, so
they are found by parent, not by process group); a node is killed, and the cluster stopped, by
the PIDs of those processes only, each checked against its start time (a PID reused since is
left alone), and of processes that name this cluster's own temporary directory (a killed
node's stragglers). Nothing else is signalled; ``ray stop``, which ends every Ray process of
the machine, is never called.

Loopback only: Ray's command line replaces a node address of ``127.0.0.1`` with the machine's
routable address (``services.resolve_ip_for_localhost``), and its servers listen on loopback
alone only when the node's address is ``127.0.0.1``. The nodes are therefore started through
Ray's own command line with that one function kept from rewriting the address
(:data:`LAUNCH`), and the test's driver does the same in its process
(:func:`keep_loopback`): every server of the cluster then listens on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: ``python -c LAUNCH start ...`` is ``ray start ...`` with 127.0.0.1 kept as the node address.
LAUNCH = (
    "import sys\n"
    "import ray._private.services as services\n"
    "services.resolve_ip_for_localhost = lambda host: host\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv[0] = 'ray'\n"
    "main()\n"
)
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's floor is 75 MiB
STARTS = 3  # tries to start a worker node


def keep_loopback(monkeypatch) -> None:
    """In this process (the driver): connect to 127.0.0.1 as given (see the module's docstring)."""
    import ray._private.services as services

    monkeypatch.setattr(services, "resolve_ip_for_localhost", lambda host: host)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start ticks) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(name)] = (int(fields[1]), fields[19])
    return table


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def descendants(root: int) -> list[tuple[int, str]]:
    """``(pid, start ticks)`` of ``root`` and every process below it."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            found.append((pid, table[pid][1]))
        todo.extend(children.get(pid, []))
    return found


def kill_exactly(processes: list[tuple[int, str]]) -> list[int]:
    """SIGKILL each ``(pid, start ticks)`` that is still that process; the PIDs signalled."""
    killed = []
    for pid, ticks in processes:
        if _start_ticks(pid) == ticks:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


class LocalRayCluster:
    """A head and ``workers`` worker nodes on 127.0.0.1, ``cpus`` CPUs each, under ``root``.

    ``worker_resources`` are custom resources of the worker nodes only (``{"perfgate_node": 1}``
    keeps the head out of the dispatcher's nodes). Each node has its own ``XDG_STATE_HOME``
    (``root/state-<name>``), so its own perfgate journal, as separate machines would.
    """

    def __init__(self, root: Path, *, workers: int = 2, cpus: int = 1, worker_resources: dict | None = None,
                 env: dict | None = None):
        self.root = Path(root)
        self.temp_dir = self.root / "ray"
        self.workers, self.cpus, self.worker_resources = workers, cpus, worker_resources
        self.env = env or {}
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        state = self.root / f"state-{name}"
        state.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{name}.log", "ab")
        # a node knows no tracking store of its own: what it writes to comes with each task (runtime_env)
        env = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_")}
        env.update({"RAY_USAGE_STATS_ENABLED": "0", "XDG_STATE_HOME": str(state), **self.env})
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "start", "--block", "--node-ip-address=127.0.0.1",
             f"--num-cpus={self.cpus}", "--num-gpus=0", f"--object-store-memory={OBJECT_STORE_BYTES}",
             f"--dashboard-agent-listen-port={_free_port()}", f"--metrics-export-port={_free_port()}",
             "--disable-usage-stats", *args],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        self.nodes[name] = process
        return process

    def start(self, timeout_s: float = 240.0) -> "LocalRayCluster":
        """Start the head, then the workers; wait until every node says it runs (its log)."""
        import json

        self.root.mkdir(parents=True, exist_ok=True)
        self._start("head", ["--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
                             "--include-dashboard=false"])
        self._wait_started("head", timeout_s)
        extra = [f"--resources={json.dumps(self.worker_resources)}"] if self.worker_resources else []
        for index in range(self.workers):  # one at a time: a busy machine registers one raylet faster
            name = f"worker{index + 1}"
            for attempt in range(1, STARTS + 1):
                self._start(name, [f"--address={self.address}", *extra])
                try:
                    self._wait_started(name, timeout_s)
                    break
                except RuntimeError:
                    # Ray gives a raylet 30 s to register with the GCS, hard-coded; on a loaded
                    # machine it may miss that: what this start left is killed, and it starts again
                    if attempt == STARTS:
                        raise
        return self

    def _wait_started(self, name: str, timeout_s: float) -> None:
        """Wait for the node's "Ray runtime started"; if it exits first, kill every process it started, then raise."""
        deadline = time.monotonic() + timeout_s
        log = self.root / f"{name}.log"
        seen: set[tuple[int, str]] = set()  # its processes, also those orphaned when it exits
        while time.monotonic() < deadline:
            seen.update(descendants(self.nodes[name].pid))
            if self.nodes[name].poll() is not None:
                kill_exactly(sorted(seen))
                raise RuntimeError(f"ray node {name} exited with {self.nodes[name].returncode}:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            if "Ray runtime started" in log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise TimeoutError(f"ray node {name} did not start within {timeout_s} s:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")

    def node_id(self, name: str) -> str | None:
        """The Ray node id of a node this cluster started (from its raylet's command line)."""
        for pid, _ in descendants(self.nodes[name].pid):
            for arg in _cmdline(pid):
                if arg.startswith("--node_id="):
                    return arg.split("=", 1)[1]
        return None

    def name_of(self, node_id: str) -> str | None:
        return next((name for name in self.nodes if self.node_id(name) == node_id), None)

    def kill_node(self, name: str) -> list[int]:
        """SIGKILL a node at once, as a machine that vanishes: its ``ray start``, raylet, workers and theirs."""
        killed = kill_exactly(descendants(self.nodes[name].pid))
        self.nodes[name].wait(timeout=30)
        return killed

    def stop(self) -> None:
        """SIGKILL every process of the cluster: the nodes' trees, then anything naming its temp dir."""
        processes = []
        for process in self.nodes.values():
            processes.extend(descendants(process.pid))
        marker = str(self.temp_dir)
        for pid, (_, ticks) in _table().items():  # workers whose raylet died before them (a killed node's)
            if pid != os.getpid() and any(marker in arg for arg in _cmdline(pid)):
                processes.extend(descendants(pid) or [(pid, ticks)])
        kill_exactly(processes)
        for process in self.nodes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
