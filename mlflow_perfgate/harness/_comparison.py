"""One comparison from its first check to its decision (:class:`Comparison`).

It opens (the runner, the store, the group, the refusals, the comparison run), runs its rounds
(ABBA attempts, step-interleaved rounds or lockstep rounds), looks while a sequential comparison
is undecided, decides through ``evaluate_group`` under the plan's Policy, or stops, ending its
runs KILLED and saying why. ``compare``, suites, ``history --bisect`` and the Ray dispatch run it.
"""

from __future__ import annotations

import contextlib
import sys

from ..errors import InputError, StoreUnavailable

from ._comparison_run import ComparisonRun
from ._conditions import LOCKSTEP_MODES, check_quality_gate_can_fail
from ._signals import _tail_held, stop_handled, stop_if_signalled, terminate_as_exception


class Comparison(ComparisonRun):
    """One comparison in its steps: open (:class:`ComparisonRun`), run its rounds (ABBA attempts,
    step-interleaved or lockstep rounds, then the looks of ``--until-decisive``), decide, or end
    KILLED saying why. :func:`compare` (and through it ``pipeline``, ``suite run``, ``history
    --bisect`` and the Ray dispatch) runs exactly these."""

    # -- rounds -------------------------------------------------------------------------------

    def report(self, arm: str, started, result, bar) -> None:
        """An attempt's outcome written, checked (the change reached the factory, the quality gate can
        fail), reported to the caller and shown (``bar``: a progress bar, or ``None``)."""
        result = self._write_outcome(arm, started, result)
        self.witness.see(arm, result)
        if not self.quality_seen and arm == "baseline" and result.ok:
            self.quality_seen = True
            check_quality_gate_can_fail(result.quality, self.plan.policy.quality_tolerance)
        if self.on_attempt is not None:
            self.on_attempt(arm, result)
        if bar is None:
            return
        bar.set_postfix_str(f"{arm} {'%.3g ms' % result.latency_ms if result.ok else result.failure[:40]}")
        bar.update(1)

    def run_rounds(self, first_pair: int, count: int, bar) -> None:
        """``count`` rounds, one child each, both arms, their steps interleaved; the leading arm
        alternates between rounds (ABBA).

        Each round's child is begun before the previous round is logged: its fork, build and
        warm-up run beside the store's writes, and it waits at its gate (``_gate``) until they are
        done, so no measured step runs beside them. A round is logged before the next one's
        measured steps start: a stop then loses nothing measured.

        The next round's child is begun beside this child's tail (its quality, memory record and
        probe, after its measured steps), where the runner can run two children at once (the fork
        runner): its start, build and warm-up then overlap that tail instead of following it. Its
        two runs are started there too, once a round of the comparison has been logged (its checks
        passed); if the comparison stops before that round is let through, they are withdrawn
        (excluded, never judged), and its child ends without measuring.
        """
        previous = None
        try:
            for index in range(count):
                previous = self._round(first_pair + index, previous, bar, last=index == count - 1)
        finally:
            self._cancel_begun()
        if previous is not None:
            self._report_round(*previous, bar)

    @staticmethod
    def _order(pair: int) -> tuple[str, str]:
        return ("baseline", "candidate") if pair % 2 == 0 else ("candidate", "baseline")

    def _round(self, pair: int, previous: tuple | None, bar, *, last: bool = True) -> tuple:
        """Begin this round's child, log the previous round, start this one's runs, then let it measure."""
        from ..workloads import AttemptRunner, run_interleaved

        stop_if_signalled()
        plan = self.plan
        order = self._order(pair)
        logged_next = () if previous is None else tuple(zip(previous[0], previous[2]))
        arguments = self._arguments(order, logged_next)
        if not isinstance(self.active, AttemptRunner):  # in this process: nothing can run ahead
            if previous is not None:
                self._report_round(*previous, bar)
            started = self._started(order, pair)
            results = run_interleaved(plan.workload, self.arms[order[0]], self.arms[order[1]],
                                      supervised=plan.supervised, runner=self.active, **arguments)
        else:
            if self.begun is not None and self.begun[0] == pair:  # begun beside the previous round's tail, or
                pending, self.begun = self.begun[1], None          # while the comparison opened
            else:
                self._cancel_begun()
                pending = self._begin(order, arguments)
            try:
                if previous is not None:
                    self._report_round(*previous, bar)
                started = self._started(order, pair)
                if pending.measured():  # only the tail is left: a stop waits for it (briefly), nothing is lost
                    with _tail_held():  # a signal held meanwhile is raised at its end: the round is stop()'s
                        if not last:
                            self._ahead_of(pair + 1)
                        results = pending.finish()
                        self.unreported = (order, started, results)
                else:
                    results = pending.finish()
            except BaseException:  # a child not let through ends without measuring
                pending.cancel()
                raise
        self.unreported = (order, started, results)  # measured: written by the next round, or by stop()
        return order, started, results

    def _ahead_of(self, pair: int) -> None:
        """Beside this round's tail: the next round's child (lockstep: children) begun, its start, build and
        warm-up overlapping the tail, and, once a round of the comparison has been logged (its checks
        passed), its two runs started."""
        following = self._order(pair)  # (the previous round is logged: its estimates are held)
        self.begun = (pair, self._begin(following, self._arguments(following)))
        if self.rounds_logged:
            for arm in following:
                self._start(arm, pair, ahead=True)

    def begin_first_round(self) -> None:
        """A new group's first round (pair 0) begun now, once the comparison is not refused, while its run
        is made: its child's start, build and warm-up are then off the comparison's start. Not for whole
        attempts, a resume (its next pair is read from the group) or a runner in this process."""
        from ..workloads import AttemptRunner

        plan = self.plan
        if plan.resume or plan.interleave == "attempts" or not isinstance(self.active, AttemptRunner):
            return
        order = self._order(0)
        self.begun = (0, self._begin(order, self._arguments(order)))

    def _arguments(self, order: tuple, pending: tuple = ()) -> dict:
        """What a round's child is begun with (``pending``: the previous round's ``(arm, result)`` pairs, not logged yet)."""
        plan = self.plan
        return dict(timeout_s=2 * plan.timeout_s, threads=plan.threads,
                    memory=self.memory.needed(*order, pending=pending), measures=plan.measures)

    def _begin(self, order: tuple, arguments: dict):
        """A round's child begun (its arms in ``order``): it waits at its gate once both arms are warm."""
        plan = self.plan
        if plan.interleave in LOCKSTEP_MODES:
            return self.active.begin_lockstep(plan.workload, self.arms[order[0]], self.arms[order[1]],
                                              duet=plan.interleave == "duet", **arguments)
        return self.active.begin_interleaved(plan.workload, self.arms[order[0]], self.arms[order[1]], **arguments)

    def _report_round(self, order: tuple, started: list, results: tuple, bar) -> None:
        """A round's two attempts written and checked; a round that found both arms cannot share a
        process stops the comparison (no round can be valid), and so does this call's first round
        failed for a reason of its setup (:meth:`refuse_setup`)."""
        from ..workloads import INTERLEAVE_REFUSED

        for arm, attempt, result in zip(order, started, results):
            self.report(arm, attempt, result, bar)
        self.unreported = None
        refused = next((r.failure for r in results if (r.failure or "").startswith(INTERLEAVE_REFUSED)), None)
        if refused:
            raise InputError(refused.split(": ", 1)[1])
        if not self.rounds_logged:
            self.refuse_setup(dict(zip(order, results)))
        self.rounds_logged += 1

    def refuse_setup(self, results: dict) -> None:
        """This call's first round, both arms' results by arm: a setup error is not a performance verdict.

        An arm whose workload could not be imported or built (its module raised, its factory raised,
        refused a condition it cannot parse or returned no workload), or both arms failing at once,
        stops the comparison here: nothing more runs and nothing is judged.

        Raises:
            WorkloadFailed: one line naming the arm and the cause.
        """
        from ..errors import WorkloadFailed

        failed = {arm: result for arm, result in results.items() if not result.ok and not result.withdrawn}
        setup = [(arm, result) for arm, result in failed.items() if result.failed_in in ("import", "factory")]
        if setup:
            arm, result = setup[0]
            what = "imported" if result.failed_in == "import" else "built"
            raise WorkloadFailed(f"the {arm}'s workload could not be {what} ({result.failure}): a setup error, not a "
                                 f"verdict; fix it and run again; the first round is recorded, nothing was judged",
                                 run_id=self.comparison_id)
        if len(failed) == 2:
            said = "; ".join(f"{arm}: {result.failure}" for arm, result in failed.items())
            raise WorkloadFailed(f"neither arm ran its first round ({said}): a setup error, not a verdict; fix it "
                                 f"and run again; the first round is recorded, nothing was judged",
                                 run_id=self.comparison_id)

    def run_block(self, order: list[str], bar) -> None:
        """Attempts in ``order`` (an ABBA block): whole attempts, or rounds of both arms with ``steps``."""
        from ..workloads import run_attempt

        plan = self.plan
        if plan.interleave != "attempts":
            self.run_rounds(self.next_pair, len(order) // 2, bar)
        else:
            first = {}  # this call's first pair, for refuse_setup
            for index, arm in enumerate(order):
                started = self._start(arm, self.next_pair + index // 2)
                result = run_attempt(plan.workload, self.arms[arm], supervised=plan.supervised,
                                     timeout_s=plan.timeout_s, threads=plan.threads, runner=self.active,
                                     memory=self.memory.needed(arm), measures=plan.measures)
                self.unreported = ((arm,), (started,), (result,))
                self.report(arm, started, result, bar)
                self.unreported = None
                if not self.rounds_logged and index < 2:
                    first[arm] = result
                    if index == 1:
                        self.refuse_setup(first)
                        self.rounds_logged += 1
        self.next_pair += len(order) // 2

    def collect(self, bar) -> dict:
        """The planned attempts, then (``--until-decisive``) pairs while a look says rerun for lack of
        evidence; the look the decision is made at (``{}`` for a single look)."""
        from ..tracking import TAG, evaluate_group, tag_run
        from ..workloads import interleave as abba

        plan = self.plan
        bar.total = 2 * self.rounds_now
        self.run_block(abba(self.rounds_now), bar)
        # Looks are placed by information, attempts per arm over the most the group may reach;
        # each spends what its fraction adds to what the group's earlier looks spent (resumed too).
        held_per_arm = self.held["per_arm"] if plan.resume else 0
        horizon = held_per_arm + plan.most
        done, look_at = plan.attempts, {}
        while plan.until_decisive:
            position = held_per_arm + done
            if position / horizon > self.spent:
                look_at = {"look": position, "max_looks": horizon, "previous_fraction": self.spent}
                # what a later evaluate of the group judges at, and where a resume goes on from
                tag_run(self.comparison_id, {TAG.LOOK: position, TAG.MAX_LOOKS: horizon,
                                             TAG.LOOK_PREVIOUS: repr(self.spent),
                                             TAG.LOOK_SPENT: repr(position / horizon)})
                interim = evaluate_group(self.group, experiment_name=plan.experiment_name, dry_run=True,
                                         **look_at, **self.judged_by)
                self.spent = position / horizon
                if interim["decision"] != "rerun" or done >= plan.max_attempts:
                    break
                if interim["reason"] not in ("insufficient_valid_runs", "inconclusive"):
                    break
            elif done >= plan.max_attempts:
                break
            extra = min(2, plan.max_attempts - done)
            bar.total += 2 * extra
            self.run_block(abba(extra), bar)
            done += extra
        if not plan.until_decisive and plan.resume and self.held["spent"] is not None:  # a sequential group's
            look_at = {"look": horizon, "max_looks": horizon, "previous_fraction": self.spent}   # one more look
            tag_run(self.comparison_id, {TAG.LOOK: horizon, TAG.MAX_LOOKS: horizon,
                                         TAG.LOOK_PREVIOUS: repr(self.spent), TAG.LOOK_SPENT: "1.0"})
        return look_at

    # -- decide, or stop ----------------------------------------------------------------------

    def decide(self, look_at: dict) -> dict:
        """The decision (``evaluate_group``), after what waits in the journal is sent."""
        from ..tracking import evaluate_group, sync

        stop_if_signalled()
        if self.deferred:  # the server may be back: send what waits in the journal before deciding
            with contextlib.suppress(StoreUnavailable):
                sync()
        return evaluate_group(self.group, experiment_name=self.plan.experiment_name, **look_at, **self.judged_by)

    @property
    def judged_by(self) -> dict:
        """How the decision judges: the plan's Policy itself (validated once, when the plan was made;
        nothing read back from the comparison run's tags), and what to do about a fingerprint mismatch."""
        return {"policy": self.plan.policy, "env_mismatch": self.plan.evaluate_kwargs.get("env_mismatch", "fail")}

    def run(self) -> dict:
        """Open, collect, decide; ``evaluate_group``'s result with ``comparison_run_id``."""
        from tqdm import tqdm

        with terminate_as_exception():  # from before the comparison run exists: no window where SIGTERM kills
            self.open()
            try:
                stop_if_signalled()
                with tqdm(total=2 * self.plan.attempts, desc=f"compare {self.plan.variable}", unit="attempt",
                          disable=not self.plan.progress, file=sys.stderr) as bar:
                    result = self.decide(self.collect(bar))
            except BaseException as exc:
                stop_handled()
                self.stop(exc)
                raise
            finally:
                self.close()
        result["comparison_run_id"] = self.comparison_id
        if self.plan.calibration is not None:
            result["rounds_auto"] = dict(self.plan.calibration)
        return result
