"""Running one attempt: warm-up, timed steps, quality, memory and the correctness probe.

Supervised attempts (the default) run in a child process of their own, started by a runner
(``_runner``): the ``spawn`` runner starts ``python -m mlflow_perfgate.workloads._child SPEC
RESULT`` for each attempt (the parent writes the attempt's spec as JSON), contained by a keeper
(``python -m mlflow_perfgate._contain keep``); the ``fork`` runner asks a warm attempt server to
fork a fresh child. Either way the child writes its :class:`AttemptResult` as versioned JSON
(atomically, by rename) and exits, and the parent waits with a timeout and turns every way the
child can end into a result: the child's own result, ``timeout after Ns`` (the child and every
process below it are killed), ``killed by signal SIGKILL`` or ``SIGSEGV`` (a negative exit
code), or a non-zero exit without a result. Nothing the workload does raises in the parent, and
its module is imported in children only: a name that does not resolve is refused by the child
(:class:`WorkloadRefused`). Nothing the workload starts outlives the attempt, nor the parent
(``mlflow_perfgate._contain``: a parent-death signal, subreapers; Linux).

In-process attempts (``supervised=False``) skip the ~1-2 s start of a child. They share the
caller's process: a segfault or a ``SIGKILL`` ends the caller, a step that hangs is never
interrupted (the timeout is checked between steps only), leaked state (threads, memory, CUDA
context) carries over to the next attempt, and nothing the workload starts is contained. A
``sys.exit`` in the workload is still a failed attempt.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._contain import kill_tree
from ..rules import validate_validity_report
from ._conditions import parse_int
from ._failures import (can_inspect as _can_inspect, describe_exception as _describe_exception, describe_failure,
                        system_exit_reason as _exit_reason, tail as _tail, timeout_reason as _timeout_reason)
from ._contention import ContentionSampler, summarize_steps
from ._measures import check_measures, measure_figures
from ._names import workload_target
from ._site import Site, site_env
from ._wire import FormatError, read_json, write_json_atomic

# torch, and the modules that need it, are imported where an attempt runs (in its child, or
# here when in-process): the side that only starts children imports no torch (``_runner``).

__all__ = ["AttemptResult", "DEFAULT_TIMEOUT_S", "interleave"]

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WARMUP = 2
DEFAULT_STEPS = 10
_MEM_STATUSES = (None, "measured", "estimated")
#: The per-step contention lists, parallel to ``step_times_ms`` when present.
_STEP_CONTENTION = ("step_wait_ms", "step_wait_share", "step_cpu_ms", "step_nivcsw")
_CHILD_MODULE = "mlflow_perfgate.workloads._child"
_CONTAIN_MODULE = "mlflow_perfgate._contain"
_RUNNERS = (None, "fork", "spawn")
#: Where a failed attempt can have failed (``AttemptResult.failed_in``); the first two are its setup's.
FAILED_IN = (None, "import", "factory", "warmup", "step", "tail")


@dataclass(frozen=True)
class AttemptResult:
    """The outcome of one attempt, successful or not. Validated on construction.

    Attributes:
        ok: the attempt ran its steps and produced a latency and a finite quality. Whether
            those results can be trusted is ``validity``'s to say: an attempt can be ok and
            invalid (a broken gradient chain still runs).
        failure: why not, when ``ok`` is false: ``exception: <Type>: <message>``,
            ``invalid_conditions: <message>`` (the factory rejected a condition),
            ``non_finite_loss``, ``non_finite_quality``, ``timeout after <s>s``,
            ``out_of_memory: <Type>: <message>``, ``killed by signal <NAME>``,
            ``exited with code <n>``, ``interleave_refused: <why>`` (step interleaving of arms whose
            process-wide torch state cannot share one process), ``exited: sys.exit(<code>) inside the workload`` (a
            ``SystemExit`` raised by the workload's code: in-process it must not end the
            caller) or ``attempt server died: <how>`` (the fork runner's server ended while
            the attempt was in flight). ``None`` when ok.
        failure_detail: context for the failure (the step, a traceback, the child's log tail).
        latency_ms: median of ``step_times_ms``.
        step_times_ms: wall time of each measured step (``time.perf_counter``, CUDA synchronised
            inside the clock); the steps completed so far when the attempt failed.
        quality: the workload's quality after the measured steps.
        validity: the correctness record of :func:`probe_correctness`, or ``None`` when not probed.
        torch_threads: torch's intra-op thread count as measured during the attempt
            (``torch.get_num_threads()`` after each measured step; the count most of them ran
            with when it changed; read at the attempt's end when no measured step ran). For a
            child that ended without a result, nothing was measured: the count requested.
        peak_mem_mib: the memory record's ``reserved_mib``.
        mem_status: ``'measured'`` (CUDA), ``'estimated'`` (CPU), or ``None`` when not collected.
        throughput_tok_s: ``tokens_per_step`` per median step, when the workload gives tokens.
        wall_s: the whole attempt's wall time as the caller saw it, child start included (not
            the fork runner's server warm-up, which is once per runner, not per attempt, nor a
            gated child's wait at its gate, which is the parent's logging).
        workload: the workload name.
        conditions: the conditions as given.
        warmup: warm-up steps asked for.
        steps: measured steps asked for.
        supervised: whether the attempt ran in a child process.
        runner: which runner started that child: ``'fork'`` (forked by the warm attempt
            server) or ``'spawn'`` (a fresh interpreter); ``None`` in-process.
        tokens_per_step: the workload's tokens per step, if any.
        final_loss: the last measured step's loss, if the step returned one.
        memory: the full memory record, or ``None``.
        exitcode: the child's exit code (supervised only; negative for a signal).
        contention_status: ``'measured'`` when the kernel's contention figures were read around
            every measured step (see :mod:`._contention`), ``'unavailable: <why>'`` where they
            cannot be (no /proc: macOS), ``None`` when no measured step ran (or the child died).
            The figures below are ``None`` unless it is ``'measured'``; they are kept for failed
            attempts too, for the steps completed.
        runq_wait_ms: run-queue wait of all the process's threads, summed over measured steps.
        cpu_ms: the process's CPU time over the measured steps.
        wait_share: ``runq_wait_ms`` over the summed measured step times (can exceed 1 when
            several threads queue at once).
        nivcsw: involuntary context switches over the measured steps.
        step_wait_ms: run-queue wait of each measured step, parallel to ``step_times_ms``.
        step_wait_share: each step's wait over its wall time.
        step_cpu_ms: each step's CPU time.
        step_nivcsw: each step's involuntary context switches.
        uncontended_latency_ms: the median of the measured steps whose wait share is at most
            :data:`~._contention.CONTENTION_WAIT_SHARE_BOUND` (the quiet steps); ``None`` when
            fewer than half the steps are quiet (a *contended* attempt), when the figures were
            not measured, or when the attempt failed. ``latency_ms`` still counts every step.
        uncontended_steps: how many measured steps were quiet (``None`` unless measured).
        step_order: for a step-interleaved attempt (``execute_interleaved``), the position of
            each of its measured steps in the shared child's sequence of both arms' measured
            steps (A B B A ...: the leading arm's are 0, 3, 4, 7, ...), parallel to
            ``step_times_ms``; ``None`` for an attempt that had its process to itself.
        threads_requested: the thread count the attempt pinned (``threads``, else the caller's).
        threads_note: ``None`` when every measured step ran with ``threads_requested``; else
            what was measured (the workload changed the count, say with
            ``torch.set_num_threads``): ``torch_threads`` is then not the requested count.
        torch_state: for a step-interleaved attempt, the process-global torch state its steps ran
            under (captured after its factory, re-applied before each of its steps:
            ``_globals``); ``None`` for an attempt that had its process to itself.
        gate_wait_s: for a step-interleaved attempt whose child was started before the parent
            had logged the previous round (``_gate``): how long the child, both arms warm,
            waited at its gate for the parent; ``None`` when it had no gate.
        after_gate_s: for such an attempt, the runner's seconds from the gate's opening to the
            child's end: the round's share of the comparison's wall time (its fork, build and
            warm-up ran beside the parent's logging); ``None`` when it had no gate.
        failed_in: where a failed attempt failed, when known: ``import`` (the workload's module
            raised while the child imported it), ``factory`` (the factory raised, refused a
            condition or returned no workload), ``warmup``, ``step`` (a measured step), ``tail``
            (quality, the memory record, the probe); ``None`` for an ok attempt or a child that
            ended without saying (a signal or an exit outside a shared child's noted phases).
        withdrawn: the attempt did not fail and was not measured whole: the round's shared child
            died in the *other* arm's code (its factory, warm-up, step or tail), so this arm's
            attempt is withdrawn (``failure`` says why; a comparison ends its run excluded, never
            counted in a failure rate) while the other arm's fails with the child's end.
    """

    ok: bool
    failure: str | None = None
    failure_detail: str | None = None
    latency_ms: float | None = None
    step_times_ms: tuple[float, ...] = ()
    quality: float | None = None
    validity: dict | None = None
    torch_threads: int | None = None
    peak_mem_mib: float | None = None
    mem_status: str | None = None
    throughput_tok_s: float | None = None
    wall_s: float | None = None
    workload: str = ""
    conditions: dict = field(default_factory=dict)
    warmup: int = 0
    steps: int = 0
    supervised: bool = False
    tokens_per_step: int | None = None
    final_loss: float | None = None
    memory: dict | None = None
    exitcode: int | None = None
    runner: str | None = None
    contention_status: str | None = None
    runq_wait_ms: float | None = None
    cpu_ms: float | None = None
    wait_share: float | None = None
    nivcsw: int | None = None
    step_wait_ms: tuple[float, ...] | None = None
    step_wait_share: tuple[float | None, ...] | None = None
    step_cpu_ms: tuple[float, ...] | None = None
    step_nivcsw: tuple[int, ...] | None = None
    uncontended_latency_ms: float | None = None
    uncontended_steps: int | None = None
    step_order: tuple[int, ...] | None = None
    threads_requested: int | None = None
    threads_note: str | None = None
    torch_state: dict | None = None
    figures: dict = field(default_factory=dict)
    gate_wait_s: float | None = None
    after_gate_s: float | None = None
    withdrawn: bool = False
    failed_in: str | None = None

    def __post_init__(self) -> None:
        if type(self.ok) is not bool:
            raise ValueError(f"ok must be a bool, got {self.ok!r}")
        if type(self.withdrawn) is not bool or (self.withdrawn and self.ok):
            raise ValueError(f"withdrawn must be a bool, and false for an ok attempt, got {self.withdrawn!r}")
        if self.failed_in not in FAILED_IN or (self.failed_in is not None and self.ok):
            raise ValueError(f"failed_in must be one of {list(FAILED_IN)}, and None for an ok attempt, "
                             f"got {self.failed_in!r}")
        object.__setattr__(self, "step_times_ms", tuple(float(t) for t in self.step_times_ms))
        for name in _STEP_CONTENTION:
            values = getattr(self, name)
            if values is None:
                continue
            values = tuple(values)
            if len(values) != len(self.step_times_ms):
                raise ValueError(f"{name} must have one value per step ({len(self.step_times_ms)}), "
                                 f"got {len(values)}")
            object.__setattr__(self, name, values)
        for name in ("runq_wait_ms", "cpu_ms", "wait_share", "nivcsw"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0 or None, got {value!r}")
        self._check_interleaving_fields()
        status = self.contention_status
        if status is not None and status != "measured" and not str(status).startswith("unavailable: "):
            raise ValueError(f"contention_status must be None, 'measured' or 'unavailable: <why>', got {status!r}")
        if self.ok:
            if self.failure is not None:
                raise ValueError(f"an ok attempt cannot have a failure, got {self.failure!r}")
            for name in ("latency_ms", "quality"):
                value = getattr(self, name)
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"an ok attempt needs a finite {name}, got {value!r}")
            if self.latency_ms <= 0:
                raise ValueError(f"latency_ms must be > 0, got {self.latency_ms!r}")
        elif not isinstance(self.failure, str) or not self.failure.strip():
            raise ValueError(f"a failed attempt needs a failure reason, got {self.failure!r}")
        if self.mem_status not in _MEM_STATUSES:
            raise ValueError(f"mem_status must be one of {list(_MEM_STATUSES)}, got {self.mem_status!r}")
        if self.runner not in _RUNNERS:
            raise ValueError(f"runner must be one of {list(_RUNNERS)}, got {self.runner!r}")

    def _check_interleaving_fields(self) -> None:
        """The quiet-step figures and the step order."""
        value = self.uncontended_latency_ms
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value < math.inf):
            raise ValueError(f"uncontended_latency_ms must be a finite number > 0 or None, got {value!r}")
        count = self.uncontended_steps
        if count is not None and (type(count) is not int or not 0 <= count <= len(self.step_times_ms)):
            raise ValueError(f"uncontended_steps must be an integer in [0, {len(self.step_times_ms)}] or None, "
                             f"got {count!r}")
        if self.step_order is not None:
            order = tuple(self.step_order)
            if len(order) != len(self.step_times_ms):
                raise ValueError(f"step_order must have one value per step ({len(self.step_times_ms)}), "
                                 f"got {len(order)}")
            if any(type(i) is not int or i < 0 for i in order) or any(a >= b for a, b in zip(order, order[1:])):
                raise ValueError(f"step_order must be increasing integers >= 0, got {list(order)}")
            object.__setattr__(self, "step_order", order)

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field (``step_times_ms`` and the per-step lists as lists)."""
        result = dataclasses.asdict(self)
        result["step_times_ms"] = list(self.step_times_ms)
        for name in (*_STEP_CONTENTION, "step_order"):
            if result[name] is not None:
                result[name] = list(result[name])
        return result

    @classmethod
    def from_dict(cls, data: dict) -> "AttemptResult":
        """Rebuild a result from :meth:`to_dict` output.

        Raises:
            ValueError: unknown fields, or the fields contradict each other.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown AttemptResult fields: {unknown}")
        return cls(**data)


def interleave(n: int, arms: tuple[str, str] = ("baseline", "candidate")) -> list[str]:
    """The ABBA order of ``n`` attempts per arm: A B B A A B B A ...

    Alternating which arm goes first cancels a linear drift (warming machine, filling cache)
    between the arms, which a plain A B A B order would charge to one of them.

    Args:
        n: attempts per arm (>= 0).
        arms: the two arm names, first arm first.

    Returns:
        ``2 * n`` arm names, exactly ``n`` of each.

    Raises:
        ValueError: ``n`` is not an integer >= 0, or ``arms`` is not two distinct names.
    """
    if type(n) is not int or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if len(arms) != 2 or arms[0] == arms[1]:
        raise ValueError(f"arms must be two distinct names, got {arms!r}")
    first, second = arms
    order: list[str] = []
    for pair in range(n):
        order.extend((first, second) if pair % 2 == 0 else (second, first))
    return order


def execute_in_process(workload_name: str, conditions: dict, *, warmup: int, steps: int,
                       threads: int | None, probe: bool, timeout_s: float | None,
                       memory: bool = True, measures: tuple[str, ...] = ()) -> AttemptResult:
    """Run the attempt here and now; every failure of the workload becomes the result.

    The body of both modes: the child process of a supervised attempt calls it too. Whatever
    stops the attempt (an exception in a step, ``quality()``, the memory estimate or the probe,
    a ``sys.exit``), the measured steps completed before it are kept in the result, with their
    contention figures. ``KeyboardInterrupt`` is not the workload's failure: it propagates.
    """
    import torch

    from ._evidence import collect_memory_evidence
    from ._interface import device_of, make_workload
    from ._probe import probe_correctness
    from ._timing import TimedSteps, pinned_threads, time_steps

    started = time.perf_counter()
    deadline = None if timeout_s is None else started + timeout_s
    fields: dict[str, Any] = {}
    failure = detail = None
    phase = failed_in = "factory"  # where the attempt is: a failure's failed_in
    validity = None
    workload = None
    measured = TimedSteps()
    with pinned_threads(threads) as requested_threads:
        try:
            try:
                workload = make_workload(workload_name, conditions)
            except ValueError as error:
                raise _InvalidConditions(error) from error
            device = device_of(workload)
            tokens = getattr(workload, "tokens_per_step", None)
            fields["tokens_per_step"] = int(tokens) if tokens else None
            phase = "warmup"
            warm = time_steps(workload.step, warmup, device=device, phase="warmup", deadline=deadline)
            if warm.failure is None:
                phase = "step"
                with ContentionSampler(warn=False) as sampler:
                    time_steps(workload.step, steps, device=device, deadline=deadline, into=measured,
                               sampler=sampler)
            stopped = warm if warm.failure else measured
            finite_losses = [loss for loss in measured.losses if loss is not None]
            fields["final_loss"] = finite_losses[-1] if finite_losses else None
            if stopped.failure == "timeout" and len(measured.times_ms) < steps:
                failure, detail = _timeout_reason(timeout_s), stopped.failure_detail
            elif stopped.failure == "non_finite_loss":
                failure, detail = "non_finite_loss", stopped.failure_detail
            failed_in = phase  # a loop that stopped early stopped in its own phase
            phase = "tail"
            if failure is None:
                fields["latency_ms"] = statistics.median(measured.times_ms)
                quality = float(workload.quality())
                if not math.isfinite(quality):
                    failure, detail = "non_finite_quality", f"quality() returned {quality!r}"
                else:
                    fields["quality"] = quality
                if tokens:
                    fields["throughput_tok_s"] = tokens * 1e3 / fields["latency_ms"]
                if measures and failure is None:
                    fields["figures"] = measure_figures(measures, workload, {
                        "latency_ms": fields["latency_ms"], "step_times_ms": tuple(measured.times_ms),
                        "quality": fields["quality"], "tokens_per_step": fields["tokens_per_step"],
                        "conditions": dict(conditions), "device": str(device)})
                if memory and _can_inspect(workload):
                    record = collect_memory_evidence(workload)
                    fields["memory"] = record
                    fields["peak_mem_mib"] = record.get("unclamped_reserved_mib", record["reserved_mib"])
                    fields["mem_status"] = record["status"]
            if probe and failure is None and _can_inspect(workload):
                validity = probe_correctness(workload)
            elif probe and failure == "non_finite_loss" and _can_inspect(workload):
                good_steps = len(warm.times_ms) + len(measured.times_ms)
                validity, note = localise_non_finite(workload_name, conditions, good_steps, detail)
                detail = f"{detail}; {note}" if note else detail
        except _InvalidConditions as error:
            failure = f"invalid_conditions: {error.__cause__}"
            detail = _tail(traceback.format_exc())
        except SystemExit as error:
            failure, detail = _exit_reason(error), _tail(traceback.format_exc())
        except Exception as error:  # noqa: BLE001 - every workload failure is data, not a crash
            failure, detail = _describe_exception(error), _tail(traceback.format_exc())
        finally:
            if workload is not None and callable(getattr(workload, "close", None)):
                try:
                    workload.close()
                except SystemExit as error:
                    if failure is None:
                        failure, detail = _exit_reason(error), _tail(traceback.format_exc())
                except Exception as error:  # noqa: BLE001
                    if failure is None:
                        failure, detail = _describe_exception(error), _tail(traceback.format_exc())
            if failure == "non_finite_loss" or (failure or "").startswith("timeout after"):
                phase = failed_in
            # Read while the pin holds: a workload that changed the count changed it here.
            fields.update(measured_threads(measured.threads, requested_threads, torch.get_num_threads()))
    # The steps completed before any failure, with their contention figures, are the result's
    # too: a failed attempt keeps its history (AttemptResult.step_times_ms).
    fields["step_times_ms"] = measured.times_ms
    fields.update(summarize_steps(measured.contention, measured.contention_status))
    if failure is not None:
        # A failed attempt reports no headline figures: they would read as a valid sample.
        for name in ("latency_ms", "quality", "throughput_tok_s", "uncontended_latency_ms", "figures"):
            fields.pop(name, None)
    return AttemptResult(
        ok=failure is None,
        failure=failure,
        failure_detail=detail,
        failed_in=None if failure is None else phase,
        validity=validity,
        wall_s=time.perf_counter() - started,
        workload=workload_name,
        conditions=dict(conditions),
        warmup=warmup,
        steps=steps,
        supervised=False,
        **fields,
    )


def failed_before_start(spec: dict, error: BaseException) -> AttemptResult:
    """The result of an attempt whose workload module raised while a child imported it (call in ``except``)."""
    return AttemptResult(ok=False, failure=describe_failure(error), failure_detail=_tail(traceback.format_exc()),
                         failed_in="import",
                         torch_threads=spec["threads"], threads_requested=spec["threads"], workload=spec["workload"],
                         conditions=dict(spec["conditions"]), warmup=spec["warmup"], steps=spec["steps"])


def measured_threads(per_step: list[int], requested: int, at_end: int) -> dict:
    """``torch_threads``, ``threads_requested`` and ``threads_note`` from the counts read after each step.

    Args:
        per_step: ``torch.get_num_threads()`` after each measured step (``TimedSteps.threads``).
        requested: the count the attempt pinned.
        at_end: the count at the attempt's end, used when no measured step ran.

    Returns:
        The three ``AttemptResult`` fields: the measured count (the one most steps ran with,
        the later one on a tie), the requested one, and a note when they differ.
    """
    seen = list(per_step) or [at_end]
    counts = {count: seen.count(count) for count in seen}
    measured = max(reversed(seen), key=lambda count: counts[count])
    note = None
    if any(count != requested for count in seen):
        where = "after the measured steps" if per_step else "at the end of the attempt (no measured step ran)"
        found = ", ".join(f"{count} ({n} step{'s' if n != 1 else ''})" if per_step else str(count)
                          for count, n in counts.items())
        note = (f"torch's intra-op thread count was pinned to {requested} but measured {found} {where}: "
                f"the workload changed it (torch.set_num_threads?); recorded as {measured}")
    return {"torch_threads": measured, "threads_requested": requested, "threads_note": note}


def localise_non_finite(workload_name: str, conditions: dict, good_steps: int,
                         observed: str) -> tuple[dict | None, str | None]:
    """Replay an attempt up to its first non-finite step, from the same seed, and probe that step.

    The failed workload cannot be probed as it is: the optimizer has already spread the NaN into
    every parameter, so every module would look guilty. A fresh workload from the same factory,
    conditions and seed, stepped ``good_steps`` times, is where the failing step began, and its
    next batch is that step's batch.

    Returns:
        The correctness record and a note on the replay (``None`` when it went as expected).
        When the replay shows no problem, the record still says what was observed (a
        non-finite loss, ``first_failure='loss'``) and that it did not reproduce.
    """
    from ._interface import make_workload
    from ._probe import probe_correctness

    replayed = None
    try:
        replayed = make_workload(workload_name, conditions)
        for _ in range(good_steps):
            replayed.step()
        record = probe_correctness(replayed, batch=replayed.next_batch())
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the attempt has failed already; say why this did too
        return None, f"replaying for the probe failed: {describe_failure(error)}"
    finally:
        if replayed is not None and callable(getattr(replayed, "close", None)):
            replayed.close()
    record["details"]["replay_of"] = f"step {good_steps} from the start, after {good_steps} good steps"
    if record["run_valid"]:
        record = {
            **record,
            "status": "invalid",
            "run_valid": False,
            "issues": ["numerical"],
            "first_failure": "loss",
            "reproducible": False,
            "details": {**record["details"], "observed": observed},
        }
        validate_validity_report(record)
        return record, "the replay from the same seed did not reproduce the non-finite loss"
    return record, None


class _InvalidConditions(Exception):
    """Marks a ValueError raised while building the workload: a condition, not a step, failed."""


def _resolve_count(name: str, given: int | None, conditions: dict, default: int, minimum: int) -> int:
    from_conditions = conditions.get(name)
    if from_conditions is not None:
        from_conditions = parse_int(name, from_conditions, minimum=minimum)
    if given is not None:
        given = parse_int(name, given, minimum=minimum)
        if from_conditions is not None and from_conditions != given:
            raise ValueError(
                f"{name}={given!r} disagrees with conditions[{name!r}]={conditions[name]!r}; "
                "give it once or give the same value"
            )
        return given
    return default if from_conditions is None else from_conditions


def prepare_spec(workload_name: str, conditions: dict, *, warmup: int | None, steps: int | None,
                 threads: int | None, timeout_s: float, probe: bool, supervised: bool,
                 import_workload: bool = False, memory: bool = True,
                 measures: tuple[str, ...] = ()) -> dict:
    """Check the arguments of an attempt and return its spec (what a child needs to run it).

    Args:
        import_workload: find the factory here, importing its module: only for an in-process
            attempt, which runs the module's code here anyway. ``False`` (supervised attempts)
            checks only the name's form: the module's code runs in children only (the fork
            runner's server imports it under supervision; a spawned child resolves it first
            and refuses a name that does not resolve).

    Raises:
        ValueError: see :func:`run_attempt`.
    """
    if not isinstance(conditions, dict):
        raise ValueError(f"conditions must be a dict, got {type(conditions).__name__}")
    if import_workload:
        from ._interface import resolve_workload

        resolve_workload(workload_name)
    else:
        workload_target(workload_name)
    warmup = _resolve_count("warmup", warmup, conditions, DEFAULT_WARMUP, minimum=0)
    steps = _resolve_count("steps", steps, conditions, DEFAULT_STEPS, minimum=1)
    if threads is None:
        threads = caller_threads()
    elif type(threads) is not int or threads < 1:
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    measures = check_measures(measures, supervised)
    if supervised:
        try:
            conditions = json.loads(json.dumps(conditions))
        except (TypeError, ValueError) as error:
            raise ValueError(f"conditions must be JSON-serialisable for a supervised attempt: {error}") from error
    return {"workload": workload_name, "conditions": conditions, "warmup": warmup, "steps": steps,
            "threads": threads, "probe": probe, "memory": bool(memory),
            "measures": list(measures)}


def caller_threads() -> int:
    """torch's intra-op thread count here, the default of an attempt's ``threads`` (imports torch).

    A fork runner, whose caller need not import torch, asks its server instead
    (``ForkRunner.default_threads``) unless the caller has imported it.
    """
    import torch

    return torch.get_num_threads()


def child_env() -> dict:
    """The parent's environment, with its ``sys.path`` in ``PYTHONPATH`` (:func:`~._site.site_env` here).

    The child must import what the parent can: a factory in a test directory, a package on a
    path inserted at runtime.
    """
    return site_env()


def kill_group(pgid: int) -> None:
    """SIGKILL a child's process group (the child and, say, its DataLoader workers)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_child(pid: int) -> None:
    """End a supervised child and everything below it: its descendants in sessions of their own too.

    The child is a subreaper (``_contain``), so while it lives every process it started, even
    one that left its process group and was orphaned, is still in its tree; the tree is
    stopped, then killed, then the child's process group.
    """
    kill_tree(pid, include_root=True)
    kill_group(pid)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_reason(exitcode: int) -> str:
    """``killed by signal <NAME>`` for a negative exit code, else ``exited with code <n>``."""
    return f"killed by signal {signal_name(-exitcode)}" if exitcode < 0 else f"exited with code {exitcode}"


class WorkloadRefused(ValueError):
    """A supervised child found that the workload's name does not resolve (no such module or factory)."""


def read_payload(result_path: Path) -> tuple[dict | None, str | None]:
    """The result a child wrote, or ``None`` and why it cannot be used (``None`` when absent).

    Raises:
        WorkloadRefused: the child wrote a refusal instead (:func:`write_refusal`).
    """
    if not result_path.exists():
        return None, None
    try:
        stored = read_json(result_path, "the attempt result")
        if "refused" in stored:
            raise WorkloadRefused(str(stored["refused"]))
        payload = stored.get("result")
        if not isinstance(payload, dict):
            raise FormatError("the attempt result has no 'result' object")
    except (OSError, FormatError) as error:
        return None, f"unreadable result ({error})"
    return payload, None


def write_result(result_path: str | os.PathLike, result: AttemptResult) -> None:
    """Write a child's result for :func:`read_payload` (atomically)."""
    write_json_atomic(result_path, {"result": result.to_dict()})


def write_refusal(result_path: str | os.PathLike, message: str) -> None:
    """Write, instead of a result, that the workload's name does not resolve (:class:`WorkloadRefused`)."""
    write_json_atomic(result_path, {"refused": message})


def result_of_ending(spec: dict, *, timeout_s: float, runner: str, wall_s: float, exitcode: int | None,
                     timed_out: bool, payload: dict | None, log_tail: str,
                     died_detail: str | None = None) -> AttemptResult:
    """Turn the way a supervised child ended into the attempt's result (both runners).

    Args:
        died_detail: what a non-zero exit means, when the child was not yet running the
            attempt (the default says whether it died before or after writing its result).
    """
    base = {
        "workload": spec["workload"],
        "warmup": spec["warmup"],
        "steps": spec["steps"],
        "supervised": True,
        "wall_s": wall_s,
        "exitcode": exitcode,
        "runner": runner,
        "threads_requested": spec["threads"],
    }
    if timed_out:
        return AttemptResult(ok=False, failure=_timeout_reason(timeout_s), failure_detail=log_tail or None,
                             torch_threads=spec["threads"], **base)
    if exitcode != 0:
        if died_detail is None:
            written = "after" if payload is not None else "before"
            died_detail = f"the child died {written} writing its result"
        return AttemptResult(ok=False, failure=exit_reason(exitcode), failure_detail=f"{died_detail}\n{log_tail}",
                             torch_threads=spec["threads"], **base)
    if payload is None:
        return AttemptResult(ok=False, failure="exited with code 0",
                             failure_detail=f"the child wrote no result\n{log_tail}",
                             torch_threads=spec["threads"], **base)
    payload = dict(payload)
    payload.pop("conditions", None)
    return AttemptResult.from_dict({**payload, **base})


@dataclass
class Spawned:
    """How a spawned, contained child ended (:func:`spawn_contained`)."""

    exitcode: int
    timed_out: bool
    wall_s: float
    log_tail: str
    #: Why, when what ran the child failed rather than the child (a fork runner's server died).
    reason: str | None = None


def spawn_contained(spec: dict, result_path: Path, timeout_s: float, log_path: Path,
                    site: Site | None = None) -> Spawned:
    """Run ``python -m mlflow_perfgate.workloads._child SPEC RESULT`` for ``spec``, contained.

    The child starts under ``python -m mlflow_perfgate._contain keep``: a keeper with a
    parent-death signal towards this process and a subreaper, which runs the child (itself a
    subreaper, with a parent-death ``SIGKILL``), ends whatever it left and exits as it did. On
    a timeout or an interrupt here, the whole tree is stopped and killed (:func:`end_child`).
    ``site``: where it runs (its interpreter, folder and path; ``None``: here, :mod:`._site`).
    """
    started = time.perf_counter()
    return wait_contained(start_contained(spec, result_path, log_path, site), timeout_s, log_path, started)


def start_contained(spec: dict, result_path: Path, log_path: Path, site: Site | None = None) -> subprocess.Popen:
    """Start :func:`spawn_contained`'s child and return at once; :func:`wait_contained` follows it."""
    spec_path = result_path.with_name("spec.json")
    write_json_atomic(spec_path, {"spec": spec})
    python = sys.executable if site is None else site.python
    command = [python, "-m", _CONTAIN_MODULE, "keep", str(os.getpid()), _CHILD_MODULE,
               str(spec_path), str(result_path)]
    with open(log_path, "wb") as log:
        # A session of its own makes the child a process-group leader, so one killpg also
        # ends the workers it forked.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=site_env(site), cwd=None if site is None else site.cwd,
                                start_new_session=True)


def wait_contained(process: subprocess.Popen, timeout_s: float, log_path: Path, started: float) -> Spawned:
    """Wait up to ``timeout_s`` for a child of :func:`start_contained` (``started``: a
    ``time.perf_counter()``, for ``wall_s``); past it, or on an interrupt, end its whole tree."""
    timed_out = False
    try:
        exitcode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        end_child(process.pid)
        exitcode = process.wait()
    except BaseException:
        end_child(process.pid)
        process.wait()
        raise
    finally:
        # Workers orphaned by a crashed child would otherwise outlive the attempt.
        kill_group(process.pid)
    return Spawned(exitcode=exitcode, timed_out=timed_out, wall_s=time.perf_counter() - started,
                   log_tail=_tail(log_path.read_text(errors="replace")))


def run_spawned(spec: dict, timeout_s: float, site: Site | None = None) -> AttemptResult:
    """The spawn runner: a fresh, contained ``python -m mlflow_perfgate.workloads._child`` for the attempt
    (at ``site``, :func:`spawn_contained`).

    Raises:
        WorkloadRefused: the child found that the workload's name does not resolve.
    """
    with tempfile.TemporaryDirectory(prefix="perfgate-attempt-") as tmp:
        result_path = Path(tmp) / "result.json"
        ended = spawn_contained(spec, result_path, timeout_s, Path(tmp) / "child.log", site)
        return spawned_result(spec, ended, result_path, timeout_s)


def spawned_result(spec: dict, ended: Spawned, result_path: Path, timeout_s: float) -> AttemptResult:
    """The spawn runner's result of a contained child that ended (its result file still there)."""
    log_tail, payload = ended.log_tail, None
    if not ended.timed_out:
        payload, note = read_payload(result_path)
        if note:
            log_tail = f"{note}\n{log_tail}"
    return result_of_ending(spec, timeout_s=timeout_s, runner="spawn", wall_s=ended.wall_s,
                            exitcode=ended.exitcode, timed_out=ended.timed_out, payload=payload,
                            log_tail=log_tail)
