"""The console script's entry (``cli.entry``): the exit status and output of ``main``, its exit
handlers run, and the interpreter's teardown skipped only when no other thread is alive."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _entry(prelude: str, *argv: str) -> subprocess.CompletedProcess:
    script = ("import atexit, sys, threading, time\n"
              "from mlflow_perfgate import cli\n"
              "atexit.register(lambda: print('exit handler ran', flush=True))\n"
              f"{prelude}\n"
              f"sys.argv = ['mlflow-perfgate', *{list(argv)!r}]\n"
              "cli.entry()\n"
              "print('not reached')\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("prelude", ["", "threading.Thread(target=time.sleep, args=(0.3,)).start()"],
                         ids=["alone", "beside-a-thread"])
def test_entry_keeps_the_status_the_output_and_the_exit_handlers(prelude):
    helped = _entry(prelude, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: mlflow-perfgate") and "compare" in helped.stdout
    assert helped.stdout.rstrip().endswith("exit handler ran") and "not reached" not in helped.stdout
    wrong = _entry(prelude, "compare", "--no-such-option")
    assert wrong.returncode == 2 and "No such option" in wrong.stderr
    assert "exit handler ran" in wrong.stdout


def test_entry_says_a_text_exit_status_and_ends_1():
    said = _entry("cli._main.main = lambda: sys.exit('stopped: a reason')")  # the entry's own room
    assert said.returncode == 1 and said.stderr.strip() == "stopped: a reason"
    assert "exit handler ran" in said.stdout


def test_python_dash_m_runs_the_entry():
    helped = subprocess.run([sys.executable, "-m", "mlflow_perfgate", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: mlflow-perfgate")
