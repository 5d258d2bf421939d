"""Step-level interleaving: both arms of a comparison in one child, their measured steps alternating.

Interleaving whole attempts (ABBA, ``interleave``) puts seconds between a baseline step and the
candidate step it is compared with; a neighbour that starts or stops in between moves one arm
and not the other. Here both arms live in one process: each workload is built once (the leading
arm first), each runs its warm-up steps (both arms warmed, then measured), and then their
measured steps alternate A B B A A B B A ..., so that the two arms see the same contention within
a fraction of a second. The ABBA order within the child cancels a linear drift between the arms,
as it does between attempts.

One child gives one attempt per arm, each with its own result: its step times (and their
positions in the shared sequence, ``step_order``), quality, memory record, correctness probe and
the kernel's contention figures (read around each step, when only that arm's step runs). A
failure of one arm (an exception or a non-finite loss in its step, a factory that refuses its
conditions, a failing ``quality()``) fails that arm's attempt; the other arm goes on alone, its
remaining steps back to back. A crash of the child (a signal, a timeout, an exit without
results) fails the arm whose code was running (:class:`Progress` notes whose, before each
factory, warm-up, measured step and tail) and withdraws the other's attempt
(``AttemptResult.withdrawn``); both fail only where the child died before either arm began.

Both arms must be able to live in one process: the same workload factory and the same device,
and the same ``warmup`` and ``steps`` (the harness refuses a comparison whose changed variable is
one of these before anything runs). On CUDA the two arms share one caching allocator, so a
measured peak memory is the process's, both arms' together (the memory record says so).

The child side is :func:`execute_interleaved`; supervised, it runs in a child of either runner
(the spec's ``kind`` is ``interleaved``, see ``_child.run_spec``), which writes both results to
the spec's ``pair_result`` file, then the leading arm's as the runner's usual result, so every way
the child can end is read by the runner's own code (:func:`pair_results` turns it into two).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ._attempt import AttemptResult, interleave, localise_non_finite, prepare_spec, write_result
from ._failures import can_inspect, describe_exception, tail, timeout_reason
from ._measures import measure_figures
from ._contention import ContentionSampler, summarize_steps
from ._wire import FormatError, read_json, write_json_atomic

# torch and the modules that need it are imported in the child that runs the pair (the
# functions before prepare_interleaved_spec); the runner's side imports no torch.

__all__ = ["INTERLEAVED", "INTERLEAVE_REFUSED", "Progress", "execute_interleaved", "pair_results",
           "prepare_interleaved_spec", "read_progress", "run_interleaved_spec", "run_pair", "step_positions"]

#: The spec ``kind`` of a step-interleaved child.
INTERLEAVED = "interleaved"
#: The failure of both arms whose process-wide state cannot share one process (``_globals``): the
#: harness turns it into a refusal of ``--interleave steps``.
INTERLEAVE_REFUSED = "interleave_refused"
#: What the memory record of a step-interleaved arm on CUDA says about its measured peak.
_SHARED_PEAK_NOTE = "measured in a step-interleaved child: the CUDA peak is the process's, both arms' together"


#: Where a shared child is, as :class:`Progress` writes it: the phase, then the arm (``a``: the leading one).
_PHASES = {b"b": "factory", b"w": "warm-up", b"s": "measured step", b"t": "tail (quality, memory record, probe)"}
#: Each of those as ``AttemptResult.failed_in``.
_FAILED_IN = {"factory": "factory", "warm-up": "warmup", "measured step": "step",
              "tail (quality, memory record, probe)": "tail"}


class Progress:
    """Where the shared child is, written before each arm's factory, warm-up, tail and each measured
    step (two bytes at the start of a file, one ``pwrite``, outside every clock), so that the parent
    can tell whose code was running when the child died (:func:`read_progress`)."""

    def __init__(self, path: str | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600) if path else None

    def at(self, phase: bytes, arm: int) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, phase + (b"a" if arm == 0 else b"b"), 0)

    def done(self) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, b"--", 0)
            os.close(self.fd)
            self.fd = None


def read_progress(path: str | None) -> tuple[str, int] | None:
    """``(phase, arm)`` where a dead shared child last was (``arm`` 0 is the leading one), or ``None``
    when it wrote nothing or had finished both arms."""
    try:
        with open(path, "rb") as handle:
            record = handle.read(2)
    except (OSError, TypeError):
        return None
    if len(record) != 2 or record[:1] not in _PHASES or record[1:] not in (b"a", b"b"):
        return None
    return _PHASES[record[:1]], 0 if record[1:] == b"a" else 1


def step_positions(steps: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The positions of each arm's measured steps in the shared sequence A B B A A B B A ...

    Returns:
        ``(leading arm's positions, other arm's positions)``: for 4 steps ``(0, 3, 4, 7)`` and
        ``(1, 2, 5, 6)``.
    """
    order = interleave(steps, ("a", "b"))
    return (tuple(i for i, arm in enumerate(order) if arm == "a"),
            tuple(i for i, arm in enumerate(order) if arm == "b"))


class _Arm:
    """One arm's state in the shared child."""

    def __init__(self, conditions: dict):
        from ._timing import TimedSteps

        self.conditions = conditions
        self.workload: Any = None
        self.device = None
        #: Where the arm is: ``factory``, ``warmup``, ``step`` (measured) or ``tail``; a failure's
        #: ``failed_in`` is the phase it came in.
        self.phase = "factory"
        self.failed_in: str | None = None
        self._failure: str | None = None
        self.detail: str | None = None
        self.warm = TimedSteps()
        self.measured = TimedSteps()
        self.order: list[int] = []
        self.fields: dict[str, Any] = {}
        self.validity: dict | None = None
        self.state: dict[str, Any] = {}  # the process-global torch state after its factory (_globals)

    @property
    def failure(self) -> str | None:
        return self._failure

    @failure.setter
    def failure(self, value: str | None) -> None:
        if value is not None and self._failure is None:
            self.failed_in = self.phase
        self._failure = value

    @property
    def alive(self) -> bool:
        return self.failure is None

    def fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure, self.detail = describe_exception(error), tail(traceback.format_exc())

    def stopped(self, samples: TimedSteps, steps: int, timeout_s: float | None) -> None:
        """Turn a loop's early stop (a non-finite loss, the deadline) into this arm's failure."""
        if samples.failure == "non_finite_loss":
            self.failure, self.detail = "non_finite_loss", samples.failure_detail
        elif samples.failure == "timeout" and len(self.measured.times_ms) < steps:
            self.failure, self.detail = timeout_reason(timeout_s), samples.failure_detail


def execute_interleaved(workload_name: str, conditions_a: dict, conditions_b: dict, *, warmup: int, steps: int,
                        threads: int | None, probe: bool,
                        timeout_s: float | None, memory: bool = True,
                        measures: tuple[str, ...] = (), gate: str | None = None,
                        progress: str | None = None) -> tuple[AttemptResult, AttemptResult]:
    """Run one attempt of each arm here, their measured steps interleaved; every workload failure is data.

    Arm A (``conditions_a``) leads: it is built first, warms up first and takes the first measured
    step; the measured steps then go A B B A A B ... (:func:`step_positions`). Both arms share the
    pinned thread count and the deadline (``timeout_s``, checked between steps; ``None`` when a
    supervising runner enforces it). The contention sampler is shared too: the kernel's figures
    are the process's, read around each step, when only one arm's step runs.

    With ``gate`` (a :class:`~._gate.Gate`'s path), both arms are built and warmed up, then the
    child waits there until the parent lets it go on (``gate_wait_s`` says how long); a gate
    stopped instead fails both arms with :data:`~._gate.CANCELLED` and measures nothing. Once the
    measured steps are over the child says so (:func:`~._gate.tell_measured`) before its tail,
    and keeps what that tail frees in its heap (:func:`~._heap.keep_freed_memory`: it ends after it).

    Returns:
        ``(result of arm A, result of arm B)``, each as :func:`execute_in_process` would give it
        (``supervised=False``), with ``step_order`` and the shared ``wall_s``.
    """
    from . import _globals
    from ._interface import device_of, make_workload
    from ._timing import pinned_threads, time_steps

    started = time.perf_counter()
    deadline = None if timeout_s is None else started + timeout_s
    arms = (_Arm(dict(conditions_a)), _Arm(dict(conditions_b)))
    where = Progress(progress)  # whose code runs, should the child die in it
    with pinned_threads(threads) as torch_threads:
        initial = _globals.capture()
        try:
            for index, arm in enumerate(arms):
                where.at(b"b", index)
                _globals.apply(initial)  # each factory starts from the process's state, not the other's
                try:
                    arm.workload = make_workload(workload_name, arm.conditions)
                except ValueError as error:
                    arm.failure, arm.detail = f"invalid_conditions: {error}", tail(traceback.format_exc())
                    continue
                except Exception as error:  # noqa: BLE001 - a failure of this arm, not of the other
                    arm.fail(error)
                    continue
                try:
                    arm.device = device_of(arm.workload)
                    tokens = getattr(arm.workload, "tokens_per_step", None)
                    arm.fields["tokens_per_step"] = int(tokens) if tokens else None
                except Exception as error:  # noqa: BLE001
                    arm.fail(error)
                arm.state = _globals.capture()
            if all(arm.alive for arm in arms) and arms[0].device != arms[1].device:
                for arm in arms:
                    arm.failure = (f"invalid_conditions: step interleaving runs both arms in one process on one "
                                   f"device; they are on {arms[0].device} and {arms[1].device}")
            if all(arm.alive for arm in arms):
                _, fixed = _globals.differences(arms[0].state, arms[1].state)
                refusal = _globals.per_process_refusal((arms[0].workload, arms[1].workload),
                                                       (arms[0].conditions, arms[1].conditions), fixed)
                if refusal:
                    for arm in arms:
                        arm.failure, arm.detail = f"{INTERLEAVE_REFUSED}: {refusal}", None
            for index, arm in enumerate(arms):
                arm.phase = "warmup"
                if arm.alive:
                    where.at(b"w", index)
                    _globals.apply(arm.state)
                    try:
                        time_steps(arm.workload.step, warmup, device=arm.device, phase="warmup", deadline=deadline,
                                   into=arm.warm)
                    except Exception as error:  # noqa: BLE001
                        arm.fail(error)
                    else:
                        arm.stopped(arm.warm, steps, timeout_s)
            if gate is not None:
                _wait_at_gate(arms, gate)
                if deadline is not None:  # the wait is the parent's, not the attempt's
                    deadline += arms[0].fields["gate_wait_s"]
            for arm in arms:
                arm.phase = "step"
            _measure(arms, steps, deadline, timeout_s, where)
            if gate is not None and any(arm.measured.times_ms for arm in arms):
                from ._gate import tell_measured
                from ._heap import keep_freed_memory

                tell_measured(gate)  # the parent may now work beside this child's tail
                keep_freed_memory()  # a child of a runner (it has a gate): it ends after its tail
            for index, arm in enumerate(arms):
                arm.phase = "tail"
                where.at(b"t", index)
                _globals.apply(arm.state or initial)
                _finish_arm(arm, workload_name, probe, memory, measures)
        finally:
            for arm in arms:
                if arm.workload is not None and callable(getattr(arm.workload, "close", None)):
                    try:
                        arm.workload.close()
                    except Exception as error:  # noqa: BLE001
                        arm.fail(error)
            where.done()
    wall_s = time.perf_counter() - started - (arms[0].fields.get("gate_wait_s") or 0.0)
    return tuple(_result(arm, workload_name, warmup, steps, torch_threads, wall_s) for arm in arms)


def _wait_at_gate(arms: tuple[_Arm, _Arm], gate: str) -> None:
    """Both arms warm (or failed): wait for the parent; a stopped round measures nothing."""
    from ._gate import CANCELLED, wait_at_gate

    go, waited = wait_at_gate(gate)
    for arm in arms:
        arm.fields["gate_wait_s"] = waited
        if not go and arm.alive:
            arm.failure, arm.detail = CANCELLED, None


def _measure(arms: tuple[_Arm, _Arm], steps: int, deadline: float | None, timeout_s: float | None,
             where: Progress | None = None) -> None:
    """The measured steps, one at a time in the shared ABBA order; an arm that failed drops out."""
    from ._globals import apply
    from ._timing import time_steps

    if not any(arm.alive for arm in arms):
        return
    with ContentionSampler(warn=False) as sampler:
        for position, which in enumerate(interleave(steps, ("a", "b"))):
            arm = arms[0 if which == "a" else 1]
            if not arm.alive:
                continue
            apply(arm.state)  # this arm's threads, precision and flags, outside the clock
            if where is not None:
                where.at(b"s", 0 if which == "a" else 1)
            done = len(arm.measured.times_ms)
            try:
                time_steps(arm.workload.step, 1, device=arm.device, deadline=deadline, into=arm.measured,
                           sampler=sampler, first_index=done)
            except Exception as error:  # noqa: BLE001 - this arm fails; the other goes on
                arm.fail(error)
                continue
            if len(arm.measured.times_ms) > done:
                arm.order.append(position)
            arm.stopped(arm.measured, steps, timeout_s)


def _finish_arm(arm: _Arm, workload_name: str, probe: bool, memory: bool = True,
                measures: tuple[str, ...] = (), *, shared_process: bool = True) -> None:
    """An arm's figures after the measured steps: latency, contention, quality, memory, the probe
    (``shared_process``: the other arm lives in this process too, and a measured peak is both arms')."""
    from ._evidence import collect_memory_evidence
    from ._probe import probe_correctness

    measured, fields = arm.measured, arm.fields
    fields["step_times_ms"] = measured.times_ms
    fields["step_order"] = arm.order
    fields.update(summarize_steps(measured.contention, measured.contention_status))
    finite_losses = [loss for loss in measured.losses if loss is not None]
    fields["final_loss"] = finite_losses[-1] if finite_losses else None
    if arm.workload is None:
        return
    try:
        if arm.alive:
            fields["latency_ms"] = statistics.median(measured.times_ms)
            quality = float(arm.workload.quality())
            if not math.isfinite(quality):
                arm.failure, arm.detail = "non_finite_quality", f"quality() returned {quality!r}"
            else:
                fields["quality"] = quality
            tokens = fields.get("tokens_per_step")
            if tokens:
                fields["throughput_tok_s"] = tokens * 1e3 / fields["latency_ms"]
            if measures and arm.alive:
                fields["figures"] = measure_figures(measures, arm.workload, {
                    "latency_ms": fields["latency_ms"], "step_times_ms": tuple(measured.times_ms),
                    "quality": fields["quality"], "tokens_per_step": fields.get("tokens_per_step"),
                    "conditions": dict(arm.conditions), "device": str(arm.device)})
            if memory and can_inspect(arm.workload):
                record = collect_memory_evidence(arm.workload)
                if record["status"] == "measured" and shared_process:
                    record = {**record, "notes": [*record.get("notes", []), _SHARED_PEAK_NOTE]}
                fields["memory"] = record
                fields["peak_mem_mib"] = record.get("unclamped_reserved_mib", record["reserved_mib"])
                fields["mem_status"] = record["status"]
        if probe and arm.alive and can_inspect(arm.workload):
            arm.validity = probe_correctness(arm.workload)
        elif probe and arm.failure == "non_finite_loss" and can_inspect(arm.workload):
            good_steps = len(arm.warm.times_ms) + len(measured.times_ms)
            arm.validity, note = localise_non_finite(workload_name, arm.conditions, good_steps, arm.detail)
            arm.detail = f"{arm.detail}; {note}" if note else arm.detail
    except Exception as error:  # noqa: BLE001 - every workload failure is data
        arm.fail(error)


def _result(arm: _Arm, workload_name: str, warmup: int, steps: int, torch_threads: int,
            wall_s: float) -> AttemptResult:
    from ._attempt import measured_threads

    fields = dict(arm.fields)
    if arm.failure is not None:
        # A failed attempt reports no headline figures: they would read as a valid sample.
        for name in ("latency_ms", "quality", "throughput_tok_s", "uncontended_latency_ms", "figures"):
            fields.pop(name, None)
    # the threads this arm's own steps ran with (its state re-applied before each), not the pinned count
    fields.update(measured_threads(arm.measured.threads, torch_threads,
                                   arm.state.get("intra_op_threads") or torch_threads))
    state = {key: list(value) if isinstance(value, tuple) else value for key, value in arm.state.items()
             if not key.startswith("env:")} or None
    return AttemptResult(ok=arm.failure is None, failure=arm.failure, failure_detail=arm.detail,
                         failed_in=arm.failed_in if arm.failure is not None else None,
                         validity=arm.validity, wall_s=wall_s, workload=workload_name, torch_state=state,
                         conditions=dict(arm.conditions), warmup=warmup, steps=steps, supervised=False, **fields)


def prepare_interleaved_spec(workload_name: str, conditions_a: dict, conditions_b: dict, *, warmup: int | None,
                             steps: int | None, threads: int | None, timeout_s: float, probe: bool, supervised: bool,
                             import_workload: bool = True, memory: bool = True,
                             measures: tuple[str, ...] = ()) -> dict:
    """Check the arguments of a step-interleaved pair of attempts and return the child's spec.

    Each arm is checked as :func:`prepare_spec` checks an attempt; both must then resolve to the
    same ``warmup`` and ``steps``.

    Raises:
        ValueError: as :func:`run_attempt` says, for either arm, or arms whose ``warmup`` or
            ``steps`` differ.
    """
    arguments = dict(warmup=warmup, steps=steps, threads=threads, timeout_s=timeout_s, probe=probe,
                     supervised=supervised, import_workload=import_workload, memory=memory,
                     measures=measures)
    first = prepare_spec(workload_name, conditions_a, **arguments)
    second = prepare_spec(workload_name, conditions_b, **arguments)
    for name in ("warmup", "steps"):
        if first[name] != second[name]:
            raise ValueError(f"step interleaving alternates the arms' steps one for one: both need the same {name}, "
                             f"got {first[name]} and {second[name]}")
    return {**first, "kind": INTERLEAVED, "other_conditions": second["conditions"]}


def run_interleaved_spec(spec: dict, result_path: str) -> int:
    """In a child: run both arms of ``spec``, write both results to ``spec['pair_result']``, then the
    leading arm's to ``result_path`` (what the runner reads as any attempt's result); the exit code."""
    results = execute_interleaved(spec["workload"], spec["conditions"], spec["other_conditions"],
                                  warmup=spec["warmup"], steps=spec["steps"], threads=spec["threads"],
                                  probe=spec["probe"], timeout_s=None, memory=spec.get("memory", True),
                                  measures=tuple(spec.get("measures", ())), gate=spec.get("gate"),
                                  progress=spec.get("pair_progress"))
    write_json_atomic(spec["pair_result"], {"results": [result.to_dict() for result in results]})
    write_result(result_path, results[0])
    return 0


def _read_pair(path: str) -> tuple[list[dict] | None, str | None]:
    if not Path(path).exists():
        return None, None
    try:
        results = read_json(path, "the interleaved results").get("results")
        if not isinstance(results, list) or len(results) != 2 or not all(isinstance(r, dict) for r in results):
            raise FormatError("the interleaved results are not a list of two result objects")
    except (OSError, FormatError) as error:
        return None, f"unreadable interleaved results ({error})"
    return results, None


def pair_results(lead: AttemptResult, pair_path: str, conditions_a: dict,
                 conditions_b: dict, progress_path: str | None = None) -> tuple[AttemptResult, AttemptResult]:
    """The two arms' results of a supervised step-interleaved child, from the runner's result of it.

    ``lead`` is what the runner made of the child's ending (its exit, a signal, a timeout, the
    server's death), as for any attempt. When the child exited 0 and left both results, each arm
    gets its own, with the runner's view of the child (``wall_s``, ``exitcode``, ``runner``).
    Otherwise the child's ending is the failure of the arm whose code was running when it ended
    (its factory, warm-up, a measured step or its tail: :class:`Progress`, at ``progress_path``),
    and the other arm's attempt is withdrawn (``withdrawn``: it did not fail); where that is not
    known (the child died before either arm began, or the runner's server died), both arms fail.
    """
    base = {"workload": lead.workload, "warmup": lead.warmup, "steps": lead.steps, "supervised": True,
            "wall_s": lead.wall_s, "exitcode": lead.exitcode, "runner": lead.runner}
    payloads, note = _read_pair(pair_path) if lead.exitcode == 0 else (None, None)
    waited = payloads[0].get("gate_wait_s") if payloads is not None else None
    if isinstance(waited, (int, float)) and lead.wall_s is not None:  # the parent's time, not the attempt's
        base["wall_s"] = max(0.0, lead.wall_s - waited)
    pairs = ((conditions_a, 0), (conditions_b, 1))
    if payloads is not None:
        return tuple(AttemptResult.from_dict({**{k: v for k, v in payloads[i].items() if k != "conditions"}, **base,
                                              "conditions": dict(conditions)}) for conditions, i in pairs)
    failure = lead.failure if not lead.ok else "exited with code 0"
    detail = lead.failure_detail if not lead.ok else "the child wrote no interleaved results"
    if note:
        detail = f"{note}\n{detail or ''}"
    where = None if failure.startswith("attempt server died") else read_progress(progress_path)
    results = []
    for conditions, index in pairs:
        if where is None or where[1] == index:
            said = detail if where is None else f"the round's shared child ended in this arm's {where[0]}\n{detail or ''}"
            results.append(AttemptResult(ok=False, failure=failure, failure_detail=said,
                                         failed_in=None if where is None else _FAILED_IN[where[0]],
                                         torch_threads=lead.torch_threads, conditions=dict(conditions), **base))
        else:
            why = (f"withdrawn: the round's shared child ended ({failure}) in the other arm's {where[0]}; this arm's "
                   "attempt did not fail")
            results.append(AttemptResult(ok=False, failure=why, failure_detail=detail, withdrawn=True,
                                         torch_threads=lead.torch_threads, conditions=dict(conditions), **base))
    return tuple(results)


def run_pair(run_spec: Callable[[dict, float], AttemptResult], workload_name: str, conditions_a: dict,
             conditions_b: dict, *, warmup: int | None, steps: int | None, threads: int | None, probe: bool,
             timeout_s: float, import_workload: bool, memory: bool = True,
             measures: tuple[str, ...] = ()) -> tuple[AttemptResult, AttemptResult]:
    """A runner's step-interleaved pair: the spec, the runner's own way of running a child
    (``run_spec(spec, timeout_s)``, its result the leading arm's), then :func:`pair_results`."""
    spec = prepare_interleaved_spec(workload_name, conditions_a, conditions_b, warmup=warmup, steps=steps,
                                    threads=threads, timeout_s=timeout_s, probe=probe, supervised=True,
                                    import_workload=import_workload, memory=memory,
                                    measures=measures)
    with tempfile.TemporaryDirectory(prefix="perfgate-interleaved-") as tmp:
        spec["pair_result"] = str(Path(tmp) / "pair.json")
        spec["pair_progress"] = str(Path(tmp) / "progress")
        lead = run_spec(spec, float(timeout_s))
        return pair_results(lead, spec["pair_result"], conditions_a, conditions_b, spec["pair_progress"])
