"""Issue 28: nothing leaked, nothing meaningless.

- A password or token in the tracking URI (``http://user:PW@host``, ``?token=``) never reaches
  stdout, stderr, the journal or a run's tags and params: not on a 401 (a wrong one), not on a
  403, not when the server fails in the middle of a command (503 after a healthy /health, a lost
  answer). One real basic-auth ``mlflow server`` (test_auth's fixture), a FaultProxy in front.
- Newcomer mistakes are one line and exit 2, before MLflow would create anything: a misspelled
  store scheme, a read-only command on a store that does not exist (nothing is created), a
  workload module off the path (before any server or child starts), a wrong server URI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from mlflow_perfgate.cli import main
from mlflow_perfgate.tracking import _client, _journal
from mlflow_perfgate.tracking._redact import redact_text, redact_uri
from mlflow_perfgate.tracking._store import BUILTIN_SCHEMES, local_store_path, scheme_problem
from mlflow_perfgate.workloads._names import require_importable

from fault_proxy import FaultProxy
from helpers import BASELINE_MS, CANDIDATE_MS
from test_auth import (ADMIN, ADMIN_PASSWORD, CREDENTIAL_VARS, READER, READER_PASSWORD, SETS, SHARED_EXPERIMENT,
                       SHARED_GROUP, WRONG_PASSWORD, as_admin, auth_server)  # noqa: F401 - auth_server: a fixture

FIXED = ["--set=model=m", "--set=input_shape=4,8", "--set=batch_size=4", "--set=dtype=float32", "--set=device=cpu",
         "--set=measurement_method=wall", "--set=checkpoint=false"]


# --- the one redaction helper ---------------------------------------------------------------------

@pytest.mark.parametrize("uri, expected", [
    ("http://admin:s3cret@127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("https://tok3n@host/mlflow", "https://host/mlflow"),
    ("postgresql://u:p%40ss@db:5432/x", "postgresql://db:5432/x"),
    ("https://host/p?token=abc&x=1", "https://host/p?token=***&x=1"),
    ("https://host?access_token=abc;X-Amz-Signature=f00", "https://host?access_token=***;X-Amz-Signature=***"),
    ("sqlite:///mlflow.db", "sqlite:///mlflow.db"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_redact_uri(uri, expected):
    assert redact_uri(uri) == expected
    assert _client.redact_uri is redact_uri  # one helper, for messages and the journal alike


def test_redact_text_masks_uris_and_the_configured_secrets(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://admin:Pa%24%24word-42@h:5000?token=T0ken-123456")
    text = ("Error: http://admin:Pa%24%24word-42@h:5000?token=T0ken-123456 refused; the decoded Pa$$word-42 "
            "and the token T0ken-123456 alone; http://other:x@y/z")
    shown = redact_text(text)
    for secret in ("Pa%24%24word-42", "Pa$$word-42", "T0ken-123456", "other:x"):
        assert secret not in shown
    assert shown.startswith("Error: http://h:5000?token=*** refused") and "http://y/z" in shown


def test_journal_lines_carry_no_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(tmp_path / "j.jsonl"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://u:Secret-99999@h/x?token=Tok-99999")
    _journal.append({"attempt_id": "a1", "tracking_uri": "https://u:Secret-99999@h/x?token=Tok-99999"})
    _journal.mark_rejected("a1", "Error: https://u:Secret-99999@h/x?token=Tok-99999 said 401")
    text = (tmp_path / "j.jsonl").read_text()
    assert "Secret-99999" not in text and "Tok-99999" not in text
    assert [entry["type"] for entry in map(json.loads, text.splitlines())] == ["attempt", "rejected"]
    assert _journal.location_key("postgresql://u:pw@db/x?password=pw2") == "postgresql://db/x?password=***"


# --- credentials in the URI, against a real basic-auth server -------------------------------------

def _uri(base: str, user: str, password: str) -> str:
    return base.replace("http://", f"http://{user}:{password}@")


@pytest.fixture
def journal(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("MLFLOW_PERFGATE_JOURNAL", str(path))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.mlflow/credentials lends credentials
    for name in CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    return path


def cli(capfd, *argv) -> tuple[int, str, str]:
    """The command in this process; stdout and stderr at the file-descriptor level (loggers too)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capfd.readouterr()
    return exit_info.value.code, out, err


def record_argv(group: str, arm: str, latency: float, experiment: str) -> list[str]:
    return ["record", "--group", group, "--arm", arm, *SETS, f"--set=checkpoint={arm == 'candidate'}",
            f"--latency-ms={latency}", "--quality=0.9", "--experiment", experiment]


def jsonl(tmp_path: Path, group: str, experiment: str) -> str:
    path = tmp_path / f"{group}.jsonl"
    lines = [{"group": group, "arm": arm, "set": {"checkpoint": str(arm == "candidate")}, "latency_ms": value,
              "quality": 0.9, "experiment": experiment}
             for arm, values in (("baseline", BASELINE_MS), ("candidate", CANDIDATE_MS)) for value in values]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def assert_one_line(code: int, err: str, *needles: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("Error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def assert_error(code: int, err: str, *needles: str) -> str:
    """Exit 2, no traceback, the error on the last line (``record --from-jsonl`` says first what it wrote)."""
    assert code == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("Error: "), err
    for needle in needles:
        assert needle in line, line
    return line


def stored_texts(server: str, tmp_path: Path) -> str:
    """Every tag, param and run name of the server, and each decision's JSON artifact, as the admin sees them."""
    texts = []
    with as_admin():
        client = MlflowClient(tracking_uri=server)
        experiments = client.search_experiments(view_type=ViewType.ALL)
        for run in client.search_runs([e.experiment_id for e in experiments], run_view_type=ViewType.ALL,
                                      max_results=50000):
            texts += [f"{k}={v}" for k, v in {**run.data.params, **run.data.tags}.items()]
            texts.append(run.info.run_name or "")
            # (a decision run whose create's answer was lost holds no artifact: evaluate stopped there)
            if any(item.path == "perfgate/decision.json" for item in client.list_artifacts(run.info.run_id, "perfgate")):
                path = client.download_artifacts(run.info.run_id, "perfgate/decision.json", str(tmp_path))
                texts.append(Path(path).read_text(encoding="utf-8"))
    return "\n".join(texts)


def assert_nowhere(secret: str, outputs: list[str], journal: Path, server: str, tmp_path: Path) -> None:
    for text in outputs:
        assert secret not in text, text
    if journal.exists():
        assert secret not in journal.read_text(encoding="utf-8")
    assert secret not in stored_texts(server, tmp_path)


@pytest.mark.server
@pytest.mark.slow
def test_a_wrong_password_in_the_uri_is_never_printed_journaled_or_stored(auth_server, journal, tmp_path, capfd,
                                                                          monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", _uri(auth_server, ADMIN, WRONG_PASSWORD))
    commands = {
        "record": record_argv("leak-401", "baseline", 100, SHARED_EXPERIMENT),
        "record --from-jsonl": ["record", "--from-jsonl", jsonl(tmp_path, "leak-401", SHARED_EXPERIMENT), *SETS],
        "evaluate": ["evaluate", "--group", SHARED_GROUP, "--experiment", SHARED_EXPERIMENT],
        "decisions": ["decisions", "--experiment", SHARED_EXPERIMENT],
        "report": ["report", "--group", SHARED_GROUP, "--experiment", SHARED_EXPERIMENT],
        "reap": ["reap", "--older-than", "1h", "--experiment", SHARED_EXPERIMENT],
    }
    outputs = []
    for name, argv in commands.items():
        code, out, err = cli(capfd, *argv)
        line = assert_error(code, err, "401", auth_server)
        assert "requires a login" not in line, line  # credentials were given, in the URI
        assert "written in MLFLOW_TRACKING_URI" in line and repr(ADMIN) in line, (name, line)
        outputs += [out, err]
    journaled = [json.loads(line) for line in journal.read_text().splitlines()]
    assert {entry["type"] for entry in journaled} >= {"rejected"}  # the journal said why, and only that
    assert_nowhere(WRONG_PASSWORD, outputs, journal, auth_server, tmp_path)


@pytest.mark.server
@pytest.mark.slow
def test_a_right_password_in_the_uri_is_never_printed_on_a_403(auth_server, journal, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", _uri(auth_server, READER, READER_PASSWORD))
    outputs = []
    for argv in (record_argv(SHARED_GROUP, "candidate", 50, SHARED_EXPERIMENT),
                 ["evaluate", "--group", SHARED_GROUP, "--experiment", SHARED_EXPERIMENT]):
        code, out, err = cli(capfd, *argv)
        assert_one_line(code, err, "403", repr(READER), auth_server)
        outputs += [out, err]
    code, out, err = cli(capfd, "decisions", "--experiment", SHARED_EXPERIMENT)  # reading is allowed
    assert code == 0, err
    outputs += [out, err]
    assert_nowhere(READER_PASSWORD, outputs, journal, auth_server, tmp_path)


@pytest.mark.server
@pytest.mark.slow
def test_a_right_password_in_the_uri_is_never_printed_when_the_server_fails_mid_command(
        auth_server, journal, tmp_path, capfd, monkeypatch):
    proxy = FaultProxy(int(auth_server.rsplit(":", 1)[1]))
    base = proxy.url
    monkeypatch.setenv("MLFLOW_TRACKING_URI", _uri(base, ADMIN, ADMIN_PASSWORD))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a fault is answered at once, not after backoff
    experiment = f"leak-mid-{time.time_ns()}"
    outputs = []

    def after_a_healthy_health(fault, *argv) -> tuple[int, str, str]:
        """``/health`` answers (then is not asked again for a minute); the fault meets the command's own calls."""
        proxy.mode = "pass"
        code, out, err = cli(capfd, "decisions", "--experiment", experiment)
        assert code == 0, err
        fault()
        code, out2, err2 = cli(capfd, *argv)
        outputs.extend([out, err, out2, err2])
        return code, out2, err2

    def fail_503():
        proxy.mode = "503"

    try:
        code, out, err = cli(capfd, "record", "--from-jsonl", jsonl(tmp_path, "mid", experiment), *SETS)
        assert code == 0 and len(out.split()) == 10, err
        code, out, err = cli(capfd, "evaluate", "--group", "mid", "--experiment", experiment)
        assert code == 0 and "ACCEPT" in out, err  # its links, the decision run and its report: all stored
        outputs += [out, err]

        code, _, err = after_a_healthy_health(fail_503, "evaluate", "--group", "mid", "--experiment", experiment,
                                              "--min-improvement", "0.5")
        assert_one_line(code, err, "could not be reached", base)
        code, _, err = after_a_healthy_health(fail_503, *record_argv("mid", "baseline", 101, experiment))
        assert "kept in the journal" in err and base in err, err
        if hasattr(proxy, "lose_answers"):  # the server acts on the request; its answer is lost
            code, _, err = after_a_healthy_health(lambda: proxy.lose_answers("runs/create"),
                                                  *record_argv("mid", "baseline", 102, experiment))
            assert proxy.lost and "kept in the journal" in err, err
            code, _, err = after_a_healthy_health(lambda: proxy.lose_answers("runs/create"),
                                                  "evaluate", "--group", "mid", "--experiment", experiment,
                                                  "--min-improvement", "0.5")
            assert_error(code, err, base)
        proxy.mode = "pass"
        code, out, err = cli(capfd, "sync")
        assert code == 0 and " sent" in out, out + err
        outputs += [out, err]
    finally:
        proxy.close()
    assert journal.exists() and "mid" in journal.read_text()
    assert_nowhere(ADMIN_PASSWORD, outputs, journal, auth_server, tmp_path)


# --- newcomer mistakes: one line, exit 2 --------------------------------------------------------

def perfgate(*argv, uri: str | None, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real entry point, in a fresh process (the import cost a user pays)."""
    base = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", *CREDENTIAL_VARS)}
    if uri is not None:
        base["MLFLOW_TRACKING_URI"] = uri
    return subprocess.run([sys.executable, "-m", "mlflow_perfgate", *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**base, **(env or {})})


def test_the_builtin_schemes_are_mlflows():
    """The early check (no MLflow import) knows the schemes MLflow's own store registry holds."""
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    assert set(BUILTIN_SCHEMES) <= set(_tracking_store_registry._registry)
    assert set(_tracking_store_registry._registry) - set(BUILTIN_SCHEMES) == set()  # no plugin installed here
    assert scheme_problem("postgresql+psycopg2://u@h/db") is None and scheme_problem("C:\\mlruns") is None


@pytest.mark.parametrize("command", [["evaluate", "--group", "g"], ["record", "--group", "g", "--arm", "baseline",
                                                                    "--set=a=1", "--latency-ms=1", "--quality=1"]])
def test_a_misspelled_store_scheme_is_one_line(tmp_path, command):
    done = perfgate(*command, uri="sqllite:///mlflow.db", cwd=tmp_path)
    line = assert_one_line(done.returncode, done.stderr, "sqllite:///mlflow.db", "did you mean 'sqlite'?",
                           "postgresql", "http")
    assert "internal error" not in line and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_a_misspelled_scheme_with_a_password_names_the_uri_without_it(tmp_path):
    done = perfgate("decisions", uri="postgress://admin:Hunter2-secret@db/x", cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, "postgress://db/x", "did you mean 'postgresql'?")
    assert "Hunter2-secret" not in done.stderr + done.stdout


@pytest.mark.parametrize("command", [
    ["evaluate", "--group", "g"],
    ["decisions"],
    ["report", "--group", "g"],
    ["reap", "--older-than", "1h"],
    ["forget", "--group", "g", "--run-id", "r", "--reason", "x"],
])
def test_a_command_that_reads_never_creates_a_store(tmp_path, command):
    missing = tmp_path / "nonexistent" / "dir" / "mlflow.db"
    done = perfgate(*command, uri=f"sqlite:///{missing}", cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, f"no MLflow store at sqlite:///{missing}", "nothing was created")
    assert list(tmp_path.iterdir()) == []  # no folder, no database, no experiment


def test_the_default_store_is_not_created_by_a_read(tmp_path):
    """No MLFLOW_TRACKING_URI: MLflow's default (mlflow.db here) is refused, not created, by evaluate."""
    done = perfgate("evaluate", "--group", "g", uri=None, cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, "no MLflow store at sqlite:///", "mlflow.db")
    assert list(tmp_path.iterdir()) == []


def test_no_attempts_names_the_store_and_the_experiment(sqlite_uri, capfd):
    code, _, err = cli(capfd, "evaluate", "--group", "g")
    assert_one_line(code, err, "no attempts of group 'g' in the Default experiment (id 0) of " + sqlite_uri)
    code, _, err = cli(capfd, "evaluate", "--group", "g", "--experiment", "nope")
    assert_one_line(code, err, f"experiment 'nope' does not exist in {sqlite_uri}")
    code, _, err = cli(capfd, "report", "--group", "g", "--experiment", "nope")
    assert_one_line(code, err, f"does not exist in {sqlite_uri}")


def test_local_store_path():
    assert local_store_path("sqlite:////abs/m.db") == "/abs/m.db"
    assert local_store_path("sqlite:///rel.db") == os.path.abspath("rel.db")
    assert local_store_path("sqlite://") is None and local_store_path("sqlite:///:memory:") is None
    assert local_store_path("file:///abs/mlruns") == "/abs/mlruns"
    assert local_store_path("./mlruns") == os.path.abspath("mlruns")
    assert local_store_path("http://h:5000") is None and local_store_path("postgresql://h/db") is None


@pytest.mark.parametrize("extra", [[], ["--in-process"]])
def test_a_workload_module_off_the_path_is_one_line_with_the_fix(tmp_path, extra):
    done = perfgate("compare", "--workload", "mymod:factory", "--change", "checkpoint=true", *FIXED, *extra,
                    uri=f"sqlite:///{tmp_path}/m.db", cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, "no module 'mymod'", "sys.path", "PYTHONPATH=",
                    "nothing was run or logged")
    assert list(tmp_path.iterdir()) == []  # no store was created, no child ran


def test_a_workload_named_by_its_file_is_one_line(tmp_path):
    done = perfgate("diagnose", "--workload", "mymod.py:factory", *FIXED, uri=f"sqlite:///{tmp_path}/m.db",
                    cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, "names a file, not a module", "'mymod:factory'")


def test_require_importable_looks_where_the_child_will(tmp_path, monkeypatch):
    (tmp_path / "here_only.py").write_text("def make():\n    pass\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.abspath(p) != str(tmp_path)])
    require_importable("here_only:make")  # the child (python -m, in this directory) finds it
    with pytest.raises(ValueError, match="PYTHONPATH"):
        require_importable("here_only:make", child=False)  # in this process it is off the path
    require_importable("tinylm")
    require_importable("hf:tests.no_such_module:tiny")  # only the top-level package is looked for (no import)


def test_a_wrong_server_uri_is_one_line_without_its_password(tmp_path):
    done = perfgate("evaluate", "--group", "g", uri="http://admin:Wr0ng-Secret@127.0.0.1:9", cwd=tmp_path)
    assert_one_line(done.returncode, done.stderr, "http://127.0.0.1:9 could not be reached")
    assert "Wr0ng-Secret" not in done.stderr + done.stdout



def test_a_dead_server_is_said_before_mlflow_is_imported(mlflow_server):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    code = ("import sys; from mlflow_perfgate.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('mlflow' in sys.modules); sys.exit(e.code)\n")
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARS}
    done = subprocess.run([sys.executable, "-c", code, "decisions"], capture_output=True, text=True, timeout=120,
                          env={**env, "MLFLOW_TRACKING_URI": f"http://admin:Wr0ng-Secret@127.0.0.1:{free}"})
    assert done.returncode == 2 and done.stdout.strip() == "False", done.stdout + done.stderr
    assert f"http://127.0.0.1:{free} could not be reached" in done.stderr and "Wr0ng-Secret" not in done.stderr
    # a live server: the command goes on to MLflow, which answers
    done = subprocess.run([sys.executable, "-c", code, "decisions"], capture_output=True, text=True, timeout=120,
                          env={**env, "MLFLOW_TRACKING_URI": mlflow_server})
    assert done.stdout.strip().splitlines()[-1] == "True", done.stdout + done.stderr
