"""One comparison from its first check to its decision (:class:`Comparison`).

It opens (the runner, the store, the group, the refusals, the comparison run), runs its rounds
(ABBA attempts, step-interleaved rounds or lockstep rounds), looks while a sequential comparison
is undecided, decides through ``evaluate_group`` under the plan's Policy, or stops, ending its
runs KILLED and saying why. ``compare``, suites, ``history --bisect`` and the Ray dispatch run it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from typing import Any

from ..rules._errors import InputError, StoreUnavailable

from ._conditions import LOCKSTEP_MODES, _ChangeWitness, check_quality_gate_can_fail
from ._planning import Plan, _look_positions, _spent_before
from ._recording import _MemoryCarrier, _finish, gpu_name_of, end_left_running, keep_planned_repeats
from ._runners import ready_store_while_warming, runner_for
from ._signals import Terminated, signal_held, _tail_held, terminate_as_exception


class Comparison:
    """One comparison in its steps: open (the runner, the store, the group, the refusals, the
    comparison run), run its rounds (ABBA attempts or step-interleaved rounds, then the looks of
    ``--until-decisive``), decide, or end KILLED saying why. :func:`compare` (and through it
    ``pipeline``, ``suite run``, ``history --bisect`` and the Ray dispatch) runs exactly these."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.arms = {"baseline": plan.base, "candidate": plan.candidate}
        self.deferred: list[str] = []  # attempts kept in the journal while the server was down
        self.in_flight: list = []  # the started attempts whose outcome is not known yet (KILLED if compare stops)
        self.ahead: dict[int, list] = {}  # pair -> its runs started before its round was let through
        self.rounds_logged = 0
        self.witness = _ChangeWitness(plan.variable)  # the factory must not ignore the change (once per arm)
        self.quality_seen = plan.allow_undecidable  # the quality gate must be able to fail (first baseline)
        self.memory = _MemoryCarrier(plan.objective)  # a CPU estimate once per arm, where nothing judges it
        self.active = None
        self.owned = False
        self.on_attempt = plan.on_attempt
        self.comparison_id: str | None = None
        self.sites = None  # where each arm runs, when not here (``sites.ArmSites``)
        #: a round (or attempt) measured but not yet written: ``(arms, started runs, results)``
        self.unreported: tuple | None = None
        self.rounds_now = plan.attempts  # the rounds this call runs (a resume may complete a plan instead)

    def attach(self, *, group: str, held: dict, runner: Any, who: str) -> None:
        """Open a comparison whose refusals were made elsewhere (a suite's entry: its comparison run
        under the suite run, a runner shared by the suite's entries); ``who`` names it where runs a
        killed run left RUNNING are ended."""
        self.group, self.held = group, held
        self.active, self.owned = runner, False
        self._held_comparison_run(who)
        self.next_pair = held["next_pair"]

    # -- open ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Everything before the first attempt; the runner is closed again if any of it fails."""
        plan = self.plan
        self._place_arms()
        # One runner for the whole comparison: with fork, one warm server for all its attempts (and
        # where the arms run apart, one per arm and site).
        try:
            self.active, self.owned = runner_for(plan.runner, plan.workload, plan.supervised, sites=self.sites,
                                                  lockstep=plan.interleave in LOCKSTEP_MODES)
        except BaseException:
            self._release_sites()
            raise
        try:
            from ..tracking import group_state

            ready_store_while_warming(plan.workload, self.active, plan.timeout_s,
                                       arms=self.arms if self.sites is not None else None,
                                       labels=None if self.sites is None else self.sites.labels)
            self.group = plan.group or (f"{plan.workload.split(':')[-1]}-{plan.variable}-"
                                        f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
            self.held = group_state(self.group, experiment_name=plan.experiment_name)
            self._refuse_or_warn()
            self.spent = _spent_before(self.held, plan.resume, plan.until_decisive, plan.attempts, plan.max_attempts,
                                       self.group) if plan.resume else 0.0
            self.rounds_now = self._rounds_to_complete()
            self._held_comparison_run(f"resuming group {self.group!r}")
        except BaseException:
            self.close()
            raise
        self.next_pair = self.held["next_pair"]

    def _same_plan(self, run_id: str) -> None:
        """A resume goes on under the policy the group's rounds were planned for, or says it starts a new plan.

        Raises:
            InputError: the comparison run holds another policy (``perfgate.policy``) and
                ``new_plan`` is not given: both named, nothing run.
        """
        from mlflow import MlflowClient

        from ..tracking import TAG
        from ..tracking._client import retrying

        plan = self.plan
        held_text = retrying(lambda: MlflowClient().get_run(run_id)).data.tags.get(TAG.POLICY)
        if held_text is None:
            return  # a group of an earlier release: nothing recorded to hold it to
        held, asked = json.loads(held_text), json.loads(json.dumps(plan.policy.options(), default=str))
        differ = sorted(key for key in set(held) | set(asked) if held.get(key) != asked.get(key))
        if not differ:
            return
        if plan.new_plan:
            print(f"resuming group {self.group!r} under a new plan ({', '.join(differ)} changed): its earlier looks' "
                  "spending is not carried over", file=sys.stderr)
            self.spent = 0.0
            return
        said = "; ".join(f"{key} {held.get(key)!r} -> {asked.get(key)!r}" for key in differ)
        raise InputError(f"group {self.group!r} was planned under another policy ({said}): resume it with the same "
                         "options, or pass --new-plan to judge its rounds under this one from here (its earlier looks' "
                         "spending then does not carry over); nothing was run or logged")

    def _rounds_to_complete(self) -> int:
        """The rounds this call runs: the plan's, or, resuming a group whose planned rounds (its
        ``repeats``) are not all complete (a stopped comparison), the rounds that complete them."""
        plan, held = self.plan, self.held
        if not (plan.resume and held["attempts"]) or plan.until_decisive or len(held["repeats"]) != 1:
            return plan.attempts
        planned = held["repeats"][0]
        if not planned.isdigit() or int(planned) <= held["complete_rounds"]:
            return plan.attempts
        missing = int(planned) - held["complete_rounds"]
        print(f"resuming group {self.group!r}: {held['complete_rounds']} of its {planned} planned rounds are complete; "
              f"running the {missing} that complete them", file=sys.stderr)
        return missing

    def _place_arms(self) -> None:
        """Where each arm runs (``sites``): a revision's worktree, another interpreter; checked before
        anything runs, the worktrees made, the arms' site conditions as they are recorded (a full sha,
        an absolute path)."""
        from ..sites import arm_sites

        plan = self.plan
        self.sites = arm_sites(plan.workload, self.arms, keep_worktrees=plan.keep_worktrees)
        if self.sites is not None:
            self.arms = {arm: {**conditions, **self.sites.conditions[arm]} for arm, conditions in self.arms.items()}

    def _release_sites(self) -> None:
        if self.sites is not None:
            self.sites.close()

    def _refuse_or_warn(self) -> None:
        """A group already held without ``resume``, or a plan that can never decide: refused, nothing written."""
        plan, held, group = self.plan, self.held, self.group
        if held["attempts"] and not plan.resume:
            raise InputError(
                f"group {group!r} already holds {held['attempts']} attempts; pass --resume (resume=True) to add this "
                "comparison's attempts to them, or choose another --group")
        from ..rules._statistical import too_few_to_decide

        too_few = None if held["attempts"] else too_few_to_decide(
            plan.policy, plan.most,
            looks_for=(lambda most: _look_positions(plan.attempts, most)) if plan.until_decisive else None)
        if not held["attempts"] and not plan.allow_undecidable:  # a comparison that cannot mean anything
            most, needed = plan.most, plan.policy.min_valid_runs
            if most < needed:
                raise InputError(
                    f"{most} attempt{'' if most == 1 else 's'} per arm can never reach min_valid_runs={needed}: the "
                    "answer would be rerun (insufficient_valid_runs) whatever they measure; pass "
                    f"{'--max-attempts' if plan.until_decisive else '--attempts'} {needed} or more, a lower "
                    "--min-valid-runs, or --allow-undecidable to run it anyway; nothing was run or logged")
            if too_few:
                raise InputError(f"{too_few}; or pass --allow-undecidable to run it anyway; nothing was run or logged")
        if too_few:  # allowed: a warning, not progress: said with --no-progress too
            print(f"warning: {too_few}", file=sys.stderr)

    def _held_comparison_run(self, who: str) -> None:
        """``comparison_id``: the comparison run, created with SIGTERM held (:func:`signal_held`); a SIGTERM
        that came meanwhile is raised once the run exists, and the run is ended KILLED saying so."""
        try:
            with signal_held():
                self.comparison_id = self._comparison_run(who)
        except BaseException as exc:
            if self.comparison_id is not None:
                self.stop(exc)
            raise

    def _comparison_run(self, who: str) -> str:
        """The comparison run: the group's own when resumed, else a new one."""
        from ..tracking import start_comparison

        plan, held, group = self.plan, self.held, self.group
        planned = keep_planned_repeats(held, self.arms["baseline"], self.arms["candidate"]) if plan.resume else None
        if planned is not None and plan.progress:
            print(f"resuming group {group!r}: its attempts carry repeats={planned} (the comparison's planned "
                  f"size); this call adds {plan.attempts} attempts per arm under that condition", file=sys.stderr)
        if plan.resume and held["attempts"]:
            end_left_running(group, plan.experiment_name, who)
        from ..tracking import TAG, tag_run

        # how it is measured and judged, what was defaulted, what fell back and why
        configuration = None if plan.configuration is None else plan.configuration.text()
        from ..tracking._runs import claim_rounds, policy_text

        if plan.resume and held["comparison_run_id"]:
            run_id = held["comparison_run_id"]
            self._same_plan(run_id)
            claim_rounds(run_id, held["next_pair"])  # one writer per group: a twin resume is refused here
            if configuration:
                tag_run(run_id, {TAG.CONFIGURATION: configuration, TAG.CONFIGURED_METHOD: plan.policy.method,
                                 TAG.CONFIGURED_LATENCY: plan.policy.latency,
                                 TAG.POLICY: policy_text(plan.policy.options())})
        else:
            run_id = start_comparison(group, self.arms["baseline"], plan.variable, objective=plan.objective,
                                      experiment_name=plan.experiment_name, workload=plan.workload,
                                      parent_run_id=plan.parent_run_id, interleave=plan.interleave,
                                      configuration=configuration, method=plan.policy.method,
                                      latency=plan.policy.latency, policy=plan.policy.options())
            claim_rounds(run_id, held["next_pair"])
        if plan.calibration is not None:  # which calibration planned its rounds, and how

            tag_run(run_id, {TAG.CALIBRATION_RUN: plan.calibration["calibration_run_id"],
                             TAG.CALIBRATION_AGE: str(int(plan.calibration["age_s"])),
                             TAG.ROUNDS_AUTO: plan.calibration["text"]})
        return run_id

    # -- rounds -------------------------------------------------------------------------------

    def _start(self, arm: str, pair: int, *, ahead: bool = False):
        """An attempt's run, started; in flight at once, or (``ahead``) kept until its round runs."""
        from ..tracking import start_attempt

        placed = {} if self.sites is None else self.sites.environment[arm]  # its interpreter's, its revision
        with signal_held():  # the run and its id in in_flight (or ahead) together: a stop then ends it
            started = start_attempt(self.group, arm, self.arms[arm], experiment_name=self.plan.experiment_name,
                                    parent_run_id=self.comparison_id, pair=pair,
                                    environment={"gpu_name": gpu_name_of(self.arms[arm]), **placed})
            (self.ahead.setdefault(pair, []) if ahead else self.in_flight).append(started)
        return started

    def _started(self, order: tuple, pair: int) -> list:
        """A round's runs: those started ahead for it, else started now; in flight from here."""
        started = self.ahead.pop(pair, None)
        if started is None:
            return [self._start(arm, pair) for arm in order]
        self.in_flight.extend(started)
        return started

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

    def _write_outcome(self, arm: str, started, result):
        """An attempt's outcome written whole (a stopping signal held meanwhile), its run out of
        ``in_flight``; the result as written (with the arm's memory estimate carried)."""
        with signal_held():
            if result.withdrawn:  # the round's shared child died in the other arm's code: not this arm's failure
                if started.withdraw(result.failure.removeprefix("withdrawn: ")) is None:
                    self.deferred.append(started.attempt_id)
            else:
                result, estimate_from = self.memory.apply(arm, started, result)
                placed = None if self.sites is None else self.sites.environment[arm]
                if _finish(started, result, self.arms[arm], estimate_from, placed) is None:
                    self.deferred.append(started.attempt_id)
            if started in self.in_flight:
                self.in_flight.remove(started)
        return result

    def run_rounds(self, first_pair: int, count: int, bar) -> None:
        """``count`` rounds, one child each, both arms, their steps interleaved; the leading arm
        alternates between rounds (ABBA).

        Each round's child is begun before the previous round is logged: its fork, build and
        warm-up run beside the store's writes, and it waits at its gate (``_gate``) until they are
        done, so no measured step runs beside them. A round is logged before the next one's
        measured steps start: a stop then loses nothing measured.

        The next round's two runs are started beside this child's tail (its quality, memory record
        and probe, after its measured steps), once a round of the comparison has been logged (its
        checks passed); if the comparison stops before that round is let through, they are
        withdrawn (excluded, never judged).
        """
        previous = None
        for index in range(count):
            previous = self._round(first_pair + index, previous, bar, last=index == count - 1)
        if previous is not None:
            self._report_round(*previous, bar)

    @staticmethod
    def _order(pair: int) -> tuple[str, str]:
        return ("baseline", "candidate") if pair % 2 == 0 else ("candidate", "baseline")

    def _round(self, pair: int, previous: tuple | None, bar, *, last: bool = True) -> tuple:
        """Begin this round's child, log the previous round, start this one's runs, then let it measure."""
        from ..workloads import AttemptRunner, run_interleaved

        plan = self.plan
        order = self._order(pair)
        logged_next = () if previous is None else tuple(zip(previous[0], previous[2]))
        arguments = dict(timeout_s=2 * plan.timeout_s, threads=plan.threads,
                         memory=self.memory.needed(*order, pending=logged_next), measures=plan.measures)
        if not isinstance(self.active, AttemptRunner):  # in this process: nothing can run ahead
            if previous is not None:
                self._report_round(*previous, bar)
            started = self._started(order, pair)
            results = run_interleaved(plan.workload, self.arms[order[0]], self.arms[order[1]],
                                      supervised=plan.supervised, runner=self.active, **arguments)
        else:
            if plan.interleave in LOCKSTEP_MODES:
                pending = self.active.begin_lockstep(plan.workload, self.arms[order[0]], self.arms[order[1]],
                                                     duet=plan.interleave == "duet", **arguments)
            else:
                pending = self.active.begin_interleaved(plan.workload, self.arms[order[0]], self.arms[order[1]],
                                                        **arguments)
            try:
                if previous is not None:
                    self._report_round(*previous, bar)
                started = self._started(order, pair)
                if not last and self.rounds_logged and pending.measured():
                    for arm in self._order(pair + 1):
                        self._start(arm, pair + 1, ahead=True)
                if pending.measured():  # only the tail is left: a stop waits for it (briefly), nothing is lost
                    with _tail_held():  # a signal held meanwhile is raised at its end: the round is stop()'s
                        results = pending.finish()
                        self.unreported = (order, started, results)
                else:
                    results = pending.finish()
            except BaseException:  # a child not let through ends without measuring
                pending.cancel()
                raise
        self.unreported = (order, started, results)  # measured: written by the next round, or by stop()
        return order, started, results

    def _report_round(self, order: tuple, started: list, results: tuple, bar) -> None:
        """A round's two attempts written and checked; a round that found both arms cannot share a
        process stops the comparison (no round can be valid), and so does this call's first round
        failed for a reason of its setup (:meth:`refuse_setup`)."""
        from ..workloads._interleave import INTERLEAVE_REFUSED

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

        if self.deferred:  # the server may be back: send what waits in the journal before deciding
            with contextlib.suppress(StoreUnavailable):
                sync()
        return evaluate_group(self.group, experiment_name=self.plan.experiment_name, **look_at, **self.judged_by)

    @property
    def judged_by(self) -> dict:
        """How the decision judges: the plan's Policy itself (validated once, when the plan was made;
        nothing read back from the comparison run's tags), and what to do about a fingerprint mismatch."""
        return {"policy": self.plan.policy, "env_mismatch": self.plan.evaluate_kwargs.get("env_mismatch", "fail")}

    def stop(self, exc: BaseException, *, by: str = "compare") -> None:
        """The round measured before the stop written, the attempts in flight or started ahead withdrawn
        (KILLED, no failure of their arm), and the comparison run KILLED, saying why (a second stopping
        signal meanwhile is raised once every run is ended). ``by``: what stopped (``compare``, ``suite``)."""
        with signal_held():
            self._stop(exc, by)

    def _stop(self, exc: BaseException, by: str = "compare") -> None:
        from ..tracking import end_run

        if self.unreported is not None:  # measured before the stop: written as measured, nothing lost
            for arm, started, result in zip(*self.unreported):
                if started in self.in_flight:
                    with contextlib.suppress(Exception):
                        self._write_outcome(arm, started, result)
            self.unreported = None
        reason = str(exc) if isinstance(exc, Terminated) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (Terminated, KeyboardInterrupt)):
            signal_name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else reason.rpartition(" ")[2]
            who = f"stopped by the operator ({signal_name})"
        else:
            who = f"{by} stopped ({reason})"
        for started in self.in_flight:  # never a failure of its arm: withdrawn, counted in no failure rate
            with contextlib.suppress(Exception):
                started.withdraw(f"{who} while this attempt ran: not a failure of its arm")
        for started in (attempt for runs in self.ahead.values() for attempt in runs):
            with contextlib.suppress(Exception):
                started.withdraw(f"{who} before this attempt's round ran")
        try:
            end_run(self.comparison_id, "KILLED", reason=f"{by} stopped before its decision: {reason}")
        except Exception:  # the server may be what failed; the original error matters
            pass

    def close(self) -> None:
        if self.owned and self.active is not None:
            self.active.close()
            self.owned = False
        self._release_sites()

    def run(self) -> dict:
        """Open, collect, decide; ``evaluate_group``'s result with ``comparison_run_id``."""
        from tqdm import tqdm

        with terminate_as_exception():  # from before the comparison run exists: no window where SIGTERM kills
            self.open()
            try:
                with tqdm(total=2 * self.plan.attempts, desc=f"compare {self.plan.variable}", unit="attempt",
                          disable=not self.plan.progress, file=sys.stderr) as bar:
                    result = self.decide(self.collect(bar))
            except BaseException as exc:
                self.stop(exc)
                raise
            finally:
                self.close()
        result["comparison_run_id"] = self.comparison_id
        if self.plan.calibration is not None:
            result["rounds_auto"] = dict(self.plan.calibration)
        return result
