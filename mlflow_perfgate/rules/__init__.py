"""The rules of the specification and the decisions built on them: pure functions and records.

This package is the one place where a number becomes a verdict. It imports neither mlflow nor
torch, so it runs (and is tested) anywhere, and the tracking and workload layers build on it.

``__all__`` holds the specification's eight functions and the rule functions of the first
release (their plain-dict contract). The records and registries of a decision (``Policy``,
``ArmSummary``, ``Check``, ``Decision``, ``Method``, ``Objective``, ``Figure``, ``Setting``,
``judge``, ``register_method``, ``register_objective``) are importable from here too and are
exported at the top level, ``mlflow_perfgate``; the errors live in ``mlflow_perfgate.errors``.

Names load on first use, so that ``from mlflow_perfgate.rules import Policy`` (the command
line's fast path) imports no statistics library.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_SPEC_AND_RULES = {
    "DEFAULT_THRESHOLDS": "_policy",
    "METHODS": "_registry",
    "MODES": "_policy",
    "OBJECTIVES": "_registry",
    "RuleTypeError": "_errors",
    "changed_keys": "_experiment",
    "decide": "_decide",
    "design_single_variable_experiment": "_experiment",
    "evaluate_objective": "_objectives",
    "evaluate_regression": "_regression",
    "evaluate_robust": "_robust",
    "evaluate_seed_non_regression": "_regression",
    "explain_checks": "_explain",
    "flag_contention": "_stats",
    "hodges_lehmann_ratio": "_stats",
    "objective_for_signal": "_objectives",
    "percentile": "_regression",
    "recommended_attempts": "_stats",
    "sequential_alpha": "_sequential",
    "sequential_thresholds": "_sequential",
    "summarize_repeated_runs": "_regression",
    "synthesize_evidence": "_evidence",
    "top_hotspots": "_evidence",
    "validate_validity_report": "_evidence",
}
#: The records and registries (exported at the top level, ``mlflow_perfgate``).
_RECORDS = {
    "ArmSummary": "_records",
    "BisectStep": "_history",
    "ChangePoint": "_history",
    "HISTORY_SETTINGS": "_history",
    "RevisionSample": "_history",
    "bisect_next": "_history",
    "find_change_points": "_history",
    "permutation_floor": "_history",
    "revision_samples": "_history",
    "Check": "_records",
    "EntryEvidence": "_suite",
    "SuiteDecision": "_suite",
    "SuiteEntry": "_suite",
    "adjusted_p_values": "_suite",
    "entry_evidence": "_suite",
    "look_adjusted_p": "_suite",
    "suite_gate": "_suite",
    "Decision": "_records",
    "Deciding": "_records",
    "Figure": "_registry",
    "Method": "_registry",
    "Objective": "_registry",
    "Policy": "_policy",
    "Setting": "_policy",
    "judge": "_decide",
    "register_method": "_registry",
    "register_objective": "_registry",
    "unregister_method": "_registry",
    "unregister_objective": "_registry",
}

#: What the product's other layers import from this package: its face, not its public API (``__all__``);
#: names load on first use, as the public ones do.
_PRODUCT = {
    "CALIBRATION_LATENCIES": "_calibration",
    "CONTROLS": "_suite",
    "DEFAULT_HORIZONS": "_calibration",
    "FIXED_CONDITIONS": "_experiment",
    "InputError": "_errors",
    "LABELS": "_history",
    "LATENCIES": "_policy",
    "LATENCY_KEYS": "_settings",
    "MAX_AUTO_ROUNDS": "_calibration",
    "MAX_ROUNDS": "_calibration",
    "POLICY_SETTINGS": "_policy",
    "REASONS": "_records",
    "STEP_FIGURES": "_policy",
    "SUITE_REASONS": "_suite",
    "SUITE_SETTINGS": "_suite",
    "TAIL_SHARE": "_suite",
    "TESTS": "_history",
    "VERDICTS": "_records",
    "age_text": "_calibration",
    "arm_figures": "_calibration",
    "auto_rounds": "_calibration",
    "change_text": "_records",
    "check_settings": "_policy",
    "check_unit_interval": "_errors",
    "detectable_effect": "_calibration",
    "headline": "_records",
    "interval_text": "_records",
    "methods_with_p_values": "_suite",
    "pct": "_records",
    "plain": "_records",
    "power_test": "_calibration",
    "preload_step_quantile": "_stats",
    "rounds_needed": "_calibration",
    "spreads": "_calibration",
    "step_figures": "_stats",
    "threshold_settings": "_registry",
    "to_python": "_scalars",
    "too_few_to_decide": "_statistical",
}

__all__ = sorted(_SPEC_AND_RULES)


_NAMES = {name: f".{module}" for name, module in {**_SPEC_AND_RULES, **_RECORDS, **_PRODUCT}.items()}
__getattr__, __dir__ = lazy_exports(__name__, _NAMES, globals())
