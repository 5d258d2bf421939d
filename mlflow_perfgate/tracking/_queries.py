"""Decision queries: decision runs as a pandas DataFrame."""

from __future__ import annotations

import pandas as pd

from . import _client
from ._evaluate import group_filter
from ._schema import KIND_DECISION, TAG

__all__ = ["decisions", "DECISION_COLUMNS"]

_FIGURES = [
    "baseline_median_ms", "candidate_median_ms", "baseline_p95_ms", "candidate_p95_ms",
    "baseline_failure_rate", "candidate_failure_rate", "baseline_quality", "candidate_quality",
    "baseline_valid_runs", "candidate_valid_runs", "baseline_attempted_runs", "candidate_attempted_runs",
    "baseline_noise", "required_improvement", "observed_improvement",
    "baseline_median_peak_mem_mib", "candidate_median_peak_mem_mib", "memory_reduction", "latency_cost",
    "baseline_median_throughput_tok_s", "candidate_median_throughput_tok_s",
    "p_value", "ratio_estimate", "ratio_ci_low", "ratio_ci_high", "recommended_attempts",
]
DECISION_COLUMNS = [
    "group", "decision", "reason", "failed_checks", "objective", "method", "mode", "changed_variable",
    "baseline_value", "candidate_value", *_FIGURES, "run_id", "experiment_id", "start_time",
]


def decisions(experiment_name: str | None = None, group: str | None = None) -> pd.DataFrame:
    """One row per decision run, newest first.

    Args:
        experiment_name: default ``MLFLOW_EXPERIMENT_NAME`` or MLflow's Default experiment.
        group: only this comparison's decisions.

    Returns:
        A DataFrame with :data:`DECISION_COLUMNS` (``failed_checks`` a list; figures as floats,
        NaN where the decision has none); empty, with those columns, when there is none.
    """
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    if group is None:
        filter_string = f"tags.\"{TAG.KIND}\" = '{KIND_DECISION}'"
    else:
        if not isinstance(group, str) or not group:
            raise ValueError(f"group must be a non-empty string, got {group!r}")
        filter_string = group_filter(group)
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string,
                              order_by=["attributes.start_time DESC"])
    rows = []
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        if tags.get(TAG.KIND) != KIND_DECISION or TAG.DECISION not in tags:
            continue
        if group is not None and tags.get(TAG.GROUP) != group:
            continue
        rows.append({
            "group": tags.get(TAG.GROUP),
            "decision": tags[TAG.DECISION],
            "reason": tags.get(TAG.REASON),
            "failed_checks": [c for c in tags.get(TAG.FAILED_CHECKS, "").split(",") if c],
            "objective": tags.get(TAG.OBJECTIVE, "latency"),
            "method": tags.get(TAG.METHOD, "seed"),
            "mode": tags.get(TAG.MODE, "improvement"),
            "changed_variable": params.get("changed_variable") or None,
            "baseline_value": params.get("baseline_value") or None,
            "candidate_value": params.get("candidate_value") or None,
            **{name: metrics.get(name, float("nan")) for name in _FIGURES},
            "run_id": run.info.run_id,
            "experiment_id": run.info.experiment_id,
            "start_time": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC"),
        })
    frame = pd.DataFrame(rows, columns=DECISION_COLUMNS)
    return frame.astype({name: "float64" for name in _FIGURES})


def read_report(run_id: str) -> str:
    """The ``report.md`` artifact of a decision run."""
    import os
    import tempfile
    from pathlib import Path

    from ._report import ARTIFACT_DIR

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow_client = _client.client()
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow_client.download_artifacts(run_id, f"{ARTIFACT_DIR}/report.md", tmp)
        return Path(path).read_text(encoding="utf-8")
