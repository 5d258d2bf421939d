"""Comparisons and diagnoses: PyTorch attempts (``workloads``) recorded and judged in MLflow (``tracking``).

This is the application layer under the CLI and the MLproject entry points: it runs the
attempts, logs each one as soon as it ends (a failed one too), and leaves every verdict to the
rules through ``evaluate_group``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

from . import rules
from .rules._errors import InputError, SingleVariableError, StoreUnavailable

__all__ = [
    "RECOMMENDED",
    "SPECIFICATION",
    "Configuration",
    "configure",
    "DEFAULT_CONDITIONS",
    "INTERLEAVE_MODES",
    "LOCKSTEP_MODES",
    "pipeline",
    "auto_rounds",
    "calibrate_command",
    "calibration_identity",
    "compare",
    "diagnose",
    "candidate_change_for",
    "check_change_reached_workload",
    "check_quality_gate_can_fail",
    "compare_command",
    "require_fixed_conditions",
    "with_declared_conditions",
]

#: What a TinyLM comparison fixes when the user does not say (the specification's baseline; the measured
#: steps come from the comparison's configuration, :func:`configure`, and elsewhere the workloads' default 10).
DEFAULT_CONDITIONS = {
    "model": "TinyLM",
    "input_shape": "4,128",
    "batch_size": 4,
    "dtype": "fp32",
    "device": "cpu",
    "measurement_method": "wall_median_step_ms",
    "checkpoint": False,
    "num_workers": 0,
    "warmup": 2,
}


#: How a comparison's attempts share the machine: ``attempts``, ABBA attempts each in a child of
#: its own; ``steps``, one child per ABBA round holding both arms, their measured steps interleaved;
#: ``lockstep``, one child per arm and round, their measured steps alternated by the parent as one
#: child would run them (``workloads._lockstep``); ``duet``, the same children stepping at once.
INTERLEAVE_MODES = ("attempts", "steps", "lockstep", "duet")
#: The modes whose rounds run one child per arm (``workloads._lockstep``).
LOCKSTEP_MODES = ("lockstep", "duet")
#: Conditions both arms of a step-interleaved child must share, and why.
_ONE_PROCESS = {
    "device": "so they must share the device",
    "warmup": "and alternates their steps one for one, so they must share warmup",
    "steps": "and alternates their steps one for one, so they must share steps",
    "revision": "which imports one checkout of the code, so they must share the revision",
    "python": "which is one interpreter, so they must share the python",
}


def _steps_refusal(variable: str, base: dict, objective: str, supervised: bool, runner: Any) -> tuple[str, str] | None:
    """Why both arms of this comparison cannot share one process (``--interleave steps``), known
    before anything runs: ``(the reason, what to do instead)``, or ``None``."""
    if variable in _ONE_PROCESS:
        return (f"interleave='steps' runs both arms in one process {_ONE_PROCESS[variable]}; the changed "
                f"variable is {variable!r}", ": use interleave='lockstep' (--interleave lockstep), one process "
                                             "per arm, their steps alternated")
    if objective == "memory" and str(base.get("device", "cpu")).strip().lower().startswith("cuda"):
        return ("interleave='steps' on CUDA shares one caching allocator between the arms, so the peak "
                "memory the memory objective judges would be both arms' together",
                ": use interleave='lockstep' (--interleave lockstep)")
    from .workloads import AttemptRunner

    if supervised and isinstance(runner, AttemptRunner) and \
            type(runner).run_interleaved is AttemptRunner.run_interleaved:
        return (f"interleave='steps' needs a runner that runs step-interleaved pairs; "
                f"{type(runner).__name__} does not", "")
    return None


def _lockstep_refusal(supervised: bool, runner: Any) -> str | None:
    """Why this comparison cannot run lockstep rounds (one child per arm), or ``None``."""
    from .workloads import AttemptRunner, SiteRunner

    if not supervised:
        return "lockstep rounds run each arm in a child process of its own, and --in-process runs none"
    if isinstance(runner, AttemptRunner) and not isinstance(runner, SiteRunner):
        return (f"lockstep rounds need two children at once, one per arm: give a runner kind (auto, fork, spawn) or "
                f"a SiteRunner, not a {type(runner).__name__}")
    return None


def _check_interleave(interleave: Any, variable: str, base: dict, objective: str, supervised: bool,
                      runner: Any) -> None:
    """Refuse, before anything runs, an interleaving this comparison's arms cannot run with."""
    if interleave not in INTERLEAVE_MODES:
        raise InputError(f"interleave must be one of {list(INTERLEAVE_MODES)}, got {interleave!r}")
    if interleave in LOCKSTEP_MODES:
        refusal = _lockstep_refusal(supervised, runner)
        if refusal:
            raise InputError(f"interleave={interleave!r}: {refusal}")
        return
    refusal = _steps_refusal(variable, base, objective, supervised, runner) if interleave == "steps" else None
    if refusal:
        raise InputError("".join(refusal))
    if variable in ("revision", "python") and not supervised:
        raise InputError(f"a change of {variable} runs each arm's code in child processes of its own (its worktree "
                         "or its interpreter), and --in-process runs none: leave --in-process out; nothing was run "
                         "or logged")


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
      :data:`NON_REGRESSION_CAP` times the rounds (:func:`_plan_comparison` sets it).

    Returns:
        The :class:`Configuration` (``defaulted`` names what was filled in, ``fallbacks`` why a
        recommended value did not apply).
    """
    from .rules._registry import METHODS, OBJECTIVES

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
            fallbacks.append(f"{how}: {refusal[0]}")
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
    from .tracking._maintenance import reap

    ended = reap(float("inf"), experiment_name=experiment_name, group=group, attempts_only=True)
    if ended:
        print(f"{who}: ended {len(ended)} attempt run{'' if len(ended) == 1 else 's'} left RUNNING by a process "
              "that is gone (as the evaluator counts them: KILLED without an outcome, else as their outcome says)",
              file=sys.stderr)
    return ended


def _base_conditions(workload: str, conditions: dict, attempts: int) -> dict:
    base = dict(DEFAULT_CONDITIONS) if workload == "tinylm" else {}
    base.update(conditions)
    if "input_shape" in conditions and "batch_size" not in conditions and workload == "tinylm":
        shape = _shape(conditions["input_shape"])
        if shape:
            base["batch_size"] = shape[0]
    base["repeats"] = attempts
    return base


def _shape(value: Any) -> list[int] | None:
    """``(4, 128)``, ``"4,128"``, ``"4x128"`` -> ``[4, 128]``; None when it is no shape."""
    from .tracking import canonical_value

    try:
        parsed = json.loads(canonical_value(value))
    except ValueError:
        return None
    return parsed if isinstance(parsed, list) and all(isinstance(v, int) for v in parsed) else None


def with_declared_conditions(workload: str, base: dict, change: Any = None) -> dict:
    """``base`` with the conditions its factory declares (``factory.perfgate_conditions``,
    ``workloads._declared``: the fixed ones, and the baseline value of a knob such as ``hidden``)
    where no ``--set`` gives them.

    Read for every workload of your own whose arms run here (a ``revision`` or ``python`` condition
    places each arm's code elsewhere: there they are given with ``--set``), in a child process
    (about a second and a half: the module's imports). A given condition that disagrees with the
    declared one is refused, naming both values (numbers compared as numbers: ``02`` is 2); the
    changed variable keeps its two values (the declaration is the baseline's, as a ``--set`` is).

    A module whose import fails, crashes or exits while it is read stops nothing when every
    condition is given (each attempt's child meets the failure and fails, counted in the failure
    rate, as it would without a declaration).

    Raises:
        InputError: the declaration is malformed, or it cannot be read and a condition is missing, or
            a ``--set`` disagrees with it.
    """
    from .rules._experiment import FIXED_CONDITIONS
    from .sites import SITE_CONDITIONS
    from .tracking._schema import canonical_value
    from .workloads._declared import ATTRIBUTE, DeclarationUnreadable, declared_conditions

    if workload == "tinylm" or workload.startswith("mlflow_perfgate."):  # ours declare nothing
        return base
    if any(arm.get(name) not in (None, "") for arm in (base, change if isinstance(change, dict) else {})
           for name in SITE_CONDITIONS):
        return base
    try:
        declared = declared_conditions(workload)
    except DeclarationUnreadable as exc:
        changed = list(change) if isinstance(change, dict) else []
        if all(base.get(key) is not None for key in FIXED_CONDITIONS) and all(key in base for key in changed):
            return base  # given in full: its attempts meet the failure and fail, each counted
        raise InputError(f"{exc}; nothing was run or logged") from None
    except ValueError as exc:
        raise InputError(f"{exc}; nothing was run or logged") from None
    merged = dict(base)
    for key, value in declared.items():
        given = base.get(key)
        if given is None:
            merged[key] = value
        elif canonical_value(given) != canonical_value(value) and not _same_number(given, value):
            raise InputError(f"--set {key}={given} disagrees with what workload {workload!r} declares ({ATTRIBUTE}: "
                             f"{key}={value}): give the factory's value, or change its declaration; nothing was run "
                             "or logged")
    return merged


def _same_number(a: Any, b: Any) -> bool:
    """Whether two condition values are the same number (``"02"`` and ``2``, ``"2.0"`` and ``2``)."""
    try:
        x, y = float(str(a).strip()), float(str(b).strip())
    except ValueError:
        return False
    return not isinstance(a, bool) and not isinstance(b, bool) and math.isfinite(x) and x == y


def require_fixed_conditions(base: dict) -> None:
    """The specification's fixed conditions, checked before anything is built, profiled or run.

    ``design_single_variable_experiment`` requires every baseline to declare ``model``,
    ``input_shape``, ``batch_size``, ``dtype``, ``device``, ``repeats`` and
    ``measurement_method``; TinyLM fills them in (``DEFAULT_CONDITIONS``), a factory of your own
    declares them (:func:`with_declared_conditions`) or gets them from ``--set`` (``repeats``
    always comes from ``--attempts``).

    Raises:
        InputError: some are missing (or ``None``); the message names them and how to give them.
    """
    from .rules._experiment import FIXED_CONDITIONS

    missing = sorted(key for key in FIXED_CONDITIONS if base.get(key) is None)
    if missing:
        flags = " ".join(f"--set {key}=..." for key in missing)
        raise InputError(
            f"the baseline is missing the fixed conditions {missing}; give them ({flags}), or in Python in the "
            "conditions dict, or declare them beside the factory (make.perfgate_conditions = {...}). Every "
            f"comparison fixes {sorted(FIXED_CONDITIONS)} (repeats comes from --attempts), "
            "so that both arms measure the same workload the same way")


def _check_counts(base: dict, variable: str, value: Any) -> None:
    """Each arm's ``steps`` and ``warmup`` conditions as an attempt reads them, before anything runs.

    Raises:
        InputError: one is not an integer (``steps`` >= 1, ``warmup`` >= 0), named with the arm and
            how it was given, instead of every attempt failing on it.
    """
    from .workloads._conditions import parse_int

    for arm, conditions in (("baseline", base), ("candidate", {**base, variable: value})):
        for key, minimum in (("steps", 1), ("warmup", 0)):
            if conditions.get(key) is None:
                continue
            try:
                parse_int(key, conditions[key], minimum=minimum)
            except ValueError as error:
                how = "--change" if arm == "candidate" and key == variable else "--set"
                raise InputError(f"the {arm}'s {error} ({how} {key}=...)") from None


def check_change_reached_workload(variable: str, baseline: dict | None, candidate: dict | None) -> None:
    """The changed variable reached the workload: the arms' ``describe()`` differ where it reports the variable.

    Called once per comparison, on the first attempt of each arm that carries the workload's own
    record (``AttemptResult.memory["workload"]``, its :meth:`~mlflow_perfgate.workloads.Workload.describe`).
    When ``describe()`` reports the changed variable under its name and both arms report the same
    value, the factory ignored the condition: every attempt would measure the same workload twice.
    A variable ``describe()`` does not report is not checked (TinyLM's ``checkpoint``, say).

    Where the factory's reads were noted (the memory record's ``read_conditions``, see
    :mod:`mlflow_perfgate.workloads._reads`; the Hugging Face adapter notes its factory's and its
    own), a changed variable that neither arm's factory looked up is refused the same way, for
    every adapter: a misspelt key (``--change chekpoint=true``) or one the factory never reads
    (``attn=sdpa`` where it builds its config without it). The conditions the runner itself
    reads (the fixed ones, ``steps``, ``warmup``, and where the arms run: ``revision``, ``python``)
    reach the measurement whatever the factory does.

    Raises:
        SingleVariableError: the factory ignored the changed variable.
    """
    if not isinstance(baseline, dict) or not isinstance(candidate, dict):
        return
    from .rules._experiment import FIXED_CONDITIONS

    read_b, read_c = baseline.get("read_conditions"), candidate.get("read_conditions")
    if (variable not in FIXED_CONDITIONS and variable not in ("steps", "warmup", "revision", "python")
            and isinstance(read_b, list) and isinstance(read_c, list)
            and variable not in read_b and variable not in read_c):
        import difflib

        read = sorted(set(read_b) | set(read_c))
        close = difflib.get_close_matches(variable, read, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SingleVariableError(
            f"the workload's factory never read the changed variable {variable!r}{hint}: it looked up only "
            f"{read}, so baseline and candidate are the same workload. Change a condition the factory reads, "
            "or read this one in the factory (mlflow_perfgate.workloads.flag, integer, number, shape or choice)")
    if variable not in baseline and variable not in candidate:
        return
    from .tracking import canonical_value

    seen_b, seen_c = canonical_value(baseline.get(variable)), canonical_value(candidate.get(variable))
    if seen_b == seen_c:
        raise SingleVariableError(
            f"the workload's factory ignored the changed variable {variable!r}: its describe() reports "
            f"{variable}={seen_b} in both arms, so baseline and candidate are the same workload. Read the "
            f"condition in the factory (the conditions dict holds it as text: mlflow_perfgate.workloads.flag, "
            f"integer, number, shape or choice read it), and report what was built in describe()")


class _ChangeWitness:
    """Feeds :func:`check_change_reached_workload` the first described attempt of each arm, once."""

    def __init__(self, variable: str):
        self.variable = variable
        self.described: dict[str, dict] = {}
        self.done = False

    def see(self, arm: str, result) -> None:
        if self.done or arm in self.described:
            return
        memory = getattr(result, "memory", None) or {}
        described = memory.get("workload")
        if isinstance(described, dict):  # the workload's own record, and what its factory read beside it
            read = memory.get("read_conditions")
            self.described[arm] = {**described, "read_conditions": read} if isinstance(read, list) else described
        if len(self.described) == 2:
            self.done = True
            check_change_reached_workload(self.variable, self.described["baseline"], self.described["candidate"])


def check_quality_gate_can_fail(quality: Any, quality_tolerance: float) -> None:
    """The quality check can fail at the baseline's quality: the tolerance is below the quality itself.

    ``quality_ok`` fails when the candidate's quality is below the baseline's less
    ``quality_tolerance`` (an absolute drop, as the specification has it). With a baseline quality
    of 0.004 (a random-weight model) and the default tolerance of 0.01, only a quality below zero
    could fail it: for a probability, an accuracy or ``exp(-loss)`` the gate would pass anything.
    Called on the first successful baseline attempt of a comparison.

    Raises:
        InputError: the baseline's quality is positive and at most the tolerance.
    """
    if quality is None or isinstance(quality, bool):
        return
    try:  # numpy, pandas and torch scalars as Python numbers
        quality, quality_tolerance = float(quality), float(quality_tolerance)
    except (TypeError, ValueError):
        return
    if not math.isfinite(quality):
        return
    if 0 < quality <= quality_tolerance:
        raise InputError(
            f"quality_tolerance {quality_tolerance:g} is at least the baseline's quality {quality:.3g}: the quality "
            "check would pass a candidate whose quality fell to zero, so it could not fail; pass a "
            f"--quality-tolerance below {quality:.3g} (an absolute drop: {quality / 10:.2g} allows 10%), give the "
            "workload a quality that is not near zero (train it first, or load trained weights), or pass "
            "--allow-undecidable to run it anyway")


def _validated_change(base: dict, change: dict, hypothesis: str) -> tuple[str, Any]:
    """The change checked by the specification's single-variable design."""
    if not isinstance(change, dict) or len(change) != 1:
        raise SingleVariableError(f"--change must name exactly one variable, got {sorted(map(str, change or {}))}")
    from .tracking import canonical_value

    evidence = {"status": "ready_for_experiment", "hypothesis": hypothesis}
    variable, value = next(iter(change.items()))
    if variable in base and canonical_value(base[variable]) == canonical_value(value):
        raise SingleVariableError(f"the candidate must really change {variable!r}; both are {canonical_value(value)!r}")
    try:
        plan = rules.design_single_variable_experiment(evidence, base, {variable: value})
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from None
    except ValueError as exc:
        raise SingleVariableError(str(exc)) from None
    return plan["changed_variable"], value


def _gpu_name(conditions: dict) -> str:
    """The GPU an attempt ran on, for the environment fingerprint ("none" on the CPU)."""
    if str(conditions.get("device", "cpu")).lower().startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(str(conditions["device"])))
    return "none"


def _outcome(result, conditions: dict, placed: dict | None = None) -> dict:
    """An :class:`AttemptResult` as the arguments of ``log_attempt`` / ``StartedAttempt.finish``
    (``placed``: the fingerprint keys the arm's site sets, its interpreter's versions, its revision)."""
    from .tracking import METRIC
    from .tracking._schema import fit

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
    environment = {"gpu_name": _gpu_name(conditions), **(placed or {})}
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
    from .tracking import AttemptDeferred

    try:
        return started.finish(**_outcome(result, conditions, placed), mem_estimate_from=mem_estimate_from)
    except AttemptDeferred as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return None


class _MemoryCarrier:
    """Each arm's CPU memory estimate, made once per comparison where nothing judges it (issue 26).

    On the CPU the memory record is an estimate computed from the conditions (the bytes of the
    parameters, gradients and optimizer state, and of what autograd saves on the probe batch),
    not a measurement: the same conditions give the same figure. Unless the objective judges it
    (memory, whose metric is ``peak_mem_mib``: then every attempt's estimate is a sample), an arm's first successful
    attempt makes it and later attempts of that arm skip it (one forward and backward each); their
    results carry the first one's record, and their runs name the attempt it came from
    (``perfgate.mem_estimate_from``). A measured record (CUDA's peak) is never carried.
    """

    def __init__(self, objective: str):
        from .rules._registry import OBJECTIVES

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


class Terminated(BaseException):
    """SIGTERM reached a running comparison (a cancelled CI job): stop, end every run with the reason."""


@contextlib.contextmanager
def _terminate_as_exception():
    """Turn SIGTERM into :class:`Terminated`, and Ctrl-C (SIGINT) into ``KeyboardInterrupt``, for the block
    (main thread only), held while a run is created or written (:func:`_signal_held`), so the running
    child is killed and every run the comparison holds is ended KILLED with the reason instead of the
    process vanishing or a run being left half-written. SIGINT is taken only where Python's own
    handler has it (a background job that ignores it keeps ignoring it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _HELD["depth"]:  # a run is being created or written: raised once it is, and its id kept
            if _HELD["pending"] is None and _HELD["grace_s"] is not None:  # a tail: waited for, not forever
                signal.setitimer(signal.ITIMER_REAL, _HELD["grace_s"])
            _HELD["pending"] = _HELD["pending"] or signum
            return
        raise _stop_for(signum)

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, handler)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
        _HELD["pending"] = None


def _stop_for(signum: int) -> BaseException:
    """What a stopping signal raises: ``KeyboardInterrupt`` for Ctrl-C, :class:`Terminated` otherwise."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Terminated(f"terminated by {signal.Signals(signum).name}")


#: :func:`_terminate_as_exception`'s handler holds SIGTERM and SIGINT while ``depth`` > 0 (see :func:`_signal_held`).
_HELD: dict[str, Any] = {"depth": 0, "pending": None, "grace_s": None}
#: How long a stopping signal waits for a round's tail once its measured steps are over (:func:`_tail_held`).
TAIL_GRACE_S = 3.0


@contextlib.contextmanager
def _signal_held():
    """A stopping signal that reaches the block is raised when the block ends, not inside it (SIGTERM as
    :class:`Terminated`, Ctrl-C as ``KeyboardInterrupt``): a run created or written in it is whole
    and its id kept, so the stop that follows can end it (a signal inside MLflow's create_run would
    leave a RUNNING run whose id nobody holds; one inside an outcome's write, half an outcome)."""
    _HELD["depth"] += 1
    try:
        yield
    finally:
        _HELD["depth"] -= 1
    if not _HELD["depth"] and _HELD["pending"]:
        signum, _HELD["pending"] = _HELD["pending"], None
        raise _stop_for(signum)


@contextlib.contextmanager
def _tail_held(grace_s: float = TAIL_GRACE_S):
    """A round's tail after its measured steps (each arm's quality, memory record, probe: a fraction of a
    second): a stopping signal that comes then waits for the tail, so the round's measured attempts are
    written, not withdrawn; a tail still running ``grace_s`` after the signal is interrupted by it (the
    round withdrawn, as before). Only where :func:`_terminate_as_exception` holds the signals (the main
    thread); elsewhere the block runs as it is."""
    if (threading.current_thread() is not threading.main_thread() or _HELD["grace_s"] is not None
            or not callable(signal.getsignal(signal.SIGTERM))):
        yield
        return

    def overdue(signum, frame):  # the grace is over: the held signal is raised inside the tail
        pending, _HELD["pending"] = _HELD["pending"], None
        if pending:
            raise _stop_for(pending)

    previous = signal.signal(signal.SIGALRM, overdue)
    _HELD["grace_s"] = grace_s
    try:
        with _signal_held():
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _HELD["grace_s"] = None


def compare(
    workload: str,
    conditions: dict,
    change: dict,
    *,
    attempts: int | str | None = None,
    group: str | None = None,
    experiment_name: str | None = None,
    objective: str | None = None,
    supervised: bool = True,
    runner: Any = "auto",
    timeout_s: float = 300.0,
    threads: int | None = None,
    until_decisive: bool | None = None,
    max_attempts: int | None = None,
    progress: bool = True,
    hypothesis: str = "the candidate change improves the objective",
    on_attempt: Callable[[str, Any], None] | None = None,
    parent_run_id: str | None = None,
    resume: bool = False,
    interleave: str | None = None,
    allow_undecidable: bool = False,
    keep_worktrees: bool = False,
    new_plan: bool = False,
    **evaluate_kwargs: Any,
) -> dict:
    """Run baseline and candidate attempts interleaved (ABBA) under a comparison run, then decide.

    What is left out (``None``: ``attempts``, ``interleave``, ``threads``, the conditions'
    ``steps``, and ``method`` and ``latency`` among ``evaluate_kwargs``) comes from
    :data:`RECOMMENDED`, the configuration validated on a shared machine (the paired method on
    ``p10``, steps interleaved, one thread, 10 rounds of 30 steps), or falls back where it does
    not apply to this comparison (:func:`configure`); the comparison run's tag
    ``perfgate.configuration`` and the report say which. ``method="seed"`` is the
    specification's rule, exact, on its figure and sample (``raw``, 5 attempts of 10 steps).

    Args:
        workload: ``tinylm`` or a factory ``module:function``.
        conditions: the fixed conditions (TinyLM fills in the specification's baseline for the
            ones not given); ``warmup`` and ``steps`` are conditions too.
        change: ``{variable: candidate_value}``, exactly one variable.
        attempts: attempts per arm (before any extra looks): one per arm in each ABBA round, so
            also the rounds (default 10; 5 with the ``seed`` method). ``"auto"``: the rounds the latest calibration of this workload, its
            conditions and this host calls for (:func:`auto_rounds`; ``mlflow-perfgate calibrate``),
            for the paired method with ``interleave="steps"``; with ``until_decisive`` and no
            ``max_attempts``, 4 times those.
        group: the comparison id (default: a new one).
        objective: ``latency`` (default), ``memory`` or ``throughput``.
        supervised: each attempt in a child process (a crash, hang or kill is a failed attempt).
        runner: what starts those children: ``auto`` (default: one warm server for the whole
            comparison forks each attempt's child, where fork is available), ``fork``,
            ``spawn`` (a fresh interpreter per attempt), or an ``AttemptRunner`` the caller
            owns. A kind's runner is closed when the comparison ends, also on error.
        timeout_s: per-attempt wall-clock limit.
        threads: torch threads for every attempt (default 1, the recommended configuration's).
        until_decisive: while the answer is ``rerun`` for lack of evidence, add interleaved
            attempt pairs, up to ``max_attempts`` per arm (see ``evaluate_group``'s ``look``;
            default 4 times ``attempts``). ``None`` (the default): on in ``non_regression`` mode
            with the paired or robust method, up to :data:`NON_REGRESSION_CAP` (2) times
            ``attempts`` unless ``max_attempts`` says, except when resuming; off otherwise.
        progress: show a progress bar on stderr.
        parent_run_id: a run to nest the comparison under (the ``mlflow run`` project run).
        resume: add to a group that already holds attempts (a re-run of the same comparison):
            its comparison run is reused and the ABBA rounds continue; without it such a
            group is refused, never half-mixed.
        interleave: ``attempts`` (the ABBA order of whole attempts, each in its own
            child), ``steps`` (the default where both arms can share a process): each ABBA round is one child holding both arms (each built once,
            both warmed up, then their measured steps alternate A B B A ...; the arm that leads
            alternates between rounds), which gives one attempt per arm with the round's
            ``pair``; a failing arm fails its own attempt, a crash of the child both. The child's
            limit is twice ``timeout_s``. Both arms must live in one process: the same workload
            and device, warmup and steps, revision and python (refused before anything runs
            otherwise, as is the memory objective on CUDA, where the arms share one allocator).
            ``lockstep`` (the default where they cannot): each round is one child per arm, at
            the arm's site (its revision's worktree, its interpreter), their measured steps
            alternated A B B A ... by this process, each child timing its own; a child that
            crashes fails its own arm's attempt only. ``duet``: the same children, both arms'
            steps at once.
        keep_worktrees: leave the worktrees of the revisions compared (``revision`` conditions,
            :mod:`mlflow_perfgate.sites`) in place when the comparison ends.
        new_plan: with ``resume``, judge the group under this call's policy although its rounds were
            planned under another (without it such a resume is refused, naming both); its earlier
            looks' spending is then not carried over.
        allow_undecidable: run a comparison that cannot mean anything all the same (to check a
            pipeline): by default a new group planned below ``min_valid_runs`` attempts per arm,
            or below the fewest with which its method can accept, is refused before anything
            runs (an :class:`InputError` saying how many are needed).
        **evaluate_kwargs: thresholds and options for ``evaluate_group``.

    Returns:
        ``evaluate_group``'s result, with ``comparison_run_id`` (and ``rounds_auto``, the plan
        :func:`auto_rounds` made, when ``attempts="auto"``).
    """
    plan = _plan_comparison(workload, conditions, change, attempts=attempts, group=group,
                            experiment_name=experiment_name, objective=objective, supervised=supervised,
                            runner=runner, timeout_s=timeout_s, threads=threads, until_decisive=until_decisive,
                            max_attempts=max_attempts, progress=progress, hypothesis=hypothesis,
                            on_attempt=on_attempt, parent_run_id=parent_run_id, resume=resume,
                            interleave=interleave, allow_undecidable=allow_undecidable,
                            keep_worktrees=keep_worktrees, new_plan=new_plan, evaluate_kwargs=evaluate_kwargs)
    return _Comparison(plan).run()


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A comparison's validated inputs (:func:`_plan_comparison`): nothing has run or been written."""

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

    @property
    def most(self) -> int:
        """The most attempts per arm this call may run."""
        return self.max_attempts if self.until_decisive else self.attempts

    @property
    def measures(self) -> tuple[str, ...]:
        """The objectives whose figure every attempt measures (an entry with ``measure``: a plugin's)."""
        from .rules._registry import OBJECTIVES

        return (self.objective,) if OBJECTIVES.require(self.objective).measure is not None else ()


def _plan_comparison(workload: str, conditions: dict, change: dict, *, attempts: int, objective: str | None,
                     until_decisive: bool, max_attempts: int | None, interleave: str, supervised: bool, runner: Any,
                     hypothesis: str, evaluate_kwargs: dict, **rest: Any) -> _Plan:
    """Check everything :func:`compare` is given, before anything runs; the :class:`_Plan`.

    Raises:
        InputError, PolicyError, SingleVariableError: see :func:`compare`.
    """
    auto = attempts == "auto"
    if attempts is not None and not auto and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer or 'auto', got {attempts!r}")
    if interleave is not None and interleave not in INTERLEAVE_MODES:
        raise InputError(f"interleave must be one of {list(INTERLEAVE_MODES)}, got {interleave!r}")
    objective = objective or "latency"
    one = isinstance(change, dict) and len(change) == 1
    base = _base_conditions(workload, conditions, 1)
    configuration = configure(
        objective, evaluate_kwargs.get("mode") or "improvement", str(next(iter(change))) if one else None, base,
        method=evaluate_kwargs.get("method"), latency=evaluate_kwargs.get("latency"), interleave=interleave,
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
    policy_options = {k: v for k, v in evaluate_kwargs.items() if k != "env_mismatch"}
    policy = rules.Policy(objective=objective, **policy_options)  # every option checked before anything runs
    if one:  # why steps cannot share a process, before the fixed keys
        _check_interleave(interleave, str(next(iter(change))), base, objective, supervised, runner)
    base = with_declared_conditions(workload, base, change)
    require_fixed_conditions(base)
    variable, value = _validated_change(base, change, hypothesis)
    _check_counts(base, variable, value)
    _check_interleave(interleave, variable, base, objective, supervised, runner)
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
    return _Plan(workload=workload, base=base, candidate={**base, variable: value}, variable=variable,
                 objective=objective, policy=policy, attempts=attempts, until_decisive=until_decisive,
                 max_attempts=max_attempts, interleave=interleave, supervised=supervised, runner=runner,
                 evaluate_kwargs=dict(evaluate_kwargs), calibration=calibration, configuration=configuration,
                 **rest)


def _check_measure(objective: str, supervised: bool) -> None:
    """An objective whose entry measures its figure in each attempt must be one every attempt's process has."""
    from .rules._registry import OBJECTIVES
    from .workloads._measures import check_measures

    if OBJECTIVES.require(objective).measure is not None:
        try:
            check_measures((objective,), supervised)
        except ValueError as error:
            raise InputError(str(error)) from None


class _Comparison:
    """One comparison in its steps: open (the runner, the store, the group, the refusals, the
    comparison run), run its rounds (ABBA attempts or step-interleaved rounds, then the looks of
    ``--until-decisive``), decide, or end KILLED saying why. :func:`compare` (and through it
    ``pipeline``, ``suite run``, ``history --bisect`` and the Ray dispatch) runs exactly these."""

    def __init__(self, plan: _Plan):
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
            self.active, self.owned = _runner_for(plan.runner, plan.workload, plan.supervised, sites=self.sites,
                                                  lockstep=plan.interleave in LOCKSTEP_MODES)
        except BaseException:
            self._release_sites()
            raise
        try:
            from .tracking import group_state

            _ready_store_while_warming(plan.workload, self.active, plan.timeout_s,
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

        from .tracking import TAG
        from .tracking._client import retrying

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
        from .sites import arm_sites

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
        from .rules._statistical import too_few_to_decide

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
        """``comparison_id``: the comparison run, created with SIGTERM held (:func:`_signal_held`); a SIGTERM
        that came meanwhile is raised once the run exists, and the run is ended KILLED saying so."""
        try:
            with _signal_held():
                self.comparison_id = self._comparison_run(who)
        except BaseException as exc:
            if self.comparison_id is not None:
                self.stop(exc)
            raise

    def _comparison_run(self, who: str) -> str:
        """The comparison run: the group's own when resumed, else a new one."""
        from .tracking import start_comparison

        plan, held, group = self.plan, self.held, self.group
        planned = keep_planned_repeats(held, self.arms["baseline"], self.arms["candidate"]) if plan.resume else None
        if planned is not None and plan.progress:
            print(f"resuming group {group!r}: its attempts carry repeats={planned} (the comparison's planned "
                  f"size); this call adds {plan.attempts} attempts per arm under that condition", file=sys.stderr)
        if plan.resume and held["attempts"]:
            end_left_running(group, plan.experiment_name, who)
        from .tracking import TAG, tag_run

        # how it is measured and judged, what was defaulted, what fell back and why
        configuration = None if plan.configuration is None else plan.configuration.text()
        from .tracking._runs import claim_rounds, policy_text

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
        from .tracking import start_attempt

        placed = {} if self.sites is None else self.sites.environment[arm]  # its interpreter's, its revision
        with _signal_held():  # the run and its id in in_flight (or ahead) together: a stop then ends it
            started = start_attempt(self.group, arm, self.arms[arm], experiment_name=self.plan.experiment_name,
                                    parent_run_id=self.comparison_id, pair=pair,
                                    environment={"gpu_name": _gpu_name(self.arms[arm]), **placed})
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
        with _signal_held():
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
        from .workloads import AttemptRunner, run_interleaved

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
        from .workloads._interleave import INTERLEAVE_REFUSED

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
        from .errors import WorkloadFailed

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
        from .workloads import run_attempt

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
        from .tracking import TAG, evaluate_group, tag_run
        from .workloads import interleave as abba

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
        from .tracking import evaluate_group, sync

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
        with _signal_held():
            self._stop(exc, by)

    def _stop(self, exc: BaseException, by: str = "compare") -> None:
        from .tracking import end_run

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

        with _terminate_as_exception():  # from before the comparison run exists: no window where SIGTERM kills
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


def _runner_for(runner: Any, workload: str, supervised: bool, *, sites: Any = None,
                lockstep: bool = False) -> tuple[Any, bool]:
    """The runner a call uses, and whether the call made it (then it closes it).

    Unsupervised: ``None``. A caller's ``AttemptRunner``: itself, not closed. A kind:
    ``attempt_runner(kind, workload)`` (with fork, its server already warming up); where the arms
    run apart (``sites``, :func:`mlflow_perfgate.sites.arm_sites`) or in lockstep rounds, a
    :class:`~mlflow_perfgate.workloads.SiteRunner` of that kind, a runner per arm and site.

    Raises:
        InputError: not a kind nor a runner, ``'fork'`` where fork is unavailable, or a workload
            module found nowhere on the path; before anything runs.
    """
    from .workloads import RUNNER_KINDS, AttemptRunner, SiteRunner, attempt_runner
    from .workloads._names import require_importable

    try:  # a module off the path, answered before any server or child starts (and without torch)
        if sites is None:  # else found in each arm's worktree or interpreter (_check_workload)
            require_importable(workload, child=supervised)
    except ValueError as exc:
        raise InputError(f"{exc}; nothing was run or logged") from None
    if not supervised:
        return None, False
    if isinstance(runner, AttemptRunner):
        return runner, False
    if runner not in RUNNER_KINDS:
        raise InputError(f"runner must be one of {list(RUNNER_KINDS)} or an AttemptRunner, got {runner!r}")
    try:
        if sites is None and not lockstep:
            return attempt_runner(runner, workload=workload), True
        placed = (None, None) if sites is None else (sites.of("baseline"), sites.of("candidate"))
        return SiteRunner(runner, workload, site_of=(lambda conditions: None) if sites is None else sites.site_of,
                          sites=placed, lockstep=lockstep), True
    except ValueError as exc:
        raise InputError(str(exc)) from None


@contextlib.contextmanager
def _runner_scope(runner: Any, workload: str, supervised: bool, *, lockstep: bool = False):
    """:func:`_runner_for` as a ``with`` block: a runner the block made is closed when it ends."""
    active, owned = _runner_for(runner, workload, supervised, lockstep=lockstep)
    try:
        yield active
    finally:
        if owned:
            active.close()


def _preload_for_decision() -> None:
    """Import now what the comparison needs between and after its attempts.

    MLflow's database store (a SQLite or other database URI: its module, with SQLAlchemy and
    alembic, took a second to import here, and the first write pays it: the diagnosis's run in
    the main job), ``scipy.stats`` (each attempt's p10 is computed as it is written, between
    attempts: in the process that runs them when unsupervised) and matplotlib (the decision's
    plots). Called while a fork runner's server warms up, the imports cost the comparison no
    time of its own on a machine with a core to spare; nothing is opened or written.
    """
    import mlflow

    from .rules._stats import preload_step_quantile
    from .tracking._report import preload_plotting
    from .tracking._store import _DATABASES, store_scheme

    if store_scheme(mlflow.get_tracking_uri()) in _DATABASES:
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    preload_step_quantile()
    preload_plotting()


def _ready_store_while_warming(workload: str, runner: Any, timeout_s: float, *, arms: dict | None = None,
                               labels: dict | None = None) -> None:
    """What a comparison or a pipeline does while the fork runner's server warms up, then the workload's check.

    This process imports what it needs later (mlflow, the statistics, the plots) and makes a new
    SQLite store's tables on a side file (``tracking/_prepare``): no attempt runs yet, so nothing
    measured shares the machine with them. The side file becomes the store only once the
    workload is found good; refused, it goes, and nothing was written.

    Raises:
        InputError: see :func:`_check_workload`.
    """
    import mlflow

    from .tracking._prepare import prepare_new_store

    prepared = prepare_new_store(mlflow.get_tracking_uri())
    try:
        _preload_for_decision()
        if arms is None:
            _check_workload(workload, runner, timeout_s)
        else:
            for arm, conditions in arms.items():
                _check_workload(workload, runner.runner_at(conditions), timeout_s,
                                where=f"the {arm}'s {labels[arm]}")
    except BaseException:
        if prepared is not None:
            prepared.discard()
        raise
    if prepared is not None:
        prepared.commit()


def _check_workload(workload: str, runner: Any, timeout_s: float, where: str | None = None) -> None:
    """Refuse a workload whose name does not resolve, found where its code may run.

    Supervised, in one of the runner's children (the fork runner's server imports the module
    under supervision; the spawn runner starts a child for it): the module's code never runs
    here. In-process (``runner`` is ``None``) the attempts run it here anyway. An import that
    crashes, hangs or raises otherwise is not refused: each attempt then fails, saying why.

    Raises:
        InputError: no such module, an ``ImportError`` in it, or no such factory.
    """
    note = None
    try:
        if runner is None:
            from .workloads import resolve_workload  # imports torch: in-process attempts run here anyway

            resolve_workload(workload)
        else:
            note = runner.check(workload, timeout_s=timeout_s)
    except ValueError as exc:
        raise InputError(f"{where + ': ' if where else ''}{exc}; nothing was run or logged") from None
    if note:
        print(f"warning: workload {workload!r} failed to import in a child{' (' + where + ')' if where else ''} "
              f"({note.splitlines()[0]}); its attempts will fail", file=sys.stderr)


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


# --- Issue 14, point 3: a compute hotspot proposes bf16 only where the device computes it natively.

def candidate_change_for(synthesis: dict, baseline: dict) -> dict | None:
    """The single change a hypothesis calls for (documented in docs/explanation/decisions.md).

    The same answer as :func:`candidate_change_and_reason`, without the reason.
    """
    return candidate_change_and_reason(synthesis, baseline)[0]


def candidate_change_and_reason(synthesis: dict, baseline: dict) -> tuple[dict | None, str]:
    """The single change a hypothesis calls for, and why, from this table (first row that holds):

    ==========================================  ==============================  =====================
    hypothesis (``primary_signal``, hotspot)    when                            proposed change
    ==========================================  ==============================  =====================
    memory pressure (``memory``)                ``checkpoint`` is off           ``checkpoint=true``
    memory pressure                             ``checkpoint`` is on            none
    ``dataloader`` hotspot                      always                          ``num_workers`` =
                                                                                max(2, 2 x current)
    compute hotspot (``forward``,               ``dtype`` is not fp32           none
    ``backward``, ``optimizer``)
    compute hotspot                             bf16 is native on the           ``dtype=bf16``
                                                baseline's ``device``
                                                (:func:`~mlflow_perfgate.
                                                workloads.native_bf16`)
    compute hotspot                             the baseline declares no        ``dtype=bf16``
                                                ``device`` (not checked)
    compute hotspot                             bf16 is emulated there          none
    anything else                                                               none
    ==========================================  ==============================  =====================

    Emulated bf16 is no candidate: on CPUs without AVX-512 BF16 or AMX a step under bf16
    autocast ran 1.9 to 3.1 times slower (TinyLM, GPT-2), so a comparison would only confirm
    the slowdown. The answer is none, and the reason says what to do instead.

    Returns:
        ``(change, reason)``: ``change`` is ``{variable: value}`` or ``None``; ``reason`` says in
        words why this change, or why none.
    """
    from .tracking import canonical_value

    signal = synthesis.get("primary_signal")
    if signal == "memory":
        if canonical_value(baseline.get("checkpoint", False)) == "false":
            return {"checkpoint": True}, "memory pressure: activation checkpointing trades compute for memory"
        return None, "memory pressure, and activation checkpointing is already on"
    hotspot = synthesis.get("hotspot")
    if signal == "time" and hotspot == "dataloader":
        current = int(baseline.get("num_workers", 0) or 0)
        return {"num_workers": max(2, 2 * current)}, "dataloader hotspot: more DataLoader workers"
    if signal == "time" and hotspot in ("forward", "backward", "optimizer"):
        dtype = canonical_value(baseline.get("dtype", "fp32"))
        if dtype != "fp32":
            return None, f"{hotspot} hotspot, and dtype is already {dtype}"
        device = baseline.get("device")
        if device is None:
            return {"dtype": "bf16"}, f"{hotspot} hotspot: bf16 (the baseline declares no device to check)"
        from .workloads import native_bf16

        native, why = native_bf16(str(device).strip().lower())
        if native:
            return {"dtype": "bf16"}, f"{hotspot} hotspot: bf16, native here ({why})"
        return None, (f"{hotspot} hotspot, but bf16 would be slower here ({why}); "
                      "look at the profile's top operators, or compare on hardware with native bf16")
    return None, "no strong signal: collect more evidence"


def compare_command(workload: str, plan: dict, attempts: int | None, experiment_name: str | None,
                    objective: str) -> str:
    """The exact ``mlflow-perfgate compare`` command that tests a plan (``attempts=None``: its defaults')."""
    variable = plan["changed_variable"]
    parts = ["mlflow-perfgate", "compare", "--workload", workload]
    from .tracking import canonical_value

    for key, value in plan["baseline"].items():
        if key in (variable, "repeats"):
            continue
        parts += ["--set", f"{key}={_cli_value(canonical_value(value))}"]
    parts += ["--change", f"{variable}={_cli_value(canonical_value(plan['candidate'][variable]))}",
              *(() if attempts is None else ("--attempts", str(attempts))), "--objective", objective]
    if experiment_name:
        parts += ["--experiment", experiment_name]
    return shlex.join(parts)


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
    from .tracking import canonical_value
    from .tracking._environment import fingerprint
    from .workloads._attempt import DEFAULT_STEPS, DEFAULT_WARMUP

    conditions = {key: value for key, value in base.items() if key not in ("repeats", "revision")}
    conditions.setdefault("warmup", DEFAULT_WARMUP)
    conditions.setdefault("steps", DEFAULT_STEPS)
    env = fingerprint({"gpu_name": _gpu_name(base)})
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
    from .tracking import canonical_value
    from .workloads._attempt import DEFAULT_STEPS, DEFAULT_WARMUP

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
    from .rules._calibration import MAX_AUTO_ROUNDS, MAX_ROUNDS, age_text
    from .rules._calibration import auto_rounds as plan_rounds
    from .tracking._calibration import latest_calibration

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


@contextlib.contextmanager
def _stderr_into(path: str):
    """Send this process's file descriptor 2 into ``path`` for the block.

    ``torch.profiler`` (Kineto, in C++) writes its own lines (``profiler_start``,
    ``profiler_stop``, warnings) straight to the descriptor, past ``sys.stderr``: only a
    descriptor-level redirect keeps them off the user's terminal. The file is kept as an artifact.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def diagnose(
    workload: str,
    conditions: dict,
    *,
    attempts: int | None = None,
    capacity_mib: float | None = None,
    experiment_name: str | None = None,
    steps: int = 5,
    profile: bool = True,
    capacity_alert_ratio: float = 0.90,
    hotspot_alert_share_pct: float = 40.0,
    parent_run_id: str | None = None,
    supervised: bool = True,
    timeout_s: float = 300.0,
    threads: int | None = None,
    runner: Any = None,
) -> dict:
    """Evidence -> hypothesis -> single-variable plan, logged as a diagnosis run.

    Checks the fixed conditions first (:func:`require_fixed_conditions`), then collects the
    evidence supervised, as an attempt runs (``workloads.run_diagnosis``: a spawned, contained
    child under ``timeout_s`` and ``threads``, whose output, the profiler's included, stays off
    the terminal): it builds the workload, runs the correctness probe, times its
    non-overlapping stages (time evidence), estimates or measures its memory (memory evidence)
    and profiles a few steps (operator table and trace). Then ``synthesize_evidence`` and
    ``design_single_variable_experiment`` with the change :func:`candidate_change_and_reason`
    draws from the hypothesis. The diagnosis run starts when the diagnosis starts and ends when
    it is logged.

    Args:
        attempts: the attempts per arm the proposed comparison runs (its command's
            ``--attempts``; ``None``: the comparison's defaults decide, :func:`configure`).
        capacity_mib: the memory budget of the target device, MiB; ``None`` (or 0) for this
            machine's (the GPU's memory, or the RAM on the CPU).
        supervised: collect in a child process (the default); ``False`` collects here.
        timeout_s: wall-clock limit of the collection (supervised), seconds.
        threads: torch threads during the collection (default: the current count).
        runner: supervised, what starts the collecting child: ``None`` (default) or ``spawn``, a
            fresh interpreter; an ``AttemptRunner`` the caller owns (a fork runner's warm server
            forks the child: :func:`pipeline` shares its comparison's runner this way); ``fork``
            or ``auto``, a fork runner made for this diagnosis alone and closed after it (its
            server's start costs what a spawned child's does).

    Returns:
        ``{"bundle", "synthesis", "plan", "objective", "change_reason", "diagnosis_run_id",
        "diagnosis_run_url", "command"}``.

    Raises:
        InputError: missing fixed conditions, or a workload name that does not resolve (nothing
            is logged).
        WorkloadFailed: the workload crashed, hung, exited or raised while its evidence was
            collected; a FAILED diagnosis run says why (``run_id``).
    """
    started_ms = int(time.time() * 1000)
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer, got {attempts!r}")
    base = with_declared_conditions(
        workload, _base_conditions(workload, conditions, RECOMMENDED["attempts"] if attempts is None else attempts))
    require_fixed_conditions(base)
    from .errors import WorkloadFailed

    tmp = tempfile.mkdtemp(prefix="perfgate-diagnose-")
    try:
        # collected here, the profiler's own lines would reach the terminal: they go to a file instead
        quiet = contextlib.nullcontext() if supervised else _stderr_into(os.path.join(tmp, "profiler.log"))
        # None: the spawn runner's child, as before runners existed
        with _runner_scope("spawn" if runner is None else runner, workload, supervised) as active:
            from .tracking import log_diagnosis, log_failed_diagnosis, run_url  # mlflow, while a server warms up
            from .workloads import run_diagnosis

            try:
                with quiet:
                    evidence = run_diagnosis(workload, base, out_dir=tmp, steps=steps,
                                             capacity_mib=capacity_mib or None, profile=profile, threads=threads,
                                             timeout_s=timeout_s, supervised=supervised, runner=active)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        if not evidence.ok:
            run_id = log_failed_diagnosis(evidence.failure, evidence.failure_detail, base,
                                          experiment_name=experiment_name, workload=workload,
                                          parent_run_id=parent_run_id)
            raise WorkloadFailed(f"diagnosis failed: {evidence.failure}, while the workload's evidence was collected "
                                 f"(FAILED diagnosis run {run_id})", run_id=run_id)
        bundle, files = evidence.bundle, evidence.files
        synthesis = rules.synthesize_evidence(bundle, capacity_alert_ratio=capacity_alert_ratio,
                                              hotspot_alert_share_pct=hotspot_alert_share_pct)
        change, change_reason = candidate_change_and_reason(synthesis, base)
        try:
            plan = rules.design_single_variable_experiment(synthesis, base, change)
        except KeyError as exc:  # the specification's word for missing fixed conditions
            raise InputError(str(exc.args[0])) from None
        objective = rules.objective_for_signal(synthesis.get("primary_signal", "none"))
        run_id = log_diagnosis(bundle, synthesis, plan, experiment_name=experiment_name, files=files,
                               objective=objective, workload=workload, parent_run_id=parent_run_id,
                               start_time=started_ms, change_reason=change_reason)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    command = compare_command(workload, plan, attempts, experiment_name, objective) \
        if plan["action"] == "run_comparison" else None
    return {"bundle": bundle, "synthesis": synthesis, "plan": plan, "objective": objective,
            "change_reason": change_reason, "diagnosis_run_id": run_id, "diagnosis_run_url": run_url(run_id),
            "command": command}


def pipeline(
    workload: str,
    conditions: dict,
    *,
    attempts: int | None = None,
    capacity_mib: float | None = None,
    fallback_change: dict | None = None,
    experiment_name: str | None = None,
    steps: int = 5,
    progress: bool = True,
    supervised: bool = True,
    timeout_s: float = 300.0,
    runner: Any = "auto",
    interleave: str | None = None,
    threads: int | None = None,
    **evaluate_kwargs: Any,
) -> dict:
    """The main job: diagnose, compare the plan's single change under the diagnosis's objective, decide.

    The comparison's configuration is :func:`compare`'s: what is left out (``attempts``,
    ``interleave``, ``threads``, ``method``, ``latency``, the measured ``steps`` among the
    conditions) is the recommended one, or falls back where it does not apply (the memory
    objective the diagnosis often chooses is judged by the specification's rule). The diagnosis
    collects its evidence over ``steps`` steps on ``threads`` (default 1, as the comparison's).

    When the diagnosis finds no strong signal (or is blocked by correctness), the comparison
    tests ``fallback_change`` on latency instead, and says so; without a fallback it stops after
    the diagnosis. Under ``mlflow run`` (``MLFLOW_RUN_ID`` set) the diagnosis and the comparison
    nest under the project's run. ``runner`` and ``interleave`` are :func:`compare`'s; one runner
    serves the diagnosis and the comparison (with fork, one warm server forks the diagnosis's
    child and every attempt's: ``import torch`` is paid once, while this process imports mlflow).
    ``supervised``, ``timeout_s`` (the diagnosis's limit and each attempt's) and ``threads``
    apply to the diagnosis and to every attempt.

    Returns:
        ``{"diagnosis": ..., "decision": <evaluate_group's result or None>, "change": ...,
        "objective": ..., "fallback_used": bool}``.
    """
    if interleave is not None and interleave not in INTERLEAVE_MODES:  # before the diagnosis; compare checks the rest
        raise InputError(f"interleave must be one of {list(INTERLEAVE_MODES)}, got {interleave!r}")
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise InputError(f"attempts must be a positive integer, got {attempts!r}")
    base = with_declared_conditions(workload, _base_conditions(workload, conditions, attempts or 1))
    require_fixed_conditions(base)  # before a server starts
    if workload != "tinylm":  # what the factory declares, read once for the diagnosis and the comparison
        conditions = {key: value for key, value in base.items() if key != "repeats"}
    evidence_threads = RECOMMENDED["threads"] if threads is None else threads  # the comparison's default too
    # One runner for the diagnosis and the comparison: with fork, one warm server forks the
    # diagnosis's child and every attempt's, and it warms up while this process imports mlflow.
    with _runner_scope(runner, workload, supervised, lockstep=interleave in LOCKSTEP_MODES) as active:
        _ready_store_while_warming(workload, active, timeout_s)  # a new store's tables, during the warm-up
        parent = os.environ.get("MLFLOW_RUN_ID") or None
        chosen_objective = evaluate_kwargs.pop("objective", None)
        report = diagnose(workload, conditions, attempts=attempts, capacity_mib=capacity_mib,
                          experiment_name=experiment_name, steps=steps, parent_run_id=parent,
                          supervised=supervised, timeout_s=timeout_s, threads=evidence_threads, runner=active)
        plan = report["plan"]
        fallback_used = plan["action"] != "run_comparison"
        if fallback_used:
            if plan["action"] == "fix_correctness_first" or not fallback_change:
                return {"diagnosis": report, "decision": None, "change": None, "objective": None,
                        "fallback_used": False}
            change, objective = dict(fallback_change), chosen_objective or "latency"
        else:
            variable = plan["changed_variable"]
            change, objective = {variable: plan["candidate"][variable]}, chosen_objective or report["objective"]
        decision = compare(workload, conditions, change, attempts=attempts, experiment_name=experiment_name,
                           objective=objective, progress=progress, supervised=supervised, timeout_s=timeout_s,
                           hypothesis=report["synthesis"]["hypothesis"], parent_run_id=parent, runner=active,
                           interleave=interleave, threads=threads, **evaluate_kwargs)
        return {"diagnosis": report, "decision": decision, "change": change, "objective": objective,
                "fallback_used": fallback_used}
