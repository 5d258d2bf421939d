"""Comparison and diagnosis runs: the parents that ``compare`` and ``diagnose`` create."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric, RunStatus

from ..errors import InputError
from . import _client
from ..errors import StoreRefused
from ._environment import process_alive, process_identity
from ._schema import (
    KIND_COMPARISON,
    KIND_DIAGNOSIS,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    PARAM,
    TAG,
    canonical_conditions,
    canonical_value,
    fit,
    group_key,
)

__all__ = ["claim_rounds", "end_run", "group_state", "log_diagnosis", "log_failed_diagnosis", "run_url",
           "start_comparison", "tag_run"]


def start_comparison(group: str, conditions: dict, changed_variable: str, *, objective: str = "latency",
                     experiment_name: str | None = None, workload: str | None = None,
                     parent_run_id: str | None = None, interleave: str | None = None,
                     configuration: str | None = None, method: str | None = None,
                     latency: str | None = None, policy: dict | None = None) -> str:
    """Create the comparison run under which attempts nest and onto which the decision is written.

    Its params are the baseline's fixed conditions (the UI lines them up with the attempts').
    ``parent_run_id`` nests it (under the ``mlflow run`` project run, say). ``interleave``
    (``attempts`` or ``steps``: how its attempts share the machine) becomes ``perfgate.interleave``,
    ``configuration`` (how it is measured and judged, in words) ``perfgate.configuration``, and
    ``method`` and ``latency`` (what judges it) ``perfgate.configured_method`` and ``_latency``,
    ``policy`` (what its rounds were planned for, ``Policy.options()``) ``perfgate.policy``.
    """
    if not isinstance(group, str) or not group.strip():
        raise InputError(f"group must be a non-empty string, got {group!r}")
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    tags = {
        TAG.KIND: KIND_COMPARISON, TAG.COMPARISON: "true", TAG.GROUP: group, TAG.GROUP_KEY: group_key(group),
        TAG.OBJECTIVE: objective, TAG.CHANGED_VARIABLE: changed_variable,
        TAG.SUPERVISOR: process_identity(),
        **({TAG.WORKLOAD: workload} if workload else {}),
        **({TAG.INTERLEAVE: interleave} if interleave else {}),
        **({TAG.CONFIGURATION: fit(configuration, MAX_TAG_VALUE)} if configuration else {}),
        **({TAG.CONFIGURED_METHOD: method} if method else {}),
        **({TAG.CONFIGURED_LATENCY: latency} if latency else {}),
        **({TAG.POLICY: policy_text(policy)} if policy else {}),
        **({TAG.PARENT: parent_run_id} if parent_run_id else {}),
    }
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, tags=tags, run_name=f"compare {group[:60]}"))
    params = {key: fit(value, MAX_PARAM_VALUE) for key, value in canonical_conditions(conditions).items()
              if key != changed_variable}
    _client.log_batch(mlflow_client, run.info.run_id, params=params)
    return run.info.run_id


def end_run(run_id: str, status: str = "FINISHED", *, reason: str | None = None) -> None:
    """Terminate a run we created (``FINISHED``, ``FAILED`` or ``KILLED``), saying why when it ended early."""
    mlflow_client = _client.client()
    if reason:
        _client.retrying(lambda: mlflow_client.set_tag(run_id, TAG.END_REASON, fit(reason, MAX_TAG_VALUE)))
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.from_string(status))))


def tag_run(run_id: str, tags: dict[str, str]) -> None:
    """Set tags of the tool's own making on a run we created (one batched write); values are cut to fit."""
    mlflow_client = _client.client()
    _client.log_batch(mlflow_client, run_id, tags={key: fit(str(value), MAX_TAG_VALUE) for key, value in tags.items()})


def log_diagnosis(bundle: dict, synthesis: dict, plan: dict, *, experiment_name: str | None = None,
                  files: dict | None = None, objective: str | None = None, workload: str | None = None,
                  parent_run_id: str | None = None, start_time: int | None = None,
                  change_reason: str | None = None) -> str:
    """Log a diagnosis run: the evidence bundle, the synthesis and the plan as JSON artifacts.

    Args:
        files: extra artifacts ``{name: local_path}`` (profiler table, trace and log).
        objective: the objective the plan's comparison should be judged on.
        workload: the workload's name.
        parent_run_id: a run to nest the diagnosis under.
        start_time: when the diagnosis started (ms since the epoch), so that the run spans it;
            default: now.
        change_reason: why the plan proposes its change, or none (``perfgate.change_reason``).

    Returns:
        The run id.
    """
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    run_tags = {
        TAG.KIND: KIND_DIAGNOSIS,
        TAG.STATUS: str(synthesis.get("status")),
        TAG.PRIMARY_SIGNAL: str(synthesis.get("primary_signal")),
        TAG.HYPOTHESIS: fit(str(synthesis.get("hypothesis")), MAX_TAG_VALUE),
        TAG.PLAN_ACTION: str(plan.get("action")),
        TAG.NOTE: _diagnosis_note(synthesis, plan, change_reason),
        **({TAG.CHANGE_REASON: fit(change_reason, MAX_TAG_VALUE)} if change_reason else {}),
        **({TAG.OBJECTIVE: objective} if objective else {}),
        **({TAG.WORKLOAD: workload} if workload else {}),
        **({TAG.PARENT: parent_run_id} if parent_run_id else {}),
    }
    if plan.get("changed_variable"):
        run_tags[TAG.CHANGED_VARIABLE] = str(plan["changed_variable"])
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, start_time=start_time, tags=run_tags,
                                                            run_name="diagnosis"))
    run_id = run.info.run_id
    try:
        params = {k: fit(v, MAX_PARAM_VALUE) for k, v in canonical_conditions(plan.get("baseline") or {}).items()}
        metrics_source = {
            "hotspot_share_pct": synthesis.get("hotspot_share_pct"), "capacity_ratio": synthesis.get("capacity_ratio"),
            "reserved_mib": bundle.get("memory", {}).get("reserved_mib"),
            "capacity_mib": bundle.get("memory", {}).get("capacity_mib"),
        }
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in metrics_source.items() if isinstance(v, (int, float))]
        _client.log_batch(mlflow_client, run_id, params=params, metrics=metrics)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for name, payload in (("evidence.json", bundle), ("synthesis.json", synthesis), ("plan.json", plan)):
                (folder / name).write_text(json.dumps(payload, indent=2, default=str))
            mlflow_client.log_artifacts(run_id, str(folder), "perfgate")
        for path in (files or {}).values():
            mlflow_client.log_artifact(run_id, str(path), "perfgate/profile")
    except BaseException:
        end_run(run_id, "FAILED")
        raise
    end_run(run_id)
    return run_id


def log_failed_diagnosis(failure: str, detail: str | None, conditions: dict, *, experiment_name: str | None = None,
                         workload: str | None = None, parent_run_id: str | None = None) -> str:
    """Log a diagnosis whose evidence could not be collected: a FAILED diagnosis run saying why.

    Args:
        failure: the reason (``perfgate.failure`` and ``perfgate.end_reason``), as an attempt's.
        detail: a traceback or the child's log tail (``perfgate.failure_detail``, cut to fit).
        conditions: the conditions diagnosed (params, as a diagnosis run's).

    Returns:
        The run id.
    """
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    note = f"## Diagnosis failed\n\n- failure: `{failure}`\n- the workload failed while its evidence was collected"
    run_tags = {
        TAG.KIND: KIND_DIAGNOSIS,
        TAG.STATUS: "failed",
        TAG.FAILURE: fit(failure, MAX_TAG_VALUE),
        TAG.NOTE: fit(note, MAX_TAG_VALUE),
        **({TAG.FAILURE_DETAIL: fit(detail, MAX_TAG_VALUE)} if detail else {}),
        **({TAG.WORKLOAD: workload} if workload else {}),
        **({TAG.PARENT: parent_run_id} if parent_run_id else {}),
    }
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, tags=run_tags, run_name="diagnosis"))
    run_id = run.info.run_id
    try:
        params = {k: fit(v, MAX_PARAM_VALUE) for k, v in canonical_conditions(conditions).items()}
        _client.log_batch(mlflow_client, run_id, params=params)
    finally:
        end_run(run_id, "FAILED", reason=f"diagnosis failed: {failure}")
    return run_id


def _diagnosis_note(synthesis: dict, plan: dict, change_reason: str | None = None) -> str:
    lines = [f"## Diagnosis: {synthesis.get('status')}", "",
             f"- primary signal: `{synthesis.get('primary_signal')}`",
             f"- hypothesis: {synthesis.get('hypothesis')}"]
    if "hotspot" in synthesis:
        lines.append(f"- hotspot: `{synthesis['hotspot']}` ({synthesis.get('hotspot_share_pct')}% of the step)")
    if "capacity_ratio" in synthesis:
        lines.append(f"- memory: `{synthesis.get('dominant_object')}` dominates; reserved / capacity = "
                     f"{synthesis['capacity_ratio']}")
    lines.append(f"- plan: `{plan.get('action')}`")
    if change_reason:
        lines.append(f"- why: {change_reason}")
    if plan.get("changed_variable"):
        variable = plan["changed_variable"]
        lines.append(f"- single change: `{variable}`: `{canonical_value(plan['baseline'][variable])}` -> "
                     f"`{canonical_value(plan['candidate'][variable])}`")
    return "\n".join(lines) + "\n"


def run_url(run_id: str) -> str:
    """Where a person opens a run: its page on the tracking server, or the ``mlflow ui`` command to start."""
    mlflow_client = _client.client()
    run = _client.retrying(lambda: mlflow_client.get_run(run_id))
    return _client.run_link(mlflow_client.tracking_uri, run.info.experiment_id, run_id)


def group_state(group: str, *, experiment_name: str | None = None) -> dict:
    """What a group holds already (one search): before ``compare`` adds to it.

    Returns:
        ``attempts`` (how many), ``comparison_run_id`` (the comparison its attempts nest under,
        or ``None``), ``next_pair`` (the next free ABBA round), ``repeats`` (the values of the
        ``repeats`` condition its attempts carry, sorted: a resumed comparison keeps its own),
        ``per_arm`` (the most attempts of one arm), ``spent`` (the information fraction the
        comparison's recorded looks spent: ``perfgate.look_spent_fraction``, or ``perfgate.look``
        over ``perfgate.max_looks`` for a group of an earlier release; ``None`` without looks),
        ``decided`` (whether the comparison run holds a decision) and ``complete_rounds`` (the
        rounds that hold an attempt of each arm, withdrawn and forgotten ones left out).
    """
    from ._group import load

    mlflow_client = _client.client()
    try:
        experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    except InputError:
        return {"attempts": 0, "comparison_run_id": None, "next_pair": 0, "repeats": [], "per_arm": 0,
                "spent": None, "decided": False, "complete_rounds": 0}
    found = load(group, experiment_id, mlflow_client, stale_after_s=float("inf"))
    parents = {view.parent_run_id for view in found.attempts if view.parent_run_id}
    pairs = [int(view.tags[TAG.PAIR]) for view in found.attempts if view.tags.get(TAG.PAIR, "").isdigit()]
    comparison_id = next(iter(parents)) if len(parents) == 1 else None
    spent, decided = None, False
    if comparison_id is not None:
        tags = _client.retrying(lambda: mlflow_client.get_run(comparison_id)).data.tags
        spent, decided = spent_fraction(tags), TAG.DECISION in tags
    arms = [view.arm for view in found.attempts]
    rounds = {arm: {view.tags[TAG.PAIR] for view in found.attempts
                    if view.arm == arm and view.tags.get(TAG.PAIR) and view.state != "excluded"}
              for arm in ("baseline", "candidate")}
    return {"attempts": len(found.attempts), "comparison_run_id": comparison_id,
            "next_pair": max(pairs) + 1 if pairs else 0,
            "repeats": sorted({view.params["repeats"] for view in found.attempts if "repeats" in view.params}),
            "per_arm": max((arms.count(arm) for arm in set(arms)), default=0), "spent": spent, "decided": decided,
            "complete_rounds": len(rounds["baseline"] & rounds["candidate"])}


def spent_fraction(tags: dict) -> float | None:
    """The information fraction a comparison run's recorded looks spent, or ``None`` without looks."""
    try:
        if TAG.LOOK_SPENT in tags:
            value = float(tags[TAG.LOOK_SPENT])
        elif TAG.LOOK in tags and TAG.MAX_LOOKS in tags:
            value = int(tags[TAG.LOOK]) / int(tags[TAG.MAX_LOOKS])
        else:
            return None
    except (ValueError, ZeroDivisionError):
        return None
    return value if 0 <= value <= 1 else None


def claim_rounds(run_id: str, first_pair: int) -> None:
    """Claim a comparison's rounds from ``first_pair`` on for this process, or refuse a twin.

    The claim is the param ``perfgate.round_claim.<first_pair>`` of the comparison run, holding this
    process's identity: MLflow keeps the first value a param is given, so of two ``compare --resume``
    of one group at once (both found the same next round) one claims the rounds and the other is
    refused here, before it starts a run. A claim left by a process that is gone (this host can
    tell) is passed for a numbered one (``.1``, ``.2``, ...).

    Raises:
        InputError: another live process (or one on another host, which cannot be asked) holds the
            claim: the group is being run now.
    """
    identity = process_identity()
    mlflow_client = _client.client()
    run = _client.retrying(lambda: mlflow_client.get_run(run_id))
    for key, holder in sorted(run.data.params.items()):  # one writer per group: none other may be running it
        if not key.startswith(PARAM.ROUND_CLAIM + ".") or holder == identity:
            continue
        alive = process_alive(holder)
        if alive or (alive is None and run.info.status == "RUNNING"):
            where = "on this host" if alive else "on another host, or one this host cannot ask (mlflow-perfgate reap " \
                                                 "ends a comparison run whose writer is gone)"
            raise InputError(f"group's comparison is being run by another process ({where}: pid "
                             f"{holder.split('|')[2] if holder.count('|') >= 2 else '?'}, claimed {key}): wait for it "
                             "to end, then --resume again; nothing was run or logged")
    for extra in range(64):
        key = f"{PARAM.ROUND_CLAIM}.{first_pair}" + (f".{extra}" if extra else "")
        try:
            _client.retrying(lambda: mlflow_client.log_param(run_id, key, identity))
            return
        except StoreRefused:
            holder = _client.retrying(lambda: mlflow_client.get_run(run_id)).data.params.get(key, "")
            if holder == identity:
                return
            if process_alive(holder) is False:
                continue  # its writer died before it ran a round: the next place
            where = "on this host" if process_alive(holder) else "on another host, or one this host cannot ask"
            raise InputError(
                f"the comparison's rounds from {first_pair} on are being run by another process ({where}: "
                f"{holder.split('|')[0]}, pid {holder.split('|')[2] if holder.count('|') >= 2 else '?'}): wait for "
                "it to end, then --resume again; nothing was run or logged") from None
    raise InputError(f"the comparison's rounds from {first_pair} on were claimed 64 times by processes that died; "
                     "start a new group")


def policy_text(options: dict) -> str:
    """A policy's options as the one string ``perfgate.policy`` holds (sorted JSON)."""
    return json.dumps(options, sort_keys=True, default=str)
