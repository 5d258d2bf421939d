"""latency="fastest": the rules judge each attempt's fastest measured step (``fastest_step_ms``).

The figure is written from the step times themselves (``log_attempt``, ``record``, the harness);
a successful attempt without it cannot be judged so, and says so, rather than being mixed in on
its median.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate import rules
from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import InputError, MissingField
from mlflow_perfgate.harness import compare
from mlflow_perfgate.rules import Policy
from mlflow_perfgate.rules._records import ArmSummary

from configs import SPEC
from helpers import CANDIDATE, CONDITIONS


def runs(medians, fastest, quality=0.9):
    return [{"ok": True, "latency_ms": m, "quality": quality, **({} if f is None else {"fastest_step_ms": f})}
            for m, f in zip(medians, fastest)]


# A busy neighbour stretches the median of steps; each attempt's fastest step still shows the 10% gain.
BASE = runs([100, 180, 104, 170, 101], [98, 99, 97, 98, 99])
CAND = runs([89, 175, 160, 90, 150], [88, 89, 87, 88, 89])


def test_the_policy_names_the_fastest_step():
    policy = Policy(latency="fastest")
    assert policy.latency_key == "fastest_step_ms" and Policy(**policy.options()) == policy


def test_fastest_judges_the_fastest_steps_where_the_medians_are_blurred():
    raw = rules.decide(BASE, CAND, method="robust")
    fast = rules.decide(BASE, CAND, method="robust", latency="fastest")
    assert (fast["baseline"]["median_ms"], fast["candidate"]["median_ms"]) == (98, 88)
    assert fast["baseline"]["latency_key"] == "fastest_step_ms" and "contended_runs" not in fast["baseline"]
    assert raw["decision"] != "accept" and fast["decision"] == "accept"
    assert "contention_ok" not in fast  # no contention fallback: every attempt has its figure
    # the specification's functions still read latency_ms
    assert rules.summarize_repeated_runs(BASE)["median_ms"] == 104


@pytest.mark.parametrize("mode", ["improvement", "non_regression"])
def test_the_seed_method_s_message_names_the_fastest_step_it_compared(mode):
    fast = rules.decide(BASE, CAND, method="seed", mode=mode, latency="fastest")
    main = "improvement_ok" if mode == "improvement" else "no_regression_ok"
    assert "median fastest step 88 ms against baseline 98 ms" in fast["messages"][main]
    raw = rules.decide(BASE, CAND, method="seed", mode=mode)
    assert ": median 150 ms against baseline 104 ms" in raw["messages"][main]
    assert "fastest" not in raw["messages"][main]


def test_an_attempt_without_its_fastest_step_is_an_error_never_a_mixed_figure():
    with pytest.raises(MissingField, match=r"1 of 5 successful runs lack 'fastest_step_ms'"):
        ArmSummary.from_runs(runs([90] * 5, [88, 89, None, 87, 88]), latency_key="fastest_step_ms")
    with pytest.raises(InputError, match="fastest_step_ms of a successful run must be a finite number > 0"):
        rules.decide(runs([100] * 5, [0.0] * 5), CAND, latency="fastest")
    # failed attempts need none, and stay in the failure rate
    summary = ArmSummary.from_runs(CAND + [{"ok": False, "failure": "oom"}], latency_key="fastest_step_ms")
    assert summary.failed_runs == 1 and summary.latencies == (88, 89, 87, 88, 89)


def test_log_attempt_writes_the_fastest_step_from_the_step_times(sqlite_uri):
    run_id = pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9,
                            step_times_ms=[12.5, 11.0, 12.0, 13.0])
    assert MlflowClient().get_run(run_id).data.metrics["fastest_step_ms"] == 11.0
    failed = pg.log_attempt("fast", "baseline", CONDITIONS, ok=False, failure="oom", step_times_ms=[12.5])
    assert "fastest_step_ms" not in MlflowClient().get_run(failed).data.metrics  # a failed attempt has no figure
    with pytest.raises(InputError, match="is the fastest of step_times_ms"):
        pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, step_times_ms=[12.0, 11.0],
                       metrics={"fastest_step_ms": 10.0})
    with pytest.raises(InputError, match="must be"):
        pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, metrics={"fastest_step_ms": -1})
    # a latency outside its own steps' range is no statistic of them (seconds logged as ms, another attempt's)
    for latency, steps in ((0.012, [12.0, 11.0]), (30.0, [12.0, 11.0])):
        with pytest.raises(InputError, match=r"latency_ms .* lies outside its step times \(11.0 to 12.0 ms\)"):
            pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=latency, quality=0.9, step_times_ms=steps)
    for latency in (11.0, 11.5, 12.0):  # the fastest, a mean, the slowest: each is inside
        pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=latency, quality=0.9, step_times_ms=[12.0, 11.0])
    for bad in (5.0, "12,11", {12.0: "a"}, {12.0, 11.0}):  # not a sequence of steps in order
        with pytest.raises(InputError, match="step_times_ms must be a sequence"):
            pg.log_attempt("fast", "baseline", CONDITIONS, latency_ms=12.0, quality=0.9, step_times_ms=bad)


def _series(group, base_steps, cand_steps):
    for steps in base_steps:
        pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=sorted(steps)[len(steps) // 2], quality=0.9,
                       step_times_ms=steps)
    for steps in cand_steps:
        pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=sorted(steps)[len(steps) // 2], quality=0.9,
                       step_times_ms=steps)


def test_evaluate_judges_the_fastest_steps_and_the_report_says_so(sqlite_uri, capsys):
    # every attempt's steps: mostly stretched by a neighbour, one clean step each
    base = [[100.0 + i, 190.0, 185.0] for i in range(6)]
    cand = [[90.0 + i, 191.0, 186.0] for i in range(6)]
    _series("fast-eval", base, cand)
    raw = pg.evaluate_group("fast-eval", method="robust", dry_run=True)
    fast = pg.evaluate_group("fast-eval", method="robust", latency="fastest")
    assert raw["decision"] != "accept" and fast["decision"] == "accept"
    assert fast["baseline"]["median_ms"] == pytest.approx(102.5) and fast["candidate"]["median_ms"] == 92.5
    run = MlflowClient().get_run(fast["decision_run_id"])
    assert run.data.tags["perfgate.latency"] == "fastest"
    assert "latency judged: `fastest` (each attempt's fastest measured step)" in fast["report"]
    table = fast["attempts"]
    assert sorted(a["fastest_step_ms"] for a in table if a["arm"] == "baseline") == [100.0 + i for i in range(6)]
    # the CLI takes it too, and the JSON shows what was judged
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--group", "fast-eval", "--method", "robust", "--latency", "fastest", "--format", "json"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and json.loads(out)["baseline"]["latency_key"] == "fastest_step_ms"
    # the decision queries say which latency each decision judged
    assert set(pg.decisions(group="fast-eval")["latency"]) == {"fastest"}


def test_evaluate_refuses_fastest_on_attempts_logged_without_steps(sqlite_uri, capsys):
    for value in (100.0, 101.0, 99.0):
        pg.log_attempt("no-steps", "baseline", CONDITIONS, latency_ms=value, quality=0.9)
        pg.log_attempt("no-steps", "candidate", CANDIDATE, latency_ms=value - 9, quality=0.9)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--group", "no-steps", "--latency", "fastest"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "lack 'fastest_step_ms'" in err and "latency='raw'" in err


def test_a_supervised_attempt_logs_its_fastest_step(sqlite_uri):
    result = compare("tinylm", {"input_shape": "2,16", "warmup": 1, "steps": 3}, {"checkpoint": True}, attempts=1,
                     progress=False, min_valid_runs=1, env_mismatch="warn", timeout_s=120, latency="fastest",
                     **SPEC)
    client = MlflowClient()
    for attempt in result["attempts"]:
        run = client.get_run(attempt["run_id"])
        steps = [m.value for m in client.get_metric_history(run.info.run_id, "step_time_ms")]
        assert len(steps) == 3 and run.data.metrics["fastest_step_ms"] == min(steps)
    assert result["baseline"]["latency_key"] == "fastest_step_ms"


def test_record_from_jsonl_takes_step_times(sqlite_uri, tmp_path, capsys):
    lines = [{"arm": "baseline", "latency_ms": 101.0, "quality": 0.9, "step_times_ms": [101.0, 99.5, 140.0]},
             {"arm": "candidate", "set": {"batch_size": "16"}, "latency_ms": 90.0, "quality": 0.9,
              "step_times_ms": [90.0, 88.5]}]
    source = tmp_path / "attempts.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["record", "--from-jsonl", str(source), "--group", "jsonl-fast", "--set", "model=tiny",
              "--set", "batch_size=8"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    run_ids = out.split()
    assert [MlflowClient().get_run(r).data.metrics["fastest_step_ms"] for r in run_ids] == [99.5, 88.5]
    # null is a field not given (a JSON writer's None): no steps, no fastest step, nothing refused
    source.write_text(json.dumps({**lines[0], "step_times_ms": None, "set": None, "env": None}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["record", "--from-jsonl", str(source), "--group", "jsonl-fast", "--set", "model=tiny"])
    assert exit_info.value.code == 0
    run = MlflowClient().get_run(capsys.readouterr().out.split()[0])
    assert "fastest_step_ms" not in run.data.metrics and run.data.params["model"] == "tiny"
    # inside set and env too: the default condition stands, no "None" is recorded
    source.write_text(json.dumps({**lines[0], "set": {"model": None}, "env": {"torch_threads": None}}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["record", "--from-jsonl", str(source), "--group", "jsonl-fast", "--set", "model=tiny"])
    assert exit_info.value.code == 0
    run = MlflowClient().get_run(capsys.readouterr().out.split()[0])
    assert run.data.params["model"] == "tiny" and "perfgate.env.torch_threads" not in run.data.tags
    # an empty condition is refused as on the command line, unless --allow-empty
    source.write_text(json.dumps({**lines[0], "set": {"model": " "}}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["record", "--from-jsonl", str(source), "--group", "jsonl-fast", "--set", "model=tiny"])
    assert exit_info.value.code == 2 and "--allow-empty" in capsys.readouterr().err
    source.write_text(json.dumps({**lines[0], "step_times_ms": "99.5"}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["record", "--from-jsonl", str(source), "--group", "jsonl-fast", "--set", "model=tiny"])
    assert exit_info.value.code == 2 and "'step_times_ms' must be a list" in capsys.readouterr().err
