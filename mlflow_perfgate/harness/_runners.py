"""The runner a comparison's attempts run in, and what is done while its server warms up.

:func:`runner_for` makes (or takes) the runner; :func:`ready_store_while_warming` prepares the
store, imports what the decision needs and checks the workload in a child, before any attempt.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from ..errors import InputError


def runner_for(runner: Any, workload: str, supervised: bool, *, sites: Any = None,
                lockstep: bool = False, declare: bool = False) -> tuple[Any, bool]:
    """The runner a call uses, and whether the call made it (then it closes it).

    Unsupervised: ``None``. A caller's ``AttemptRunner``: itself, not closed. A kind:
    ``attempt_runner(kind, workload)`` (with fork, its server already warming up); where the arms
    run apart (``sites``, :func:`mlflow_perfgate.sites.arm_sites`) or in lockstep rounds, a
    :class:`~mlflow_perfgate.workloads.SiteRunner` of that kind, a runner per arm and site.
    ``declare``: a fork runner's server reads the workload's declared conditions first thing.

    Raises:
        InputError: not a kind nor a runner, ``'fork'`` where fork is unavailable, or a workload
            module found nowhere on the path; before anything runs.
    """
    from ..workloads import AttemptRunner, RUNNER_KINDS, SiteRunner, attempt_runner, require_importable

    try:  # a module off the path, answered before any server or child starts (and without torch)
        if sites is None:  # else found in each arm's worktree or interpreter (_check_workload)
            require_importable(workload, child=supervised)
    except ValueError as exc:
        raise InputError(f"{exc}; nothing was run or logged") from None
    if not supervised:
        return None, False
    if isinstance(runner, AttemptRunner):
        return runner, False
    if runner not in RUNNER_KINDS:
        raise InputError(f"runner must be one of {list(RUNNER_KINDS)} or an AttemptRunner, got {runner!r}")
    try:
        if sites is None and not lockstep:
            return attempt_runner(runner, workload=workload, declare=declare), True
        placed = (None, None) if sites is None else (sites.of("baseline"), sites.of("candidate"))
        return SiteRunner(runner, workload, site_of=(lambda conditions: None) if sites is None else sites.site_of,
                          sites=placed, lockstep=lockstep), True
    except ValueError as exc:
        raise InputError(str(exc)) from None


@contextlib.contextmanager
def _runner_scope(runner: Any, workload: str, supervised: bool, *, lockstep: bool = False):
    """:func:`runner_for` as a ``with`` block: a runner the block made is closed when it ends."""
    active, owned = runner_for(runner, workload, supervised, lockstep=lockstep)
    try:
        yield active
    finally:
        if owned:
            active.close()


def _preload_for_decision(until: Any = None) -> None:
    """Import now what the comparison needs between and after its attempts.

    MLflow's database store (a SQLite or other database URI: its module, with SQLAlchemy and
    alembic, took a second to import here, and the first write pays it: the diagnosis's run in
    the main job), ``scipy.stats`` (each attempt's p10 is computed as it is written, between
    attempts: in the process that runs them when unsupervised) and matplotlib (the decision's
    plots). Called while a fork runner's server warms up, the imports cost the comparison no
    time of its own on a machine with a core to spare; nothing is opened or written.

    ``until``: a callable asked between the imports; once it answers true the rest is left (for
    later: a comparison refused on what it waited for is refused without them).
    """
    import mlflow

    from ..rules import preload_step_quantile
    from ..tracking import DATABASE_SCHEMES, preload_plotting, store_scheme

    def preload_store() -> None:
        if store_scheme(mlflow.get_tracking_uri()) in DATABASE_SCHEMES:
            from mlflow.store.tracking import sqlalchemy_store  # noqa: F401 - (binds no local 'mlflow')

    for step in (preload_store, preload_step_quantile, preload_plotting):
        if until is not None and until():
            return
        step()


def ready_store_while_warming(workload: str, runner: Any, timeout_s: float, *, arms: dict | None = None,
                               labels: dict | None = None) -> None:
    """What a comparison or a pipeline does while the fork runner's server warms up, then the workload's check.

    This process imports what it needs later (mlflow, the statistics, the plots) and makes a new
    SQLite store's tables on a side file (``tracking/_prepare``): no attempt runs yet, so nothing
    measured shares the machine with them. The side file becomes the store only once the
    workload is found good; refused, it goes, and nothing was written.

    Raises:
        InputError: see :func:`_check_workload`.
    """
    import mlflow

    from ..tracking import prepare_new_store

    prepared = prepare_new_store(mlflow.get_tracking_uri())
    try:
        _preload_for_decision()
        if arms is None:
            _check_workload(workload, runner, timeout_s)
        else:
            for arm, conditions in arms.items():
                _check_workload(workload, runner.runner_at(conditions), timeout_s,
                                where=f"the {arm}'s {labels[arm]}")
    except BaseException:
        if prepared is not None:
            prepared.discard()
        raise
    if prepared is not None:
        prepared.commit()


def _check_workload(workload: str, runner: Any, timeout_s: float, where: str | None = None) -> None:
    """Refuse a workload whose name does not resolve, found where its code may run.

    Supervised, in one of the runner's children (the fork runner's server imports the module
    under supervision; the spawn runner starts a child for it): the module's code never runs
    here. In-process (``runner`` is ``None``) the attempts run it here anyway. An import that
    crashes, hangs or raises otherwise is not refused: each attempt then fails, saying why.

    Raises:
        InputError: no such module, an ``ImportError`` in it, or no such factory.
    """
    note = None
    try:
        if runner is None:
            from ..workloads import resolve_workload  # imports torch: in-process attempts run here anyway

            resolve_workload(workload)
        else:
            note = runner.check(workload, timeout_s=timeout_s)
    except ValueError as exc:
        raise InputError(f"{where + ': ' if where else ''}{exc}; nothing was run or logged") from None
    if note:
        print(f"warning: workload {workload!r} failed to import in a child{' (' + where + ')' if where else ''} "
              f"({note.splitlines()[0]}); its attempts will fail", file=sys.stderr)
