"""Correctness gate, hotspots and evidence synthesis (sections Q1 to Q3 of the specification)."""

from __future__ import annotations

import operator
from typing import Any

from ._errors import RuleTypeError, typed_inputs, check_finite, compare
from ._scalars import plain_record, to_python

__all__ = ["validate_validity_report", "top_hotspots", "synthesize_evidence"]

VALIDITY_FIELDS = frozenset(
    {"evidence_type", "status", "run_valid", "issues", "first_failure", "reproducible"}
)
EVENT_FIELDS = frozenset({"name", "total_ms", "calls"})
ALLOWED_OBSERVATION_STATUSES = frozenset({"measured", "estimated", "constructed_example"})
DEFAULT_CAPACITY_ALERT_RATIO = 0.90
DEFAULT_HOTSPOT_ALERT_SHARE_PCT = 40.0


def _keys(record: Any, what: str) -> set:
    try:
        return set(record)
    except TypeError:
        raise RuleTypeError(f"{what} must be a dict, got {type(record).__name__}") from None


@typed_inputs
def validate_validity_report(report: dict) -> dict:
    """Check that a correctness record is self-consistent and say whether performance work may go on.

    Args:
        report: the correctness record: ``evidence_type`` (``"correctness"``), ``status``
            (``"valid"`` or ``"invalid"``), ``run_valid`` (bool), ``issues`` (list of non-blank
            strings), ``first_failure`` (``None`` when valid) and ``reproducible`` (bool).

    Returns:
        A copy of the record with ``performance_action``: ``"continue"`` when the run is valid,
        ``"stop_and_fix"`` otherwise.

    Raises:
        KeyError: a required field is missing.
        ValueError: a field has the wrong type, or the fields contradict each other.
    """
    missing = sorted(VALIDITY_FIELDS - _keys(report, "the correctness record"))
    if missing:
        raise KeyError(f"correctness record is missing fields: {missing}")
    if report["evidence_type"] != "correctness":
        raise ValueError(
            f"evidence_type must be 'correctness', got {report['evidence_type']!r}"
        )
    if type(report["run_valid"]) is not bool or type(report["reproducible"]) is not bool:
        raise ValueError(
            "run_valid and reproducible must be booleans (True or False), got "
            f"run_valid={report['run_valid']!r}, reproducible={report['reproducible']!r}"
        )
    issues = report["issues"]
    if not isinstance(issues, list) or any(
        not isinstance(issue, str) or not issue.strip() for issue in issues
    ):
        raise ValueError(f"issues must be a list of non-blank issue categories, got {issues!r}")
    expected_valid = len(issues) == 0
    if report["run_valid"] != expected_valid:
        raise ValueError(
            f"run_valid={report['run_valid']!r} contradicts issues={issues!r}: "
            "run_valid must be True exactly when issues is empty"
        )
    if expected_valid and report["first_failure"] is not None:
        raise ValueError(
            f"a valid run cannot have a first_failure, got {report['first_failure']!r}"
        )
    expected_status = "valid" if expected_valid else "invalid"
    if report["status"] != expected_status:
        raise ValueError(
            f"status must be {expected_status!r} when run_valid is {expected_valid}, "
            f"got {report['status']!r}"
        )
    return {**report, "performance_action": "continue" if expected_valid else "stop_and_fix"}


@typed_inputs
def top_hotspots(events: list, topk: int = 2) -> list:
    """Rank non-overlapping stage events by total time and add each one's share of the total.

    Args:
        events: stage records, each with ``name``, ``total_ms`` (finite, >= 0) and ``calls``
            (> 0). The stages must not nest or overlap: their sum is the share's denominator.
        topk: how many stages to return.

    Returns:
        Up to ``topk`` copies of the events, longest first (ties keep their input order), each
        with ``share_pct`` rounded to one decimal. An empty list when ``events`` is not a
        non-empty list or ``topk <= 0``.

    Raises:
        ValueError: an event misses a field, has a negative or non-finite ``total_ms`` or a
            ``calls`` <= 0, or all events together took no time.
    """
    topk = to_python(topk)
    if not isinstance(events, list) or not events or compare(operator.le, topk, 0, "topk"):
        return []
    events = [plain_record(event) for event in events]  # numpy, pandas, torch figures as Python numbers
    for event in events:
        try:
            complete = EVENT_FIELDS.issubset(event)
        except TypeError:
            raise RuleTypeError(f"each event must be a dict, got {type(event).__name__}") from None
        if not complete:
            raise ValueError(
                f"each event must contain name, total_ms and calls; got keys {sorted(map(str, event))}"
            )
    for event in events:
        total_ms, calls = event["total_ms"], event["calls"]
        if (
            not check_finite(total_ms, "total_ms")
            or compare(operator.lt, total_ms, 0, "total_ms")
            or compare(operator.le, calls, 0, "calls")
        ):
            raise ValueError(
                "total_ms must be a finite number >= 0 and calls must be > 0; "
                f"event {event.get('name')!r} has total_ms={total_ms!r}, calls={calls!r}"
            )
    total_ms = sum(event["total_ms"] for event in events)
    if total_ms <= 0:
        raise ValueError(f"the events' total time must be > 0 ms, got {total_ms!r}")
    ordered = sorted(events, key=lambda event: event["total_ms"], reverse=True)
    return [
        {**event, "share_pct": round(event["total_ms"] / total_ms * 100, 1)}
        for event in ordered[:topk]
    ]


@typed_inputs
def synthesize_evidence(
    bundle: dict,
    capacity_alert_ratio: float = DEFAULT_CAPACITY_ALERT_RATIO,
    hotspot_alert_share_pct: float = DEFAULT_HOTSPOT_ALERT_SHARE_PCT,
) -> dict:
    """Turn correctness, time and memory evidence of one workload into a testable hypothesis.

    Correctness comes first: an invalid run stops here (``blocked_by_correctness``) and needs no
    time or memory record. Otherwise memory pressure (reserved / capacity at or above
    ``capacity_alert_ratio``) wins over a time hotspot (share at or above
    ``hotspot_alert_share_pct``); with neither, more evidence is needed. The result names a
    signal to test, never a root cause.

    Args:
        bundle: ``{"validity": ..., "time": ..., "memory": ...}``.
        capacity_alert_ratio: in (0, 1].
        hotspot_alert_share_pct: in [0, 100].

    Returns:
        ``status`` (``ready_for_experiment``, ``need_more_evidence`` or
        ``blocked_by_correctness``), ``primary_signal`` (``memory``, ``time``, ``none`` or
        ``correctness``), ``hypothesis`` and the figures it rests on.

    Raises:
        KeyError: a record or a required field is missing.
        ValueError: a record has the wrong type or status, the records describe different
            workloads, or a figure or threshold is out of range.
    """
    if "validity" not in bundle:
        raise KeyError("evidence bundle is missing 'validity'")
    validity = validate_validity_report(bundle["validity"])
    if not validity["run_valid"]:
        return {
            "status": "blocked_by_correctness",
            "primary_signal": "correctness",
            "hypothesis": "fix the correctness problem before interpreting performance",
            "validity_status": validity["status"],
            "issues": list(validity["issues"]),
        }
    if not {"time", "memory"} <= _keys(bundle, "the evidence bundle"):
        raise KeyError("a valid run also needs 'time' and 'memory' records in the bundle")
    time_signal, memory_signal = plain_record(bundle["time"]), plain_record(bundle["memory"])
    if isinstance(time_signal, dict) and isinstance(time_signal.get("hotspot"), dict):
        time_signal["hotspot"] = plain_record(time_signal["hotspot"])
    capacity_alert_ratio, hotspot_alert_share_pct = to_python(capacity_alert_ratio), to_python(hotspot_alert_share_pct)
    if not hasattr(time_signal, "get") or not hasattr(memory_signal, "get"):
        raise RuleTypeError("the 'time' and 'memory' records must be dicts")
    if time_signal.get("evidence_type") != "time" or memory_signal.get("evidence_type") != "memory":
        raise ValueError(
            "evidence_type must be 'time' for the time record and 'memory' for the memory record, got "
            f"{time_signal.get('evidence_type')!r} and {memory_signal.get('evidence_type')!r}"
        )
    for name, record in (("time", time_signal), ("memory", memory_signal)):
        if record.get("status") not in ALLOWED_OBSERVATION_STATUSES:
            raise ValueError(
                f"the {name} record's status must be one of "
                f"{sorted(ALLOWED_OBSERVATION_STATUSES)}, got {record.get('status')!r}"
            )
    if not time_signal.get("workload") or time_signal["workload"] != memory_signal.get("workload"):
        raise ValueError(
            "time and memory records must come from the same workload, got "
            f"{time_signal.get('workload')!r} and {memory_signal.get('workload')!r}"
        )
    hotspot = time_signal.get("hotspot", {})
    if not {"name", "share_pct"} <= _keys(hotspot, "hotspot"):
        raise KeyError("the time record's hotspot needs 'name' and 'share_pct'")
    if not {"dominant_object", "reserved_mib", "capacity_mib"} <= set(memory_signal):
        raise KeyError("the memory record needs 'dominant_object', 'reserved_mib' and 'capacity_mib'")
    share_pct = hotspot["share_pct"]
    reserved_mib, capacity_mib = memory_signal["reserved_mib"], memory_signal["capacity_mib"]
    named_values = (
        ("share_pct", share_pct),
        ("reserved_mib", reserved_mib),
        ("capacity_mib", capacity_mib),
        ("capacity_alert_ratio", capacity_alert_ratio),
        ("hotspot_alert_share_pct", hotspot_alert_share_pct),
    )
    for field, value in named_values:
        if not check_finite(value, field):
            raise ValueError(f"{field} must be finite, got {value!r}")
    if memory_signal.get("unit") != "MiB" or capacity_mib <= 0:
        raise ValueError(
            f"the memory record's unit must be 'MiB' and capacity_mib must be > 0, got "
            f"unit={memory_signal.get('unit')!r}, capacity_mib={capacity_mib!r}"
        )
    if not 0 <= reserved_mib <= capacity_mib:
        raise ValueError(
            f"reserved_mib must be in the range [0, capacity_mib={capacity_mib!r}], got {reserved_mib!r}"
        )
    if not 0 <= share_pct <= 100:
        raise ValueError(f"share_pct must be in the range [0, 100], got {share_pct!r}")
    if not 0 < capacity_alert_ratio <= 1 or not 0 <= hotspot_alert_share_pct <= 100:
        raise ValueError(
            "capacity_alert_ratio must be in the range (0, 1] and hotspot_alert_share_pct in "
            f"[0, 100], got {capacity_alert_ratio!r} and {hotspot_alert_share_pct!r}"
        )
    capacity_ratio = reserved_mib / capacity_mib
    if capacity_ratio >= capacity_alert_ratio:
        status, primary_signal = "ready_for_experiment", "memory"
        hypothesis = f"test whether {memory_signal['dominant_object']} causes capacity pressure"
    elif share_pct >= hotspot_alert_share_pct:
        status, primary_signal = "ready_for_experiment", "time"
        hypothesis = f"test whether {hotspot['name']} is on the critical path of step time"
    else:
        status, primary_signal = "need_more_evidence", "none"
        hypothesis = "no single strong signal yet"
    return {
        "status": status,
        "primary_signal": primary_signal,
        "hypothesis": hypothesis,
        "observation_sources": {"time": time_signal["status"], "memory": memory_signal["status"]},
        "hotspot": hotspot["name"],
        "hotspot_share_pct": share_pct,
        "dominant_object": memory_signal["dominant_object"],
        "capacity_ratio": round(capacity_ratio, 3),
        "validity_status": validity["status"],
        "issues": list(validity["issues"]),
        "thresholds": {
            "capacity_alert_ratio": capacity_alert_ratio,
            "hotspot_alert_share_pct": hotspot_alert_share_pct,
        },
    }
