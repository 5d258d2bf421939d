"""Time and memory evidence in the specification's record formats, and an operator profile.

These collectors measure and describe; ranking stages is left to ``rules.top_hotspots`` and any
judgement to ``rules.synthesize_evidence``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from ..rules import top_hotspots
from ._interface import STAGES, describe_workload, device_of, missing_stages
from ._reads import read_conditions_of
from ._outputs import loss_of
from ._state import preserved, rng_devices
from ._timing import synchronize

__all__ = ["collect_memory_evidence", "collect_time_evidence", "profile_operators"]

MIB = 2**20
TIME_INTERPRETATION_LIMIT = "hotspot_is_candidate_not_root_cause"
MEMORY_INTERPRETATION_LIMIT = "directional_evidence_not_strategy_decision"
MEMORY_OBJECTS = ("parameters", "gradients", "optimizer_state", "activation")
#: Optimizers whose state is two moment tensors per parameter (three with amsgrad).
_ADAM_FAMILY = (torch.optim.Adam, torch.optim.AdamW)


def _require_stages(workload: Any, what: str) -> None:
    missing = missing_stages(workload)
    if missing:
        raise TypeError(f"{what} needs the workload's stage methods; missing: {missing}")


def collect_time_evidence(workload: Any, steps: int = 5, *, warmup: int = 1,
                          topk: int | None = None) -> dict:
    """Time the non-overlapping stages of training steps and build the time record.

    Each stage (``dataloader`` = ``next_batch()``, ``forward``, ``backward``, ``optimizer`` =
    ``optimizer_step()``) is timed on its own with ``time.perf_counter``, with a device
    synchronisation inside each clock, so the stages do not overlap and their sum is the share
    denominator. The workload trains while being timed. ``forward`` may return the loss or a
    model output holding it (see :meth:`Workload.forward`); ``backward`` receives the loss.

    Args:
        workload: a workload with the four stage methods (see :class:`Workload`).
        steps: timed steps (>= 1).
        warmup: untimed steps first.
        topk: stages kept in ``hotspots``; ``None`` keeps all four.

    Returns:
        ``{evidence_type: 'time', status: 'measured', workload, share_denominator:
        'sum_of_nonoverlapping_stages', hotspot, hotspots, interpretation_limit}`` plus
        ``stages`` (every stage's ``name``, ``total_ms``, ``calls``, in execution order),
        ``step_totals_ms`` (per step), ``steps``, ``warmup``, ``torch_threads`` and
        ``measurement_method``.

    Raises:
        TypeError: the workload lacks a stage method.
        ValueError: ``steps`` < 1 or ``warmup`` < 0.
    """
    _require_stages(workload, "collect_time_evidence")
    if type(steps) is not int or steps < 1 or type(warmup) is not int or warmup < 0:
        raise ValueError(f"steps must be an integer >= 1 and warmup >= 0, got {steps!r}, {warmup!r}")
    device = device_of(workload)
    totals = {name: 0.0 for name, _ in STAGES}
    step_totals: list[float] = []
    for index in range(warmup + steps):
        stage_ms = {}
        value = None
        for name, method in STAGES:
            stage = getattr(workload, method)
            synchronize(device)
            start = time.perf_counter()
            # Each stage feeds the next: batch -> loss -> (backward) -> (optimizer).
            if name == "dataloader":
                value = stage()
            elif name == "forward":
                value = loss_of(stage(value))
            elif name == "backward":
                stage(value)
            else:
                stage()
            synchronize(device)
            stage_ms[name] = (time.perf_counter() - start) * 1e3
        if index >= warmup:
            for name, elapsed in stage_ms.items():
                totals[name] += elapsed
            step_totals.append(sum(stage_ms.values()))
    events = [{"name": name, "total_ms": totals[name], "calls": steps} for name, _ in STAGES]
    hotspots = top_hotspots(events, topk=len(events) if topk is None else topk)
    return {
        "evidence_type": "time",
        "status": "measured",
        "workload": describe_workload(workload),
        "share_denominator": "sum_of_nonoverlapping_stages",
        "hotspot": hotspots[0] if hotspots else None,
        "hotspots": hotspots,
        "stages": events,
        "step_totals_ms": step_totals,
        "steps": steps,
        "warmup": warmup,
        "torch_threads": torch.get_num_threads(),
        "measurement_method": "perf_counter_per_stage",
        "interpretation_limit": TIME_INTERPRETATION_LIMIT,
    }


def _unique_storage_bytes(tensors, exclude: set[int] = frozenset()) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once)."""
    seen: set[int] = set(exclude)
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer in seen:
            continue
        seen.add(pointer)
        total += storage.nbytes()
    return total


def _optimizer_state_bytes(optimizer: Any, trainable: list[torch.Tensor]) -> tuple[int, str]:
    if optimizer is None:
        return 0, "no_optimizer"
    state_tensors = [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    if state_tensors:
        return _unique_storage_bytes(state_tensors), "tensor_bytes"
    # Before its first step an optimizer holds no state; Adam's will be its moment buffers.
    if isinstance(optimizer, _ADAM_FAMILY):
        moments = 3 if any(group.get("amsgrad") for group in optimizer.param_groups) else 2
        return moments * _unique_storage_bytes(trainable), "projected_adam_moments"
    return 0, "empty_before_first_step"


def _activation_and_gradient_bytes(workload: Any, model: torch.nn.Module,
                                   parameter_pointers: set[int]) -> tuple[int, int]:
    """One forward and backward pass on the probe batch, counting what autograd saves."""
    saved: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor)
        return tensor

    get_batch = getattr(workload, "probe_batch", None) or workload.next_batch
    batch = get_batch()
    with preserved(model), torch.random.fork_rng(devices=rng_devices(device_of(workload))):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = loss_of(workload.forward(batch))
        # Parameters saved for backward are already counted as parameters.
        activation = _unique_storage_bytes(saved, exclude=parameter_pointers)
        saved.clear()
        workload.backward(loss)
        gradients = _unique_storage_bytes(
            [p.grad for p in model.parameters() if p.grad is not None]
        )
    return activation, gradients


def _default_capacity_mib(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).total_memory / MIB, "cuda_total_memory"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB, "host_total_ram"


def collect_memory_evidence(workload: Any, capacity_mib: float | None = None) -> dict:
    """Build the memory record: peak reserved memory against a capacity, and a breakdown by object.

    The breakdown is always an estimate: parameters (and buffers), gradients and optimizer
    state as the bytes of their tensors, and activations as the distinct storages that autograd
    saves for backward during one forward pass on the probe batch (seen through
    ``torch.autograd.graph.saved_tensors_hooks``). Gradients come from that pass's backward; the
    optimizer's state is its tensors, or for Adam/AdamW before their first step the two moment
    buffers they will allocate. The model is restored afterwards and the optimizer not stepped.

    On CUDA ``reserved_mib`` is measured: ``torch.cuda.max_memory_reserved`` (the peak since
    the process started or the caller last reset it), ``status='measured'``. On CPU it is the
    sum of the objects, ``status='estimated'``. The tensors a non-reentrant checkpoint keeps for
    its recomputation are not seen by the hooks, so activations under checkpointing are a lower
    bound.

    Args:
        workload: a workload with ``model`` and the stage methods (see :class:`Workload`).
        capacity_mib: the budget to compare with; by default the CUDA device's total memory, or
            on CPU the machine's total RAM.

    Returns:
        ``{evidence_type: 'memory', status, workload, unit: 'MiB', dominant_object,
        reserved_mib, capacity_mib, objects, interpretation_limit}`` plus ``methods`` (how each
        object was counted), ``capacity_source`` and ``notes``.

    Raises:
        TypeError: the workload lacks ``model`` or a stage method.
        ValueError: ``capacity_mib`` is not a positive number.
    """
    model = getattr(workload, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"collect_memory_evidence needs workload.model to be an nn.Module, got {type(model).__name__}"
        )
    _require_stages(workload, "collect_memory_evidence")
    device = device_of(workload)
    notes: list[str] = []
    parameters = list(model.parameters())
    parameter_pointers = {p.untyped_storage().data_ptr() for p in parameters}
    trainable = [p for p in parameters if p.requires_grad]
    activation, gradients = _activation_and_gradient_bytes(workload, model, parameter_pointers)
    optimizer_bytes, optimizer_method = _optimizer_state_bytes(
        getattr(workload, "optimizer", None), trainable
    )
    if optimizer_method == "projected_adam_moments":
        notes.append("optimizer has not stepped yet: its state is projected from the parameters")
    objects_bytes = {
        "parameters": _unique_storage_bytes(parameters + list(model.buffers())),
        "gradients": gradients,
        "optimizer_state": optimizer_bytes,
        "activation": activation,
    }
    objects = {name: objects_bytes[name] / MIB for name in MEMORY_OBJECTS}
    # Ties go to the earlier object in MEMORY_OBJECTS, so the answer does not depend on dict order.
    dominant = max(MEMORY_OBJECTS, key=lambda name: (objects[name], -MEMORY_OBJECTS.index(name)))
    if device.type == "cuda" and torch.cuda.is_available():
        synchronize(device)
        reserved_mib = torch.cuda.max_memory_reserved(device) / MIB
        status = "measured"
    else:
        reserved_mib = sum(objects.values())
        status = "estimated"
    if capacity_mib is None:
        capacity_mib, capacity_source = _default_capacity_mib(device)
    else:
        if isinstance(capacity_mib, bool) or not isinstance(capacity_mib, (int, float)) or not capacity_mib > 0:
            raise ValueError(f"capacity_mib must be a positive number of MiB, got {capacity_mib!r}")
        capacity_source = "given"
    record = {
        "evidence_type": "memory",
        "status": status,
        "workload": describe_workload(workload),
        "unit": "MiB",
        "dominant_object": dominant,
        "reserved_mib": reserved_mib,
        "capacity_mib": float(capacity_mib),
        "objects": objects,
        "methods": {
            "parameters": "tensor_bytes",
            "gradients": "tensor_bytes_after_backward",
            "optimizer_state": optimizer_method,
            "activation": "saved_tensors_hooks_unique_storage",
            "reserved": "cuda_max_memory_reserved" if status == "measured" else "sum_of_objects",
        },
        "capacity_source": capacity_source,
        "notes": notes,
        "interpretation_limit": MEMORY_INTERPRETATION_LIMIT,
    }
    read = read_conditions_of(workload)
    if read is not None:  # the conditions its factory looked up: did a changed variable reach it?
        record["read_conditions"] = read
    if reserved_mib > record["capacity_mib"]:
        # The rules require reserved <= capacity; a smaller declared budget is the usual cause,
        # so keep the measured figure beside the clamped one.
        record["reserved_mib"] = record["capacity_mib"]
        record["unclamped_reserved_mib"] = reserved_mib
        notes.append(
            f"reserved {reserved_mib:.3f} MiB exceeds capacity {record['capacity_mib']:.3f} MiB; clamped"
        )
    return record


def profile_operators(workload: Any, out_dir: str | os.PathLike, steps: int = 3, *, warmup: int = 1,
                      row_limit: int = 30) -> dict:
    """Profile training steps with ``torch.profiler`` and write an operator table and a trace.

    Stages are labelled with ``record_function`` (``dataloader``, ``forward``, ``backward``,
    ``optimizer``) so that the trace shows them; a workload without stage methods is profiled
    through ``step()``.

    Args:
        workload: the workload; it trains while being profiled.
        out_dir: directory for the files (created if missing).
        steps: profiled steps (>= 1), after ``warmup`` unprofiled ones.
        row_limit: rows of the operator table.

    Returns:
        ``{'operator_table': <path of operators.txt>, 'chrome_trace': <path of trace.json>}``
        (strings).

    Raises:
        ValueError: ``steps`` < 1.
    """
    if type(steps) is not int or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    from torch.profiler import ProfilerActivity, profile, record_function

    device = device_of(workload)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staged = not missing_stages(workload)

    def one_step() -> None:
        if not staged:
            with record_function("step"):
                workload.step()
            return
        with record_function("dataloader"):
            batch = workload.next_batch()
        with record_function("forward"):
            loss = loss_of(workload.forward(batch))
        with record_function("backward"):
            workload.backward(loss)
        with record_function("optimizer"):
            workload.optimizer_step()

    for _ in range(warmup):
        one_step()
    activities = [ProfilerActivity.CPU]
    on_cuda = device.type == "cuda" and torch.cuda.is_available()
    if on_cuda:
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            one_step()
        synchronize(device)
    table_path = out / "operators.txt"
    trace_path = out / "trace.json"
    sort_by = "self_device_time_total" if on_cuda else "self_cpu_time_total"
    table_path.write_text(profiler.key_averages().table(sort_by=sort_by, row_limit=row_limit) + "\n")
    profiler.export_chrome_trace(str(trace_path))
    return {"operator_table": str(table_path), "chrome_trace": str(trace_path)}
