"""A stop by the operator is not a failure of an arm: the attempts it cut short are withdrawn (KILLED,
excluded, listed), and ``--resume`` completes the planned rounds and judges identical arms as identical.
Real processes, real signals, a real store; nothing depends on the machine being quiet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.tracking import TAG

from conftest import REPO

HOSTILE = "tests.workloads_fixtures.lockstep_hostile:make"
SETS = ["--set=model=m", "--set=input_shape=1,1", "--set=batch_size=1", "--set=dtype=fp32", "--set=device=cpu",
        "--set=measurement_method=wall_ms", "--set=warmup=1", "--set=steps=30", "--set=step_ms=2", "--set=width=1"]
#: identical arms: the candidate changes a condition the factory parses and ignores
COMPARE = [sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", HOSTILE, *SETS, "--change", "width=2",
           "--attempts", "6", "--group", "stopped", "--no-progress", "--mode", "non_regression", "--margin", "0.5"]


def attempts() -> list:
    return MlflowClient().search_runs(["0"], f"tags.\"{TAG.KIND}\" = 'attempt'", max_results=200)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stopped_comparison_resumed_completes_its_rounds_and_counts_no_stop_as_a_failure(sqlite_uri, signum):
    env = {**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri}
    process = subprocess.Popen(COMPARE, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:  # two rounds written, the third running
        if sum(run.info.status == "FINISHED" for run in attempts()) >= 4:
            break
        time.sleep(0.1)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err
    left = attempts()
    assert all(run.info.status != "RUNNING" for run in left)
    cut = [run for run in left if run.info.status == "KILLED"]
    for run in cut:  # what the stop cut short: withdrawn, never a failure of its arm
        assert run.data.tags[TAG.EXCLUDED] == "true", run.data.tags
        assert "stopped by the operator" in run.data.tags[TAG.FAILURE]
    counted = [run for run in left if run.data.tags.get(TAG.EXCLUDED) != "true"]  # measured, written whole
    assert all(run.info.status == "FINISHED" and run.data.tags[TAG.OK] == "true" for run in counted)
    complete_before = len({run.data.tags[TAG.PAIR] for run in counted if run.data.tags[TAG.ARM] == "baseline"} &
                          {run.data.tags[TAG.PAIR] for run in counted if run.data.tags[TAG.ARM] == "candidate"})
    assert complete_before < 6
    resumed = subprocess.run([*COMPARE, "--resume", "--format", "json"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode in (0, 3), resumed.stderr  # identical arms: accepted, or not yet decided; never reject
    assert f"{complete_before} of its 6 planned rounds are complete" in resumed.stderr
    import json

    result = json.loads(resumed.stdout)
    assert result["reason"] not in ("unreliable_candidate", "unreliable_baseline")
    for arm in ("baseline", "candidate"):
        assert result[arm]["failed_runs"] == 0 and result[arm]["attempted_runs"] == 6
