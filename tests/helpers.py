"""Small builders shared by the tracking tests."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

CONDITIONS = {
    "model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
    "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False,
}
CANDIDATE = {**CONDITIONS, "checkpoint": True}
BASELINE_MS = (100, 102, 99, 101, 100)
CANDIDATE_MS = (88, 90, 89, 91, 87)


def log_series(group, baseline_ms=BASELINE_MS, candidate_ms=CANDIDATE_MS, *, quality=(0.9, 0.895),
               conditions=CONDITIONS, candidate=CANDIDATE, **kwargs):
    """Log the specification's example series; returns the run ids."""
    import mlflow_perfgate as pg

    ids = [pg.log_attempt(group, "baseline", conditions, latency_ms=v, quality=quality[0], **kwargs)
           for v in baseline_ms]
    ids += [pg.log_attempt(group, "candidate", candidate, latency_ms=v, quality=quality[1], **kwargs)
            for v in candidate_ms]
    return ids


def all_runs(experiment_name=None):
    client = MlflowClient()
    if experiment_name is None:
        import os

        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if experiment_name:
        experiment = client.get_experiment_by_name(experiment_name)
        if experiment is None:
            return []
        ids = [experiment.experiment_id]
    else:
        ids = ["0"]
    return client.search_runs(ids, max_results=50000)


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (Linux: ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
