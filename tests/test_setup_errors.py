"""Setup errors are setup errors: a first round that fails for a reason of its setup (a factory that returns
no workload, a condition it cannot parse, both arms failing at once) stops the comparison there, exit 2, one
line naming the arm and the cause, nothing judged; a workload that fails in its measured steps is still judged.
Real children and a real store; nothing is mocked."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import TAG

HOSTILE = "tests.workloads_fixtures.lockstep_hostile:make"
SETS = ["--set=model=m", "--set=input_shape=1,1", "--set=batch_size=1", "--set=dtype=fp32", "--set=device=cpu",
        "--set=measurement_method=wall_ms", "--set=warmup=1", "--set=steps=4", "--set=step_ms=0.5",
        "--set=build=ok", "--set=width=1", "--set=mode=fine", "--set=fail_at=2"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def runs(kind: str) -> list:
    return MlflowClient().search_runs(["0"], f"tags.\"{TAG.KIND}\" = '{kind}'", max_results=100)


@pytest.mark.parametrize("interleave", ["steps", "lockstep", "attempts"])
@pytest.mark.parametrize("change, said", [
    ("build=none", "the candidate's workload could not be built (exception: TypeError: workload"),
    ("width=eight", "the candidate's workload could not be built (invalid_conditions: invalid literal"),
    ("mode=raise", None),  # the candidate's measured steps raise (from its third call): its measured behaviour
])
def test_a_first_round_that_fails_in_its_setup_stops_with_exit_2_naming_the_arm(sqlite_uri, capsys, interleave,
                                                                                change, said):
    code, out, err = run_cli(capsys, "compare", "--workload", HOSTILE, *SETS, "--change", change,
                             "--attempts", "6", "--interleave", interleave, "--no-progress", "--allow-undecidable")
    if said is None:  # a candidate whose step raises is the workload's measured behaviour: judged, rejected
        assert code == 1, err
        assert len(runs("decision")) == 1
        return
    assert code == 2, (out, err)
    line, = err.strip().splitlines()
    assert said in line and line.endswith("nothing was judged"), line
    assert runs("decision") == []
    attempts = runs("attempt")
    assert len(attempts) == 2  # the first round, recorded; no other round ran
    comparison, = MlflowClient().search_runs(["0"], f"tags.\"{TAG.COMPARISON}\" = 'true'")
    assert comparison.info.status == "KILLED"


@pytest.mark.parametrize("interleave", ["steps", "lockstep"])
def test_both_arms_failing_their_first_round_stops_it(sqlite_uri, capsys, interleave):
    code, out, err = run_cli(capsys, "compare", "--workload", HOSTILE, *[s for s in SETS if "mode=" not in s and "fail_at=" not in s],
                             "--set=mode=raise", "--set=fail_at=1", "--change", "step_ms=0.6", "--attempts", "6",
                             "--interleave", interleave, "--no-progress", "--allow-undecidable")
    assert code == 2, (out, err)
    line, = err.strip().splitlines()
    assert line.startswith("Error: neither arm ran its first round (") and "RuntimeError" in line, line
    assert runs("decision") == [] and len(runs("attempt")) == 2


def test_ctrl_c_exits_130_with_the_comparison_run_killed(sqlite_uri, tmp_path):
    """A real SIGINT to ``compare`` as users run it: 130, the shell's code for it, not 2 (a usage error)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    command = [sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", HOSTILE,
               *[s for s in SETS if "step_ms=" not in s and "steps=" not in s], "--set=steps=400", "--set=step_ms=20",
               "--change", "width=2", "--attempts", "6", "--no-progress"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "MLFLOW_TRACKING_URI": sqlite_uri},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if any(run.info.status == "RUNNING" for run in runs("attempt")):
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the round's measured steps are running
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("Error: interrupted (Ctrl-C)"), err
    comparison, = MlflowClient().search_runs(["0"], f"tags.\"{TAG.COMPARISON}\" = 'true'")
    assert comparison.info.status == "KILLED"
    left = [(run.info.status, run.data.tags.get(TAG.ARM), run.data.tags.get(TAG.PAIR), run.data.tags.get(TAG.FAILURE))
            for run in runs("attempt")]
    assert all(status != "RUNNING" for status, *_ in left), (left, err)


def _immutable(path: Path, on: bool) -> bool:
    """``chattr +i`` (or ``-i``): a file no process may write, root included; whether it could be done here."""
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_a_store_this_process_cannot_write_is_named_in_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    store = tmp_path / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{store}").search_experiments()  # a real store
    if not _immutable(store, True):
        pytest.skip("chattr +i is not available on this filesystem")
    capsys.readouterr()  # MLflow's own lines, making the store
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
        code, _, err = run_cli(capsys, "compare", "--change", "checkpoint=true", "--no-progress")
        assert code == 2, err
        line, = err.strip().splitlines()
        assert f"the MLflow store at sqlite:///{store} cannot be written: {store} is read-only" in line, line
        assert line.endswith("nothing was run or logged")
        code, out, err = run_cli(capsys, "decisions")  # a command that only reads is served
        assert code == 0, err
    finally:
        _immutable(store, False)
