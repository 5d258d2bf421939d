"""A rerun says what to do next in one line (issue 27): the command to run, or that the machine cannot resolve it."""

from __future__ import annotations

import shlex

import pytest

from mlflow_perfgate.tracking._report import RESOLVABLE_ATTEMPTS, decision_summary, next_step

TYPED = ["mlflow-perfgate", "compare", "--workload", "tinylm", "--change", "checkpoint=true", "--group", "g1",
         "--resume", "--attempts", "5", "--max-attempts=9", "--method", "paired"]


def _rerun(**more):
    return {"decision": "rerun", "reason": "inconclusive", "group": "g1", "messages": {}, **more}


def test_a_rerun_more_attempts_would_settle_gets_its_own_command_as_a_new_sequential_comparison():
    step = next_step(_rerun(recommended_attempts=23, mode="non_regression", margin=0.05), TYPED)
    said, _, command = step.partition(" 9 times in 10: ")
    assert said == "next: at the noise measured, 23 rounds settle 'no slower than 5%' for a change that does nothing"
    words = shlex.split(command)
    assert words == ["mlflow-perfgate", "compare", "--workload", "tinylm", "--change", "checkpoint=true",
                     "--attempts", "5", "--method", "paired", "--until-decisive", "--max-attempts", "23"]


def test_one_beyond_what_the_machine_resolves_says_so_and_which_margin_it_can():
    step = next_step(_rerun(recommended_attempts=RESOLVABLE_ATTEMPTS * 4, mode="non_regression", margin=0.05), TYPED)
    assert step.startswith("next: this machine cannot resolve 'no slower than 5%' at this noise: about 800 rounds")
    # 4 times the rounds resolve a bound twice as far: log(1.05) * 2
    assert f"in {RESOLVABLE_ATTEMPTS} rounds it resolves about no slower than 10%" in step
    assert "--until-decisive" not in step
    step = next_step(_rerun(recommended_attempts=RESOLVABLE_ATTEMPTS * 4, required_improvement=0.05), TYPED)
    assert "'at least 5% faster'" in step and "at least 10% faster" in step


def test_rounds_that_should_have_settled_a_change_that_does_nothing_say_it_sits_near_the_bound():
    result = _rerun(recommended_attempts=8, pairs=20, mode="non_regression", margin=0.05, step_tail_ok=None,
                    step_tail_ratio=1.071, no_regression_ok=True, ratio_estimate=1.01)
    step = next_step(result, TYPED)
    assert "8 rounds settle 'no slower than 5%'" in step and "these 20 did not" in step
    assert "the step tail 1.071" in step and "the judged ratio" not in step
    assert "--max-attempts" not in step  # no count that grows run after run


@pytest.mark.parametrize("reason, needle", [
    ("attempts_in_progress", "mlflow-perfgate evaluate --group g1"),
    ("attempts_not_synced", "mlflow-perfgate sync, then"),
    ("contention", "quieter machine"),
])
def test_reasons_that_more_attempts_do_not_settle(reason, needle):
    assert needle in next_step(_rerun(reason=reason, recommended_attempts=10), TYPED)


def test_no_next_step_for_a_verdict_and_a_generic_one_without_the_command():
    assert next_step({"decision": "accept", "reason": "declared_thresholds_checked"}) is None
    assert "--until-decisive --max-attempts 7" in next_step(_rerun(recommended_attempts=6.2))
    lines = decision_summary({**_rerun(recommended_attempts=12), "thresholds": {}}, TYPED)
    assert "9 times in 10: mlflow-perfgate compare" in lines[-1] and lines[-1].endswith("--max-attempts 12")


def test_compare_s_tail_prints_the_next_step(sqlite_uri):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", "tinylm",
                           "--set", "input_shape=2,16", "--set", "warmup=0", "--steps", "2", "--change",
                           "checkpoint=true", "--attempts", "2", "--min-valid-runs", "2", "--method", "robust",
                           "--mode", "non_regression", "--margin", "0.9", "--fixed-rounds",
                           "--allow-undecidable", "--in-process", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr  # two attempts cannot decide: a rerun
    step = [line for line in done.stdout.splitlines() if line.startswith("next: ")]
    assert len(step) == 1, done.stdout[-2000:]
    assert any(words in step[0] for words in ("--until-decisive --max-attempts", "cannot resolve",
                                              "sits near the bound")), step[0]
    assert "--until-decisive" not in step[0] or "--allow-undecidable" in step[0]  # the command as typed


def test_the_advice_is_planned_from_the_noise_not_from_where_one_run_s_estimate_stood():
    import numpy as np

    from mlflow_perfgate.rules._stats import settling_pairs

    noise = np.random.default_rng(0).normal(0.0, 0.06, 10)
    near, far = noise + np.log(1.045), noise  # the same spread, one estimate a hair under the bound
    assert settling_pairs(near, bound=1.05, alpha=0.05) == settling_pairs(far, bound=1.05, alpha=0.05)
    # twice the noise, four times the rounds (within rounding); a looser bound, fewer
    twice = settling_pairs(2 * noise, bound=1.05, alpha=0.05)
    assert 3.5 <= twice / settling_pairs(noise, bound=1.05, alpha=0.05) <= 4.5
    assert settling_pairs(noise, bound=1.10, alpha=0.05) < settling_pairs(noise, bound=1.05, alpha=0.05)
    assert settling_pairs(noise[:1], bound=1.05, alpha=0.05) is None


def test_numpy_scalars_read_as_the_numbers_they_are():
    import numpy as np

    result = _rerun(recommended_attempts=np.int64(8), pairs=np.int64(20), mode="non_regression",
                    margin=np.float32(0.025), step_tail_ok=None, step_tail_ratio=np.float32(1.071))
    step = next_step(result, TYPED)
    assert "8 rounds settle 'no slower than 2.5%'" in step and "these 20 did not" in step, step
    assert "the step tail 1.071" in step
