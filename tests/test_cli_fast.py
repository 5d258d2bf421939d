"""The command line answers help and bad input before it imports mlflow or torch; record takes JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import json, sys
from mlflow_perfgate.cli import main
code = 0
try:
    main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code or 0
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'mlflow', 'torch', 'transformers'})
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _probe(argv: list[str], tmp_path: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/never.db"}
    completed = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


RECORD = ["record", "--group", "g", "--arm", "baseline"]


@pytest.mark.parametrize("argv, code, needle", [
    (["--help"], 0, ""),
    (["compare", "--help"], 0, ""),
    (["evaluate", "--help"], 0, ""),
    (["evaluate"], 2, "Missing option '--group'"),
    (["nosuchcommand"], 2, "No such command"),
    ([*RECORD, "--set", "model"], 2, "expected KEY=VALUE"),
    ([*RECORD, "--set", "model=m", "--set", "revision="], 2, "'revision' has an empty value"),
    ([*RECORD, "--set", "model=m", "--latency-ms", "nan", "--quality", "1"], 2, "latency_ms must be finite"),
    ([*RECORD, "--set", "bad key!=1", "--latency-ms", "1", "--quality", "1"], 2, "not accepted by MLflow"),
    ([*RECORD, "--set", "model=m"], 2, "needs latency_ms"),
    ([*RECORD, "--set", "model=m", "--failure", "x", "--validity", "{"], 2, "not valid JSON"),
    (["evaluate", "--group", "g", "--min-improvement", "2"], 2, "min_improvement must be in the range [0, 1)"),
    (["evaluate", "--group", "g", "--method", "robust", "--objective", "memory"], 2, "judged by the seed method"),
    (["compare", "--change", "checkpoint=true", "--set", "revision="], 2, "'revision' has an empty value"),
    (["compare", "--change", "checkpoint"], 2, "expected KEY=VALUE"),
    (["compare", "--change", "revision=working-tree"], 2, "needs the baseline's revision too: give it with --set "
                                                          "revision=..."),
    (["compare", "--change", "checkpoint=true", "--alpha", "1.5"], 2, "alpha must be in the range (0, 1)"),
    (["diagnose", "--set", "dtype"], 2, "expected KEY=VALUE"),
    (["pipeline", "--set", "x=", "--margin", "-1"], 2, "'x' has an empty value"),
    (["compare", "--change", "checkpoint=true", "--steps", "3", "--set", "steps=4"], 2, "--steps 3 and --set steps=4"),
    (["compare", "--change", "checkpoint=true", "--attempts", "6", "--set", "repeats=7"], 2,
     "--set repeats=7 and --attempts 6 disagree"),
    (["compare", "--change", "checkpoint=true", "--rounds", "8", "--set", "repeats=6"], 2,
     "--set repeats=6 and --rounds 8 disagree"),
    (["compare", "--change", "checkpoint=true", "--set", "repeats=x"], 2, "repeats must be an integer >= 1"),
    (["pipeline", "--attempts", "6", "--set", "repeats=5"], 2, "--set repeats=5 and --attempts 6 disagree"),
])
def test_help_and_bad_input_answer_before_mlflow_or_torch_is_imported(tmp_path, argv, code, needle):
    outcome, err = _probe(argv, tmp_path)
    assert outcome == {"code": code, "heavy": []}, (argv, err)
    if needle:
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never.db").exists()


def test_set_repeats_is_the_rounds_a_compare_runs(tmp_path):
    # a factory of one's own is given its fixed conditions with --set, repeats among them: it is --attempts
    sets = ["--set", "input_shape=2,16", "--set", "dtype=fp32", "--set", "steps=2", "--set", "warmup=0",
            "--set", "repeats=2"]
    outcome, err = _probe(["compare", "--workload", "tinylm", *sets, "--change", "checkpoint=true", "--in-process",
                           "--method", "seed", "--min-valid-runs", "2", "--no-progress", "--group", "repeats"], tmp_path)
    assert outcome["code"] in (0, 1, 3), err
    runs = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/never.db").search_runs(["0"])
    attempts = [r for r in runs if r.data.tags.get("perfgate.kind") == "attempt"]
    assert len(attempts) == 4 and {r.data.params["repeats"] for r in attempts} == {"2"}, err


def test_a_supervised_compare_imports_no_torch_in_the_process_that_runs_it(tmp_path):
    # the fork runner's server and the attempts' children import torch; the command does not
    sets = ["--set", "input_shape=2,16", "--set", "dtype=fp32", "--set", "steps=2", "--set", "warmup=0"]
    outcome, err = _probe(["compare", "--workload", "tinylm", *sets, "--change", "checkpoint=true", "--attempts", "1",
                           "--method", "seed", "--min-valid-runs", "1", "--no-progress", "--group", "no-torch"], tmp_path)
    assert outcome["heavy"] == ["mlflow"], err
    assert outcome["code"] in (0, 1, 3), err
    runs = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/never.db").search_runs(["0"])
    attempts = [r for r in runs if r.data.tags.get("perfgate.kind") == "attempt"]
    assert len(attempts) == 2 and all(r.data.tags["perfgate.env.torch_threads"].isdigit() for r in attempts)


def _lines(*items) -> str:
    return "\n".join(json.dumps(item) for item in items) + "\n"


BASE = {"model": "TinyLM", "batch_size": 4}


def test_record_from_jsonl_logs_every_line_in_one_call(sqlite_uri, tmp_path, capsys):
    from mlflow_perfgate.cli import main

    path = tmp_path / "attempts.jsonl"
    path.write_text(_lines(
        {"arm": "baseline", "latency_ms": 100.0, "quality": 0.9},
        {"arm": "candidate", "set": {"checkpoint": "true"}, "latency_ms": 90.0, "quality": 0.9,
         "metrics": {"peak_mem_mib": 5}},
        {"arm": "candidate", "set": {"checkpoint": "true"}, "failure": "timeout"},
    ))
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "jsonl", "--set", "model=TinyLM", "--set", "checkpoint=false",
              "--experiment", "lines", "--from-jsonl", str(path)])
    assert info.value.code == 0
    run_ids = capsys.readouterr().out.split()
    assert len(run_ids) == 3
    client = MlflowClient()
    runs = {run_id: client.get_run(run_id) for run_id in run_ids}
    assert [runs[r].data.tags["perfgate.arm"] for r in run_ids] == ["baseline", "candidate", "candidate"]
    assert [runs[r].data.params["checkpoint"] for r in run_ids] == ["false", "true", "true"]
    assert runs[run_ids[1]].data.metrics["peak_mem_mib"] == 5
    assert runs[run_ids[2]].info.status == "FAILED" and runs[run_ids[2]].data.tags["perfgate.failure"] == "timeout"
    assert {runs[r].data.tags["perfgate.group"] for r in run_ids} == {"jsonl"}


@pytest.mark.parametrize("bad_line, needle", [
    ("{not json", "--from-jsonl line 2: not valid JSON"),
    (json.dumps([1, 2]), "--from-jsonl line 2: expected a JSON object"),
    (json.dumps({"arm": "candidate", "latency_ms": -1, "quality": 1}), "--from-jsonl line 2: latency_ms must be > 0"),
    (json.dumps({"arm": "sideways", "latency_ms": 1, "quality": 1}), "--from-jsonl line 2: arm must be one of"),
    (json.dumps({"arm": "candidate", "latncy_ms": 1}), "unknown fields ['latncy_ms']"),
    (json.dumps({"arm": "candidate", "pair": -1, "latency_ms": 1, "quality": 1}), "'pair' is the attempt's round"),
    (json.dumps({"arm": "candidate", "pair": 1.5, "latency_ms": 1, "quality": 1}), "'pair' is the attempt's round"),
    # found by a hostile run: the parent was checked only when its line was written, after the others
    (json.dumps({"arm": "baseline", "latency_ms": 100, "quality": 0.9, "parent_run_id": "0123456789abcdef" * 2}),
     "parent run '0123456789abcdef0123456789abcdef' does not exist in this tracking store"),
    (json.dumps({"arm": "baseline", "latency_ms": 100, "quality": 0.9, "metrics": {"fastest_step_ms": 300}}),
     "--from-jsonl line 2: metric 'fastest_step_ms' (300.0) is above latency_ms (100.0)"),
    (json.dumps({"arm": "baseline", "latency_ms": 0.1, "quality": 0.9, "step_times_ms": [100, 101]}),
     "--from-jsonl line 2: latency_ms 0.1 lies outside its step times"),
    (json.dumps({"arm": "baseline", "latency_ms": 100, "quality": 0.9, "attempt_id": "a1"}) + "\n"
     + json.dumps({"arm": "baseline", "failure": "segfault", "attempt_id": "a1"}),
     "--from-jsonl line 3: attempt_id 'a1' is given on line 2 already"),
])
def test_one_bad_line_writes_nothing(sqlite_uri, tmp_path, capsys, bad_line, needle):
    from mlflow_perfgate.cli import main

    good = json.dumps({"arm": "baseline", "latency_ms": 100.0, "quality": 0.9})
    path = tmp_path / "attempts.jsonl"
    path.write_text("\n".join([good, bad_line, good]) + "\n")
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "bad-lines", "--set", "model=TinyLM", "--experiment", "lines-bad",
              "--from-jsonl", str(path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err and "Traceback" not in err
    assert MlflowClient().get_experiment_by_name("lines-bad") is None  # nothing written, not even the experiment


def test_from_jsonl_takes_env_as_every_line_s_default(sqlite_uri, tmp_path, capsys):
    from mlflow_perfgate.cli import main

    path = tmp_path / "env.jsonl"
    path.write_text(_lines({"arm": "baseline", "latency_ms": 1, "quality": 1},
                           {"arm": "baseline", "latency_ms": 1, "quality": 1, "env": {"host": "node-8"}}))
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "env", "--set", "model=m", "--env", "host=node-7", "--env", "torch_threads=2",
              "--from-jsonl", str(path)])
    assert info.value.code == 0
    tags = [MlflowClient().get_run(run_id).data.tags for run_id in capsys.readouterr().out.split()]
    assert [t["perfgate.env.host"] for t in tags] == ["node-7", "node-8"]  # the line's own key wins
    assert {t["perfgate.env.torch_threads"] for t in tags} == {"2"}


def test_record_from_stdin(sqlite_uri, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run(
        [sys.executable, "-m", "mlflow_perfgate", "record", "--group", "stdin", "--arm", "baseline", "--set",
         "model=TinyLM", "--experiment", "stdin", "--from-jsonl", "-"],
        input=_lines({"latency_ms": 1.5, "quality": 1}, {"latency_ms": 1.7, "quality": 1}),
        capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert len(completed.stdout.split()) == 2


def test_from_jsonl_refuses_per_attempt_options(sqlite_uri, tmp_path, capsys):
    from mlflow_perfgate.cli import main

    path = tmp_path / "a.jsonl"
    path.write_text(_lines({"arm": "baseline", "latency_ms": 1, "quality": 1}))
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "g", "--set", "model=m", "--latency-ms", "3", "--from-jsonl", str(path)])
    assert info.value.code == 2 and "drop --latency-ms" in capsys.readouterr().err


def test_long_commands_list_their_options_by_purpose():
    from click.testing import CliRunner

    from mlflow_perfgate.cli import cli

    for command in ("compare", "pipeline", "evaluate", "diagnose"):
        text = CliRunner().invoke(cli, [command, "--help"], terminal_width=100).output
        titles = [line[:-1] for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
        expected = [t for t in ("What to run", "How to decide", "Thresholds", "Output", "Other options") if t in titles]
        assert titles[-len(expected):] == expected and "Other options" in titles, (command, titles)
        listed = text[text.index(f"{expected[0]}:"):]
        options = [line.split()[0].rstrip(",") for line in listed.splitlines() if line.startswith("  -")]
        assert len(options) == len(set(options)), command  # each once
    text = CliRunner().invoke(cli, ["compare", "--help"], terminal_width=100).output
    run, decide = text.index("What to run:"), text.index("How to decide:")
    thresholds, output = text.index("Thresholds:"), text.index("Output:")
    at = lambda option: text.index(f"\n  {option}")  # noqa: E731 - where the option's own line is
    assert run < at("--workload") < at("--steps") < decide < at("--method") < thresholds
    assert thresholds < at("--min-improvement") < at("--threshold NAME") < output
    assert output < at("--format") and "hf:module:function" in " ".join(text.split())


def test_compare_s_steps_is_the_condition_steps(sqlite_uri):
    from mlflow_perfgate.cli import main

    with pytest.raises(SystemExit) as exit_code:
        main(["compare", "--workload", "tinylm", "--set", "input_shape=2,16", "--set", "warmup=0", "--steps", "2",
              "--change", "checkpoint=true", "--attempts", "1", "--min-valid-runs", "1", "--allow-undecidable",
              "--in-process", "--no-progress", "--group", "steps-option"])
    assert exit_code.value.code in (0, 1, 3)
    runs = MlflowClient().search_runs(["0"], filter_string="tags.`perfgate.kind` = 'attempt'")
    assert len(runs) == 2 and {r.data.params["steps"] for r in runs} == {"2"}
    assert all(len(MlflowClient().get_metric_history(r.info.run_id, "step_time_ms")) == 2 for r in runs)


def test_record_takes_rounds_and_step_times_and_the_latency_is_their_median(sqlite_uri, tmp_path, capsys):
    from mlflow_perfgate.cli import main

    path = tmp_path / "rounds.jsonl"
    path.write_text(_lines({"arm": "baseline", "pair": 0, "step_times_ms": [10.0, 12.0, 11.0], "quality": 1},
                           {"arm": "candidate", "pair": "0", "set": {"checkpoint": "true"},
                            "step_times_ms": [9.0, 8.0, 8.5, 30.0], "quality": 1}))
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "rounds", "--set", "model=TinyLM", "--set", "checkpoint=false", "--from-jsonl",
              str(path)])
    assert info.value.code == 0
    runs = [MlflowClient().get_run(run_id) for run_id in capsys.readouterr().out.split()]
    assert [run.data.tags["perfgate.pair"] for run in runs] == ["0", "0"]
    assert [run.data.metrics["latency_ms"] for run in runs] == [11.0, 8.75]
    assert [run.data.metrics["step_p10_ms"] > 0 for run in runs] == [True, True]
    with pytest.raises(SystemExit) as info:
        main(["record", "--group", "rounds", "--arm", "baseline", "--set", "model=TinyLM", "--set",
              "checkpoint=false", "--pair", "1", "--latency-ms", "10", "--quality", "1"])
    assert info.value.code == 0
    run = MlflowClient().get_run(capsys.readouterr().out.split()[-1])
    assert run.data.tags["perfgate.pair"] == "1"
