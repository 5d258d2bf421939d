"""Every MLflow name the project writes or reads, and the canonical forms of values.

This module is the schema of DESIGN.md in code: tags, params and metrics of attempt, decision
and diagnosis runs. Nothing else in the project spells an MLflow key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

__all__ = [
    "ARMS",
    "KIND_ATTEMPT",
    "KIND_DECISION",
    "KIND_DIAGNOSIS",
    "KIND_COMPARISON",
    "TAG",
    "METRIC",
    "THRESHOLD_PARAMS",
    "MAX_PARAM_VALUE",
    "MAX_TAG_VALUE",
    "canonical_value",
    "canonical_conditions",
    "group_key",
]

ARMS = ("baseline", "candidate")
KIND_ATTEMPT = "attempt"
KIND_DECISION = "decision"
KIND_DIAGNOSIS = "diagnosis"
KIND_COMPARISON = "comparison"

# MLflow's own limits (mlflow.utils.validation); values beyond them are refused here, never
# truncated by MLflow.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY_LENGTH = 250
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000


class TAG:
    """Tag keys."""

    KIND = "perfgate.kind"
    GROUP = "perfgate.group"
    #: sha256 of the group name: a filter-safe key for group names MLflow's filter grammar
    #: cannot quote (both quote characters, backslashes, control characters).
    GROUP_KEY = "perfgate.group_key"
    ARM = "perfgate.arm"
    OK = "perfgate.ok"
    FAILURE = "perfgate.failure"
    ATTEMPT_ID = "perfgate.attempt_id"
    RUN_VALID = "perfgate.run_valid"
    ISSUES = "perfgate.issues"
    FIRST_FAILURE = "perfgate.first_failure"
    REPRODUCIBLE = "perfgate.reproducible"
    MEM_STATUS = "perfgate.mem_status"
    DECISION = "perfgate.decision"
    REASON = "perfgate.reason"
    FAILED_CHECKS = "perfgate.failed_checks"
    CHANGED_VARIABLE = "perfgate.changed_variable"
    OBJECTIVE = "perfgate.objective"
    WARNINGS = "perfgate.warnings"
    METHOD = "perfgate.method"
    MODE = "perfgate.mode"
    SEED_DECISION = "perfgate.seed_decision"
    ROBUST_DECISION = "perfgate.robust_decision"
    WORKLOAD = "perfgate.workload"
    FAILURE_DETAIL = "perfgate.failure_detail"
    STATUS = "perfgate.status"
    PRIMARY_SIGNAL = "perfgate.primary_signal"
    HYPOTHESIS = "perfgate.hypothesis"
    PLAN_ACTION = "perfgate.plan_action"
    #: "true" on a run created by ``compare``: the decision is written onto it.
    COMPARISON = "perfgate.comparison"
    #: prefix of the environment fingerprint's tags (``perfgate.env.<key>``)
    ENV_PREFIX = "perfgate.env."
    PARENT = "mlflow.parentRunId"
    NOTE = "mlflow.note.content"
    RUN_NAME = "mlflow.runName"


class METRIC:
    """Metric keys of an attempt run."""

    LATENCY = "latency_ms"
    QUALITY = "quality"
    STEP_TIME = "step_time_ms"
    PEAK_MEM = "peak_mem_mib"
    THROUGHPUT = "throughput_tok_s"


#: Threshold params of a decision run, named after the arguments of ``evaluate_regression``.
THRESHOLD_PARAMS = (
    "min_valid_runs",
    "min_improvement",
    "quality_tolerance",
    "maximum_failure_rate",
    "maximum_p95_ratio",
)

_SHAPE_STRING = re.compile(r"^\s*[\(\[]\s*(-?\d+\s*(,\s*-?\d+\s*)*,?\s*)?[\)\]]\s*$")
_BARE_SHAPE = re.compile(r"^\s*\d+\s*(?:(?:,\s*\d+\s*)+|(?:[xX]\s*\d+\s*)+)$")


def group_key(group: str) -> str:
    """A filter-safe key for a group name: the hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_value(value: Any, *, key: str = "value") -> str:
    """The one string an MLflow param holds for a condition value.

    Booleans (and the strings ``true``/``false`` in any case) become ``true`` / ``false``;
    tuples, lists and strings such as ``"(4, 128)"``, ``"[4,128]"``, ``"4,128"`` or ``"4x128"``
    become ``"[4, 128]"``;
    finite numbers their ``repr``; dicts sorted JSON. So ``(4, 128)`` and ``[4, 128]``, or
    ``True`` and ``"true"``, give the same param and never look like a changed variable.

    Raises:
        ValueError: a number (at any depth) is NaN or infinite.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"condition {key!r} must be finite, got {value!r}")
        return repr(value)
    if isinstance(value, str):
        if value.strip().lower() in ("true", "false"):
            return value.strip().lower()
        if _SHAPE_STRING.match(value):
            inner = value.strip()[1:-1]
            return json.dumps([int(part) for part in inner.split(",") if part.strip()])
        if _BARE_SHAPE.match(value):  # "4,128" or "4x128", as typed on a command line
            return json.dumps([int(part) for part in re.split(r"[,xX]", value)])
        return value
    if isinstance(value, (list, tuple)):
        return json.dumps([_json_ready(item, key) for item in value])
    if isinstance(value, dict):
        return json.dumps({str(k): _json_ready(v, key) for k, v in value.items()}, sort_keys=True)
    # numpy scalars and other numbers
    if hasattr(value, "item"):
        return canonical_value(value.item(), key=key)
    return str(value)


def _json_ready(value: Any, key: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"condition {key!r} must hold only finite numbers, got {value!r}")
    if isinstance(value, (list, tuple)):
        return [_json_ready(item, key) for item in value]
    if isinstance(value, dict):
        return {str(k): _json_ready(v, key) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return _json_ready(value.item(), key)
    return str(value)


def canonical_conditions(conditions: dict) -> dict[str, str]:
    """Canonical param strings for every condition (see :func:`canonical_value`)."""
    if not isinstance(conditions, dict):
        raise ValueError(f"conditions must be a dict, got {type(conditions).__name__}")
    return {str(key): canonical_value(value, key=str(key)) for key, value in conditions.items()}
