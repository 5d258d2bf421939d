"""Issue 28: comparisons that cannot mean anything are refused, for every adapter.

A changed variable that no arm's factory read (a misspelt key, a key the Hugging Face factory
never looks at) and a quality tolerance at least the baseline's quality (a gate that cannot
fail) stop the comparison at the first attempts that show it, exit 2 in one line, the
comparison run KILLED saying why. Real attempts in this process, a real SQLite store.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.cli import main
from mlflow_perfgate.errors import InputError, SingleVariableError
from mlflow_perfgate.harness import check_change_reached_workload, check_quality_gate_can_fail, compare
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.workloads import make_workload
from mlflow_perfgate.workloads._evidence import collect_memory_evidence
from mlflow_perfgate.workloads._interface import describe_workload
from mlflow_perfgate.workloads._reads import ConditionReads, read_conditions_of

from configs import SPEC, SPEC_FLAGS

try:
    import transformers
except ImportError:
    transformers = None

needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers is not installed")
TINY = {"input_shape": "2,16", "warmup": 1, "steps": 2}
HF = "hf:tests.workloads_fixtures.hf_models:tiny_gpt2"
HOSTILE = {"model": "Hostile", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
           "measurement_method": "wall_ms", "warmup": 0, "steps": 2, "fail_at": 1000}
QUICK = dict(supervised=False, progress=False, min_valid_runs=2, allow_undecidable=True)


def test_condition_reads_note_each_lookup_and_claim_nothing_after_a_copy():
    reads = ConditionReads({"a": 1, "b": 2, "c": 3})
    assert reads.get("a") == 1 and reads["b"] == 2 and "z" not in reads and reads.get("y", 5) == 5
    assert reads.read() == ["a", "b", "y", "z"] and isinstance(reads, dict) and reads == {"a": 1, "b": 2, "c": 3}
    for whole in (dict, lambda r: {**r}, lambda r: list(r), lambda r: json.dumps(r), lambda r: r.copy(),
                  lambda r: (lambda **kw: kw)(**r), lambda r: list(r.items()), lambda r: r | {}):
        reads = ConditionReads({"a": 1})
        whole(reads)
        assert reads.read() is None  # it may have read anything


def test_the_workload_record_says_what_the_factory_read():
    built = make_workload("tinylm", {**TINY, "chekpoint": "true"})
    tinylm = collect_memory_evidence(built)["read_conditions"]  # beside the workload's own record
    assert "checkpoint" in tinylm and "chekpoint" not in tinylm and "read_conditions" not in describe_workload(built)
    hostile = make_workload("tests.workloads_fixtures.hostile:raiser", {"fail_at": 3, "other": 1})
    assert read_conditions_of(hostile) == ["fail_at"]
    lazy = make_workload("tests.workloads_fixtures.hostile:lazy_reader", {"fail_at": 3, "mode": "x"})
    assert read_conditions_of(lazy) == ["fail_at"]
    lazy.step()  # a workload that keeps the dict and reads a key in step(): that read counts too
    assert read_conditions_of(lazy) == ["fail_at", "mode"]


def test_the_check_refuses_a_variable_no_factory_read_and_keeps_what_the_runner_reads():
    read = {"read_conditions": ["checkpoint", "seed"]}
    with pytest.raises(SingleVariableError, match=r"never read the changed variable 'chekpoint' \(did you mean "
                                                  r"'checkpoint'\?\): it looked up only \['checkpoint', 'seed'\]"):
        check_change_reached_workload("chekpoint", read, read)
    check_change_reached_workload("checkpoint", read, read)  # read: reached
    check_change_reached_workload("steps", read, read)  # the runner reads it
    check_change_reached_workload("dtype", read, read)  # a fixed condition
    check_change_reached_workload("chekpoint", read, {})  # one arm's reads unknown: nothing claimed
    # read, then ignored: describe() reports the same value in both arms
    built = {"hidden": 256, "read_conditions": ["hidden"]}
    with pytest.raises(SingleVariableError, match=r"ignored the changed variable 'hidden'.*hidden=256 in both arms"):
        check_change_reached_workload("hidden", built, built)


def test_a_change_of_an_undeclared_key_says_which_was_meant(sqlite_uri):
    with pytest.raises(SingleVariableError, match=r"'chekpoint' must be declared in the baseline \(did you mean "
                                                  r"'checkpoint'\?\)"):
        compare("tinylm", TINY, {"chekpoint": "true"}, attempts=3, group="undeclared", **QUICK)
    assert MlflowClient().search_runs(["0"]) == []  # before anything ran


@pytest.mark.parametrize("conditions, change, said", [
    ({"steps": "0"}, {"checkpoint": "true"}, r"the baseline's steps must be an integer >= 1, got '0' \(--set steps="),
    ({"warmup": -1}, {"checkpoint": "true"}, r"the baseline's warmup must be an integer >= 0, got -1 \(--set warmup="),
    ({"steps": "abc"}, {"checkpoint": "true"}, r"the baseline's steps must be an integer >= 1, got 'abc'"),
    ({}, {"steps": "0"}, r"the candidate's steps must be an integer >= 1, got '0' \(--change steps="),
])
def test_a_count_no_attempt_can_read_is_refused_before_anything_runs(sqlite_uri, conditions, change, said):
    with pytest.raises(InputError, match=said):
        compare("tinylm", {**TINY, **conditions}, change, attempts=3, group="counts", **QUICK)
    assert MlflowClient().search_runs(["0"]) == []  # no comparison run, no attempt: every attempt would fail on it


def test_a_misspelt_change_stops_the_comparison_at_its_first_pair(sqlite_uri):
    with pytest.raises(SingleVariableError, match=r"never read the changed variable 'chekpoint' \(did you mean "
                                                  r"'checkpoint'\?\)"):
        compare("tinylm", {**TINY, "chekpoint": "false"}, {"chekpoint": "true"}, attempts=3, group="typo", **QUICK)
    runs = MlflowClient().search_runs(["0"])
    attempts = [r for r in runs if r.data.tags.get(TAG.KIND) == "attempt"]
    assert sorted(r.data.tags[TAG.ARM] for r in attempts) == ["baseline", "candidate"]  # not the 6 planned
    comparison, = [r for r in runs if r.data.tags.get(TAG.COMPARISON) == "true"]
    assert comparison.info.status == "KILLED" and "never read the changed variable" in \
        comparison.data.tags[TAG.END_REASON]


def test_a_misspelt_change_is_one_line_exit_2(sqlite_uri, capsys):
    sets = [f"--set={key}={value}" for key, value in {**TINY, "chekpoint": "false"}.items()]
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", "tinylm", *sets, "--change", "chekpoint=true", "--attempts", "2",
              "--min-valid-runs", "2", "--allow-undecidable", "--in-process", "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert exit_info.value.code == 2 and len(err) == 1 and "did you mean 'checkpoint'?" in err[0], err


@needs_transformers
def test_an_hf_factory_that_never_reads_the_change_is_refused(sqlite_uri):
    """The issue's case: --set atn=eager --change atn=sdpa on the adapter, a key the factory never reads."""
    conditions = {"model": "GPT2", "input_shape": "2,16", "batch_size": 2, "dtype": "fp32", "device": "cpu",
                  "measurement_method": "wall_median_step_ms", "warmup": 1, "steps": 2, "atn": "eager",
                  "n_layer": 2}
    with pytest.raises(SingleVariableError, match=r"never read the changed variable 'atn'.*'n_layer'"):
        compare(HF, conditions, {"atn": "sdpa"}, attempts=2, group="hf-atn", **QUICK)
    # a key the factory reads goes on to a decision
    result = compare(HF, conditions, {"n_layer": 3}, attempts=2, group="hf-layers", **QUICK)
    assert result["decision"] in ("accept", "reject", "rerun") and result["candidate"]["valid_runs"] == 2


def test_check_quality_gate_can_fail():
    with pytest.raises(InputError, match=r"quality_tolerance 0.01 is at least the baseline's quality 0.004.*"
                                         r"below 0.004 .*0.0004 allows 10%.*--allow-undecidable"):
        check_quality_gate_can_fail(0.004, 0.01)
    with pytest.raises(InputError):
        check_quality_gate_can_fail(0.01, 0.01)  # only a candidate below zero could fail it
    for quality in (0.5, 0.0100001, 0.0, -2.3, float("nan"), None, True, "x"):
        check_quality_gate_can_fail(quality, 0.01)  # a gate that can fail, or nothing known
    import numpy as np
    import torch

    for scalar in (np.float32(0.004), np.float64(0.004), torch.tensor(0.004)):  # as scientific Python hands it
        with pytest.raises(InputError, match="could not fail"):
            check_quality_gate_can_fail(scalar, np.float64(0.01))


def test_a_quality_gate_that_cannot_fail_stops_the_comparison_at_the_first_baseline(sqlite_uri, capsys):
    workload = "tests.workloads_fixtures.hostile:low_quality"
    with pytest.raises(InputError, match=r"quality_tolerance 0.01 is at least the baseline's quality 0.004"):
        compare(workload, HOSTILE, {"fail_at": 999}, attempts=2, group="q", supervised=False, progress=False,
                min_valid_runs=2, **SPEC)
    attempts = [r for r in MlflowClient().search_runs(["0"]) if r.data.tags.get(TAG.KIND) == "attempt"]
    assert [r.data.tags[TAG.ARM] for r in attempts] == ["baseline"]
    # a tolerance below the quality decides; --allow-undecidable runs it as it is
    decided = compare(workload, HOSTILE, {"fail_at": 999}, attempts=2, group="q2", supervised=False,
                      progress=False, min_valid_runs=2, quality_tolerance=0.0004, **SPEC)
    assert decided["decision"] in ("accept", "reject", "rerun")
    allowed = compare(workload, HOSTILE, {"fail_at": 999}, attempts=2, group="q3", **QUICK)
    assert allowed["decision"] in ("accept", "reject", "rerun")
    sets = [f"--set={key}={value}" for key, value in HOSTILE.items()]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--workload", workload, *sets, "--change", "fail_at=999", "--attempts", "2",
              "--min-valid-runs", "2", "--in-process", "--no-progress", "--group", "q4", *SPEC_FLAGS])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert exit_info.value.code == 2 and len(err) == 1 and "could not fail" in err[0], err
