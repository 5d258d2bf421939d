"""The gate CLI: exit codes, one-line errors, record/evaluate/decisions/report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlflow_perfgate.cli import main

from helpers import BASELINE_MS, CANDIDATE_MS, CONDITIONS, log_series

SETS = [f"--set={k}={v}" for k, v in {**CONDITIONS, "input_shape": "4,128"}.items() if k != "checkpoint"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def record(capsys, group, arm, checkpoint, *extra):
    code, out, err = run_cli(capsys, "record", "--group", group, "--arm", arm, *SETS,
                             f"--set=checkpoint={checkpoint}", *extra)
    assert code == 0, err
    return out.strip()


def test_record_then_evaluate_exit_codes(sqlite_uri, capsys):
    for value in BASELINE_MS:
        run_id = record(capsys, "cli", "baseline", "false", f"--latency-ms={value}", "--quality=0.9")
        assert len(run_id) == 32  # stdout is the run id alone, for shell scripts
    for value in CANDIDATE_MS:
        record(capsys, "cli", "candidate", "true", f"--latency-ms={value}", "--quality=0.9")
    code, out, _ = run_cli(capsys, "evaluate", "--group", "cli")
    assert code == 0 and "ACCEPT" in out
    code, out, _ = run_cli(capsys, "evaluate", "--group", "cli", "--min-improvement", "0.5")
    assert code == 1 and "REJECT" in out and "improvement_ok" in out
    code, out, _ = run_cli(capsys, "evaluate", "--group", "cli", "--min-valid-runs", "6", "--format", "json")
    assert code == 3 and json.loads(out)["reason"] == "insufficient_valid_runs"
    validity = json.dumps({"evidence_type": "correctness", "status": "invalid", "run_valid": False,
                           "issues": ["numerical"], "first_failure": "head", "reproducible": True})
    record(capsys, "cli", "candidate", "true", "--latency-ms=1", "--quality=0.9", f"--validity={validity}")
    code, out, _ = run_cli(capsys, "evaluate", "--group", "cli")
    assert code == 4 and "BLOCKED" in out and "head" in out


def test_decisions_and_report(sqlite_uri, capsys):
    log_series("rep")
    code, _, _ = run_cli(capsys, "evaluate", "--group", "rep")
    assert code == 0
    code, out, _ = run_cli(capsys, "decisions", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["group"] == "rep" and rows[0]["decision"] == "accept"
    code, out, _ = run_cli(capsys, "decisions", "--format", "csv")
    assert out.splitlines()[0].startswith("group,decision,reason")
    code, out, _ = run_cli(capsys, "decisions")
    assert "rep" in out and "accept" in out
    header, row = out.splitlines()[:2]
    assert header.split()[6:8] == ["method", "latency"] and " seed " in row and " raw " in row  # how it was judged
    code, out, _ = run_cli(capsys, "report", "--group", "rep")
    assert code == 0 and out.startswith("## ACCEPT") and "| median over attempts of each one's median step (judged) | 100 ms | 89 ms |" in out


@pytest.mark.parametrize("argv, needle", [
    (["evaluate"], "Missing option '--group'"),
    (["evaluate", "--group", "none"], "no attempts of group 'none'"),
    (["evaluate", "--group", "g", "--min-valid-runs", "x"], "'x' is not a valid integer"),
    (["record", "--group", "g", "--arm", "other", "--set", "a=1"], "'other' is not one of"),
    (["record", "--group", "g", "--arm", "baseline", "--set", "a"], "expected KEY=VALUE"),
    (["record", "--group", "g", "--arm", "baseline", "--set", "a=1", "--latency-ms", "inf", "--quality", "1"],
     "latency_ms must be finite"),
    (["record", "--group", "g", "--arm", "baseline", "--set", "a=1"], "needs latency_ms"),
    (["record", "--group", "g", "--arm", "baseline", "--set", "bad key!=1", "--latency-ms", "1", "--quality", "1"],
     "not accepted by MLflow"),
    (["record", "--group", "g", "--arm", "baseline", "--set", "a=1", "--failure", "x", "--validity", "{"],
     "not valid JSON"),
    (["nosuchcommand"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(sqlite_uri, capsys, argv, needle):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_python_dash_m_entry_point(sqlite_uri):
    completed = subprocess.run([sys.executable, "-m", "mlflow_perfgate", "evaluate", "--group", "x"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.strip() == f"Error: no attempts of group 'x' in the Default experiment (id 0) of {sqlite_uri}"


def test_decisions_show_failed_checks_and_write_lists_as_lists(sqlite_uri, capsys):
    log_series("lists")
    from helpers import CANDIDATE
    import mlflow_perfgate as pg

    pg.log_attempt("lists", "candidate", CANDIDATE, ok=False, failure="timeout")
    code, _, _ = run_cli(capsys, "evaluate", "--group", "lists")
    assert code == 1
    code, out, _ = run_cli(capsys, "decisions")
    header, row = out.splitlines()[:2]
    assert "failed_checks" in header and "why" in header
    assert "failure_rate_ok" in row and "failure_rate_ok failed: candidate" in row
    code, out, _ = run_cli(capsys, "decisions", "--format", "json")
    rows = json.loads(out)
    assert rows[0]["failed_checks"] == ["failure_rate_ok"]
    assert rows[0]["reason_text"].startswith("failure_rate_ok failed: candidate failure rate 16.7%")
    code, out, _ = run_cli(capsys, "decisions", "--format", "csv")
    import csv
    import io

    parsed = list(csv.DictReader(io.StringIO(out)))
    assert json.loads(parsed[0]["failed_checks"]) == ["failure_rate_ok"]  # a JSON array's text, not a repr


def test_report_says_when_attempts_are_newer_than_its_decision(sqlite_uri, capsys):
    log_series("stale-report")
    code, _, _ = run_cli(capsys, "evaluate", "--group", "stale-report")
    assert code == 0
    code, out, err = run_cli(capsys, "report", "--group", "stale-report")
    assert code == 0 and "Out of date" not in out and not err
    from helpers import CANDIDATE
    import mlflow_perfgate as pg

    pg.log_attempt("stale-report", "candidate", CANDIDATE, latency_ms=88, quality=0.9)
    pg.log_attempt("stale-report", "candidate", CANDIDATE, ok=False, failure="timeout")
    code, out, err = run_cli(capsys, "report", "--group", "stale-report")
    assert code == 0 and out.startswith("## ACCEPT")
    assert ("> **Out of date**: 2 attempts of this group are newer than this decision (it judged 10; the group "
            "holds 12 now). Decide on them with `mlflow-perfgate evaluate --group stale-report`.") in out
    assert "2 attempts of group 'stale-report' are newer than its decision" in err
    from mlflow_perfgate.tracking import attempts_since

    since = attempts_since(pg.decisions(group="stale-report").iloc[0]["run_id"], "stale-report")
    assert (since["judged"], since["held"], len(since["newer"]), since["running"]) == (10, 12, 2, 0)
