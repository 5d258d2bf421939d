"""Lockstep rounds: each arm in a child of its own, their measured steps alternated by the parent.

Step interleaving (``_interleave``) puts both arms in one process, so that their steps see the
same moments of contention. Two revisions of the code, two Python environments, two devices, or
arms with different ``warmup`` or ``steps`` cannot share a process. Here each arm of a round has
its own child, started at the arm's :class:`~._site.Site` (its worktree, its interpreter): each
builds its workload and warms up, then waits at its gate (``_gate``); the parent opens both
gates and drives the measured steps one at a time through the gate's pipes, in the order of
:func:`lockstep_sequence` (A B B A A B ..., as one process would run them), waiting for each
step's reply before the next step begins. Each child times only its own step, inside its own
clock (``time.perf_counter``, the device synchronised), so the pipe's round trip is outside every
measured time, and only one arm's step runs at any moment, as in one process.

``duet`` runs both arms' steps at once instead (duet benchmarking: both children told to step
together, their replies awaited together): the same moments of contention, but each arm's step
shares the machine with the other arm's.

Each child gives its own arm's attempt, with everything an attempt records (step times, quality,
memory record, probe, contention figures read in its own process). A child that crashes, hangs
past its limit or leaves the protocol fails its own attempt only: the other arm's child runs its
remaining steps back to back and its attempt stands. The parent keeps every step time a child
answered, so a crashed arm's attempt keeps the steps it completed.

The child's side is :func:`run_lockstep_spec` (the spec's ``kind`` is ``lockstep``; either
runner's child runs it, ``_child.run_spec``); the parent's side is :class:`LockstepPair`, over two
begun children of the runners (``_runner``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from ._attempt import AttemptResult, interleave, prepare_spec, write_result
from ._failures import tail
from ._gate import END, NEXT, QUIT, REPLY_SIZE, Commands, decode_reply
from ._interleave import _Arm, _finish_arm, _result

__all__ = ["LOCKSTEP", "LockstepPair", "execute_lockstep_arm", "lockstep_sequence", "prepare_lockstep_spec",
           "run_lockstep_spec"]

#: The spec ``kind`` of one arm's child in a lockstep round.
LOCKSTEP = "lockstep"
#: An arm's failure when the parent ended its measured steps before they were all run (it left the protocol).
_SHORT = "lockstep: the parent ended the measured steps after {done} of {steps}"


def lockstep_sequence(steps_a: int, steps_b: int) -> list[int]:
    """The order of both arms' measured steps, arm A (0) leading: A B B A A B B A ..., as one process
    would run them (:func:`~._attempt.interleave`); once an arm has run all its steps, the other's
    remaining steps follow back to back.

    Returns:
        ``0`` (arm A) or ``1`` (arm B) per step: ``lockstep_sequence(2, 3)`` is ``[0, 1, 1, 0, 1]``.
    """
    done, order = [0, 0], []
    needed = (steps_a, steps_b)
    for which in interleave(max(steps_a, steps_b), ("a", "b")):
        index = 0 if which == "a" else 1
        if done[index] < needed[index]:
            order.append(index)
            done[index] += 1
    return order


# -- the child's side ------------------------------------------------------------------------------

def execute_lockstep_arm(workload_name: str, conditions: dict, *, warmup: int, steps: int, threads: int | None,
                         probe: bool, gate: str, memory: bool = True,
                         measures: tuple[str, ...] = (), cpus: list[int] | None = None) -> AttemptResult | None:
    """One arm of a lockstep round, here: build and warm up, wait at the gate, step when told, then the tail.

    Every workload failure is data (the arm's result says it); each ``next`` is answered, with
    ``None`` once the arm has failed. The parent's ``quit`` (it stopped the round) ends the arm
    with no result (``None``).

    Returns:
        The arm's result, as :func:`~._interleave.execute_interleaved` gives each arm's
        (``step_order`` left to the parent, which knows the shared sequence), or ``None``.
    """
    from ._interface import device_of, make_workload
    from ._timing import pinned_threads, time_steps
    from ._contention import ContentionSampler

    started = time.perf_counter()
    allowed = None
    if cpus:  # both arms' children on the same CPUs, as one process's arms are (``_siterunner.shared_cpus``)
        try:
            allowed = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        except OSError:
            allowed = None
    arm = _Arm(dict(conditions))
    commands = Commands(gate)
    try:
        with pinned_threads(threads) as torch_threads:
            try:
                try:
                    arm.workload = make_workload(workload_name, arm.conditions)
                    arm.device = device_of(arm.workload)
                    tokens = getattr(arm.workload, "tokens_per_step", None)
                    arm.fields["tokens_per_step"] = int(tokens) if tokens else None
                except ValueError as error:
                    import traceback

                    arm.failure, arm.detail = f"invalid_conditions: {error}", tail(traceback.format_exc())
                except Exception as error:  # noqa: BLE001 - the arm's failure, answered to the parent
                    arm.fail(error)
                arm.phase = "warmup"
                if arm.alive:
                    try:
                        time_steps(arm.workload.step, warmup, device=arm.device, phase="warmup", into=arm.warm)
                    except Exception as error:  # noqa: BLE001
                        arm.fail(error)
                    else:
                        arm.stopped(arm.warm, steps, None)
                go, waited = commands.wait_go()
                arm.fields["gate_wait_s"] = waited
                if not go:
                    return None
                arm.phase = "step"
                command = _measure(arm, commands, steps, ContentionSampler, time_steps)
                if command == QUIT:
                    return None
                if arm.measured.times_ms:
                    from ._heap import keep_freed_memory

                    keep_freed_memory()  # the child ends after its tail
                if allowed is not None:  # nothing is measured now: both arms' tails run at once
                    try:
                        os.sched_setaffinity(0, allowed)
                    except OSError:
                        pass
                arm.phase = "tail"
                _finish_arm(arm, workload_name, probe, memory, measures, shared_process=False)
                arm.fields["step_order"] = None  # the parent's to give: it knows the shared sequence
            finally:
                if arm.workload is not None and callable(getattr(arm.workload, "close", None)):
                    try:
                        arm.workload.close()
                    except Exception as error:  # noqa: BLE001
                        arm.fail(error)
    finally:
        commands.close()
    wall_s = time.perf_counter() - started - (arm.fields.get("gate_wait_s") or 0.0)
    return dataclasses.replace(_result(arm, workload_name, warmup, steps, torch_threads, wall_s), torch_state=None)


def _measure(arm: _Arm, commands: Commands, steps: int, sampler_type, time_steps) -> bytes:
    """Step when told, answer each ``next``; the command that ended the measured steps."""
    with sampler_type(warn=False) as sampler:
        while True:
            command = commands.next()
            if command != NEXT:
                break
            done = len(arm.measured.times_ms)
            if not arm.alive or done >= steps:
                commands.reply(None if not arm.alive else arm.measured.times_ms[-1])
                continue
            try:
                time_steps(arm.workload.step, 1, device=arm.device, into=arm.measured, sampler=sampler,
                           first_index=done)
            except Exception as error:  # noqa: BLE001 - this arm fails; the parent goes on with the other
                arm.fail(error)
            else:
                arm.stopped(arm.measured, steps, None)
            stepped = len(arm.measured.times_ms) > done
            commands.reply(arm.measured.times_ms[-1] if arm.alive and stepped else None)
    if command == END and arm.alive and len(arm.measured.times_ms) < steps:
        arm.failure, arm.detail = _SHORT.format(done=len(arm.measured.times_ms), steps=steps), None
    return command


def prepare_lockstep_spec(workload_name: str, conditions: dict, **arguments: Any) -> dict:
    """Check one arm's arguments as :func:`~._attempt.prepare_spec` does; its child's spec.

    Raises:
        ValueError: as :func:`~._attempt.prepare_spec` says.
    """
    return {**prepare_spec(workload_name, conditions, **arguments), "kind": LOCKSTEP}


def run_lockstep_spec(spec: dict, result_path: str) -> int:
    """In a child: run one arm of ``spec`` (its ``gate`` set by the runner), write its result; the exit code.

    A round the parent stopped writes nothing: the parent reads no result of it.
    """
    result = execute_lockstep_arm(spec["workload"], spec["conditions"], warmup=spec["warmup"], steps=spec["steps"],
                                  threads=spec["threads"], probe=spec["probe"], gate=spec["gate"],
                                  memory=spec.get("memory", True), measures=tuple(spec.get("measures", ())),
                                  cpus=spec.get("cpus"))
    if result is not None:
        write_result(result_path, result)
    return 0


# -- the parent's side -----------------------------------------------------------------------------

class LockstepPair:
    """A lockstep round begun: two gated children (``_runner``'s), one per arm, both building and warming up.

    End it with exactly one of :meth:`finish` and :meth:`cancel`; :meth:`open` and :meth:`measured`
    may come before :meth:`finish` (the runners' :class:`~._runner.PendingPair` contract).

    Args:
        children: arm A's and arm B's begun child; each has ``gate``, ``open()``, ``extend(s)``,
            ``wait_reply(size)``, ``lead()`` and ``cancel()``/``release()``.
        steps: each arm's measured steps.
        duet: both arms' steps at once, instead of one at a time.
    """

    def __init__(self, children: tuple, steps: tuple[int, int], *, duet: bool = False) -> None:
        self.children = children
        self.steps = steps
        self.duet = duet
        self.driven = False
        self.done = False
        self.opened: float | None = None
        self.positions: tuple[list[int], list[int]] = ([], [])
        self.times: tuple[list[float], list[float]] = ([], [])
        self.answering = [True, True]  # the child still answers (it has not died, timed out or left the protocol)
        self.notes: list[str | None] = [None, None]

    def open(self) -> None:
        if self.done:
            raise ValueError("this pair was finished or cancelled already")
        if self.opened is None:
            self.opened = time.perf_counter()
            for child in self.children:
                child.open()

    def measured(self) -> bool:
        """Open both gates, run every measured step and end them (the children's tails begin); whether any
        step was measured. Each child is then past its measured steps (``gate.measured``): the next
        round's children may begin beside these tails (``_runner.ForkRunner``)."""
        self.open()
        if not self.driven:
            self._drive()
            for which, child in enumerate(self.children):
                if self.answering[which]:
                    child.gate.send(END)
                child.gate.measured = True
        return any(self.times)

    def _step(self, which: int, position: int) -> None:
        """Tell one child to step and wait for its answer (up to its own limit)."""
        child = self.children[which]
        child.gate.send(NEXT)
        self._answer(which, position)

    def _answer(self, which: int, position: int) -> None:
        child = self.children[which]
        reply = child.wait_reply(REPLY_SIZE)
        if reply is None:  # it ended, or its time ran out: its own ending says how (lead)
            self.answering[which] = False
            return
        try:
            step_ms = decode_reply(reply)
        except ValueError as error:
            self.answering[which] = False
            self.notes[which] = f"the child left the lockstep protocol ({error})"
            child.kill()
            return
        if step_ms is None:  # its arm failed: it says why in its result, and measures no more
            self.answering[which] = False
            child.gate.send(END)
            return
        self.positions[which].append(position)
        self.times[which].append(step_ms)

    def _drive(self) -> None:
        self.driven = True
        if self.duet:
            for position in range(max(self.steps)):
                asked = [which for which in (0, 1) if self.answering[which] and position < self.steps[which]]
                for which in asked:
                    self.children[which].gate.send(NEXT)
                for which in asked:
                    self._answer(which, position)
            return
        for position, which in enumerate(lockstep_sequence(*self.steps)):
            if not self.answering[which]:
                continue
            began = time.monotonic()
            self._step(which, position)
            # the other child waited meanwhile: its limit is its own steps' and tail's
            self.children[1 - which].extend(time.monotonic() - began)

    def finish(self) -> tuple[AttemptResult, AttemptResult]:
        """Run the measured steps if :meth:`measured` has not, end them, and give each arm's result."""
        if self.done:
            raise ValueError("this pair was finished or cancelled already")
        try:
            self.measured()
            results = []
            for which, child in enumerate(self.children):  # both tails run at once; nothing is measured now
                results.append(self._own(which, child.lead()))
            after = time.perf_counter() - self.opened
            return tuple(dataclasses.replace(result, after_gate_s=after) for result in results)
        except BaseException:  # an interrupt, a runner's error: neither child may outlive the pair
            self._end_children()
            raise
        finally:
            self.done = True
            for child in self.children:
                child.release()

    def _own(self, which: int, result: AttemptResult) -> AttemptResult:
        """The child's result with the shared sequence's positions; a child that ended without a result
        keeps the step times it answered."""
        positions, times = self.positions[which], self.times[which]
        detail = result.failure_detail
        if self.notes[which]:
            detail = f"{self.notes[which]}\n{detail or ''}"
        if not result.step_times_ms and times and not result.ok:
            return dataclasses.replace(result, step_times_ms=tuple(times), step_order=tuple(positions),
                                       failure_detail=detail)
        if len(result.step_times_ms) == len(positions):
            return dataclasses.replace(result, step_order=tuple(positions), failure_detail=detail)
        return dataclasses.replace(result, failure_detail=detail)

    def cancel(self) -> None:
        """End both children: one not let through ends without measuring, one let through is told to quit."""
        if self.done:
            return
        self.done = True
        self._end_children()

    def _end_children(self) -> None:
        """Tell the children let through to quit, then end each (one that does not end at once is killed)."""
        try:
            for child in self.children:
                if not child.done and child.gate.opened_at is not None:
                    child.gate.send(QUIT)
        finally:
            for child in self.children:
                child.cancel()

