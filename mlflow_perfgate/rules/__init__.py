"""The rules of the specification: pure functions over plain dicts.

This package is the one place where a number becomes a verdict. It imports neither mlflow nor
torch, so it runs (and is tested) anywhere, and the tracking and workload layers build on it.
"""

from ._errors import RuleTypeError
from ._evidence import synthesize_evidence, top_hotspots, validate_validity_report
from ._decide import METHODS, decide
from ._explain import explain_checks
from ._objectives import OBJECTIVES, evaluate_objective, objective_for_signal
from ._experiment import changed_keys, design_single_variable_experiment
from ._robust import MODES, evaluate_robust, evaluate_seed_non_regression, flag_contention, hodges_lehmann_ratio, recommended_attempts
from ._sequential import sequential_alpha, sequential_thresholds
from ._regression import DEFAULT_THRESHOLDS, evaluate_regression, percentile, summarize_repeated_runs

__all__ = sorted([
    "DEFAULT_THRESHOLDS",
    "METHODS",
    "MODES",
    "OBJECTIVES",
    "RuleTypeError",
    "changed_keys",
    "decide",
    "design_single_variable_experiment",
    "evaluate_objective",
    "evaluate_regression",
    "evaluate_robust",
    "evaluate_seed_non_regression",
    "explain_checks",
    "flag_contention",
    "hodges_lehmann_ratio",
    "objective_for_signal",
    "percentile",
    "recommended_attempts",
    "sequential_alpha",
    "sequential_thresholds",
    "summarize_repeated_runs",
    "synthesize_evidence",
    "top_hotspots",
    "validate_validity_report",
])
