"""The runner of a comparison whose arms run apart: each arm at its own site, lockstep rounds.

A :class:`SiteRunner` holds one runner (``_runner``'s fork or spawn kind) per site an arm runs
at (``_site``: a revision's worktree, another interpreter, or here), and for a lockstep round
two, one per arm, even where both arms run at one site (a change of ``device``, ``warmup`` or
``steps``): each round's two children (``_lockstep``) are begun at once, one from each. A whole
attempt runs at its conditions' site; a step-interleaved pair only where both arms share one.
"""

from __future__ import annotations

import os
from typing import Callable

from ._attempt import DEFAULT_TIMEOUT_S, AttemptResult, Spawned
from ._lockstep import LockstepPair, prepare_lockstep_spec
from ._runner import AttemptRunner, ForkRunner, PendingPair, SpawnRunner, runner_kind
from ._site import Site

__all__ = ["SiteRunner", "shared_cpus"]

#: ``shared`` (both children of a lockstep round on the same CPUs, as one process's arms are) or ``none``.
PIN_ENV = "MLFLOW_PERFGATE_LOCKSTEP_CPUS"


def shared_cpus(threads: int) -> list[int] | None:
    """The CPUs both children of a lockstep round are held to (the last ``threads`` this process may run
    on), or ``None`` (not held: ``MLFLOW_PERFGATE_LOCKSTEP_CPUS=none``, or no ``sched_setaffinity``).

    Both arms then share one core's caches and one run queue, as the arms of one process do: under
    another PyTorch training job on both cores (the lockstep lab, ``benchmarks/lab_lockstep.py``),
    each woken child otherwise landed on whichever core the scheduler chose, and the within-round
    spread of identical arms' p10 ratio was 0.023 to 0.085 (sd of the log ratio) where held children
    gave 0.005 to 0.009, as one process's arms do (0.004 to 0.006)."""
    if os.environ.get(PIN_ENV, "shared") == "none" or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-max(1, threads):] if len(allowed) > max(1, threads) else None


class SiteRunner(AttemptRunner):
    """Runs every attempt at the site its conditions name; lockstep rounds one child per arm.

    Args:
        kind: ``'fork'``, ``'spawn'`` or ``'auto'``, as :func:`~._runner.attempt_runner` takes it:
            the kind of every site's runner.
        workload: the workload most attempts run (each fork server imports its module early).
        site_of: the site of an attempt's conditions (``None``: here, as this process is).
        sites: the sites to start runners at now (their servers warm up meanwhile), in the
            arms' order; with ``lockstep``, two runners where both arms share a site.
        lockstep: whether rounds will be lockstep ones.

    Raises:
        ValueError: an unknown kind, or ``'fork'`` where it is unavailable.
    """

    def __init__(self, kind: str = "auto", workload: str | None = None, *,
                 site_of: Callable[[dict], Site | None] = lambda conditions: None,
                 sites: tuple[Site | None, ...] = (None,), lockstep: bool = True) -> None:
        self.kind = runner_kind(kind)
        self._workload = workload
        self.site_of = site_of
        self._runners: dict[tuple[Site | None, int], AttemptRunner] = {}
        try:
            for slot, site in enumerate(sites):
                self._runner(site, self._slot(site, slot, sites) if lockstep else 0)
            if lockstep and len(set(sites)) == 1:
                self._runner(sites[0], 1)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _slot(site: Site | None, position: int, sites: tuple) -> int:
        """The runner of an arm at ``position``: its site's first, or its second where the arm before it
        is at the same site."""
        return 1 if position and sites[position - 1] == site else 0

    def _runner(self, site: Site | None, slot: int = 0) -> AttemptRunner:
        key = (site, slot)
        runner = self._runners.get(key)
        if runner is None:
            runner = ForkRunner(self._workload, site) if self.kind == "fork" else SpawnRunner(site)
            self._runners[key] = runner
        return runner

    def __repr__(self) -> str:
        return f"SiteRunner(kind={self.kind!r}, runners={len(self._runners)})"

    def runner_at(self, conditions: dict) -> AttemptRunner:
        """The runner of an attempt with these conditions (its site's first)."""
        return self._runner(self.site_of(conditions))

    def run(self, workload_name: str, conditions: dict, **arguments) -> AttemptResult:
        return self.runner_at(conditions).run(workload_name, conditions, **arguments)

    def _shared(self, conditions_a: dict, conditions_b: dict) -> AttemptRunner:
        site = self.site_of(conditions_a)
        if self.site_of(conditions_b) != site:
            raise ValueError("step interleaving runs both arms in one process, and these arms run at different "
                             "sites (revisions or interpreters): run lockstep rounds (begin_lockstep)")
        return self._runner(site)

    def run_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict,
                        **arguments) -> tuple[AttemptResult, AttemptResult]:
        return self._shared(conditions_a, conditions_b).run_interleaved(workload_name, conditions_a, conditions_b,
                                                                        **arguments)

    def begin_interleaved(self, workload_name: str, conditions_a: dict, conditions_b: dict,
                          **arguments) -> PendingPair:
        return self._shared(conditions_a, conditions_b).begin_interleaved(workload_name, conditions_a, conditions_b,
                                                                          **arguments)

    def begin_lockstep(self, workload_name: str, conditions_a: dict, conditions_b: dict, *,
                       warmup: int | None = None, steps: int | None = None, threads: int | None = None,
                       probe: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S, memory: bool = True,
                       measures: tuple[str, ...] = (), duet: bool = False) -> LockstepPair:
        """Begin a lockstep round now: each arm's child at its site builds and warms up, then waits for
        :meth:`LockstepPair.finish` (or ``measured``) to drive its steps (``_lockstep``).

        Raises:
            ValueError: bad arguments, as :func:`~._run.run_attempt` says, for either arm.
        """
        site_a, site_b = self.site_of(conditions_a), self.site_of(conditions_b)
        runners = (self._runner(site_a, 0), self._runner(site_b, 1 if site_b == site_a else 0))
        threads = self.default_threads() if threads is None else threads
        arguments = dict(warmup=warmup, steps=steps, threads=threads, timeout_s=timeout_s, probe=probe,
                         supervised=True, memory=memory, measures=measures)
        specs = (prepare_lockstep_spec(workload_name, conditions_a, **arguments),
                 prepare_lockstep_spec(workload_name, conditions_b, **arguments))
        cpus = None if duet else shared_cpus(threads)  # duet steps both at once: on CPUs of their own
        if cpus:
            specs = tuple({**spec, "cpus": cpus} for spec in specs)
        first = runners[0].begin_child(specs[0], float(timeout_s))
        try:
            second = runners[1].begin_child(specs[1], float(timeout_s))
        except BaseException:
            first.cancel()
            raise
        return LockstepPair((first, second), (specs[0]["steps"], specs[1]["steps"]), duet=duet)

    def run_lockstep(self, workload_name: str, conditions_a: dict, conditions_b: dict,
                     **arguments) -> tuple[AttemptResult, AttemptResult]:
        """:meth:`begin_lockstep`, then :meth:`LockstepPair.finish` at once."""
        pending = self.begin_lockstep(workload_name, conditions_a, conditions_b, **arguments)
        try:
            return pending.finish()
        except BaseException:
            pending.cancel()
            raise

    def check(self, workload_name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
        """The check at every site (:meth:`check_at`), the first note found."""
        for site in dict.fromkeys(site for site, _ in self._runners):
            note = self._runner(site).check(workload_name, timeout_s)
            if note:
                return note
        return None

    def check_at(self, conditions: dict, workload_name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
        """:meth:`AttemptRunner.check` at the site of ``conditions``."""
        return self.runner_at(conditions).check(workload_name, timeout_s)

    def default_threads(self) -> int:
        return next(iter(self._runners.values())).default_threads()

    def run_task(self, spec: dict, result_path, log_path, timeout_s: float) -> Spawned:
        return next(iter(self._runners.values())).run_task(spec, result_path, log_path, timeout_s)

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
