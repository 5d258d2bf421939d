"""The tracking layer: the only place that talks to MLflow."""

from ._attempts import AttemptDeferred, AttemptRecorder, attempt, log_attempt
from ._maintenance import parse_duration, reap, sync
from ._evaluate import DEFAULT_STALE_AFTER_S, evaluate_group
from ._queries import DECISION_COLUMNS, decisions
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
    "decisions",
    "end_run",
    "evaluate_group",
    "log_diagnosis",
    "log_attempt",
    "parse_duration",
    "reap",
    "start_comparison",
    "sync",
])
