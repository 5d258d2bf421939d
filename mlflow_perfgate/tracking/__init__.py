"""The tracking layer: the only place that talks to MLflow.

Names load on first use: ``mlflow_perfgate.tracking._inputs`` (the checks of an attempt's
input) can then run before mlflow is imported, which the command line relies on to answer bad
input at once.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "AttemptDeferred": "_attempts",
    "abandon": "_maintenance",
    "AttemptRecorder": "_attempts",
    "StartedAttempt": "_attempts",
    "DEFAULT_STALE_AFTER_S": "_evaluate",
    "METRIC": "_schema",
    "TAG": "_schema",
    "attempt": "_attempts",
    "canonical_value": "_schema",
    "check_attempt": "_inputs",
    "decision_columns": "_queries",
    "decision_markdown": "_report",
    "decision_summary": "_report",
    "decisions": "_queries",
    "end_run": "_runs",
    "evaluate_group": "_evaluate",
    "forget": "_maintenance",
    "group_state": "_runs",
    "start_attempt": "_attempts",
    "log_attempt": "_attempts",
    "log_checked": "_attempts",
    "log_diagnosis": "_runs",
    "parse_duration": "_maintenance",
    "read_decision": "_report",
    "read_report": "_report",
    "reap": "_maintenance",
    "run_url": "_runs",
    "start_comparison": "_runs",
    "sync": "_maintenance",
    "tag_run": "_runs",
}

__all__ = sorted([*_EXPORTS, "DECISION_COLUMNS"])


def __getattr__(name: str):
    if name == "DECISION_COLUMNS":
        # the columns follow the registries: a method or objective registered later adds its figures
        return __getattr__("decision_columns")()
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mlflow_perfgate.tracking' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
