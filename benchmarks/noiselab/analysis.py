"""Judging: windows of consecutive ABBA rounds, the latency options, every judge's verdicts (ours
through ``rules.decide``, the peers' rules), the rates, the issue's targets and the recommendation.

Rates from sliding windows are correlated: a pool of R rounds holds only R // n disjoint
windows of n (``windows (indep.)`` in the tables); a rate near its target with few disjoint
windows is weak evidence either way.
"""

from __future__ import annotations

import functools
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from mlflow_perfgate.rules._settings import LATENCIES as COMPARE_LATENCIES

from .collection import round_wall_s
from .effects import EFFECT_SIZES
from .peers import MARGIN, MIN_IMPROVEMENT, REFERENCES, asv_verdict, installed_peers, pyperf_verdict

#: The window sizes ``n`` (rounds) judged.
SIZES = (5, 10, 20)
#: The methods of ``mlflow_perfgate.rules`` judged here, then the reference tools' rules.
METHODS = ("seed", "robust", "paired")
JUDGES = METHODS + REFERENCES
#: The latency options judged (:func:`latency_of`); the recommendation is among those ``compare
#: --latency`` offers (``COMPARE_LATENCIES``, the product's list).
LATENCIES = ("raw", "uncontended", "fastest", "p10")
MODES = ("improvement", "non_regression")


def available_judges() -> tuple[str, ...]:
    """The judges this environment can run: ours always, asv's and pyperf's when installed
    (the ``bench`` extra: ``pip install -e '.[bench]'``)."""
    return METHODS + installed_peers()


def latency_of(row: dict, latency: str) -> float | None:
    """An ok attempt row's figure under a latency option (``None``: the attempt gives none).

    ``fastest`` and ``p10`` are computed from the row's steps as the harness computes them
    (``rules._stats.step_figures``, the one place step figures are computed), so CSVs written
    before either figure existed are judged on them too.
    """
    if latency == "raw":
        return row["latency_ms"]
    if latency == "uncontended":
        return row["uncontended_latency_ms"]
    steps = row.get("step_times_ms")
    if not steps:
        return None
    return min(steps) if latency == "fastest" else _step_p10(tuple(steps))


@functools.lru_cache(maxsize=None)
def _step_p10(steps: tuple[float, ...]) -> float:
    """An attempt's p10, once: every window that holds the attempt asks for it again."""
    from mlflow_perfgate.rules._stats import step_figures

    return step_figures(steps)["step_p10_ms"]


def windows(rounds: Iterable[int], n: int, stride: int = 1) -> list[list[int]]:
    """Windows of ``n`` consecutive rounds, in time order, starting every ``stride`` rounds.

    Rounds are numbered in the order they ran, so the sorted round numbers are the time order;
    a window never reorders or skips a round. Fewer than ``n`` rounds give no window.

    Raises:
        ValueError: ``n`` or ``stride`` is not a positive integer.
    """
    if type(n) is not int or n < 1 or type(stride) is not int or stride < 1:
        raise ValueError(f"n and stride must be positive integers, got n={n!r}, stride={stride!r}")
    ordered = sorted(set(rounds))
    return [ordered[i:i + n] for i in range(0, len(ordered) - n + 1, stride)]


def window_records(rows: Sequence[dict], latency: str) -> tuple[list[dict], list[dict]]:
    """The baseline's and the candidate's attempt records of a window, for ``rules.decide``.

    A failed attempt is a failed record (it stays in the failure rate); a successful one carries
    its ``latency`` figure (:func:`latency_of`: ``raw``: ``latency_ms``; ``uncontended``:
    ``uncontended_latency_ms``; ``fastest``: its fastest step; ``p10``: the 10th percentile of
    its steps), its quality and its round as
    ``pair``. A successful attempt without the figure (no uncontended latency, no steps) is
    left out of the window (it ran, and its wall time counts, but it gives no figure).
    """
    if latency not in LATENCIES:
        raise ValueError(f"latency must be one of {list(LATENCIES)}, got {latency!r}")
    arms: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for row in rows:
        if not row["ok"]:
            arms[row["arm"]].append({"ok": False, "failure": row["failure"] or "unspecified", "pair": row["round"]})
            continue
        value = latency_of(row, latency)
        if value is None:
            continue
        arms[row["arm"]].append({"ok": True, "latency_ms": value, "quality": row["quality"], "pair": row["round"]})
    return arms["baseline"], arms["candidate"]


def _latencies(records: Sequence[dict]) -> list[float]:
    return [record["latency_ms"] for record in records if record["ok"]]


def judged_mode(rows: Sequence[dict], step_mode: str | None = None) -> str:
    """The step mode whose rounds are judged: ``step_mode`` if given; else ``process``, unless only
    step-interleaved rounds carry effects (a ``--step-mode steps`` run). A CSV can hold both (the
    interleave hook adds identical-arm ``steps`` rounds to a process run): their round numbers
    overlap, so the two are never pooled."""
    if step_mode is not None:
        return step_mode
    modes = {row["step_mode"] for row in rows if row["effect"] != 0.0} or {row["step_mode"] for row in rows}
    return "process" if "process" in modes or not modes else "steps"


def judge_window(baseline: list[dict], candidate: list[dict], mode: str,
                 judges: Sequence[str] = JUDGES) -> dict[str, str]:
    """The verdicts of ``judges`` on one window's records, in one mode.

    One ``rules.decide`` call: the seed method decides and the robust and paired methods are
    its companions (``decide`` computes every method that judges latency in the mode); then asv
    and pyperf on the successful latencies, when asked for.
    """
    from mlflow_perfgate.rules import decide

    result = decide(baseline, candidate, method="seed", mode=mode, min_improvement=MIN_IMPROVEMENT, margin=MARGIN)
    verdicts = {"seed": result["decision"], "robust": result["robust"]["decision"],
                "paired": result["paired"]["decision"]}
    base, cand = _latencies(baseline), _latencies(candidate)
    if "asv" in judges:
        verdicts["asv"] = asv_verdict(base, cand, mode)
    if "pyperf" in judges:
        verdicts["pyperf"] = pyperf_verdict(base, cand, mode)
    return verdicts


def rate(counts: Counter | None, verdict: str) -> float | None:
    """The share of ``verdict`` among the windows counted, ``None`` when none were."""
    if not counts:
        return None
    total = sum(counts.values())
    return counts[verdict] / total if total else None


@dataclass(frozen=True)
class Cell:
    """Where a count belongs: condition, effect (candidate/baseline - 1), n, judge, latency option, mode."""

    condition: str
    effect: float
    n: int
    judge: str
    latency: str
    mode: str


def summarize(pools: dict[tuple[str, float], dict[int, list[dict]]], sizes: Sequence[int], stride: int = 1,
              judges: Sequence[str] = JUDGES, jobs: int = 1) -> dict:
    """Judge every window of every pool; the counts and wall times the table reads.

    Args:
        pools: ``(condition, effect) -> round -> attempt rows`` (each row as :data:`FIELDS`, typed).
        sizes: the window sizes ``n``.
        stride: rounds between the starts of two windows.

    Returns:
        ``{"counts": {Cell: Counter(verdict)}, "walls": {(condition, effect, n): [window wall s]},
        "windows": {(condition, effect, n): (windows, disjoint windows)}}``.
    """
    tasks = [(key, pool, tuple(sizes), stride, tuple(judges), latency)
             for key, pool in sorted(pools.items()) for latency in LATENCIES]
    if jobs > 1 and len(tasks) > 1:
        import multiprocessing

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with multiprocessing.get_context(method).Pool(jobs) as pool:
            results = pool.map(_summarize_pool, tasks, chunksize=1)
    else:
        results = [_summarize_pool(task) for task in tasks]
    summary: dict = {"counts": {}, "walls": {}, "windows": {}}
    for counts, walls, count in results:
        summary["counts"].update(counts)
        summary["walls"].update(walls)
        summary["windows"].update(count)
    return summary


def _summarize_pool(task) -> tuple[dict, dict, dict]:
    (condition, effect), pool, sizes, stride, judges, latency = task
    counts: dict = {}
    walls: dict = {}
    count: dict = {}
    for n in sizes:
        spans = windows(pool, n, stride)
        count[(condition, effect, n)] = (len(spans), len(pool) // n)
        walls[(condition, effect, n)] = [sum(round_wall_s(pool[r]) for r in span) for span in spans]
        for mode in MODES:
            cells = {judge: Counter() for judge in judges}
            for span in spans:
                base, cand = window_records([row for r in span for row in pool[r]], latency)
                verdicts = judge_window(base, cand, mode, judges)
                for judge in judges:
                    cells[judge][verdicts[judge]] += 1
            for judge, cell in cells.items():
                counts[Cell(condition, effect, n, judge, latency, mode)] = cell
    return counts, walls, count


def cell_rate(summary: dict, condition: str, effect: float, n: int, judge: str, latency: str, mode: str,
              verdict: str) -> float | None:
    return rate(summary["counts"].get(Cell(condition, effect, n, judge, latency, mode)), verdict)


@dataclass(frozen=True)
class Target:
    """One target checked on one condition: the figure, its limit, and whether it held.

    Attributes:
        key: the target's short name (a row of the targets matrix).
        name: the target in words, with where its worst cell was.
        figure: the figure as the matrix shows it (a rate in %, or the cells that missed).
        detail: the figure against its limit, or the cells that missed.
        shortfall: how far a missed target is from its limit (0 when held).
        power: for the "power >= asv, pyperf" target, the judge's mean acceptance or detection
            rate over the effect cells compared (``None`` for the others): the recommendation's
            tie-break.
    """

    condition: str
    key: str
    name: str
    held: bool
    figure: str
    detail: str
    shortfall: float = 0.0
    power: float | None = None


#: The targets' short names, in the order they are checked and shown.
TARGET_KEYS = ("false accept <= 2%", "false alarm <= 5%", "accept 20% faster >= 90%, n=10",
               "detect 20% slower >= 90%, n=10", "reruns <= 20% at a 20% effect, n=10",
               "accept 10% faster >= 80%, n=20", "errors <= asv, pyperf + 1 pt", "power >= asv, pyperf")


def _worst(values: dict, direction: str) -> tuple[object, float] | None:
    present = {key: value for key, value in values.items() if value is not None}
    if not present:
        return None
    key = (max if direction == "max" else min)(present, key=present.get)
    return key, present[key]


def check_targets(summary: dict, condition: str, judge: str, latency: str, sizes: Sequence[int],
                  reference_latency: str = "raw") -> list[Target]:
    """The issue's targets for one judge and latency option under one condition.

    A target whose cells were not measured (a window size not collected) is left out. The
    comparisons with asv and pyperf read their rates on ``reference_latency`` (raw: what those
    tools measure); "power >= theirs" allows no shortfall at all (a tie counts as held, so that
    cells where every judge reaches 100% pass).
    """
    targets: list[Target] = []

    def r(effect, n, mode, verdict, who=judge, lat=latency):
        return cell_rate(summary, condition, effect, n, who, lat, mode, verdict)

    def add(key, name, value, limit, at_most):
        if value is None:
            return
        held = value <= limit + 1e-12 if at_most else value >= limit - 1e-12
        targets.append(Target(condition, key, name, held, f"{value:.1%}",
                              f"{value:.1%} ({'<=' if at_most else '>='} {limit:.0%})",
                              0.0 if held else abs(value - limit)))

    worst = _worst({n: r(0.0, n, "improvement", "accept") for n in sizes}, "max")
    if worst:
        add(TARGET_KEYS[0], f"false accept <= 2% at every n (worst n={worst[0]})", worst[1], 0.02, True)
    worst = _worst({n: r(0.0, n, "non_regression", "reject") for n in sizes}, "max")
    if worst:
        add(TARGET_KEYS[1], f"false alarm <= 5% at every n (worst n={worst[0]})", worst[1], 0.05, True)
    if 10 in sizes:
        add(TARGET_KEYS[2], "accept a 20% speedup >= 90% at n=10", r(-0.20, 10, "improvement", "accept"), 0.90, False)
        add(TARGET_KEYS[3], "detect a 20% slowdown >= 90% at n=10", r(0.20, 10, "non_regression", "reject"), 0.90,
            False)
        reruns = _worst({"speedup": r(-0.20, 10, "improvement", "rerun"),
                         "slowdown": r(0.20, 10, "non_regression", "rerun")}, "max")
        if reruns:
            add(TARGET_KEYS[4], f"reruns <= 20% for a 20% effect at n=10 (worst: {reruns[0]})", reruns[1], 0.20, True)
    if 20 in sizes:
        add(TARGET_KEYS[5], "accept a 10% speedup >= 80% at n=20", r(-0.10, 20, "improvement", "accept"), 0.80, False)
    if judge in REFERENCES:
        return targets
    errors, power = [], []
    compared = {"errors": 0, "power": 0}
    rates: list[float] = []  # the judge's own rate in every effect cell compared
    for n in sizes:
        for mode, verdict in (("improvement", "accept"), ("non_regression", "reject")):
            mine = r(0.0, n, mode, verdict)
            for ref in REFERENCES:
                theirs = r(0.0, n, mode, verdict, ref, reference_latency)
                if mine is None or theirs is None:
                    continue
                compared["errors"] += 1
                if mine > theirs + 0.01 + 1e-12:
                    errors.append((f"{mode} n={n} vs {ref} ({mine:.1%} > {theirs:.1%} + 1)", mine - theirs - 0.01))
        for size in EFFECT_SIZES:
            for effect, mode, verdict in ((-size, "improvement", "accept"), (size, "non_regression", "reject")):
                mine = r(effect, n, mode, verdict)
                for ref in REFERENCES:
                    theirs = r(effect, n, mode, verdict, ref, reference_latency)
                    if mine is None or theirs is None:
                        continue
                    compared["power"] += 1
                    rates.append(mine)
                    if mine < theirs - 1e-12:
                        power.append((f"{effect:+.0%} n={n} vs {ref} ({mine:.1%} < {theirs:.1%})", theirs - mine))
    for key, name, missed, count, word in (
            (TARGET_KEYS[6], "error rates <= asv's and pyperf's + 1 point", errors, compared["errors"], "over"),
            (TARGET_KEYS[7], "power >= asv's and pyperf's in every effect cell", power, compared["power"], "behind")):
        if count:
            targets.append(Target(condition, key, name, not missed,
                                  "held" if not missed else f"{len(missed)} of {count} cells",
                                  f"held in {count} cells" if not missed
                                  else f"{word} in " + ", ".join(cell for cell, _ in missed),
                                  sum(gap for _, gap in missed),
                                  statistics.mean(rates) if key == TARGET_KEYS[7] and rates else None))
    return targets


def targets_matrix(summary: dict, conditions: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """Every target (rows, per condition) for every judge and latency option (columns): PASS/FAIL and the figure."""
    columns = [(judge, latency) for judge in JUDGES for latency in LATENCIES]
    checked = {column: {(t.condition, t.key): t for c in conditions for t in check_targets(summary, c, *column, sizes)}
               for column in columns}
    lines = ["| condition | target | " + " | ".join(f"{judge} {latency}" for judge, latency in columns) + " |",
             "|---|---|" + "|".join(["---"] * len(columns)) + "|"]
    for condition in conditions:
        for key in TARGET_KEYS:
            cells = []
            for column in columns:
                target = checked[column].get((condition, key))
                cells.append("" if target is None else f"{'PASS' if target.held else 'FAIL'} {target.figure}")
            if any(cells):
                lines.append(f"| {condition} | {key} | " + " | ".join(cells) + " |")
    totals = []
    for column in columns:
        values = list(checked[column].values())
        totals.append(f"{sum(t.held for t in values)}/{len(values)}")
    lines.append("| all | targets held | " + " | ".join(totals) + " |")
    return lines


def recommend(summary: dict, conditions: Sequence[str], sizes: Sequence[int]) -> tuple[tuple[str, str], dict]:
    """The method and latency option that meet the targets best, and every candidate's targets.

    Best: the most targets held over all conditions; ties go to the smaller total shortfall
    (how far the missed targets are from their limits), then to the higher mean power over
    every effect cell and window size compared with asv and pyperf (:attr:`Target.power`: with
    every target held, the option that decides more often where there is an effect), then to
    the raw latency (no new option to adopt), then to the order of :data:`METHODS`.
    """
    scored = {}
    for judge in METHODS:
        for latency in COMPARE_LATENCIES:
            scored[(judge, latency)] = [t for c in conditions for t in check_targets(summary, c, judge, latency, sizes)]
    order = {key: index for index, key in enumerate(scored)}

    def score(key):
        targets = scored[key]
        powers = [t.power for t in targets if t.power is not None]
        mean_power = statistics.mean(powers) if powers else 0.0
        return (-sum(t.held for t in targets), sum(t.shortfall for t in targets), -round(mean_power, 9),
                key[1] != "raw", order[key])

    return min(scored, key=score), scored
