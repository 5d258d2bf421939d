"""Small builders shared by the tracking tests."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

CONDITIONS = {
    "model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
    "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False,
}
CANDIDATE = {**CONDITIONS, "checkpoint": True}
BASELINE_MS = (100, 102, 99, 101, 100)
CANDIDATE_MS = (88, 90, 89, 91, 87)


def log_series(group, baseline_ms=BASELINE_MS, candidate_ms=CANDIDATE_MS, *, quality=(0.9, 0.895),
               conditions=CONDITIONS, candidate=CANDIDATE, **kwargs):
    """Log the specification's example series; returns the run ids."""
    import mlflow_perfgate as pg

    ids = [pg.log_attempt(group, "baseline", conditions, latency_ms=v, quality=quality[0], **kwargs)
           for v in baseline_ms]
    ids += [pg.log_attempt(group, "candidate", candidate, latency_ms=v, quality=quality[1], **kwargs)
            for v in candidate_ms]
    return ids


def all_runs(experiment_name=None):
    client = MlflowClient()
    if experiment_name is None:
        import os

        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if experiment_name:
        experiment = client.get_experiment_by_name(experiment_name)
        if experiment is None:
            return []
        ids = [experiment.experiment_id]
    else:
        ids = ["0"]
    return client.search_runs(ids, max_results=50000)


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (Linux: ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


#: Code a racer runs once it has imported what it needs: it says it is ready, then waits for the
#: go (the barrier's folder is its first argument, taken off ``sys.argv``). See :func:`start_racers`.
AT_BARRIER = (
    "import os as _os, sys as _sys, time as _time\n"
    "_barrier = _sys.argv.pop(1)\n"
    "open(_os.path.join(_barrier, f'ready-{_os.getpid()}'), 'w').close()\n"
    "while not _os.path.exists(_os.path.join(_barrier, 'go')):\n"
    "    _time.sleep(0.001)\n"
)


def start_racers(code: str, argvs: list[list[str]], barrier, *, env: dict, timeout_s: float = 240, **popen):
    """Start one ``python -c code`` per argv and release them together once every one is ready.

    A barrier, not a clock: however long the imports take, the race starts after the last
    racer reached :data:`AT_BARRIER` (a racer that dies first fails the test at once).
    """
    import subprocess
    import sys
    import time
    from pathlib import Path

    barrier = Path(barrier)
    barrier.mkdir(parents=True, exist_ok=True)
    processes = [subprocess.Popen([sys.executable, "-c", code, str(barrier), *argv], env=env, **popen)
                 for argv in argvs]
    deadline = time.monotonic() + timeout_s
    while len(list(barrier.glob("ready-*"))) < len(processes):
        dead = [p for p in processes if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            for process in processes:
                if process.poll() is None:
                    process.kill()
            raise AssertionError(f"racers never all got ready: {len(dead)} ended before the barrier"
                                 + (f" ({dead[0].communicate()[1]})" if dead and popen.get("stderr") else ""))
        time.sleep(0.01)
    (barrier / "go").touch()
    return processes


#: The bisect tests' benchmark: a step that sleeps its revision's ``bench.DELAY_S``.
BISECT_BENCH = "tests.workloads_fixtures.bisect_bench:make"
BISECT_SETS = [f"--set={k}={v}" for k, v in {"model": "bench", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32",
                                             "device": "cpu", "measurement_method": "sleep_ms", "warmup": 1,
                                             "steps": 3}.items()]


def git(repo, *args, env=None) -> str:
    import os
    import subprocess

    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def slowing_repository(repo, commits: int, slow_from: int, commit_time=None) -> list[str]:
    """A new git repository of ``commits`` commits whose ``bench.py`` makes a step three times slower
    from commit ``slow_from`` on; their shas, oldest first. ``commit_time(index)``: a commit's POSIX time."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    shas = []
    for index in range(commits):
        (repo / "bench.py").write_text(f"DELAY_S = {0.06 if index >= slow_from else 0.02}\n")
        (repo / "notes.txt").write_text(f"commit {index}\n")
        git(repo, "add", ".")
        when = None if commit_time is None else f"@{commit_time(index)} +0000"
        git(repo, "commit", "-q", "-m", f"commit {index}",
            env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when} if when else None)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


# --- the documentation: README.md and the site's pages under docs/ ---------------------------------

def doc_path(page: str):
    """``README.md``, or a page of the site by its path under ``docs/`` (``"how-to/ci.md"``)."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    return repo / page if page == "README.md" else repo / "docs" / page


def _headings(text: str):
    """``(line index, level, title)`` of each markdown heading outside code blocks."""
    import re

    found, code = [], False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            code = not code
            continue
        match = None if code else re.match(r"^(#+) (.*)$", line)
        if match:
            found.append((index, len(match.group(1)), match.group(2).strip()))
    return found


def doc_section(page: str, title: str | None = None) -> str:
    """A page's text under the heading ``title``, up to the next heading of its level or above
    (code blocks skipped); the whole page when ``title`` is None."""
    text = doc_path(page).read_text(encoding="utf-8")
    if title is None:
        return text
    lines = text.splitlines(keepends=True)
    headings = _headings(text)
    for position, (index, level, heading) in enumerate(headings):
        if heading == title:
            end = next((i for i, lv, _ in headings[position + 1:] if lv <= level), len(lines))
            return "".join(lines[index + 1:end])
    raise AssertionError(f"{page} has no section {title!r}")


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``text``, in order."""
    import re

    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def page_blocks(page: str) -> list[tuple[str, str, str]]:
    """``(nearest heading above, language, code)`` of every fenced code block of a page."""
    import re

    text = doc_path(page).read_text(encoding="utf-8")
    lines = text.splitlines()
    headings = {index: title for index, _, title in _headings(text)}
    found, index, heading = [], 0, ""
    while index < len(lines):
        line = lines[index]
        if index in headings:
            heading = headings[index]
        match = re.match(r"^```(\S*)\s*$", line)
        if match:
            end = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
            found.append((heading, match.group(1), "\n".join(lines[index + 1:end]) + "\n"))
            index = end
        index += 1
    return found


def shim(folder):
    """``mlflow-perfgate`` on PATH, running this checkout (``python -m mlflow_perfgate``)."""
    import shlex
    import stat
    import sys

    folder.mkdir()
    script = folder / "mlflow-perfgate"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mlflow_perfgate "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


def command_lines(block: str, program: str = "mlflow-perfgate") -> list[list[str]]:
    """The words of each command of a shell block that runs ``program`` (continuations joined,
    comments dropped)."""
    import shlex

    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == program:
            commands.append(words[1:])
    return commands


#: The conditions of ``busy_repository``'s benchmark (``--workload bench:make`` from the repository).
BUSY_SETS = [f"--set={k}={v}" for k, v in {"model": "busy", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32",
                                           "device": "cpu", "measurement_method": "wall_ms", "warmup": 1,
                                           "steps": 8}.items()]
_BUSY_BENCH = '''"""A benchmark whose step spins for a known time (a negative one: the step exits its process)."""
import os
import time
{prelude}

class Bench:
    def step(self):
        ms = {step_ms}
        if ms < 0:
            os._exit(3)
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass

    def quality(self):
        return 1.0


def make(conditions):
    return Bench()
'''


def busy_bench(step_ms: str, prelude: str = "") -> str:
    """The source of a ``bench.py`` (``make``, the factory) whose step spins ``step_ms`` milliseconds (a Python
    expression, after ``prelude``); a negative time exits the step's process with code 3."""
    return _BUSY_BENCH.format(step_ms=step_ms, prelude=prelude)


def busy_repository(repo, busy_ms: list[float | None]) -> list[str]:
    """A new git repository with one commit per entry of ``busy_ms``: its ``bench.py`` spins that many
    milliseconds per step (``None``: the commit has no ``bench.py``); the shas, oldest first."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    shas = []
    for index, busy in enumerate(busy_ms):
        bench = repo / "bench.py"
        if busy is None:
            if bench.exists():
                bench.unlink()
        else:
            bench.write_text(busy_bench(repr(busy)))
        (repo / "notes.txt").write_text(f"commit {index}\n")
        git(repo, "add", "-A", ".")
        git(repo, "commit", "-q", "-m", f"commit {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas
