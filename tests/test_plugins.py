"""A method and an objective from an installed plugin package, through every command (issue 25, point 1).

The plugin (``tests/plugins/perfgate_toy``) is installed as pip installs a package: the module
and a ``perfgate_toy-0.1.dist-info`` folder (``METADATA``, ``entry_points.txt``, ``RECORD``)
in a site folder, which the commands' processes find on their ``PYTHONPATH``. Nothing registers
it by hand: the registries load the entry points ``mlflow_perfgate.methods`` and
``mlflow_perfgate.objectives`` themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg

from helpers import BISECT_BENCH, BISECT_SETS, slowing_repository

PLUGIN = Path(__file__).parent / "plugins" / "perfgate_toy"
ENTRY_POINTS = """[mlflow_perfgate.methods]
toy = perfgate_toy:TOY_METHOD

[mlflow_perfgate.objectives]
wall = perfgate_toy:make_wall_objective
slowest = perfgate_toy:SLOWEST
"""
TINY = ["--set=input_shape=2,16", "--set=steps=3", "--set=warmup=1"]
EXPERIMENT = "plugins"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plugin installed into a site folder of its own, as pip lays a package out."""
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(PLUGIN, root / "perfgate_toy")
    info = root / "perfgate_toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: perfgate-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("".join(f"{path.relative_to(root)},,\n" for path in root.rglob("*") if path.is_file()))
    return root


def cli(site_dir: Path | None, *argv, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site_dir) if site_dir else "", os.getcwd(),
                                                    env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "mlflow_perfgate", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_the_plugin_s_names_are_choices_and_help(site):
    shown = cli(site, "compare", "--help")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "[seed|robust|paired|toy]" in text and "toy: the robust rule, as a plugin's method" in text
    assert "wall: the attempt's wall time" in text and "--maximum-wall-cost" in text  # its threshold too
    history = " ".join(cli(site, "history", "--help").stdout.split())
    assert "[robust|paired|toy]" in history  # a method with a test can bisect
    without = cli(None, "compare", "--method", "toy", "--workload", "tinylm", "--change", "checkpoint=true")
    assert without.returncode == 2 and "'toy' is not one of 'seed', 'robust', 'paired'" in without.stderr


@pytest.mark.parametrize("interleave", ["attempts", "steps"])
def test_compare_decides_with_the_plugin_s_method(site, sqlite_uri, interleave):
    done = cli(site, "compare", "--workload", "tinylm", *TINY, "--change", "checkpoint=true", "--method", "toy",
               "--attempts", "3", "--min-valid-runs", "3", "--allow-undecidable", "--no-progress",
               "--interleave", interleave, "--experiment", EXPERIMENT, "--format", "json")
    assert done.returncode in (0, 1, 3), done.stderr
    result = json.loads(done.stdout)
    assert result["method"] == "toy"
    run = MlflowClient().get_run(result["decision_run_id"])
    assert run.data.tags["perfgate.method"] == "toy"
    assert "toy_p_value" in run.data.metrics and "toy_ratio_estimate" in run.data.metrics  # its own figures
    listed = cli(site, "decisions", "--experiment", EXPERIMENT, "--format", "json")
    row = json.loads(listed.stdout)[0]  # where the plugin is installed, its figures are columns
    assert row["method"] == "toy" and row["toy_p_value"] == pytest.approx(run.data.metrics["toy_p_value"], rel=1e-14)


def test_compare_decides_on_the_plugin_s_objective(site, sqlite_uri):
    done = cli(site, "compare", "--workload", "tinylm", *TINY, "--change", "checkpoint=true", "--objective", "wall",
               "--maximum-wall-cost", "5", "--attempts", "3", "--min-valid-runs", "3", "--no-progress",
               "--experiment", EXPERIMENT, "--format", "json")
    assert done.returncode in (0, 1, 3), done.stderr
    result = json.loads(done.stdout)
    assert result["objective"] == "wall"
    assert result["wall_cost_ok"] in (True, False) and "wall_cost_ok" in result["messages"]  # its own check
    run = MlflowClient().get_run(result["decision_run_id"])
    assert run.data.tags["perfgate.objective"] == "wall"
    assert run.data.metrics["baseline_median_attempt_wall_s"] > 0 and "toy_wall_cost" in run.data.metrics
    assert run.data.params["perfgate.maximum_wall_cost"] == "5.0"


@pytest.mark.parametrize("interleave", ["attempts", "steps"])
def test_an_objective_on_a_figure_its_entry_measures(site, sqlite_uri, interleave):
    """The entry's ``measure`` runs in each attempt's process; its figure is the attempt run's metric, judged."""
    done = cli(site, "compare", "--workload", "tinylm", *TINY, "--change", "checkpoint=true", "--objective",
               "slowest", "--maximum-slowest-cost", "5", "--attempts", "3", "--min-valid-runs", "3", "--no-progress",
               "--interleave", interleave, "--experiment", EXPERIMENT, "--format", "json")
    assert done.returncode in (0, 1, 3), done.stderr
    result = json.loads(done.stdout)
    assert result["objective"] == "slowest" and "slowest_cost_ok" in result["messages"], result
    client = MlflowClient()
    assert sum(attempt["ok"] for attempt in result["attempts"]) == 6
    for attempt in result["attempts"]:
        run = client.get_run(attempt["run_id"])
        steps = [m.value for m in client.get_metric_history(attempt["run_id"], "step_time_ms")]
        assert len(steps) == 3 and run.data.metrics["slowest_step_ms"] == pytest.approx(max(steps), rel=1e-9)
        assert attempt["slowest_step_ms"] == run.data.metrics["slowest_step_ms"]  # the record judged
    decision = client.get_run(result["decision_run_id"])
    assert decision.data.metrics["baseline_median_slowest_step_ms"] > 0 and "toy_slowest_cost" in decision.data.metrics
    artifacts = {a.path for a in client.list_artifacts(result["decision_run_id"], "perfgate")}
    assert "perfgate/slowest.png" in artifacts  # its plot, labelled by the entry


def test_a_suite_runs_and_gates_an_entry_judged_by_the_plugin_s_method(site, sqlite_uri, tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
[suite]
name = "toys"
experiment = "{EXPERIMENT}"

[defaults]
method = "toy"
mode = "non_regression"
attempts = 3
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 3}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}
""")
    done = cli(site, "suite", "run", str(suite), "--no-progress")
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    # judged, and gated, by the plugin's method, on compare's default figure (p10)
    assert "latency (p10), toy, non_regression" in done.stdout
    row = pg.decisions(experiment_name=EXPERIMENT, suite="toys").iloc[0]
    assert row["method"] == "toy" and row["suite_entry"] == "checkpoint"


def test_a_suite_entry_judged_on_the_plugin_s_measured_objective(site, sqlite_uri, tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
[suite]
name = "slow-toys"
experiment = "{EXPERIMENT}"

[defaults]
attempts = 3
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 3, maximum_slowest_cost = 5}}

[[entry]]
name = "checkpoint"
objective = "slowest"
change = {{checkpoint = true}}
""")
    done = cli(site, "suite", "run", str(suite), "--no-progress")
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    row = pg.decisions(experiment_name=EXPERIMENT, suite="slow-toys").iloc[0]
    assert row["objective"] == "slowest" and row["suite_entry"] == "checkpoint"
    decision = MlflowClient().get_run(row["run_id"])
    assert decision.data.metrics["candidate_median_slowest_step_ms"] > 0


@pytest.mark.slow
def test_a_bisect_judges_each_step_with_the_plugin_s_method(site, sqlite_uri, tmp_path):
    repo = tmp_path / "repo"
    shas = slowing_repository(repo, 3, 2)  # commit 2 makes a step three times slower
    done = cli(site, "history", "--bisect", shas[0], shas[-1], "--workload", BISECT_BENCH, *BISECT_SETS,
               "--margin", "0.5", "--method", "toy", "--experiment", "bisect", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {shas[2]}" in done.stdout
    decided = pg.decisions(experiment_name="bisect")
    assert len(decided) >= 1 and set(decided["method"]) == {"toy"}


def test_a_policy_judged_where_its_plugin_is_not_installed_says_so(site, tmp_path):
    made = tmp_path / "policy.pickle"
    code = ("import pickle, sys; from mlflow_perfgate.rules import Policy; "
            f"open({str(made)!r}, 'wb').write(pickle.dumps(Policy(method='toy')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(site), os.getcwd()))}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    judge = ("import pickle; from mlflow_perfgate import rules; from mlflow_perfgate.errors import PolicyError\n"
             "runs = [{'ok': True, 'latency_ms': v, 'quality': 0.9} for v in (100, 101, 102, 103, 104)]\n"
             f"try:\n    rules.judge(runs, runs, pickle.loads(open({str(made)!r}, 'rb').read()))\n"
             "except PolicyError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", judge], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    said = done.stdout + done.stderr  # unpickling re-validates the policy: the error names the method
    assert "got 'toy'" in said and "entry points 'mlflow_perfgate.methods'" in said, said
    assert "Traceback" not in said  # a PolicyError, caught as such


def test_a_plugin_that_fails_to_load_is_left_out_saying_why(site, tmp_path):
    broken = tmp_path / "broken"
    info = broken / "perfgate_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: perfgate-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[mlflow_perfgate.methods]\nbroken = perfgate_missing_module:METHOD\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(broken), str(site), os.getcwd()))}
    done = subprocess.run([sys.executable, "-m", "mlflow_perfgate", "compare", "--help"], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0
    assert "[seed|robust|paired|toy]" in " ".join(done.stdout.split())  # the others stay
    assert "the method plugin 'broken' (perfgate_missing_module:METHOD, from perfgate-broken) could not be loaded" \
        in done.stderr and "ModuleNotFoundError" in done.stderr


def test_the_docs_entry_points_are_the_ones_installed_here():
    from helpers import blocks, doc_section

    readme, = blocks(doc_section("how-to/plugins.md"), "toml")
    for group, name, target in (("mlflow_perfgate.methods", "toy", "perfgate_toy:TOY_METHOD"),
                                ("mlflow_perfgate.objectives", "wall", "perfgate_toy:make_wall_objective"),
                                ("mlflow_perfgate.objectives", "slowest", "perfgate_toy:SLOWEST")):
        assert f'[project.entry-points."{group}"]' in readme
        assert f'{name} = "{target}"' in readme and f"{name} = {target}" in ENTRY_POINTS
