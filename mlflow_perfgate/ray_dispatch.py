"""A suite's entries on an existing Ray cluster: each entry whole on one node it holds, every outcome reported.

Ray is the engine: it connects to the cluster, schedules one task per entry on the node this
module picks (``NodeAffinitySchedulingStrategy``, not soft), holds that node's CPUs (and its
GPUs when asked) for the task, ships the task's environment (``runtime_env``) and reports a
node's death. This module only decides which entry goes where, and what an entry's end means:

- **One entry, one node, held whole.** An entry runs as one task (the suite's ``run_entry``:
  a whole ``harness.compare``) that requests all the CPUs the node offers (``cpus_per_node``
  to take fewer), all its GPUs when ``gpus`` > 0, and all of the custom resource
  ``perfgate_node`` when the cluster's nodes carry it; this dispatcher never sends a second
  entry to a node that runs one. So an entry's baseline and candidate attempts share one node,
  one process and one environment fingerprint, and no other Ray task shares their CPUs.
  Entries go to distinct nodes while there are free ones; the rest wait for a node to free up.
- **Attempts go to the shared tracking store from the node.** The task's ``runtime_env``
  carries ``MLFLOW_TRACKING_URI`` (a tracking server or a database: a local file store would be
  written on the node and lost with it), the experiment, and the credentials
  (``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD`` / ``_TOKEN``) unless ``pass_credentials`` is
  false. Each node keeps its own journal (``$MLFLOW_PERFGATE_JOURNAL`` as set on the node, else
  its user's state directory); the outcome says where, and how many attempts wait there.
- **Nothing is dropped.** Every entry ends in exactly one :class:`EntryOutcome`, and the call
  returns only when every entry has one: ``decided`` (``run_entry`` returned), ``failed``
  (``run_entry`` raised: the entry's own error, reported, not re-run), ``lost`` (its node or
  its process died, and no re-run was left), ``timeout`` (cancelled after ``timeout_s``) or
  ``unschedulable`` (no node of the cluster can take it).
- **A lost node's attempts are failures, and the entry starts again elsewhere.** When the node
  running an entry dies, the attempts it had in flight stay RUNNING in the store: their
  supervisor lived on that node, so no evaluator elsewhere can see it is gone
  (``supervisor_died`` is checked on the attempt's own host only) and they would count as in
  progress (answer ``rerun``) until ``stale_after_s``. The dispatcher knows better: it ends them
  KILLED with ``perfgate.failure = node_lost: ...`` (``tracking.abandon``), so they count as
  failed attempts, never as successes, and the lost try's comparison run ends KILLED with the
  reason. Then (``on_lost="rerun"``, the default, at most ``max_reruns`` times) the entry runs
  again, whole, on another node, in a fresh group ``<group>.rerun-<n>``: not resumed into the
  lost group, whose attempts ran on another host (another fingerprint: the evaluator refuses
  the mix) and whose lost attempts would count against the candidate (a failure rate above 0
  rejects by default) for what the cluster did. The lost try stays in the store and in the
  outcome's ``tries``. With ``on_lost="report"`` the entry is reported ``lost`` at once.

The entry's node is recorded on its comparison run as ``perfgate.node`` (the Ray node id) and
``perfgate.node_host``, by the dispatcher, for a decided try and a lost one alike.

The tasks run with ``max_calls=1`` (a fresh worker process per entry, which exits after it) and
``max_retries=0`` (Ray never re-runs an entry on its own: this module decides, and says so).
Ray itself is imported only when :func:`run_entries_on_ray` is called.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import signal
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterable

from .errors import InputError, PerfgateError

__all__ = [
    "DECIDED",
    "EntryOutcome",
    "FAILED",
    "LOST",
    "NODE_RESOURCE",
    "NOT_STARTED",
    "OUTCOME_STATES",
    "TIMEOUT",
    "Try",
    "UNSCHEDULABLE",
    "run_entries_on_ray",
]

#: ``run_entry`` returned; the outcome's ``result`` is what it returned (the decision inside).
DECIDED = "decided"
#: ``run_entry`` raised (bad input, a refused store, an environment mismatch): reported, not re-run.
FAILED = "failed"
#: The entry's node, or its worker process, died while it ran, and no re-run was left or allowed.
LOST = "lost"
#: The entry ran (or waited for its node) longer than ``timeout_s``: cancelled, its runs ended failed.
TIMEOUT = "timeout"
#: No node of the cluster offers what the entry needs (or none is left).
UNSCHEDULABLE = "unschedulable"
OUTCOME_STATES = (DECIDED, FAILED, LOST, TIMEOUT, UNSCHEDULABLE)
#: A try whose pinned node vanished before the task started: nothing ran, the entry waits for another node.
NOT_STARTED = "not_started"

#: The custom resource that marks the nodes meant for entries (``ray start --resources='{"perfgate_node": 1}'``).
#: When any node carries it at the start, only nodes that carry it take entries (the head can stay out).
NODE_RESOURCE = "perfgate_node"

#: Passed from this process's environment to every entry's task, when set here.
_PASSED_ENV = (
    "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_INSECURE_TLS",
    "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "MLFLOW_PERFGATE_JOURNAL_MODE",
)
#: Passed too unless ``pass_credentials=False`` (Ray keeps a task's runtime_env in its GCS: see docs/how-to/ray.md).
_CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
#: Tracking URI schemes that name a store on the local disk: each node would write its own, lost with it.
_LOCAL_SCHEMES = ("", "file", "sqlite")
_ON_LOST = ("rerun", "report")


@dataclasses.dataclass(frozen=True)
class Try:
    """One run of an entry on one node.

    Attributes:
        group: the group this try's attempts were written to (``<group>.rerun-<n>`` for a re-run).
        state: one of :data:`OUTCOME_STATES` but ``unschedulable``, or ``not_started`` (the node
            vanished before the task started).
        node_id: the Ray node id; ``node_ip`` and ``node_host`` its address and host name.
        reason: why the try ended as it did (``None`` when decided).
        ended_runs: the run ids the dispatcher ended as failed (``tracking.abandon``).
        wall_s: from the task's submission to its end, seen from the dispatcher.
        journal: the journal's path on the node; ``journal_pending``: how many of this group's
            attempts still wait there (``mlflow-perfgate sync`` on that node sends them); both
            ``None`` when the node did not answer.
        notes: what went wrong around the try (a tag or an abandon the store refused).
    """

    group: str
    state: str
    node_id: str | None
    node_ip: str | None = None
    node_host: str | None = None
    reason: str | None = None
    ended_runs: tuple[str, ...] = ()
    wall_s: float | None = None
    journal: str | None = None
    journal_pending: int | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EntryOutcome:
    """What became of one entry: its final state, ``run_entry``'s result when it returned, and every try.

    Attributes:
        entry: the entry as given.
        state: one of :data:`OUTCOME_STATES`.
        result: ``run_entry``'s return value when ``decided``, else ``None``.
        group: the group of the last try (the one that decided, when ``decided``).
        node_id: the Ray node of the last try; ``None`` if none ran it.
        reason: why it is not ``decided``, else ``None``.
        tries: every try, in order.
        setup_error: ``failed`` in its setup on the node (the task raised an error the user fixes: a
            workload module or package the node lacks, a condition it cannot read), not in what it measured.
    """

    entry: dict
    state: str
    result: Any = None
    group: str | None = None
    node_id: str | None = None
    reason: str | None = None
    tries: tuple[Try, ...] = ()
    setup_error: bool = False

    @property
    def decided(self) -> bool:
        """Whether ``run_entry`` returned (its decision may still be ``rerun``: see ``result``)."""
        return self.state == DECIDED

    @property
    def lost_tries(self) -> tuple[Try, ...]:
        return tuple(t for t in self.tries if t.state == LOST)

    def to_dict(self) -> dict:
        return {"entry": self.entry, "state": self.state, "result": self.result, "group": self.group,
                "node_id": self.node_id, "reason": self.reason, "tries": [t.to_dict() for t in self.tries]}


@dataclasses.dataclass(frozen=True)
class _Node:
    id: str
    ip: str
    host: str
    cpus: float  # what an entry's task requests here
    gpus: float
    marker: float  # how much of NODE_RESOURCE it requests (0: the cluster does not use it)


@dataclasses.dataclass
class _Slot:
    index: int
    entry: dict
    number: int  # 0 for the first try, n for rerun-n
    node: _Node
    submitted: float
    cancelled: str | None = None


@dataclasses.dataclass
class _Waiting:
    index: int
    entry: dict
    number: int
    avoid: frozenset = frozenset()


def run_entries_on_ray(
    address: str,
    entries: Iterable[dict],
    run_entry: Callable[[dict], dict],
    *,
    cpus_per_node: float | None = None,
    gpus: int = 0,
    timeout_s: float = 3600.0,
    on_lost: str = "rerun",
    max_reruns: int = 1,
    runtime_env: dict | None = None,
    pass_credentials: bool = True,
    poll_s: float = 1.0,
    on_start: Callable[[dict, str], None] | None = None,
) -> list[EntryOutcome]:
    """Run every entry whole on one node of the Ray cluster at ``address`` and wait for all of them.

    Args:
        address: the cluster, as ``ray.init`` takes it: ``HOST:PORT`` of the head's GCS (the
            dispatcher runs on a machine of the cluster), ``ray://HOST:10001`` (Ray Client) or
            ``auto``. If Ray is already initialised in this process, that connection is used.
        entries: plain dicts; each needs ``group`` (a non-empty string, unique among the
            entries: the group its comparison writes to) and may carry ``experiment_name`` (else
            the experiment of the tracking environment); the rest is ``run_entry``'s business.
        run_entry: ``run_entry(entry) -> dict``, run on the node: the whole comparison of one
            entry (``harness.compare`` with the entry's workload, conditions, change, objective
            and policy, and ``group=entry["group"]``), writing to ``MLFLOW_TRACKING_URI``. It
            must be importable on the nodes (defined in a module they have) or picklable by value.
        cpus_per_node: the CPUs an entry's task holds on its node: ``None`` (default) holds all
            the CPUs the node offers; a number holds that many, on nodes that offer at least as
            many (others CPUs of the node may then serve other Ray work).
        gpus: the GPUs an entry needs (0: none requested); with ``gpus`` > 0 only nodes with at
            least that many take entries, and an entry holds all of its node's GPUs.
        timeout_s: the longest an entry's try may take from its submission (waiting for its node
            included); past it the task is cancelled (its process killed) and the entry is
            reported ``timeout``, its runs ended as failed.
        on_lost: ``rerun`` (default): an entry whose node died runs again on another node, in a
            fresh group, at most ``max_reruns`` times; ``report``: it is reported ``lost`` at once.
        max_reruns: re-runs per entry after lost tries (``on_lost="rerun"``).
        runtime_env: a Ray runtime environment for the tasks (``pip``, ``working_dir``,
            ``py_modules``, ``env_vars``...); the tracking variables are added to its
            ``env_vars`` (a different ``MLFLOW_TRACKING_URI`` there is refused).
        pass_credentials: pass ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD`` / ``_TOKEN`` from
            this environment to the tasks (default). Set false when the nodes have their own.
        poll_s: how often the cluster's nodes and the deadlines are looked at.
        on_start: called with ``(entry, node_id)`` each time an entry's task is submitted (the
            entry as tried: a re-run carries its new group).

    Returns:
        One :class:`EntryOutcome` per entry, in the entries' order.

    Raises:
        InputError: a bad argument or entry, a tracking URI the nodes cannot share, or Ray missing
            (nothing is dispatched then).
    """
    entries = _checked_entries(entries)
    if not callable(run_entry):
        raise InputError(f"run_entry must be a callable run_entry(entry) -> dict, got {run_entry!r}")
    if not isinstance(address, str) or not address.strip():
        raise InputError(f"address must name a Ray cluster (HOST:PORT, ray://HOST:PORT or auto), got {address!r}")
    if cpus_per_node is not None and (isinstance(cpus_per_node, bool) or not isinstance(cpus_per_node, (int, float))
                                      or not cpus_per_node > 0):
        raise InputError(f"cpus_per_node must be None or a number > 0, got {cpus_per_node!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise InputError(f"gpus must be an integer >= 0, got {gpus!r}")
    for name, value in (("timeout_s", timeout_s), ("poll_s", poll_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"{name} must be a number > 0, got {value!r}")
    if on_lost not in _ON_LOST:
        raise InputError(f"on_lost must be one of {list(_ON_LOST)}, got {on_lost!r}")
    if isinstance(max_reruns, bool) or not isinstance(max_reruns, int) or max_reruns < 0:
        raise InputError(f"max_reruns must be an integer >= 0, got {max_reruns!r}")
    env = _runtime_env(runtime_env, pass_credentials)
    try:
        import ray
    except ImportError:
        raise InputError("dispatching to a Ray cluster needs Ray: pip install 'mlflow-perfgate[ray]'") from None
    owned = not ray.is_initialized()
    if owned:
        before = signal.getsignal(signal.SIGTERM)
        ray.init(address=address, logging_level="WARNING")
        if callable(before) and threading.current_thread() is threading.main_thread():
            # ray.init puts its own SIGTERM handler in (it prints and exits 1): the caller's stays, so a
            # stopped suite ends its runs and exits 143 as compare does
            signal.signal(signal.SIGTERM, before)
    try:
        return _Dispatch(ray, entries, run_entry, cpus_per_node=cpus_per_node, gpus=gpus, timeout_s=timeout_s,
                         on_lost=on_lost, max_reruns=max_reruns, env=env, poll_s=poll_s, on_start=on_start).run()
    finally:
        if owned:
            ray.shutdown()  # the connection; the cluster stays as it was


def _checked_entries(entries: Iterable[dict]) -> list[dict]:
    if isinstance(entries, (str, bytes, dict)):
        raise InputError(f"entries must be a list of dicts, got {type(entries).__name__}")
    listed = list(entries)
    seen: set[str] = set()
    for position, entry in enumerate(listed):
        if not isinstance(entry, dict):
            raise InputError(f"entry {position} must be a dict, got {type(entry).__name__}")
        group = entry.get("group")
        if not isinstance(group, str) or not group.strip():
            raise InputError(f"entry {position} needs a 'group' (a non-empty string: the group its comparison "
                             f"writes to), got {group!r}")
        if group in seen:
            raise InputError(f"entry {position}: group {group!r} is used by an earlier entry; each entry needs its own")
        seen.add(group)
    return listed


def _runtime_env(runtime_env: dict | None, pass_credentials: bool) -> dict:
    """The tasks' runtime env: the caller's, with the tracking environment of this process in its env_vars."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if not uri:
        raise InputError("MLFLOW_TRACKING_URI must name the tracking server every node writes to "
                         "(http://HOST:PORT, or a database URI the nodes reach)")
    scheme = urllib.parse.urlsplit(uri).scheme.lower().split("+", 1)[0]
    if scheme in _LOCAL_SCHEMES or len(scheme) == 1:  # a Windows drive letter reads as a scheme
        raise InputError(f"MLFLOW_TRACKING_URI={uri!r} is a store on the local disk: each Ray node would write its "
                         "attempts into a file of its own, lost with the node. Point it at a tracking server "
                         "(http://HOST:PORT) or a database every node reaches")
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise InputError(f"runtime_env must be a dict (a Ray runtime environment), got {type(runtime_env).__name__}")
    env = dict(runtime_env or {})
    given = dict(env.get("env_vars") or {})
    if "MLFLOW_TRACKING_URI" in given and given["MLFLOW_TRACKING_URI"] != uri:
        raise InputError("runtime_env's env_vars set MLFLOW_TRACKING_URI to another store than this process's: the "
                         "dispatcher ends a lost entry's runs in the store it knows, so both must be the same")
    names = _PASSED_ENV + (_CREDENTIAL_ENV if pass_credentials else ())
    given.update({name: os.environ[name] for name in names if os.environ.get(name)})
    env["env_vars"] = given
    return env


def _run_on_node(entry: dict, run_entry: Callable[[dict], dict]) -> dict:
    """The task: one entry, whole, in this node's worker process; then where its journal is."""
    import ray

    result = run_entry(entry)
    journal, waiting = None, None
    try:
        from .tracking import journal_path, pending

        journal = str(journal_path())
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        waiting = len(pending(tracking_uri=uri, group=entry["group"]))
    except Exception as exc:  # the entry's result matters more than the journal's count
        journal = f"{journal} (unreadable: {type(exc).__name__}: {exc})"
    return {"result": result, "node_id": ray.get_runtime_context().get_node_id(), "host": platform.node(),
            "journal": journal, "journal_pending": waiting}


class _Dispatch:
    """The loop of one :func:`run_entries_on_ray` call."""

    def __init__(self, ray, entries, run_entry, *, cpus_per_node, gpus, timeout_s, on_lost, max_reruns, env, poll_s,
                 on_start):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.entries, self.run_entry = ray, entries, run_entry
        self.cpus_per_node, self.gpus, self.timeout_s = cpus_per_node, gpus, timeout_s
        self.on_lost, self.max_reruns, self.env, self.poll_s, self.on_start = on_lost, max_reruns, env, poll_s, on_start
        self.affinity = NodeAffinitySchedulingStrategy
        self.task = ray.remote(max_calls=1, max_retries=0)(_run_on_node)
        self.tries: list[list[Try]] = [[] for _ in entries]
        self.outcomes: list[EntryOutcome | None] = [None] * len(entries)
        self.running: dict[Any, _Slot] = {}
        self.waiting = [_Waiting(index, entry, 0) for index, entry in enumerate(entries)]
        self.excluded: set[str] = set()  # nodes found dead (or unschedulable) during this call
        self.marked = None  # whether the cluster marks its entry nodes with NODE_RESOURCE (fixed at the start)

    # --- nodes

    def nodes(self) -> tuple[list[_Node], list[str]]:
        """The alive nodes that can take an entry, and why each other alive node cannot."""
        alive = [node for node in self.ray.nodes() if node.get("Alive")]
        if self.marked is None:
            self.marked = any(node.get("Resources", {}).get(NODE_RESOURCE, 0) >= 1 for node in alive)
        usable, refused = [], []
        for node in alive:
            resources = node.get("Resources", {})
            cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
            name = f"{node['NodeID'][:12]} ({node.get('NodeManagerAddress')}: CPU {cpus:g}, GPU {gpus:g})"
            if node["NodeID"] in self.excluded:
                refused.append(f"{name}: lost during this run")
            elif self.marked and resources.get(NODE_RESOURCE, 0) < 1:
                refused.append(f"{name}: no {NODE_RESOURCE} resource")
            elif cpus < (self.cpus_per_node or 1):
                refused.append(f"{name}: fewer than {self.cpus_per_node or 1:g} CPUs")
            elif gpus < self.gpus:
                refused.append(f"{name}: fewer than {self.gpus} GPUs")
            else:
                usable.append(_Node(id=node["NodeID"], ip=str(node.get("NodeManagerAddress")),
                                    host=str(node.get("NodeManagerHostname") or node.get("NodeName") or ""),
                                    cpus=float(self.cpus_per_node or cpus), gpus=gpus if self.gpus else 0.0,
                                    marker=float(resources.get(NODE_RESOURCE, 0)) if self.marked else 0.0))
        return usable, refused

    def node_alive(self, node_id: str) -> bool:
        return any(node["NodeID"] == node_id and node.get("Alive") for node in self.ray.nodes())

    # --- the loop

    def run(self) -> list[EntryOutcome]:
        try:
            while self.waiting or self.running:
                self.submit_what_fits()
                if not self.running:
                    break  # waiting entries, and no node can take them: reported below
                ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=self.poll_s)
                for ref in ready:
                    self.finish(ref, self.running[ref])
                    del self.running[ref]  # after: a dispatcher stopped inside finish still ends its runs
                self.cancel_overdue()
        except BaseException as exc:
            self.stop_all(f"dispatcher_stopped: the dispatcher ended before the entry ({type(exc).__name__}: {exc})")
            raise
        refused = self.nodes()[1] if self.waiting else []
        for item in self.waiting:
            reason = ("no node of the cluster can take an entry (needs "
                      f"{self.cpus_per_node or 1:g}+ CPUs, {self.gpus} GPUs"
                      f"{', the ' + NODE_RESOURCE + ' resource' if self.marked else ''}); "
                      f"alive nodes: {'; '.join(refused) or 'none'}")
            self.conclude(item.index, UNSCHEDULABLE, reason=reason, group=item.entry["group"])
        self.waiting = []
        return [outcome for outcome in self.outcomes if outcome is not None]

    def submit_what_fits(self) -> None:
        if not self.waiting:
            return
        usable, _ = self.nodes()
        busy = {slot.node.id for slot in self.running.values()}
        free = [node for node in usable if node.id not in busy]
        usable_ids = {node.id for node in usable}
        for item in list(self.waiting):
            if not free:
                break
            # a re-run goes to a node other than the ones it was lost on, unless only those are left
            preferred = [node for node in free if node.id not in item.avoid]
            if not preferred:
                if any(node_id not in item.avoid for node_id in usable_ids):
                    continue  # such a node is busy: wait for it
                preferred = free
            node = preferred[0]
            free.remove(node)
            self.waiting.remove(item)
            self.submit(item, node)

    def submit(self, item: _Waiting, node: _Node) -> None:
        resources = {NODE_RESOURCE: node.marker} if node.marker else None
        ref = self.task.options(
            num_cpus=node.cpus, num_gpus=node.gpus, resources=resources, runtime_env=self.env,
            scheduling_strategy=self.affinity(node.id, soft=False), name=f"perfgate entry {item.entry['group']}"[:200],
        ).remote(item.entry, self.run_entry)
        self.running[ref] = _Slot(item.index, item.entry, item.number, node, time.monotonic())
        if self.on_start is not None:
            self.on_start(item.entry, node.id)

    def cancel_overdue(self) -> None:
        now = time.monotonic()
        for ref, slot in self.running.items():
            if slot.cancelled is None and now - slot.submitted > self.timeout_s:
                slot.cancelled = f"entry_timeout: the entry ran past timeout_s={self.timeout_s:g} s on Ray node " \
                                 f"{slot.node.id} ({slot.node.ip}); its task was cancelled"
                self.ray.cancel(ref, force=True)

    def stop_all(self, reason: str) -> None:
        """Cancel every running task and end its runs as failed: nothing is left RUNNING behind a stopped dispatcher."""
        # An outcome the dying process still writes wins over the KILLED written here (attempt_state).
        for ref, slot in list(self.running.items()):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # the cluster may be what failed; the runs still get ended
                pass
            self.end_runs(slot, reason)
        self.running.clear()

    # --- one try's end

    def finish(self, ref, slot: _Slot) -> None:
        ray = self.ray
        wall_s = time.monotonic() - slot.submitted
        group = slot.entry["group"]
        try:
            value = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if slot.cancelled:
                self.ended_badly(slot, TIMEOUT, slot.cancelled, wall_s)
                return
            cause = getattr(exc, "cause", None) or exc
            reason = f"entry_failed: {type(cause).__name__}: {_first_line(cause)}"
            self.ended_badly(slot, FAILED, reason, wall_s, setup_error=_is_setup_error(cause))
            return
        except ray.exceptions.TaskUnschedulableError as exc:
            # its node vanished (or changed) before the task started: nothing ran; try another node
            self.excluded.add(slot.node.id)
            self.tries[slot.index].append(Try(group, NOT_STARTED, slot.node.id, slot.node.ip, slot.node.host,
                                              reason=f"not_started: {_first_line(exc)}", wall_s=wall_s))
            self.waiting.append(_Waiting(slot.index, slot.entry, slot.number, frozenset({slot.node.id})))
            return
        except ray.exceptions.RayError as exc:
            if slot.cancelled:
                self.ended_badly(slot, TIMEOUT, slot.cancelled, wall_s)
                return
            if isinstance(exc, getattr(ray.exceptions, "RuntimeEnvSetupError", ())):
                # the task's environment could not be set up (a pip package, a working_dir): a setting to fix
                self.ended_badly(slot, FAILED, f"runtime_env_failed: {_first_line(exc)}", wall_s)
                return
            died = isinstance(exc, getattr(ray.exceptions, "NodeDiedError", ())) or not self.node_alive(slot.node.id)
            if died:
                self.excluded.add(slot.node.id)
                reason = (f"node_lost: Ray node {slot.node.id} ({slot.node.ip}, {slot.node.host}) died while the "
                          f"entry ran ({type(exc).__name__})")
            else:
                reason = (f"process_lost: the entry's worker process on Ray node {slot.node.id} ({slot.node.ip}) "
                          f"died ({type(exc).__name__}: {_first_line(exc)})")
            self.ended_badly(slot, LOST, reason, wall_s, conclude=False)
            if self.on_lost == "rerun" and slot.number < self.max_reruns:
                base = self.entries[slot.index]
                rerun = {**base, "group": f"{base['group']}.rerun-{slot.number + 1}"}
                avoid = frozenset(t.node_id for t in self.tries[slot.index] if t.node_id)
                self.waiting.append(_Waiting(slot.index, rerun, slot.number + 1, avoid))
            else:
                left = ("on_lost='report'" if self.on_lost == "report"
                        else f"no re-run left (max_reruns={self.max_reruns})")
                self.conclude(slot.index, LOST, reason=f"{reason}; {left}", group=group, node_id=slot.node.id)
            return
        notes = []
        node_id = value.get("node_id") or slot.node.id
        result = value.get("result")
        comparison = result.get("comparison_run_id") if isinstance(result, dict) else None
        notes.extend(self.tag_node(slot, comparison))
        self.tries[slot.index].append(Try(group, DECIDED, node_id, slot.node.ip, value.get("host") or slot.node.host,
                                          wall_s=wall_s, journal=value.get("journal"),
                                          journal_pending=value.get("journal_pending"), notes=tuple(notes)))
        self.conclude(slot.index, DECIDED, result=result, group=group, node_id=node_id)

    def ended_badly(self, slot: _Slot, state: str, reason: str, wall_s: float, *, conclude: bool = True,
                    setup_error: bool = False) -> Try:
        ended, notes = self.end_runs(slot, reason)
        notes += self.tag_node(slot, None)
        try_ = Try(slot.entry["group"], state, slot.node.id, slot.node.ip, slot.node.host, reason=reason,
                   ended_runs=tuple(ended), wall_s=wall_s, notes=tuple(notes))
        self.tries[slot.index].append(try_)
        if conclude:
            self.conclude(slot.index, state, reason=reason, group=slot.entry["group"], node_id=slot.node.id,
                          setup_error=setup_error)
        return try_

    def end_runs(self, slot: _Slot, reason: str) -> tuple[list[str], list[str]]:
        """End the try's runs left RUNNING (its process is gone) as failures with the reason."""
        from .tracking import abandon

        try:
            return abandon(slot.entry["group"], reason, experiment_name=slot.entry.get("experiment_name")), []
        except PerfgateError as exc:  # the store refused or is down: the outcome still says what happened
            return [], [f"could not end the group's RUNNING runs: {exc}"]

    def tag_node(self, slot: _Slot, comparison_run_id: str | None) -> list[str]:
        """``perfgate.node`` / ``perfgate.node_host`` on the try's comparison run."""
        from .tracking import TAG, group_state, tag_run

        try:
            if comparison_run_id is None:
                comparison_run_id = group_state(slot.entry["group"],
                                                experiment_name=slot.entry.get("experiment_name"))["comparison_run_id"]
            if comparison_run_id is not None:
                tag_run(comparison_run_id, {TAG.NODE: slot.node.id, TAG.NODE_HOST: slot.node.host})
            return []
        except PerfgateError as exc:
            return [f"could not tag the comparison run with its node: {exc}"]

    def conclude(self, index: int, state: str, *, result: Any = None, group: str | None = None,
                 node_id: str | None = None, reason: str | None = None, setup_error: bool = False) -> None:
        self.outcomes[index] = EntryOutcome(entry=self.entries[index], state=state, result=result, group=group,
                                            node_id=node_id, reason=reason, tries=tuple(self.tries[index]),
                                            setup_error=setup_error)


def _is_setup_error(cause: BaseException) -> bool:
    """An error of the entry's setup: the product's own (the user fixes it: a bad condition, a factory that
    could not be imported or built) or the child's refusal of a workload name that does not resolve."""
    from .workloads import WorkloadRefused

    return isinstance(cause, (PerfgateError, WorkloadRefused))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]
