"""Single-variable experiment design (section Q4 of the specification)."""

from __future__ import annotations

import difflib
from typing import Any

from ._errors import RuleTypeError, typed_inputs

__all__ = ["design_single_variable_experiment", "changed_keys", "FIXED_CONDITIONS", "IMMUTABLE_CONDITIONS"]

#: The conditions every baseline must declare.
FIXED_CONDITIONS = frozenset(
    {"model", "input_shape", "batch_size", "dtype", "device", "repeats", "measurement_method"}
)
#: Conditions a comparison may never change: it would no longer compare the same workload.
IMMUTABLE_CONDITIONS = frozenset({"model", "input_shape", "device", "repeats", "measurement_method"})


def _plan(evidence: dict, baseline: dict, *, action: str, metrics: list, candidate=None,
          changed_variable=None, fixed_conditions=None) -> dict:
    return {
        "action": action,
        "hypothesis": evidence["hypothesis"],
        "baseline": dict(baseline),
        "candidate": candidate,
        "changed_variable": changed_variable,
        "fixed_conditions": dict(baseline) if fixed_conditions is None else fixed_conditions,
        "metrics": metrics,
        "evidence_level": "teaching_proxy",
    }


@typed_inputs
def design_single_variable_experiment(
    evidence: dict, baseline: dict, candidate_change: dict | None = None
) -> dict:
    """Fix the baseline's conditions and check that the candidate changes exactly one of them.

    Args:
        evidence: the result of :func:`synthesize_evidence` (``status`` and ``hypothesis``).
        baseline: the fixed conditions; must declare ``model``, ``input_shape``, ``batch_size``,
            ``dtype``, ``device``, ``repeats`` and ``measurement_method``.
        candidate_change: ``{variable: new_value}`` with exactly one entry.

    Returns:
        A plan whose ``action`` is ``fix_correctness_first`` (evidence blocked by correctness),
        ``collect_more_evidence`` (evidence not ready, or no change given) or
        ``run_comparison``, with ``baseline``, ``candidate``, ``changed_variable``,
        ``fixed_conditions`` (the baseline less the changed variable) and the ``metrics`` that
        judge it.

    Raises:
        KeyError: the baseline misses a fixed condition, or the evidence misses ``status`` or
            ``hypothesis``.
        ValueError: the change does not name exactly one variable, names one the baseline does
            not declare or one that may not change (model, input_shape, device, repeats,
            measurement_method), or does not change its value.
    """
    try:
        missing = sorted(FIXED_CONDITIONS - set(baseline))
    except TypeError:
        raise RuleTypeError(f"baseline must be a dict, got {type(baseline).__name__}") from None
    if missing:
        raise KeyError(f"baseline is missing fixed conditions: {missing}")
    if evidence["status"] == "blocked_by_correctness":
        return _plan(evidence, baseline, action="fix_correctness_first",
                     metrics=["run_valid", "issues", "first_failure"])
    if evidence["status"] != "ready_for_experiment" or not candidate_change:
        return _plan(evidence, baseline, action="collect_more_evidence",
                     metrics=["latency_ms", "throughput_tok_s"])
    if len(candidate_change) != 1:
        raise ValueError(
            f"candidate_change must change exactly one variable, got {sorted(map(str, candidate_change))}"
        )
    changed_variable, changed_value = next(iter(candidate_change.items()))
    if changed_variable not in baseline:
        close = difflib.get_close_matches(str(changed_variable), sorted(map(str, baseline)), n=1)
        raise ValueError(
            f"the changed variable {changed_variable!r} must be declared in the baseline"
            f"{f' (did you mean {close[0]!r}?)' if close else ''} (one of {sorted(map(str, baseline))})"
        )
    if changed_variable in IMMUTABLE_CONDITIONS:
        raise ValueError(
            f"{changed_variable!r} is fixed for a comparison; the changed variable may not be one of "
            f"{sorted(IMMUTABLE_CONDITIONS)}"
        )
    if baseline[changed_variable] == changed_value:
        raise ValueError(
            f"the candidate must really change {changed_variable!r}; both are {changed_value!r}"
        )
    candidate = {**baseline, changed_variable: changed_value}
    return _plan(
        evidence, baseline, action="run_comparison",
        metrics=["latency_ms", "throughput_tok_s", "quality", "resource_cost"],
        candidate=candidate, changed_variable=changed_variable,
        fixed_conditions={key: value for key, value in baseline.items() if key != changed_variable},
    )


@typed_inputs
def changed_keys(plan: dict) -> list:
    """The configuration keys whose values differ between a plan's baseline and candidate.

    Args:
        plan: a dict with ``baseline`` and ``candidate`` (``None`` when there is no candidate).

    Returns:
        The sorted differing keys; a key present on one side only counts as changed (unless its
        value there is ``None``). ``[]`` when ``candidate`` is ``None``.
    """
    if plan["candidate"] is None:
        return []
    baseline: Any = plan["baseline"]
    candidate: Any = plan["candidate"]
    keys = set(baseline) | set(candidate)
    return sorted(key for key in keys if baseline.get(key) != candidate.get(key))
