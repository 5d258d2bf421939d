"""The public way to run attempts: :func:`run_attempt` and :func:`run_interleaved`.

They sit above the runners (``_runner``), which sit above what a child executes (``_attempt``,
``_interleave``): a supervised call hands its spec to a runner, an in-process one executes it
here. No module below imports this one.
"""

from __future__ import annotations

from typing import Any

from ._attempt import DEFAULT_TIMEOUT_S, AttemptResult, execute_in_process, prepare_spec
from ._interleave import execute_interleaved, prepare_interleaved_spec
from ._runner import AttemptRunner, attempt_runner, runner_kind

__all__ = ["run_attempt", "run_interleaved", "run_lockstep"]


def run_attempt(
    workload_name: str,
    conditions: dict,
    *,
    warmup: int | None = None,
    steps: int | None = None,
    threads: int | None = None,
    supervised: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    probe: bool = True,
    runner: Any = None,
    memory: bool = True,
    measures: tuple[str, ...] = (),
) -> AttemptResult:
    """Run one attempt of a workload under fixed conditions and return what happened.

    The attempt builds the workload, runs ``warmup`` untimed steps and ``steps`` timed ones,
    reads ``quality()``, collects the memory record and runs the correctness probe once (on a
    probe step outside the timed ones). Failures are results (``ok=False`` with a reason), never
    exceptions; only bad arguments to this function raise.

    Args:
        workload_name: ``"tinylm"`` or a factory ``"module:function"`` taking the conditions.
        conditions: the conditions passed to the factory; recorded as given. Must be
            JSON-serialisable for a supervised attempt.
        warmup: warm-up steps (default ``conditions['warmup']``, else 2).
        steps: measured steps (default ``conditions['steps']``, else 10).
        threads: torch intra-op threads during the attempt; ``None`` uses the caller's current
            count (also in the child), so both modes measure with the same threads. A caller
            that has not imported torch (the command line) gets a fresh interpreter's count,
            which the fork runner's server reads in a forked child.
        supervised: run in a child process that may crash, hang or be killed without harming the
            caller. ``False`` runs in this process: faster, but a kill or segfault takes the
            caller with it and a hung step is never interrupted.
        timeout_s: wall-clock limit of the attempt, child start included (not the fork
            runner's server start, which is the runner's, once). Supervised: the child is
            killed. In-process: checked between steps only.
        probe: run the correctness probe.
        memory: collect the memory record (``False``: the result has none; a comparison that
            already holds this arm's CPU estimate carries it, see ``harness``).
        measures: registered objectives whose attempt figure this attempt measures with their
            entry's ``measure`` (:class:`~mlflow_perfgate.rules.Objective`), after ``quality()``;
            the figures are in :attr:`AttemptResult.figures` under each objective's metric.
        runner: for a supervised attempt, what starts its child: an
            :class:`~mlflow_perfgate.workloads.AttemptRunner` (see :func:`attempt_runner`; many
            attempts share its warm server), or a kind, ``"spawn"``, ``"fork"`` or ``"auto"``,
            for this one attempt. ``None`` is ``"spawn"``: a fresh interpreter per attempt, as
            before runners existed (a fork runner made for one attempt saves nothing).

    Returns:
        The :class:`AttemptResult`.

    Raises:
        ValueError: an unknown workload (for a supervised attempt, found by its child:
            :class:`WorkloadRefused`), a bad ``warmup``/``steps``/``threads``/``timeout_s``,
            ``warmup``/``steps`` that disagree with the same keys in ``conditions``, (for a
            supervised attempt) conditions that JSON cannot carry, a ``runner`` that is not a
            runner or a kind, or a ``runner`` with ``supervised=False``.
    """
    arguments = {"warmup": warmup, "steps": steps, "threads": threads, "timeout_s": timeout_s, "probe": probe,
                 "memory": memory, "measures": measures}
    if not supervised:
        if runner is not None:
            raise ValueError(f"runner applies to supervised attempts only; got supervised=False and runner={runner!r}")
        spec = prepare_spec(workload_name, conditions, supervised=False, import_workload=True, **arguments)
        return execute_in_process(spec["workload"], conditions, warmup=spec["warmup"], steps=spec["steps"],
                                  threads=spec["threads"], probe=probe, timeout_s=timeout_s, memory=memory,
                                  measures=tuple(measures))

    if isinstance(runner, AttemptRunner):
        return runner.run(workload_name, conditions, **arguments)
    kind = runner_kind("spawn" if runner is None else runner)
    # Bad arguments raise before any process starts; the workload's module is imported in
    # children only (a name that does not resolve is refused by the child, as ValueError).
    prepare_spec(workload_name, conditions, supervised=True, **arguments)
    with attempt_runner(kind) as owned:
        return owned.run(workload_name, conditions, **arguments)


def run_interleaved(
    workload_name: str,
    conditions_a: dict,
    conditions_b: dict,
    *,
    warmup: int | None = None,
    steps: int | None = None,
    threads: int | None = None,
    supervised: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    probe: bool = True,
    memory: bool = True,
    measures: tuple[str, ...] = (),
    runner: Any = None,
) -> tuple[AttemptResult, AttemptResult]:
    """Run one attempt of each of two arms in one process, their measured steps interleaved A B B A ...

    What :func:`run_attempt` is for one attempt, for a pair (see the module docstring): failures
    are results, never exceptions; only bad arguments raise.

    Args:
        workload_name: the workload both arms build (``"tinylm"`` or ``"module:function"``).
        conditions_a: the leading arm's conditions (built, warmed and measured first).
        conditions_b: the other arm's.
        warmup, steps, threads, probe, memory, measures: as for :func:`run_attempt` (for both
            arms); ``warmup`` and ``steps`` must resolve to the same counts for both arms.
        supervised: run in a child process of its own (a crash there fails the arm whose code was
            running and withdraws the other's attempt, ``AttemptResult.withdrawn``);
            ``False`` runs here.
        timeout_s: the wall-clock limit of the shared child (both arms: about twice one attempt).
        runner: as for :func:`run_attempt`: an ``AttemptRunner`` or a kind (``None`` is ``spawn``).

    Returns:
        ``(result of arm A, result of arm B)``.

    Raises:
        ValueError: bad arguments, as :func:`run_attempt` says, or arms whose ``warmup`` or
            ``steps`` differ.
    """
    arguments = {"warmup": warmup, "steps": steps, "threads": threads, "timeout_s": timeout_s, "probe": probe,
                 "memory": memory, "measures": measures}
    if not supervised:
        if runner is not None:
            raise ValueError(f"runner applies to supervised attempts only; got supervised=False and runner={runner!r}")
        spec = prepare_interleaved_spec(workload_name, conditions_a, conditions_b, supervised=False, **arguments)
        return execute_interleaved(workload_name, conditions_a, conditions_b, warmup=spec["warmup"],
                                   steps=spec["steps"], threads=spec["threads"], probe=probe, timeout_s=timeout_s,
                                   memory=memory, measures=tuple(measures))

    if isinstance(runner, AttemptRunner):
        return runner.run_interleaved(workload_name, conditions_a, conditions_b, **arguments)
    kind = runner_kind("spawn" if runner is None else runner)
    prepare_interleaved_spec(workload_name, conditions_a, conditions_b, supervised=True,
                             import_workload=kind == "spawn", **arguments)
    with attempt_runner(kind) as owned:
        return owned.run_interleaved(workload_name, conditions_a, conditions_b, **arguments)


def run_lockstep(
    workload_name: str,
    conditions_a: dict,
    conditions_b: dict,
    *,
    warmup: int | None = None,
    steps: int | None = None,
    threads: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    probe: bool = True,
    memory: bool = True,
    measures: tuple[str, ...] = (),
    runner: Any = None,
    sites: tuple = (None, None),
    duet: bool = False,
) -> tuple[AttemptResult, AttemptResult]:
    """Run one attempt of each of two arms, each in a child of its own, their measured steps in lockstep.

    The parent alternates the arms' measured steps A B B A ... as one process would run them
    (``duet``: both at once), each child timing its own step (``_lockstep``). A child that crashes,
    hangs or leaves the protocol fails its own arm's attempt; the other arm's stands.

    Args:
        workload_name, conditions_a, conditions_b, warmup, steps, threads, probe, memory, measures:
            as for :func:`run_interleaved`, except that the arms may differ in ``warmup``, ``steps``
            and device.
        timeout_s: each child's wall-clock limit (its own steps and tail; the time it waits while the
            other arm steps is not counted).
        runner: a :class:`~._siterunner.SiteRunner`, or a kind (``None`` is ``auto``).
        sites: where each arm's child runs (:class:`~._site.Site`; ``None``: here), with a kind.
        duet: both arms' steps at once.

    Returns:
        ``(result of arm A, result of arm B)``.

    Raises:
        ValueError: bad arguments, as :func:`run_attempt` says, for either arm.
    """
    from ._siterunner import SiteRunner

    arguments = {"warmup": warmup, "steps": steps, "threads": threads, "timeout_s": timeout_s, "probe": probe,
                 "memory": memory, "measures": measures, "duet": duet}
    if isinstance(runner, SiteRunner):
        return runner.run_lockstep(workload_name, conditions_a, conditions_b, **arguments)
    if isinstance(runner, AttemptRunner):
        raise ValueError(f"lockstep needs a SiteRunner or a runner kind, got {type(runner).__name__}")
    by_key = {id(conditions_a): sites[0], id(conditions_b): sites[1]}
    with SiteRunner("auto" if runner is None else runner, workload_name, site_of=lambda c: by_key.get(id(c)),
                    sites=tuple(sites)) as owned:
        return owned.run_lockstep(workload_name, conditions_a, conditions_b, **arguments)
