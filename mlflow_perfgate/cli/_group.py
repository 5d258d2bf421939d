"""The ``mlflow-perfgate`` command group; each command module adds its commands to it."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="mlflow-perfgate")
def cli():
    """Accept, reject or rerun a PyTorch performance change, with the evidence in MLflow.

    Tracking goes to MLFLOW_TRACKING_URI (default: MLflow's local sqlite:///mlflow.db).
    Exit codes of evaluate and compare: 0 accept, 1 reject, 2 usage or input error, 3 rerun,
    4 blocked by correctness.
    """
