"""The tracking layer: the only place that talks to MLflow.

Names load on first use: ``mlflow_perfgate.tracking._inputs`` (the checks of an attempt's
input) can then run before mlflow is imported, which the command line relies on to answer bad
input at once.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "AttemptDeferred": "_attempts",
    "abandon": "_maintenance",
    "AttemptRecorder": "_attempts",
    "StartedAttempt": "_attempts",
    "SuiteItem": "_suite",
    "DEFAULT_STALE_AFTER_S": "_evaluate",
    "METRIC": "_schema",
    "TAG": "_schema",
    "attempt": "_attempts",
    "attempts_since": "_queries",
    "canonical_value": "_schema",
    "check_attempt": "_inputs",
    "decision_columns": "_queries",
    "decision_markdown": "_report",
    "decision_summary": "_report",
    "decisions": "_queries",
    "end_run": "_runs",
    "evaluate_group": "_evaluate",
    "evaluate_suite": "_suite",
    "forget": "_maintenance",
    "group_state": "_runs",
    "start_attempt": "_attempts",
    "log_attempt": "_attempts",
    "log_checked": "_attempts",
    "check_parent_runs": "_attempts",
    "log_diagnosis": "_runs",
    "log_failed_diagnosis": "_runs",
    "parse_duration": "_maintenance",
    "read_decision": "_report",
    "read_report": "_report",
    "read_suite": "_suite",
    "reap": "_maintenance",
    "run_url": "_runs",
    "start_comparison": "_runs",
    "suite_decisions": "_suite",
    "sync": "_maintenance",
    "tag_run": "_runs",
}

__all__ = sorted([*_EXPORTS, "DECISION_COLUMNS"])


_load, __dir__ = lazy_exports(__name__, {name: f".{module}" for name, module in _EXPORTS.items()}, globals())


def __getattr__(name: str):
    if name == "DECISION_COLUMNS":
        # the columns follow the registries: a method or objective registered later adds its figures
        return _load("decision_columns")()
    return _load(name)
