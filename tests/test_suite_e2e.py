"""A suite end to end through the command line: run, collect, one gate, one exit code, the records it leaves."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import PerfgateError, PolicyError

from helpers import AT_BARRIER, CANDIDATE, CONDITIONS, start_racers

EXPERIMENT = "suite-e2e"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def log_group(group, baseline_ms, candidate_ms):
    for value in baseline_ms:
        pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=value, quality=0.9, experiment_name=EXPERIMENT)
    for value in candidate_ms:
        pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=value, quality=0.9, experiment_name=EXPERIMENT)


def write_suite(path, body: str) -> str:
    path.write_text(body, encoding="utf-8")
    return str(path)


STEADY = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]


def test_a_suite_of_recorded_groups_accepts_and_is_judged_once(sqlite_uri, tmp_path, capsys):
    log_group("g-faster", STEADY, [v * 0.9 for v in STEADY])
    log_group("g-same", STEADY, [v * 1.001 for v in reversed(STEADY)])
    suite = write_suite(tmp_path / "suite.toml", f"""
[suite]
name = "recorded"
experiment = "{EXPERIMENT}"

[defaults]
mode = "non_regression"

[[entry]]
name = "faster"
group = "g-faster"

[[entry]]
name = "same"
group = "g-same"
method = "paired"
""")
    code, out, err = run_cli(capsys, "suite", "evaluate", suite)
    assert code == 0, out + err
    assert "## Suite recorded: ACCEPT" in out and "suite decision: ACCEPT (exit code 0)" in out
    assert "| faster | `g-faster` | latency, robust, non_regression | accept | **accept** |" in out
    # the paired method without ABBA rounds is judged, and shown, as robust, saying why
    assert ("| same | `g-same` | latency, robust, non_regression (no ABBA rounds recorded: judged by the robust "
            "method) | accept | **accept** |") in out
    runs = pg.tracking.suite_decisions(experiment_name=EXPERIMENT, name="recorded")
    assert len(runs) == 1 and runs.iloc[0]["decision"] == "accept" and runs.iloc[0]["entries_accept"] == 2
    suite_run = runs.iloc[0]["run_id"]
    rows = pg.decisions(experiment_name=EXPERIMENT, suite="recorded")
    assert sorted(rows["suite_entry"]) == ["faster", "same"] and set(rows["suite_decision"]) == {"accept"}
    client = MlflowClient()
    for run_id in rows["run_id"]:
        assert client.get_run(run_id).data.tags["mlflow.parentRunId"] == suite_run
    payload = pg.tracking.read_suite(suite_run)
    assert payload["format_version"] == 1 and payload["decision"] == "accept" and len(payload["entries"]) == 2
    assert client.get_run(suite_run).data.tags["perfgate.kind"] == "suite"
    assert client.get_run(suite_run).info.run_name == "ACCEPT: suite recorded"  # its verdict first in the run list
    # judged again on the same attempts: the same suite run, no new decision runs
    code, out, _ = run_cli(capsys, "suite", "evaluate", suite, "--format", "json")
    assert code == 0 and f'"suite_run_id": "{suite_run}"' in out
    assert len(pg.tracking.suite_decisions(experiment_name=EXPERIMENT)) == 1
    assert len(pg.decisions(experiment_name=EXPERIMENT)) == 2
    # under the other control, the same decisions are a new suite decision
    code, out, _ = run_cli(capsys, "suite", "evaluate", suite, "--control", "bh")
    assert code == 0 and "Benjamini-Hochberg" in out and "the tail test 10% of the entry's share" in out
    assert len(pg.tracking.suite_decisions(experiment_name=EXPERIMENT)) == 2
    assert client.get_run(suite_run).data.params["perfgate.tail_share"] == "0.1"
    # each entry's decision run names, in its tags and as its parent, the same suite run: the newest to judge it
    for run_id in rows["run_id"]:
        tags = client.get_run(run_id).data.tags
        assert tags["perfgate.suite_run"] == tags["mlflow.parentRunId"]


def test_a_suite_file_is_checked_before_anything_is_read(sqlite_uri, tmp_path, capsys):
    seed = write_suite(tmp_path / "seed.toml", '[suite]\nname = "s"\n[[entry]]\nname = "a"\ngroup = "g"\n'
                                              'method = "seed"\n')
    code, _, err = run_cli(capsys, "suite", "evaluate", seed)
    assert code == 2 and "seed method gives no p-value" in err and len(err.strip().splitlines()) == 1
    unknown = write_suite(tmp_path / "bad.toml", '[suite]\nname = "s"\n[[entry]]\nname = "a"\ngroup = "g"\nsteps = 2\n')
    code, _, err = run_cli(capsys, "suite", "evaluate", unknown)
    assert code == 2 and "unknown keys ['steps']" in err
    missing = write_suite(tmp_path / "missing.toml", '[suite]\nname = "s"\n[[entry]]\nname = "a"\ngroup = "nope"\n')
    code, _, err = run_cli(capsys, "suite", "evaluate", missing)
    assert code == 2 and "suite entry 'a' (group 'nope')" in err
    two = write_suite(tmp_path / "two.toml", '[suite]\nname = "s"\n[[entry]]\nname = "a"\nchange = {x = 1, y = 2}\n')
    code, _, err = run_cli(capsys, "suite", "run", two)
    assert code == 2 and "exactly one variable" in err


def test_a_suite_file_merges_its_defaults_and_picks_each_objective_s_method():
    from mlflow_perfgate.suite import parse_suite

    spec = parse_suite({
        "suite": {"name": "n", "alpha": 0.1},
        "defaults": {"attempts": 4, "set": {"input_shape": "2,16", "steps": 2}, "thresholds": {"min_valid_runs": 3}},
        "entry": [{"name": "lat", "change": {"checkpoint": True}, "set": {"steps": 3}},
                  {"name": "mem", "change": {"checkpoint": True}, "objective": "memory", "mode": "improvement"},
                  {"name": "rec", "group": "g", "method": "paired", "until_decisive": True}],
    }, name="override")
    lat, mem, rec = spec.entries
    assert spec.name == "override" and spec.alpha == 0.1 and lat.group == "override/lat"
    assert lat.conditions == {"input_shape": "2,16", "steps": 3} and lat.policy.min_valid_runs == 3
    # an entry that runs takes compare's defaults (paired on p10, steps interleaved; memory: seed on raw),
    # a collected one robust unless told
    assert (lat.policy.method, mem.policy.method, rec.policy.method) == ("paired", "seed", "paired")
    assert (lat.policy.latency, mem.policy.latency, lat.interleave, mem.interleave, lat.threads) == (
        "p10", "raw", "steps", "steps", 1)
    assert mem.configuration.fallbacks == ("method seed: the paired method does not judge the memory objective in "
                                           "improvement mode",)
    assert parse_suite({"suite": {"name": "n", "groups": ["g"]}}).entries[0].policy.method == "robust"
    assert not rec.runs and rec.max_attempts == 16 and rec.max_looks == 7 and rec.look_at(4) == 1
    assert rec.look_at(5) == 2 and rec.look_at(6) == 2 and rec.look_at(7) == 3 and rec.look_at(99) == 7
    assert spec.tail_share == 0.1 and spec.settings()["tail_share"] == 0.1  # the default, logged
    assert parse_suite({"suite": {"name": "n", "tail_share": 0.5, "groups": ["g"]}}).tail_share == 0.5
    with pytest.raises(PolicyError, match="^<suite>: tail_share must be"):
        parse_suite({"suite": {"name": "n", "tail_share": 0.7, "groups": ["g"]}})
    for key, value in (("tail_share", "0.1"), ("alpha", "0.05")):  # no number: the file is named too
        with pytest.raises(PerfgateError, match=f"^<suite>: {key} must be a real number"):
            parse_suite({"suite": {"name": "n", key: value, "groups": ["g"]}})
    listed = parse_suite({"suite": {"name": "n", "groups": ["g1", "g2"]}})
    assert [(e.name, e.group, e.runs) for e in listed.entries] == [("g1", "g1", False), ("g2", "g2", False)]


def test_suite_run_refuses_a_collected_group_that_holds_nothing_before_anything_runs(sqlite_uri, tmp_path, capsys):
    suite = write_suite(tmp_path / "missing.toml", f"""
[suite]
name = "early"
experiment = "{EXPERIMENT}"

[defaults]
supervised = false
set = {{input_shape = "2,16", steps = 2, warmup = 1}}

[[entry]]
name = "runs"
change = {{checkpoint = true}}

[[entry]]
name = "pr-42"
group = "pr-42-run-7"
""")
    code, _, err = run_cli(capsys, "suite", "run", suite, "--no-progress")
    assert code == 2 and "suite entry 'pr-42': group 'pr-42-run-7' holds no attempts" in err, err
    assert "nothing was run" in err
    assert MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()]) == []


@pytest.mark.slow
def test_suite_run_resumed_with_more_attempts_keeps_the_comparison_s_repeats(sqlite_uri, tmp_path, capsys):
    body = f"""
[suite]
name = "again"
experiment = "{EXPERIMENT}"

[defaults]
mode = "non_regression"
supervised = false
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "ck"
change = {{checkpoint = true}}
attempts = ATTEMPTS
"""
    first = write_suite(tmp_path / "two.toml", body.replace("ATTEMPTS", "2"))
    code, out, err = run_cli(capsys, "suite", "run", first, "--no-progress")
    assert code in (0, 1, 3), out + err
    more = write_suite(tmp_path / "three.toml", body.replace("ATTEMPTS", "3"))
    code, out, err = run_cli(capsys, "suite", "run", more, "--no-progress", "--resume")
    assert code in (0, 1, 3), out + err  # judged, not refused for two values of repeats
    client = MlflowClient()
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    attempts = client.search_runs([experiment], "tags.\"perfgate.group\" = 'again/ck' and tags.\"perfgate.kind\" = "
                                                "'attempt'")
    assert len(attempts) == 10 and {run.data.params["repeats"] for run in attempts} == {"2"}


def test_a_suite_entry_takes_the_latency_and_step_interleaving_compare_takes(sqlite_uri, tmp_path, capsys):
    # found by a hostile run: the docs recommend paired + fastest + --interleave steps for
    # suites, and no entry key could say latency or steps
    from mlflow_perfgate.suite import parse_suite

    with pytest.raises(PerfgateError, match=r"\[\[entry\]\] 1 \(w\): interleave='steps' runs both arms in one process"):
        parse_suite({"suite": {"name": "n"}, "entry": [{"name": "w", "change": {"steps": 3}, "interleave": "steps"}]})
    with pytest.raises(PerfgateError, match=r"\[suite\] interleave must be one of \['rounds', 'entries'\] \(the order "
                                           r"of the entries; step interleaving within an entry is interleave"):
        parse_suite({"suite": {"name": "n", "interleave": "steps"}, "entry": [{"name": "w", "group": "g"}]})
    with pytest.raises(PerfgateError, match="interleave must be one of"):
        parse_suite({"suite": {"name": "n"}, "entry": [{"name": "w", "change": {"a": 1}, "interleave": "rounds"}]})
    suite = write_suite(tmp_path / "steps.toml", f"""
[suite]
name = "steps"
experiment = "{EXPERIMENT}"

[defaults]
method = "paired"
latency = "p10"
interleave = "steps"
mode = "non_regression"
attempts = 2
supervised = false
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}
""")
    code, out, err = run_cli(capsys, "suite", "run", suite, "--no-progress")
    assert code in (0, 1, 3), out + err
    assert ("warning: suite entry 'checkpoint': the paired method cannot accept with 2 attempts per arm: its 90% "
            "interval has an upper bound only from 5 complete ABBA rounds") in err
    row = pg.decisions(experiment_name=EXPERIMENT, suite="steps").iloc[0]
    assert (row["method"], row["latency"]) == ("paired", "p10")  # the docs' shared-machine suite (docs/how-to/suites.md)
    client = MlflowClient()
    suite_run = client.get_run(client.get_run(row["run_id"]).data.tags["perfgate.suite_run"])
    assert "| latency (p10), paired, non_regression |" in suite_run.data.tags["mlflow.note.content"]
    attempts = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id],
                                  "tags.\"perfgate.kind\" = 'attempt' and tags.\"perfgate.group\" = 'steps/checkpoint'")
    rounds = {}
    for run in attempts:
        rounds.setdefault(run.data.tags["perfgate.pair"], set()).add(run.data.tags["perfgate.arm"])
        assert len(client.get_metric_history(run.info.run_id, "step_order")) == 2  # its steps' places in the child
        assert run.data.metrics["step_p10_ms"] > 0  # what the entry judges
    assert rounds == {"0": {"baseline", "candidate"}, "1": {"baseline", "candidate"}}
    comparison = client.get_run(attempts[0].data.tags["mlflow.parentRunId"])
    assert comparison.data.tags["perfgate.interleave"] == "steps"


@pytest.mark.slow
def test_suite_run_interleaves_tinylm_entries_and_a_recorded_regression_rejects(sqlite_uri, tmp_path, capsys):
    log_group("g-slower", STEADY, [v * 1.5 for v in STEADY])
    suite = write_suite(tmp_path / "suite.toml", f"""
[suite]
name = "tiny"
experiment = "{EXPERIMENT}"

[defaults]
mode = "non_regression"
attempts = 3
supervised = false
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}

[[entry]]
name = "workers"
change = {{num_workers = 1}}

[[entry]]
name = "recorded"
group = "g-slower"
thresholds = {{min_valid_runs = 5}}
""")
    code, out, err = run_cli(capsys, "suite", "run", suite, "--no-progress")
    assert code == 1, out + err  # any reject fails the gate, whatever the others say
    assert "suite decision: REJECT (exit code 1)" in out
    assert "| recorded | `g-slower` | latency, robust, non_regression | reject | **reject** |" in out
    client = MlflowClient()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    suite_run = next(r for r in runs if r.data.tags.get("perfgate.kind") == "suite")
    assert suite_run.data.tags["perfgate.decision"] == "reject" and suite_run.info.status == "FINISHED"
    assert "| checkpoint | `tiny/checkpoint` |" in suite_run.data.tags["mlflow.note.content"]
    comparisons = {r.data.tags["perfgate.group"]: r for r in runs if r.data.tags.get("perfgate.comparison") == "true"}
    assert set(comparisons) == {"tiny/checkpoint", "tiny/workers"}
    for run in comparisons.values():  # each comparison (its decision on it) nests under the suite run
        assert run.data.tags["mlflow.parentRunId"] == suite_run.info.run_id
        assert run.data.tags["perfgate.suite_entry"] in ("checkpoint", "workers")
    # round-robin: one ABBA round (baseline, candidate, candidate, baseline) of each entry in turn, then the
    # third attempt per arm of each (one AB round)
    attempts = sorted((r for r in runs if r.data.tags.get("perfgate.kind") == "attempt"
                       and r.data.tags["perfgate.group"].startswith("tiny/")),
                      key=lambda r: (r.info.start_time, r.info.run_id))
    order = [(r.data.tags["perfgate.group"], r.data.tags["perfgate.arm"]) for r in attempts]
    abba, ab = ("baseline", "candidate", "candidate", "baseline"), ("baseline", "candidate")
    assert order == [("tiny/checkpoint", arm) for arm in abba] + [("tiny/workers", arm) for arm in abba] + \
        [("tiny/checkpoint", arm) for arm in ab] + [("tiny/workers", arm) for arm in ab]
    pairs = [int(r.data.tags["perfgate.pair"]) for r in attempts if r.data.tags["perfgate.group"] == "tiny/workers"]
    assert pairs == [0, 0, 1, 1, 2, 2]
    rows = pg.decisions(experiment_name=EXPERIMENT, suite="tiny")
    assert sorted(rows["suite_entry"]) == ["checkpoint", "recorded", "workers"]
    # evaluate again: the same decisions, the same suite run, the same exit code
    code, out, _ = run_cli(capsys, "suite", "evaluate", suite)
    assert code == 1 and f"suite run: {suite_run.info.run_id}" in out


_SUITE_EVALUATOR = """
import sys
from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import PerfgateError, PolicyError
import mlflow_perfgate.suite, mlflow_perfgate.tracking._evaluate  # what the race runs, before the barrier
""" + AT_BARRIER + """
main(["suite", "evaluate", sys.argv[1], "--format", "json"])
"""


@pytest.mark.slow
def test_racing_suite_evaluations_write_one_suite_run(sqlite_uri, tmp_path):
    # three suite evaluations of the same decisions at once: one suite run, the others adopt it
    import json
    import os
    import subprocess

    from conftest import REPO

    log_group("r-faster", STEADY, [v * 0.9 for v in STEADY])
    log_group("r-same", STEADY, [v * 1.001 for v in reversed(STEADY)])
    suite = write_suite(tmp_path / "race.toml", f"""
[suite]
name = "race"
experiment = "{EXPERIMENT}"

[defaults]
mode = "non_regression"

[[entry]]
name = "faster"
group = "r-faster"

[[entry]]
name = "same"
group = "r-same"
""")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = start_racers(_SUITE_EVALUATOR, [[str(suite)] for _ in range(3)], tmp_path / "barrier", env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outcomes.append(json.loads(out))
    assert len({o["suite_run_id"] for o in outcomes}) == 1 and {o["decision"] for o in outcomes} == {"accept"}
    runs = pg.tracking.suite_decisions(experiment_name=EXPERIMENT, name="race")
    assert list(runs["run_id"]) == [outcomes[0]["suite_run_id"]]
    rows = pg.decisions(experiment_name=EXPERIMENT, suite="race")
    assert len(rows) == 2  # one decision run per entry, whoever wrote it
    client = MlflowClient()
    assert {client.get_run(run_id).data.tags["mlflow.parentRunId"] for run_id in rows["run_id"]} == {
        outcomes[0]["suite_run_id"]}
