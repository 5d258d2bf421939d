"""The gate against a tracking server with MLflow's basic authentication (``--app-name basic-auth``).

One real server per module, on a free loopback port, with its own user store. Credentials go
where MLflow reads them: ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``.

- right credentials: ``record`` then ``evaluate`` work, with the documented exit codes;
- a wrong password, or none: ``record``, ``evaluate`` and ``decisions`` exit 2 with one line on
  stderr and no traceback, and nothing is written;
- a user with READ permission only: reading works, writing exits 2 with one line, and an
  ``evaluate`` of a group logged by the admin leaves no partial decision (no decision run, no
  attempt re-parented);
- no password ever reaches a param, a tag, a decision artifact or the local journal.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main

from conftest import start_mlflow_server, stop_server
from helpers import BASELINE_MS, CANDIDATE, CANDIDATE_MS, CONDITIONS

pytestmark = [pytest.mark.server, pytest.mark.slow]

ADMIN = "admin"
ADMIN_PASSWORD = f"Admin-{secrets.token_hex(12)}"
READER = "reader"
READER_PASSWORD = f"Reader-{secrets.token_hex(12)}"
WRONG_PASSWORD = f"Wrong-{secrets.token_hex(12)}"
PASSWORDS = (ADMIN_PASSWORD, READER_PASSWORD, WRONG_PASSWORD)
SHARED_EXPERIMENT = "auth-shared"
SHARED_GROUP = "auth-shared-group"
SETS = [f"--set={k}={v}" for k, v in {**CONDITIONS, "input_shape": "4,128"}.items() if k != "checkpoint"]
CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


@contextlib.contextmanager
def credentials(username: str | None, password: str | None):
    """Run the body with exactly these credentials in the environment (None: unset)."""
    with mock.patch.dict(os.environ):
        for name in CREDENTIAL_VARS:
            os.environ.pop(name, None)
        if username is not None:
            os.environ["MLFLOW_TRACKING_USERNAME"] = username
        if password is not None:
            os.environ["MLFLOW_TRACKING_PASSWORD"] = password
        yield


def as_admin():
    return credentials(ADMIN, ADMIN_PASSWORD)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """A basic-auth tracking server; the admin and a READ-only user; a group logged by the admin."""
    root = tmp_path_factory.mktemp("auth-server")
    config = root / "basic_auth.ini"
    config.write_text(
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = sqlite:///{root}/auth.db\n"
        f"admin_username = {ADMIN}\n"
        f"admin_password = {ADMIN_PASSWORD}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # cache successful credential checks (a PBKDF2 hash per request is slow on 2 cores);
        # wrong credentials are never cached, so every refusal below is a real check
        "auth_cache_ttl_seconds = 300\n",
        encoding="utf-8",
    )
    env = {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16)}
    with credentials(None, None):  # the server itself must not see client credentials
        process, url = start_mlflow_server(root, extra_args=("--app-name", "basic-auth"), env=env)
    try:
        from mlflow.server.auth.client import AuthServiceClient

        with as_admin(), mock.patch.dict(os.environ, {"MLFLOW_TRACKING_URI": url,
                                                      "MLFLOW_PERFGATE_JOURNAL": str(root / "journal.jsonl")}):
            AuthServiceClient(url).create_user(READER, READER_PASSWORD)
            for value in BASELINE_MS:
                pg.log_attempt(SHARED_GROUP, "baseline", CONDITIONS, latency_ms=value, quality=0.9,
                               experiment_name=SHARED_EXPERIMENT)
            for value in CANDIDATE_MS:
                pg.log_attempt(SHARED_GROUP, "candidate", CANDIDATE, latency_ms=value, quality=0.9,
                               experiment_name=SHARED_EXPERIMENT)
        yield url
    finally:
        stop_server(process)


@pytest.fixture
def server(auth_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", auth_server)
    monkeypatch.setenv("HOME", os.getcwd())  # no ~/.mlflow/credentials can lend credentials
    for name in CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    return auth_server


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def record_argv(group: str, arm: str, latency: float, experiment: str, *extra: str) -> list[str]:
    return ["record", "--group", group, "--arm", arm, *SETS, f"--set=checkpoint={arm == 'candidate'}",
            f"--latency-ms={latency}", "--quality=0.9", "--experiment", experiment, *extra]


def assert_one_line_error(code: int, err: str, *needles: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    line = lines[0]
    assert line.startswith("Error: ")
    for needle in needles:
        assert needle in line, line
    for password in PASSWORDS:
        assert password not in line
    return line


def experiment_runs(experiment: str) -> list:
    with as_admin():
        client = MlflowClient()
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return []
        return client.search_runs([found.experiment_id], run_view_type=ViewType.ALL, max_results=50000)


def group_state(experiment: str, group: str) -> dict:
    """What the admin sees of a group: its attempts (id -> parent) and its decision runs."""
    runs = experiment_runs(experiment)
    attempts = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in runs
                if r.data.tags.get("perfgate.kind") == "attempt" and r.data.tags.get("perfgate.group") == group}
    decisions = [r.info.run_id for r in runs if r.data.tags.get("perfgate.kind") == "decision"
                 or r.info.run_name.startswith("decision")]
    return {"attempts": attempts, "decisions": decisions, "runs": len(runs)}


def test_record_then_evaluate_with_credentials(server, capsys, monkeypatch):
    experiment = f"auth-ok-{time.time_ns()}"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    for value in BASELINE_MS:
        code, out, err = run_cli(capsys, *record_argv("ok", "baseline", value, experiment))
        assert code == 0 and len(out.strip()) == 32, err
    for value in CANDIDATE_MS:
        code, out, err = run_cli(capsys, *record_argv("ok", "candidate", value, experiment))
        assert code == 0, err
    code, out, err = run_cli(capsys, "evaluate", "--group", "ok", "--experiment", experiment)
    assert code == 0 and "ACCEPT" in out, err
    code, out, err = run_cli(capsys, "evaluate", "--group", "ok", "--experiment", experiment,
                             "--min-improvement", "0.5")
    assert code == 1 and "REJECT" in out, err
    code, out, err = run_cli(capsys, "decisions", "--experiment", experiment, "--format", "json")
    assert code == 0, err
    assert [row["decision"] for row in json.loads(out)] == ["reject", "accept"]
    state = group_state(experiment, "ok")
    assert len(state["attempts"]) == 10 and len(state["decisions"]) == 2


def test_console_script_with_credentials_from_the_environment(server, tmp_path):
    """The real entry point, in a fresh process: credentials come from the environment only."""
    experiment = f"auth-proc-{time.time_ns()}"
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARS}
    argv = [sys.executable, "-m", "mlflow_perfgate", *record_argv("proc", "baseline", 100, experiment)]
    good = subprocess.run(argv, capture_output=True, text=True, timeout=180,
                          env={**env, "MLFLOW_TRACKING_USERNAME": ADMIN, "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD})
    assert good.returncode == 0 and len(good.stdout.strip()) == 32, good.stderr
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=180,
                         env={**env, "MLFLOW_TRACKING_USERNAME": ADMIN, "MLFLOW_TRACKING_PASSWORD": WRONG_PASSWORD})
    assert_one_line_error(bad.returncode, bad.stderr, "401")
    assert bad.stdout == ""
    assert len(group_state(experiment, "proc")["attempts"]) == 1


COMMANDS = {
    "record": lambda: record_argv(SHARED_GROUP, "candidate", 50, SHARED_EXPERIMENT),
    "evaluate": lambda: ["evaluate", "--group", SHARED_GROUP, "--experiment", SHARED_EXPERIMENT],
    "decisions": lambda: ["decisions", "--experiment", SHARED_EXPERIMENT],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("who", ["wrong-password", "no-credentials", "unknown-user"])
def test_bad_credentials_exit_2_with_one_line_and_write_nothing(server, capsys, command, who):
    before = group_state(SHARED_EXPERIMENT, SHARED_GROUP)
    user, password = {"wrong-password": (ADMIN, WRONG_PASSWORD), "no-credentials": (None, None),
                      "unknown-user": ("nobody", WRONG_PASSWORD)}[who]
    with credentials(user, password):
        code, out, err = run_cli(capsys, *COMMANDS[command]())
    assert_one_line_error(code, err, "401")
    assert out == ""
    after = group_state(SHARED_EXPERIMENT, SHARED_GROUP)
    assert after == before  # no attempt, no decision run, no re-parenting


def test_read_only_user_reads_but_cannot_write(server, capsys):
    before = group_state(SHARED_EXPERIMENT, SHARED_GROUP)
    assert len(before["attempts"]) == 10 and before["decisions"] == []
    with credentials(READER, READER_PASSWORD):
        code, out, err = run_cli(capsys, *COMMANDS["record"]())
        assert_one_line_error(code, err, "403")
        # MLflow's model: any authenticated user may create an experiment, and manages it
        own = f"reader-own-{time.time_ns()}"
        code, out, err = run_cli(capsys, *record_argv("r", "baseline", 1, own))
        assert code == 0 and len(out.strip()) == 32, err
        code, out, err = run_cli(capsys, *COMMANDS["evaluate"]())
        assert_one_line_error(code, err, "403")
        assert out == ""
        code, out, err = run_cli(capsys, "evaluate", "--group", SHARED_GROUP, "--experiment", SHARED_EXPERIMENT,
                                 "--format", "json")
        assert_one_line_error(code, err, "403")
        code, out, err = run_cli(capsys, *COMMANDS["decisions"]())
        assert code == 0 and out.strip() == "no decisions", err  # READ is enough to read
    after = group_state(SHARED_EXPERIMENT, SHARED_GROUP)
    assert after == before
    assert len(group_state(own, "r")["attempts"]) == 1
    assert all(parent is None for parent in after["attempts"].values())  # nothing re-parented


def test_no_password_in_any_param_tag_artifact_or_journal(server, capsys, monkeypatch, tmp_path):
    experiment = f"auth-secret-{time.time_ns()}"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    for value in BASELINE_MS:
        assert run_cli(capsys, *record_argv("secret", "baseline", value, experiment))[0] == 0
    for value in CANDIDATE_MS:
        assert run_cli(capsys, *record_argv("secret", "candidate", value, experiment))[0] == 0
    code, _, err = run_cli(capsys, "evaluate", "--group", "secret", "--experiment", experiment)
    assert code == 0, err
    with credentials(READER, READER_PASSWORD):
        run_cli(capsys, *record_argv("secret", "baseline", 1, experiment))
    with credentials(ADMIN, WRONG_PASSWORD):
        run_cli(capsys, "evaluate", "--group", "secret", "--experiment", experiment)

    with as_admin():
        client = MlflowClient()
        experiments = client.search_experiments(view_type=ViewType.ALL)
        runs = client.search_runs([e.experiment_id for e in experiments], run_view_type=ViewType.ALL,
                                  max_results=50000)
        assert len(runs) >= 11
        texts = []
        for run in runs:
            texts += [f"{k}={v}" for k, v in run.data.params.items()]
            texts += [f"{k}={v}" for k, v in run.data.tags.items()]
            texts += [run.info.run_name or ""]
            if run.data.tags.get("perfgate.kind") == "decision":
                path = client.download_artifacts(run.info.run_id, "perfgate/decision.json", str(tmp_path))
                texts.append(Path(path).read_text(encoding="utf-8"))
        texts += [f"{e.name} {e.tags}" for e in experiments]
    journal = Path(".perfgate/journal.jsonl")
    if journal.exists():
        texts.append(journal.read_text(encoding="utf-8"))
    blob = "\n".join(texts)
    for password in PASSWORDS:
        assert password not in blob


def test_a_rejected_record_leaves_nothing_pending(server, capsys, monkeypatch):
    """An attempt the server refused (401) is not kept for 'sync': the user, told it failed, records
    again; evaluate in the same directory decides, and sync writes nothing behind the user's back."""
    experiment = f"auth-journal-{time.time_ns()}"
    with credentials(ADMIN, WRONG_PASSWORD):
        code, _, err = run_cli(capsys, *record_argv("j", "baseline", 100, experiment))
        assert_one_line_error(code, err, "401")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    for value in BASELINE_MS:  # the user, told it failed, records again with the right password
        assert run_cli(capsys, *record_argv("j", "baseline", value, experiment))[0] == 0
    for value in CANDIDATE_MS:
        assert run_cli(capsys, *record_argv("j", "candidate", value, experiment))[0] == 0
    code, out, err = run_cli(capsys, "evaluate", "--group", "j", "--experiment", experiment)
    assert code == 0 and "ACCEPT" in out, out + err
    code, out, _ = run_cli(capsys, "sync")
    assert out.startswith("0 sent"), out  # the rejected attempt is not written behind the user's back
    assert len(group_state(experiment, "j")["attempts"]) == 10


def test_the_docs_credentials_example_runs_against_a_basic_auth_server(server, tmp_path):
    """docs/how-to/authentication.md's block as written, its server the test's, its user a new one."""
    from mlflow.server.auth.client import AuthServiceClient

    from helpers import blocks, doc_section, shim

    block, = blocks(doc_section("how-to/authentication.md"), "bash")
    user = "ci-perfgate"
    assert f"export MLFLOW_TRACKING_USERNAME={user}\n" in block
    password = f"Ci-{time.time_ns()}"
    with as_admin(), mock.patch.dict(os.environ, {"MLFLOW_TRACKING_URI": server}):
        try:
            AuthServiceClient(server).create_user(user, password)
        except Exception:  # created by an earlier run of this module's server: set its password
            AuthServiceClient(server).update_user_password(user, password)
    script = block.replace("https://mlflow.example.com", server)
    experiment = f"auth-docs-{time.time_ns()}"  # a new experiment: its creator may write to it
    env = {**{k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARS},
           "PERFGATE_MLFLOW_PASSWORD": password, "MLFLOW_EXPERIMENT_NAME": experiment,
           "PATH": f"{shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"}
    completed = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert len(group_state(experiment, "my-change")["attempts"]) == 1
    assert password not in completed.stdout + completed.stderr
    wrong = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**env, "PERFGATE_MLFLOW_PASSWORD": WRONG_PASSWORD})
    assert_one_line_error(wrong.returncode, wrong.stderr, "401")
