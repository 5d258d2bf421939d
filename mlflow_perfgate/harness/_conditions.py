"""What a comparison fixes and what it varies.

The default and declared conditions, the single-variable check (one key changed, every other
fixed), which interleavings a change allows (what must share one process), and the checks made
from the first attempts: the change reached the workload, and the quality gate can fail.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .. import rules
from ..errors import InputError, SingleVariableError


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
    from ..workloads import AttemptRunner

    if supervised and isinstance(runner, AttemptRunner) and \
            type(runner).run_interleaved is AttemptRunner.run_interleaved:
        return (f"interleave='steps' needs a runner that runs step-interleaved pairs; "
                f"{type(runner).__name__} does not", "")
    return None


def _lockstep_refusal(supervised: bool, runner: Any) -> str | None:
    """Why this comparison cannot run lockstep rounds (one child per arm), or ``None``."""
    from ..workloads import AttemptRunner, SiteRunner

    if not supervised:
        return "lockstep rounds run each arm in a child process of its own, and --in-process runs none"
    if isinstance(runner, AttemptRunner) and not isinstance(runner, SiteRunner):
        return (f"lockstep rounds need two children at once, one per arm: give a runner kind (auto, fork, spawn) or "
                f"a SiteRunner, not a {type(runner).__name__}")
    return None


def check_interleave(interleave: Any, variable: str, base: dict, objective: str, supervised: bool,
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


def base_conditions(workload: str, conditions: dict, attempts: int) -> dict:
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
    from ..tracking import canonical_value

    try:
        parsed = json.loads(canonical_value(value))
    except ValueError:
        return None
    return parsed if isinstance(parsed, list) and all(isinstance(v, int) for v in parsed) else None


def reads_declaration(workload: str, base: dict, change: Any = None) -> bool:
    """Whether :func:`with_declared_conditions` reads ``workload``'s declaration (a factory of your own,
    whose arms run here)."""
    from ..sites import SITE_CONDITIONS

    if workload == "tinylm" or workload.startswith("mlflow_perfgate."):  # ours declare nothing
        return False
    return not any(arm.get(name) not in (None, "") for arm in (base, change if isinstance(change, dict) else {})
                   for name in SITE_CONDITIONS)


def with_declared_conditions(workload: str, base: dict, change: Any = None, runner: Any = None) -> dict:
    """``base`` with the conditions its factory declares (``factory.perfgate_conditions``,
    ``workloads._declared``: the fixed ones, and the baseline value of a knob such as ``hidden``)
    where no ``--set`` gives them.

    Read for every workload of your own whose arms run here (a ``revision`` or ``python`` condition
    places each arm's code elsewhere: there they are given with ``--set``), in a child process:
    ``runner``'s (a fork runner's warm server forks it: the module's own imports), else a fresh
    interpreter (about a second and a half: torch's imports too). A given condition that disagrees with the
    declared one is refused, naming both values (numbers compared as numbers: ``02`` is 2); the
    changed variable keeps its two values (the declaration is the baseline's, as a ``--set`` is).

    A module whose import fails, crashes or exits while it is read stops nothing when every
    condition is given (each attempt's child meets the failure and fails, counted in the failure
    rate, as it would without a declaration).

    Raises:
        InputError: the declaration is malformed, or it cannot be read and a condition is missing, or
            a ``--set`` disagrees with it.
    """
    from ..rules import FIXED_CONDITIONS
    from ..tracking import canonical_value
    from ..workloads import ATTRIBUTE, DeclarationUnreadable, declared_conditions

    if not reads_declaration(workload, base, change):
        return base
    try:
        declared = declared_conditions(workload, runner=runner)
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
    from ..rules import FIXED_CONDITIONS

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
    from ..workloads import parse_int

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
    from ..rules import FIXED_CONDITIONS

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
    from ..tracking import canonical_value

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


def validated_change(base: dict, change: dict, hypothesis: str) -> tuple[str, Any]:
    """The change checked by the specification's single-variable design."""
    if not isinstance(change, dict) or len(change) != 1:
        raise SingleVariableError(f"--change must name exactly one variable, got {sorted(map(str, change or {}))}")
    from ..tracking import canonical_value

    evidence = {"status": "ready_for_experiment", "hypothesis": hypothesis}
    variable, value = next(iter(change.items()))
    if variable in ("revision", "python") and base.get(variable) in (None, ""):
        example = "main" if variable == "revision" else "/path/to/other/venv/bin/python"
        raise SingleVariableError(f"the changed variable {variable!r} needs the baseline's {variable} too: give it "
                                  f"with --set {variable}=... (for example --set {variable}={example}), and the "
                                  f"candidate's with --change {variable}=...")
    if variable in base and canonical_value(base[variable]) == canonical_value(value):
        raise SingleVariableError(f"the candidate must really change {variable!r}; both are {canonical_value(value)!r}")
    try:
        plan = rules.design_single_variable_experiment(evidence, base, {variable: value})
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from None
    except ValueError as exc:
        raise SingleVariableError(str(exc)) from None
    return plan["changed_variable"], value
