"""The rules of the specification: pure functions over plain dicts.

This package is the one place where a number becomes a verdict. It imports neither mlflow nor
torch, so it runs (and is tested) anywhere, and the tracking and workload layers build on it.
"""

from ._errors import RuleTypeError
from ._evidence import synthesize_evidence, top_hotspots, validate_validity_report
from ._explain import explain_checks
from ._experiment import changed_keys, design_single_variable_experiment
from ._regression import DEFAULT_THRESHOLDS, evaluate_regression, percentile, summarize_repeated_runs

__all__ = sorted([
    "DEFAULT_THRESHOLDS",
    "RuleTypeError",
    "changed_keys",
    "design_single_variable_experiment",
    "evaluate_regression",
    "explain_checks",
    "percentile",
    "summarize_repeated_runs",
    "synthesize_evidence",
    "top_hotspots",
    "validate_validity_report",
])
