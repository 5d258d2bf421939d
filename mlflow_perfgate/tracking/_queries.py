"""Decision queries: decision runs as a pandas DataFrame."""

from __future__ import annotations

import pandas as pd

from . import _client
from ._decision_frame import RunRecord, decision_columns
from ._group import _quoted_filter, group_filter, load
from ._schema import KIND_DECISION, KIND_SUITE, TAG

__all__ = ["attempts_since", "decision_columns", "decisions"]


def suite_filter(suite: str) -> str:
    """The filter of the decision runs a suite judged last (its name quoted where MLflow's parser reads it back)."""
    text = _quoted_filter([(TAG.KIND, KIND_DECISION), (TAG.SUITE, suite)])
    return text if text is not None else f"tags.\"{TAG.KIND}\" = '{KIND_DECISION}'"  # compared in full below


def decisions(experiment_name: str | None = None, group: str | None = None, suite: str | None = None,
              kind: str = "decision") -> pd.DataFrame:
    """One row per decision run (``kind="suite"``: per decided suite run), newest first.

    Args:
        experiment_name: default ``MLFLOW_EXPERIMENT_NAME`` or MLflow's Default experiment.
        group: only this comparison's decisions.
        suite: only the decisions of this suite's entries (those the suite judged last carry its
            name: ``suite``, with ``suite_entry`` and ``suite_decision``, the entry's verdict within
            the suite); with ``kind="suite"``, only this suite's runs.
        kind: ``"decision"`` (a comparison's decision runs) or ``"suite"`` (the suite runs: one
            verdict over many entries).

    Returns:
        A DataFrame with :func:`decision_columns` (``failed_checks`` a list; ``reason_text`` the
        reason in words, each failed check with its message; the headline columns are the
        deciding method's (``rules.Deciding``): ``improvement`` (the share of the typical step saved,
        what users mean by faster), ``typical_step_ratio`` with ``typical_step_ci_low`` and
        ``typical_step_ci_high``, ``mean_step_ratio``, and the judged figure's ``ratio_estimate``,
        ``ratio_ci_low``, ``ratio_ci_high``, ``p_value``, ``boundary``, ``boundary_p_value``;
        every other method's figures carry its prefix (``robust_p_value``, ``paired_ratio_estimate``);
        ``p_value_method`` the test behind the headline ``p_value``; figures as floats, NaN where
        the decision has none); empty, with those columns, when there is none. With
        ``kind="suite"``: :data:`~._decision_frame.SUITE_COLUMNS` (the suite's verdict, reason,
        entries by verdict, tests, alpha, control).

    A local SQLite store is read directly (``_sqlite_decisions``: the same rows, in a fraction of
    the time); any other store, or one that reader cannot answer for, through MLflow's client.
    """
    import mlflow

    from ._sqlite_decisions import decisions_frame

    return decisions_frame(mlflow.get_tracking_uri(), experiment_name, group, suite, mlflow_decision_records, kind)


def mlflow_decision_records(experiment_name: str | None, group: str | None, suite: str | None,
                            kind: str = "decision") -> list[RunRecord]:
    """The decision runs (``kind="suite"``: the suite runs) of ``group`` / ``suite`` (checked by the
    caller), newest first, through MLflow's client (any store)."""
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    if kind == "suite":
        filter_string = f"tags.\"{TAG.KIND}\" = '{KIND_SUITE}'"  # the suite's name compared in full by the frame
    elif group is None and suite is not None:
        filter_string = suite_filter(suite)
    elif group is None:
        filter_string = f"tags.\"{TAG.KIND}\" = '{KIND_DECISION}'"
    else:
        filter_string = group_filter(group)
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string,
                              order_by=["attributes.start_time DESC"])
    return [RunRecord(run_id=run.info.run_id, experiment_id=run.info.experiment_id, start_time=run.info.start_time,
                      tags=run.data.tags, params=run.data.params, metrics=run.data.metrics) for run in runs]


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
