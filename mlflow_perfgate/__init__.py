"""mlflow-perfgate: accept, reject or rerun a PyTorch performance change, with evidence kept in MLflow.

The public names are loaded lazily, so that ``import mlflow_perfgate.rules`` pulls in neither
mlflow nor torch.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "ArmSummary": "mlflow_perfgate.rules",
    "Check": "mlflow_perfgate.rules",
    "Decision": "mlflow_perfgate.rules",
    "Deciding": "mlflow_perfgate.rules",
    "Figure": "mlflow_perfgate.rules",
    "Method": "mlflow_perfgate.rules",
    "Objective": "mlflow_perfgate.rules",
    "PerfgateError": "mlflow_perfgate.errors",
    "Policy": "mlflow_perfgate.rules",
    "Setting": "mlflow_perfgate.rules",
    "attempt": "mlflow_perfgate.tracking",
    "decision_markdown": "mlflow_perfgate.tracking",
    "decisions": "mlflow_perfgate.tracking",
    "errors": "mlflow_perfgate.errors",
    "evaluate_group": "mlflow_perfgate.tracking",
    "judge": "mlflow_perfgate.rules",
    "log_attempt": "mlflow_perfgate.tracking",
    "read_report": "mlflow_perfgate.tracking",
    "register_method": "mlflow_perfgate.rules",
    "register_objective": "mlflow_perfgate.rules",
    "rules": "mlflow_perfgate.rules",
    "unregister_method": "mlflow_perfgate.rules",
    "unregister_objective": "mlflow_perfgate.rules",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
