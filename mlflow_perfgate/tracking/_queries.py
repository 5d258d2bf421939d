"""Decision queries: decision runs as a pandas DataFrame."""

from __future__ import annotations

import pandas as pd

from ..rules._errors import InputError
from ..rules._records import REASONS
from . import _client
from ._decision_run import figure_names
from ._group import _quoted_filter, group_filter, load
from ._schema import KIND_DECISION, PARAM, TAG

__all__ = ["attempts_since", "decision_columns", "decisions"]

_LABELS = ["group", "decision", "reason", "failed_checks", "reason_text", "objective", "method", "mode", "latency",
           "p_value_method", "changed_variable", "baseline_value", "candidate_value", "suite", "suite_entry",
           "suite_decision"]


def suite_filter(suite: str) -> str:
    """The filter of the decision runs a suite judged last (its name quoted where MLflow's parser reads it back)."""
    text = _quoted_filter([(TAG.KIND, KIND_DECISION), (TAG.SUITE, suite)])
    return text if text is not None else f"tags.\"{TAG.KIND}\" = '{KIND_DECISION}'"  # compared in full below


def decision_columns() -> list[str]:
    """The columns of :func:`decisions`: labels, every figure the registries declare, then the run's ids."""
    return [*_LABELS, *figure_names(), "run_id", "experiment_id", "start_time"]


def decisions(experiment_name: str | None = None, group: str | None = None, suite: str | None = None) -> pd.DataFrame:
    """One row per decision run, newest first.

    Args:
        experiment_name: default ``MLFLOW_EXPERIMENT_NAME`` or MLflow's Default experiment.
        group: only this comparison's decisions.
        suite: only the decisions of this suite's entries (those the suite judged last carry its
            name: ``suite``, with ``suite_entry`` and ``suite_decision``, the entry's verdict within
            the suite).

    Returns:
        A DataFrame with :func:`decision_columns` (``failed_checks`` a list; ``reason_text`` the
        reason in words, each failed check with its message; ``p_value_method`` the test behind
        the deciding method's p-value where the method names it, the paired method's ``"exact"``
        or ``"t-test on the log ratios (...)"``, else ``None``; figures as floats, NaN where the
        decision has none); empty, with those columns, when there is none.
    """
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    if suite is not None and (not isinstance(suite, str) or not suite):
        raise InputError(f"suite must be a non-empty string, got {suite!r}")
    if group is None and suite is not None:
        filter_string = suite_filter(suite)
    elif group is None:
        filter_string = f"tags.\"{TAG.KIND}\" = '{KIND_DECISION}'"
    else:
        if not isinstance(group, str) or not group:
            raise InputError(f"group must be a non-empty string, got {group!r}")
        filter_string = group_filter(group)
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string,
                              order_by=["attributes.start_time DESC"])
    figures = figure_names()
    rows = []
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        if tags.get(TAG.KIND) != KIND_DECISION or TAG.DECISION not in tags:
            continue
        if group is not None and tags.get(TAG.GROUP) != group:
            continue
        if suite is not None and tags.get(TAG.SUITE) != suite:
            continue
        rows.append({
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
            # the test behind the deciding method's p-value where it names one (paired: "exact", "t-test on ...")
            "p_value_method": params.get(PARAM.of("p_value_method")),
            # the first release wrote these params without the perfgate. namespace
            "changed_variable": params.get(PARAM.CHANGED_VARIABLE) or params.get("changed_variable") or None,
            "baseline_value": params.get(PARAM.BASELINE_VALUE) or params.get("baseline_value") or None,
            "candidate_value": params.get(PARAM.CANDIDATE_VALUE) or params.get("candidate_value") or None,
            "suite": tags.get(TAG.SUITE), "suite_entry": tags.get(TAG.SUITE_ENTRY),
            "suite_decision": tags.get(TAG.SUITE_DECISION),
            **{name: metrics.get(name, float("nan")) for name in figures},
            "run_id": run.info.run_id,
            "experiment_id": run.info.experiment_id,
            "start_time": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC"),
        })
    frame = pd.DataFrame(rows, columns=decision_columns())
    # the same dtypes whether or not any decision was found (an empty frame's are object)
    return frame.astype({**{name: "float64" for name in figures}, "start_time": "datetime64[ns, UTC]"})



def attempts_since(decision_run_id: str, group: str, experiment_name: str | None = None) -> dict:
    """What a group holds that its decision did not judge: attempts newer than the decision.

    An attempt is newer when it started after the decision was written (the decision run's end,
    or its start while it runs), or when the group holds more attempts than the decision judged
    (``perfgate.attempts_judged``).

    Returns:
        ``judged`` (how many the decision judged, ``None`` when it does not say), ``held`` (how
        many the group holds now), ``newer`` (the run ids of the newer attempts, oldest first)
        and ``running`` (how many of those are still running).
    """
    mlflow_client = _client.client()
    run = _client.retrying(lambda: mlflow_client.get_run(decision_run_id))
    experiment_id = run.info.experiment_id
    found = load(group, experiment_id, mlflow_client, stale_after_s=float("inf"))
    attempts = [view for view in found.attempts if not view.deleted]
    written = run.info.end_time or run.info.start_time or 0
    newer = [view for view in attempts if view.start_time > written]
    try:
        judged = int(run.data.tags[TAG.ATTEMPTS_JUDGED])
    except (KeyError, ValueError):
        judged = None
    if not newer and judged is not None and len(attempts) > judged:
        newer = attempts[judged:]  # oldest first: the ones beyond those judged
    return {"judged": judged, "held": len(attempts), "newer": [view.run_id for view in newer],
            "running": sum(1 for view in newer if view.state == "running")}
