"""The main job as a user meets it: ``mlflow run . --env-manager local`` leaves a decision in the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.tracking import TAG

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mlflow_run_main_entry_point_leaves_a_decision(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    completed = subprocess.run(
        [sys.executable, "-m", "mlflow", "run", str(REPO), "--env-manager", "local", "--experiment-name", "main-job",
         "-P", "attempts=2", "-P", "steps=2", "-P", "warmup=1", "-P", "input_shape=2,16", "-P", "capacity_mib=1",
         "-P", "min_valid_runs=2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "diagnosis: ready_for_experiment, primary signal memory" in completed.stdout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    frame = pg.decisions(experiment_name="main-job")
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["changed_variable"] == "checkpoint" and row["objective"] == "memory"
    assert row["decision"] in ("accept", "reject", "rerun")
    client = MlflowClient()
    decision = client.get_run(row["run_id"])
    project_run_id = decision.data.tags[TAG.PARENT]  # the comparison nests under the project's run
    assert client.get_run(project_run_id).data.tags.get("mlflow.project.entryPoint") == "main"
    kinds = {r.data.tags.get(TAG.KIND) for r in client.search_runs([decision.info.experiment_id])}
    assert {"diagnosis", "decision", "attempt"} <= kinds


def _mlflow_run(tmp_path, uri, entry_point, *params, experiment="entry-points"):
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    argv = [sys.executable, "-m", "mlflow", "run", str(REPO), "-e", entry_point, "--env-manager", "local",
            "--experiment-name", experiment]
    for param in params:
        argv += ["-P", param]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


CONDITIONS = "model=TinyLM;input_shape=4,128;batch_size=4;dtype=fp32;device=cpu;repeats=5;measurement_method=wall_ms"


@pytest.mark.slow
def test_every_entry_point_runs_with_its_defaults(tmp_path, monkeypatch):
    """diagnose, compare, record and evaluate, each with its own defaults (only the sizes shrunk, and what
    record and evaluate must be told); main is the test above. Exit 0, or the decision's documented code."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    diagnosed = _mlflow_run(tmp_path, uri, "diagnose", "input_shape=2,16", "steps=2")  # capacity_mib: its default 0
    assert diagnosed.returncode == 0, diagnosed.stdout[-3000:] + diagnosed.stderr[-3000:]
    assert "profiler_start" not in diagnosed.stderr  # the profiler's own lines go to profiler.log
    # its defaults: the paired method's 6 rounds at the least (fewer are refused: they could never accept)
    compared = _mlflow_run(tmp_path, uri, "compare", "input_shape=2,16", "steps=2", "warmup=1", "attempts=6",
                           "min_valid_runs=2")
    assert compared.returncode in (0, 1, 3), compared.stdout[-3000:] + compared.stderr[-3000:]
    for arm, checkpoint, latency in (("baseline", "false", "100"), ("candidate", "true", "80")):
        recorded = _mlflow_run(tmp_path, uri, "record", "group=ep", f"arm={arm}",
                               f"conditions={CONDITIONS};checkpoint={checkpoint}", f"latency_ms={latency}",
                               "quality=0.9")
        assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    evaluated = _mlflow_run(tmp_path, uri, "evaluate", "group=ep", "min_valid_runs=1")
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]  # 100 -> 80 ms: accept

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient()
    experiment = client.get_experiment_by_name("entry-points")
    runs = client.search_runs([experiment.experiment_id])
    projects = {r.info.run_id: r for r in runs if "mlflow.project.entryPoint" in r.data.tags}
    assert sorted(r.data.tags["mlflow.project.entryPoint"] for r in projects.values()) == [
        "compare", "diagnose", "evaluate", "record", "record"]
    # mlflow marks a project run FAILED when its command exits non-zero: only compare may (reject, rerun)
    expected = {"diagnose": "FINISHED", "record": "FINISHED", "evaluate": "FINISHED",
                "compare": "FINISHED" if compared.returncode == 0 else "FAILED"}
    assert {r.data.tags["mlflow.project.entryPoint"]: r.info.status for r in projects.values()} == expected
    by_kind = {}
    for run in runs:
        by_kind.setdefault(run.data.tags.get(TAG.KIND), []).append(run)
    diagnosis, = by_kind["diagnosis"]
    assert projects[diagnosis.data.tags[TAG.PARENT]].data.tags["mlflow.project.entryPoint"] == "diagnose"
    decisions = {r.data.tags[TAG.GROUP]: r for r in by_kind["decision"]}
    comparison = next(r for group, r in decisions.items() if group != "ep")
    assert projects[comparison.data.tags[TAG.PARENT]].data.tags["mlflow.project.entryPoint"] == "compare"
    # the empty parameters left it to compare's configuration: the recommended one, sizes as given
    assert comparison.data.tags[TAG.CONFIGURATION] == (
        "paired method on p10, steps interleaved, 1 torch thread, 6 rounds; defaults: method, latency, interleave, "
        "threads")
    recorded = decisions["ep"]  # the evaluator's own decision run: the project runs are no comparison
    assert recorded.data.tags[TAG.DECISION] == "accept" and recorded.info.status == "FINISHED"
    assert recorded.info.run_name == "ACCEPT: decision ep"
    ep_attempts = [r for r in by_kind["attempt"] if r.data.tags[TAG.GROUP] == "ep"]
    assert len(ep_attempts) == 2 and {r.data.tags[TAG.PARENT] for r in ep_attempts} == {recorded.info.run_id}


def test_the_docs_entry_point_commands_name_real_parameters():
    """docs/reference/mlproject.md's commands: each entry point and parameter is MLproject's (the
    tests above run every entry point); the ones that need them are given group, arm and conditions."""
    import shlex

    import yaml

    from helpers import blocks, doc_section

    block, = blocks(doc_section("reference/mlproject.md"), "bash")
    project = yaml.safe_load((REPO / "MLproject").read_text(encoding="utf-8"))["entry_points"]
    seen = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        assert words[:3] == ["mlflow", "run", "."] and "--env-manager" in words, line
        entry = words[words.index("-e") + 1]
        given = {words[i + 1].split("=", 1)[0] for i, word in enumerate(words) if word == "-P"}
        parameters = project[entry]["parameters"]
        assert given <= set(parameters), (entry, given - set(parameters))
        required = {name for name, spec in parameters.items() if "default" not in spec}
        assert required <= given, (entry, required - given)
        seen.append(entry)
    assert seen == ["diagnose", "compare", "record", "evaluate"]
