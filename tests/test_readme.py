"""The README and the documentation site as a newcomer follows them: their examples run as written (or
shrunk where a full run would take minutes), against a SQLite store in tmp_path. tests/test_docs.py
names, for every code block, the test here (or elsewhere) that runs it."""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.errors import InputError, SingleVariableError
from mlflow_perfgate.harness import compare, diagnose
from mlflow_perfgate.tracking import TAG

from helpers import blocks, command_lines, doc_section, shim

REPO = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    from mlflow_perfgate.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.slow
def test_use_it_examples_run_in_order_as_written(sqlite_uri, tmp_path, capsys):
    text = doc_section("tutorial.md", "Record attempts yourself")
    python, shell = blocks(text, "python"), blocks(text, "bash")
    assert len(python) == 1 and len(shell) == 1
    exec(compile(python[0], "docs/tutorial.md (Record attempts yourself)", "exec"), {"__name__": "docs"})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "reject ['failure_rate_ok']"  # what the comment beside it says
    assert out[2].startswith("failure_rate_ok failed: candidate failure rate 16.7% (1 of 6)")
    assert out[3:] == ["reject", "accept"]

    env = {**os.environ, "PATH": f"{shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "BASE_SHA": "1111111", "GIT_SHA": "2222222"}  # the two commits a CI job would give
    completed = subprocess.run(["bash", "-c", shell[0]], env=env, capture_output=True, text=True, timeout=600)
    assert "Error" not in completed.stderr, completed.stderr[-3000:]
    assert "decision: REJECT" in completed.stdout and "(exit code 1)" in completed.stdout
    assert 'my-pr,reject,declared_thresholds_checked,"[""failure_rate_ok""]"' in completed.stdout
    assert completed.stdout.count("## REJECT") == 2  # evaluate's report, then report's

    # the two examples wrote two groups, each decided once, neither disturbing the other
    frame = pg.decisions()
    assert sorted(frame["group"]) == ["my-change", "my-change", "my-change", "my-pr"]
    mine = frame[frame["group"] == "my-pr"].iloc[0]
    assert (mine["changed_variable"], mine["baseline_value"], mine["candidate_value"]) == (
        "revision", "1111111", "2222222")


def _workload_module(tmp_path: Path, monkeypatch, replace: tuple[str, str] | None = None) -> str:
    """The docs' ``mybench.py``, written into tmp_path and importable (a variant when ``replace``)."""
    text = doc_section("how-to/workload.md", "A complete example")
    source = next(block for block in blocks(text, "python") if block.startswith("# mybench.py"))
    if replace:
        assert replace[0] in source
        source = source.replace(*replace)
    name = "mybench" if replace is None else "mybench_ignores"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:make"


def _readme_command(command: str) -> tuple[dict, dict, list[str]]:
    """The ``--set`` conditions, the ``--change`` and the other words of a documented command."""
    words = shlex.split(command.replace("\\\n", " "))
    sets, change, rest = {}, {}, []
    iterator = iter(words)
    for word in iterator:
        if word in ("--set", "--change"):
            key, _, value = next(iterator).partition("=")
            (sets if word == "--set" else change)[key] = value
        else:
            rest.append(word)
    return sets, change, rest


def test_readme_workload_is_diagnosed_and_compared(sqlite_uri, tmp_path, monkeypatch):
    workload = _workload_module(tmp_path, monkeypatch)
    shell = blocks(doc_section("how-to/workload.md", "A complete example"), "bash")[0]
    diagnose_command, compare_command = [line for line in shell.replace("\\\n", " ").splitlines()
                                         if line.startswith("mlflow-perfgate")]
    sets, _, rest = _readme_command(diagnose_command)
    assert f"--workload {workload}" in " ".join(rest)
    report = diagnose(workload, sets, steps=2, capacity_mib=float(rest[rest.index("--capacity-mib") + 1]))
    assert report["plan"]["changed_variable"] == "checkpoint" and report["objective"] == "memory"

    sets, change, rest = _readme_command(compare_command)
    assert change == {"checkpoint": "true"} and rest[rest.index("--objective") + 1] == "memory"
    # the documented comparison, shrunk: two attempts of two steps each, in this process
    result = compare(workload, {**sets, "steps": 2, "warmup": 1}, change, attempts=2, objective="memory",
                     supervised=False, progress=False, min_valid_runs=2)
    assert result["decision"] in ("accept", "reject") and result["candidate"]["valid_runs"] == 2
    assert not result.get("issues"), result.get("issues")  # the probe found the workload valid
    run = MlflowClient().get_run(result["attempts"][0]["run_id"])
    assert run.data.tags[TAG.RUN_VALID] == "true" and "peak_mem_mib" in run.data.metrics


def test_a_change_the_factory_ignores_stops_the_comparison(sqlite_uri, tmp_path, monkeypatch):
    workload = _workload_module(tmp_path, monkeypatch,
                                ('integer(conditions, "hidden", 256, minimum=1)', "256"))
    conditions = {"model": "MLPBench", "input_shape": "8,16", "batch_size": 8, "dtype": "fp32", "device": "cpu",
                  "measurement_method": "wall_median_step_ms", "hidden": 256, "steps": 1, "warmup": 0}
    # the variant's factory no longer reads hidden at all: refused on its reads (issue 28), before describe()
    with pytest.raises(SingleVariableError, match=r"never read the changed variable 'hidden'"):
        compare(workload, conditions, {"hidden": 512}, attempts=3, group="ignored", supervised=False,
                progress=False, allow_undecidable=True)
    runs = MlflowClient().search_runs(["0"])
    attempts = [r for r in runs if r.data.tags.get(TAG.KIND) == "attempt"]
    assert sorted(r.data.tags[TAG.ARM] for r in attempts) == ["baseline", "candidate"]  # stopped after the first two
    comparison, = [r for r in runs if r.data.tags.get(TAG.COMPARISON) == "true"]
    assert comparison.info.status == "KILLED"
    assert "never read the changed variable 'hidden'" in comparison.data.tags[TAG.END_REASON]


def _never_built(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "never_built.py").write_text(
        "def make(conditions):\n    raise AssertionError('the factory was called before the conditions were checked')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "never_built:make"


def test_missing_fixed_conditions_are_named_before_anything_is_built(sqlite_uri, tmp_path, monkeypatch, capsys):
    workload = _never_built(tmp_path, monkeypatch)
    given = {"model": "Mine", "input_shape": "4,8"}
    with pytest.raises(InputError, match=r"missing the fixed conditions \['batch_size', 'device', 'dtype', "
                                         r"'measurement_method'\].*--set batch_size=\.\.\."):
        diagnose(workload, given)
    with pytest.raises(InputError, match=r"missing the fixed conditions \['batch_size', 'device', 'dtype', "
                                         r"'measurement_method'\]"):
        compare(workload, given, {"lr": "0.1"}, attempts=2, progress=False)
    assert MlflowClient().search_runs(["0"]) == []  # no diagnosis, no comparison run
    from mlflow_perfgate.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--workload", workload, "--set", "model=Mine"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "missing the fixed conditions" in err and len(err.strip().splitlines()) == 1


# --- the tour, the attempts page, the condition helpers ------------------------------------------------

def _bash(block: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    """A documented shell block, run by bash in tmp_path with ``mlflow-perfgate`` on PATH."""
    path = f"{shim(tmp_path / 'bin')}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PATH": path, **env})


@pytest.mark.slow
def test_the_tour_s_comparison_runs_as_written(sqlite_uri, tmp_path):
    tour, = blocks(doc_section("README.md", "A five-minute tour"), "bash")
    assert blocks(doc_section("tutorial.md", "One comparison"), "bash") == [tour]  # one tour, two pages
    completed = _bash(tour, tmp_path)
    out = completed.stdout
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert "decision run: " in out and "see it: mlflow ui --backend-store-uri" in out, out[-3000:]
    code = int(out.strip().splitlines()[-1].removeprefix("exit code "))
    assert code in (0, 1, 3)  # accept, reject or rerun: a decision was logged, whichever the machine gave
    frame = pg.decisions()
    assert len(frame) == 1 and frame.iloc[0]["changed_variable"] == "checkpoint"
    assert {0: "accept", 1: "reject", 3: "rerun"}[code] == frame.iloc[0]["decision"]


#: What makes a documented comparison take seconds here: two rounds of two measured steps, in this process.
_SHRINK = ["--set", "steps=2", "--set", "warmup=1", "--attempts", "2", "--min-valid-runs", "2",
           "--allow-undecidable", "--no-progress", "--in-process"]


@pytest.mark.slow
def test_the_attempts_page_s_commands_run_shrunk(sqlite_uri, capsys):
    block, = blocks(doc_section("explanation/attempts.md", "How attempts run"), "bash")
    commands = command_lines(block)
    assert [c[0] for c in commands] == ["diagnose", "compare", "compare", "compare", "compare"]
    for argv in commands:
        if argv[0] == "diagnose":
            code, out, err = run_cli(capsys, *argv, "--steps", "2", "--in-process")
            assert code == 0 and "plan" in out.lower(), err[-2000:]
            continue
        extra = ["--max-attempts", "3"] if "--until-decisive" in argv else []
        shrink = [a for a in _SHRINK if a != "--in-process"] if "lockstep" in argv else _SHRINK  # children per arm
        code, out, err = run_cli(capsys, *argv, *shrink, *extra)
        assert code in (0, 1, 3), (argv, err[-2000:])
        assert "decision run: " in out
    assert len(pg.decisions()) == 4


@pytest.mark.slow
def test_the_attempt_runner_example_runs():
    block, = blocks(doc_section("explanation/attempts.md", "The warm attempt server"), "python")
    scope: dict = {}
    exec(compile(block, "docs/explanation/attempts.md", "exec"), scope)
    results = scope["results"]
    assert len(results) == 4 and all(result.ok for result in results), [r.failure for r in results]


def test_the_condition_helpers_answer_as_the_comments_say():
    block, = blocks(doc_section("how-to/workload.md", "Conditions arrive as text"), "python")
    scope: dict = {}
    lines = block.splitlines()
    exec(lines[0], scope)  # the import
    checked = 0
    for line in filter(str.strip, lines[1:]):
        code, _, comment = line.partition("#")
        expected = comment.strip().split(" (")[0].split(";")[0].strip()
        assert eval(code, scope) == ast.literal_eval(expected), line
        checked += 1
    assert checked == 5


# --- Hugging Face, history, suites ------------------------------------------------------------------------

@pytest.mark.slow
def test_the_hugging_face_example_compares(sqlite_uri, tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    text = doc_section("how-to/huggingface.md")
    shell, = blocks(text, "bash")
    source, = blocks(text, "python")
    assert source.startswith("# mypkg/models.py\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "models.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    from mypkg.models import make

    workload = make({"input_shape": "2,16", "batch_size": 2})
    assert type(workload).__name__ == "HFWorkload" and workload.model is not None
    argv, = command_lines(shell)
    assert argv[argv.index("--workload") + 1] == "hf:mypkg.models:tiny_gpt2"
    code, out, err = run_cli(capsys, *argv, *_SHRINK)
    assert code in (0, 1, 3), err[-3000:]
    row = pg.decisions().iloc[0]
    assert (row["changed_variable"], row["objective"]) == ("checkpoint", "memory")


def test_the_history_commands_run(sqlite_uri, capsys):
    block, = blocks(doc_section("how-to/history.md", "A benchmark's history"), "bash")
    listing, by_key, by_conditions = command_lines(block)
    conditions = {"model": "TinyLM", "input_shape": "4,128", "batch_size": 4, "dtype": "fp32", "device": "cpu",
                  "repeats": 3, "measurement_method": "wall_ms"}
    for index, revision in enumerate(("a" * 40, "b" * 40, "c" * 40)):
        for value in (100.0, 101.0, 99.5):
            pg.log_attempt(f"nightly-{index}", "baseline", {**conditions, "revision": revision},
                           latency_ms=value * (1 + index / 10), quality=0.9, commit_time=1_700_000_000 + index)
    code, out, err = run_cli(capsys, *listing)
    assert code == 0 and len([line for line in out.splitlines() if "TinyLM" in line or "3" in line]) >= 1, err
    code, out, err = run_cli(capsys, *by_conditions, "--no-log")
    assert code == 0 and "revision" in out.lower(), out + err[-2000:]
    from mlflow_perfgate.cli import cli

    with cli.commands["history"].make_context("history", by_key[1:]):  # another store's key: parsed
        pass


def test_the_bisect_workload_sketch_finds_its_worktree(tmp_path, monkeypatch):
    block, = blocks(doc_section("how-to/history.md", "Bisect"), "python")
    scope: dict = {}
    exec(compile(block, "docs/how-to/history.md", "exec"), scope)
    sha = "d" * 40
    (tmp_path / sha).mkdir()
    monkeypatch.setenv("MLFLOW_PERFGATE_WORKTREES", str(tmp_path))
    assert scope["make"]({"revision": sha}) is None  # the sketch's body is yours: it found the checkout
    assert scope["revision_worktree"]({"revision": sha}) == tmp_path / sha


def test_the_suite_commands_and_file_are_valid(sqlite_uri, tmp_path, monkeypatch, capsys):
    text = doc_section("how-to/suites.md", "Suites and pytest")
    shell, = blocks(text, "bash")
    suite_file, = blocks(text, "toml")
    from mlflow_perfgate.suite import parse_suite

    spec = parse_suite(tomllib.loads(suite_file), source="docs/how-to/suites.md")  # every key checked
    assert spec.name == "nightly-cpu" and [e.name for e in spec.entries] == ["checkpointing", "bf16", "pr-42"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.toml").write_text(suite_file)
    run, evaluate, listing = command_lines(shell)
    from mlflow_perfgate.cli import cli

    for argv in (run, evaluate):
        with cli.commands["suite"].commands[argv[1]].make_context(argv[1], argv[2:]):
            pass  # parsed: running them takes the suite's full comparisons
    code, out, err = run_cli(capsys, *listing)
    assert code == 0, err


@pytest.mark.slow
def test_the_suite_python_examples_run(sqlite_uri, tmp_path, monkeypatch, capsys):
    first, second = blocks(doc_section("how-to/suites.md", "From Python"), "python")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.toml").write_text(
        '[suite]\nname = "docs"\n\n[defaults]\nattempts = 2\nsupervised = false\nmode = "non_regression"\n'
        'set = {input_shape = "2,16", steps = 2, warmup = 1}\nthresholds = {min_valid_runs = 2}\n\n'
        '[[entry]]\nname = "checkpointing"\nchange = {checkpoint = true}\n')
    exec(compile(first, "docs/how-to/suites.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.split()[0] in ("accept", "reject", "rerun") and out.endswith("['checkpointing']")
    exec(compile(second, "docs/how-to/suites.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("reject [('pr-42', 'reject', ") and "('pr-43', 'accept'" in out
