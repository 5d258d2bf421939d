"""What the lab prints: the recommendation, the targets matrix, per condition the realised effects
and the tables of error, power and rerun rates and wall times to a decision, the shared-process
bias of identical arms; and ``decision_quality.py``'s noise model fitted to the attempts.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Sequence

from .analysis import (COMPARE_LATENCIES, JUDGES, LATENCIES, METHODS, MODES, TARGET_KEYS, cell_rate, judged_mode,
                       latency_of, recommend, summarize, targets_matrix)
from .collection import pools_of, read_rows
from .effects import EFFECT_SIZES
from .neighbours import CONDITIONS

def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def realised_effects(pools: dict, condition: str) -> list[str]:
    """Lines: each effect's median within-round ratio candidate / baseline, under each latency option."""
    lines = []
    for (cond, effect), pool in sorted(pools.items()):
        if cond != condition:
            continue
        ratios = {latency: [] for latency in LATENCIES}
        for rows in pool.values():
            arms = {row["arm"]: row for row in rows if row["ok"]}
            if len(arms) == 2:
                for latency in LATENCIES:
                    base, cand = latency_of(arms["baseline"], latency), latency_of(arms["candidate"], latency)
                    if base and cand:
                        ratios[latency].append(cand / base)
        shown = ", ".join(f"{latency} {statistics.median(values):.3f} ({len(values)} rounds)" if values
                          else f"{latency} – (0 rounds)" for latency, values in ratios.items())
        lines.append(f"  effect {effect:+.0%} (target ratio {1 + effect:.3f}): {shown}; "
                     f"{len(pool)} rounds")
    return lines


def markdown_table(summary: dict, condition: str, sizes: Sequence[int], judges: Sequence[str] = JUDGES) -> list[str]:
    """The condition's table: error and power rates (%) per judge, latency option and n."""
    speed = [-s for s in EFFECT_SIZES]
    slow = list(EFFECT_SIZES)
    head = (["judge", "latency", "n", "windows (indep.)", "false accept", "false alarm"]
            + [f"accept {abs(e):.0%} faster" for e in speed] + [f"detect {e:.0%} slower" for e in slow]
            + ["wall s (ident.)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    for judge in judges:
        for latency in LATENCIES:
            for n in sizes:
                def r(effect, mode, verdict):
                    return cell_rate(summary, condition, effect, n, judge, latency, mode, verdict)

                count = summary["windows"].get((condition, 0.0, n))
                walls = summary["walls"].get((condition, 0.0, n)) or []
                cells = ([judge, latency, str(n), f"{count[0]} ({count[1]})" if count else "–",
                          _pct(r(0.0, "improvement", "accept")), _pct(r(0.0, "non_regression", "reject"))]
                         + [_pct(r(e, "improvement", "accept")) for e in speed]
                         + [_pct(r(e, "non_regression", "reject")) for e in slow]
                         + [f"{statistics.median(walls):.1f}" if walls else "–"])
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def rerun_table(summary: dict, condition: str, sizes: Sequence[int], judges: Sequence[str] = JUDGES) -> list[str]:
    """The condition's rerun rates (%): improvement mode on identical arms and speedups, non_regression on
    identical arms and slowdowns."""
    improvement = [0.0] + [-s for s in EFFECT_SIZES]
    non_regression = [0.0] + list(EFFECT_SIZES)
    head = (["judge", "latency", "n"] + [f"improvement {e:+.0%}" for e in improvement]
            + [f"non_regression {e:+.0%}" for e in non_regression])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    for judge in judges:
        for latency in LATENCIES:
            for n in sizes:
                cells = ([judge, latency, str(n)]
                         + [_pct(cell_rate(summary, condition, e, n, judge, latency, "improvement", "rerun"))
                            for e in improvement]
                         + [_pct(cell_rate(summary, condition, e, n, judge, latency, "non_regression", "rerun"))
                            for e in non_regression])
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def wall_table(summary: dict, condition: str, sizes: Sequence[int], effects: Sequence[float]) -> list[str]:
    """Median wall time to a decision (s), per effect and n (the same for every judge)."""
    lines = ["| n | " + " | ".join(f"{e:+.0%}" for e in effects) + " |",
             "|---:|" + "|".join(["---:"] * len(effects)) + "|"]
    for n in sizes:
        cells = []
        for effect in effects:
            walls = summary["walls"].get((condition, effect, n)) or []
            cells.append(f"{statistics.median(walls):.1f}" if walls else "–")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def _range(values: list[float], digits: int = 2) -> str:
    if not values:
        return "–"
    return f"{min(values):.{digits}f}-{max(values):.{digits}f} (median {statistics.median(values):.{digits}f})"


def describe_block(block: list[dict]) -> str:
    """One condition's attempts in a sentence: failures, load, neighbours, wait shares, exclusions."""
    excluded = sum(1 for row in block if row["ok"] and row["uncontended_latency_ms"] is None)
    return (f"{len(block)} attempts, {sum(1 for row in block if not row['ok'])} failed; 1-minute load average "
            f"{_range([row['loadavg_1m'] for row in block if row['loadavg_1m'] is not None])}; busy neighbours "
            f"{_range([row['neighbours_on'] for row in block if row['neighbours_on'] is not None])}; wait share "
            f"{_range([row['wait_share'] for row in block if row['wait_share'] is not None], 3)}; {excluded} ok "
            f"attempts without an uncontended latency (fewer than half their steps at the wait-share bound)")


def report(rows: list[dict], sizes: Sequence[int], stride: int, jobs: int, calibration: dict | None,
           step_mode: str | None = None) -> int:
    """Judge the collected attempts and print the recommendation, the targets and the tables."""
    import mlflow_perfgate.rules as rules

    step_mode = judged_mode(rows, step_mode)
    process = [row for row in rows if row["step_mode"] == step_mode]
    if step_mode == "steps":
        print("judging the step-interleaved rounds (compare --interleave steps: both arms of a round in one child, "
              "their measured steps interleaved A B B A)")
    pools = pools_of(process)
    conditions = [c for c in CONDITIONS if any(key[0] == c for key in pools)]
    effects = sorted({key[1] for key in pools})
    if calibration:
        print(f"calibration: plain step {calibration['step_ms']:.3f} ms, one unit ({calibration['unit_size']}^3 "
              f"matmul) {calibration['unit_ms']:.4f} ms, units (baseline, candidate) per effect "
              f"{calibration['units']}; loadavg {calibration['loadavg_start']} -> {calibration['loadavg_end']}")
    started = time.perf_counter()
    summary = summarize(pools, sizes, stride, jobs=jobs)
    windows_judged = sum(count[0] for count in summary["windows"].values()) * len(LATENCIES) * len(MODES)
    if not windows_judged:
        most = max((len(pool) for pool in pools.values()), default=0)
        print(f"nothing to judge: the pools hold at most {most} rounds, fewer than the smallest window "
              f"(n = {min(sizes)}); pass smaller --sizes")
        return 1
    print(f"judged {windows_judged} windows ({len(process)} attempts, {len(pools)} pools, n = "
          f"{', '.join(map(str, sizes))}, stride {stride}) in {time.perf_counter() - started:.1f} s\n")

    (best_method, best_latency), scored = recommend(summary, conditions, sizes)
    held = sum(t.held for t in scored[(best_method, best_latency)])
    total = len(scored[(best_method, best_latency)])
    default = rules.Policy()
    print(f"RECOMMENDED DEFAULT FOR compare: method={best_method}, latency={best_latency} "
          f"(meets {held} of {total} targets over {', '.join(conditions)}; "
          f"compare's default today: method={default.method}, latency={default.latency})")
    print(f"  i.e. mlflow-perfgate compare ... --method {best_method}"
          + ("" if best_latency == "raw" else f" --latency {best_latency}")
          + (" --interleave steps" if step_mode == "steps" else ""))
    missed = [t for t in scored[(best_method, best_latency)] if not t.held]
    for target in missed:
        print(f"  misses under {target.condition}: {target.name}: {target.detail}")
    print()

    print("targets, per condition, for every judge and latency option (PASS/FAIL and the figure: the worst n's "
          "rate for the error targets; for the comparisons with asv and pyperf on raw latencies, the cells "
          "that missed; rates from sliding windows of consecutive rounds, see 'windows (indep.)' below):\n")
    print("\n".join(targets_matrix(summary, conditions, sizes)))
    print()
    for judge in METHODS:
        for latency in COMPARE_LATENCIES:
            missed = [t for t in scored[(judge, latency)] if not t.held and t.key in TARGET_KEYS[6:]]
            for target in missed:
                print(f"  {judge} {latency}, {target.condition}: {target.name}: {target.detail}")
    print()

    for condition in conditions:
        print(f"## {condition}\n")
        print(describe_block([row for row in process if row["condition"] == condition]))
        print("realised effects (median within-round ratio candidate/baseline):")
        print("\n".join(realised_effects(pools, condition)))
        print("\nrates in % of windows (false accept: identical arms accepted, improvement mode; false alarm: "
              "identical arms rejected, non_regression mode, margin 5%; accept: improvement mode, "
              "min_improvement 5%; detect: non_regression rejects)\n")
        print("\n".join(markdown_table(summary, condition, sizes)))
        print("\nrerun rates in % of windows, per mode and effect (candidate/baseline - 1)\n")
        print("\n".join(rerun_table(summary, condition, sizes)))
        print("\nmedian wall time to a decision (s: the sum of the window's attempt wall times), "
              "per effect (candidate/baseline - 1) and n\n")
        print("\n".join(wall_table(summary, condition, sizes, effects)))
        print()
    interleaved = [row for row in rows if row["step_mode"] == "steps"]
    if interleaved and step_mode == "process":
        report_interleaved(interleaved, process)
    return 0


def report_interleaved(interleaved: list[dict], process: list[dict]) -> None:
    """Identical arms: within-round ratio of the second arm to the first, one process against two."""
    from scipy import stats

    print("## sharing a process (interleaved steps) against separate processes: identical arms\n")
    print("| condition | mode | rounds | median ratio candidate/baseline | Wilcoxon two-sided p |")
    print("|---|---|---:|---:|---:|")
    for condition in CONDITIONS:
        for label, rows in (("steps", interleaved), ("process", [r for r in process if r["effect"] == 0.0])):
            pool = pools_of(row for row in rows if row["condition"] == condition).get((condition, 0.0), {})
            logs = []
            for round_rows in pool.values():
                arms = {row["arm"]: row["latency_ms"] for row in round_rows if row["ok"]}
                if len(arms) == 2:
                    logs.append(math.log(arms["candidate"] / arms["baseline"]))
            if not logs:
                continue
            p = stats.wilcoxon(logs).pvalue if len(logs) >= 2 and any(logs) else float("nan")
            print(f"| {condition} | {label} | {len(logs)} | {math.exp(statistics.median(logs)):.4f} | {p:.3g} |")
    print()


def fit_simulation(rows: list[dict], threads: int) -> dict[str, dict]:
    """``decision_quality.py``'s noise model fitted per condition to the plain TinyLM attempts.

    Plain: no extra work, separate processes, successful, at ``threads`` torch threads. As
    ``decision_quality.fit`` does: the body's sigma is 1.4826 x MAD of the log latencies; the
    contention fraction is the share ``rules.flag_contention`` flags; the slowdown range is the
    smallest and largest flagged latency over the median (``None`` when fewer than two).
    """
    from mlflow_perfgate.rules import flag_contention

    fits = {}
    for condition in CONDITIONS:
        latencies = [row["latency_ms"] for row in rows
                     if row["condition"] == condition and row["step_mode"] == "process" and row["extra_units"] == 0
                     and row["ok"] and row["torch_threads"] == threads]
        if len(latencies) < 3:
            continue
        logs = [math.log(value) for value in latencies]
        centre = statistics.median(logs)
        sigma = 1.482602218505602 * statistics.median(abs(value - centre) for value in logs)
        flagged = flag_contention(latencies)
        median_ms = math.exp(centre)
        factors = sorted(latencies[i] / median_ms for i in flagged)
        fits[condition] = {"attempts": len(latencies), "median_ms": median_ms, "sigma": sigma,
                           "fraction": len(flagged) / len(latencies),
                           "factors": (factors[0], factors[-1]) if len(factors) >= 2 else None}
    return fits


def print_fit(path: str, threads: int | None = None) -> int:
    """Print the fit of :func:`fit_simulation` at ``threads`` (default: the harness's default here)."""
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    rows = read_rows(path)
    fits = fit_simulation(rows, threads)
    print(f"decision_quality.py's noise model fitted to the plain TinyLM attempts of {path} at {threads} torch "
          f"thread(s) (--threads; default: the harness's default here):")
    if not fits:
        print(f"  nothing to fit: no condition has 3 plain successful attempts at {threads} threads")
        return 1
    for condition, fit in fits.items():
        factors = fit["factors"]
        command = (f"python benchmarks/decision_quality.py --sigma {fit['sigma']:.4f} --contention {fit['fraction']:.4f}"
                   + (f" --factors {factors[0]:.3f} {factors[1]:.3f}" if factors else ""))
        print(f"  {condition:<7} {fit['attempts']} attempts: median {fit['median_ms']:.3f} ms, body sigma (log, "
              f"1.4826 MAD) {fit['sigma']:.4f}, contention flagged {fit['fraction']:.1%}"
              + (f" slowed {factors[0]:.2f}-{factors[1]:.2f}x" if factors else " (fewer than 2 flagged: the "
                 "simulation's assumed 1.5-3x range)"))
        print(f"          {command}")
    print("(the simulation draws attempts independently: it cannot judge the paired method, and the rounds' "
          "shared load that pairing cancels is not in it)")
    return 0
