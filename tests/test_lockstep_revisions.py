"""A change of code (``revision``) or of environment (``python``) as the variable, in lockstep rounds.

``compare`` as users type it, in a fresh process, from a real git repository whose revisions differ by a
known busy wait per step, and from a second virtual environment; bad input refused in one line (exit 2)
before anything is logged. Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import TAG

from helpers import BUSY_SETS, busy_bench, busy_repository, git

COMPARE = [sys.executable, "-m", "mlflow_perfgate", "compare", "--workload", "bench:make", *BUSY_SETS, "--no-progress",
           "--attempts", "6", "--allow-undecidable"]


def run(argv, cwd, uri):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MLFLOW_TRACKING_URI": uri})


def attempts_of(uri):
    client = MlflowClient(tracking_uri=uri)
    return client.search_runs(["0"], f"tags.\"{TAG.KIND}\" = 'attempt'", max_results=1000)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.slow
def test_a_revision_that_slows_the_step_is_rejected_each_revision_running_its_own_code(tmp_path, sqlite_uri):
    repo = tmp_path / "repo"
    base, head = busy_repository(repo, [2.0, 4.0])  # the head spins twice as long per step
    done = run([*COMPARE, "--set", "revision=main~1", "--change", "revision=main"], repo, sqlite_uri)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "lockstep" in done.stdout  # the configuration line says how it ran
    attempts = attempts_of(sqlite_uri)
    assert len(attempts) == 12
    by_arm = {arm: [a for a in attempts if a.data.tags[TAG.ARM] == arm] for arm in ("baseline", "candidate")}
    # the revisions recorded as full shas, and each arm's fingerprint its own revision's
    assert {a.data.params["revision"] for a in by_arm["baseline"]} == {base}
    assert {a.data.params["revision"] for a in by_arm["candidate"]} == {head}
    assert {a.data.tags[TAG.ENV_PREFIX + "git_revision"] for a in by_arm["candidate"]} == {head}
    assert {a.data.tags[TAG.ENV_PREFIX + "git_revision"] for a in by_arm["baseline"]} == {base}
    # the fastest step of each arm (a busy-wait: a neighbour can only add to a step, never take from it)
    ratio = (min(a.data.metrics["fastest_step_ms"] for a in by_arm["candidate"])
             / min(a.data.metrics["fastest_step_ms"] for a in by_arm["baseline"]))
    assert 1.6 < ratio < 2.5, ratio  # 4 ms against 2 ms: each child ran its own revision's bench.py
    # the worktrees this comparison made are gone again
    assert not any((repo / ".git" / "perfgate-worktrees").glob("*"))
    assert "perfgate-worktrees" not in git(repo, "worktree", "list")


@pytest.mark.slow
def test_a_revision_that_changes_nothing_measurable_passes_the_non_regression_gate(tmp_path, sqlite_uri):
    repo = tmp_path / "repo"
    busy_repository(repo, [2.0, 2.0])  # the head only changes notes.txt
    done = run([*COMPARE, "--set", "revision=main~1", "--change", "revision=main", "--mode", "non_regression",
                "--keep-worktrees"], repo, sqlite_uri)
    assert done.returncode in (0, 3), done.stdout + done.stderr  # never a reject of a change that does nothing
    assert "REJECT" not in done.stdout
    assert len(list((repo / ".git" / "perfgate-worktrees").glob("*"))) == 2  # kept, as asked


@pytest.mark.slow
def test_the_working_tree_is_an_arm_and_a_group_whose_tree_changed_is_refused(tmp_path, sqlite_uri):
    """--change revision=working-tree runs that arm from the checkout as it is (an uncommitted change
    that doubles the step, rejected), recorded as working-tree with HEAD and a digest of the diff in its
    fingerprint; resumed after the tree changed, the group holds two code states in one arm: refused."""
    repo = tmp_path / "repo"
    base, = busy_repository(repo, [2.0])
    (repo / "bench.py").write_text(busy_bench("4.0"))  # not committed
    argv = [*COMPARE, "--set", "revision=main", "--change", "revision=working-tree", "--group", "wt"]
    done = run(argv, repo, sqlite_uri)
    assert done.returncode == 1, done.stdout + done.stderr
    by_arm = {arm: [a for a in attempts_of(sqlite_uri) if a.data.tags[TAG.ARM] == arm] for arm in ("baseline",
                                                                                                "candidate")}
    assert {a.data.params["revision"] for a in by_arm["candidate"]} == {"working-tree"}
    assert {a.data.params["revision"] for a in by_arm["baseline"]} == {base}
    state, = {a.data.tags[TAG.ENV_PREFIX + "git_revision"] for a in by_arm["candidate"]}
    assert state.startswith(base + "+") and len(state) == len(base) + 13  # HEAD and the uncommitted diff's digest
    (repo / "bench.py").write_text(busy_bench("2.0"))  # the tree changes; the group goes on
    done = run([*argv, "--resume"], repo, sqlite_uri)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "git_revision" in done.stderr and "within the candidate" in done.stderr, done.stderr


def test_bad_revisions_and_interpreters_are_refused_before_anything_is_logged(tmp_path, sqlite_uri, capsys,
                                                                              monkeypatch):
    repo = tmp_path / "repo"
    busy_repository(repo, [None, 2.0])  # the first commit has no bench.py
    monkeypatch.chdir(repo)
    cases = [
        (["--set", "revision=main", "--change", "revision=no-such-branch"],
         "the candidate's revision 'no-such-branch' is not a commit git can resolve"),
        (["--set", "revision=main~1", "--change", "revision=main"],
         "the baseline's revision"),  # its worktree holds no bench.py: the factory cannot be imported there
        (["--set", f"python={sys.executable}", "--change", "python=/no/such/python"],
         "the candidate's python '/no/such/python': no such file"),
        (["--set", f"python={sys.executable}", "--change", "python=no-such-python-on-path"],
         "the candidate's python 'no-such-python-on-path' is not on PATH"),
        (["--set", "revision=main", "--change", "revision=main~1", "--in-process"],
         "--in-process"),
    ]
    for argv, said in cases:
        code, out, err = run_cli(capsys, "compare", "--workload", "bench:make", *BUSY_SETS, "--no-progress", *argv)
        assert code == 2, (argv, out, err)
        line = err.strip().splitlines()[-1]
        assert said in line and line.endswith("nothing was run or logged"), (argv, err)
        assert not attempts_of(sqlite_uri)
    # outside any git repository
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, _, err = run_cli(capsys, "compare", "--workload", "bench:make", *BUSY_SETS, "--set", "revision=abc",
                           "--change", "revision=def", "--no-progress")
    assert code == 2 and "is in none: run from the repository's checkout" in err, err
    assert not attempts_of(sqlite_uri)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A new virtual environment with nothing installed: no torch."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return str(where / "bin" / "python")


@pytest.fixture(scope="module")
def other_python(tmp_path_factory) -> str:
    """A second virtual environment that sees this one's packages (torch) through a ``.pth`` file, plus a
    package of its own, ``labeffect``, that makes the benchmark's step spin 2 ms longer."""
    where = tmp_path_factory.mktemp("other") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "this_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    Path(purelib, "labeffect.py").write_text("EXTRA_MS = 2.0\n")
    return str(python)


def test_an_interpreter_without_torch_is_refused_naming_the_arm(tmp_path, sqlite_uri, capsys, bare_python):
    (tmp_path / "bench.py").write_text("def make(conditions):\n    raise AssertionError('never built')\n")
    code, _, err = run_cli(capsys, "compare", "--workload", "bench:make", *BUSY_SETS, "--no-progress",
                           "--set", f"python={sys.executable}", "--change", f"python={bare_python}")
    assert code == 2, err
    assert f"the candidate's python ({bare_python}): {bare_python} cannot import torch" in err
    assert "pip install torch" in err
    assert not attempts_of(sqlite_uri)


#: The benchmark of the environment comparison: 2 ms a step, and the spin its environment's ``labeffect`` adds.
_ENV_BENCH = busy_bench("2.0 + EXTRA_MS", prelude="try:\n    from labeffect import EXTRA_MS\nexcept ImportError:\n"
                                                   "    EXTRA_MS = 0.0\n")


@pytest.mark.slow
def test_an_environment_whose_package_slows_the_step_is_rejected_each_arm_in_its_interpreter(tmp_path, sqlite_uri,
                                                                                            other_python):
    (tmp_path / "bench.py").write_text(_ENV_BENCH)
    done = run([*COMPARE, "--set", f"python={sys.executable}", "--change", f"python={other_python}"], tmp_path,
               sqlite_uri)
    assert done.returncode == 1, done.stdout + done.stderr
    attempts = attempts_of(sqlite_uri)
    assert len(attempts) == 12 and all(a.data.tags[TAG.OK] == "true" for a in attempts)
    latency = {arm: min(a.data.metrics["fastest_step_ms"] for a in attempts if a.data.tags[TAG.ARM] == arm)
               for arm in ("baseline", "candidate")}  # a busy-wait's fastest step: what no neighbour can shorten
    assert 1.6 < latency["candidate"] / latency["baseline"] < 2.5, latency  # 4 ms against 2 ms
    assert {a.data.params["python"] for a in attempts if a.data.tags[TAG.ARM] == "candidate"} == {other_python}
    assert {a.data.tags[TAG.ENV_PREFIX + "torch"] for a in attempts} == {__import__("torch").__version__}
