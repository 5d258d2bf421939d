"""Planning a comparison: everything checked and decided before anything runs.

:func:`configure` says what was given, defaulted and fallen back to; :func:`plan_comparison`
makes the :class:`Plan`, which carries the comparison's one :class:`~mlflow_perfgate.rules.Policy`
(validated here, judged by as it is) to the decision; the looks of a sequential comparison are
placed here, and ``--rounds auto`` plans its rounds from a calibration (:func:`auto_rounds`).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from typing import Any, Callable

from .. import rules
from ..errors import InputError

from ._conditions import (INTERLEAVE_MODES, LOCKSTEP_MODES, base_conditions, _check_counts, check_interleave,
                          _lockstep_refusal, _steps_refusal, reads_declaration, validated_change,
                          require_fixed_conditions, with_declared_conditions)
from ._recording import gpu_name_of


#: What a comparison runs with where its caller does not say: the configuration the noise lab validated
#: on a shared machine (``benchmarks/results/README.md``): the paired method on each attempt's
#: 10th-percentile step, both arms' measured steps interleaved in one child per ABBA round, torch on
#: one thread, 10 rounds of 30 measured steps. ``compare``, ``pipeline``, ``suite`` and the
#: MLproject's entry points default to it, falling back per comparison where it does not apply
#: (:func:`configure`).
RECOMMENDED = {"method": "paired", "latency": "p10", "interleave": "steps", "threads": 1, "attempts": 10, "steps": 30}
#: A non-regression comparison whose caller does not say (``until_decisive=None``) goes on while its
#: answer is a rerun for lack of evidence, up to this many times its rounds (``compare --fixed-rounds``:
#: one look). The no-op gate lab (``benchmarks/results/lab_gate.md``) chose it: identical arms are
#: passed where one look at 10 rounds leaves a fifth of them undecided under a busy neighbour.
NON_REGRESSION_CAP = 2
#: ``compare --until-decisive`` without ``--max-attempts``: up to this many times its rounds.
UNTIL_DECISIVE_CAP = 4
#: The methods whose rule spends alpha across looks (``look``, ``max_looks``).
SEQUENTIAL_METHODS = ("paired", "robust")
#: What the specification's rule runs with where its caller does not say (``method="seed"``, given or
#: fallen back to): the figure it defines (``latency_ms``, the median of every measured step) on its
#: example's 5 attempts per arm of 10 measured steps.
SPECIFICATION = {"latency": "raw", "attempts": 5, "steps": 10}


@dataclasses.dataclass(frozen=True)
class Configuration:
    """How one comparison is measured and judged, each value given or defaulted (:func:`configure`)."""

    method: str
    latency: str
    interleave: str
    threads: int | None
    attempts: int | str
    steps: int | None  #: the measured steps the configuration set (``None``: the conditions give them)
    defaulted: tuple[str, ...]  #: the settings the caller left to the defaults
    fallbacks: tuple[str, ...]  #: why a recommended value does not apply to this comparison
    until_decisive: bool = False  #: whether the comparison goes on while undecided
    max_attempts: int | None = None  #: its cap, rounds per arm (set once the plan knows it)

    def text(self) -> str:
        """One line for the comparison run and the report: what ran, what was defaulted, what fell back."""
        rounds = "attempts per arm" if self.interleave == "attempts" else "rounds"
        threads = "the current torch threads" if self.threads is None else \
            f"{self.threads} torch thread{'' if self.threads == 1 else 's'}"
        steps = "" if self.steps is None else f" of {self.steps} steps"
        text = (f"{self.method} method on {self.latency}, {self.interleave} interleaved, {threads}, "
                f"{self.attempts} {rounds}{steps}")
        if self.until_decisive and self.max_attempts:
            text += f" (up to {self.max_attempts} while undecided)"
        if self.defaulted:
            text += f"; defaults: {', '.join(self.defaulted)}"
        if self.fallbacks:
            text += f"; fell back from the recommended configuration: {'; '.join(self.fallbacks)}"
        return text


def configure(objective: str, mode: str, variable: str | None, base: dict, *, method: str | None = None,
              latency: str | None = None, interleave: str | None = None, threads: int | None = None,
              attempts: int | str | None = None, steps_given: bool = True, supervised: bool = True,
              runner: Any = "auto", until_decisive: bool | None = False, resume: bool = False) -> Configuration:
    """Fill in what a comparison's caller left out (``None``) from :data:`RECOMMENDED`, per comparison.

    What the caller gives is kept (and checked where it is used, as before). Left out:

    - ``method``: ``paired``, where it judges the objective in ``mode``; else the first method that
      does (``seed``, the specification's rule, for memory and throughput), saying why;
    - ``latency``: ``p10``; with the ``seed`` method, the specification's ``raw`` (its figure);
    - ``interleave``: ``steps``, unless both arms cannot share one process (the changed variable is
      the revision, the python, the device, warmup or steps; the memory objective on CUDA): then
      ``lockstep`` (one child per arm, their steps alternated), saying why; whole attempts
      (``attempts``) where lockstep cannot run either (in-process, a runner object of the caller's);
    - ``threads``: 1; ``attempts`` (rounds) and the measured ``steps`` (only when the conditions do
      not give them, ``steps_given=False``): 10 and 30, or the specification's 5 and 10 with the
      ``seed`` method;
    - ``until_decisive`` (``None``): on in ``non_regression`` mode with a method that spends alpha
      across looks (:data:`SEQUENTIAL_METHODS`), unless the comparison resumes a group; its cap is
      :data:`NON_REGRESSION_CAP` times the rounds (:func:`plan_comparison` sets it).

    Returns:
        The :class:`Configuration` (``defaulted`` names what was filled in, ``fallbacks`` why a
        recommended value did not apply).
    """
    from ..rules import METHODS, OBJECTIVES

    defaulted, fallbacks = [], []
    if method is None:
        defaulted.append("method")
        method = RECOMMENDED["method"]
        entry = OBJECTIVES.get(objective)
        if entry is not None and not (METHODS[method].judges(objective) and mode in METHODS[method].modes):
            judges = [name for name in METHODS if METHODS[name].judges(objective) and mode in METHODS[name].modes]
            if judges:
                method = "seed" if "seed" in judges else judges[0]
                fallbacks.append(f"method {method}: the {RECOMMENDED['method']} method does not judge the "
                                 f"{objective} objective in {mode} mode")
    seed = method == "seed"
    if latency is None:
        defaulted.append("latency")
        latency = SPECIFICATION["latency"] if seed else RECOMMENDED["latency"]
    if interleave is None:
        defaulted.append("interleave")
        interleave = RECOMMENDED["interleave"]
        refusal = _steps_refusal(str(variable), base, objective, supervised, runner)
        if refusal:
            interleave = "attempts" if _lockstep_refusal(supervised, runner) or not refusal[1] else "lockstep"
            how = "whole attempts interleaved" if interleave == "attempts" else \
                "steps interleaved across two processes (lockstep)"
            fallbacks.append(f"{how}, not steps in one process: {refusal[0]}")
    if threads is None:
        defaulted.append("threads")
        threads = RECOMMENDED["threads"]
    if attempts is None:
        defaulted.append("attempts")
        attempts = SPECIFICATION["attempts"] if seed else RECOMMENDED["attempts"]
    steps = None
    if not steps_given:
        defaulted.append("steps")
        steps = SPECIFICATION["steps"] if seed else RECOMMENDED["steps"]
    if until_decisive is None:
        until_decisive = mode == "non_regression" and method in SEQUENTIAL_METHODS and not resume
        if until_decisive:
            defaulted.append("until_decisive")
    return Configuration(method=method, latency=latency, interleave=interleave, threads=threads, attempts=attempts,
                         steps=steps, defaulted=tuple(defaulted), fallbacks=tuple(fallbacks),
                         until_decisive=bool(until_decisive))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A comparison's validated inputs (:func:`plan_comparison`): nothing has run or been written."""

    workload: str
    base: dict
    candidate: dict
    variable: str
    objective: str
    policy: Any
    attempts: int
    until_decisive: bool
    max_attempts: int | None
    interleave: str
    supervised: bool
    runner: Any
    timeout_s: float
    threads: int | None
    group: str | None
    experiment_name: str | None
    parent_run_id: str | None
    resume: bool
    allow_undecidable: bool
    progress: bool
    on_attempt: Callable[[str, Any], None] | None
    evaluate_kwargs: dict
    #: ``attempts="auto"``: the plan :func:`auto_rounds` made from a calibration (its tags go on the comparison run).
    calibration: dict | None = None
    #: what was given, defaulted and fallen back to (:func:`configure`; its text goes on the comparison run).
    configuration: Configuration | None = None
    #: leave the revisions' worktrees this comparison made in place when it ends.
    keep_worktrees: bool = False
    #: a resume under a policy other than the group's recorded one starts a new plan (else it is refused).
    new_plan: bool = False
    #: ``runner`` was made by the plan (it read the workload's declaration through it): the comparison closes it.
    owns_runner: bool = False

    @property
    def most(self) -> int:
        """The most attempts per arm this call may run."""
        return self.max_attempts if self.until_decisive else self.attempts

    @property
    def measures(self) -> tuple[str, ...]:
        """The objectives whose figure every attempt measures (an entry with ``measure``: a plugin's)."""
        from ..rules import OBJECTIVES

        return (self.objective,) if OBJECTIVES.require(self.objective).measure is not None else ()


def _given_policy(evaluate_kwargs: dict, objective: str | None) -> tuple[Any, str]:
    """The :class:`~mlflow_perfgate.rules.Policy` a caller gave (``policy=``, popped from
    ``evaluate_kwargs``; ``None`` when the options came as keywords), and the objective judged.

    Raises:
        InputError: a policy beside options it holds, or beside another objective.
    """
    given = evaluate_kwargs.pop("policy", None)
    if given is None:
        return None, objective or "latency"
    if not isinstance(given, rules.Policy):
        raise InputError(f"policy must be a mlflow_perfgate.Policy, got {type(given).__name__}")
    also = sorted(name for name, value in evaluate_kwargs.items() if name != "env_mismatch" and value is not None)
    if also:
        raise InputError(f"give either policy or the options it holds, not both: got policy and {also}; use "
                         "policy.replace(...) to change them")
    if objective is not None and objective != given.objective:
        if "objective" in given.given:
            raise InputError(f"objective {objective!r} and the policy's objective {given.objective!r} disagree: give one")
        given = given.replace(objective=objective)  # a pipeline's: the diagnosis chose it
    return given, given.objective


def plan_comparison(workload: str, conditions: dict, change: dict, *, attempts: int, objective: str | None,
                     until_decisive: bool, max_attempts: int | None, interleave: str, supervised: bool, runner: Any,
                     hypothesis: str, evaluate_kwargs: dict, **rest: Any) -> Plan:
    """Check everything :func:`compare` is given, before anything runs; the :class:`Plan`.

    Raises:
        InputError, PolicyError, SingleVariableError: see :func:`compare`.
    """
    auto = attempts == "auto"
    if attempts is not None and not auto and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer or 'auto', got {attempts!r}")
    if interleave is not None and interleave not in INTERLEAVE_MODES:
        raise InputError(f"interleave must be one of {list(INTERLEAVE_MODES)}, got {interleave!r}")
    given, objective = _given_policy(evaluate_kwargs, objective)
    asked = evaluate_kwargs if given is None else {name: getattr(given, name) for name in given.given}
    one = isinstance(change, dict) and len(change) == 1
    base = base_conditions(workload, conditions, 1)
    configuration = configure(
        objective, asked.get("mode") or "improvement", str(next(iter(change))) if one else None, base,
        method=asked.get("method"), latency=asked.get("latency"), interleave=interleave,
        threads=rest.get("threads"), attempts=attempts,
        steps_given=not isinstance(conditions, dict) or "steps" in conditions, supervised=supervised, runner=runner,
        until_decisive=until_decisive, resume=bool(rest.get("resume")))
    cap = UNTIL_DECISIVE_CAP if until_decisive else NON_REGRESSION_CAP  # asked for, or the default's
    until_decisive = configuration.until_decisive
    attempts, interleave = configuration.attempts, configuration.interleave
    rest["threads"] = configuration.threads
    evaluate_kwargs = {**evaluate_kwargs, "method": configuration.method, "latency": configuration.latency}
    if configuration.steps is not None:
        base["steps"] = configuration.steps
    base["repeats"] = 1 if auto else attempts
    if until_decisive and not auto:
        max_attempts = cap * attempts if max_attempts is None else max_attempts
        if type(max_attempts) is not int or max_attempts < attempts:
            raise InputError(f"max_attempts must be an integer >= attempts ({attempts}), got {max_attempts!r}")
    if given is None:  # every option checked before anything runs, once
        policy = rules.Policy(objective=objective, **{k: v for k, v in evaluate_kwargs.items() if k != "env_mismatch"})
    elif (given.method, given.latency) == (configuration.method, configuration.latency):
        policy = given  # checked where it was made (the command line): judged by as it is
    else:  # the configuration decided what it left out
        policy = given.replace(method=configuration.method, latency=configuration.latency)
    policy = policy.settled()  # the comparison's decision reads nothing back from its run
    if one:  # why steps cannot share a process, before the fixed keys
        check_interleave(interleave, str(next(iter(change))), base, objective, supervised, runner)
    early = _early_runner(workload, base, change, runner, supervised, interleave)
    try:
        plan = _plan_declared(workload, base, change, early or runner, conditions=conditions, attempts=attempts,
                              auto=auto, objective=objective, policy=policy, until_decisive=until_decisive, cap=cap,
                              max_attempts=max_attempts, interleave=interleave, supervised=supervised,
                              hypothesis=hypothesis, evaluate_kwargs=evaluate_kwargs, configuration=configuration,
                              rest=rest)
    except BaseException:
        if early is not None:
            early.close()
        raise
    return dataclasses.replace(plan, owns_runner=True) if early is not None else plan


def _early_runner(workload: str, base: dict, change: Any, runner: Any, supervised: bool, interleave: str) -> Any:
    """The comparison's fork runner, made now where the workload's declaration is to be read (a factory of
    your own, run here, in step-interleaved rounds or whole attempts): its server reads it in a child
    first thing (torch imported, before the rest of its warm-up), and the imports the decision needs
    are made here meanwhile, until it is read; ``None`` otherwise."""
    from ..workloads import runner_kind

    if not (supervised and isinstance(runner, str) and interleave not in LOCKSTEP_MODES
            and reads_declaration(workload, base, change)):
        return None
    try:
        if runner_kind(runner) != "fork":
            return None
    except ValueError:
        return None  # refused with its own message where the comparison makes its runner
    from ._runners import _preload_for_decision, runner_for

    made, _ = runner_for(runner, workload, supervised, declare=True)  # its server reads it before its warm-up
    try:
        _preload_for_decision(until=made.declaration_ready)  # meanwhile; the rest while the server warms up
    except BaseException:
        made.close()
        raise
    return made


def _plan_declared(workload: str, base: dict, change: dict, runner: Any, *, conditions: dict, attempts: Any,
                   auto: bool, objective: str, policy: Any, until_decisive: bool, cap: int, max_attempts: Any,
                   interleave: str, supervised: bool, hypothesis: str, evaluate_kwargs: dict,
                   configuration: Any, rest: dict) -> Plan:
    """The rest of :func:`plan_comparison`, from the workload's declared conditions (read through
    ``runner`` where it is a runner) to the :class:`Plan`."""
    from ..workloads import AttemptRunner

    base = with_declared_conditions(workload, base, change,
                                    runner=runner if isinstance(runner, AttemptRunner) else None)
    require_fixed_conditions(base)
    variable, value = validated_change(base, change, hypothesis)
    _check_counts(base, variable, value)
    check_interleave(interleave, variable, base, objective, supervised, runner)
    _check_measure(objective, supervised)
    calibration = None
    if auto:  # the last check: the store is read only once everything else is known good
        calibration = auto_rounds(workload, base, policy, interleave=interleave, threads=rest.get("threads"),
                                  experiment_name=rest.get("experiment_name"), given=conditions)
        attempts = base["repeats"] = calibration["rounds"]
        configuration = dataclasses.replace(configuration, attempts=attempts)  # the rounds it planned, said
        if until_decisive:
            max_attempts = cap * attempts if max_attempts is None else max_attempts
            if type(max_attempts) is not int or max_attempts < attempts:
                raise InputError(f"max_attempts must be an integer >= the {attempts} rounds --rounds auto planned, "
                                 f"got {max_attempts!r}")
    if until_decisive:
        configuration = dataclasses.replace(configuration, max_attempts=max_attempts)
    return Plan(workload=workload, base=base, candidate={**base, variable: value}, variable=variable,
                 objective=objective, policy=policy, attempts=attempts, until_decisive=until_decisive,
                 max_attempts=max_attempts, interleave=interleave, supervised=supervised, runner=runner,
                 evaluate_kwargs=dict(evaluate_kwargs), calibration=calibration, configuration=configuration,
                 **rest)


def _check_measure(objective: str, supervised: bool) -> None:
    """An objective whose entry measures its figure in each attempt must be one every attempt's process has."""
    from ..rules import OBJECTIVES
    from ..workloads import check_measures

    if OBJECTIVES.require(objective).measure is not None:
        try:
            check_measures((objective,), supervised)
        except ValueError as error:
            raise InputError(str(error)) from None


def _max_looks(attempts: int, max_attempts: int | None) -> int:
    if max_attempts is None:
        return 1
    return 1 + -(-(max_attempts - attempts) // 2)


def _look_positions(attempts: int, max_attempts: int) -> list[int]:
    """Where ``--until-decisive`` looks, in attempts per arm: after the first ``attempts``, then every 2."""
    positions = [attempts]
    while positions[-1] < max_attempts:
        positions.append(min(max_attempts, positions[-1] + 2))
    return positions


def _spent_before(held: dict, resume: bool, until_decisive: bool, attempts: int, max_attempts: int | None,
                  group: str) -> float:
    """The information fraction a resumed group's looks spent already, where this comparison goes on from.

    A group decided at a single look (no looks recorded) spent all of alpha on the attempts it
    had: judging it again with more attempts is optional stopping, which no level holds; it is
    said, and the new attempts are judged as a design of their own. A sequential group whose looks
    spent everything cannot decide again: an :class:`InputError` before anything runs.
    """
    if not held["attempts"]:
        return 0.0
    if held["spent"] is None:
        if held["decided"]:
            print(f"warning: group {group!r} was already decided at a single look; a decision on more attempts "
                  "is optional stopping, whose false-accept rate can exceed alpha (for a decision that can grow, "
                  "run compare --until-decisive --max-attempts N from the start, or start a new group)",
                  file=sys.stderr)
        return 0.0
    if held["spent"] >= 1:
        raise InputError(f"group {group!r}: its sequential looks already spent all of alpha (the last look was at "
                         "its most attempts); a resume cannot decide again: start a new group")
    return held["spent"]


# --- calibration: what a calibration is valid for, and the rounds compare --rounds auto runs --------

#: The environment fingerprint's keys a calibration is valid for (``tracking._environment``): all
#: but the git revision (the code under test changes with it, the machine's noise does not) and the
#: mlflow version; the GPU's name and the threads asked for are added beside them.
CALIBRATION_FINGERPRINT = ("host", "cpu_model", "cpu_count", "python", "torch")


def calibration_identity(workload: str, base: dict, threads: int | None, interleave: str = "steps") -> dict:
    """What a calibration is valid for, the same for ``calibrate`` and ``compare --rounds auto``.

    The workload, its conditions as the attempts' params hold them (canonical strings) but
    ``repeats`` (a comparison's planned size) and ``revision`` (the code changes, the machine's
    noise does not), with ``warmup`` and ``steps`` as the attempts run them (the workloads'
    defaults, 2 and 10, where not given), the torch threads asked for (``default``: the caller's
    count), this host's :data:`CALIBRATION_FINGERPRINT` and GPU, and the interleaving of its rounds
    (named only when it is not ``steps``, so that calibrations made before it was are found).
    ``tracking._calibration.calibration_key`` is its digest.
    """
    from ..tracking import canonical_value, fingerprint
    from ..workloads import DEFAULT_STEPS, DEFAULT_WARMUP

    conditions = {key: value for key, value in base.items() if key not in ("repeats", "revision")}
    conditions.setdefault("warmup", DEFAULT_WARMUP)
    conditions.setdefault("steps", DEFAULT_STEPS)
    env = fingerprint({"gpu_name": gpu_name_of(base)})
    return {"workload": workload,
            "conditions": {str(key): canonical_value(value, key=str(key)) for key, value in conditions.items()},
            "threads": "default" if threads is None else str(threads),
            **{key: env[key] for key in (*CALIBRATION_FINGERPRINT, "gpu_name")},
            **({} if interleave == "steps" else {"interleave": interleave})}


def calibrate_command(workload: str, given: dict, base: dict, *, threads: int | None = None,
                      experiment_name: str | None = None, latency: str | None = None,
                      interleave: str = "steps") -> str:
    """The exact ``mlflow-perfgate calibrate`` command whose calibration a comparison of ``base`` would find.

    ``given`` are the conditions the user gave (TinyLM fills in the rest as it does for the
    comparison); ``warmup`` and ``steps`` are the comparison's, as ``--warmup`` and ``--steps``.
    """
    from ..tracking import canonical_value
    from ..workloads import DEFAULT_STEPS, DEFAULT_WARMUP

    parts = ["mlflow-perfgate", "calibrate", "--workload", workload]
    for key, value in given.items():
        if key not in ("steps", "warmup", "repeats"):
            parts += ["--set", f"{key}={_cli_value(canonical_value(value))}"]
    parts += ["--steps", canonical_value(base.get("steps", DEFAULT_STEPS)),
              "--warmup", canonical_value(base.get("warmup", DEFAULT_WARMUP))]
    if threads is not None:
        parts += ["--threads", str(threads)]
    if latency is not None:
        parts += ["--latency", latency]
    if interleave != "steps":
        parts += ["--interleave", interleave]
    if experiment_name:
        parts += ["--experiment", experiment_name]
    return shlex.join(parts)


def auto_rounds(workload: str, base: dict, policy: Any, *, interleave: str, threads: int | None = None,
                experiment_name: str | None = None, given: dict | None = None, power: float = 0.8,
                now: float | None = None) -> dict:
    """The rounds ``compare --rounds auto`` runs, from the latest calibration of this workload here.

    The calibration is the latest FINISHED calibration run in the experiment whose
    :func:`calibration_identity` is the comparison's (one search on its digest); its spread of
    the figure the policy judges (``policy.latency_key``) gives the rounds the paired method's test
    needs for the policy's smallest effect (``min_improvement``, or ``margin`` in non_regression
    mode) at its alpha with ``power`` (``rules._calibration.auto_rounds``: at least the method's
    floor, at most ``MAX_AUTO_ROUNDS``, which is said). What it used is printed on stderr.

    Returns:
        ``{"rounds", "needed", "capped", "calibration_run_id", "age_s", "latency", "figure",
        "spread", "calibration_rounds", "effect", "effect_name", "power", "test", "text"}``.

    Raises:
        InputError: the method is not ``paired`` or the interleaving not ``steps`` (a calibration
            measures step-interleaved rounds' ratios, which only the paired method judges), no
            calibration was found (the message holds the exact ``calibrate`` command that makes
            one), or the one found lacks the judged figure.
    """
    from ..rules import MAX_AUTO_ROUNDS, MAX_ROUNDS, age_text, auto_rounds as plan_rounds
    from ..tracking import latest_calibration

    if policy.method != "paired":
        raise InputError(f"--rounds auto plans the rounds of the paired method's test (a calibration measures the "
                         f"within-round ratios only it judges), got method {policy.method!r}: pass --method paired, "
                         "or give the rounds (--rounds N)")
    identity = calibration_identity(workload, base, threads, interleave)
    command = calibrate_command(workload, base if given is None else given, base, threads=threads,
                                experiment_name=experiment_name, latency=policy.latency, interleave=interleave)
    record = latest_calibration(identity, experiment_name=experiment_name)
    where = f"experiment {experiment_name!r}" if experiment_name else "the default experiment"
    if record is None:
        raise InputError(f"--rounds auto found no calibration of {workload!r} with these conditions and threads on "
                         f"this host ({identity['host']}) in {where}: run `{command}` first (its identical-arm rounds "
                         "measure this machine's noise now), or give the rounds (--rounds N)")
    figure = policy.latency_key
    spread, count = record.spread(figure), record.rounds(figure)
    if spread is None or count < 2:
        raise InputError(f"calibration {record.run_id} holds no spread of {figure} (the {policy.latency} latency: "
                         f"{count} of its rounds have it in both arms): choose another --latency, or calibrate "
                         f"again: `{command}`")
    plan = plan_rounds(spread, policy, power=power)
    age = record.age_s(now)
    text = (f"{plan['rounds']} rounds from calibration {record.run_id} ({age_text(age)} old): {figure} spread "
            f"{spread:.2%} over {count} identical-arm rounds; {plan['test']['test']}: {plan['needed']}"
            f"{'+' if plan['needed'] >= MAX_ROUNDS else ''} rounds for a {plan['effect'] * 100:.3g}% {plan['effect_name']}")
    if plan["capped"]:
        text += (f", capped at {MAX_AUTO_ROUNDS}: these rounds detect a {plan['detectable_at_rounds']:.2%} effect "
                 "with that power (a quieter machine, --threads 1 or more steps lower the spread)")
    print(f"rounds auto: {text}", file=sys.stderr)
    return {"rounds": plan["rounds"], "needed": plan["needed"], "capped": plan["capped"],
            "calibration_run_id": record.run_id, "age_s": age, "latency": policy.latency, "figure": figure,
            "spread": spread, "calibration_rounds": count, "effect": plan["effect"],
            "effect_name": plan["effect_name"], "power": power, "test": plan["test"]["test"], "text": text}


def _cli_value(text: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip() for part in text[1:-1].split(","))
    return text
