"""The clock: thread pinning, device synchronisation and timed steps.

Shared by the attempt runner and ``benchmarks/bench_harness.py``, so that the benchmark measures
exactly the loop the attempts use.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import torch

from ._contention import ContentionSampler, StepContention

__all__ = ["pinned_threads", "synchronize", "to_float", "time_steps", "TimedSteps"]


@contextlib.contextmanager
def pinned_threads(threads: int | None) -> Iterator[int]:
    """Pin torch's intra-op thread count for the block, then restore it.

    Args:
        threads: the count to pin; ``None`` keeps the current one.

    Yields:
        The thread count in force inside the block (to be recorded with the samples).
    """
    previous = torch.get_num_threads()
    if threads is not None:
        if type(threads) is not int or threads < 1:
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work on ``device``; a no-op elsewhere or without CUDA.

    Called inside the clock so that a step is charged for its kernels, not just their launch.
    """
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)


def to_float(value: Any) -> float | None:
    """A loss returned by ``step()`` as a float, ``None`` when the step returned none."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().mean()) if value.numel() else None
    return float(value)


class TimedSteps:
    """Samples of a timed loop.

    Attributes:
        times_ms: one wall time per completed step.
        losses: the loss of each completed step (``None`` when ``step()`` returned none).
        failure: ``"non_finite_loss"`` or ``"timeout"`` when the loop stopped early, else ``None``.
        failure_detail: which step stopped the loop, and why.
        contention: the kernel's figures for each completed step (run-queue wait, CPU time,
            involuntary switches, wait share), parallel to ``times_ms``; empty when the loop ran
            without a sampler or the sampler was unavailable.
        contention_status: the sampler's status (``"measured"`` or ``"unavailable: <why>"``),
            ``None`` when the loop ran without a sampler.
        threads: ``torch.get_num_threads()`` after each completed step (outside the clock),
            parallel to ``times_ms``: the count the step ran with, whatever was pinned.
    """

    def __init__(self) -> None:
        self.times_ms: list[float] = []
        self.losses: list[float | None] = []
        self.failure: str | None = None
        self.failure_detail: str | None = None
        self.contention: list[StepContention] = []
        self.contention_status: str | None = None
        self.threads: list[int] = []


def time_steps(
    step,
    count: int,
    *,
    device: torch.device = torch.device("cpu"),
    phase: str = "measured",
    deadline: float | None = None,
    into: TimedSteps | None = None,
    sampler: ContentionSampler | None = None,
    first_index: int = 0,
) -> TimedSteps:
    """Run ``step()`` ``count`` times, timing each call with ``time.perf_counter``.

    The clock wraps the step and a device synchronisation, nothing else: the loss is read (and
    checked for finiteness) after the clock stops, since reading it forces a synchronisation of
    its own. With a ``sampler``, the process's counters are read just before the clock starts
    and just after it stops (see :mod:`._contention`), so their cost is outside the timed region.

    Args:
        step: the callable to time.
        count: how many steps.
        device: the device to synchronise inside the clock.
        phase: a label (``"warmup"`` or ``"measured"``) for failure messages.
        deadline: a ``time.perf_counter()`` value after which the loop stops with a timeout.
            Checked between steps only: a step that hangs is not interrupted (the supervised
            runner kills the process instead).
        into: samples to append to; a new :class:`TimedSteps` when ``None``.
        sampler: reads the kernel's contention figures around each step into
            ``samples.contention``; ``None`` samples nothing.
        first_index: the number of the first step in failure messages (a loop resumed one step
            at a time, as a step-interleaved attempt's is, counts on from its earlier steps).

    Returns:
        The samples, with ``failure`` set if a loss was non-finite or the deadline passed.
    """
    samples = into if into is not None else TimedSteps()
    sampling = sampler is not None and sampler.available
    if sampler is not None:
        samples.contention_status = sampler.status
    before = None
    for index in range(count):
        synchronize(device)
        if sampling:
            sample_start = time.perf_counter()
            before = sampler.sample()
            sample_cost = time.perf_counter() - sample_start
        start = time.perf_counter()
        result = step()
        synchronize(device)
        stop = time.perf_counter()
        elapsed_ms = (stop - start) * 1e3
        if sampling:
            after = sampler.sample()
            sample_cost += time.perf_counter() - stop
        loss = to_float(result)
        if loss is not None and not math.isfinite(loss):
            samples.failure = "non_finite_loss"
            samples.failure_detail = f"loss={loss!r} at {phase} step {first_index + index}"
            return samples
        samples.times_ms.append(elapsed_ms)
        samples.losses.append(loss)
        samples.threads.append(torch.get_num_threads())
        if sampling:
            samples.contention.append(sampler.delta(before, after, elapsed_ms, sample_cost * 1e6))
        if deadline is not None and time.perf_counter() > deadline:
            samples.failure = "timeout"
            samples.failure_detail = f"deadline passed after {phase} step {first_index + index}"
            return samples
    return samples
