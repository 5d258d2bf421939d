"""The test's ``run_entry`` for the Ray dispatcher: one whole TinyLM comparison per entry, as the suite's would be.

Importable on the Ray nodes the tests start (their ``PYTHONPATH`` holds the repository).
"""

from __future__ import annotations

import os


def run_tinylm_entry(entry: dict) -> dict:
    """``harness.compare`` of the entry's change on its workload, in its group, against ``MLFLOW_TRACKING_URI``."""
    import ray

    from mlflow_perfgate.harness import compare

    result = compare(entry.get("workload", "tinylm"), entry["conditions"], entry["change"],
                     attempts=entry.get("attempts", 2), group=entry["group"],
                     experiment_name=entry.get("experiment_name"), objective=entry.get("objective"),
                     runner=entry.get("runner", "fork"), timeout_s=entry.get("attempt_timeout_s", 180.0),
                     interleave=entry.get("interleave"), progress=False, allow_undecidable=True)  # tiny entries: the dispatch is under test
    return {"decision": result["decision"], "reason": result["reason"],
            "comparison_run_id": result["comparison_run_id"],
            "assigned": ray.get_runtime_context().get_assigned_resources(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "tracking_uri": os.environ.get("MLFLOW_TRACKING_URI"),
            "journal_env": os.environ.get("XDG_STATE_HOME")}
