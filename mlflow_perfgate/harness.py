"""Comparisons and diagnoses: PyTorch attempts (``workloads``) recorded and judged in MLflow (``tracking``).

This is the application layer under the CLI and the MLproject entry points: it runs the
attempts, logs each one as soon as it ends (a failed one too), and leaves every verdict to the
rules through ``evaluate_group``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

from . import rules
from .rules._errors import InputError, SingleVariableError, StoreUnavailable

__all__ = [
    "DEFAULT_CONDITIONS",
    "pipeline",
    "compare",
    "diagnose",
    "candidate_change_for",
    "compare_command",
]

#: What a TinyLM comparison fixes when the user does not say (the specification's baseline).
DEFAULT_CONDITIONS = {
    "model": "TinyLM",
    "input_shape": "4,128",
    "batch_size": 4,
    "dtype": "fp32",
    "device": "cpu",
    "measurement_method": "wall_median_step_ms",
    "checkpoint": False,
    "num_workers": 0,
    "warmup": 2,
    "steps": 10,
}


def _base_conditions(workload: str, conditions: dict, attempts: int) -> dict:
    base = dict(DEFAULT_CONDITIONS) if workload == "tinylm" else {}
    base.update(conditions)
    if "input_shape" in conditions and "batch_size" not in conditions and workload == "tinylm":
        shape = _shape(conditions["input_shape"])
        if shape:
            base["batch_size"] = shape[0]
    base["repeats"] = attempts
    return base


def _shape(value: Any) -> list[int] | None:
    """``(4, 128)``, ``"4,128"``, ``"4x128"`` -> ``[4, 128]``; None when it is no shape."""
    from .tracking import canonical_value

    try:
        parsed = json.loads(canonical_value(value))
    except ValueError:
        return None
    return parsed if isinstance(parsed, list) and all(isinstance(v, int) for v in parsed) else None


def _validated_change(base: dict, change: dict, hypothesis: str) -> tuple[str, Any]:
    """The change checked by the specification's single-variable design."""
    if not isinstance(change, dict) or len(change) != 1:
        raise SingleVariableError(f"--change must name exactly one variable, got {sorted(map(str, change or {}))}")
    from .tracking import canonical_value

    evidence = {"status": "ready_for_experiment", "hypothesis": hypothesis}
    variable, value = next(iter(change.items()))
    if variable in base and canonical_value(base[variable]) == canonical_value(value):
        raise SingleVariableError(f"the candidate must really change {variable!r}; both are {canonical_value(value)!r}")
    try:
        plan = rules.design_single_variable_experiment(evidence, base, {variable: value})
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from None
    except ValueError as exc:
        raise SingleVariableError(str(exc)) from None
    return plan["changed_variable"], value


def _gpu_name(conditions: dict) -> str:
    """The GPU an attempt ran on, for the environment fingerprint ("none" on the CPU)."""
    if str(conditions.get("device", "cpu")).lower().startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(str(conditions["device"])))
    return "none"


def _outcome(result, conditions: dict) -> dict:
    """An :class:`AttemptResult` as the arguments of ``log_attempt`` / ``StartedAttempt.finish``."""
    from .tracking import METRIC

    metrics = {}
    if result.peak_mem_mib is not None:
        metrics[METRIC.PEAK_MEM] = result.peak_mem_mib
    if result.throughput_tok_s is not None:
        metrics[METRIC.THROUGHPUT] = result.throughput_tok_s
    if result.wall_s is not None:
        metrics[METRIC.ATTEMPT_WALL] = result.wall_s
    environment = {"gpu_name": _gpu_name(conditions)}
    if result.torch_threads is not None:
        environment["torch_threads"] = result.torch_threads
    return dict(
        latency_ms=result.latency_ms if result.ok else None, quality=result.quality if result.ok else None,
        ok=result.ok, failure=None if result.ok else result.failure[:7900], validity=result.validity,
        metrics=metrics or None, step_times_ms=list(result.step_times_ms) or None, environment=environment,
        failure_detail=result.failure_detail if not result.ok else None, mem_status=result.mem_status,
    )


def _finish(started, result, conditions: dict) -> str | None:
    from .tracking import AttemptDeferred

    try:
        return started.finish(**_outcome(result, conditions))
    except AttemptDeferred as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return None


class Terminated(BaseException):
    """SIGTERM reached a running comparison (a cancelled CI job): stop, end every run with the reason."""


@contextlib.contextmanager
def _terminate_as_exception():
    """Turn SIGTERM into :class:`Terminated` for the block (main thread only), so the running child is
    killed and the comparison ended KILLED with the reason instead of the process vanishing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"terminated by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def compare(
    workload: str,
    conditions: dict,
    change: dict,
    *,
    attempts: int = 5,
    group: str | None = None,
    experiment_name: str | None = None,
    objective: str | None = None,
    supervised: bool = True,
    runner: Any = "auto",
    timeout_s: float = 300.0,
    threads: int | None = None,
    until_decisive: bool = False,
    max_attempts: int | None = None,
    progress: bool = True,
    hypothesis: str = "the candidate change improves the objective",
    on_attempt: Callable[[str, Any], None] | None = None,
    parent_run_id: str | None = None,
    resume: bool = False,
    **evaluate_kwargs: Any,
) -> dict:
    """Run baseline and candidate attempts interleaved (ABBA) under a comparison run, then decide.

    Args:
        workload: ``tinylm`` or a factory ``module:function``.
        conditions: the fixed conditions (TinyLM fills in the specification's baseline for the
            ones not given); ``warmup`` and ``steps`` are conditions too.
        change: ``{variable: candidate_value}``, exactly one variable.
        attempts: attempts per arm (before any extra looks).
        group: the comparison id (default: a new one).
        objective: ``latency`` (default), ``memory`` or ``throughput``.
        supervised: each attempt in a child process (a crash, hang or kill is a failed attempt).
        runner: what starts those children: ``auto`` (default: one warm server for the whole
            comparison forks each attempt's child, where fork is available), ``fork``,
            ``spawn`` (a fresh interpreter per attempt), or an ``AttemptRunner`` the caller
            owns. A kind's runner is closed when the comparison ends, also on error.
        timeout_s: per-attempt wall-clock limit.
        threads: torch threads for every attempt (default: the current count).
        until_decisive: while the answer is ``rerun`` for lack of evidence, add interleaved
            attempt pairs, up to ``max_attempts`` per arm (see ``evaluate_group``'s ``look``).
        progress: show a progress bar on stderr.
        parent_run_id: a run to nest the comparison under (the ``mlflow run`` project run).
        resume: add to a group that already holds attempts (a re-run of the same comparison):
            its comparison run is reused and the ABBA rounds continue; without it such a
            group is refused, never half-mixed.
        **evaluate_kwargs: thresholds and options for ``evaluate_group``.

    Returns:
        ``evaluate_group``'s result, with ``comparison_run_id``.
    """
    if type(attempts) is not int or attempts < 1:
        raise InputError(f"attempts must be a positive integer, got {attempts!r}")
    if until_decisive and (type(max_attempts) is not int or max_attempts < attempts):
        raise InputError(f"max_attempts must be an integer >= attempts ({attempts}), got {max_attempts!r}")
    objective = objective or "latency"
    policy_options = {k: v for k, v in evaluate_kwargs.items() if k != "env_mismatch"}
    rules.Policy(objective=objective, **policy_options)  # every option checked before anything runs
    base = _base_conditions(workload, conditions, attempts)
    variable, value = _validated_change(base, change, hypothesis)
    candidate = {**base, variable: value}
    from tqdm import tqdm  # the checks above need none of these

    from .tracking import end_run, evaluate_group, group_state, start_attempt, start_comparison, sync
    from .workloads import RUNNER_KINDS, AttemptRunner, attempt_runner, interleave, run_attempt

    if supervised and not isinstance(runner, AttemptRunner) and runner not in RUNNER_KINDS:
        raise InputError(f"runner must be one of {list(RUNNER_KINDS)} or an AttemptRunner, got {runner!r}")

    # One runner for the whole comparison: with fork, one warm server for all its attempts.
    owned = supervised and not isinstance(runner, AttemptRunner)
    active = runner if supervised and not owned else None
    if owned:
        active = attempt_runner(runner, workload=workload)
    try:
        _check_workload(workload, active, timeout_s)  # before anything is written
        group = group or f"{workload.split(':')[-1]}-{variable}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        held = group_state(group, experiment_name=experiment_name)
        if held["attempts"] and not resume:
            raise InputError(
                f"group {group!r} already holds {held['attempts']} attempts; pass --resume (resume=True) to add this "
                "comparison's attempts to them, or choose another --group")
        if resume and held["comparison_run_id"]:
            comparison_id = held["comparison_run_id"]
        else:
            comparison_id = start_comparison(group, base, variable, objective=objective,
                                             experiment_name=experiment_name, workload=workload,
                                             parent_run_id=parent_run_id)
    except BaseException:
        if owned:
            active.close()
        raise
    arms = {"baseline": base, "candidate": candidate}
    next_pair = held["next_pair"]
    deferred: list[str] = []  # attempts kept in the journal while the server was down

    def run_block(order: list[str], bar) -> None:
        nonlocal next_pair
        for index, arm in enumerate(order):
            started = start_attempt(group, arm, arms[arm], experiment_name=experiment_name,
                                    parent_run_id=comparison_id, pair=next_pair + index // 2,
                                    environment={"gpu_name": _gpu_name(arms[arm])})
            result = run_attempt(workload, arms[arm], supervised=supervised, timeout_s=timeout_s, threads=threads,
                                 runner=active)
            if _finish(started, result, arms[arm]) is None:
                deferred.append(started.attempt_id)
            if on_attempt is not None:
                on_attempt(arm, result)
            bar.set_postfix_str(f"{arm} {'%.3g ms' % result.latency_ms if result.ok else result.failure[:40]}")
            bar.update(1)
        next_pair += len(order) // 2

    try:
        with _terminate_as_exception(), tqdm(total=2 * attempts, desc=f"compare {variable}", unit="attempt",
                                             disable=not progress, file=sys.stderr) as bar:
            run_block(interleave(attempts), bar)
            done, look = attempts, 1
            while until_decisive:
                interim = evaluate_group(group, experiment_name=experiment_name, objective=objective,
                                         dry_run=True, look=look, max_looks=_max_looks(attempts, max_attempts),
                                         **evaluate_kwargs)
                if interim["decision"] != "rerun" or done >= max_attempts:
                    break
                if interim["reason"] not in ("insufficient_valid_runs", "inconclusive"):
                    break
                extra = min(2, max_attempts - done)
                bar.total += 2 * extra
                run_block(interleave(extra), bar)
                done, look = done + extra, look + 1
            if deferred:  # the server may be back: send what waits in the journal before deciding
                with contextlib.suppress(StoreUnavailable):
                    sync()
            final_kwargs = dict(evaluate_kwargs)
            if until_decisive:
                final_kwargs.update(look=look, max_looks=_max_looks(attempts, max_attempts))
            result = evaluate_group(group, experiment_name=experiment_name, objective=objective, **final_kwargs)
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, Terminated) else f"{type(exc).__name__}: {exc}"
        try:
            end_run(comparison_id, "KILLED", reason=f"compare stopped before its decision: {reason}"[:2000])
        except Exception:  # the server may be what failed; the original error matters
            pass
        raise
    finally:
        if owned and active is not None:
            active.close()
    result["comparison_run_id"] = comparison_id
    return result


def _check_workload(workload: str, runner: Any, timeout_s: float) -> None:
    """Refuse a workload whose name does not resolve, found where its code may run.

    Supervised, in one of the runner's children (the fork runner's server imports the module
    under supervision; the spawn runner starts a child for it): the module's code never runs
    here. In-process (``runner`` is ``None``) the attempts run it here anyway. An import that
    crashes, hangs or raises otherwise is not refused: each attempt then fails, saying why.

    Raises:
        InputError: no such module, an ``ImportError`` in it, or no such factory.
    """
    from .workloads import resolve_workload

    note = None
    try:
        if runner is None:
            resolve_workload(workload)
        else:
            note = runner.check(workload, timeout_s=timeout_s)
    except ValueError as exc:
        raise InputError(f"{exc}; nothing was run or logged") from None
    if note:
        print(f"warning: workload {workload!r} failed to import in a child ({note.splitlines()[0]}); "
              "its attempts will fail", file=sys.stderr)


def _max_looks(attempts: int, max_attempts: int | None) -> int:
    if max_attempts is None:
        return 1
    return 1 + -(-(max_attempts - attempts) // 2)


# --- Issue 14, point 3: a compute hotspot proposes bf16 only where the device computes it natively.

def candidate_change_for(synthesis: dict, baseline: dict) -> dict | None:
    """The single change a hypothesis calls for (documented in the README).

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
    from .tracking import canonical_value

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
        from .workloads import native_bf16

        native, why = native_bf16(str(device).strip().lower())
        if native:
            return {"dtype": "bf16"}, f"{hotspot} hotspot: bf16, native here ({why})"
        return None, (f"{hotspot} hotspot, but bf16 would be slower here ({why}); "
                      "look at the profile's top operators, or compare on hardware with native bf16")
    return None, "no strong signal: collect more evidence"


def compare_command(workload: str, plan: dict, attempts: int, experiment_name: str | None,
                    objective: str) -> str:
    """The exact ``mlflow-perfgate compare`` command that tests a plan."""
    variable = plan["changed_variable"]
    parts = ["mlflow-perfgate", "compare", "--workload", workload]
    from .tracking import canonical_value

    for key, value in plan["baseline"].items():
        if key in (variable, "repeats"):
            continue
        parts += ["--set", f"{key}={_cli_value(canonical_value(value))}"]
    parts += ["--change", f"{variable}={_cli_value(canonical_value(plan['candidate'][variable]))}",
              "--attempts", str(attempts), "--objective", objective]
    if experiment_name:
        parts += ["--experiment", experiment_name]
    return shlex.join(parts)


def _cli_value(text: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip() for part in text[1:-1].split(","))
    return text


def diagnose(
    workload: str,
    conditions: dict,
    *,
    attempts: int = 5,
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
) -> dict:
    """Evidence -> hypothesis -> single-variable plan, logged as a diagnosis run.

    Collects the evidence supervised, as an attempt runs (``workloads.run_diagnosis``: a
    spawned, contained child under ``timeout_s`` and ``threads``): it builds the workload, runs
    the correctness probe, times its non-overlapping stages (time evidence), estimates or
    measures its memory (memory evidence) and profiles a few steps (operator table and trace).
    Then ``synthesize_evidence`` and ``design_single_variable_experiment`` with the change
    :func:`candidate_change_for` draws from the hypothesis.

    Args:
        supervised: collect in a child process (the default); ``False`` collects here.
        timeout_s: wall-clock limit of the collection (supervised), seconds.
        threads: torch threads during the collection (default: the current count).

    Returns:
        ``{"bundle", "synthesis", "plan", "objective", "diagnosis_run_id", "command"}``.

    Raises:
        InputError: the workload's name does not resolve (nothing is logged).
        WorkloadFailed: the workload crashed, hung, exited or raised while its evidence was
            collected; a FAILED diagnosis run says why (``run_id``).
    """
    from .errors import WorkloadFailed
    from .tracking import log_diagnosis, log_failed_diagnosis, run_url
    from .workloads import run_diagnosis

    base = _base_conditions(workload, conditions, attempts)
    tmp = tempfile.mkdtemp(prefix="perfgate-diagnose-")
    try:
        try:
            evidence = run_diagnosis(workload, base, out_dir=tmp, steps=steps, capacity_mib=capacity_mib,
                                     profile=profile, threads=threads, timeout_s=timeout_s, supervised=supervised)
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
        change = candidate_change_for(synthesis, base)
        try:
            plan = rules.design_single_variable_experiment(synthesis, base, change)
        except KeyError as exc:  # the specification's word for missing fixed conditions
            raise InputError(str(exc.args[0])) from None
        objective = rules.objective_for_signal(synthesis.get("primary_signal", "none"))
        run_id = log_diagnosis(bundle, synthesis, plan, experiment_name=experiment_name, files=files,
                               objective=objective, workload=workload, parent_run_id=parent_run_id)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    command = compare_command(workload, plan, attempts, experiment_name, objective) \
        if plan["action"] == "run_comparison" else None
    return {"bundle": bundle, "synthesis": synthesis, "plan": plan, "objective": objective,
            "diagnosis_run_id": run_id, "diagnosis_run_url": run_url(run_id), "command": command}


def pipeline(
    workload: str,
    conditions: dict,
    *,
    attempts: int = 5,
    capacity_mib: float | None = None,
    fallback_change: dict | None = None,
    experiment_name: str | None = None,
    steps: int = 5,
    progress: bool = True,
    supervised: bool = True,
    timeout_s: float = 300.0,
    runner: Any = "auto",
    threads: int | None = None,
    **evaluate_kwargs: Any,
) -> dict:
    """The main job: diagnose, compare the plan's single change under the diagnosis's objective, decide.

    When the diagnosis finds no strong signal (or is blocked by correctness), the comparison
    tests ``fallback_change`` on latency instead, and says so; without a fallback it stops after
    the diagnosis. Under ``mlflow run`` (``MLFLOW_RUN_ID`` set) the diagnosis and the comparison
    nest under the project's run. ``runner`` is :func:`compare`'s; ``supervised``, ``timeout_s``
    (the diagnosis's limit and each attempt's) and ``threads`` apply to the diagnosis and to
    every attempt.

    Returns:
        ``{"diagnosis": ..., "decision": <evaluate_group's result or None>, "change": ...,
        "objective": ..., "fallback_used": bool}``.
    """
    parent = os.environ.get("MLFLOW_RUN_ID") or None
    chosen_objective = evaluate_kwargs.pop("objective", None)
    report = diagnose(workload, conditions, attempts=attempts, capacity_mib=capacity_mib,
                      experiment_name=experiment_name, steps=steps, parent_run_id=parent,
                      supervised=supervised, timeout_s=timeout_s, threads=threads)
    plan = report["plan"]
    fallback_used = plan["action"] != "run_comparison"
    if fallback_used:
        if plan["action"] == "fix_correctness_first" or not fallback_change:
            return {"diagnosis": report, "decision": None, "change": None, "objective": None, "fallback_used": False}
        change, objective = dict(fallback_change), chosen_objective or "latency"
    else:
        variable = plan["changed_variable"]
        change, objective = {variable: plan["candidate"][variable]}, chosen_objective or report["objective"]
    decision = compare(workload, conditions, change, attempts=attempts, experiment_name=experiment_name,
                       objective=objective, progress=progress, supervised=supervised, timeout_s=timeout_s,
                       hypothesis=report["synthesis"]["hypothesis"], parent_run_id=parent, runner=runner,
                       threads=threads, **evaluate_kwargs)
    return {"diagnosis": report, "decision": decision, "change": change, "objective": objective,
            "fallback_used": fallback_used}
