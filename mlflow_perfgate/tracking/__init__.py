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

#: What the product's other layers import from this package: its face, not its public API (``__all__``);
#: names load on first use, as the public ones do.
_PRODUCT = {
    "DATABASE_SCHEMES": "_store",
    "UI_ADDRESS": "_schema",
    "analyze": "_history",
    "benchmark_lines": "_history",
    "change_point_line": "_history",
    "claim_rounds": "_runs",
    "current_store": "_client",
    "decisions_frame": "_sqlite_decisions",
    "default_uri": "_sqlite_decisions",
    "ensure_reachable": "_probe",
    "fingerprint": "_environment",
    "fit": "_schema",
    "journal_path": "_journal",
    "judge_entries": "_suite",
    "latest_calibration": "_calibration",
    "load_benchmarks": "_history",
    "log_calibration": "_calibration",
    "log_series": "_attempts",
    "mlflow_decision_records": "_queries",
    "pending": "_journal",
    "policy_text": "_runs",
    "preload_plotting": "_report",
    "prepare_new_store": "_prepare",
    "read_only": "_store",
    "reason_text": "_report",
    "redact_text": "_redact",
    "require_writable_store": "_store",
    "retrying": "_client",
    "scheme_problem": "_store",
    "short_error": "_client",
    "start_suite": "_suite",
    "store_scheme": "_store",
}

__all__ = sorted([*_EXPORTS, "DECISION_COLUMNS"])


_NAMES = {name: f".{module}" for name, module in {**_EXPORTS, **_PRODUCT}.items()}
_load, __dir__ = lazy_exports(__name__, _NAMES, globals())


def __getattr__(name: str):
    if name == "DECISION_COLUMNS":
        # the columns follow the registries: a method or objective registered later adds its figures
        return _load("decision_columns")()
    return _load(name)
