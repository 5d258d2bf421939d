"""The tracking layer: the only place that talks to MLflow."""

from ._attempts import AttemptDeferred, AttemptRecorder, attempt, log_attempt
from ._evaluate import DEFAULT_STALE_AFTER_S, evaluate_group
from ._maintenance import parse_duration, reap, sync
from ._queries import decision_columns, decisions
from ._report import decision_markdown, read_decision, read_report
from ._runs import end_run, log_diagnosis, start_comparison
from ._schema import METRIC, TAG, canonical_value

__all__ = sorted([
    "AttemptDeferred",
    "AttemptRecorder",
    "DECISION_COLUMNS",
    "DEFAULT_STALE_AFTER_S",
    "METRIC",
    "TAG",
    "attempt",
    "canonical_value",
    "decision_columns",
    "decision_markdown",
    "decisions",
    "end_run",
    "evaluate_group",
    "log_attempt",
    "log_diagnosis",
    "parse_duration",
    "read_decision",
    "read_report",
    "reap",
    "start_comparison",
    "sync",
])


def __getattr__(name: str):
    # The columns follow the registries: a method or objective registered later adds its figures.
    if name == "DECISION_COLUMNS":
        return decision_columns()
    raise AttributeError(f"module 'mlflow_perfgate.tracking' has no attribute {name!r}")
