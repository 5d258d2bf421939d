"""mlflow-perfgate: accept, reject or rerun a PyTorch performance change, with evidence kept in MLflow.

The public names are loaded lazily, so that ``import mlflow_perfgate.rules`` pulls in neither
mlflow nor torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "attempt": "mlflow_perfgate.tracking",
    "decisions": "mlflow_perfgate.tracking",
    "evaluate_group": "mlflow_perfgate.tracking",
    "log_attempt": "mlflow_perfgate.tracking",
    "rules": "mlflow_perfgate.rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mlflow_perfgate' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name == "rules" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
