"""The comparison's runs in MLflow: its comparison run and its attempts' runs.

:class:`ComparisonRun` opens a comparison (the runner, the store, the group, the refusals, the
comparison run, a resume held to its plan), starts and writes its attempts' runs (each whole,
a stopping signal held meanwhile), and on a stop ends them: what was measured written, what was
cut short withdrawn, the comparison run KILLED saying why. :class:`~._comparison.Comparison`
runs the rounds on it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from typing import Any

from ..errors import InputError

from ._conditions import LOCKSTEP_MODES, _ChangeWitness
from ._planning import Plan, _look_positions, _spent_before
from ._recording import _MemoryCarrier, _finish, gpu_name_of, end_left_running, keep_planned_repeats
from ._runners import ready_store_while_warming, runner_for
from ._signals import Terminated, signal_held


class ComparisonRun:
    """A comparison's runs: opened, written, stopped and closed (its rounds: :class:`~._comparison.Comparison`)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.arms = {"baseline": plan.base, "candidate": plan.candidate}
        self.deferred: list[str] = []  # attempts kept in the journal while the server was down
        self.in_flight: list = []  # the started attempts whose outcome is not known yet (KILLED if compare stops)
        self.ahead: dict[int, list] = {}  # pair -> its runs started before its round was let through
        #: ``(pair, pending)``: a round's child begun ahead (beside the previous round's tail, or while the
        #: comparison opened: ``Comparison.run_rounds``), let through when that round comes
        self.begun: tuple | None = None
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
        if plan.owns_runner:  # made by the plan, which read the workload's declaration through it
            self.active, self.owned = plan.runner, True
        try:
            self.place_arms()
            # One runner for the whole comparison: with fork, one warm server for all its attempts (and
            # where the arms run apart, one per arm and site).
            if not plan.owns_runner:
                self.active, self.owned = runner_for(plan.runner, plan.workload, plan.supervised, sites=self.sites,
                                                      lockstep=plan.interleave in LOCKSTEP_MODES)
        except BaseException:
            self.close()
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
            self.begin_first_round()  # not refused: its child starts, builds and warms up while the run is made
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

        from ..tracking import TAG, retrying

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

    def place_arms(self) -> None:
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
        from ..rules import too_few_to_decide

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
        from ..tracking import claim_rounds, policy_text

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

    # -- its attempts' runs ------------------------------------------------------------------

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

    # -- stop -------------------------------------------------------------------------------

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

    def begin_first_round(self) -> None:
        """Begin the first round's child ahead, where the rounds run in children (:class:`~._comparison.Comparison`)."""

    def _cancel_begun(self) -> None:
        """A round's child begun ahead and never let through (its gate): it ends without measuring."""
        if self.begun is not None:
            (_, begun), self.begun = self.begun, None
            begun.cancel()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._cancel_begun()
        if self.owned and self.active is not None:
            self.active.close()
            self.owned = False
        self._release_sites()

