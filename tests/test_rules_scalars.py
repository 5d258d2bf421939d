"""Numbers as numpy, pandas and torch hand them over decide exactly as Python floats do.

``np.False_ is False`` is false: a check built from numpy figures once read as neither passed
nor failed, and the seed rule accepted a candidate whose ``improvement_ok`` was False. Every
record now makes its numbers plain Python ones at construction; these properties feed every
public rule the same attempts as floats and as each kind of scalar, and require the same answer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mlflow_perfgate.rules import (
    Check,
    Policy,
    changed_keys,
    decide,
    design_single_variable_experiment,
    entry_evidence,
    evaluate_regression,
    evaluate_seed_non_regression,
    judge,
    percentile,
    suite_gate,
    summarize_repeated_runs,
    synthesize_evidence,
    top_hotspots,
    validate_validity_report,
)

SETTINGS = settings(max_examples=60, deadline=None, database=None)

#: Value-preserving conversions to the scalars scientific Python hands over.
SCALARS = {
    "np.float64": np.float64,
    "0-d ndarray": lambda x: np.array(x, dtype=np.float64),
    "pandas": lambda x: pd.Series([x], dtype="float64").iloc[0],
    "torch": lambda x: torch.tensor(x, dtype=torch.float64),
}
INTS = {"np.int64": np.int64, "torch": lambda x: torch.tensor(x), "float": int}


def _convert(runs, to, ints=int):
    out = []
    for run in runs:
        converted = {key: to(value) if key in ("latency_ms", "quality") else value for key, value in run.items()}
        if "pair" in run:
            converted["pair"] = ints(run["pair"])
        out.append(converted)
    return out


@st.composite
def arms(draw):
    """A baseline around 100 ms and a candidate from much faster to much slower, in ABBA rounds."""
    n = draw(st.integers(min_value=3, max_value=12))
    scale = draw(st.sampled_from([0.6, 0.85, 0.95, 1.0, 1.03, 1.2]))
    base = [draw(st.floats(95, 110)) for _ in range(n)]
    cand = [draw(st.floats(95, 110)) * scale for _ in range(n)]
    quality_drop = draw(st.sampled_from([0.0, 0.0, 0.02]))
    failed = draw(st.integers(min_value=0, max_value=1))
    b = [{"ok": True, "latency_ms": v, "quality": 0.9, "pair": i} for i, v in enumerate(base)]
    c = [{"ok": True, "latency_ms": v, "quality": 0.9 - quality_drop, "pair": i} for i, v in enumerate(cand)]
    c += [{"ok": False, "failure": "timeout"}] * failed
    return b, c


def _same(decision_a, decision_b):
    keys = ("decision", "reason", "failed_checks", "improvement_ok", "no_regression_ok", "p95_ok", "quality_ok",
            "failure_rate_ok")
    assert {k: decision_a.get(k) for k in keys} == {k: decision_b.get(k) for k in keys}


@pytest.mark.parametrize("kind", sorted(SCALARS))
@SETTINGS
@given(runs=arms())
def test_the_specification_s_rules_decide_the_same_on_any_scalar(kind, runs):
    b, c = runs
    to = SCALARS[kind]
    _same(evaluate_regression(b, c), evaluate_regression(_convert(b, to), _convert(c, to)))
    _same(evaluate_seed_non_regression(b, c), evaluate_seed_non_regression(_convert(b, to), _convert(c, to)))
    assert summarize_repeated_runs(b) == summarize_repeated_runs(_convert(b, to))
    values = [run["latency_ms"] for run in b]
    assert percentile(values, 0.95) == percentile([to(v) for v in values], to(0.95))


@pytest.mark.parametrize("kind", sorted(SCALARS))
@SETTINGS
@given(runs=arms(), method=st.sampled_from(["seed", "robust", "paired"]),
       mode=st.sampled_from(["improvement", "non_regression"]))
def test_decide_and_judge_decide_the_same_on_any_scalar(kind, runs, method, mode):
    b, c = runs
    to, ints = SCALARS[kind], INTS["torch" if kind == "torch" else "np.int64"]
    nb, nc = _convert(b, to, ints), _convert(c, to, ints)
    _same(decide(b, c, method=method, mode=mode), decide(nb, nc, method=method, mode=mode,
                                                          margin=to(0.05), alpha=to(0.02)))
    policy = Policy(method=method, mode=mode)
    plain, scalar = judge(b, c, policy), judge(nb, nc, policy)
    assert (plain.verdict, plain.failed_checks) == (scalar.verdict, scalar.failed_checks)
    assert all(check.passed in (True, False, None) and type(check.passed) in (bool, type(None))
               for check in scalar.checks)
    if method != "seed" and plain.checks:
        gate = suite_gate([entry_evidence("e", plain, baseline_runs=b, candidate_runs=c)])
        gate_n = suite_gate([entry_evidence("e", scalar, baseline_runs=nb, candidate_runs=nc)])
        assert gate.verdict == gate_n.verdict


def test_a_numpy_false_flag_rejects():
    """The reported case: latencies as np.float64, a candidate 2% slower, the seed rule."""
    base = [{"ok": True, "latency_ms": np.float64(100 + i), "quality": 0.9} for i in range(6)]
    cand = [{"ok": True, "latency_ms": np.float64(102 + i), "quality": 0.9} for i in range(6)]
    result = evaluate_regression(base, cand)
    assert result["decision"] == "reject" and result["improvement_ok"] is False
    assert decide(base, cand, method="seed")["decision"] == "reject"
    assert judge(base, cand, Policy()).verdict == "reject"


def test_a_check_flag_is_true_false_or_none():
    assert Check("x", np.False_, "m").passed is False
    assert Check.build("x", torch.tensor(True), {"v": np.float64(1.5)}, lambda f: "t").passed is True
    assert type(Check.build("x", None, {"v": np.float64(1.5)}, lambda f: "t").figures["v"]) is float
    with pytest.raises(TypeError, match="True, False or None"):
        Check("x", 1.0, "m")


def test_the_evidence_functions_take_numpy_figures():
    events = [{"name": "forward", "total_ms": 38, "calls": 2}, {"name": "backward", "total_ms": 74, "calls": 2}]
    numpy_events = [{**e, "total_ms": np.float64(e["total_ms"]), "calls": np.int64(e["calls"])} for e in events]
    assert top_hotspots(events) == top_hotspots(numpy_events)
    valid = {"evidence_type": "correctness", "status": "valid", "run_valid": True, "issues": [],
             "first_failure": None, "reproducible": False}
    workload = {"model": "TinyLM", "device": "cpu"}
    bundle = {"validity": validate_validity_report(valid),
              "time": {"evidence_type": "time", "status": "measured", "workload": workload,
                       "share_denominator": "sum_of_nonoverlapping_stages", "hotspot": top_hotspots(events)[0],
                       "interpretation_limit": "hotspot_is_candidate_not_root_cause"},
              "memory": {"evidence_type": "memory", "status": "measured", "workload": workload, "unit": "MiB",
                         "dominant_object": "activation", "reserved_mib": 61, "capacity_mib": 64,
                         "interpretation_limit": "directional_evidence_not_strategy_decision"}}
    numpy_bundle = {**bundle, "time": {**bundle["time"], "hotspot": top_hotspots(numpy_events)[0]},
                    "memory": {**bundle["memory"], "reserved_mib": np.float64(61), "capacity_mib": torch.tensor(64.0)}}
    plain, scalar = synthesize_evidence(bundle), synthesize_evidence(numpy_bundle)
    assert (plain["primary_signal"], plain["status"]) == (scalar["primary_signal"], scalar["status"])
    baseline = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
                "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False}
    plan = design_single_variable_experiment(plain, baseline, {"checkpoint": True})
    numpy_plan = design_single_variable_experiment(scalar, {**baseline, "batch_size": np.int64(4)},
                                                   {"checkpoint": True})
    assert changed_keys(plan) == changed_keys(numpy_plan) == ["checkpoint"]
