"""Comparisons and diagnoses: PyTorch attempts (``workloads``) recorded and judged in MLflow (``tracking``).

This is the application layer under the CLI and the MLproject entry points: it runs the
attempts, logs each one as soon as it ends (a failed one too), and leaves every verdict to the
rules through ``evaluate_group``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from typing import Any, Callable

from . import rules

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
        raise ValueError(f"--change must name exactly one variable, got {sorted(map(str, change or {}))}")
    from .tracking import canonical_value

    evidence = {"status": "ready_for_experiment", "hypothesis": hypothesis}
    variable, value = next(iter(change.items()))
    if variable in base and canonical_value(base[variable]) == canonical_value(value):
        raise ValueError(f"the candidate must really change {variable!r}; both are {canonical_value(value)!r}")
    try:
        plan = rules.design_single_variable_experiment(evidence, base, {variable: value})
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    return plan["changed_variable"], value


def _gpu_name(conditions: dict) -> str:
    """The GPU an attempt ran on, for the environment fingerprint ("none" on the CPU)."""
    if str(conditions.get("device", "cpu")).lower().startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(str(conditions["device"])))
    return "none"


def _log_result(group: str, arm: str, conditions: dict, result, *, experiment_name, parent_run_id) -> str | None:
    from .tracking import TAG, AttemptDeferred, log_attempt

    metrics = {}
    if result.peak_mem_mib is not None:
        metrics["peak_mem_mib"] = result.peak_mem_mib
    if result.throughput_tok_s is not None:
        metrics["throughput_tok_s"] = result.throughput_tok_s
    if result.wall_s is not None:
        metrics["attempt_wall_s"] = result.wall_s
    environment = {"gpu_name": _gpu_name(conditions)}
    if result.torch_threads is not None:
        environment["torch_threads"] = result.torch_threads
    tags = {TAG.MEM_STATUS: result.mem_status} if result.mem_status else {}
    if result.failure_detail and not result.ok:
        tags[TAG.FAILURE_DETAIL] = result.failure_detail[-7900:]
    try:
        return log_attempt(
            group, arm, conditions, latency_ms=result.latency_ms if result.ok else None,
            quality=result.quality if result.ok else None, ok=result.ok,
            failure=None if result.ok else result.failure[:7900], validity=result.validity,
            experiment_name=experiment_name, parent_run_id=parent_run_id, metrics=metrics or None,
            step_times_ms=list(result.step_times_ms) or None, tags=tags or None, environment=environment,
        )
    except AttemptDeferred as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return None


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
        **evaluate_kwargs: thresholds and options for ``evaluate_group``.

    Returns:
        ``evaluate_group``'s result, with ``comparison_run_id``.
    """
    from tqdm import tqdm

    from .tracking import end_run, evaluate_group, start_comparison
    from .workloads import RUNNER_KINDS, AttemptRunner, attempt_runner, interleave, run_attempt

    if type(attempts) is not int or attempts < 1:
        raise ValueError(f"attempts must be a positive integer, got {attempts!r}")
    if until_decisive and (type(max_attempts) is not int or max_attempts < attempts):
        raise ValueError(f"max_attempts must be an integer >= attempts ({attempts}), got {max_attempts!r}")
    if supervised and not isinstance(runner, AttemptRunner) and runner not in RUNNER_KINDS:
        raise ValueError(f"runner must be one of {list(RUNNER_KINDS)} or an AttemptRunner, got {runner!r}")
    base = _base_conditions(workload, conditions, attempts)
    variable, value = _validated_change(base, change, hypothesis)
    candidate = {**base, variable: value}
    objective = objective or "latency"
    if objective not in ("latency", "memory", "throughput"):
        raise ValueError(f"objective must be one of latency, memory, throughput; got {objective!r}")
    group = group or f"{workload.split(':')[-1]}-{variable}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    comparison_id = start_comparison(group, base, variable, objective=objective, experiment_name=experiment_name,
                                     workload=workload, parent_run_id=parent_run_id)
    arms = {"baseline": base, "candidate": candidate}

    def run_block(order: list[str], bar) -> None:
        for arm in order:
            result = run_attempt(workload, arms[arm], supervised=supervised, timeout_s=timeout_s, threads=threads,
                                 runner=active)
            _log_result(group, arm, arms[arm], result, experiment_name=experiment_name, parent_run_id=comparison_id)
            if on_attempt is not None:
                on_attempt(arm, result)
            bar.set_postfix_str(f"{arm} {'%.3g ms' % result.latency_ms if result.ok else result.failure[:40]}")
            bar.update(1)

    # One runner for the whole comparison: with fork, one warm server for all its attempts.
    owned = supervised and not isinstance(runner, AttemptRunner)
    active = runner if supervised and not owned else None
    try:
        if owned:
            active = attempt_runner(runner, workload=workload)
        with tqdm(total=2 * attempts, desc=f"compare {variable}", unit="attempt", disable=not progress,
                  file=sys.stderr) as bar:
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
        final_kwargs = dict(evaluate_kwargs)
        if until_decisive:
            final_kwargs.update(look=look, max_looks=_max_looks(attempts, max_attempts))
        result = evaluate_group(group, experiment_name=experiment_name, objective=objective, **final_kwargs)
    except BaseException:
        try:
            end_run(comparison_id, "KILLED")
        except Exception:  # the server may be what failed; the original error matters
            pass
        raise
    finally:
        if owned and active is not None:
            active.close()
    result["comparison_run_id"] = comparison_id
    return result


def _max_looks(attempts: int, max_attempts: int | None) -> int:
    if max_attempts is None:
        return 1
    return 1 + -(-(max_attempts - attempts) // 2)


def candidate_change_for(synthesis: dict, baseline: dict) -> dict | None:
    """The single change a hypothesis calls for (documented in the README).

    - memory pressure (``primary_signal == 'memory'``): activation checkpointing,
      ``checkpoint=true`` (when it is off);
    - a ``dataloader`` hotspot: more DataLoader workers, ``num_workers`` = max(2, 2 x current);
    - a compute hotspot (``forward``, ``backward``, ``optimizer``): ``dtype=bf16`` (from fp32);
    - otherwise none (more evidence is needed).
    """
    from .tracking import canonical_value

    signal = synthesis.get("primary_signal")
    if signal == "memory":
        return {"checkpoint": True} if canonical_value(baseline.get("checkpoint", False)) == "false" else None
    if signal == "time":
        hotspot = synthesis.get("hotspot")
        if hotspot == "dataloader":
            current = int(baseline.get("num_workers", 0) or 0)
            return {"num_workers": max(2, 2 * current)}
        if hotspot in ("forward", "backward", "optimizer"):
            return {"dtype": "bf16"} if canonical_value(baseline.get("dtype", "fp32")) == "fp32" else None
    return None


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
) -> dict:
    """Evidence -> hypothesis -> single-variable plan, logged as a diagnosis run.

    Builds the workload in this process, runs the correctness probe, times its non-overlapping
    stages (time evidence), estimates or measures its memory (memory evidence), profiles a few
    steps (operator table and trace), then ``synthesize_evidence`` and
    ``design_single_variable_experiment`` with the change :func:`candidate_change_for` draws
    from the hypothesis.

    Returns:
        ``{"bundle", "synthesis", "plan", "objective", "diagnosis_run_id", "command"}``.
    """
    from .tracking import log_diagnosis
    from .workloads import (collect_memory_evidence, collect_time_evidence, make_workload, probe_correctness,
                            profile_operators)

    base = _base_conditions(workload, conditions, attempts)
    instance = make_workload(workload, base)
    files: dict = {}
    tmp = tempfile.mkdtemp(prefix="perfgate-diagnose-")
    try:
        validity = probe_correctness(instance)
        bundle: dict = {"validity": validity}
        if validity["run_valid"]:
            bundle["time"] = collect_time_evidence(instance, steps=steps)
            bundle["memory"] = collect_memory_evidence(instance, capacity_mib=capacity_mib)
            if profile:
                files = profile_operators(instance, tmp, steps=min(steps, 3))
    finally:
        close = getattr(instance, "close", None)
        if callable(close):
            close()
    synthesis = rules.synthesize_evidence(bundle, capacity_alert_ratio=capacity_alert_ratio,
                                          hotspot_alert_share_pct=hotspot_alert_share_pct)
    change = candidate_change_for(synthesis, base)
    plan = rules.design_single_variable_experiment(synthesis, base, change)
    objective = rules.objective_for_signal(synthesis.get("primary_signal", "none"))
    run_id = log_diagnosis(bundle, synthesis, plan, experiment_name=experiment_name, files=files,
                           objective=objective, workload=workload, parent_run_id=parent_run_id)
    for path in files.values():
        try:
            os.remove(path)
        except OSError:
            pass
    command = compare_command(workload, plan, attempts, experiment_name, objective) \
        if plan["action"] == "run_comparison" else None
    return {"bundle": bundle, "synthesis": synthesis, "plan": plan, "objective": objective,
            "diagnosis_run_id": run_id, "command": command}


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
    **evaluate_kwargs: Any,
) -> dict:
    """The main job: diagnose, compare the plan's single change under the diagnosis's objective, decide.

    When the diagnosis finds no strong signal (or is blocked by correctness), the comparison
    tests ``fallback_change`` on latency instead, and says so; without a fallback it stops after
    the diagnosis. Under ``mlflow run`` (``MLFLOW_RUN_ID`` set) the diagnosis and the comparison
    nest under the project's run. ``runner`` is :func:`compare`'s.

    Returns:
        ``{"diagnosis": ..., "decision": <evaluate_group's result or None>, "change": ...,
        "objective": ..., "fallback_used": bool}``.
    """
    parent = os.environ.get("MLFLOW_RUN_ID") or None
    report = diagnose(workload, conditions, attempts=attempts, capacity_mib=capacity_mib,
                      experiment_name=experiment_name, steps=steps, parent_run_id=parent)
    plan = report["plan"]
    fallback_used = plan["action"] != "run_comparison"
    if fallback_used:
        if plan["action"] == "fix_correctness_first" or not fallback_change:
            return {"diagnosis": report, "decision": None, "change": None, "objective": None, "fallback_used": False}
        change, objective = dict(fallback_change), "latency"
    else:
        variable = plan["changed_variable"]
        change, objective = {variable: plan["candidate"][variable]}, report["objective"]
    decision = compare(workload, conditions, change, attempts=attempts, experiment_name=experiment_name,
                       objective=objective, progress=progress, supervised=supervised, timeout_s=timeout_s,
                       hypothesis=report["synthesis"]["hypothesis"], parent_run_id=parent, runner=runner,
                       **evaluate_kwargs)
    return {"diagnosis": report, "decision": decision, "change": change, "objective": objective,
            "fallback_used": fallback_used}
