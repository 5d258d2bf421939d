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
    step = next_step(_rerun(recommended_attempts=23), TYPED)
    words = shlex.split(step.removeprefix("next: "))
    assert words == ["mlflow-perfgate", "compare", "--workload", "tinylm", "--change", "checkpoint=true",
                     "--attempts", "5", "--method", "paired", "--until-decisive", "--max-attempts", "23"]


def test_one_beyond_what_the_machine_resolves_says_so():
    step = next_step(_rerun(recommended_attempts=RESOLVABLE_ATTEMPTS * 5), TYPED)
    assert step.startswith("next: about 1000 attempts per arm would be needed: the effect is below what this "
                           "machine resolves at this noise")
    assert "--until-decisive" not in step


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
    assert lines[-1].startswith("next: mlflow-perfgate compare") and lines[-1].endswith("--max-attempts 12")


def test_compare_s_tail_prints_the_next_step(sqlite_uri):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", "tinylm",
                           "--set", "input_shape=2,16", "--set", "warmup=0", "--steps", "2", "--change",
                           "checkpoint=true", "--attempts", "2", "--min-valid-runs", "2", "--method", "robust",
                           "--mode", "non_regression", "--margin", "0.9",
                           "--allow-undecidable", "--in-process", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr  # two attempts cannot decide: a rerun
    step = [line for line in done.stdout.splitlines() if line.startswith("next: ")]
    assert len(step) == 1, done.stdout[-2000:]
    assert "--until-decisive --max-attempts" in step[0] or "below what this machine resolves" in step[0]
    assert "--until-decisive" not in step[0] or "--allow-undecidable" in step[0]  # the command as typed
