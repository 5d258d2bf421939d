"""What a person reads: the markdown note and report, the latency plot, the attempts table."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from ._schema import ARMS, MAX_TAG_VALUE

__all__ = ["decision_markdown", "fit_note", "prepare_artifacts", "log_artifacts", "write_step_summary", "latency_plot"]

ARTIFACT_DIR = "perfgate"
HEADLINES = {
    "accept": "ACCEPT: the candidate is faster, no worse in quality, and no less reliable",
    "reject": "REJECT: the candidate fails at least one declared check",
    "rerun": "RERUN: the evidence is not enough to decide",
    "blocked_by_correctness": "BLOCKED BY CORRECTNESS: fix the invalid runs before any performance reading",
}
REASONS = {
    "insufficient_valid_runs": "an arm has fewer successful attempts than min_valid_runs",
    "unreliable_baseline": "the baseline's own failure rate exceeds maximum_failure_rate",
    "attempts_in_progress": "some attempts are still running; evaluate again when they end",
    "declared_thresholds_checked": "every declared threshold was checked",
    "run_invalid": "an attempt failed its correctness probe",
    "attempts_not_synced": "attempts of this group are still in the local journal, not in MLflow",
}


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}{unit}"
    return f"{value}{unit}"


def decision_markdown(result: dict) -> str:
    """The decision as markdown: headline, reasons, per-check messages and the figures."""
    decision = result["decision"]
    lines = [f"## {HEADLINES.get(decision, decision.upper())}", ""]
    lines.append(f"- group: `{result['group']}`")
    if result.get("changed_variable"):
        lines.append(
            f"- changed variable: `{result['changed_variable']}`: "
            f"`{result['baseline_value']}` (baseline) -> `{result['candidate_value']}` (candidate)"
        )
    lines.append(f"- reason: `{result['reason']}`: {REASONS.get(result['reason'], result['reason'])}")
    if result.get("objective"):
        how = f"- objective: `{result['objective']}`; method: `{result.get('method', 'seed')}`; mode: `{result.get('mode', 'improvement')}`"
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
    robust, seed = result.get("robust") or {}, result.get("seed") or {}
    if robust:
        low, high = robust.get("ratio_ci_low"), robust.get("ratio_ci_high")
        lines += ["", "### Both methods", "",
                  f"- seed (the specification's rule): `{seed.get('decision')}` ({seed.get('reason')}); "
                  f"noise proxy {_fmt(seed.get('baseline_noise'))}, required improvement "
                  f"{_fmt(seed.get('required_improvement'))}, observed {_fmt(seed.get('observed_improvement'))}",
                  f"- robust: `{robust.get('decision')}` ({robust.get('reason')}); one-sided Mann-Whitney p = "
                  f"{_fmt(robust.get('p_value'))}; candidate/baseline ratio {_fmt(robust.get('ratio_estimate'))}, "
                  f"{_fmt((robust.get('confidence') or 0) * 100)}% interval {_fmt(low)} to {_fmt(high)} (Hodges-Lehmann)"]
    lines += ["", "### Figures", "", "| | baseline | candidate |", "|---|---|---|"]
    rows = [
        ("attempts", "attempted_runs", ""), ("successful", "valid_runs", ""),
        ("failed", "failed_runs", ""), ("failure rate", "failure_rate", ""),
        ("median", "median_ms", " ms"), ("P95 (nearest rank)", "p95_ms", " ms"), ("quality", "quality", ""),
        ("median peak memory", "median_peak_mem_mib", " MiB"), ("median throughput", "median_throughput_tok_s", " tok/s"),
        ("P5 throughput", "p5_throughput_tok_s", " tok/s"),
    ]
    b, c = result.get("baseline", {}), result.get("candidate", {})
    for label, key, unit in rows:
        if b.get(key) is None and c.get(key) is None and key.endswith(("mib", "tok_s")):
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


def fit_note(note: str) -> str:
    """The note, shortened to a tag's limit (the full text is in report.md)."""
    if len(note) <= MAX_TAG_VALUE:
        return note
    tail = "\n\n... (see the report.md artifact for the full text)\n"
    return note[: MAX_TAG_VALUE - len(tail)] + tail


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


def prepare_artifacts(result: dict, note: str, folder: Path) -> None:
    """Write decision.json, report.md and latency.png into ``folder``, before anything is logged.

    A plot that cannot be drawn (latencies near the float limit, say) costs the plot alone,
    with a warning in the result: never the decision.
    """
    try:
        latency_plot(result, folder / "latency.png")
    except Exception as exc:  # matplotlib's own limits; the figures stay in the JSON and the table
        (folder / "latency.png").unlink(missing_ok=True)
        result.setdefault("warnings", []).append(f"latency plot not drawn: {type(exc).__name__}: {exc}")
    (folder / "decision.json").write_text(json.dumps(_json_safe(result), indent=2, default=str, allow_nan=False))
    (folder / "report.md").write_text(note)


def log_artifacts(mlflow_client, run_id: str, result: dict, folder: Path) -> None:
    """The prepared files and the attempts table, on the decision run."""
    mlflow_client.log_artifacts(run_id, str(folder), ARTIFACT_DIR)
    mlflow_client.log_table(run_id, data=attempts_table(result), artifact_file=f"{ARTIFACT_DIR}/attempts.json")


def write_step_summary(result: dict) -> None:
    """Append the report to ``$GITHUB_STEP_SUMMARY`` when a CI job set it."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(decision_markdown(result) + "\n")
