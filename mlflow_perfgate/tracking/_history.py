"""A benchmark's history in MLflow: its series over revisions (one search), change points, the history run.

Attempts that carry a ``revision`` condition form, per benchmark, a series of revisions ordered
by their commit time (``perfgate.commit_time``, written by ``record --commit-time`` or read
from git when the attempt was recorded; else read from git in the working directory now). The
*benchmark key* is a digest of every other condition param and the environment fingerprint's
``host``, ``cpu_model`` and ``torch``: attempts under other conditions, or on another machine,
belong to another series. Failed attempts are counted as the evaluator counts them (the one
``attempt_state`` rule: reported failures, crashed and stale runs), attempts excluded by
``forget`` and attempts still running are not. ``rules.find_change_points`` finds and labels
the changes; :func:`write_history` logs a history run (``perfgate.kind=history``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunStatus, ViewType

from .. import rules
from ..errors import InputError
from . import _client, _report
from ._environment import commit_time as git_commit_time, env_from_tags, is_ancestor
from ._evaluate import DEFAULT_STALE_AFTER_S
from ._group import _preference, _quoted_filter, _view
from ._schema import (
    ARTIFACT_DIR,
    HISTORY_FORMAT,
    KIND_ATTEMPT,
    KIND_HISTORY,
    MAX_TAG_VALUE,
    PARAM,
    TAG,
    canonical_conditions,
    fit,
)

__all__ = ["BENCHMARK_ENV", "Benchmark", "analyze", "benchmark_key", "benchmark_lines", "change_point_line", "describe_benchmarks",
           "history_markdown", "history_plot", "load_benchmarks", "read_history", "select_benchmark", "write_history"]

#: The environment fingerprint's keys that belong to a benchmark's identity (beside its conditions).
BENCHMARK_ENV = ("host", "cpu_model", "torch")
#: The condition whose values are the history's revisions.
REVISION = "revision"
#: Shown digits of a benchmark key.
_KEY_DIGITS = 12


def benchmark_key(conditions: dict[str, str], env: dict[str, str]) -> str:
    """The key of a benchmark: 12 hex digits of the sha256 of its conditions (but the revision) and its
    environment's ``host``, ``cpu_model`` and ``torch``, as canonical JSON."""
    payload = {"conditions": {k: v for k, v in sorted(conditions.items()) if k != REVISION},
               "env": {k: env.get(k, "") for k in BENCHMARK_ENV}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:_KEY_DIGITS]


@dataclass
class Benchmark:
    """One benchmark's attempts, by revision.

    Attributes:
        key: :func:`benchmark_key`.
        conditions: its conditions but the revision (canonical strings).
        env: its ``host``, ``cpu_model`` and ``torch``.
        revisions: ``{revision: {"latencies", "failed", "qualities", "orders", "run_ids", "groups"}}``.
        running: attempts still running (not counted).
        excluded: attempts excluded by ``forget`` (not counted).
    """

    key: str
    conditions: dict[str, str]
    env: dict[str, str]
    revisions: dict[str, dict] = field(default_factory=dict)
    running: int = 0
    excluded: int = 0

    @property
    def attempts(self) -> int:
        return sum(len(r["latencies"]) + r["failed"] for r in self.revisions.values())

    def samples(self, warnings: list[str] | None = None, *, cwd: str | None = None) -> list[rules.RevisionSample]:
        """The series as :class:`~mlflow_perfgate.rules.RevisionSample` records, ordered by commit time.

        A revision's order is its attempts' ``perfgate.commit_time`` (the earliest, when they
        disagree, with a warning), else its commit time in the git repository of ``cwd``; a
        revision with neither is left out, with a warning.
        """
        warnings = warnings if warnings is not None else []
        samples, unordered = [], []
        for revision, entry in self.revisions.items():
            orders = sorted(set(entry["orders"]))
            if len(orders) > 1:
                warnings.append(f"revision {revision!r}: its attempts disagree on the commit time ({orders}); the "
                                "earliest is used")
            order = orders[0] if orders else git_commit_time(revision, cwd)
            if order is None:
                unordered.append(revision)
                continue
            quality = statistics.fmean(entry["qualities"]) if entry["qualities"] else None
            samples.append(rules.RevisionSample(revision, float(order), tuple(entry["latencies"]), entry["failed"],
                                                quality))
        if unordered:
            warnings.append(f"{len(unordered)} revisions have no commit time (no perfgate.commit_time tag, and no "
                            f"commit of that name in the git repository here), left out: "
                            f"{', '.join(unordered[:10])}; record them with --commit-time")
        ties: dict[float, list] = {}
        for sample in samples:
            ties.setdefault(sample.order, []).append(sample)
        known: dict[tuple[str, str], bool] = {}

        def precedes(older, newer) -> bool:  # one git call per pair of tied revisions
            pair = (older.revision, newer.revision)
            if pair not in known:
                known[pair] = bool(is_ancestor(older.revision, newer.revision, cwd))
            return known[pair]

        def ancestors(sample) -> int:  # among the revisions that share its commit time
            return sum(precedes(o, sample) for o in ties[sample.order] if o is not sample)

        samples.sort(key=lambda sample: (sample.order, ancestors(sample) if len(ties[sample.order]) > 1 else 0))
        ordered: list[rules.RevisionSample] = []
        before: dict[float, list] = {}  # commit time -> the revisions already placed at it
        for sample in samples:  # git commit times are whole seconds: scripted commits share them
            tied = before.setdefault(sample.order, [])
            placed = sample
            # sorted by their ancestors among the tied, a line of descent holds when each follows the
            # one before it (ancestry is transitive)
            if tied and precedes(tied[-1], sample):
                placed = dataclasses.replace(sample, order=sample.order + 1e-3 * len(tied))
            elif tied:
                when = datetime.datetime.fromtimestamp(sample.order, datetime.timezone.utc).isoformat()
                raise InputError(f"revisions {tied[-1].revision!r} and {sample.revision!r} share the commit time "
                                 f"{sample.order:.0f} ({when}) and git here cannot order them (neither is an "
                                 "ancestor of the other, or they are not commits of this repository): the history "
                                 "needs one order per revision; run it in the repository that holds them, or "
                                 "'forget' one revision's attempts and record them again with a distinct "
                                 "--commit-time (a revision's earliest recorded time counts)")
            tied.append(sample)
            ordered.append(placed)
        for time_s, tied in before.items():
            if len(tied) > 1:
                warnings.append(f"{len(tied)} revisions share the commit time {time_s:.0f} "
                                f"({', '.join(o.revision[:12] for o in tied[:5])}{', ...' if len(tied) > 5 else ''}): "
                                "ordered by git ancestry")
        samples = ordered
        return samples


def _filter(conditions: dict[str, str], group_prefix: str | None) -> str:
    """The search filter: the attempts, and what MLflow can quote of the selection (the rest is compared
    here, as every value is anyway)."""
    parts = [_quoted_filter([(TAG.KIND, KIND_ATTEMPT)])]
    for key, value in conditions.items():
        quote = "'" if "'" not in value else '"' if '"' not in value else None
        if quote is not None and '"' not in key and "`" not in key:
            parts.append(f'params."{key}" = {quote}{value}{quote}')
    if group_prefix and "'" not in group_prefix:
        parts.append(f"tags.\"{TAG.GROUP}\" LIKE '{group_prefix}%'")
    return " AND ".join(parts)


def load_benchmarks(*, experiment_name: str | None = None, conditions: dict | None = None,
                    group_prefix: str | None = None, stale_after_s: float = DEFAULT_STALE_AFTER_S,
                    warnings: list[str] | None = None) -> tuple[str, dict[str, Benchmark]]:
    """Every benchmark with a ``revision`` condition among an experiment's attempts, in one paginated search.

    Args:
        experiment_name: where to look.
        conditions: only attempts whose params hold these values (canonical strings compared).
        group_prefix: only attempts of groups whose name starts with it.
        stale_after_s: a RUNNING attempt older than this counts as failed (the evaluator's rule).
        warnings: a list that receives what was set aside (runs that cannot be read).

    Returns:
        ``(experiment id, {benchmark key: Benchmark})``.
    """
    warnings = warnings if warnings is not None else []
    wanted = canonical_conditions(conditions or {})
    if REVISION in wanted:
        raise InputError("the revision is what a history runs over: select a benchmark by its other conditions")
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    filter_string = _filter(wanted, group_prefix)
    runs = _client.search_all(mlflow_client, [experiment_id], filter_string, view=ViewType.ALL)
    now_ms = int(time.time() * 1000)
    by_attempt: dict[str, list] = {}
    for run in runs:
        params, tags = run.data.params, run.data.tags
        if tags.get(TAG.KIND) != KIND_ATTEMPT or REVISION not in params:
            continue
        if any(params.get(k) != v for k, v in wanted.items()):
            continue
        if group_prefix and not (tags.get(TAG.GROUP) or "").startswith(group_prefix):
            continue
        try:
            view = _view(run, now_ms, stale_after_s)
        except InputError as exc:
            warnings.append(f"run {run.info.run_id} set aside: {exc}")
            continue
        view.deleted = run.info.lifecycle_stage == "deleted"
        by_attempt.setdefault(view.attempt_id, []).append(view)
    benchmarks: dict[str, Benchmark] = {}
    for same in by_attempt.values():
        view = sorted(same, key=_preference)[0]
        env = env_from_tags(view.tags)
        key = benchmark_key(view.params, env)
        benchmark = benchmarks.setdefault(key, Benchmark(
            key, {k: v for k, v in sorted(view.params.items()) if k != REVISION},
            {k: env.get(k, "") for k in BENCHMARK_ENV}))
        if view.state == "running":
            benchmark.running += 1
            continue
        if view.state == "excluded":
            benchmark.excluded += 1
            continue
        entry = benchmark.revisions.setdefault(view.params[REVISION], {
            "latencies": [], "failed": 0, "qualities": [], "orders": [], "run_ids": [], "groups": set()})
        if view.state == "ok":
            entry["latencies"].append(view.latency_ms)
            entry["qualities"].append(view.quality)
        else:  # failed, crashed, stale: in the denominator, as the evaluator counts them
            entry["failed"] += 1
        order = view.tags.get(TAG.COMMIT_TIME)
        if order is not None:
            try:
                number = float(order)
            except ValueError:
                number = math.nan
            if math.isfinite(number):
                entry["orders"].append(number)
            else:
                warnings.append(f"run {view.run_id}: {TAG.COMMIT_TIME}={order!r} is not a number; ignored")
        entry["run_ids"].append(view.run_id)
        entry["groups"].add(view.tags.get(TAG.GROUP))
    return experiment_id, benchmarks


def select_benchmark(benchmarks: dict[str, Benchmark], key: str | None) -> Benchmark:
    """The one benchmark a selection names: by key (or a prefix of it), or the only one found.

    Raises:
        InputError: none found, an unknown key, or several found and no key to choose (they are listed).
    """
    if not benchmarks:
        raise InputError("no attempts with a revision condition match; record attempts with --set revision=SHA "
                         "(and --commit-time), or loosen --set / --group-prefix")
    if key is not None:
        matching = [b for k, b in benchmarks.items() if k.startswith(key)]
        if len(matching) == 1:
            return matching[0]
        if not matching:
            raise InputError(f"no benchmark {key!r} here; found {describe_benchmarks(benchmarks)}")
        raise InputError(f"benchmark key {key!r} is ambiguous: {describe_benchmarks(dict((b.key, b) for b in matching))}")
    if len(benchmarks) > 1:
        raise InputError(f"{len(benchmarks)} benchmarks match; choose one with --benchmark KEY (or narrow with --set): "
                         f"{describe_benchmarks(benchmarks)}")
    return next(iter(benchmarks.values()))


def benchmark_lines(benchmarks: dict[str, Benchmark], limit: int | None = None) -> list[str]:
    """One phrase per benchmark: its key, revisions, attempts and the conditions that tell them apart."""
    keys = list(benchmarks)
    varying = sorted({k for b in benchmarks.values() for k in b.conditions
                      if len({other.conditions.get(k) for other in benchmarks.values()}) > 1}
                     | {f"env.{k}" for k in BENCHMARK_ENV
                        if len({other.env.get(k) for other in benchmarks.values()}) > 1})
    lines = []
    for key in keys[:limit]:
        b = benchmarks[key]
        shown = {k: (b.env.get(k[4:]) if k.startswith("env.") else b.conditions.get(k, "(absent)")) for k in varying}
        lines.append(f"{key} ({len(b.revisions)} revisions, {b.attempts} attempts"
                     + (f"; {', '.join(f'{k}={v}' for k, v in shown.items())}" if shown else "") + ")")
    return lines


def describe_benchmarks(benchmarks: dict[str, Benchmark]) -> str:
    """:func:`benchmark_lines` in one sentence (the first 20)."""
    more = len(benchmarks) - 20
    return "; ".join(benchmark_lines(benchmarks, 20)) + (f"; and {more} more" if more > 0 else "")


# --- the history run -----------------------------------------------------------------------------


def _iso(order: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(order, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return f"{order:g}"


def history_payload(benchmark: Benchmark, samples: list, points: list, settings: dict, warnings: list[str]) -> dict:
    """What ``history.json`` holds (with its format version)."""
    revisions = []
    for position, sample in enumerate(samples):
        entry = benchmark.revisions[sample.revision]
        revisions.append({"position": position, **sample.to_dict(), "commit_time": sample.order,
                          "run_ids": list(entry["run_ids"]), "groups": sorted(g for g in entry["groups"] if g)})
    return {"format_version": HISTORY_FORMAT, "benchmark": benchmark.key, "conditions": benchmark.conditions,
            "env": benchmark.env, "settings": settings, "revisions": revisions,
            "change_points": [point.to_dict() for point in points], "warnings": list(warnings),
            "counts": label_counts(points), "running_attempts": benchmark.running,
            "excluded_attempts": benchmark.excluded}


def label_counts(points: list) -> dict[str, int]:
    """Change points by label (every label of ``rules._history.LABELS``, zeros included)."""
    from ..rules import LABELS

    return {label: sum(point.label == label for point in points) for label in LABELS}


def _ratio_text(point: dict) -> str:
    if point["ratio"] is None:
        return "latency n/a"
    bounds = ""
    if point["ratio_low"] is not None and point["ratio_high"] is not None:
        bounds = f" [{point['ratio_low']:.3f}, {point['ratio_high']:.3f}]"
    p = "" if point["p_value"] is None else f", p = {point['p_value']:.3g}"
    return f"latency x{point['ratio']:.3f}{bounds}{p}"


def change_point_line(point) -> str:
    """One line for a change point (a :class:`~mlflow_perfgate.rules.ChangePoint` or its dict): its label,
    where, its latency ratio and its failure rates."""
    point = point if isinstance(point, dict) else point.to_dict()
    failures = f"failure rate {point['failure_rate_before']:.1%} -> {point['failure_rate_after']:.1%}"
    if point["failure_p_value"] is not None:
        failures += f" (p = {point['failure_p_value']:.3g})"
    return (f"{point['label']} ({point['direction']}) at {point['revision']} (after {point['previous_revision']}): "
            f"{_ratio_text(point)}; {failures}; {point['revisions_before']} revisions before, "
            f"{point['revisions_after']} after")


def history_markdown(payload: dict) -> str:
    """The history as markdown: the benchmark, its change points, one line per revision."""
    counts = payload["counts"]
    lines = [f"## History of benchmark {payload['benchmark']}: " + ", ".join(
        f"{count} {label}{'' if count == 1 or label == 'suspicious' else 's'}" for label, count in counts.items()), ""]
    conditions = ", ".join(f"`{k}={v}`" for k, v in payload["conditions"].items())
    lines.append(f"- conditions: {conditions or 'none'}")
    lines.append("- environment: " + ", ".join(f"{k} `{v}`" for k, v in payload["env"].items()))
    lines.append(f"- revisions: {len(payload['revisions'])}, attempts: "
                 f"{sum(r['attempted'] for r in payload['revisions'])} (failed ones counted as the evaluator counts them)")
    settings = payload["settings"]
    lines.append("- settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    for warning in payload["warnings"]:
        lines.append(f"- warning: {warning}")
    lines += ["", "### Change points", ""]
    if payload["change_points"]:
        for point in payload["change_points"]:
            lines.append(f"- {change_point_line(point)}")
    else:
        lines.append("- none found")
    starts = {point["index"]: point["label"] for point in payload["change_points"]}
    lines += ["", "### Revisions", "", "| # | revision | commit time | attempts | failed | median | failure rate | change |",
              "|---|---|---|---|---|---|---|---|"]
    for revision in payload["revisions"]:
        median = "n/a" if revision["median_ms"] is None else f"{revision['median_ms']:.4g} ms"
        lines.append(f"| {revision['position']} | `{revision['revision']}` | {_iso(revision['commit_time'])} | "
                     f"{revision['attempted']} | {revision['failed']} | {median} | {revision['failure_rate']:.1%} | "
                     f"{starts.get(revision['position'], '')} |")
    return "\n".join(lines) + "\n"


_COLOURS = {"regression": "tab:red", "improvement": "tab:green", "suspicious": "tab:orange"}


def history_plot(payload: dict, path: Path) -> Path:
    """The series (each attempt, each revision's median; failed attempts as red crosses), its failure rate,
    and the change points marked by label."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    revisions = payload["revisions"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    try:
        xs, ys = [], []
        for revision in revisions:
            xs += [revision["position"]] * len(revision["latencies_ms"])
            ys += revision["latencies_ms"]
        top.scatter(xs, ys, s=12, alpha=0.5, label="attempts")
        timed = [r for r in revisions if r["median_ms"] is not None]
        top.plot([r["position"] for r in timed], [r["median_ms"] for r in timed], color="black", linewidth=1.2,
                 marker="o", markersize=3, label="median per revision")
        failed = [r for r in revisions if r["failed"]]
        if failed and ys:
            floor = min(ys)
            top.scatter([r["position"] for r in failed], [floor] * len(failed), marker="x", color="red", s=50,
                        label="revisions with failed attempts")
        bottom.bar([r["position"] for r in revisions], [r["failure_rate"] for r in revisions], color="tab:red",
                   alpha=0.6)
        for point in payload["change_points"]:
            for axis in (top, bottom):
                axis.axvline(point["index"] - 0.5, color=_COLOURS[point["label"]], linestyle="--", linewidth=1.5)
            ratio = "" if point["ratio"] is None else f" x{point['ratio']:.2f}"
            top.annotate(f"{point['label']}{ratio}", (point["index"] - 0.45, 1), xycoords=("data", "axes fraction"),
                         va="top", fontsize=8, color=_COLOURS[point["label"]])
        top.set_ylabel("latency (ms)")
        bottom.set_ylabel("failure rate")
        bottom.set_ylim(0, 1)
        step = max(1, len(revisions) // 20)
        bottom.set_xticks([r["position"] for r in revisions][::step],
                          [r["revision"][:8] for r in revisions][::step], rotation=45, fontsize=7)
        top.set_title(f"benchmark {payload['benchmark']}: {len(payload['change_points'])} change points")
        top.legend(fontsize=8, loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def write_history(payload: dict, *, experiment_id: str, parent_run_id: str | None = None) -> str:
    """Log the history run: tags, the settings as params, the series as metric histories, the three files.

    Params: ``perfgate.<setting>`` for each setting, ``perfgate.benchmark``. Metrics:
    ``revision_median_ms`` and ``revision_failure_rate`` as histories (step = the revision's
    position), ``revisions``, ``attempts``, ``failed_attempts``, ``change_points`` and one count
    per label (``regressions``, ``improvements``, ``suspicious``). Artifacts:
    ``perfgate/history.json``, ``perfgate/history.png``, ``perfgate/history.md`` (also the note).

    Returns:
        The run id.
    """
    mlflow_client = _client.client()
    note = history_markdown(payload)
    tags = {TAG.KIND: KIND_HISTORY, TAG.BENCHMARK: payload["benchmark"],
            TAG.BENCHMARK_CONDITIONS: fit(json.dumps({"conditions": payload["conditions"], "env": payload["env"]},
                                                     sort_keys=True), MAX_TAG_VALUE),
            TAG.NOTE: _report.fit_note(note), **({TAG.PARENT: parent_run_id} if parent_run_id else {})}
    run = _client.retrying(lambda: mlflow_client.create_run(
        experiment_id, tags=tags, run_name=f"history {payload['benchmark']}"))
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    metrics = []
    for revision in payload["revisions"]:
        if revision["median_ms"] is not None:
            metrics.append(Metric("revision_median_ms", float(revision["median_ms"]), now, revision["position"]))
        metrics.append(Metric("revision_failure_rate", float(revision["failure_rate"]), now, revision["position"]))
    counts = payload["counts"]
    totals = {"revisions": len(payload["revisions"]), "attempts": sum(r["attempted"] for r in payload["revisions"]),
              "failed_attempts": sum(r["failed"] for r in payload["revisions"]),
              "change_points": len(payload["change_points"]), "regressions": counts.get("regression", 0),
              "improvements": counts.get("improvement", 0), "suspicious": counts.get("suspicious", 0)}
    metrics += [Metric(key, float(value), now, 0) for key, value in totals.items()]
    params = {PARAM.of(key): str(value) for key, value in payload["settings"].items()}
    params[PARAM.of("benchmark")] = payload["benchmark"]
    try:
        _client.log_batch(mlflow_client, run_id, params=params, metrics=metrics)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "history.json").write_text(json.dumps(_report._json_safe(payload), indent=2, default=str,
                                                            allow_nan=False))
            (folder / "history.md").write_text(note, encoding="utf-8")
            with contextlib.suppress(Exception):  # a plot that cannot be drawn costs the plot alone
                history_plot(payload, folder / "history.png")
            _client.retrying(lambda: mlflow_client.log_artifacts(run_id, str(folder), ARTIFACT_DIR))
    except BaseException:
        with contextlib.suppress(Exception):
            mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    _client.retrying(lambda: mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED)))
    return run_id


def read_history(run_id: str) -> dict:
    """The ``history.json`` of a history run.

    Raises:
        FormatError: a format this version cannot read.
    """
    from ..errors import FormatError

    payload = json.loads(_report._download(run_id, "history.json"))
    if not isinstance(payload, dict) or payload.get("format_version") != HISTORY_FORMAT:
        raise FormatError(f"history.json of run {run_id} has format version "
                          f"{payload.get('format_version') if isinstance(payload, dict) else None!r}; this release "
                          f"reads version {HISTORY_FORMAT}: upgrade mlflow-perfgate")
    return payload


def analyze(*, experiment_name: str | None = None, benchmark: str | None = None, conditions: dict | None = None,
            group_prefix: str | None = None, stale_after_s: float = DEFAULT_STALE_AFTER_S, test: str = "permutation",
            log: bool = True, parent_run_id: str | None = None, **settings: Any) -> dict:
    """Read one benchmark's series (one search), find and label its change points, log the history run.

    Args:
        experiment_name: where the attempts are.
        benchmark: its key (or a prefix); needed when the selection matches several.
        conditions, group_prefix: narrow the selection (see :func:`load_benchmarks`).
        stale_after_s: the evaluator's rule for RUNNING attempts.
        test: ``find_change_points``'s latency test (``permutation`` or ``t``).
        log: write the history run.
        parent_run_id: a run to nest the history run under.
        **settings: ``find_change_points``'s settings (``alpha``, ``min_magnitude``, ...).

    Returns:
        ``history.json``'s payload, with ``history_run_id``, ``history_run_url``, ``report`` (the
        markdown) and ``change_point_records`` (the :class:`~mlflow_perfgate.rules.ChangePoint` records).
    """
    warnings: list[str] = []
    experiment_id, found = load_benchmarks(experiment_name=experiment_name, conditions=conditions,
                                           group_prefix=group_prefix, stale_after_s=stale_after_s, warnings=warnings)
    chosen = select_benchmark(found, benchmark)
    samples = chosen.samples(warnings)
    if chosen.running:
        warnings.append(f"{chosen.running} attempts are still running: not counted yet")
    if chosen.excluded:
        warnings.append(f"{chosen.excluded} attempts excluded by 'forget' are not counted")
    defaults = {setting.name: setting.default for setting in rules.HISTORY_SETTINGS}
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise InputError(f"unknown history settings {unknown}; expected some of {sorted(defaults)}")
    used = {**defaults, **{k: v for k, v in settings.items() if v is not None}, "test": test}
    if not samples:
        raise InputError(f"no revision of benchmark {chosen.key!r} can be analysed: "
                         + ("; ".join(warnings) or "it holds no attempt with a revision"))
    if used["test"] == "permutation":
        floor = rules.permutation_floor(len(samples), **{key: used[key] for key in
                                                          ("alpha", "min_segment", "permutations", "seed")})
        if floor is None or floor > used["alpha"]:
            shown = ("it cannot split at all" if floor is None
                     else f"even a clean step in the middle gives p = {floor:.3g}")
            warnings.append(f"with {len(samples)} revisions the permutation test cannot find a latency change at "
                            f"alpha = {used['alpha']:g} ({shown}): pass --test t (it assumes normal log medians), a "
                            "larger --alpha, or record more revisions")
    points = rules.find_change_points(samples, **used)
    payload = history_payload(chosen, samples, points, used, warnings)
    payload["report"] = history_markdown(payload)
    payload["experiment_id"] = experiment_id
    payload["change_point_records"] = points
    payload["history_run_id"] = payload["history_run_url"] = None
    if log:
        clean = {k: v for k, v in payload.items() if k not in ("report", "experiment_id", "change_point_records",
                                                               "history_run_id", "history_run_url")}
        run_id = write_history(clean, experiment_id=experiment_id, parent_run_id=parent_run_id)
        payload["history_run_id"] = run_id
        payload["history_run_url"] = _client.run_link(_client.client().tracking_uri, experiment_id, run_id)
    return payload
