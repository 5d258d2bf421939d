"""The specification's constructed example, as data: the small end-to-end run of the rules."""

from __future__ import annotations

VALID = {"evidence_type": "correctness", "status": "valid", "run_valid": True,
         "issues": [], "first_failure": None, "reproducible": False}
INVALID = {"evidence_type": "correctness", "status": "invalid", "run_valid": False,
           "issues": ["numerical"], "first_failure": "mlp", "reproducible": True}
EVENTS = [
    {"name": "forward", "total_ms": 38, "calls": 2},
    {"name": "backward", "total_ms": 74, "calls": 2},
    {"name": "optimizer", "total_ms": 18, "calls": 1},
    {"name": "dataloader", "total_ms": 52, "calls": 4},
]
WORKLOAD = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32",
            "device": "cpu", "scope": "training_step"}
BASELINE = {"model": "TinyLM", "input_shape": (4, 128), "batch_size": 4, "dtype": "fp32", "device": "cpu",
            "repeats": 5, "measurement_method": "cpu_wall_training_step_ms", "checkpoint": False,
            "num_workers": 0}
BASELINE_MS = (100, 102, 99, 101, 100)
CANDIDATE_MS = (88, 90, 89, 91, 87)


def run_rules() -> list[tuple[str, dict]]:
    """Every step of the specification's example through the rules: (title, result) pairs."""
    from mlflow_perfgate import rules

    hotspots = rules.top_hotspots(EVENTS)
    time_record = {"evidence_type": "time", "status": "constructed_example", "workload": dict(WORKLOAD),
                   "share_denominator": "sum_of_nonoverlapping_stages", "hotspot": hotspots[0],
                   "interpretation_limit": "hotspot_is_candidate_not_root_cause"}
    memory_record = {"evidence_type": "memory", "status": "constructed_example", "workload": dict(WORKLOAD),
                     "unit": "MiB", "dominant_object": "activation", "reserved_mib": 61, "capacity_mib": 64,
                     "interpretation_limit": "directional_evidence_not_strategy_decision"}
    capacity = rules.synthesize_evidence({"validity": VALID, "time": time_record, "memory": memory_record})
    plan = rules.design_single_variable_experiment(capacity, BASELINE, {"checkpoint": True})
    baseline_runs = [{"ok": True, "latency_ms": v, "quality": 0.900} for v in BASELINE_MS]
    candidate_runs = [{"ok": True, "latency_ms": v, "quality": 0.895} for v in CANDIDATE_MS]
    with_timeout = candidate_runs + [{"ok": False, "failure": "timeout"}]
    return [
        ("correctness gate (valid run)", rules.validate_validity_report(VALID)),
        ("correctness gate (invalid run)", rules.validate_validity_report(INVALID)),
        ("hotspots", {"top": hotspots}),
        ("synthesis", capacity),
        ("synthesis of an invalid run", rules.synthesize_evidence({"validity": INVALID})),
        ("single-variable plan", plan),
        ("decision: clean candidate", rules.evaluate_regression(baseline_runs, candidate_runs)),
        ("decision: candidate with a timeout", rules.evaluate_regression(baseline_runs, with_timeout)),
        ("decision: two attempts each", rules.evaluate_regression(baseline_runs[:2], candidate_runs[:2])),
    ]
