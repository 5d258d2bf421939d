"""Decision runs as a DataFrame, from plain records: no MLflow import here.

:func:`frame_of` turns decision runs (:class:`RunRecord`, whatever read them) into the frame of
``tracking.decisions``. Two readers feed it: MLflow's client (every store) and
``_sqlite_decisions`` (a local SQLite store read directly, which is what lets
``mlflow-perfgate decisions`` answer on a store of 1,000 decisions without importing MLflow).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..errors import InputError
from ..rules import METHODS, OBJECTIVES, REASONS
from ._schema import ARMS, HEADLINE_DECIDING, HEADLINE_METRICS, KIND_DECISION, KIND_SUITE, PARAM, TAG, arm_metric

__all__ = ["ARM_FIGURES", "DECISION_KINDS", "RunRecord", "SUITE_COLUMNS", "arm_figure_names", "check_decision_filters",
           "decision_columns", "figure_names", "frame_of"]

#: The per-arm figures every decision run logs, as ``<arm>_<figure>`` metrics.
ARM_FIGURES = ("median_ms", "p95_ms", "failure_rate", "quality", "valid_runs", "failed_runs", "attempted_runs",
               "contended_runs")

_LABELS = ["group", "decision", "reason", "failed_checks", "reason_text", "objective", "method", "mode", "latency",
           "p_value_method", "changed_variable", "baseline_value", "candidate_value", "suite", "suite_entry",
           "suite_decision"]


@dataclass(frozen=True)
class RunRecord:
    """What the frame needs of one run: its ids, start (ms since the epoch), tags, params and latest metrics."""

    run_id: str
    experiment_id: str
    start_time: int
    tags: dict
    params: dict
    metrics: dict


def arm_figure_names() -> list[str]:
    names = list(ARM_FIGURES)
    for name in OBJECTIVES:
        names += [figure.name for figure in OBJECTIVES[name].arm_figures]
    return list(dict.fromkeys(names))


def figure_names() -> list[str]:
    """Every metric a decision run may hold, in a stable order: the headline (the deciding method's
    figures), arm figures, objectives', methods' (each with its method's prefix)."""
    names = [*HEADLINE_METRICS, *(arm_metric(arm, key) for key in arm_figure_names() for arm in ARMS)]
    for name in OBJECTIVES:
        names += [figure.metric_name for figure in OBJECTIVES[name].figures]
    for name in METHODS:
        names += [figure.metric_name for figure in METHODS[name].figures if figure.metric_name]
    names.append("recommended_attempts")
    return list(dict.fromkeys(names))


def decision_columns() -> list[str]:
    """The columns of ``decisions``: labels, every figure the registries declare, then the run's ids."""
    return [*_LABELS, *figure_names(), "run_id", "experiment_id", "start_time"]


#: On a decision run of an earlier release (no ``TAG.HEADLINE``): the robust method's figures were
#: logged without a prefix, whichever method decided.
_EARLIER_ROBUST = {"p_value": "robust_p_value", "ratio_estimate": "robust_ratio_estimate",
                   "ratio_ci_low": "robust_ratio_ci_low", "ratio_ci_high": "robust_ratio_ci_high",
                   "p95_p_value": "robust_p95_p_value"}


def _earlier_metrics(tags: dict, metrics: dict) -> dict:
    """An earlier release's decision run's metrics under this release's names: its unprefixed robust
    figures under the robust prefix, and the headline from the method that decided (the paired
    method's ``paired_*``, the robust ones, the seed's ratio of medians; a plugin's: none)."""
    found = {name: value for name, value in metrics.items() if name not in _EARLIER_ROBUST}
    for old, new in _EARLIER_ROBUST.items():
        if old in metrics:
            found.setdefault(new, metrics[old])
    method = tags.get(TAG.METHOD, "seed")
    if method in ("robust", "paired"):
        prefix = f"{method}_"
        for name in ("p_value", "ratio_estimate", "ratio_ci_low", "ratio_ci_high"):
            if prefix + name in found:
                found[name] = found[prefix + name]
    elif method == "seed" and "observed_improvement" in metrics:
        found["ratio_estimate"] = 1 - metrics["observed_improvement"]
    if "ratio_estimate" in found:
        found["improvement"] = 1 - found["ratio_estimate"]
    if "required_improvement" in metrics:
        found["boundary"] = 1 - metrics["required_improvement"]
    return found


def _row(run: RunRecord, figures: list[str]) -> dict:
    tags, params, metrics = run.tags, run.params, run.metrics
    earlier = tags.get(TAG.HEADLINE) != HEADLINE_DECIDING
    if earlier:
        metrics = _earlier_metrics(tags, metrics)
    return {
        "group": tags.get(TAG.GROUP),
        "decision": tags[TAG.DECISION],
        "reason": tags.get(TAG.REASON),
        "failed_checks": [c for c in tags.get(TAG.FAILED_CHECKS, "").split(",") if c],
        # decisions written before the reason in words was kept: the reason's one line
        "reason_text": tags.get(TAG.REASON_TEXT) or REASONS.get(tags.get(TAG.REASON), tags.get(TAG.REASON)),
        "objective": tags.get(TAG.OBJECTIVE, "latency"),
        "method": tags.get(TAG.METHOD, "seed"),
        "mode": tags.get(TAG.MODE, "improvement"),
        # the latency figure judged (raw, uncontended, fastest, p10); decisions written before the
        # option existed judged the raw one
        "latency": tags.get(TAG.LATENCY, "raw"),
        # the test behind the deciding method's p-value ("Wilcoxon signed-rank (exact)", "Mann-Whitney U");
        # an earlier release named only the paired method's ("exact", "normal approximation")
        "p_value_method": params.get(PARAM.of("p_value_method")) if earlier else params.get(PARAM.TEST),
        # the first release wrote these params without the perfgate. namespace
        "changed_variable": params.get(PARAM.CHANGED_VARIABLE) or params.get("changed_variable") or None,
        "baseline_value": params.get(PARAM.BASELINE_VALUE) or params.get("baseline_value") or None,
        "candidate_value": params.get(PARAM.CANDIDATE_VALUE) or params.get("candidate_value") or None,
        "suite": tags.get(TAG.SUITE), "suite_entry": tags.get(TAG.SUITE_ENTRY),
        "suite_decision": tags.get(TAG.SUITE_DECISION),
        **{name: metrics.get(name, float("nan")) for name in figures},
        "run_id": run.run_id,
        "experiment_id": run.experiment_id,
        "start_time": pd.Timestamp(run.start_time, unit="ms", tz="UTC"),
    }


#: What ``decisions(kind=...)`` reads, by kind: a comparison's decision runs, or suite runs.
DECISION_KINDS = {"decision": KIND_DECISION, "suite": KIND_SUITE}
#: The columns of ``decisions(kind="suite")``: one row per decided suite run.
SUITE_COLUMNS = ["suite", "decision", "reason", "entries", "entries_accept", "entries_reject", "entries_rerun",
                 "entries_blocked_by_correctness", "tests", "alpha", "control", "tail_share", "run_id",
                 "experiment_id", "start_time"]
_SUITE_FLOATS = ["entries", "entries_accept", "entries_reject", "entries_rerun", "entries_blocked_by_correctness",
                 "tests", "alpha", "tail_share"]


def check_decision_filters(group: str | None, suite: str | None, kind: str = "decision") -> None:
    """``group`` and ``suite``, where given, must be non-empty strings; ``kind`` one of :data:`DECISION_KINDS`
    (a suite run has no group)."""
    if kind not in DECISION_KINDS:
        raise InputError(f"kind must be one of {list(DECISION_KINDS)}, got {kind!r}")
    if suite is not None and (not isinstance(suite, str) or not suite):
        raise InputError(f"suite must be a non-empty string, got {suite!r}")
    if group is not None and (not isinstance(group, str) or not group):
        raise InputError(f"group must be a non-empty string, got {group!r}")
    if group is not None and kind == "suite":
        raise InputError("a group selects a comparison's decisions, and a suite run has none: select a suite by "
                         "its name (--suite NAME, suite=NAME), or a group's decisions (--kind decision)")


def _suite_row(run: RunRecord) -> dict:
    tags, params, metrics = run.tags, run.params, run.metrics
    alpha = params.get(PARAM.of("alpha"))
    share = params.get(PARAM.of("tail_share"))
    return {"suite": tags.get(TAG.SUITE), "decision": tags[TAG.DECISION], "reason": tags.get(TAG.REASON),
            **{name: metrics.get(name, float("nan")) for name in _SUITE_FLOATS if name not in ("alpha", "tail_share")},
            "alpha": float(alpha) if alpha is not None else float("nan"), "control": params.get(PARAM.of("control")),
            "tail_share": float(share) if share is not None else float("nan"),
            "run_id": run.run_id, "experiment_id": run.experiment_id,
            "start_time": pd.Timestamp(run.start_time, unit="ms", tz="UTC")}


def frame_of(runs, group: str | None = None, suite: str | None = None, kind: str = "decision") -> pd.DataFrame:
    """The decisions frame of ``runs`` (newest first, as given): decision runs only, of ``group``
    and ``suite`` where given; every figure column present (NaN where a decision has none). With
    ``kind="suite"``: the decided suite runs (of ``suite`` where given), :data:`SUITE_COLUMNS`."""
    if kind == "suite":
        rows = [_suite_row(run) for run in runs
                if run.tags.get(TAG.KIND) == KIND_SUITE and TAG.DECISION in run.tags
                and (suite is None or run.tags.get(TAG.SUITE) == suite)]
        frame = pd.DataFrame(rows, columns=SUITE_COLUMNS)
        return frame.astype({**{name: "float64" for name in _SUITE_FLOATS}, "start_time": "datetime64[ns, UTC]"})
    figures = figure_names()
    rows = [_row(run, figures) for run in runs
            if run.tags.get(TAG.KIND) == KIND_DECISION and TAG.DECISION in run.tags
            and (group is None or run.tags.get(TAG.GROUP) == group)
            and (suite is None or run.tags.get(TAG.SUITE) == suite)]
    frame = pd.DataFrame(rows, columns=decision_columns())
    # the same dtypes whether or not any decision was found (an empty frame's are object)
    return frame.astype({**{name: "float64" for name in figures}, "start_time": "datetime64[ns, UTC]"})
