"""Fuzzing: random input to the rules and to the ``record`` / ``evaluate`` command line.

Properties:

- the rules (``evaluate_regression``, ``decide``) given any records and thresholds either return
  a decision or raise ``ValueError`` / ``KeyError`` (``RuleTypeError`` is a ``ValueError``),
  and every decision they give is the specification's, recomputed here from scratch;
- ``record`` with any group name, arm, conditions, numbers and failure text either exits 0 and
  writes exactly that attempt (the group tag holds the name, character for character), or
  exits 2 with one line on stderr, no traceback, and writes nothing;
- ``evaluate`` with any thresholds over any such attempts exits 0, 1, 3 or 4 with the decision
  that ``rules.evaluate_regression`` gives on the attempts that were recorded (never another
  group's, however alike the names), or exits 2 with one line and no traceback, and then only
  where the rules themselves refuse the input.

Each test runs on a real SQLite store (``sqlite_uri``); each example uses its own experiment.
``PERFGATE_FUZZ_EXAMPLES=500`` hunts longer. The tests at the end pin what the fuzzing found and
the library now refuses or survives: text no store keeps (NUL, lone surrogates) and latencies near
the float limit (the plot is skipped, never the decision).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import time

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from mlflow_perfgate import rules
from mlflow_perfgate.cli import EXIT_CODES, main

#: PERFGATE_FUZZ_EXAMPLES=500 for a longer hunt; 40 keeps the file near 60 s on 2 cores.
CLI_EXAMPLES = int(os.environ.get("PERFGATE_FUZZ_EXAMPLES", "40"))
CLI_SETTINGS = settings(max_examples=CLI_EXAMPLES, deadline=None, database=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                               HealthCheck.data_too_large])
RULE_SETTINGS = settings(max_examples=max(300, CLI_EXAMPLES), deadline=None, database=None)
_COUNTER = itertools.count()
BASE = {"model": "TinyLM", "input_shape": "4,128", "batch_size": "4", "dtype": "fp32", "device": "cpu",
        "repeats": "5", "measurement_method": "wall_ms"}
THRESHOLD_OPTIONS = {"min_valid_runs": "--min-valid-runs", "min_improvement": "--min-improvement",
                     "quality_tolerance": "--quality-tolerance", "maximum_failure_rate": "--maximum-failure-rate",
                     "maximum_p95_ratio": "--maximum-p95-ratio"}


# ---------------------------------------------------------------------------------------------
# strategies

# Any text a shell can pass as UTF-8: any character but NUL (argv cannot hold it). Lone
# surrogates (Python's view of argv bytes that are not UTF-8) have their own test below.
any_char = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
nasty = st.sampled_from(["'", '"', "\\", "`", "%", "_", "*", " ", "\n", "\t", "\u00e9", "\u4e2d", "\U0001f600",
                         "\u202e", "\ufeff", "\u0301", "' OR '1'='1", '\\"', "tags.x = 'y'", "LIKE", "--"])
long_text = st.builds(lambda n, c: c * n, st.integers(min_value=7_990, max_value=8_010),
                      st.sampled_from(["a", "'", "\u00e9", "\\"]))
group_names = st.one_of(
    st.text(any_char, max_size=30),
    st.lists(st.one_of(nasty, st.text(any_char, max_size=3)), max_size=8).map("".join),
    long_text,
)
valid_keys = st.one_of(st.sampled_from(["checkpoint", "revision", "a.b", "a-b", "a/b", "a b", "a:b", "x" * 250]),
                       st.text("abcXYZ019_-. :/", min_size=1, max_size=12))
param_keys = st.one_of(
    valid_keys, valid_keys,
    st.sampled_from(["x" * 251, "", " ", "bad key!", "k'", "\u00e9t\u00e9", "../etc", "a=b"]),
    st.text(any_char, min_size=1, max_size=10),
)
param_values = st.one_of(st.text(any_char, max_size=20), st.sampled_from(["(4, 128)", "[4,128]", "true", "False",
                                                                          "nan", "inf", "1e400", "x" * 6001]))
number_text = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=0.001, max_value=1e4).map(repr),
    st.integers(min_value=-10**20, max_value=10**20).map(str),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e308", "1e309", "-1", "0", "-0.0", "5e-324", "1e-400",
                     "", " ", "abc", "0x10", "1_000", " 7 ", "\u0661"]),
)
good_number_text = st.floats(min_value=0.001, max_value=1e6).map(repr)
# For evaluate: as wild, but no finite magnitude beyond 1e12 (see the extreme-values test below).
bounded_number_text = st.one_of(
    st.floats(min_value=-1e12, max_value=1e12).map(repr),
    st.integers(min_value=-10**12, max_value=10**12).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "-1", "0", "-0.0", "5e-324", "1e-300", "", " ", "abc", "1_000"]),
)


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else code), out, err


def assert_clean_usage_error(code: int, err: str, argv: list[str]) -> None:
    assert code == 2, (code, err, argv)
    assert "Traceback" not in err, err
    assert len(err.strip("\n").split("\n")) == 1, (err, argv)
    assert err.startswith("Error: "), err


def runs_of(experiment: str) -> list:
    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], run_view_type=ViewType.ALL, max_results=50_000)


def click_float(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def click_int(text: str):
    try:
        return int(text)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# the rules

wild_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
    st.none(), st.booleans(), st.text(max_size=3), st.just([1.0]), st.just({"a": 1}),
    st.floats(min_value=0.01, max_value=1e4),
)
wild_records = st.one_of(
    st.fixed_dictionaries({"ok": st.sampled_from([True, False]), "latency_ms": wild_numbers, "quality": wild_numbers},
                          optional={"failure": st.one_of(st.none(), st.text(max_size=5))}),
    st.fixed_dictionaries({"ok": st.one_of(st.booleans(), st.none(), st.integers(0, 1), st.text(max_size=2))},
                          optional={"latency_ms": wild_numbers, "quality": wild_numbers}),
    st.sampled_from([None, 1, "run", [], ()]),
)
wild_thresholds = st.dictionaries(
    st.sampled_from(list(THRESHOLD_OPTIONS)), wild_numbers, max_size=5)


@RULE_SETTINGS
@given(baseline=st.one_of(st.lists(wild_records, max_size=8), st.none(), st.text(max_size=3)),
       candidate=st.lists(wild_records, max_size=8), thresholds=wild_thresholds,
       objective=st.sampled_from(["latency", "memory", "throughput", "speed"]),
       method=st.sampled_from(["seed", "robust", "magic"]), mode=st.sampled_from(["improvement", "non_regression", "x"]),
       margin=wild_numbers)
def test_rules_raise_only_value_or_key_errors(baseline, candidate, thresholds, objective, method, mode, margin):
    for call in (lambda: rules.evaluate_regression(baseline, candidate, **thresholds),
                 lambda: rules.decide(baseline, candidate, objective=objective, method=method, mode=mode,
                                      margin=margin, **thresholds)):
        try:
            result = call()
        except (ValueError, KeyError):
            continue
        assert result["decision"] in ("accept", "reject", "rerun"), result


def spec_decision(baseline: list, candidate: list, min_valid_runs=5, min_improvement=0.05, quality_tolerance=0.01,
                  maximum_failure_rate=0.0, maximum_p95_ratio=1.05) -> tuple[str, list]:
    """The specification's rule, recomputed from scratch: (decision, failed checks)."""

    def summary(runs):
        ok = [r for r in runs if r["ok"]]
        latencies = sorted(r["latency_ms"] for r in ok)
        if not latencies:
            return len(ok), (len(runs) - len(ok)) / len(runs) if runs else None, None, None, None
        p95 = latencies[max(0, math.ceil(len(latencies) * 0.95) - 1)]
        return (len(ok), (len(runs) - len(ok)) / len(runs), statistics.median(latencies), p95,
                statistics.mean(r["quality"] for r in ok))

    b_valid, b_rate, b_median, b_p95, b_quality = summary(baseline)
    c_valid, c_rate, c_median, c_p95, c_quality = summary(candidate)
    if min(b_valid, c_valid) < min_valid_runs:
        return "rerun", []
    if b_rate > maximum_failure_rate:
        return "rerun", []
    required = max(min_improvement, (b_p95 - b_median) / b_median)
    failed = [name for name, ok in (
        ("failure_rate_ok", c_rate <= maximum_failure_rate),
        ("quality_ok", c_quality >= b_quality - quality_tolerance),
        ("p95_ok", c_p95 / b_p95 <= maximum_p95_ratio),
        ("improvement_ok", (b_median - c_median) / b_median >= required),
    ) if not ok]
    return ("reject" if failed else "accept"), failed


good_latency = st.one_of(st.floats(min_value=1e-3, max_value=1e6), st.integers(min_value=1, max_value=10**6))
good_records = st.lists(st.one_of(
    st.builds(lambda v, q: {"ok": True, "latency_ms": v, "quality": q}, good_latency,
              st.floats(min_value=-1e6, max_value=1e6)),
    st.builds(lambda v, q: {"ok": True, "latency_ms": v, "quality": q}, st.floats(80, 120), st.sampled_from([0.9, 0.89])),
    st.just({"ok": False, "failure": "timeout"}),
), max_size=12)
good_thresholds = st.fixed_dictionaries({}, optional={
    "min_valid_runs": st.integers(min_value=1, max_value=8),
    "min_improvement": st.floats(min_value=0, max_value=1, exclude_max=True),
    "quality_tolerance": st.floats(min_value=0, max_value=1e6),
    "maximum_failure_rate": st.floats(min_value=0, max_value=1),
    "maximum_p95_ratio": st.floats(min_value=1, max_value=1e6),
})


@RULE_SETTINGS
@given(baseline=good_records, candidate=good_records, thresholds=good_thresholds)
def test_rules_decisions_hold_against_the_specification(baseline, candidate, thresholds):
    result = rules.evaluate_regression(baseline, candidate, **thresholds)
    decision, failed = spec_decision(baseline, candidate, **thresholds)
    assert result["decision"] == decision
    assert result.get("failed_checks", []) == failed
    if decision == "accept":  # what accept promises, whatever the arithmetic
        merged = {**rules.DEFAULT_THRESHOLDS, **thresholds}
        b, c = result["baseline"], result["candidate"]
        assert min(b["valid_runs"], c["valid_runs"]) >= merged["min_valid_runs"]
        assert c["median_ms"] <= b["median_ms"]
        assert c["failure_rate"] <= merged["maximum_failure_rate"]
        assert c["quality"] >= b["quality"] - merged["quality_tolerance"]
    seeded = rules.decide(baseline, candidate, **thresholds)
    assert seeded["decision"] == decision  # decide's default is the specification's rule, exact


# ---------------------------------------------------------------------------------------------
# record

@settings(CLI_SETTINGS, max_examples=3 * CLI_EXAMPLES)  # most examples end at the checks: cheap
@given(group=group_names, arm=st.sampled_from(["baseline", "candidate", "baseline", "candidate", "Baseline", ""]),
       sets=st.lists(st.tuples(param_keys, param_values), min_size=1, max_size=3),
       latency=st.one_of(good_number_text, good_number_text, number_text, st.none()),
       quality=st.one_of(good_number_text, good_number_text, number_text, st.none()),
       failure=st.one_of(st.none(), st.none(), st.none(), st.text(any_char, max_size=12),
                         st.sampled_from(["", " ", "x" * 8001])),
       attempt_id=st.one_of(st.none(), st.none(), st.text(any_char, max_size=8)))
def test_record_fuzz(sqlite_uri, capsys, group, arm, sets, latency, quality, failure, attempt_id):
    experiment = f"fuzz-record-{next(_COUNTER)}"
    argv = ["record", "--group", group, "--arm", arm, "--experiment", experiment]
    argv += [f"--set={key}={value}" for key, value in sets]
    for option, value in (("--latency-ms", latency), ("--quality", quality), ("--failure", failure),
                          ("--attempt-id", attempt_id)):
        if value is not None:
            argv += [option, value]
    code, out, err = run_cli(capsys, argv)
    event(f"record exit {code}")
    written = runs_of(experiment)
    if code != 0:
        assert_clean_usage_error(code, err, argv)
        assert written == []  # bad input writes nothing
        return
    assert err == "", err
    run_id = out.strip()
    assert [r.info.run_id for r in written] == [run_id]
    run = written[0]
    assert run.data.tags["perfgate.group"] == group  # character for character
    assert run.data.tags["perfgate.arm"] == arm
    assert set(run.data.params) == {f"{key}={value}".partition("=")[0].strip() for key, value in sets}
    if not failure:  # an empty --failure means none (the MLproject entry point's default)
        assert run.info.status == "FINISHED" and run.data.tags["perfgate.ok"] == "true"
        assert run.data.metrics["latency_ms"] == float(latency) and math.isfinite(float(latency))
    else:
        assert run.info.status == "FAILED" and run.data.tags["perfgate.failure"] == failure


# ---------------------------------------------------------------------------------------------
# evaluate

def attempt_specs(low: float, high: float):
    """(latency text, quality text, failure) per attempt: mostly good values, some wild ones."""
    good = st.tuples(st.floats(min_value=low, max_value=high).map(repr), st.sampled_from(["0.9", "0.895", "0.8"]),
                     st.none())
    mixed = st.lists(st.one_of(
        good, good, good, good,
        st.tuples(bounded_number_text, bounded_number_text, st.none()),
        st.tuples(st.none(), st.none(), st.sampled_from(["timeout", "oom", "exit 137", "\u00e9\"'\\"])),
    ), max_size=8)
    return st.one_of(st.lists(good, min_size=2, max_size=7), mixed)  # clean arms reach accept and reject


def threshold(usual: list[str]):
    usual_values = st.sampled_from(usual)
    return st.one_of(usual_values, usual_values, usual_values, usual_values, number_text)  # any magnitude


wild_threshold_text = st.fixed_dictionaries({}, optional={
    "min_valid_runs": st.one_of(st.integers(min_value=1, max_value=4).map(str), st.integers(min_value=1, max_value=4).map(str),
                                st.sampled_from(["0", "-1", "x", "1.5", "99999999999999999999", " 3"])),
    "min_improvement": threshold(["0", "0.05", "0.2", "0.9999"]),
    "quality_tolerance": threshold(["0", "0.01", "0.2"]),
    "maximum_failure_rate": threshold(["0", "0.2", "0.5", "1"]),
    "maximum_p95_ratio": threshold(["1", "1.05", "2"]),
})
clean_threshold_text = st.fixed_dictionaries({}, optional={
    "min_valid_runs": st.integers(min_value=1, max_value=4).map(str),
    "min_improvement": st.sampled_from(["0", "0.05", "0.2"]),
    "quality_tolerance": st.sampled_from(["0", "0.01", "0.2"]),
    "maximum_failure_rate": st.sampled_from(["0", "0.2", "0.5", "1"]),
    "maximum_p95_ratio": st.sampled_from(["1", "1.05", "2"]),
})
threshold_text = st.one_of(clean_threshold_text, wild_threshold_text)
evaluate_groups = st.one_of(
    st.text(any_char, min_size=1, max_size=30).filter(str.strip),
    st.text(any_char, min_size=1, max_size=30).filter(str.strip),
    st.lists(st.one_of(nasty, st.text(any_char, max_size=3)), min_size=1, max_size=8).map("".join).filter(str.strip),
    group_names,
)


def record_arm(capsys, group: str, arm: str, specs: list, experiment: str) -> tuple[list, list]:
    """Record an arm through the CLI; (records the store holds, their run ids)."""
    conditions = [f"--set={k}={v}" for k, v in BASE.items()] + [f"--set=checkpoint={arm == 'candidate'}"]
    records, run_ids = [], []
    for latency, quality, failure in specs:
        argv = ["record", "--group", group, "--arm", arm, "--experiment", experiment, *conditions]
        if failure is not None:
            argv += ["--failure", failure]
        else:
            argv += [f"--latency-ms={latency}", f"--quality={quality}"]
        code, out, err = run_cli(capsys, argv)
        if code != 0:
            assert_clean_usage_error(code, err, argv)
            continue
        run_ids.append(out.strip())
        records.append({"ok": False, "failure": failure} if failure is not None
                       else {"ok": True, "latency_ms": float(latency), "quality": float(quality)})
    return records, run_ids


GOOD = ("100.0", "0.9", None)
FAST = ("80.0", "0.9", None)


@CLI_SETTINGS
# the paths random draws reach least often, with names that break naive filters
@example(group="it's a \"quoted\" \\ group %_", baseline=[GOOD] * 5, candidate=[FAST] * 5, thresholds={}, decoy="%")
@example(group="\u4e2d\u6587 'x'", baseline=[GOOD] * 5, candidate=[("99.0", "0.9", None)] * 5, thresholds={}, decoy="_")
@example(group="' OR '1'='1", baseline=[GOOD] * 4 + [(None, None, "oom")], candidate=[FAST] * 5,
         thresholds={"maximum_failure_rate": "0.25", "min_valid_runs": "4"}, decoy="'")
@example(group="a" * 7_999, baseline=[GOOD] * 3, candidate=[FAST] * 3, thresholds={"min_valid_runs": "3"}, decoy="x")
@given(group=evaluate_groups, baseline=attempt_specs(95, 105), candidate=attempt_specs(60, 112),
       thresholds=threshold_text,
       decoy=st.sampled_from(["%", "_", "'", "\\", " ", "\u00e9", "x"]))
def test_evaluate_fuzz(sqlite_uri, capsys, group, baseline, candidate, thresholds, decoy):
    experiment = f"fuzz-evaluate-{next(_COUNTER)}-{time.time_ns()}"
    b_records, b_ids = record_arm(capsys, group, "baseline", baseline, experiment)
    c_records, c_ids = record_arm(capsys, group, "candidate", candidate, experiment)
    # a group whose name is alike (a LIKE wildcard, a quote, a prefix): none of its runs may be judged
    record_arm(capsys, group + decoy, "candidate", [(None, None, "decoy")] * 2, experiment)
    if (group[:-1] or decoy) != group:
        record_arm(capsys, group[:-1] or decoy, "baseline", [("1", "0", None)], experiment)

    argv = ["evaluate", "--group", group, "--experiment", experiment, "--format", "json"]
    for name, value in thresholds.items():
        argv.append(f"{THRESHOLD_OPTIONS[name]}={value}")
    code, out, err = run_cli(capsys, argv)
    event(f"evaluate exit {code}")

    # the rules' answer on what the store holds, with the thresholds as click parses them
    parsed = {name: (click_int if name == "min_valid_runs" else click_float)(value)
              for name, value in thresholds.items()}
    expected, expected_error = None, None
    if any(value is None for value in parsed.values()):
        expected_error = "an option click refuses"
    elif not b_records and not c_records:
        expected_error = "no attempts"
    else:
        try:
            expected = rules.evaluate_regression(b_records, c_records, **parsed)
        except (ValueError, KeyError) as exc:
            expected_error = str(exc)

    if code == 2:
        assert_clean_usage_error(code, err, argv)
        assert out == ""
        assert expected_error is not None, f"evaluate refused input the rules accept: {err}"
        assert not [r for r in runs_of(experiment) if r.data.tags.get("perfgate.kind") == "decision"]
        return
    assert code in (0, 1, 3, 4), (code, err)
    assert expected is not None, f"evaluate decided where the rules refuse ({expected_error}): {out}"
    result = json.loads(out)
    assert EXIT_CODES[result["decision"]] == code
    assert result["decision"] == expected["decision"], (result["decision"], expected["decision"], b_records,
                                                        c_records, thresholds)
    assert result["reason"] == expected["reason"]
    assert result["failed_checks"] == expected.get("failed_checks", [])
    assert sorted(result["run_ids"]) == sorted(b_ids + c_ids)  # this group's runs, all of them, no other's
    if result["decision"] == "accept":
        recomputed, _ = spec_decision(b_records, c_records, **parsed)
        assert recomputed == "accept"


@pytest.mark.parametrize("field", ["group", "condition value", "failure", "attempt id", "experiment"])
def test_text_with_nul_is_refused_before_anything_is_written(sqlite_uri, field):
    import mlflow_perfgate as pg

    bad = "a\x00b"  # the Python API can pass it (argv cannot)
    experiment = f"fuzz-nul-{next(_COUNTER)}"
    kwargs = dict(group="g", arm="baseline", conditions={"model": "m"}, latency_ms=1.0, quality=1.0,
                  experiment_name=experiment)
    if field == "group":
        kwargs["group"] = bad
    elif field == "condition value":
        kwargs["conditions"] = {"model": bad}
    elif field == "failure":
        kwargs.update(ok=False, failure=bad, latency_ms=None, quality=None)
    elif field == "attempt id":
        kwargs["attempt_id"] = bad
    else:
        kwargs["experiment_name"] = experiment = f"{experiment}{bad}"
    with pytest.raises(ValueError, match="NUL"):
        pg.log_attempt(**kwargs)
    assert runs_of(experiment) == []


@pytest.mark.parametrize("field", ["group", "condition value", "failure", "attempt id"])
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(sqlite_uri, capsys, field):
    bad = "x\udcff"  # what Python makes of the argv byte 0xff
    experiment = f"fuzz-surrogate-{next(_COUNTER)}"
    argv = {"group": ["--group", bad], "condition value": ["--group", "g", "--set", f"v={bad}"],
            "failure": ["--group", "g", "--failure", bad], "attempt id": ["--group", "g", "--attempt-id", bad]}[field]
    argv = ["record", "--arm", "baseline", "--set=model=m", "--experiment", experiment, *argv]
    if field != "failure":
        argv += ["--latency-ms=1", "--quality=1"]
    code, _, err = run_cli(capsys, argv)
    assert_clean_usage_error(code, err, argv)
    assert runs_of(experiment) == []
    assert "UTF-8" in err


def test_extreme_latencies_never_leave_a_half_written_decision(sqlite_uri, capsys):
    experiment = f"fuzz-extreme-{next(_COUNTER)}"
    record_arm(capsys, "extreme", "baseline", [("1.7e308", "0.9", None)] * 3, experiment)
    record_arm(capsys, "extreme", "candidate", [("1.6e308", "0.9", None)] * 3, experiment)
    code, out, err = run_cli(capsys, ["evaluate", "--group", "extreme", "--experiment", experiment,
                                      "--min-valid-runs", "3", "--format", "json"])
    decisions = [r for r in runs_of(experiment) if r.data.tags.get("perfgate.kind") == "decision"]
    if code == 2:
        assert_clean_usage_error(code, err, [])
        assert decisions == []  # an error leaves no decision behind
    else:
        assert code in (0, 1, 3)
        assert [r.info.status for r in decisions] == ["FINISHED"]
        assert json.loads(out)["decision_run_id"] == decisions[0].info.run_id
