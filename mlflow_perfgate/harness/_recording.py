"""One attempt's outcome as its run records it.

The figures and tags an attempt's run is finished with (:func:`_outcome`, :func:`_finish`), the
CPU memory estimate carried once per arm (:class:`_MemoryCarrier`), the GPU an arm runs on, and
what a resumed group keeps (its planned repeats, the runs a killed call left RUNNING).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


def keep_planned_repeats(held: dict, *arms: dict) -> str | None:
    """On a resume, give the arms the group's own ``repeats``; the value, or ``None`` when unchanged.

    ``repeats`` is a fixed condition of a comparison, its planned size: the attempts a resume adds
    (``compare --resume``, ``suite run --resume``) belong to the same comparison, so they carry
    its value, not the new call's ``attempts`` (else the single-variable rule sees two values and
    refuses the group). ``held`` is :func:`~mlflow_perfgate.tracking.group_state`'s answer.
    """
    values = held.get("repeats") or []
    if len(values) != 1 or not arms or values[0] == str(arms[0].get("repeats")):
        return None
    planned = values[0]
    for arm in arms:
        arm["repeats"] = int(planned) if planned.isdigit() else planned
    return planned


def end_left_running(group: str, experiment_name: str | None, who: str) -> list[str]:
    """On a resume, end the group's attempts a killed run left RUNNING; the ended run ids.

    They already count as failed (``supervisor_died``); ending them makes the UI show what the
    evaluator counts. :func:`~mlflow_perfgate.tracking._maintenance.reap` at an infinite age,
    attempts only (the comparison run the resume goes on with is left), so a live process's
    attempt, another host's and one whose outcome waits in this host's journal are left too.
    ``who`` starts the line said on stderr when any was ended.
    """
    from ..tracking import reap

    ended = reap(float("inf"), experiment_name=experiment_name, group=group, attempts_only=True)
    if ended:
        print(f"{who}: ended {len(ended)} attempt run{'' if len(ended) == 1 else 's'} left RUNNING by a process "
              "that is gone (as the evaluator counts them: KILLED without an outcome, else as their outcome says)",
              file=sys.stderr)
    return ended


def gpu_name_of(conditions: dict) -> str:
    """The GPU an attempt ran on, for the environment fingerprint ("none" on the CPU)."""
    if str(conditions.get("device", "cpu")).lower().startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(str(conditions["device"])))
    return "none"


def _outcome(result, conditions: dict, placed: dict | None = None) -> dict:
    """An :class:`AttemptResult` as the arguments of ``log_attempt`` / ``StartedAttempt.finish``
    (``placed``: the fingerprint keys the arm's site sets, its interpreter's versions, its revision)."""
    from ..tracking import METRIC, fit

    metrics = {}
    if result.peak_mem_mib is not None:
        metrics[METRIC.PEAK_MEM] = result.peak_mem_mib
    if result.throughput_tok_s is not None:
        metrics[METRIC.THROUGHPUT] = result.throughput_tok_s
    if result.wall_s is not None:
        metrics[METRIC.ATTEMPT_WALL] = result.wall_s
    if result.ok:
        metrics.update(result.figures)  # what the objective's entry measured (Objective.measure)
    # The kernel's contention figures, raw, failed attempts' too (for the steps they completed).
    for key, value in ((METRIC.RUNQ_WAIT, result.runq_wait_ms), (METRIC.CPU, result.cpu_ms),
                       (METRIC.WAIT_SHARE, result.wait_share), (METRIC.NIVCSW, result.nivcsw),
                       (METRIC.UNCONTENDED_STEPS, result.uncontended_steps)):
        if value is not None:
            metrics[key] = value
    if result.ok and result.uncontended_latency_ms is not None:
        metrics[METRIC.UNCONTENDED_LATENCY] = result.uncontended_latency_ms
    histories = {}
    if result.step_wait_share is not None:
        histories[METRIC.STEP_WAIT_SHARE] = list(result.step_wait_share)
    if result.step_order is not None:
        histories[METRIC.STEP_ORDER] = list(result.step_order)
    environment = {"gpu_name": gpu_name_of(conditions), **(placed or {})}
    if result.torch_threads is not None:
        environment["torch_threads"] = result.torch_threads
    return dict(
        latency_ms=result.latency_ms if result.ok else None, quality=result.quality if result.ok else None,
        ok=result.ok, failure=None if result.ok else fit(result.failure, 7900), validity=result.validity,
        metrics=metrics or None, step_times_ms=list(result.step_times_ms) or None, environment=environment,
        failure_detail=result.failure_detail if not result.ok else None, mem_status=result.mem_status,
        histories=histories or None, contention_status=result.contention_status,
        **({"torch_state": result.torch_state} if result.torch_state else {}),
    )


def _finish(started, result, conditions: dict, mem_estimate_from: str | None = None,
            placed: dict | None = None) -> str | None:
    from ..tracking import AttemptDeferred

    try:
        return started.finish(**_outcome(result, conditions, placed), mem_estimate_from=mem_estimate_from)
    except AttemptDeferred as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return None


class _MemoryCarrier:
    """Each arm's CPU memory estimate, made once per comparison where nothing judges it.

    On the CPU the memory record is an estimate computed from the conditions (the bytes of the
    parameters, gradients and optimizer state, and of what autograd saves on the probe batch),
    not a measurement: the same conditions give the same figure. Unless the objective judges it
    (memory, whose metric is ``peak_mem_mib``: then every attempt's estimate is a sample), an arm's first successful
    attempt makes it and the attempts of that arm begun after it was logged skip it (one forward and
    backward each); their results carry the first one's record, and their runs name the attempt it
    came from (``perfgate.mem_estimate_from``). A round's child begun beside the previous round's
    tail, before that round was logged, makes its own (the same figure). A measured record (CUDA's
    peak) is never carried.
    """

    def __init__(self, objective: str):
        from ..rules import OBJECTIVES

        # carried unless the objective judges the estimate (its entry's metric: memory's, or a plugin's)
        self.enabled = "peak_mem_mib" not in OBJECTIVES.require(objective).metrics
        self.held: dict[str, tuple[dict, str]] = {}

    def needed(self, *arms: str, pending: tuple = ()) -> bool:
        """Whether an attempt of these arms must make its own estimate; ``pending``: ``(arm, result)``
        pairs not applied yet (a round not logged yet), whose estimates will be held by then."""
        coming = {arm for arm, result in pending if result.ok and _estimated(result.memory)}
        return not self.enabled or any(arm not in self.held and arm not in coming for arm in arms)

    def apply(self, arm: str, started, result):
        """The result with its arm's carried estimate where it skipped it, and the attempt it came from."""
        if not self.enabled or not result.ok:
            return result, None
        held = self.held.get(arm)
        if result.memory is None and held is not None:
            record, source = held
            peak = record.get("unclamped_reserved_mib", record["reserved_mib"])
            result = dataclasses.replace(result, memory=record, peak_mem_mib=peak, mem_status=record["status"])
            return result, source
        memory = result.memory
        if held is None and _estimated(memory):
            self.held[arm] = ({**memory, "notes": [*memory.get("notes", []), _CARRIED_NOTE]}, started.attempt_id)
        return result, None


def _estimated(memory: Any) -> bool:
    """Whether an attempt's memory record is a CPU estimate (what an arm's later attempts carry)."""
    return isinstance(memory, dict) and memory.get("status") == "estimated"


_CARRIED_NOTE = ("estimated once per arm in this comparison (a CPU estimate is a function of the conditions): "
                 "its later attempts carry this record")
