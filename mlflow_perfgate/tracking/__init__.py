"""The tracking layer: the only place that talks to MLflow."""

from ._attempts import AttemptRecorder, attempt, log_attempt
from ._evaluate import DEFAULT_STALE_AFTER_S, evaluate_group
from ._queries import DECISION_COLUMNS, decisions
from ._schema import METRIC, TAG, canonical_value

__all__ = sorted([
    "AttemptRecorder",
    "DECISION_COLUMNS",
    "DEFAULT_STALE_AFTER_S",
    "METRIC",
    "TAG",
    "attempt",
    "canonical_value",
    "decisions",
    "evaluate_group",
    "log_attempt",
])
