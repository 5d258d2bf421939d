"""Blame goes to the arm that failed: a round's shared child that dies in one arm's code fails that arm's
attempt, and the other arm's attempt of the round is withdrawn, never failed (real children, real signals)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate import harness
from mlflow_perfgate.tracking import TAG

HOSTILE = "tests.workloads_fixtures.lockstep_hostile:make"
FINE = {"mode": "fine", "step_ms": 1.0, "warmup": 1, "steps": 6}


@pytest.mark.parametrize("mode, failure", [("kill", "killed by signal SIGKILL"), ("segv", "killed by signal SIGSEGV"),
                                           ("exit", "exited with code 3")])
@pytest.mark.parametrize("leading", [0, 1])
def test_the_arm_whose_step_killed_the_shared_child_fails_and_the_other_is_withdrawn(fork_runner, mode, failure,
                                                                                    leading):
    hostile = {**FINE, "mode": mode, "fail_at": 3}
    pair = (hostile, FINE) if leading == 0 else (FINE, hostile)
    results = fork_runner.run_interleaved(HOSTILE, *pair, threads=1, timeout_s=60)
    bad, good = results if leading == 0 else results[::-1]
    assert not bad.ok and not bad.withdrawn and bad.failure == failure, (bad.failure, bad.failure_detail)
    assert "ended in this arm's measured step" in bad.failure_detail
    assert good.withdrawn and not good.ok
    assert good.failure.startswith(f"withdrawn: the round's shared child ended ({failure}) in the other arm's "
                                   "measured step")


def test_a_shared_child_that_hangs_in_one_arm_s_step_times_that_arm_out(fork_runner):
    good, bad = fork_runner.run_interleaved(HOSTILE, FINE, {**FINE, "mode": "hang", "fail_at": 2}, threads=1,
                                            timeout_s=3)
    assert bad.failure.startswith("timeout after 3") and not bad.withdrawn
    assert good.withdrawn


def test_a_child_killed_in_a_factory_blames_that_arm(fork_runner):
    class_of = {**FINE, "mode": "kill", "fail_at": 0}  # its first call: the warm-up's first step
    good, bad = fork_runner.run_interleaved(HOSTILE, FINE, class_of, threads=1, timeout_s=60)
    assert bad.failure == "killed by signal SIGKILL" and "warm-up" in bad.failure_detail
    assert good.withdrawn and "in the other arm's warm-up" in good.failure


@pytest.mark.slow
def test_a_comparison_whose_candidate_kills_its_rounds_leaves_every_baseline_attempt_clean(sqlite_uri):
    """The gauntlet's case: every baseline attempt is withdrawn (excluded), never a failure of the baseline."""
    fixed = {"model": "m", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
             "measurement_method": "wall_ms", **FINE, "fail_at": 3}
    result = harness.compare(HOSTILE, fixed, {"mode": "segv"}, attempts=4, progress=False, allow_undecidable=True,
                             experiment_name="blame")
    assert result["decision"] == "reject" and result["reason"] == "unreliable_candidate", result["reason"]
    assert result["baseline"]["attempted_runs"] == 0  # every baseline attempt withdrawn: none counted, none failed
    client = MlflowClient()
    experiment = client.get_experiment_by_name("blame").experiment_id
    baseline = client.search_runs([experiment], f"tags.\"{TAG.ARM}\" = 'baseline'")
    assert len(baseline) == 4
    for run in baseline:
        assert run.data.tags[TAG.EXCLUDED] == "true" and run.info.status == "KILLED"
        assert "in the other arm's measured step" in run.data.tags[TAG.EXCLUDED_REASON]
    candidate = client.search_runs([experiment], f"tags.\"{TAG.ARM}\" = 'candidate'")
    assert {run.data.tags[TAG.FAILURE] for run in candidate} == {"killed by signal SIGSEGV"}
