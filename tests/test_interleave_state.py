"""Step interleaving only where it is valid: each arm's process-wide torch state is its own.

Both arms of a step-interleaved comparison share one process. Each arm's state after its factory
(threads, default dtype, ...) is re-applied before each of its steps and recorded per arm; state
that cannot be switched per step (an environment variable OpenMP reads at start-up), or a
condition the workload declares per-process, refuses ``--interleave steps`` and points to
``--interleave attempts``.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.errors import InputError
from mlflow_perfgate.harness import compare
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.workloads import run_interleaved

STATEFUL = "tests.workloads_fixtures.shapes:stateful"
FIXED = {"model": "Stateful", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
         "measurement_method": "wall_ms", "warmup": 1, "steps": 6}


def test_each_arm_steps_with_the_threads_and_dtype_its_factory_set():
    """Reproduced from the report: arms at 2 and 1 threads both ran on 1 and both recorded 2."""
    a, b = run_interleaved(STATEFUL, {**FIXED, "threads_set": 2, "dtype_set": "float64"},
                           {**FIXED, "threads_set": 1, "dtype_set": "float32"}, supervised=False, threads=2)
    assert a.ok and b.ok, (a.failure, b.failure)
    assert (a.quality, b.quality) == (12.0, 1.0)  # every step of each arm saw its own threads and dtype
    assert (a.torch_threads, b.torch_threads) == (2, 1)  # measured, not the pinned count
    assert a.torch_state["intra_op_threads"] == 2 and b.torch_state["intra_op_threads"] == 1
    assert (a.torch_state["default_dtype"], b.torch_state["default_dtype"]) == ("float64", "float32")


def test_the_arms_state_is_recorded_on_their_runs(sqlite_uri):
    result = compare(STATEFUL, {**FIXED, "threads_set": 2}, {"threads_set": 1}, attempts=2, progress=False,
                     min_valid_runs=2, interleave="steps", threads=2, env_mismatch="warn", method="seed")
    seen = {}
    for attempt in result["attempts"]:
        tags = MlflowClient().get_run(attempt["run_id"]).data.tags
        seen.setdefault(attempt["arm"], set()).add(json.loads(tags[TAG.TORCH_STATE])["intra_op_threads"])
        assert tags["perfgate.env.torch_threads"] == ("2" if attempt["arm"] == "baseline" else "1")
    assert seen == {"baseline": {2}, "candidate": {1}}


@pytest.mark.parametrize("change, named", [({"env_set": "PASSIVE"}, "env:OMP_WAIT_POLICY"),
                                           ({"mode": "b"}, "condition 'mode', which the workload declares")])
def test_state_that_cannot_be_switched_per_step_refuses_step_interleaving(sqlite_uri, change, named):
    base = {**FIXED, "env_set": "ACTIVE", "mode": "a", "declare": "true"}
    with pytest.raises(InputError, match="--interleave attempts") as refused:
        compare(STATEFUL, base, change, attempts=2, progress=False, min_valid_runs=2, interleave="steps",
                method="seed")
    assert named in str(refused.value)
    # whole attempts, one process each: the same comparison runs
    result = compare(STATEFUL, base, change, attempts=2, progress=False, min_valid_runs=2, interleave="attempts",
                     env_mismatch="warn", method="seed")
    assert result["candidate"]["valid_runs"] == 2
