"""A suite's decision in MLflow: each entry's decision (``evaluate_group``), one gate over them, the suite run.

A suite run (``perfgate.kind=suite``) holds the gate's verdict, the report table (its note and
``report.md``) and ``suite.json``; every entry's decision run nests under it (the topmost run of
the entry's group: its comparison run, when it has one) and carries the suite's tags
(``perfgate.suite``, ``perfgate.suite_run``, ``perfgate.suite_entry``, ``perfgate.suite_decision``,
``perfgate.suite_reason``). The error control is ``rules._suite``'s; nothing here decides.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Metric, RunStatus

from .. import rules
from ..errors import InputError, PerfgateError
from ..rules import REASONS, SUITE_REASONS, SuiteDecision, TAIL_SHARE, VERDICTS, entry_evidence, suite_gate
from . import _client, _report
from ._decision_run import claim, verdict_name, wait_for
from ._environment import process_identity
from ._evaluate import DEFAULT_STALE_AFTER_S, evaluate_group
from ._schema import ARTIFACT_DIR, KIND_SUITE, PARAM, SUITE_FORMAT, TAG, fit

__all__ = ["SuiteItem", "evaluate_suite", "judge_entries", "read_suite", "start_suite", "suite_decisions", "suite_key",
           "suite_markdown"]


@dataclass(frozen=True)
class SuiteItem:
    """One entry of a suite, as the evaluator judges it: its group and how.

    Attributes:
        name: the entry's name (unique in the suite).
        group: the group holding its attempts.
        policy: how its comparison is decided (a statistical method for a latency objective).
        look, max_looks: its look when its attempts grew until decisive (``None``: a single look).
        env_mismatch: ``evaluate_group``'s option.
    """

    name: str
    group: str
    policy: rules.Policy
    look: int | None = None
    max_looks: int | None = None
    env_mismatch: str = "fail"


def start_suite(name: str, *, experiment_name: str | None = None, settings: dict | None = None,
                parent_run_id: str | None = None) -> str:
    """Create the suite run (RUNNING) that ``suite run``'s comparisons nest under; its id."""
    from ._environment import process_identity

    _check_name(name)
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    tags = {TAG.KIND: KIND_SUITE, TAG.SUITE: name, TAG.SUPERVISOR: process_identity(),
            **({TAG.PARENT: parent_run_id} if parent_run_id else {})}
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, tags=tags, run_name=f"suite {name[:60]}"))
    if settings:
        _client.log_batch(mlflow_client, run.info.run_id, params=_settings_params(settings))
    return run.info.run_id


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"a suite's name must be a non-empty string, got {name!r}")
    if len(name) > 500:
        raise InputError(f"a suite's name is {len(name)} characters; keep it to 500")
    return name


def _settings_params(settings: dict) -> dict[str, str]:
    return {PARAM.of(key): fit(str(value), 6000) for key, value in settings.items() if value is not None}


def judge_entries(items: list[SuiteItem], *, experiment_name: str | None = None, alpha: float = 0.05,
                  control: str = "holm", stale_after_s: float = DEFAULT_STALE_AFTER_S,
                  dry_run: bool = False, tail_share: float = TAIL_SHARE) -> tuple[list[dict], SuiteDecision]:
    """Each entry's ``evaluate_group`` result (written, or a dry run) and the gate over them."""
    if not items:
        raise InputError("a suite needs at least one entry")
    names = [item.name for item in items]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(f"entry names must be unique in a suite; given twice: {twice}")
    results, evidence = [], []
    for item in items:
        try:
            result = evaluate_group(item.group, experiment_name=experiment_name, policy=item.policy,
                                    env_mismatch=item.env_mismatch, look=item.look, max_looks=item.max_looks,
                                    stale_after_s=stale_after_s, dry_run=dry_run)
            evidence.append(entry_evidence(item.name, result, look=item.look, max_looks=item.max_looks))
        except PerfgateError as exc:
            raise type(exc)(f"suite entry {item.name!r} (group {item.group!r}): {exc}") from exc
        results.append(result)
    return results, suite_gate(evidence, alpha=alpha, control=control, tail_share=tail_share)


def suite_key(name: str, items: list[SuiteItem], results: list[dict], alpha: float, control: str,
              tail_share: float = TAIL_SHARE) -> str:
    """A digest of what a suite decision judged: each entry's decision key, and the suite's settings."""
    payload = {"name": name, "alpha": alpha, "control": control, "tail_share": tail_share,
               "entries": [[item.name, item.group, result.get("decision_key")] for item, result in zip(items, results)]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def evaluate_suite(name: str, items: list[SuiteItem], *, experiment_name: str | None = None, alpha: float = 0.05,
                   control: str = "holm", stale_after_s: float = DEFAULT_STALE_AFTER_S,
                   suite_run_id: str | None = None, dry_run: bool = False, settings: dict | None = None,
                   tail_share: float = TAIL_SHARE) -> dict:
    """Judge every entry, gate over them, write the suite decision run.

    Each entry is judged by :func:`~mlflow_perfgate.tracking.evaluate_group` under its policy
    (its decision run written, or adopted when the same attempts were judged the same way
    before); the gate is :func:`mlflow_perfgate.rules.suite_gate`. The suite decision is written
    onto ``suite_run_id`` (the run ``suite run`` created) when given, else onto the suite run
    that already judged exactly these decisions with these settings (adopted), else onto a new
    suite run. Each entry's topmost run (its comparison run, or its decision run) is nested
    under the suite run unless it already nests under a run that is no suite (a project run),
    and its decision run is tagged with the suite's verdict for it.

    Args:
        name: the suite's name (``perfgate.suite``).
        items: the entries (:class:`SuiteItem`).
        experiment_name: where the groups are.
        alpha, control: the suite's error rate and its control (``holm`` or ``bh``).
        tail_share: the share of each entry's part of ``alpha`` its tail test gets (``rules.suite_gate``).
        stale_after_s: ``evaluate_group``'s.
        suite_run_id: the suite run to write onto.
        dry_run: judge without writing anything.
        settings: the suite's settings, logged as params of a new suite run.

    Returns:
        ``decision``, ``reason``, ``suite`` (the name), ``suite_run_id``, ``suite_run_url``,
        ``alpha``, ``control``, ``tests``, ``counts``, ``notes``, ``entries`` (one dict per entry:
        the gate's figures, ``group``, ``decision_run_id``, ``decision_run_url``, ``view_url``),
        ``report`` (the markdown table), ``gate`` (the :class:`~mlflow_perfgate.rules.SuiteDecision`)
        and ``results`` (each entry's ``evaluate_group`` result).

    Raises:
        PerfgateError: an entry's group cannot be judged (its name and group in the message), a
            latency entry judged by the seed method, a bad setting.
    """
    _check_name(name)
    results, gate = judge_entries(items, experiment_name=experiment_name, alpha=alpha, control=control,
                                  stale_after_s=stale_after_s, dry_run=dry_run, tail_share=tail_share)
    summary = _summary(name, items, results, gate)
    if dry_run:
        summary.update(suite_run_id=None, suite_run_url=None)
        summary["report"] = suite_markdown(summary)
        return summary
    mlflow_client = _client.client()
    experiment_id = results[0]["experiment_id"]
    key = suite_key(name, items, results, gate.alpha, gate.control, gate.tail_share)
    run_id, adopt = _suite_target(mlflow_client, experiment_id, name, key, suite_run_id, settings,
                                  [result.get("decision_run_id") for result in results])
    summary["suite_run_id"] = run_id
    summary["suite_run_url"] = _client.run_link(mlflow_client.tracking_uri, experiment_id, run_id)
    summary["report"] = suite_markdown(summary)
    if not adopt:
        _write(mlflow_client, run_id, summary, key)
    _tag_entries(mlflow_client, run_id, name, summary)
    _report.write_step_summary(summary["report"])
    return summary


def _summary(name: str, items: list[SuiteItem], results: list[dict], gate: SuiteDecision) -> dict:
    entries = []
    for item, result, entry in zip(items, results, gate.entries):
        entries.append({**entry.to_dict(), "group": item.group, "decision_run_id": result.get("decision_run_id"),
                        "decision_run_url": result.get("decision_run_url"), "view_url": result.get("view_url"),
                        "changed_variable": result.get("changed_variable"),
                        # the latency figure judged (raw, uncontended, fastest, p10), latency entries only
                        "latency": result.get("latency") if entry.evidence.objective == "latency" else None,
                        "baseline_value": result.get("baseline_value"),
                        "candidate_value": result.get("candidate_value")})
    return {"suite": name, **{k: v for k, v in gate.to_dict().items() if k != "entries"}, "entries": entries,
            "gate": gate, "results": results, "experiment_id": results[0].get("experiment_id")}


def _suite_target(mlflow_client, experiment_id: str, name: str, key: str, suite_run_id: str | None,
                  settings: dict | None, decision_run_ids: list[str | None] = ()) -> tuple[str, bool]:
    """``(run id, adopt)``: the given suite run, one that judged the same decisions, or a new one."""
    if suite_run_id is not None:
        run = _client.retrying(lambda: mlflow_client.get_run(suite_run_id))
        if run.data.tags.get(TAG.KIND) != KIND_SUITE or run.data.tags.get(TAG.SUITE) != name:
            raise InputError(f"run {suite_run_id} is not a run of suite {name!r}")
        if TAG.DECISION in run.data.tags:
            raise InputError(f"suite run {suite_run_id} holds a decision already; evaluate without it to write a "
                             "new one")
        _client.retrying(lambda: mlflow_client.set_tag(suite_run_id, TAG.SUITE_KEY, key))
        return suite_run_id, False
    same = _client.search_all(mlflow_client, [experiment_id], f"tags.\"{TAG.SUITE_KEY}\" = '{key}'")
    same = [run for run in same if run.data.tags.get(TAG.SUITE) == name and TAG.DECISION in run.data.tags]
    if same:
        return min(same, key=lambda run: (run.info.start_time or 0, run.info.run_id)).info.run_id, True
    tags = {TAG.KIND: KIND_SUITE, TAG.SUITE: name, TAG.SUITE_KEY: key, TAG.SUPERVISOR: process_identity()}
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, tags=tags, run_name=f"suite {name[:60]}"))
    # twins (two suite evaluations of the same decisions at once) agree through a claim on the
    # entries' decision runs, as the evaluators of one group do on its attempts
    anchors = sorted({run_id for run_id in decision_run_ids if run_id})
    if anchors:
        winner = claim(mlflow_client, anchors, key, run.info.run_id, PARAM.SUITE_CLAIM)
        if winner != run.info.run_id:
            wait_for(mlflow_client, winner, what="suite run")
            return winner, True
    if settings:
        _client.log_batch(mlflow_client, run.info.run_id, params=_settings_params(settings))
    return run.info.run_id, False


def _write(mlflow_client, run_id: str, summary: dict, key: str) -> None:
    counts = summary["counts"]
    metrics_source = {"entries": len(summary["entries"]), "tests": summary["tests"],
                      **{f"entries_{verdict}": counts.get(verdict, 0) for verdict in VERDICTS}}
    now = int(time.time() * 1000)
    metrics = [Metric(name, float(value), now, 0) for name, value in metrics_source.items()]
    params = {PARAM.of("alpha"): str(summary["alpha"]), PARAM.of("control"): summary["control"],
              PARAM.of("tail_share"): str(summary["tail_share"])}
    held = _client.retrying(lambda: mlflow_client.get_run(run_id))  # its name, and the params it has
    tags = {TAG.DECISION: summary["decision"], TAG.REASON: summary["reason"], TAG.SUITE_KEY: key,
            TAG.NOTE: _report.fit_note(summary["report"]),
            TAG.RUN_NAME: verdict_name(held.info.run_name, summary["decision"], default=f"suite {summary['suite'][:60]}")}
    payload = {"format_version": SUITE_FORMAT, **_json_ready(summary)}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "report.md").write_text(summary["report"], encoding="utf-8")
            (folder / "suite.json").write_text(json.dumps(payload, indent=2, default=str, allow_nan=False))
            existing = held.data.params
            _client.log_batch(mlflow_client, run_id, params={k: v for k, v in params.items() if k not in existing},
                              metrics=metrics, tags=tags)
            _client.retrying(lambda: mlflow_client.log_artifacts(run_id, str(folder), ARTIFACT_DIR))
    except BaseException:
        with contextlib.suppress(Exception):
            mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED)))


def _json_ready(summary: dict) -> dict:
    ready = {key: value for key, value in summary.items() if key not in ("gate", "results", "report")}
    return _report._json_safe(json.loads(json.dumps(ready, default=str)))


def _tag_entries(mlflow_client, suite_run_id: str, name: str, summary: dict) -> None:
    """The suite's tags on each entry's decision run; the entry's topmost run nested under the suite run."""
    for entry in summary["entries"]:
        run_id = entry["decision_run_id"]
        if not run_id:
            continue
        tags = {TAG.SUITE: name, TAG.SUITE_RUN: suite_run_id, TAG.SUITE_ENTRY: entry["name"],
                TAG.SUITE_DECISION: entry["verdict"], TAG.SUITE_REASON: entry["reason"]}
        _client.log_batch(mlflow_client, run_id, tags=tags)
        root = _group_root(mlflow_client, run_id, entry["group"])
        parent = root.data.tags.get(TAG.PARENT)
        if parent == suite_run_id:
            continue
        if parent:
            above = _client.retrying(lambda: mlflow_client.get_run(parent))
            if above.data.tags.get(TAG.KIND) != KIND_SUITE:
                continue  # nested under a project run: left where it is
        _client.retrying(lambda: mlflow_client.set_tag(root.info.run_id, TAG.PARENT, suite_run_id))


def _group_root(mlflow_client, run_id: str, group: str):
    """The topmost run of a group above ``run_id`` (a re-decision nests under its comparison run)."""
    run = _client.retrying(lambda: mlflow_client.get_run(run_id))
    parent = run.data.tags.get(TAG.PARENT)
    if parent:
        above = _client.retrying(lambda: mlflow_client.get_run(parent))
        if above.data.tags.get(TAG.GROUP) == group:
            return above
    return run


# --- the report ------------------------------------------------------------------------------------


def _p(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2g}" if value < 0.01 else f"{value:.3f}"


def _interval(deciding: dict) -> str:
    ratio = deciding.get("ratio")
    if ratio is None:
        return "n/a"
    low, high = deciding.get("ratio_ci_low"), deciding.get("ratio_ci_high")
    bounds = f" [{'-inf' if low is None else f'{low:.3f}'}, {'inf' if high is None else f'{high:.3f}'}]"
    return f"{ratio:.3f}{bounds}"


def suite_markdown(summary: dict) -> str:
    """The suite's report: the verdict, how the error was controlled, one line per entry.

    Each line: the entry, its group, how it was judged, its own decision and its decision within
    the suite, the latency ratio candidate / baseline with its interval, the boundary, the main
    test's p-value, its Holm-adjusted and BH-adjusted values and the level it was held to, and
    the reason.
    """
    verdict = summary["decision"]
    lines = [f"## Suite {summary['suite']}: {verdict.upper()}", "",
             f"- reason: `{summary['reason']}`: {SUITE_REASONS.get(summary['reason'], summary['reason'])}",
             f"- entries: {len(summary['entries'])} ("
             + ", ".join(f"{count} {name}" for name, count in summary["counts"].items() if count) + ")",
             f"- error control: {'Holm (family-wise error)' if summary['control'] == 'holm' else 'Benjamini-Hochberg (false-discovery rate)'} "
             f"<= {summary['alpha']:g} over {summary['tests']} reject tests (each entry's main check and tail test, "
             f"weighted: the tail test {summary.get('tail_share', TAIL_SHARE):.0%} of the entry's share, the main "
             "check the rest); accepts need every entry's own accept (intersection-union)"]
    if summary.get("suite_run_url"):
        lines.append(f"- suite run: {summary['suite_run_url']}")
    for note in summary.get("notes", []):
        lines.append(f"- note: {note}")
    lines += ["", "| entry | group | judged by | own | in suite | ratio [interval] | own test p | boundary | p beyond it "
                  "| Holm | BH | level | reason |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for entry in summary["entries"]:
        main = next((check for check in entry["p_values"] if check != "p95_ok"), None)
        objective = entry["objective"]
        if entry.get("latency") not in (None, "raw"):
            objective += f" ({entry['latency']})"  # the figure judged, where it is not the median step
        how = f"{objective}, {entry['method']}, {entry['mode']}"
        if entry.get("look") is not None:
            how += f", look {entry['look']}/{entry['max_looks']}"
        figures = entry.get("figures") or {}
        if figures.get("paired_fallback"):
            how += f" ({figures['paired_fallback']})"
        deciding = entry.get("deciding") or {}  # the deciding method's figures, whatever the method
        boundary = deciding.get("boundary")
        row = [entry["name"], f"`{entry['group']}`", how, entry["own_verdict"], f"**{entry['verdict']}**",
               _interval(deciding), _p(deciding.get("p_value")), "" if boundary is None else f"{boundary:.3f}"]
        if main is None:
            row += ["", "", "", "", ]
        else:
            row += [_p(entry["p_values"][main]), _p(entry["holm"][main]), _p(entry["bh"][main]),
                    _p(entry["level"][main])]
        reason = entry["reason"]
        reason_text = SUITE_REASONS.get(reason) or REASONS.get(reason, reason)
        if entry.get("failed_checks") and entry["verdict"] == "reject" and reason == "declared_thresholds_checked":
            reason_text = f"FAILED: {', '.join(entry['failed_checks'])}"  # never "every threshold was checked"
        elif entry.get("failed_checks"):
            reason_text += f" (failed: {', '.join(entry['failed_checks'])})"
        if entry.get("withheld_checks"):
            reason_text += f" (withheld: {', '.join(entry['withheld_checks'])})"
        if not entry["controlled"]:
            reason_text += " (outside the error control)"
        row.append(f"`{reason}`: {reason_text}")
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    links = [entry for entry in summary["entries"] if entry.get("decision_run_url")]
    if links:
        lines += ["", "### Entries", ""]
        for entry in links:
            line = f"- {entry['name']}: decision run {entry['decision_run_url']}"
            if entry.get("view_url"):
                line += f"; its attempts compared: {entry['view_url']}"
            lines.append(line)
    lines += ["", "own test p: the entry's own test as its decision reports it (the paired method's signed-rank "
              "test, the robust method's Mann-Whitney test: small when the change is significant in the direction "
              "its mode asks); p beyond it: the one-sided test of the ratio lying beyond the main check's boundary, "
              "on the failing side (it rejects exactly where the entry's interval lies beyond the boundary, so an "
              "accepted entry's is near 1), the test the suite's error control adjusts; Holm, BH: its adjusted "
              "p-values, at the entry's look; level: the Holm share (or BH rank level) spent at the entry's look, "
              "which p beyond it must not exceed."]
    return "\n".join(lines) + "\n"


# --- reading ---------------------------------------------------------------------------------------


def read_suite(run_id: str) -> dict:
    """The ``suite.json`` of a suite run.

    Raises:
        FormatError: a format this version cannot read.
    """
    from ..errors import FormatError

    text = _report._download(run_id, "suite.json")
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"suite.json of run {run_id} is not valid JSON: {exc}") from None
    version = payload.get("format_version") if isinstance(payload, dict) else None
    if version != SUITE_FORMAT:
        raise FormatError(f"suite.json of run {run_id} has format version {version!r}; this release reads "
                          f"version {SUITE_FORMAT}: upgrade mlflow-perfgate")
    return payload


def suite_decisions(experiment_name: str | None = None, name: str | None = None) -> pd.DataFrame:
    """One row per suite decision run, newest first: ``decisions(kind="suite")`` (``suite``, ``decision``,
    ``reason``, the entries by verdict, ``tests``, ``alpha``, ``control``, the ids)."""
    from ._queries import decisions

    return decisions(experiment_name, suite=name, kind="suite")

