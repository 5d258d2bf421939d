"""Edge cases of the eight rule functions, each checked against what the specification's code does.

Every expected value and exception below was worked out by hand from the specification
(``performance-evidence-and-experiment-design.md``) and cross-checked against a scratch
re-indentation of its code kept outside the repository. Where the specification's code raises
``TypeError`` for a wrong-typed value, ours must raise ``RuleTypeError`` (both a ``ValueError``
and a ``TypeError``).

Tests marked ``# DEVIATION`` pin a behaviour of ours that differs from the specification's code
on inputs it cannot handle: the class of the error for a value of the wrong type (AttributeError
there, RuleTypeError here), and a one-shot iterator given to ``percentile``.
"""

from __future__ import annotations

import types

import pytest

from mlflow_perfgate.rules import (
    RuleTypeError,
    changed_keys,
    decide,
    design_single_variable_experiment,
    evaluate_regression,
    percentile,
    summarize_repeated_runs,
    synthesize_evidence,
    top_hotspots,
    validate_validity_report,
)

NAN = float("nan")
INF = float("inf")

VALID = {
    "evidence_type": "correctness", "status": "valid", "run_valid": True,
    "issues": [], "first_failure": None, "reproducible": False,
}
INVALID = {
    "evidence_type": "correctness", "status": "invalid", "run_valid": False,
    "issues": ["numerical"], "first_failure": "mlp", "reproducible": True,
}
WORKLOAD = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32",
            "device": "cpu", "scope": "training_step"}
BASELINE = {
    "model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
    "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False, "num_workers": 0,
}
READY = {"status": "ready_for_experiment", "primary_signal": "memory", "hypothesis": "h"}
SPEC_RESULT_KEYS = {"baseline", "candidate", "decision", "reason"}
CHECK_KEYS = ["failure_rate_ok", "quality_ok", "p95_ok", "improvement_ok"]


def time_record(share_pct=50.0, name="backward", **over):
    record = {"evidence_type": "time", "status": "measured", "workload": dict(WORKLOAD),
              "hotspot": {"name": name, "share_pct": share_pct}}
    record.update(over)
    return record


def memory_record(reserved_mib=10, capacity_mib=64, **over):
    record = {"evidence_type": "memory", "status": "estimated", "workload": dict(WORKLOAD), "unit": "MiB",
              "dominant_object": "activation", "reserved_mib": reserved_mib, "capacity_mib": capacity_mib}
    record.update(over)
    return record


def bundle(time=None, memory=None, validity=None):
    return {"validity": dict(VALID if validity is None else validity),
            "time": time_record() if time is None else time,
            "memory": memory_record() if memory is None else memory}


def without(record, *keys):
    return {key: value for key, value in record.items() if key not in keys}


def ok_runs(latencies, quality=0.9):
    return [{"ok": True, "latency_ms": value, "quality": quality} for value in latencies]


def failed_runs(count, failure="timeout"):
    return [{"ok": False, "failure": failure} for _ in range(count)]


# --------------------------------------------------------------------------------------------
# validate_validity_report
# --------------------------------------------------------------------------------------------

def test_validity_valid_and_invalid_actions_and_copy():
    report = {**VALID, "note": "extra"}
    result = validate_validity_report(report)
    assert result == {**report, "performance_action": "continue"}
    assert result is not report and "performance_action" not in report
    assert validate_validity_report(INVALID)["performance_action"] == "stop_and_fix"


def test_validity_invalid_run_may_have_no_first_failure():
    # the specification only forbids a failure point on a *valid* run
    result = validate_validity_report({**INVALID, "first_failure": None})
    assert result["performance_action"] == "stop_and_fix"


@pytest.mark.parametrize("field", sorted(VALID))
def test_validity_missing_field_is_keyerror_naming_it(field):
    with pytest.raises(KeyError) as excinfo:
        validate_validity_report(without(VALID, field))
    assert field in str(excinfo.value)


def test_validity_missing_fields_checked_before_anything_else():
    with pytest.raises(KeyError) as excinfo:
        validate_validity_report({"evidence_type": "wrong", "run_valid": "yes"})
    for field in ("first_failure", "issues", "reproducible", "status"):
        assert field in str(excinfo.value)


@pytest.mark.parametrize("evidence_type", ["time", None, "Correctness", ""])
def test_validity_wrong_evidence_type(evidence_type):
    with pytest.raises(ValueError, match="evidence_type"):
        validate_validity_report({**VALID, "evidence_type": evidence_type})


@pytest.mark.parametrize("change", [
    {"run_valid": 1}, {"run_valid": "True"}, {"run_valid": None}, {"run_valid": 1.0},
    {"reproducible": 0}, {"reproducible": None}, {"reproducible": "False"},
])
def test_validity_bools_must_be_exact_bools(change):
    with pytest.raises(ValueError) as excinfo:
        validate_validity_report({**VALID, **change})
    assert next(iter(change)) in str(excinfo.value)


@pytest.mark.parametrize("issues", [None, ("numerical",), "numerical", [""], ["   "], [1], ["ok", None]])
def test_validity_issues_must_be_list_of_nonblank_strings(issues):
    with pytest.raises(ValueError, match="issues"):
        validate_validity_report({**INVALID, "issues": issues})


def test_validity_run_valid_must_match_issues():
    with pytest.raises(ValueError, match="run_valid"):
        validate_validity_report({**VALID, "issues": ["numerical"]})
    with pytest.raises(ValueError, match="run_valid"):
        validate_validity_report({**INVALID, "issues": []})


@pytest.mark.parametrize("first_failure", ["loss", "", 0, False])
def test_validity_valid_run_cannot_have_first_failure(first_failure):
    with pytest.raises(ValueError, match="first_failure"):
        validate_validity_report({**VALID, "first_failure": first_failure})


@pytest.mark.parametrize("report", [
    {**VALID, "status": "invalid"}, {**VALID, "status": None}, {**INVALID, "status": "valid"},
    {**INVALID, "status": "INVALID"},
])
def test_validity_status_must_match(report):
    with pytest.raises(ValueError, match="status"):
        validate_validity_report(report)


def test_validity_report_of_wrong_type():
    # the specification's set(None) raises TypeError
    with pytest.raises(RuleTypeError):
        validate_validity_report(None)


# --------------------------------------------------------------------------------------------
# top_hotspots
# --------------------------------------------------------------------------------------------

EVENTS = [
    {"name": "forward", "total_ms": 38, "calls": 2},
    {"name": "backward", "total_ms": 74, "calls": 2},
    {"name": "optimizer", "total_ms": 18, "calls": 1},
    {"name": "dataloader", "total_ms": 52, "calls": 4},
]


@pytest.mark.parametrize("events", [None, (), {}, tuple(EVENTS), "events", []])
def test_hotspots_not_a_nonempty_list_is_empty(events):
    assert top_hotspots(events) == []


@pytest.mark.parametrize("topk", [0, -1, -100, False, 0.0, -0.5])
def test_hotspots_topk_not_positive_is_empty(topk):
    assert top_hotspots(EVENTS, topk=topk) == []


def test_hotspots_topk_short_circuits_on_empty_events():
    # `not events` is tested before `topk <= 0`, so a nonsense topk is never looked at
    assert top_hotspots([], topk="x") == []
    assert top_hotspots(None, topk=None) == []


def test_hotspots_topk_checked_before_event_fields():
    assert top_hotspots([{"name": "broken"}], topk=0) == []


def test_hotspots_single_event_is_whole_share():
    assert top_hotspots([{"name": "only", "total_ms": 7.5, "calls": 3}]) == [
        {"name": "only", "total_ms": 7.5, "calls": 3, "share_pct": 100.0}
    ]


def test_hotspots_all_equal_keep_input_order():
    events = [{"name": n, "total_ms": 5, "calls": 1} for n in "abc"]
    result = top_hotspots(events, topk=3)
    assert [e["name"] for e in result] == ["a", "b", "c"]
    assert [e["share_pct"] for e in result] == [33.3, 33.3, 33.3]


def test_hotspots_ties_keep_input_order_behind_the_largest():
    events = [{"name": "x", "total_ms": 10, "calls": 1}, {"name": "big", "total_ms": 30, "calls": 1},
              {"name": "y", "total_ms": 10, "calls": 1}, {"name": "z", "total_ms": 10, "calls": 1}]
    assert [e["name"] for e in top_hotspots(events, topk=3)] == ["big", "x", "y"]


def test_hotspots_topk_bigger_than_events_and_true():
    assert [e["name"] for e in top_hotspots(EVENTS, topk=10)] == ["backward", "dataloader", "forward", "optimizer"]
    # True is an int (1) for both the comparison and the slice
    assert [e["name"] for e in top_hotspots(EVENTS, topk=True)] == ["backward"]


def test_hotspots_shares_and_copies():
    events = [dict(e, extra=i) for i, e in enumerate(EVENTS)]
    before = [dict(e) for e in events]
    result = top_hotspots(events, topk=4)
    assert [e["share_pct"] for e in result] == [
        round(74 / 182 * 100, 1), round(52 / 182 * 100, 1), round(38 / 182 * 100, 1), round(18 / 182 * 100, 1)
    ]
    assert result[0]["extra"] == 1
    assert events == before  # inputs are not modified


def test_hotspots_share_zero_and_hundred():
    result = top_hotspots([{"name": "idle", "total_ms": 0, "calls": 1},
                           {"name": "busy", "total_ms": 3, "calls": 1}], topk=2)
    assert [(e["name"], e["share_pct"]) for e in result] == [("busy", 100.0), ("idle", 0.0)]


@pytest.mark.parametrize("total", [0, 0.0, -0.0])
def test_hotspots_all_zero_time_is_valueerror(total):
    with pytest.raises(ValueError):
        top_hotspots([{"name": "a", "total_ms": total, "calls": 1}, {"name": "b", "total_ms": 0, "calls": 1}])


@pytest.mark.parametrize("missing", ["name", "total_ms", "calls"])
def test_hotspots_missing_field_is_valueerror_not_keyerror(missing):
    events = [dict(EVENTS[0]), without(EVENTS[1], missing)]
    with pytest.raises(ValueError) as excinfo:
        top_hotspots(events)
    assert excinfo.type is ValueError
    assert "total_ms" in str(excinfo.value)


def test_hotspots_fields_checked_for_all_events_before_values():
    # event 0 has a wrong-typed total_ms, event 1 lacks fields: the field check comes first
    events = [{"name": "a", "total_ms": "slow", "calls": 1}, {"name": "b"}]
    with pytest.raises(ValueError) as excinfo:
        top_hotspots(events)
    assert excinfo.type is ValueError


@pytest.mark.parametrize("total_ms", [-1, -0.001, NAN, INF, -INF])
def test_hotspots_bad_total_ms(total_ms):
    with pytest.raises(ValueError) as excinfo:
        top_hotspots([{"name": "a", "total_ms": total_ms, "calls": 1}, dict(EVENTS[0])])
    assert excinfo.type is ValueError
    assert "total_ms" in str(excinfo.value)


@pytest.mark.parametrize("calls", [0, -1, 0.0, False])
def test_hotspots_calls_must_be_positive(calls):
    with pytest.raises(ValueError, match="calls"):
        top_hotspots([{"name": "a", "total_ms": 1, "calls": calls}])


def test_hotspots_calls_nan_passes_like_the_spec():
    # `nan <= 0` is False, so the specification lets a NaN call count through
    assert top_hotspots([{"name": "a", "total_ms": 1, "calls": NAN}])[0]["share_pct"] == 100.0


@pytest.mark.parametrize("field, event", [
    ("total_ms", {"name": "a", "total_ms": "12", "calls": 1}),
    ("total_ms", {"name": "a", "total_ms": None, "calls": 1}),
    ("calls", {"name": "a", "total_ms": 1, "calls": "2"}),
    ("calls", {"name": "a", "total_ms": 1, "calls": None}),
])
def test_hotspots_wrong_typed_values_are_ruletypeerror(field, event):
    with pytest.raises(RuleTypeError) as excinfo:
        top_hotspots([event])
    assert field in str(excinfo.value)


@pytest.mark.parametrize("topk", ["2", None])
def test_hotspots_wrong_typed_topk(topk):
    with pytest.raises(RuleTypeError, match="topk"):
        top_hotspots(EVENTS, topk=topk)


@pytest.mark.parametrize("event", [None, 5])
def test_hotspots_event_not_a_dict(event):
    with pytest.raises(RuleTypeError):
        top_hotspots([dict(EVENTS[0]), event])


# --------------------------------------------------------------------------------------------
# synthesize_evidence
# --------------------------------------------------------------------------------------------

def test_synthesis_missing_validity_is_keyerror():
    with pytest.raises(KeyError, match="validity"):
        synthesize_evidence({"time": time_record(), "memory": memory_record()})


def test_synthesis_invalid_run_needs_no_time_or_memory():
    result = synthesize_evidence({"validity": INVALID})
    assert result["status"] == "blocked_by_correctness"
    assert result["primary_signal"] == "correctness"
    assert result["validity_status"] == "invalid" and result["issues"] == ["numerical"]
    assert isinstance(result["hypothesis"], str) and result["hypothesis"]
    # broken time/memory records are never looked at
    assert synthesize_evidence({"validity": INVALID, "time": None, "memory": 5})["status"] == "blocked_by_correctness"


@pytest.mark.parametrize("missing", ["time", "memory"])
def test_synthesis_valid_run_needs_time_and_memory(missing):
    with pytest.raises(KeyError):
        synthesize_evidence(without(bundle(), missing))


def test_synthesis_bad_validity_propagates():
    with pytest.raises(ValueError):
        synthesize_evidence(bundle(validity={**VALID, "status": "invalid"}))
    with pytest.raises(KeyError):
        synthesize_evidence(bundle(validity=without(VALID, "issues")))


@pytest.mark.parametrize("time, memory", [
    (time_record(evidence_type="memory"), memory_record()),
    (time_record(), memory_record(evidence_type="time")),
    (without(time_record(), "evidence_type"), memory_record()),
])
def test_synthesis_wrong_evidence_type(time, memory):
    with pytest.raises(ValueError, match="evidence_type"):
        synthesize_evidence(bundle(time, memory))


@pytest.mark.parametrize("time, memory", [
    (time_record(status="guessed"), memory_record()),
    (time_record(), memory_record(status=None)),
    (without(time_record(), "status"), memory_record()),
])
def test_synthesis_unlabelled_status(time, memory):
    with pytest.raises(ValueError, match="status"):
        synthesize_evidence(bundle(time, memory))


@pytest.mark.parametrize("status", ["measured", "estimated", "constructed_example"])
def test_synthesis_allowed_statuses(status):
    result = synthesize_evidence(bundle(time_record(status=status), memory_record(status=status)))
    assert result["observation_sources"] == {"time": status, "memory": status}


@pytest.mark.parametrize("time, memory", [
    (time_record(workload={}), memory_record(workload={})),
    (time_record(workload=None), memory_record(workload=None)),
    (without(time_record(), "workload"), memory_record()),
    (time_record(), without(memory_record(), "workload")),
    (time_record(), memory_record(workload={"model": "OtherModel"})),
])
def test_synthesis_workloads_must_match_and_be_nonempty(time, memory):
    with pytest.raises(ValueError, match="workload"):
        synthesize_evidence(bundle(time, memory))


@pytest.mark.parametrize("time", [
    without(time_record(), "hotspot"),
    time_record(hotspot={"name": "x"}),
    time_record(hotspot={"share_pct": 50.0}),
    time_record(hotspot={}),
])
def test_synthesis_missing_hotspot_is_keyerror(time):
    with pytest.raises(KeyError, match="hotspot"):
        synthesize_evidence(bundle(time=time))


@pytest.mark.parametrize("missing", ["dominant_object", "reserved_mib", "capacity_mib"])
def test_synthesis_missing_memory_field_is_keyerror(missing):
    with pytest.raises(KeyError):
        synthesize_evidence(bundle(memory=without(memory_record(), missing)))


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("where", ["share_pct", "reserved_mib", "capacity_mib",
                                   "capacity_alert_ratio", "hotspot_alert_share_pct"])
def test_synthesis_non_finite_values_are_valueerror(where, bad):
    kwargs = {}
    b = bundle()
    if where == "share_pct":
        b["time"]["hotspot"]["share_pct"] = bad
    elif where in ("reserved_mib", "capacity_mib"):
        b["memory"][where] = bad
    else:
        kwargs[where] = bad
    with pytest.raises(ValueError) as excinfo:
        synthesize_evidence(b, **kwargs)
    assert excinfo.type is ValueError
    assert where in str(excinfo.value)


@pytest.mark.parametrize("where, value", [("share_pct", "50"), ("reserved_mib", None),
                                          ("capacity_mib", "64"), ("capacity_alert_ratio", None)])
def test_synthesis_wrong_typed_values_are_ruletypeerror(where, value):
    b, kwargs = bundle(), {}
    if where == "share_pct":
        b["time"]["hotspot"]["share_pct"] = value
    elif where in ("reserved_mib", "capacity_mib"):
        b["memory"][where] = value
    else:
        kwargs[where] = value
    with pytest.raises(RuleTypeError, match=where):
        synthesize_evidence(b, **kwargs)


@pytest.mark.parametrize("memory", [
    memory_record(unit="GiB"), without(memory_record(), "unit"),
    memory_record(capacity_mib=0), memory_record(capacity_mib=-64, reserved_mib=-1),
])
def test_synthesis_unit_and_capacity(memory):
    with pytest.raises(ValueError):
        synthesize_evidence(bundle(memory=memory))


@pytest.mark.parametrize("reserved", [-1, -0.001, 64.001, 65])
def test_synthesis_reserved_outside_budget(reserved):
    with pytest.raises(ValueError, match="reserved_mib"):
        synthesize_evidence(bundle(memory=memory_record(reserved_mib=reserved, capacity_mib=64)))


def test_synthesis_reserved_equal_to_capacity_is_allowed_and_memory():
    result = synthesize_evidence(bundle(memory=memory_record(reserved_mib=64, capacity_mib=64)),
                                 capacity_alert_ratio=1.0)
    assert result["capacity_ratio"] == 1.0
    assert result["primary_signal"] == "memory"


def test_synthesis_reserved_zero_is_allowed():
    result = synthesize_evidence(bundle(time_record(share_pct=10.0), memory_record(reserved_mib=0)))
    assert result["capacity_ratio"] == 0.0
    assert result["status"] == "need_more_evidence" and result["primary_signal"] == "none"


@pytest.mark.parametrize("share", [0, 0.0, 100, 100.0])
def test_synthesis_share_bounds_allowed(share):
    result = synthesize_evidence(bundle(time=time_record(share_pct=share)))
    assert result["hotspot_share_pct"] == share


@pytest.mark.parametrize("share", [-0.1, 100.1, 150])
def test_synthesis_share_out_of_range(share):
    with pytest.raises(ValueError, match="share_pct"):
        synthesize_evidence(bundle(time=time_record(share_pct=share)))


@pytest.mark.parametrize("capacity_alert_ratio, hotspot_alert_share_pct", [
    (0, 40.0), (0.0, 40.0), (-0.5, 40.0), (1.0001, 40.0), (0.9, -0.01), (0.9, 100.01),
])
def test_synthesis_threshold_out_of_range(capacity_alert_ratio, hotspot_alert_share_pct):
    with pytest.raises(ValueError):
        synthesize_evidence(bundle(), capacity_alert_ratio, hotspot_alert_share_pct)


@pytest.mark.parametrize("capacity_alert_ratio, hotspot_alert_share_pct", [(1, 40.0), (1e-9, 0), (0.5, 100)])
def test_synthesis_threshold_bounds_allowed(capacity_alert_ratio, hotspot_alert_share_pct):
    result = synthesize_evidence(bundle(), capacity_alert_ratio, hotspot_alert_share_pct)
    assert result["thresholds"] == {"capacity_alert_ratio": capacity_alert_ratio,
                                    "hotspot_alert_share_pct": hotspot_alert_share_pct}


@pytest.mark.parametrize("reserved, capacity, ratio", [(9, 10, 0.9), (1.0, 4.0, 0.25), (48, 64, 0.75)])
def test_synthesis_capacity_ratio_exactly_on_alert_is_memory(reserved, capacity, ratio):
    assert reserved / capacity == ratio  # exact in binary floating point
    result = synthesize_evidence(bundle(time_record(share_pct=99.0), memory_record(reserved, capacity)),
                                 capacity_alert_ratio=ratio)
    assert result["status"] == "ready_for_experiment"
    assert result["primary_signal"] == "memory"  # memory wins over a strong time hotspot
    assert "activation" in result["hypothesis"]


def test_synthesis_capacity_ratio_just_below_alert_is_not_memory():
    result = synthesize_evidence(bundle(time_record(share_pct=10.0), memory_record(8.999, 10)),
                                 capacity_alert_ratio=0.9)
    assert result["primary_signal"] == "none" and result["status"] == "need_more_evidence"


@pytest.mark.parametrize("threshold", [0, 40.0, 55.5, 100])
def test_synthesis_share_exactly_on_hotspot_threshold_is_time(threshold):
    result = synthesize_evidence(bundle(time_record(share_pct=threshold, name="dataloader"), memory_record(0)),
                                 hotspot_alert_share_pct=threshold)
    assert result["status"] == "ready_for_experiment"
    assert result["primary_signal"] == "time"
    assert result["hotspot"] == "dataloader" and "dataloader" in result["hypothesis"]


def test_synthesis_share_just_below_threshold_is_need_more_evidence():
    result = synthesize_evidence(bundle(time_record(share_pct=39.9), memory_record(0)))
    assert (result["status"], result["primary_signal"]) == ("need_more_evidence", "none")


def test_synthesis_output_figures():
    result = synthesize_evidence(bundle(time_record(share_pct=12.5), memory_record(61, 64)))
    assert result["capacity_ratio"] == round(61 / 64, 3) == 0.953
    assert result["hotspot_share_pct"] == 12.5 and result["hotspot"] == "backward"
    assert result["dominant_object"] == "activation"
    assert result["validity_status"] == "valid" and result["issues"] == []
    assert result["thresholds"] == {"capacity_alert_ratio": 0.90, "hotspot_alert_share_pct": 40.0}
    assert result["observation_sources"] == {"time": "measured", "memory": "estimated"}


def test_synthesis_record_not_a_dict():
    # DEVIATION (kept, reported): the specification's code fails here with AttributeError
    # ('NoneType' object has no attribute 'get'); ours raises a RuleTypeError that names the record.
    with pytest.raises(RuleTypeError):
        synthesize_evidence({"validity": VALID, "time": None, "memory": memory_record()})
    with pytest.raises(RuleTypeError):
        synthesize_evidence({"validity": VALID, "time": time_record(), "memory": "memory"})


def test_synthesis_hotspot_of_wrong_type():
    with pytest.raises(RuleTypeError):
        synthesize_evidence(bundle(time=time_record(hotspot=None)))


# Was a DISCREPANCY, fixed: the specification only calls .get() on the time and memory records, so any
# read-only mapping works there; ours insists on a dict and raises RuleTypeError.
def test_synthesis_accepts_a_readonly_mapping_like_the_spec():
    b = bundle()
    b["time"] = types.MappingProxyType(b["time"])
    result = synthesize_evidence(b)
    assert result["primary_signal"] == "time"


# --------------------------------------------------------------------------------------------
# design_single_variable_experiment and changed_keys
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("missing", ["model", "input_shape", "batch_size", "dtype", "device", "repeats",
                                     "measurement_method"])
def test_design_baseline_missing_fixed_condition_is_keyerror(missing):
    with pytest.raises(KeyError, match=missing):
        design_single_variable_experiment(READY, without(BASELINE, missing), {"batch_size": 8})


def test_design_baseline_checked_before_evidence():
    with pytest.raises(KeyError, match="device"):
        design_single_variable_experiment({}, without(BASELINE, "device"))


def test_design_blocked_by_correctness_ignores_the_change():
    evidence = {"status": "blocked_by_correctness", "hypothesis": "fix it"}
    plan = design_single_variable_experiment(evidence, BASELINE, {"a": 1, "b": 2})
    assert plan["action"] == "fix_correctness_first"
    assert plan["candidate"] is None and plan["changed_variable"] is None
    assert plan["metrics"] == ["run_valid", "issues", "first_failure"]
    assert plan["fixed_conditions"] == BASELINE and plan["baseline"] == BASELINE
    assert plan["hypothesis"] == "fix it" and plan["evidence_level"] == "teaching_proxy"
    assert changed_keys(plan) == []


@pytest.mark.parametrize("evidence, change", [
    ({"status": "need_more_evidence", "hypothesis": "h"}, {"batch_size": 8}),
    ({"status": "need_more_evidence", "hypothesis": "h"}, {"device": "cuda", "model": "x"}),
    ({"status": "something_else", "hypothesis": "h"}, {"batch_size": 8}),
    (READY, None),
    (READY, {}),
])
def test_design_collect_more_evidence(evidence, change):
    plan = design_single_variable_experiment(evidence, BASELINE, change)
    assert plan["action"] == "collect_more_evidence"
    assert plan["candidate"] is None and plan["changed_variable"] is None
    assert plan["fixed_conditions"] == BASELINE
    assert plan["metrics"] == ["latency_ms", "throughput_tok_s"]
    assert changed_keys(plan) == []


@pytest.mark.parametrize("evidence", [{"hypothesis": "h"}, {"status": "ready_for_experiment"}])
def test_design_evidence_missing_fields_is_keyerror(evidence):
    with pytest.raises(KeyError):
        design_single_variable_experiment(evidence, BASELINE, {"batch_size": 8})


def test_design_two_changes_refused():
    with pytest.raises(ValueError, match="exactly one"):
        design_single_variable_experiment(READY, BASELINE, {"batch_size": 8, "dtype": "bf16"})


def test_design_undeclared_variable_refused():
    with pytest.raises(ValueError, match="compile"):
        design_single_variable_experiment(READY, BASELINE, {"compile": True})


@pytest.mark.parametrize("variable, value", [
    ("model", "Other"), ("input_shape", (8, 128)), ("device", "cuda"), ("repeats", 10),
    ("measurement_method", "cuda_events"),
])
def test_design_immutable_variable_refused(variable, value):
    with pytest.raises(ValueError, match=variable):
        design_single_variable_experiment(READY, BASELINE, {variable: value})


@pytest.mark.parametrize("variable, value", [
    ("batch_size", 4), ("batch_size", 4.0), ("checkpoint", False), ("checkpoint", 0), ("num_workers", False),
])
def test_design_unchanged_value_refused(variable, value):
    # equality is ==, so 4.0 == 4 and False == 0 count as unchanged
    with pytest.raises(ValueError, match=variable):
        design_single_variable_experiment(READY, BASELINE, {variable: value})


@pytest.mark.parametrize("variable, value", [("batch_size", 8), ("dtype", "bf16"), ("checkpoint", True),
                                             ("num_workers", 2)])
def test_design_run_comparison(variable, value):
    baseline = dict(BASELINE)
    plan = design_single_variable_experiment(READY, baseline, {variable: value})
    assert baseline == BASELINE  # not modified
    assert plan["action"] == "run_comparison"
    assert plan["changed_variable"] == variable
    assert plan["candidate"] == {**BASELINE, variable: value}
    assert plan["baseline"] == BASELINE and plan["baseline"] is not baseline
    assert plan["fixed_conditions"] == without(BASELINE, variable)
    assert plan["metrics"] == ["latency_ms", "throughput_tok_s", "quality", "resource_cost"]
    assert plan["hypothesis"] == "h" and plan["evidence_level"] == "teaching_proxy"
    assert changed_keys(plan) == [variable]


def test_design_nan_counts_as_changed_like_the_spec():
    # nan == nan is False, so the specification treats the value as changed
    baseline = {**BASELINE, "batch_size": NAN}
    plan = design_single_variable_experiment(READY, baseline, {"batch_size": NAN})
    assert plan["action"] == "run_comparison" and plan["changed_variable"] == "batch_size"


def test_design_baseline_of_wrong_type():
    with pytest.raises(RuleTypeError):
        design_single_variable_experiment(READY, None, {"batch_size": 8})


def test_changed_keys_candidate_none():
    assert changed_keys({"baseline": {"a": 1}, "candidate": None}) == []
    # baseline is never read when there is no candidate
    assert changed_keys({"candidate": None}) == []


def test_changed_keys_one_sided_keys():
    assert changed_keys({"baseline": {"a": 1}, "candidate": {"a": 1, "b": 2}}) == ["b"]
    assert changed_keys({"baseline": {"a": 1, "b": 2}, "candidate": {"a": 1}}) == ["b"]
    # a key present on one side only with the value None compares equal to the missing side (.get)
    assert changed_keys({"baseline": {"a": 1, "b": None}, "candidate": {"a": 1}}) == []
    assert changed_keys({"baseline": {"a": 1}, "candidate": {}}) == ["a"]


def test_changed_keys_sorted_and_equal():
    plan = {"baseline": {"z": 1, "a": 1, "m": 1, "k": 0}, "candidate": {"z": 2, "a": 2, "m": 1, "k": False}}
    assert changed_keys(plan) == ["a", "z"]
    assert changed_keys({"baseline": {"a": 1}, "candidate": {"a": 1}}) == []


def test_changed_keys_missing_fields_are_keyerror():
    with pytest.raises(KeyError):
        changed_keys({"baseline": {}})
    with pytest.raises(KeyError):
        changed_keys({"candidate": {"a": 1}})


# --------------------------------------------------------------------------------------------
# percentile
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction", [0, 0.0, 0.5, 0.95, 1, 1.0])
def test_percentile_one_sample(fraction):
    assert percentile([7.25], fraction) == 7.25


@pytest.mark.parametrize("n, expected_rank", [(1, 1), (2, 2), (19, 19), (20, 19), (21, 20), (100, 95)])
def test_percentile_p95_nearest_rank_by_hand(n, expected_rank):
    # rank = ceil(n * 0.95): 1 -> 1, 2 -> ceil(1.9) = 2, 19 -> ceil(18.05) = 19,
    # 20 -> ceil(19.0) = 19, 21 -> ceil(19.95) = 20, 100 -> ceil(95.0) = 95
    values = [10 * k for k in range(n, 0, -1)]  # descending: the function must sort
    assert percentile(values, 0.95) == 10 * expected_rank


def test_percentile_two_samples_median_rank():
    assert percentile([5, 3], 0.5) == 3  # ceil(1.0) = 1
    assert percentile([5, 3], 0.51) == 5  # ceil(1.02) = 2


@pytest.mark.parametrize("fraction, expected", [(0, 1), (-0.0, 1), (1, 9), (True, 9), (False, 1)])
def test_percentile_fraction_bounds(fraction, expected):
    assert percentile([4, 9, 1, 6], fraction) == expected


def test_percentile_all_equal_and_types_kept():
    assert percentile([3, 3, 3], 0.95) == 3
    result = percentile([2, 1.5, 3], 0.95)
    assert result == 3 and type(result) is int
    assert percentile((3, 1, 2), 0.5) == 2  # any sized iterable works, as in the specification


@pytest.mark.parametrize("fraction", [-0.01, 1.01, NAN, INF, -INF])
def test_percentile_fraction_out_of_range(fraction):
    with pytest.raises(ValueError) as excinfo:
        percentile([1, 2, 3], fraction)
    assert excinfo.type is ValueError
    assert "fraction" in str(excinfo.value)


@pytest.mark.parametrize("values", [[], None, ()])
def test_percentile_empty(values):
    with pytest.raises(ValueError) as excinfo:
        percentile(values, 0.5)
    assert excinfo.type is ValueError


def test_percentile_empty_checked_before_fraction_type():
    with pytest.raises(ValueError) as excinfo:
        percentile([], "x")
    assert excinfo.type is ValueError


@pytest.mark.parametrize("bad", [0, 0.0, -1, NAN, INF, -INF])
def test_percentile_samples_must_be_positive_finite(bad):
    with pytest.raises(ValueError) as excinfo:
        percentile([1, bad, 3], 0.5)
    assert excinfo.type is ValueError


@pytest.mark.parametrize("values, fraction", [([1, "2"], 0.5), ([None], 0.5), ([1], "0.5"), ([1], None)])
def test_percentile_wrong_types(values, fraction):
    with pytest.raises(RuleTypeError):
        percentile(values, fraction)


# DEVIATION (kept on purpose): the specification's code walks `values` twice (once to validate,
# once to sort), so a one-shot iterator is exhausted by the validation and the final indexing of an
# empty list raises IndexError; ours copies the iterator into a list first and answers.
def test_percentile_of_a_generator_is_answered():
    assert percentile((value for value in [3, 1, 2]), 0.5) == 2


# --------------------------------------------------------------------------------------------
# summarize_repeated_runs
# --------------------------------------------------------------------------------------------

def test_summary_no_attempts():
    assert summarize_repeated_runs([]) == {
        "attempted_runs": 0, "valid_runs": 0, "failed_runs": 0, "failure_rate": None,
        "failure_reasons": [], "median_ms": None, "p95_ms": None, "quality": None,
    }


def test_summary_all_failed():
    runs = [{"ok": False, "failure": "oom"}, {"ok": False}, {"ok": False, "failure": None},
            {"ok": False, "latency_ms": NAN, "quality": "bad"}]
    summary = summarize_repeated_runs(runs)
    assert summary["attempted_runs"] == 4 and summary["valid_runs"] == 0 and summary["failed_runs"] == 4
    assert summary["failure_rate"] == 1.0
    # 'unspecified' only when the key is absent; an explicit None stays None (dict.get)
    assert summary["failure_reasons"] == ["oom", "unspecified", None, "unspecified"]
    assert summary["median_ms"] is None and summary["p95_ms"] is None and summary["quality"] is None


def test_summary_one_sample():
    summary = summarize_repeated_runs([{"ok": True, "latency_ms": 12.5, "quality": -0.25}])
    assert summary["median_ms"] == summary["p95_ms"] == 12.5
    assert summary["quality"] == -0.25  # quality only has to be finite
    assert summary["failure_rate"] == 0.0 and summary["failure_reasons"] == []


def test_summary_all_equal():
    summary = summarize_repeated_runs(ok_runs([4, 4, 4, 4], quality=0.5))
    assert summary["median_ms"] == summary["p95_ms"] == 4 and summary["quality"] == 0.5


@pytest.mark.parametrize("latencies, median", [([1, 2, 3, 100], 2.5), ([2, 1], 1.5), ([3, 1, 2], 2),
                                               ([1, 2, 3, 4, 5, 6], 3.5)])
def test_summary_median_is_statistics_median(latencies, median):
    assert summarize_repeated_runs(ok_runs(latencies))["median_ms"] == median


def test_summary_failure_rate_and_mixed():
    runs = ok_runs([10, 30, 20], quality=1.0) + [{"ok": False, "failure": "timeout"}]
    runs[1]["quality"] = 0.5
    summary = summarize_repeated_runs(runs)
    assert summary["attempted_runs"] == 4 and summary["valid_runs"] == 3 and summary["failed_runs"] == 1
    assert summary["failure_rate"] == 0.25
    assert summary["median_ms"] == 20 and summary["p95_ms"] == 30
    assert summary["quality"] == pytest.approx(2.5 / 3)
    assert summary["failure_reasons"] == ["timeout"]


@pytest.mark.parametrize("ok", [1, 0, None, "True", 1.0])
def test_summary_ok_must_be_bool(ok):
    with pytest.raises(ValueError, match="ok"):
        summarize_repeated_runs([{"ok": True, "latency_ms": 1, "quality": 1}, {"ok": ok}])


def test_summary_missing_ok_is_valueerror():
    with pytest.raises(ValueError):
        summarize_repeated_runs([{"latency_ms": 1, "quality": 1}])


def test_summary_ok_checked_before_missing_latency():
    with pytest.raises(ValueError) as excinfo:
        summarize_repeated_runs([{"ok": True}, {"ok": "no"}])
    assert excinfo.type is ValueError


@pytest.mark.parametrize("missing", ["latency_ms", "quality"])
def test_summary_successful_run_missing_field_is_keyerror(missing):
    with pytest.raises(KeyError) as excinfo:
        summarize_repeated_runs([without({"ok": True, "latency_ms": 1, "quality": 1}, missing)])
    assert missing in str(excinfo.value)


def test_summary_failed_run_needs_no_fields():
    assert summarize_repeated_runs([{"ok": False}])["failed_runs"] == 1


@pytest.mark.parametrize("latency", [0, -1, NAN, INF, -INF])
def test_summary_bad_latency(latency):
    with pytest.raises(ValueError, match="latency_ms") as excinfo:
        summarize_repeated_runs(ok_runs([1, latency]))
    assert excinfo.type is ValueError


@pytest.mark.parametrize("quality", [NAN, INF, -INF])
def test_summary_non_finite_quality(quality):
    with pytest.raises(ValueError, match="quality") as excinfo:
        summarize_repeated_runs([{"ok": True, "latency_ms": 1, "quality": quality}])
    assert excinfo.type is ValueError


@pytest.mark.parametrize("run, field", [
    ({"ok": True, "latency_ms": "1", "quality": 1}, "latency_ms"),
    ({"ok": True, "latency_ms": None, "quality": 1}, "latency_ms"),
    ({"ok": True, "latency_ms": 1, "quality": "0.9"}, "quality"),
    ({"ok": True, "latency_ms": 1, "quality": None}, "quality"),
])
def test_summary_wrong_typed_values(run, field):
    with pytest.raises(RuleTypeError, match=field):
        summarize_repeated_runs([run])


def test_summary_latency_checked_before_quality():
    with pytest.raises(ValueError, match="latency_ms"):
        summarize_repeated_runs([{"ok": True, "latency_ms": NAN, "quality": "x"}])


def test_summary_run_not_a_dict():
    # DEVIATION (kept, reported): the specification's code fails here with AttributeError
    # (None.get('ok')); ours raises a RuleTypeError that says a run must be a dict.
    with pytest.raises(RuleTypeError):
        summarize_repeated_runs([None])


def test_summary_does_not_modify_runs():
    runs = ok_runs([3, 1, 2]) + failed_runs(1)
    before = [dict(run) for run in runs]
    summarize_repeated_runs(runs)
    assert runs == before


# --------------------------------------------------------------------------------------------
# evaluate_regression
# --------------------------------------------------------------------------------------------

B5 = ok_runs([100, 102, 99, 101, 100], quality=0.9)
C5 = ok_runs([88, 90, 89, 91, 87], quality=0.895)


@pytest.mark.parametrize("min_valid_runs", [True, False, 5.0, "5", None, 0, -1])
def test_evaluate_min_valid_runs_must_be_positive_int(min_valid_runs):
    with pytest.raises(ValueError, match="min_valid_runs") as excinfo:
        evaluate_regression(B5, C5, min_valid_runs=min_valid_runs)
    assert excinfo.type is ValueError


@pytest.mark.parametrize("field, value", [
    ("min_improvement", 1), ("min_improvement", 1.0), ("min_improvement", -1e-9), ("min_improvement", True),
    ("quality_tolerance", -1e-9), ("quality_tolerance", -1),
    ("maximum_failure_rate", -1e-9), ("maximum_failure_rate", 1.0000001),
    ("maximum_p95_ratio", 0.9999), ("maximum_p95_ratio", 0), ("maximum_p95_ratio", False),
])
def test_evaluate_threshold_out_of_range(field, value):
    with pytest.raises(ValueError, match=field) as excinfo:
        evaluate_regression(B5, C5, **{field: value})
    assert excinfo.type is ValueError


@pytest.mark.parametrize("field", ["min_improvement", "quality_tolerance", "maximum_failure_rate", "maximum_p95_ratio"])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_evaluate_non_finite_threshold(field, value):
    with pytest.raises(ValueError, match=field) as excinfo:
        evaluate_regression(B5, C5, **{field: value})
    assert excinfo.type is ValueError


@pytest.mark.parametrize("field", ["min_improvement", "quality_tolerance", "maximum_failure_rate", "maximum_p95_ratio"])
@pytest.mark.parametrize("value", ["0.5", None])
def test_evaluate_wrong_typed_threshold(field, value):
    with pytest.raises(RuleTypeError, match=field):
        evaluate_regression(B5, C5, **{field: value})


def test_evaluate_thresholds_checked_before_runs():
    with pytest.raises(ValueError, match="min_valid_runs") as excinfo:
        evaluate_regression([None], [{"ok": True}], min_valid_runs=0)
    assert excinfo.type is ValueError
    # finite-ness is checked for all four before any range
    with pytest.raises(ValueError, match="quality_tolerance"):
        evaluate_regression(B5, C5, min_improvement=2, quality_tolerance=NAN)


@pytest.mark.parametrize("kwargs", [
    dict(min_improvement=0), dict(min_improvement=0.999), dict(quality_tolerance=0),
    dict(maximum_failure_rate=0), dict(maximum_failure_rate=1), dict(maximum_p95_ratio=1),
    dict(min_valid_runs=1), dict(maximum_failure_rate=True), dict(quality_tolerance=False),
])
def test_evaluate_threshold_bounds_allowed(kwargs):
    result = evaluate_regression(B5, C5, **kwargs)
    assert result["decision"] in {"accept", "reject"}


def test_evaluate_no_attempts_is_insufficient():
    result = evaluate_regression([], [])
    assert result["decision"] == "rerun" and result["reason"] == "insufficient_valid_runs"
    assert set(result) == SPEC_RESULT_KEYS
    assert result["baseline"]["failure_rate"] is None and result["candidate"]["attempted_runs"] == 0


def test_evaluate_all_candidate_attempts_failed_is_insufficient():
    result = evaluate_regression(B5, failed_runs(5))
    assert (result["decision"], result["reason"]) == ("rerun", "insufficient_valid_runs")
    assert result["candidate"]["failure_rate"] == 1.0
    assert set(result) == SPEC_RESULT_KEYS


def test_evaluate_all_candidate_attempts_failed_keeps_the_order_and_says_so():
    # the specification's order: insufficient_valid_runs first, even for a candidate that never succeeded
    # (the statistical methods reject it); the decision's messages say why there is nothing to read
    result = decide(B5, failed_runs(5))
    assert (result["decision"], result["reason"], result["method"]) == ("rerun", "insufficient_valid_runs", "seed")
    assert result["messages"] == {
        "candidate_failed_every_attempt": "NOTE: the candidate failed every one of its 5 attempts (timeout)"}
    assert "candidate_failed_every_attempt" not in evaluate_regression(B5, failed_runs(5))
    assert decide(B5, C5 + failed_runs(1))["messages"].keys() == set(CHECK_KEYS)


def test_evaluate_compares_exactly_as_the_specification_does():
    # ties of binary numbers stay ties in any unit (a difference over a median is correctly rounded)
    for base, cand in [(100, 95), (200, 190), (2000, 1900), (60, 57), (20, 19), (1000, 950)]:
        result = evaluate_regression(ok_runs([base] * 5), ok_runs([cand] * 5))
        assert result["decision"] == "accept", (base, cand)
    # 2.85 is no binary number: the double is 4.99999999999999970e-2 short of 5% faster than 3, and the
    # specification's code rejects it; the seed method keeps that answer (no tolerance; the robust method
    # and the objectives compare with one)
    assert (3 - 2.85) / 3 < 0.05
    assert evaluate_regression(ok_runs([3] * 5), ok_runs([2.85] * 5))["failed_checks"] == ["improvement_ok"]


def test_evaluate_insufficient_comes_before_unreliable_baseline():
    baseline = ok_runs([100] * 4) + failed_runs(3)  # unreliable AND too few
    result = evaluate_regression(baseline, C5)
    assert (result["decision"], result["reason"]) == ("rerun", "insufficient_valid_runs")
    assert set(result) == SPEC_RESULT_KEYS


def test_evaluate_unreliable_baseline():
    result = evaluate_regression(B5 + failed_runs(1), C5)
    assert (result["decision"], result["reason"]) == ("rerun", "unreliable_baseline")
    assert set(result) == SPEC_RESULT_KEYS
    assert result["baseline"]["failure_rate"] == 1 / 6


def test_evaluate_baseline_failure_rate_exactly_on_the_maximum_is_reliable():
    result = evaluate_regression(B5 + failed_runs(1), C5 + failed_runs(1), maximum_failure_rate=1 / 6)
    assert result["reason"] == "declared_thresholds_checked"
    assert result["failure_rate_ok"] is True and result["decision"] == "accept"


def test_evaluate_min_valid_runs_boundary():
    assert evaluate_regression(B5[:4], C5, min_valid_runs=4)["reason"] == "declared_thresholds_checked"
    assert evaluate_regression(B5[:4], C5, min_valid_runs=5)["reason"] == "insufficient_valid_runs"


def test_evaluate_one_sample_each():
    result = evaluate_regression(ok_runs([100]), ok_runs([50]), min_valid_runs=1)
    assert result["decision"] == "accept"
    assert result["baseline_noise"] == 0 and result["observed_improvement"] == 0.5


def test_evaluate_all_samples_equal_no_change_is_reject():
    result = evaluate_regression(ok_runs([100] * 5), ok_runs([100] * 5))
    assert result["decision"] == "reject" and result["failed_checks"] == ["improvement_ok"]
    assert result["observed_improvement"] == 0 and result["baseline_noise"] == 0
    # with min_improvement 0, no improvement at all is enough (>=)
    assert evaluate_regression(ok_runs([100] * 5), ok_runs([100] * 5), min_improvement=0)["decision"] == "accept"


def test_evaluate_observed_exactly_equal_to_required_is_accept():
    result = evaluate_regression(ok_runs([100] * 5), ok_runs([95] * 5))
    assert result["observed_improvement"] == result["required_improvement"] == 0.05
    assert result["improvement_ok"] is True and result["decision"] == "accept"
    just_short = evaluate_regression(ok_runs([100] * 5), ok_runs([95.01] * 5))
    assert just_short["failed_checks"] == ["improvement_ok"] and just_short["decision"] == "reject"


def test_evaluate_baseline_noise_raises_the_bar():
    baseline = ok_runs([100, 100, 100, 100, 120])  # median 100, P95 120, noise 0.2
    exactly = evaluate_regression(baseline, ok_runs([80] * 5))
    assert exactly["baseline_noise"] == 0.2 and exactly["required_improvement"] == 0.2
    assert exactly["observed_improvement"] == 0.2 and exactly["decision"] == "accept"
    short = evaluate_regression(baseline, ok_runs([81] * 5))
    assert short["decision"] == "reject" and short["failed_checks"] == ["improvement_ok"]


def test_evaluate_p95_ratio_exactly_on_the_maximum_is_ok():
    candidate = ok_runs([95, 95, 95, 95, 105])
    result = evaluate_regression(ok_runs([100] * 5), candidate)
    assert result["candidate"]["p95_ms"] / result["baseline"]["p95_ms"] == 1.05
    assert result["p95_ok"] is True and result["decision"] == "accept"
    over = evaluate_regression(ok_runs([100] * 5), ok_runs([95, 95, 95, 95, 106]))
    assert over["p95_ok"] is False and over["failed_checks"] == ["p95_ok"]


def test_evaluate_p95_ratio_one():
    result = evaluate_regression(ok_runs([100] * 5), ok_runs([90, 90, 90, 90, 100]), maximum_p95_ratio=1)
    assert result["p95_ok"] is True and result["decision"] == "accept"
    result = evaluate_regression(ok_runs([100] * 5), ok_runs([90, 90, 90, 90, 100.5]), maximum_p95_ratio=1)
    assert result["p95_ok"] is False


def test_evaluate_quality_exactly_at_baseline_minus_tolerance_is_ok():
    result = evaluate_regression(ok_runs([100] * 5, quality=0.75), ok_runs([90] * 5, quality=0.5),
                                 quality_tolerance=0.25)
    assert result["quality_ok"] is True and result["decision"] == "accept"
    below = evaluate_regression(ok_runs([100] * 5, quality=0.75), ok_runs([90] * 5, quality=0.4999),
                                quality_tolerance=0.25)
    assert below["failed_checks"] == ["quality_ok"]
    equal = evaluate_regression(ok_runs([100] * 5, quality=0.75), ok_runs([90] * 5, quality=0.75),
                                quality_tolerance=0)
    assert equal["quality_ok"] is True


def test_evaluate_candidate_failure_rate_boundaries():
    base = ok_runs([100] * 5)
    # maximum 0: a single failure rejects
    one = evaluate_regression(base, ok_runs([90] * 5) + failed_runs(1))
    assert one["decision"] == "reject" and one["failed_checks"] == ["failure_rate_ok"]
    # exactly on the maximum (5 of 10 = 0.5) passes, one more fails
    at = evaluate_regression(base, ok_runs([90] * 5) + failed_runs(5), maximum_failure_rate=0.5)
    assert at["failure_rate_ok"] is True and at["decision"] == "accept"
    over = evaluate_regression(base, ok_runs([90] * 5) + failed_runs(6), maximum_failure_rate=0.5)
    assert over["failure_rate_ok"] is False and over["decision"] == "reject"
    # maximum 1: any failure rate is tolerated
    lots = evaluate_regression(base, ok_runs([90] * 5) + failed_runs(500), maximum_failure_rate=1)
    assert lots["failure_rate_ok"] is True and lots["decision"] == "accept"


def test_evaluate_many_failures_reject_not_rerun():
    result = evaluate_regression(B5, C5 + failed_runs(50))
    assert result["decision"] == "reject" and result["reason"] == "declared_thresholds_checked"
    assert result["candidate"]["failure_reasons"] == ["timeout"] * 50


def test_evaluate_everything_fails_in_order():
    candidate = ok_runs([200, 200, 200, 200, 400], quality=0.1) + failed_runs(1)
    result = evaluate_regression(B5, candidate)
    assert result["failed_checks"] == CHECK_KEYS
    assert all(result[key] is False for key in CHECK_KEYS)
    assert result["decision"] == "reject"
    assert result["observed_improvement"] < 0


def test_evaluate_full_result_keys():
    result = evaluate_regression(B5, C5, maximum_failure_rate=0.25, maximum_p95_ratio=1.5)
    assert set(result) >= SPEC_RESULT_KEYS | set(CHECK_KEYS) | {
        "failed_checks", "baseline_noise", "required_improvement", "observed_improvement",
        "maximum_failure_rate", "maximum_p95_ratio"}
    assert result["maximum_failure_rate"] == 0.25 and result["maximum_p95_ratio"] == 1.5
    assert result["baseline"] == summarize_repeated_runs(B5)
    assert result["candidate"] == summarize_repeated_runs(C5)


def test_evaluate_run_errors_propagate():
    with pytest.raises(KeyError):
        evaluate_regression(B5, [{"ok": True, "quality": 0.9}])
    with pytest.raises(ValueError):
        evaluate_regression(ok_runs([100, NAN]), C5)
    with pytest.raises(ValueError):
        evaluate_regression(B5, C5 + [{"ok": "False"}])


def test_evaluate_does_not_modify_runs():
    baseline, candidate = [dict(r) for r in B5], [dict(r) for r in C5] + failed_runs(1)
    before = ([dict(r) for r in baseline], [dict(r) for r in candidate])
    evaluate_regression(baseline, candidate)
    assert (baseline, candidate) == before


# --------------------------------------------------------------------------------------------
# wrong-typed top-level arguments: the specification's code raises TypeError, so ours must raise
# RuleTypeError (a ValueError and a TypeError).
# --------------------------------------------------------------------------------------------

# Was a DISCREPANCY, fixed (every case below): ours lets Python's own TypeError escape (from slicing with a
# float topk, iterating None, subscripting None, ...) instead of raising RuleTypeError. The
# specification raises TypeError in each case; a plain TypeError is not the ValueError the
# contract promises.
@pytest.mark.parametrize("call", [
    pytest.param(lambda: top_hotspots(EVENTS, topk=1.5), id="top_hotspots-topk-1.5"),
    pytest.param(lambda: top_hotspots(EVENTS, topk=NAN), id="top_hotspots-topk-nan"),
    pytest.param(lambda: synthesize_evidence(None), id="synthesize_evidence-None"),
    pytest.param(lambda: design_single_variable_experiment(None, BASELINE), id="design-evidence-None"),
    pytest.param(lambda: changed_keys({"baseline": None, "candidate": {"a": 1}}), id="changed_keys-baseline-None"),
    pytest.param(lambda: summarize_repeated_runs(None), id="summarize-None"),
    pytest.param(lambda: evaluate_regression(None, C5), id="evaluate-baseline-None"),
])
def test_spec_typeerror_is_ruletypeerror(call):
    with pytest.raises(TypeError) as excinfo:
        call()
    assert isinstance(excinfo.value, RuleTypeError), f"got plain {excinfo.type.__name__}: {excinfo.value}"


def test_ruletypeerror_is_both():
    assert issubclass(RuleTypeError, ValueError) and issubclass(RuleTypeError, TypeError)


def test_a_slowdown_is_written_as_one_never_as_a_negative_improvement():
    """Issue 43: "an improvement of -364.6%" for a 4.6x slowdown read as nonsense."""
    from mlflow_perfgate import rules
    from mlflow_perfgate.rules._records import change_text

    assert change_text(0.92) == "an improvement of 8.0%"
    assert change_text(1.36) == "a slowdown of 36.0%"
    assert change_text(4.646) == "4.65x slower"
    base = [{"ok": True, "latency_ms": v, "quality": 0.9} for v in (100, 101, 99, 100, 102)]
    slow = [{"ok": True, "latency_ms": 4.646 * v, "quality": 0.9} for v in (100, 101, 99, 100, 102)]
    for method in ("seed", "robust"):
        message = rules.decide(base, slow, method=method)["messages"]["improvement_ok"]
        assert "x slower" in message and "improvement of -" not in message, message
