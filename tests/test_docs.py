"""The documentation site: it builds with ``mkdocs build --strict``, and every code block of its
pages (and of the README) is run, or checked, by a test named here.

``EXECUTED`` lists each page's blocks, section by section, with the test that runs it (or, for a
block that cannot run here, a YAML recipe or a cluster's files, the test that checks it). A block
added to a page without a line here fails :func:`test_every_code_block_is_executed_by_a_named_test`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import blocks, command_lines, doc_path, doc_section, page_blocks

REPO = Path(__file__).resolve().parents[1]

#: (page, the heading its blocks sit under) -> [(language, the test that runs or checks it), ...]
EXECUTED = {
    ("README.md", "Two commands"): [
        ("bash", "tests/test_docs.py::test_the_two_commands_are_the_project_s"),  # test_mlproject runs the job
        ("bash", "tests/test_docs.py::test_the_two_commands_are_the_project_s")],  # .ci/run runs it
    ("README.md", "A five-minute tour"): [("bash", "tests/test_readme.py::test_the_tour_s_comparison_runs_as_written")],
    ("README.md", "In CI, in ten lines"): [
        ("bash", "tests/test_nothing_lost.py::test_the_readme_s_ten_line_ci_runs_as_written_from_two_worktrees")],
    ("tutorial.md", "Install and run the main job"): [
        ("bash", "tests/test_docs.py::test_the_two_commands_are_the_project_s")],
    ("tutorial.md", "One comparison"): [("bash", "tests/test_readme.py::test_the_tour_s_comparison_runs_as_written")],
    ("tutorial.md", "Where to look in the MLflow UI"): [
        ("bash", "tests/test_docs.py::test_the_mlflow_ui_command_is_one_mlflow_takes")],
    ("tutorial.md", "Record attempts yourself"): [
        ("python", "tests/test_readme.py::test_use_it_examples_run_in_order_as_written"),
        ("bash", "tests/test_readme.py::test_use_it_examples_run_in_order_as_written")],
    ("explanation/attempts.md", "How attempts run"): [
        ("bash", "tests/test_readme.py::test_the_attempts_page_s_commands_run_shrunk")],
    ("explanation/attempts.md", "The warm attempt server"): [
        ("python", "tests/test_readme.py::test_the_attempt_runner_example_runs")],
    ("how-to/authentication.md", "Authentication"): [
        ("bash", "tests/test_auth.py::test_the_docs_credentials_example_runs_against_a_basic_auth_server")],
    ("how-to/ci.md", "The workflow"): [
        ("yaml", "tests/test_nothing_lost.py::test_the_ci_recipe_runs_as_written_from_two_worktrees")],
    ("how-to/ci.md", "How many rounds this runner needs"): [
        ("bash", "tests/test_calibrate.py::test_the_docs_calibrate_command_is_the_one_compare_rounds_auto_asks_for")],
    ("how-to/history.md", "A benchmark's history"): [("bash", "tests/test_readme.py::test_the_history_commands_run")],
    ("how-to/history.md", "Bisect"): [
        ("python", "tests/test_readme.py::test_the_bisect_workload_sketch_finds_its_worktree")],
    ("how-to/huggingface.md", "Hugging Face models"): [
        ("bash", "tests/test_readme.py::test_the_hugging_face_example_compares"),
        ("python", "tests/test_readme.py::test_the_hugging_face_example_compares")],
    ("how-to/kubernetes.md", "Running on Kubernetes"): [
        ("bash", "tests/test_docs.py::test_the_kubernetes_files_are_what_mlflow_reads"),
        ("json", "tests/test_docs.py::test_the_kubernetes_files_are_what_mlflow_reads"),
        ("yaml", "tests/test_docs.py::test_the_kubernetes_files_are_what_mlflow_reads")],
    ("how-to/plugins.md", "Your own method or objective"): [
        ("toml", "tests/test_plugins.py::test_the_docs_entry_points_are_the_ones_installed_here")],
    ("how-to/postgresql.md", "Scale-out on PostgreSQL"): [
        ("bash", "tests/test_postgres.py::test_sixteen_writers_on_postgresql_lose_nothing"),
        ("bash", "tests/test_docs.py::test_the_postgres_test_command_selects_the_postgres_test")],
    ("how-to/ray.md", "A suite on a Ray cluster"): [
        ("bash", "tests/test_docs.py::test_the_ray_command_is_one_the_cli_takes")],  # test_ray_dispatch runs --ray
    ("how-to/suites.md", "Suites and pytest"): [
        ("bash", "tests/test_readme.py::test_the_suite_commands_and_file_are_valid"),
        ("toml", "tests/test_readme.py::test_the_suite_commands_and_file_are_valid")],
    ("how-to/suites.md", "From Python"): [
        ("python", "tests/test_readme.py::test_the_suite_python_examples_run"),
        ("python", "tests/test_readme.py::test_the_suite_python_examples_run")],
    ("how-to/suites.md", "In pytest"): [
        ("python", "tests/test_pytest_plugin.py::test_the_docs_declarations_are_valid_entries")],
    ("how-to/workload.md", "Conditions arrive as text"): [
        ("python", "tests/test_readme.py::test_the_condition_helpers_answer_as_the_comments_say")],
    ("how-to/workload.md", "A complete example"): [
        ("python", "tests/test_readme.py::test_readme_workload_is_diagnosed_and_compared"),
        ("bash", "tests/test_readme.py::test_readme_workload_is_diagnosed_and_compared")],
    ("reference/mlproject.md", "MLproject entry points"): [
        ("bash", "tests/test_mlproject.py::test_the_docs_entry_point_commands_name_real_parameters")],
    ("design.md", "Layers (imports point downwards only)"): [
        ("text", "tests/test_docs.py::test_the_design_notes_layers_are_the_project_s")],
}


def _pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))]


def test_every_code_block_is_executed_by_a_named_test():
    found: dict[tuple[str, str], list[str]] = {}
    for page in _pages():
        for heading, language, _ in page_blocks(page):
            found.setdefault((page, heading), []).append(language)
    listed = {key: [language for language, _ in value] for key, value in EXECUTED.items()}
    unlisted = {key: value for key, value in found.items() if listed.get(key) != value}
    assert not unlisted, f"code blocks no test is named for (add them to EXECUTED with their test): {unlisted}"
    stale = sorted(set(listed) - set(found))
    assert not stale, f"EXECUTED names sections without those blocks: {stale}"
    for (page, heading), entries in EXECUTED.items():
        for _, test in entries:
            path, name = test.split("::")
            source = (REPO / path).read_text(encoding="utf-8")
            defined = {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"{test} (for {page}, {heading!r}) does not exist"
            assert f'"{page}"' in source, f"{path} never reads {page} (for {heading!r})"


@pytest.mark.slow
def test_the_site_builds_strict_with_its_generated_pages(tmp_path):
    site = tmp_path / "site"
    completed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                               cwd=REPO, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "WARNING" not in output, output[-5000:]
    # the schema page holds every key of tracking/_schema.py
    from mlflow_perfgate.tracking._schema import METRIC, PARAM, TAG

    schema = (site / "reference" / "schema" / "index.html").read_text(encoding="utf-8")
    for owner in (TAG, METRIC, PARAM):
        for name, value in vars(owner).items():
            if isinstance(value, str) and not name.startswith("_"):
                assert f"<code>{value}</code>" in schema, f"{owner.__name__}.{name} = {value!r} missing"
    # the CLI page: every command, and SectionedCommand's option sections
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    from mlflow_perfgate.cli import SectionedCommand, cli as group

    for name, command in group.commands.items():
        assert f"mlflow-perfgate {name}" in cli, name
    assert sum(isinstance(c, SectionedCommand) for c in group.commands.values()) >= 4
    assert cli.count("<strong>What to run:</strong>") >= 4 and cli.count("<strong>How to decide:</strong>") >= 3
    assert "<strong>Thresholds:</strong>" in cli and "--min-improvement" in cli
    api = (site / "reference" / "python" / "index.html").read_text(encoding="utf-8")
    for name in ("log_attempt", "evaluate_group", "compare", "suite_gate", "revision_worktree", "PerfgateError"):
        assert f'id="mlflow_perfgate.' in api and name in api, name
    assert (site / "explanation" / "lab-ratios.svg").stat().st_size > 10_000
    evidence = (site / "explanation" / "evidence" / "index.html").read_text(encoding="utf-8")
    assert "<td>mix</td>" in evidence and "identical falsely accepted" in evidence
    notebook = (site / "explanation" / "notebook" / "index.html").read_text(encoding="utf-8")
    assert "The noise lab" in notebook


def test_the_evidence_table_is_the_lab_report_s():
    """The spread computed from the committed rounds is the one the lab's own report printed."""
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(REPO / "docs"))
    computed = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[3:7]]
                for line in hooks.spread_markdown().splitlines()[2:]}
    report = (REPO / "benchmarks" / "results" / "lab_neighbours-threads1.md").read_text(encoding="utf-8")
    table = report.split("## Within-round spread of identical arms", 1)[1].split("\n\n", 2)[1]
    printed = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:6]]
               for line in table.splitlines()[2:]}
    assert computed == printed


def test_griffe_reads_combined_parameter_lines():
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from griffe_params import split_combined
    finally:
        sys.path.remove(str(REPO / "docs"))
    text = "Judge.\n\nArgs:\n    a, b: the two\n        arms.\n    c: one.\n\nReturns:\n    x, y: no change.\n"
    assert split_combined(text) == ("Judge.\n\nArgs:\n    a: the two\n        arms.\n    b: the two\n        arms.\n"
                                    "    c: one.\n\nReturns:\n    x, y: no change.")
    # a record's attributes too (ArmSummary's table named "attempted_runs," with "(valid_runs, failed_runs)" as a type)
    assert split_combined("A record.\n\nAttributes:\n    low, high: its bounds.\n") == \
        "A record.\n\nAttributes:\n    low: its bounds.\n    high: its bounds."


# --- blocks checked rather than run -----------------------------------------------------------------

def test_the_coming_from_page_s_commands_are_ones_the_cli_takes():
    """Each ``mlflow-perfgate ...`` of the page names a command and only options that command has; each
    pytest marker keyword is a declaration key the plugin reads."""
    import click

    from mlflow_perfgate.cli import cli

    text = (REPO / "docs" / "how-to" / "coming-from.md").read_text(encoding="utf-8")
    commands = [code for code in re.findall(r"`([^`]+)`", text) if code.startswith("mlflow-perfgate ")]
    assert len(commands) >= 8
    for command in commands:
        words = shlex.split(command)[1:]
        group = cli
        while isinstance(group, click.Group):
            group = group.commands[words.pop(0)]
        known = {name for param in group.params for name in getattr(param, "opts", [])}
        given = {word.split("=")[0] for word in words if word.startswith("--")}
        assert given <= known, (command, given - known)
    marker = re.search(r"@pytest\.mark\.perfgate\(([^)]*)\)", text).group(1)
    from mlflow_perfgate.suite import ENTRY_KEYS

    assert {part.split("=")[0].strip() for part in marker.split(",")} <= set(ENTRY_KEYS) | {"baseline", "candidate"}


def test_the_two_commands_are_the_project_s():
    main_job, tests = blocks(doc_section("README.md", "Two commands"), "bash")
    assert main_job == ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
                        "mlflow run . --env-manager local\n")  # tests/test_mlproject.py runs `mlflow run .`
    assert tests == "bash scripts/test.sh\n"
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert blocks(doc_section("tutorial.md", "Install and run the main job"), "bash") == [main_job]


def _mlflow_command(name: str):
    """The click command of ``mlflow NAME`` (MLflow's group may load its commands lazily)."""
    import click
    from mlflow.cli import cli as mlflow_cli

    command = mlflow_cli.get_command(click.Context(mlflow_cli), name)
    assert command is not None, name
    return command


def test_the_mlflow_ui_command_is_one_mlflow_takes():
    block, = blocks(doc_section("tutorial.md", "Where to look in the MLflow UI"), "bash")
    words = shlex.split(block, comments=True)
    assert words == ["mlflow", "ui", "--backend-store-uri", "sqlite:///mlflow.db"]
    ui = _mlflow_command("ui")
    with ui.make_context("ui", words[2:]) as ctx:  # parsed as MLflow parses it, nothing started
        assert ctx.params["backend_store_uri"] == "sqlite:///mlflow.db"
    assert "127.0.0.1:5000" in block


def _parses(argv: list[str]) -> None:
    """``mlflow-perfgate ARGV`` is a command line the CLI accepts (parsed, not run)."""
    from mlflow_perfgate.cli import cli

    command = cli
    words = list(argv)
    while isinstance(command, type(cli)) and words and words[0] in getattr(command, "commands", {}):
        command = command.commands[words.pop(0)]
    with command.make_context(command.name, words):
        pass


def test_the_ray_command_is_one_the_cli_takes(tmp_path, monkeypatch):
    block, = blocks(doc_section("how-to/ray.md", "A suite on a Ray cluster"), "bash")
    assert "export MLFLOW_TRACKING_URI=http://" in block
    (command,) = command_lines(block)
    assert command[:2] == ["suite", "run"] and "--ray" in command
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.toml").write_text("[suite]\nname = \"n\"\n")
    _parses(command)


def test_the_postgres_test_command_selects_the_postgres_test():
    recipe, selection = blocks(doc_section("how-to/postgresql.md"), "bash")
    assert recipe.startswith("PYTHON=.venv/bin/python bash scripts/postgres_recipe.sh ")
    assert selection == "bash scripts/test.sh -m postgres\n"
    assert '"$@"' in (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")  # the arguments reach pytest
    assert "pytest.mark.postgres" in (REPO / "tests" / "test_postgres.py").read_text(encoding="utf-8")
    assert '"postgres: ' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_the_kubernetes_files_are_what_mlflow_reads():
    import yaml

    text = doc_section("how-to/kubernetes.md")
    shell, = blocks(text, "bash")
    config, = blocks(text, "json")
    template, = blocks(text, "yaml")
    command = next(line for line in shell.splitlines() if line.startswith("mlflow run"))
    words = shlex.split(command)
    entry = words[words.index("-e") + 1]
    project = yaml.safe_load((REPO / "MLproject").read_text(encoding="utf-8"))
    parameters = project["entry_points"][entry]["parameters"]
    for index, word in enumerate(words):
        if word == "-P":
            assert words[index + 1].split("=", 1)[0] in parameters
    run = _mlflow_command("run")
    with run.make_context("run", words[2:]) as ctx:
        assert ctx.params["backend"] == "kubernetes" and ctx.params["backend_config"] == "kubernetes_config.json"
    assert set(json.loads(config)) == {"kube-context", "repository-uri", "kube-job-template-path"}
    job = yaml.safe_load(template)
    assert job["kind"] == "Job" and job["spec"]["backoffLimit"] == 0
    container, = job["spec"]["template"]["spec"]["containers"]
    # the placeholders MLflow's kubernetes backend fills in (mlflow.projects.kubernetes)
    assert container["image"] == "{replaced with URI of Docker image created during Project execution}"
    assert container["command"] == ["{replaced with MLflow Project entry point command}"]
    assert job["metadata"]["name"] == container["name"] == "{replaced with MLflow Project name}"


def test_the_design_notes_layers_are_the_project_s():
    block, = blocks(doc_section("design.md", "Layers (imports point downwards only)"), "text")
    named = [line.split()[0].rstrip(",") for line in block.splitlines() if line and not line.startswith(" ")]
    assert named[:2] == ["cli/", "harness/"]
    for name in named:
        assert (REPO / "mlflow_perfgate" / name).exists() or (REPO / name).exists(), name
    for name in re.findall(r"^cli/, (\w+)", block, re.MULTILINE):
        assert (REPO / name).exists(), name
