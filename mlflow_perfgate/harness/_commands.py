"""The application's entry points: :func:`compare`, :func:`diagnose` and :func:`pipeline`.

Beside them, the change a diagnosis's hypothesis calls for (:func:`candidate_change_and_reason`)
and the exact ``compare`` command that tests a plan (:func:`compare_command`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

from .. import rules
from ..errors import InputError

from ._comparison import Comparison
from ._conditions import (INTERLEAVE_MODES, LOCKSTEP_MODES, base_conditions, require_fixed_conditions,
                          with_declared_conditions)
from ._planning import RECOMMENDED, _cli_value, plan_comparison
from ._runners import ready_store_while_warming, _runner_scope
from ._signals import terminate_as_exception


def compare(
    workload: str,
    conditions: dict,
    change: dict,
    *,
    attempts: int | str | None = None,
    group: str | None = None,
    experiment_name: str | None = None,
    objective: str | None = None,
    supervised: bool = True,
    runner: Any = "auto",
    timeout_s: float = 300.0,
    threads: int | None = None,
    until_decisive: bool | None = None,
    max_attempts: int | None = None,
    progress: bool = True,
    hypothesis: str = "the candidate change improves the objective",
    on_attempt: Callable[[str, Any], None] | None = None,
    parent_run_id: str | None = None,
    resume: bool = False,
    interleave: str | None = None,
    allow_undecidable: bool = False,
    keep_worktrees: bool = False,
    new_plan: bool = False,
    **evaluate_kwargs: Any,
) -> dict:
    """Run baseline and candidate attempts interleaved (ABBA) under a comparison run, then decide.

    What is left out (``None``: ``attempts``, ``interleave``, ``threads``, the conditions'
    ``steps``, and ``method`` and ``latency`` among ``evaluate_kwargs``) comes from
    :data:`RECOMMENDED`, the configuration validated on a shared machine (the paired method on
    ``p10``, steps interleaved, one thread, 10 rounds of 30 steps), or falls back where it does
    not apply to this comparison (:func:`configure`); the comparison run's tag
    ``perfgate.configuration`` and the report say which. ``method="seed"`` is the
    specification's rule, exact, on its figure and sample (``raw``, 5 attempts of 10 steps).

    Args:
        workload: ``tinylm`` or a factory ``module:function``.
        conditions: the fixed conditions (TinyLM fills in the specification's baseline for the
            ones not given); ``warmup`` and ``steps`` are conditions too.
        change: ``{variable: candidate_value}``, exactly one variable.
        attempts: attempts per arm (before any extra looks): one per arm in each ABBA round, so
            also the rounds (default 10; 5 with the ``seed`` method). ``"auto"``: the rounds the latest calibration of this workload, its
            conditions and this host calls for (:func:`auto_rounds`; ``mlflow-perfgate calibrate``),
            for the paired method with ``interleave="steps"``; with ``until_decisive`` and no
            ``max_attempts``, 4 times those.
        group: the comparison id (default: a new one).
        objective: ``latency`` (default), ``memory`` or ``throughput``.
        supervised: each attempt in a child process (a crash, hang or kill is a failed attempt).
        runner: what starts those children: ``auto`` (default: one warm server for the whole
            comparison forks each attempt's child, where fork is available), ``fork``,
            ``spawn`` (a fresh interpreter per attempt), or an ``AttemptRunner`` the caller
            owns. A kind's runner is closed when the comparison ends, also on error.
        timeout_s: per-attempt wall-clock limit.
        threads: torch threads for every attempt (default 1, the recommended configuration's).
        until_decisive: while the answer is ``rerun`` for lack of evidence, add interleaved
            attempt pairs, up to ``max_attempts`` per arm (see ``evaluate_group``'s ``look``;
            default 4 times ``attempts``). ``None`` (the default): on in ``non_regression`` mode
            with the paired or robust method, up to :data:`NON_REGRESSION_CAP` (2) times
            ``attempts`` unless ``max_attempts`` says, except when resuming; off otherwise.
        progress: show a progress bar on stderr.
        parent_run_id: a run to nest the comparison under (the ``mlflow run`` project run).
        resume: add to a group that already holds attempts (a re-run of the same comparison):
            its comparison run is reused and the ABBA rounds continue; without it such a
            group is refused, never half-mixed.
        interleave: ``attempts`` (the ABBA order of whole attempts, each in its own
            child), ``steps`` (the default where both arms can share a process): each ABBA round is one child holding both arms (each built once,
            both warmed up, then their measured steps alternate A B B A ...; the arm that leads
            alternates between rounds), which gives one attempt per arm with the round's
            ``pair``; a failing arm fails its own attempt, a crash of the child both. The child's
            limit is twice ``timeout_s``. Both arms must live in one process: the same workload
            and device, warmup and steps, revision and python (refused before anything runs
            otherwise, as is the memory objective on CUDA, where the arms share one allocator).
            ``lockstep`` (the default where they cannot): each round is one child per arm, at
            the arm's site (its revision's worktree, its interpreter), their measured steps
            alternated A B B A ... by this process, each child timing its own; a child that
            crashes fails its own arm's attempt only. ``duet``: the same children, both arms'
            steps at once.
        keep_worktrees: leave the worktrees of the revisions compared (``revision`` conditions,
            :mod:`mlflow_perfgate.sites`) in place when the comparison ends.
        new_plan: with ``resume``, judge the group under this call's policy although its rounds were
            planned under another (without it such a resume is refused, naming both); its earlier
            looks' spending is then not carried over.
        allow_undecidable: run a comparison that cannot mean anything all the same (to check a
            pipeline): by default a new group planned below ``min_valid_runs`` attempts per arm,
            or below the fewest with which its method can accept, is refused before anything
            runs (an :class:`InputError` saying how many are needed).
        **evaluate_kwargs: thresholds and options for ``evaluate_group``, or ``policy``, a
            :class:`~mlflow_perfgate.rules.Policy` holding them (the command line's: made and
            checked once, where the options are read); what it was not given (``policy.given``)
            is configured as for keywords left out.

    Returns:
        ``evaluate_group``'s result, with ``comparison_run_id`` (and ``rounds_auto``, the plan
        :func:`auto_rounds` made, when ``attempts="auto"``).
    """
    with terminate_as_exception():  # a stop while the plan reads a declaration (a runner may exist): said, not a kill
        plan = plan_comparison(workload, conditions, change, attempts=attempts, group=group,
                                experiment_name=experiment_name, objective=objective, supervised=supervised,
                                runner=runner, timeout_s=timeout_s, threads=threads, until_decisive=until_decisive,
                                max_attempts=max_attempts, progress=progress, hypothesis=hypothesis,
                                on_attempt=on_attempt, parent_run_id=parent_run_id, resume=resume,
                                interleave=interleave, allow_undecidable=allow_undecidable,
                                keep_worktrees=keep_worktrees, new_plan=new_plan, evaluate_kwargs=evaluate_kwargs)
    return Comparison(plan).run()


# --- the change a diagnosis proposes: bf16 only where the device computes it natively ------------

def candidate_change_for(synthesis: dict, baseline: dict) -> dict | None:
    """The single change a hypothesis calls for (documented in docs/explanation/decisions.md).

    The same answer as :func:`candidate_change_and_reason`, without the reason.
    """
    return candidate_change_and_reason(synthesis, baseline)[0]


def candidate_change_and_reason(synthesis: dict, baseline: dict) -> tuple[dict | None, str]:
    """The single change a hypothesis calls for, and why, from this table (first row that holds):

    ==========================================  ==============================  =====================
    hypothesis (``primary_signal``, hotspot)    when                            proposed change
    ==========================================  ==============================  =====================
    memory pressure (``memory``)                ``checkpoint`` is off           ``checkpoint=true``
    memory pressure                             ``checkpoint`` is on            none
    ``dataloader`` hotspot                      always                          ``num_workers`` =
                                                                                max(2, 2 x current)
    compute hotspot (``forward``,               ``dtype`` is not fp32           none
    ``backward``, ``optimizer``)
    compute hotspot                             bf16 is native on the           ``dtype=bf16``
                                                baseline's ``device``
                                                (:func:`~mlflow_perfgate.
                                                workloads.native_bf16`)
    compute hotspot                             the baseline declares no        ``dtype=bf16``
                                                ``device`` (not checked)
    compute hotspot                             bf16 is emulated there          none
    anything else                                                               none
    ==========================================  ==============================  =====================

    Emulated bf16 is no candidate: on CPUs without AVX-512 BF16 or AMX a step under bf16
    autocast ran 1.9 to 3.1 times slower (TinyLM, GPT-2), so a comparison would only confirm
    the slowdown. The answer is none, and the reason says what to do instead.

    Returns:
        ``(change, reason)``: ``change`` is ``{variable: value}`` or ``None``; ``reason`` says in
        words why this change, or why none.
    """
    from ..tracking import canonical_value

    signal = synthesis.get("primary_signal")
    if signal == "memory":
        if canonical_value(baseline.get("checkpoint", False)) == "false":
            return {"checkpoint": True}, "memory pressure: activation checkpointing trades compute for memory"
        return None, "memory pressure, and activation checkpointing is already on"
    hotspot = synthesis.get("hotspot")
    if signal == "time" and hotspot == "dataloader":
        current = int(baseline.get("num_workers", 0) or 0)
        return {"num_workers": max(2, 2 * current)}, "dataloader hotspot: more DataLoader workers"
    if signal == "time" and hotspot in ("forward", "backward", "optimizer"):
        dtype = canonical_value(baseline.get("dtype", "fp32"))
        if dtype != "fp32":
            return None, f"{hotspot} hotspot, and dtype is already {dtype}"
        device = baseline.get("device")
        if device is None:
            return {"dtype": "bf16"}, f"{hotspot} hotspot: bf16 (the baseline declares no device to check)"
        from ..workloads import native_bf16

        native, why = native_bf16(str(device).strip().lower())
        if native:
            return {"dtype": "bf16"}, f"{hotspot} hotspot: bf16, native here ({why})"
        return None, (f"{hotspot} hotspot, but bf16 would be slower here ({why}); "
                      "look at the profile's top operators, or compare on hardware with native bf16")
    return None, "no strong signal: collect more evidence"


def compare_command(workload: str, plan: dict, attempts: int | None, experiment_name: str | None,
                    objective: str) -> str:
    """The exact ``mlflow-perfgate compare`` command that tests a plan (``attempts=None``: its defaults')."""
    variable = plan["changed_variable"]
    parts = ["mlflow-perfgate", "compare", "--workload", workload]
    from ..tracking import canonical_value

    for key, value in plan["baseline"].items():
        if key in (variable, "repeats"):
            continue
        parts += ["--set", f"{key}={_cli_value(canonical_value(value))}"]
    parts += ["--change", f"{variable}={_cli_value(canonical_value(plan['candidate'][variable]))}",
              *(() if attempts is None else ("--attempts", str(attempts))), "--objective", objective]
    if experiment_name:
        parts += ["--experiment", experiment_name]
    return shlex.join(parts)


@contextlib.contextmanager
def _stderr_into(path: str):
    """Send this process's file descriptor 2 into ``path`` for the block.

    ``torch.profiler`` (Kineto, in C++) writes its own lines (``profiler_start``,
    ``profiler_stop``, warnings) straight to the descriptor, past ``sys.stderr``: only a
    descriptor-level redirect keeps them off the user's terminal. The file is kept as an artifact.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def diagnose(
    workload: str,
    conditions: dict,
    *,
    attempts: int | None = None,
    capacity_mib: float | None = None,
    experiment_name: str | None = None,
    steps: int = 5,
    profile: bool = True,
    capacity_alert_ratio: float = 0.90,
    hotspot_alert_share_pct: float = 40.0,
    parent_run_id: str | None = None,
    supervised: bool = True,
    timeout_s: float = 300.0,
    threads: int | None = None,
    runner: Any = None,
) -> dict:
    """Evidence -> hypothesis -> single-variable plan, logged as a diagnosis run.

    Checks the fixed conditions first (:func:`require_fixed_conditions`), then collects the
    evidence supervised, as an attempt runs (``workloads.run_diagnosis``: a spawned, contained
    child under ``timeout_s`` and ``threads``, whose output, the profiler's included, stays off
    the terminal): it builds the workload, runs the correctness probe, times its
    non-overlapping stages (time evidence), estimates or measures its memory (memory evidence)
    and profiles a few steps (operator table and trace). Then ``synthesize_evidence`` and
    ``design_single_variable_experiment`` with the change :func:`candidate_change_and_reason`
    draws from the hypothesis. The diagnosis run starts when the diagnosis starts and ends when
    it is logged.

    Args:
        attempts: the attempts per arm the proposed comparison runs (its command's
            ``--attempts``; ``None``: the comparison's defaults decide, :func:`configure`).
        capacity_mib: the memory budget of the target device, MiB; ``None`` (or 0) for this
            machine's (the GPU's memory, or the RAM on the CPU).
        supervised: collect in a child process (the default); ``False`` collects here.
        timeout_s: wall-clock limit of the collection (supervised), seconds.
        threads: torch threads during the collection (default: the current count).
        runner: supervised, what starts the collecting child: ``None`` (default) or ``spawn``, a
            fresh interpreter; an ``AttemptRunner`` the caller owns (a fork runner's warm server
            forks the child: :func:`pipeline` shares its comparison's runner this way); ``fork``
            or ``auto``, a fork runner made for this diagnosis alone and closed after it (its
            server's start costs what a spawned child's does).

    Returns:
        ``{"bundle", "synthesis", "plan", "objective", "change_reason", "diagnosis_run_id",
        "diagnosis_run_url", "command"}``.

    Raises:
        InputError: missing fixed conditions, or a workload name that does not resolve (nothing
            is logged).
        WorkloadFailed: the workload crashed, hung, exited or raised while its evidence was
            collected; a FAILED diagnosis run says why (``run_id``).
    """
    started_ms = int(time.time() * 1000)
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer, got {attempts!r}")
    from ..workloads import AttemptRunner

    base = with_declared_conditions(  # a caller's runner reads it (pipeline's: its warm server forks the child)
        workload, base_conditions(workload, conditions, RECOMMENDED["attempts"] if attempts is None else attempts),
        runner=runner if isinstance(runner, AttemptRunner) else None)
    require_fixed_conditions(base)
    from ..errors import WorkloadFailed

    tmp = tempfile.mkdtemp(prefix="perfgate-diagnose-")
    try:
        # collected here, the profiler's own lines would reach the terminal: they go to a file instead
        quiet = contextlib.nullcontext() if supervised else _stderr_into(os.path.join(tmp, "profiler.log"))
        # None: the spawn runner's child, as before runners existed
        with _runner_scope("spawn" if runner is None else runner, workload, supervised) as active:
            from ..tracking import log_diagnosis, log_failed_diagnosis, run_url  # mlflow, while a server warms up
            from ..workloads import run_diagnosis

            try:
                with quiet:
                    evidence = run_diagnosis(workload, base, out_dir=tmp, steps=steps,
                                             capacity_mib=capacity_mib or None, profile=profile, threads=threads,
                                             timeout_s=timeout_s, supervised=supervised, runner=active)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        if not evidence.ok:
            run_id = log_failed_diagnosis(evidence.failure, evidence.failure_detail, base,
                                          experiment_name=experiment_name, workload=workload,
                                          parent_run_id=parent_run_id)
            raise WorkloadFailed(f"diagnosis failed: {evidence.failure}, while the workload's evidence was collected "
                                 f"(FAILED diagnosis run {run_id})", run_id=run_id)
        bundle, files = evidence.bundle, evidence.files
        synthesis = rules.synthesize_evidence(bundle, capacity_alert_ratio=capacity_alert_ratio,
                                              hotspot_alert_share_pct=hotspot_alert_share_pct)
        change, change_reason = candidate_change_and_reason(synthesis, base)
        try:
            plan = rules.design_single_variable_experiment(synthesis, base, change)
        except KeyError as exc:  # the specification's word for missing fixed conditions
            raise InputError(str(exc.args[0])) from None
        objective = rules.objective_for_signal(synthesis.get("primary_signal", "none"))
        run_id = log_diagnosis(bundle, synthesis, plan, experiment_name=experiment_name, files=files,
                               objective=objective, workload=workload, parent_run_id=parent_run_id,
                               start_time=started_ms, change_reason=change_reason)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    command = compare_command(workload, plan, attempts, experiment_name, objective) \
        if plan["action"] == "run_comparison" else None
    return {"bundle": bundle, "synthesis": synthesis, "plan": plan, "objective": objective,
            "change_reason": change_reason, "diagnosis_run_id": run_id, "diagnosis_run_url": run_url(run_id),
            "command": command}


def pipeline(
    workload: str,
    conditions: dict,
    *,
    attempts: int | None = None,
    capacity_mib: float | None = None,
    fallback_change: dict | None = None,
    experiment_name: str | None = None,
    steps: int = 5,
    progress: bool = True,
    supervised: bool = True,
    timeout_s: float = 300.0,
    runner: Any = "auto",
    interleave: str | None = None,
    threads: int | None = None,
    **evaluate_kwargs: Any,
) -> dict:
    """The main job: diagnose, compare the plan's single change under the diagnosis's objective, decide.

    The comparison's configuration is :func:`compare`'s: what is left out (``attempts``,
    ``interleave``, ``threads``, ``method``, ``latency``, the measured ``steps`` among the
    conditions) is the recommended one, or falls back where it does not apply (the memory
    objective the diagnosis often chooses is judged by the specification's rule). The diagnosis
    collects its evidence over ``steps`` steps on ``threads`` (default 1, as the comparison's).

    When the diagnosis finds no strong signal (or is blocked by correctness), the comparison
    tests ``fallback_change`` on latency instead, and says so; without a fallback it stops after
    the diagnosis. Under ``mlflow run`` (``MLFLOW_RUN_ID`` set) the diagnosis and the comparison
    nest under the project's run. ``runner`` and ``interleave`` are :func:`compare`'s; one runner
    serves the diagnosis and the comparison (with fork, one warm server forks the diagnosis's
    child and every attempt's: ``import torch`` is paid once, while this process imports mlflow).
    ``supervised``, ``timeout_s`` (the diagnosis's limit and each attempt's) and ``threads``
    apply to the diagnosis and to every attempt.

    Returns:
        ``{"diagnosis": ..., "decision": <evaluate_group's result or None>, "change": ...,
        "objective": ..., "fallback_used": bool}``.
    """
    if interleave is not None and interleave not in INTERLEAVE_MODES:  # before the diagnosis; compare checks the rest
        raise InputError(f"interleave must be one of {list(INTERLEAVE_MODES)}, got {interleave!r}")
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer, got {attempts!r}")
    base = with_declared_conditions(workload, base_conditions(workload, conditions, attempts or 1))
    require_fixed_conditions(base)  # before a server starts
    if workload != "tinylm":  # what the factory declares, read once for the diagnosis and the comparison
        conditions = {key: value for key, value in base.items() if key != "repeats"}
    evidence_threads = RECOMMENDED["threads"] if threads is None else threads  # the comparison's default too
    # One runner for the diagnosis and the comparison: with fork, one warm server forks the
    # diagnosis's child and every attempt's, and it warms up while this process imports mlflow.
    with _runner_scope(runner, workload, supervised, lockstep=interleave in LOCKSTEP_MODES) as active:
        ready_store_while_warming(workload, active, timeout_s)  # a new store's tables, during the warm-up
        parent = os.environ.get("MLFLOW_RUN_ID") or None
        chosen_objective = evaluate_kwargs.pop("objective", None)
        if evaluate_kwargs.get("policy") is not None and "objective" in evaluate_kwargs["policy"].given:
            chosen_objective = evaluate_kwargs["policy"].objective
        report = diagnose(workload, conditions, attempts=attempts, capacity_mib=capacity_mib,
                          experiment_name=experiment_name, steps=steps, parent_run_id=parent,
                          supervised=supervised, timeout_s=timeout_s, threads=evidence_threads, runner=active)
        plan = report["plan"]
        fallback_used = plan["action"] != "run_comparison"
        if fallback_used:
            if plan["action"] == "fix_correctness_first" or not fallback_change:
                return {"diagnosis": report, "decision": None, "change": None, "objective": None,
                        "fallback_used": False}
            change, objective = dict(fallback_change), chosen_objective or "latency"
        else:
            variable = plan["changed_variable"]
            change, objective = {variable: plan["candidate"][variable]}, chosen_objective or report["objective"]
        decision = compare(workload, conditions, change, attempts=attempts, experiment_name=experiment_name,
                           objective=objective, progress=progress, supervised=supervised, timeout_s=timeout_s,
                           hypothesis=report["synthesis"]["hypothesis"], parent_run_id=parent, runner=active,
                           interleave=interleave, threads=threads, **evaluate_kwargs)
        return {"diagnosis": report, "decision": decision, "change": change, "objective": objective,
                "fallback_used": fallback_used}
