"""Shared fixtures: a real SQLite store per test and one real ``mlflow server`` per session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Test workloads are named ``tests.workloads_fixtures.<module>:<factory>``; attempts import them in
# child processes whose working directory is a test's tmp_path: the repository must be on the path.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, process: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def start_mlflow_server(root: Path, port: int | None = None, extra_args: tuple = (),
                        env: dict | None = None, backend_uri: str | None = None):
    """Start ``mlflow server`` on a loopback port over a SQLite store in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    backend_uri = backend_uri or f"sqlite:///{root}/server.db"
    log = open(root / "server.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", backend_uri, "--artifacts-destination", str(root / "artifacts"),
         "--workers", "1", *extra_args],
        # no job-runner processes: the tests need the tracking API only, and 2 cores are few
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(env or {})},
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/health", process)
    except Exception:
        stop_server(process)
        raise RuntimeError((root / "server.log").read_text()[-3000:])
    return process, url


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, 15)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test sees another's tracking URI, experiment or CI summary; cwd is the test's own."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID",
                 "GITHUB_STEP_SUMMARY", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    monkeypatch.delenv("MLFLOW_PERFGATE_JOURNAL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the default journal, per test
    monkeypatch.chdir(tmp_path)
    from mlflow_perfgate.tracking import _client

    _client._DOWN.clear()  # a server found down in one test is not down in the next
    _client._UP.clear()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory) -> Path:
    """An empty, fully migrated MLflow SQLite file: copying it spares each test the migrations."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlruns.sqlite"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


def fresh_sqlite(tmp_path: Path, template: Path) -> str:
    target = tmp_path / "mlruns.sqlite"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


@pytest.fixture
def sqlite_uri(tmp_path, monkeypatch, _migrated_sqlite) -> str:
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """One real tracking server for the session, on a free loopback port."""
    process, url = start_mlflow_server(tmp_path_factory.mktemp("server"))
    yield url
    stop_server(process)


@pytest.fixture(params=["sqlite", "http"])
def tracking_uri(request, monkeypatch, tmp_path) -> str:
    """Each test using this runs against a SQLite file and against the HTTP server."""
    if request.param == "sqlite":
        uri = fresh_sqlite(tmp_path, request.getfixturevalue("_migrated_sqlite"))
    else:
        uri = request.getfixturevalue("mlflow_server")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # a fresh experiment per test keeps tests apart on the shared server
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", f"t-{request.node.name}-{time.time_ns()}")
    return uri


@pytest.fixture(scope="module")
def fork_runner():
    """One warm fork-runner server per test module: it must survive all of the module's tests."""
    from mlflow_perfgate import workloads

    if not workloads.fork_available():
        pytest.skip("the fork runner needs os.fork on Linux")
    with workloads.attempt_runner("fork") as runner:
        yield runner


@pytest.fixture(params=["spawn", "fork"])
def runner(request):
    """``run_attempt(runner=...)`` under each runner: the default (a spawned child) or the warm fork runner."""
    return None if request.param == "spawn" else request.getfixturevalue("fork_runner")
