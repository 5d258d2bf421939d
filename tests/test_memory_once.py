"""A comparison's CPU memory estimate, made once per arm where nothing judges it (issue 26, point 3)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.harness import compare
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.workloads import run_attempt, run_interleaved

TINY = {"input_shape": "2,16", "warmup": 1, "steps": 2}


def _attempt_runs(result):
    client = MlflowClient()
    runs = [client.get_run(a["run_id"]) for a in sorted(result["attempts"], key=lambda a: a["start_time"])]
    return [(run.data.tags[TAG.ARM], run.data.tags[TAG.ATTEMPT_ID], run.data.tags.get(TAG.MEM_ESTIMATE_FROM),
             run.data.metrics.get("peak_mem_mib"), run.data.tags.get(TAG.MEM_STATUS)) for run in runs]


@pytest.mark.parametrize("interleave", ["attempts", "steps"])
def test_later_attempts_carry_their_arm_s_first_estimate(sqlite_uri, interleave):
    result = compare("tinylm", TINY, {"checkpoint": True}, attempts=3, min_valid_runs=3, progress=False,
                     interleave=interleave, allow_undecidable=True, runner="fork")
    runs = _attempt_runs(result)
    for arm in ("baseline", "candidate"):
        mine = [run for run in runs if run[0] == arm]
        first, later = mine[0], mine[1:]
        assert first[2] is None and first[3] > 0 and first[4] == "estimated"  # estimated by the attempt itself
        if interleave == "steps":  # the second round's child was begun beside the first round's tail, before
            second, later = later[0], later[1:]  # its estimates were logged: it made its own, the same figure
            assert second[2] is None and second[3] == first[3] and second[4] == "estimated"
        assert later
        for run in later:  # carried: the first attempt named, its figure, its status
            assert run[2] == first[1] and run[3] == first[3] and run[4] == "estimated"


def test_the_memory_objective_estimates_every_attempt(sqlite_uri):
    result = compare("tinylm", TINY, {"checkpoint": True}, attempts=3, min_valid_runs=3, progress=False,
                     objective="memory", allow_undecidable=True, supervised=False)
    runs = _attempt_runs(result)
    assert all(run[2] is None and run[3] > 0 for run in runs)


def test_an_attempt_told_not_to_estimate_has_no_record():
    skipped = run_attempt("tinylm", TINY, supervised=False, memory=False)
    assert skipped.ok and skipped.memory is None and skipped.peak_mem_mib is None and skipped.mem_status is None
    made = run_attempt("tinylm", TINY, supervised=False)
    assert made.memory["status"] == "estimated" and made.peak_mem_mib > 0
    pair = run_interleaved("tinylm", TINY, {**TINY, "checkpoint": True}, supervised=True, runner="spawn",
                           memory=False)
    assert all(r.ok and r.memory is None and r.peak_mem_mib is None for r in pair)
    # the probe still runs per attempt
    assert all(r.validity is not None for r in pair) and skipped.validity is not None
