"""The README as a newcomer follows it: its examples run as written, against a SQLite store in tmp_path."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.errors import InputError, SingleVariableError
from mlflow_perfgate.harness import compare, diagnose
from mlflow_perfgate.tracking import TAG

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The README's text under a heading, up to the next heading of its level or above (code blocks skipped)."""
    lines, found, level, inside, code = README.splitlines(keepends=True), None, 0, [], False
    for line in lines:
        if line.startswith("```"):
            code = not code
        heading = None if code else re.match(r"^(#+) (.*)$", line.rstrip("\n"))
        if found and heading and len(heading.group(1)) <= level:
            break
        if found:
            inside.append(line)
        elif heading and heading.group(2) == title:
            found, level = True, len(heading.group(1))
    assert found, f"README has no section {title!r}"
    return "".join(inside)


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def shim(folder: Path) -> Path:
    """``mlflow-perfgate`` on PATH, running this checkout (``python -m mlflow_perfgate``)."""
    folder.mkdir()
    script = folder / "mlflow-perfgate"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mlflow_perfgate "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.mark.slow
def test_use_it_examples_run_in_order_as_written(sqlite_uri, tmp_path, capsys):
    text = section("Use it")
    python, shell = blocks(text, "python"), blocks(text, "bash")
    assert len(python) == 1 and len(shell) == 1
    exec(compile(python[0], "README.md (Use it, python)", "exec"), {"__name__": "readme"})
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
    """The README's ``mybench.py``, written into tmp_path and importable (a variant when ``replace``)."""
    text = section("A workload of your own")
    source = next(block for block in blocks(text, "python") if block.startswith("# mybench.py"))
    if replace:
        assert replace[0] in source
        source = source.replace(*replace)
    name = "mybench" if replace is None else "mybench_ignores"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:make"


def _readme_command(command: str) -> tuple[dict, dict, list[str]]:
    """The ``--set`` conditions, the ``--change`` and the other words of a README command."""
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
    shell = blocks(section("A workload of your own"), "bash")[0]
    diagnose_command, compare_command = [line for line in shell.replace("\\\n", " ").splitlines()
                                         if line.startswith("mlflow-perfgate")]
    sets, _, rest = _readme_command(diagnose_command)
    assert f"--workload {workload}" in " ".join(rest)
    report = diagnose(workload, sets, steps=2, capacity_mib=float(rest[rest.index("--capacity-mib") + 1]))
    assert report["plan"]["changed_variable"] == "checkpoint" and report["objective"] == "memory"

    sets, change, rest = _readme_command(compare_command)
    assert change == {"checkpoint": "true"} and rest[rest.index("--objective") + 1] == "memory"
    # the README's comparison, shrunk: two attempts of two steps each, in this process
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
