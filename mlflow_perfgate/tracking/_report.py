"""What a person reads: the markdown note and report, the latency plot, the attempts table.

Public: :func:`decision_markdown` (the report of a result), :func:`read_report` and
:func:`read_decision` (a decision run's ``report.md`` and ``decision.json``). The report's
figure rows and its "what each method says" lines come from the registries.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from ..rules._errors import FormatError
from ..rules._records import REASONS, headline
from ..rules._registry import METHODS, OBJECTIVES
from . import _client
from ._schema import ARMS, ARTIFACT_DIR, DECISION_FORMAT, MAX_TAG_VALUE, fit

__all__ = ["ARTIFACT_DIR", "decision_markdown", "decision_summary", "fit_note", "latency_plot", "log_artifacts", "prepare_artifacts",
           "read_decision", "read_report", "write_step_summary"]

#: The rows every report has: (label, key of the arm summary, unit).
_COMMON_ROWS = (
    ("attempts", "attempted_runs", ""), ("successful", "valid_runs", ""), ("failed", "failed_runs", ""),
    ("failure rate", "failure_rate", ""), ("median", "median_ms", " ms"), ("P95 (nearest rank)", "p95_ms", " ms"),
    ("quality", "quality", ""),
)


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}{unit}"
    return f"{value}{unit}"


def _rows() -> list[tuple[str, str, str, bool]]:
    """(label, key, unit, shown only when an arm has it): the common rows, then each objective's."""
    rows = [(label, key, unit, False) for label, key, unit in _COMMON_ROWS]
    seen = {key for _, key, _ in _COMMON_ROWS}
    for name in OBJECTIVES:
        for figure in OBJECTIVES[name].arm_figures:
            if figure.name not in seen:
                seen.add(figure.name)
                rows.append((figure.label or figure.name, figure.name, figure.unit, True))
    return rows


def _headline(result: dict) -> str:
    objective = OBJECTIVES[result["objective"]] if result.get("objective") in OBJECTIVES else None
    accept = objective.headlines.get(result.get("mode", "improvement")) if objective else None
    return headline(result["decision"], accept)


def decision_markdown(result: dict) -> str:
    """The decision as markdown: headline, reasons, per-check messages and the figures.

    Args:
        result: what ``evaluate_group`` returned (or ``compare``).

    Returns:
        The report's text, as logged in ``report.md`` and the run's note.
    """
    decision = result["decision"]
    lines = [f"## {_headline(result)}", ""]
    lines.append(f"- group: `{result['group']}`")
    if result.get("view_url"):
        lines.append(f"- its attempts side by side in the MLflow UI: {result['view_url']} "
                     "(add `&compareRunsMode=CHART` for charts)")
    if result.get("changed_variable"):
        lines.append(
            f"- changed variable: `{result['changed_variable']}`: "
            f"`{result['baseline_value']}` (baseline) -> `{result['candidate_value']}` (candidate)"
        )
    lines.append(f"- reason: `{result['reason']}`: {REASONS.get(result['reason'], result['reason'])}")
    if result.get("objective"):
        how = (f"- objective: `{result['objective']}`; method: `{result.get('method', 'seed')}`; "
               f"mode: `{result.get('mode', 'improvement')}`")
        if result.get("mode") == "non_regression":
            how += f" (margin {result.get('margin', 0) * 100:.1f}%)"
        lines.append(how)
    if result.get("recommended_attempts"):
        lines.append(f"- to settle it: about {result['recommended_attempts']} attempts per arm "
                     "(from the observed dispersion and the decision boundary)")
    if result.get("failed_checks"):
        lines.append(f"- failed checks: {', '.join(f'`{c}`' for c in result['failed_checks'])}")
    if decision == "blocked_by_correctness":
        lines.append(f"- issues: {', '.join(result.get('issues', [])) or 'n/a'}")
        lines.append(f"- first failure: `{result.get('first_failure')}`; reproducible: {result.get('reproducible')}")
        lines.append(f"- invalid runs: {', '.join(result.get('invalid_runs', []))}")
    if result.get("running_runs"):
        lines.append(f"- still running: {', '.join(result['running_runs'])}")
    for warning in result.get("warnings", []):
        lines.append(f"- warning: {warning}")
    messages = result.get("messages") or {}
    if messages:
        lines += ["", "### Checks", ""] + [f"- `{name}` {text}" for name, text in messages.items()]
    companions = [name for name in METHODS if isinstance(result.get(name), dict) and "decision" in result[name]]
    if companions:
        lines += ["", "### What each method says", ""]
        for name in companions:
            summary, method = result[name], METHODS[name]
            figures = method.describe(summary) if method.describe else ", ".join(
                f"{figure.label or figure.name} {_fmt(summary.get(figure.name))}" for figure in method.figures)
            lines.append(f"- {name} ({method.help}): `{summary['decision']}` ({summary['reason']}); {figures}")
    lines += ["", "### Figures", "", "| | baseline | candidate |", "|---|---|---|"]
    b, c = result.get("baseline", {}), result.get("candidate", {})
    for label, key, unit, optional in _rows():
        if optional and b.get(key) is None and c.get(key) is None:
            continue
        lines.append(f"| {label} | {_fmt(b.get(key), unit)} | {_fmt(c.get(key), unit)} |")
    if b.get("failure_reasons") or c.get("failure_reasons"):
        lines += ["", "### Failed attempts", ""]
        for arm, summary in (("baseline", b), ("candidate", c)):
            for reason in summary.get("failure_reasons", []):
                lines.append(f"- {arm}: {reason}")
    thresholds = result.get("thresholds") or {}
    if thresholds:
        lines += ["", "### Thresholds", ""] + [f"- `{k}` = {v}" for k, v in thresholds.items()]
    if "baseline_noise" in result:
        lines += ["", "The noise figure, (P95 - median) / median of the baseline, is a teaching proxy, "
                  "not a confidence interval."]
    return "\n".join(lines) + "\n"


def decision_summary(result: dict) -> list[str]:
    """The tail of a long command: the decision, its reason in words, and where to look.

    Returns:
        Lines: the headline; the reason; each failed (or undecided) check's message, or for a
        rerun the attempts per arm that would likely settle it; the experiment and the decision
        run; the link (``decision_run_url``) to open.
    """
    lines = [f"decision: {_headline(result)}"]
    reason = result["reason"]
    lines.append(f"why: {REASONS.get(reason, reason)} ({reason})")
    messages = result.get("messages") or {}
    open_checks = [name for name in messages if messages[name].startswith(("FAILED", "INCONCLUSIVE"))]
    lines += [f"  {name}: {messages[name]}" for name in open_checks]
    if result["decision"] == "blocked_by_correctness":
        lines.append(f"  issues: {', '.join(result.get('issues', []))}; first failure: {result.get('first_failure')}")
    if result["decision"] == "rerun" and result.get("recommended_attempts"):
        lines.append(f"  about {result['recommended_attempts']} attempts per arm would likely settle it")
    if result.get("decision_run_id"):
        lines.append(f"experiment {result.get('experiment_id')}, decision run {result['decision_run_id']}")
    if result.get("decision_run_url"):
        lines.append(f"see it: {result['decision_run_url']}")
    if result.get("view_url"):
        lines.append(f"compare its attempts: {result['view_url']}")
    return lines


def fit_note(note: str) -> str:
    """The note, shortened to a tag's limit (the full text is in report.md)."""
    return fit(note, MAX_TAG_VALUE, "\n\n... (see the report.md artifact for the full text)\n")


def latency_plot(result: dict, path: Path) -> Path:
    """Both arms' attempts as points (failed ones as crosses on the axis), median and P95 marked."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        _draw(ax, result)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def _draw(ax, result: dict) -> None:
    attempts = result.get("attempts", [])
    for x, arm in enumerate(ARMS):
        ok = [a["latency_ms"] for a in attempts if a["arm"] == arm and a["ok"]]
        failed = [a for a in attempts if a["arm"] == arm and not a["ok"]]
        jitter = [x + 0.15 * ((i % 7) - 3) / 3 for i in range(len(ok))]
        ax.scatter(jitter, ok, s=24, alpha=0.8, label=f"{arm} ok ({len(ok)})")
        summary = result.get(arm, {})
        if summary.get("median_ms") is not None:
            ax.hlines(summary["median_ms"], x - 0.3, x + 0.3, colors="black", linewidth=2)
            ax.hlines(summary["p95_ms"], x - 0.3, x + 0.3, colors="gray", linestyles="dashed")
            ax.annotate(f"median {summary['median_ms']:.3g}", (x + 0.32, summary["median_ms"]), fontsize=8)
            ax.annotate(f"P95 {summary['p95_ms']:.3g}", (x + 0.32, summary["p95_ms"]), fontsize=8)
        if failed:
            ymin = min(ok) if ok else 0
            ax.scatter([x] * len(failed), [ymin] * len(failed), marker="x", color="red", s=60,
                       label=f"{arm} failed ({len(failed)})")
    ax.set_xticks(range(len(ARMS)), [f"{arm}\n{result.get(f'{arm}_value') or ''}" for arm in ARMS])
    ax.set_xlim(-0.6, len(ARMS) - 0.1)
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{result['group'][:60]}: {result['decision']}")
    ax.legend(fontsize=8, loc="best")


def attempts_table(result: dict) -> dict:
    """The attempts as columns, for ``MlflowClient.log_table``."""
    columns = ["run_id", "arm", "state", "ok", "latency_ms", "quality", "failure", "attempt_id"]
    return {c: [a.get(c) for a in result.get("attempts", [])] for c in columns}


def _json_safe(value):
    """Non-finite floats become null: the artifact stays valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def prepare_artifacts(result: dict, folder: Path) -> None:
    """Write decision.json and latency.png into ``folder``, before anything is logged.

    A plot that cannot be drawn (latencies near the float limit, say) costs the plot alone,
    with a warning in the result: never the decision.
    """
    try:
        latency_plot(result, folder / "latency.png")
    except Exception as exc:  # matplotlib's own limits; the figures stay in the JSON and the table
        (folder / "latency.png").unlink(missing_ok=True)
        result.setdefault("warnings", []).append(f"latency plot not drawn: {type(exc).__name__}: {exc}")
    payload = {"format_version": DECISION_FORMAT, **_json_safe(result)}
    (folder / "decision.json").write_text(json.dumps(payload, indent=2, default=str, allow_nan=False))


def log_artifacts(mlflow_client, run_id: str, result: dict, folder: Path) -> None:
    """The prepared files and the attempts table, on the decision run."""
    _client.retrying(lambda: mlflow_client.log_artifacts(run_id, str(folder), ARTIFACT_DIR))
    _client.retrying(lambda: mlflow_client.log_table(run_id, data=attempts_table(result),
                                                     artifact_file=f"{ARTIFACT_DIR}/attempts.json"))


def write_step_summary(markdown: str) -> None:
    """Append a report to ``$GITHUB_STEP_SUMMARY`` when a CI job set it."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def _download(run_id: str, name: str) -> str:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow_client = _client.client()
    with tempfile.TemporaryDirectory() as tmp:
        path = _client.retrying(lambda: mlflow_client.download_artifacts(run_id, f"{ARTIFACT_DIR}/{name}", tmp))
        return Path(path).read_text(encoding="utf-8")


def read_report(run_id: str) -> str:
    """The ``report.md`` of a decision run."""
    return _download(run_id, "report.md")


def read_decision(run_id: str) -> dict:
    """The ``decision.json`` of a decision run: the full result and the ids of every run judged.

    Raises:
        FormatError: the file is of a format this version cannot read (newer, or not ours).
    """
    text = _download(run_id, "decision.json")
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"decision.json of run {run_id} is not valid JSON: {exc}") from None
    version = payload.get("format_version", 0) if isinstance(payload, dict) else None
    if version not in (0, DECISION_FORMAT):
        raise FormatError(f"decision.json of run {run_id} has format version {version!r}; this release reads "
                          f"versions 0 and {DECISION_FORMAT}: upgrade mlflow-perfgate")
    return payload
