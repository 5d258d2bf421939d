"""The noise lab: every decision method judged on real TinyLM attempts under contention it makes itself.

What it does, in order:

1. **Calibrates** the true effects on a quiet moment (no neighbour started yet): real attempts
   of plain TinyLM and of TinyLM with ``--probe-units`` extra matrix products per step
   (``benchmarks/noise_lab_workload.py``), interleaved; the median step and the cost of one
   unit of extra work (the median over rounds of the within-round latency difference over the
   units) give the units each effect needs. A slowdown ``s`` adds ``s`` x the step to the
   candidate (candidate/baseline = 1 + s); a speedup ``s`` adds ``s / (1 - s)`` x the step to
   the baseline (candidate/baseline = 1 - s). The calibration (step, unit cost, units, load
   average) is printed and kept beside the CSV (``PATH.calibration.json``).
2. **Collects** real attempts: supervised, through the warm fork runner (``attempt_runner
   ("auto")``, ``run_attempt(..., runner=...)``), the harness's default thread count and TinyLM
   conditions (``input_shape`` 4,128, ``warmup`` 2, ``steps`` 10, the probe on), under three
   contention conditions this script starts and stops itself:

   - ``quiet``: no neighbour;
   - ``steady``: one busy neighbour process per core, each pinned to its core;
   - ``bursty``: two neighbours (pinned to cores 0 and 1, modulo the cores there are) that
     switch on and off, each on its own seeded schedule of periods drawn uniformly from 0.5
     to 3 s (``burst_schedule``).

   For each condition and each effect (identical arms, 5/10/20% faster, 5/10/20% slower), pools
   of interleaved ABBA rounds: a round is one baseline and one candidate attempt, baseline
   first in even rounds; every sweep runs one round of each effect, in a seeded random order,
   so that all effects see the same machine. The conditions run as blocks, ``--cycles`` times
   (quiet, steady, bursty, then reversed, ...). Every attempt is a CSV row as soon as it ends
   (condition, effect, arm, round, latency, per-step times and wait shares, wait share,
   failure, load average, the neighbours busy during it, ...), so ``--from-csv`` recomputes
   everything and a stopped run keeps what it measured.
3. **Judges** windows of ``n`` consecutive rounds (n = 5, 10, 20, in time order, sliding by
   ``--stride``) of each pool with ``mlflow_perfgate.rules.decide`` (records ``{ok,
   latency_ms, quality, pair}``, the pair being the round) for every method (``seed``,
   ``robust``, ``paired``) in ``improvement`` mode (``min_improvement`` 0.05, the default) and
   ``non_regression`` mode (``margin`` 0.05), and by the rules of asv and pyperf on the same
   windows (``asv_verdict``, ``pyperf_verdict``: how their outputs map to accept / reject /
   rerun is written there). Each is judged four times: on ``raw`` latencies (``latency_ms``,
   the median of the attempt's steps), on ``uncontended`` ones (the median of the steps whose
   wait share is at most ``--wait-bound`` 0.05; ``None``, and the attempt left out of the
   window, when fewer than half its steps are kept; its wall time still counts), both of them
   on ``fastest`` ones (the attempt's fastest measured step, ``fastest_step_ms``) and on
   ``p10`` ones (the 10th percentile of its steps, Harrell-Davis, ``step_p10_ms``): all four
   options of ``compare --latency``.
4. **Prints**, first, the default it recommends for ``compare`` (the method and latency option
   that meet the targets best), then the targets (PASS/FAIL) of every method and option, then
   per condition the realised effects and a markdown table: false accept (identical arms,
   improvement mode), false alarm (identical arms, non_regression: a reject), acceptance of
   true speedups, detection of true slowdowns (non_regression rejects), the rerun rates, and
   the median wall time to a decision (the sum of the window's attempt wall times).

The targets (each condition, each method and latency option): identical arms falsely accepted
at most 2% and falsely alarmed at most 5% at every n; a 20% speedup accepted at least 90% at
n = 10, a 10% speedup at least 80% at n = 20; a 20% slowdown detected at least 90% at n = 10;
at most 20% reruns for a 20% effect at n = 10 (either mode); error rates no higher than asv's
and pyperf's (raw latencies, as those tools measure) plus one point, and power (acceptance of
speedups, detection of slowdowns) no lower than either's in every effect cell.

Rates from sliding windows are correlated: a pool of R rounds holds only R // n disjoint
windows of n, shown as ``indep.`` beside every rate; a rate near its target with few disjoint
windows is weak evidence either way.

Also:

- ``--interleave auto`` (the default) is the hook for ``compare --interleave steps`` (another
  engineer's branch): when ``mlflow_perfgate.workloads`` exposes ``execute_interleaved``,
  identical arms sharing one process (their steps interleaved) are collected under each
  condition and their within-process bias is printed beside that of separate processes;
  otherwise it says it skipped. Look for ``HOOK``.
- ``--step-mode steps`` collects every pool (every effect) the way ``compare --interleave steps``
  runs: a round is one supervised child holding both arms (the round's leading arm alternates,
  ABBA over rounds), their measured steps interleaved A B B A, so both see the same contention
  within milliseconds; the report then judges those rounds (``--from-csv`` picks them when only
  they carry effects). A round's wall time is its one child's. The calibration runs that way
  too (plain and loaded arms in one child a round): the extra work's cost is measured as the
  attempts will see it.
- ``--fit-simulation FROM_CSV`` fits the noise model of ``benchmarks/decision_quality.py``
  (lognormal body, contention tail) to the plain TinyLM attempts of a CSV at the harness's
  default thread count, per condition, and prints the parameters with the command that runs
  that simulation: the simulation becomes a secondary check fitted to reality.

Neighbours are processes this script starts and ends by PID. Each also ends itself within
0.1 s when this script's process is gone (its parent pid changes), when the lease file this
script touches before every attempt is older than the attempt timeout plus 30 s, or at the end
of its schedule (a bound of four times the block's expected length plus 5 minutes). SIGTERM
unwinds like Ctrl-C. ``/proc/loadavg`` is printed at the start and end of the calibration and
of every condition block.

Usage::

    python benchmarks/noise_lab.py [--rounds 80] [--cycles 2] [--csv PATH] [--jobs 1]
    python benchmarks/noise_lab.py --from-csv PATH [--sizes 5,10,20] [--stride 1]
    python benchmarks/noise_lab.py --fit-simulation PATH

A smoke run (tiny sizes; 54 attempts, about a minute on an idle 2-core machine, 4 minutes
measured at a load average of 6): ``--rounds 3 --cycles 1 --effects 0.2 --sizes 2,3
--calibration-rounds 2``. The full run (the defaults, 3,360 attempts) takes about 45-60 minutes
on an idle 2-core machine; it prints its own estimate once calibrated.
"""

from __future__ import annotations

import argparse
import csv
import functools
import gzip
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
#: The wrapper workload, imported by every attempt's child from this directory.
WORKLOAD = "noise_lab_workload:make"

CONDITIONS = ("quiet", "steady", "bursty")
SIZES = (5, 10, 20)
EFFECT_SIZES = (0.05, 0.10, 0.20)
#: The methods of ``mlflow_perfgate.rules`` judged here, then the reference tools' rules.
METHODS = ("seed", "robust", "paired")
REFERENCES = ("asv", "pyperf")
JUDGES = METHODS + REFERENCES


def available_judges() -> tuple[str, ...]:
    """The judges this environment can run: ours always, asv's and pyperf's when installed
    (the ``bench`` extra: ``pip install -e '.[bench]'``)."""
    import importlib

    def installed(tool: str) -> bool:
        try:
            importlib.import_module(tool)
        except ImportError:
            return False
        return True

    return METHODS + tuple(tool for tool in REFERENCES if installed(tool))
LATENCIES = ("raw", "uncontended", "fastest", "p10")
#: The latency options ``compare --latency`` offers: the recommended default is one of these.
COMPARE_LATENCIES = ("raw", "uncontended", "fastest", "p10")


def latency_of(row: dict, latency: str) -> float | None:
    """An ok attempt row's figure under a latency option (``None``: the attempt gives none).

    ``fastest`` and ``p10`` are computed from the row's steps as the harness computes them
    (the least step; ``rules._stats.step_quantile`` at ``STEP_P10_FRACTION``), so CSVs written
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
    from mlflow_perfgate.rules._records import STEP_P10_FRACTION
    from mlflow_perfgate.rules._stats import step_quantile

    return step_quantile(steps, STEP_P10_FRACTION)


MODES = ("improvement", "non_regression")
MIN_IMPROVEMENT = 0.05
MARGIN = 0.05
#: A step counts as uncontended when its run-queue wait share is at most this.
WAIT_BOUND = 0.05
BURST_RANGE = (0.5, 3.0)
BURSTY_NEIGHBOURS = 2
#: Above this 1-minute load average the calibration warns that the machine is not quiet.
CALIBRATION_LOAD = 0.5
#: Relative tolerance of the threshold comparisons of the reference rules (as ``rules.REL_TOL``).
REL_TOL = 1e-9

#: A busy neighbour. argv: core (-1: not pinned), parent pid, lease file, lease seconds, horizon
#: seconds. stdin: one JSON line {"t0": time.monotonic() of the schedule's start, "on": [[start,
#: end], ...] seconds after t0}. It spins during its on-intervals and sleeps between them, and
#: ends at the end of its schedule, when its parent is gone or when the lease goes stale.
_NEIGHBOUR = r"""
import json, os, sys, time
core, parent, lease, lease_s, horizon = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
spec = json.loads(sys.stdin.readline())
t0, on = float(spec["t0"]), spec["on"]
if core >= 0:
    os.sched_setaffinity(0, {core})
print("ready", flush=True)
end = min(t0 + horizon, t0 + (on[-1][1] if on else 0.0))

def alive():
    if os.getppid() != parent:
        return False
    try:
        return time.time() - os.stat(lease).st_mtime < lease_s
    except OSError:
        return False

i = 0
while time.monotonic() < end and alive():
    now = time.monotonic() - t0
    while i < len(on) and on[i][1] <= now:
        i += 1
    if i >= len(on):
        break
    start, stop = on[i]
    if now < start:
        time.sleep(min(start - now, 0.1))
        continue
    until = min(t0 + stop, time.monotonic() + 0.1)
    while time.monotonic() < until:
        pass
"""

FIELDS = ("seq", "condition", "cycle", "block", "effect", "arm", "round", "position", "step_mode",
          "extra_units", "unit_size", "started_s", "wall_s", "ok", "failure", "latency_ms", "quality",
          "uncontended_latency_ms", "wait_share", "step_times_ms", "step_wait_share", "torch_threads",
          "runner", "neighbours_on", "loadavg_1m", "loadavg")


# --- pure parts: schedules, calibration, windows, latencies, rules, rates ----------------------------


def loadavg() -> str:
    """``/proc/loadavg`` as it reads (``cat /proc/loadavg``), or why not."""
    try:
        with open("/proc/loadavg") as handle:
            return handle.read().strip()
    except OSError:
        return "no /proc/loadavg"


def burst_schedule(seed: int, horizon_s: float, low: float = BURST_RANGE[0],
                   high: float = BURST_RANGE[1]) -> list[tuple[float, float]]:
    """A bursty neighbour's on-intervals ``[(start, end), ...]`` (seconds from its start).

    Periods alternate on and off, each drawn uniformly from ``[low, high]`` by
    ``random.Random(seed)``; whether the first period is on is the generator's first draw. The
    last interval is clipped at ``horizon_s``. The same seed gives the same schedule.

    Raises:
        ValueError: ``low`` or ``high`` is not positive, ``high < low``, or ``horizon_s < 0``.
    """
    if not 0 < low <= high or not horizon_s >= 0:
        raise ValueError(f"need 0 < low <= high and horizon_s >= 0, got low={low!r}, high={high!r}, "
                         f"horizon_s={horizon_s!r}")
    rng = random.Random(seed)
    on = rng.random() < 0.5
    t, intervals = 0.0, []
    while t < horizon_s:
        period = rng.uniform(low, high)
        if on:
            intervals.append((t, min(t + period, horizon_s)))
        t += period
        on = not on
    return intervals


def busy_neighbours(schedules: Sequence[Sequence[tuple[float, float]]], t0: float, start: float,
                    end: float) -> float:
    """The mean number of neighbours on during ``[start, end]`` (absolute times, schedules from ``t0``)."""
    if end <= start:
        return float(sum(any(a <= start - t0 < b for a, b in s) for s in schedules))
    busy = 0.0
    for schedule in schedules:
        for a, b in schedule:
            busy += max(0.0, min(b + t0, end) - max(a + t0, start))
    return busy / (end - start)


def extra_fraction(effect: float) -> float:
    """The extra work, as a fraction of the plain step, that makes candidate/baseline ``1 + effect``.

    A slowdown (``effect > 0``) adds ``effect`` x the step to the candidate; a speedup
    (``effect < 0``) adds ``-effect / (1 + effect)`` x the step to the baseline (a 20% speedup:
    25% more work for the baseline, so that candidate / baseline = 1 / 1.25 = 0.8).

    Raises:
        ValueError: ``effect`` is not in (-1, 1].
    """
    if not -1 < effect <= 1:
        raise ValueError(f"effect must be in (-1, 1], got {effect!r}")
    return effect if effect >= 0 else -effect / (1 + effect)


def unit_cost_ms(plain_ms: Sequence[float], loaded_ms: Sequence[float], units: int) -> float:
    """The cost of one unit of extra work: the median over rounds of (loaded - plain) / units.

    Args:
        plain_ms, loaded_ms: the latencies of the plain and the loaded attempt of each round.
        units: the extra units of the loaded attempts.

    Raises:
        ValueError: no rounds, unequal lengths, ``units < 1``, or a cost that is not positive
            (the extra work did not show: measure on a quieter moment or with more units).
    """
    if len(plain_ms) != len(loaded_ms) or not plain_ms:
        raise ValueError(f"need as many plain as loaded latencies (>= 1), got {len(plain_ms)} and {len(loaded_ms)}")
    if type(units) is not int or units < 1:
        raise ValueError(f"units must be a positive integer, got {units!r}")
    cost = statistics.median((loaded - plain) / units for plain, loaded in zip(plain_ms, loaded_ms))
    if not cost > 0:
        raise ValueError(f"the extra work did not show (median cost per unit {cost:.4g} ms): measure on a "
                         "quieter moment or with more --probe-units")
    return cost


def arm_units(effect: float, step_ms: float, unit_ms: float) -> tuple[int, int]:
    """``(baseline_units, candidate_units)`` of extra work for an effect (see :func:`extra_fraction`)."""
    if not step_ms > 0 or not unit_ms > 0:
        raise ValueError(f"step_ms and unit_ms must be > 0, got {step_ms!r} and {unit_ms!r}")
    units = round(extra_fraction(effect) * step_ms / unit_ms)
    if effect > 0:
        return 0, units
    if effect < 0:
        return units, 0
    return 0, 0


def expected_ratio(units: tuple[int, int], step_ms: float, unit_ms: float) -> float:
    """Candidate / baseline latency that ``(baseline_units, candidate_units)`` should give."""
    base, cand = units
    return (step_ms + cand * unit_ms) / (step_ms + base * unit_ms)


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


def uncontended_latency(step_times_ms: Sequence[float] | None, step_wait_share: Sequence[float | None] | None,
                        bound: float = WAIT_BOUND) -> float | None:
    """The median of the steps whose wait share is at most ``bound``; ``None`` if fewer than half are kept.

    A step without a wait share (no contention figures) is not kept.
    """
    if not step_times_ms or not step_wait_share or len(step_times_ms) != len(step_wait_share):
        return None
    kept = [t for t, share in zip(step_times_ms, step_wait_share) if share is not None and share <= bound]
    if 2 * len(kept) < len(step_times_ms):
        return None
    return statistics.median(kept)


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


#: asv's marks (``asv compare``) and what each answers in either mode (``asv_verdict``).
ASV_VERDICTS = {
    "improvement": {"-": "accept", "+": "reject", "~": "rerun", " ": "reject", "x": "rerun"},
    "non_regression": {"-": "accept", "+": "reject", "~": "rerun", " ": "accept", "x": "rerun"},
}


def asv_mark(baseline: Sequence[float], candidate: Sequence[float], factor: float) -> str:
    """The mark ``asv compare --factor FACTOR`` gives the candidate against the baseline.

    asv's own code: ``asv_runner.statistics.compute_stats`` (the median and its 99% interval)
    for each arm's samples, then ``asv.commands.compare._is_result_better`` as ``asv compare``
    calls it: ``-`` better (significant, by ``asv._stats.is_different``: a two-sided
    Mann-Whitney U test at p < 0.002 when the samples can reach it, else non-overlapping 99%
    intervals; and the candidate's median below the baseline's / factor), ``+`` worse (the
    same the other way), ``~`` beyond the factor but not significant, `` `` within the factor.
    ``x``: an arm without a successful attempt (asv's failed result).
    """
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    if not baseline or not candidate:
        return "x"
    base, base_stats = compute_stats(list(baseline), 1)
    cand, cand_stats = compute_stats(list(candidate), 1)
    base_ss, cand_ss = (base_stats, list(baseline)), (cand_stats, list(candidate))
    if _is_result_better(cand, base, cand_ss, base_ss, factor):
        return "-"
    if _is_result_better(base, cand, base_ss, cand_ss, factor):
        return "+"
    if _is_result_better(base, cand, None, None, factor) or _is_result_better(cand, base, None, None, factor):
        return "~"
    return " "


def asv_verdict(baseline: Sequence[float], candidate: Sequence[float], mode: str,
                min_improvement: float = MIN_IMPROVEMENT, margin: float = MARGIN) -> str:
    """asv's rule mapped to accept / reject / rerun (:data:`ASV_VERDICTS`).

    The factor is the mode's threshold: ``1 / (1 - min_improvement)`` in improvement mode (a
    median below the baseline's / factor is ``min_improvement`` faster), ``1 + margin`` in
    non_regression mode. ``-`` (significantly faster beyond the factor) accepts in either mode
    and ``+`` rejects; ``~`` (beyond the factor, not significant) is a rerun: asv cannot tell;
    `` `` (within the factor) rejects in improvement mode (not faster by the factor) and accepts
    in non_regression mode (what ``asv continuous`` passes). Only accept-versus-rerun depends
    on these choices; the error and power figures read accepts in improvement mode and rejects
    in non_regression mode.
    """
    factor = 1 / (1 - min_improvement) if mode == "improvement" else 1 + margin
    return ASV_VERDICTS[mode][asv_mark(baseline, candidate, factor)]


class _Values:
    """The one method of a ``pyperf.Benchmark`` that ``pyperf._compare.is_significant_benchs`` reads."""

    def __init__(self, values: Sequence[float]):
        self._values = list(values)

    def get_values(self) -> list[float]:
        return self._values


def pyperf_verdict(baseline: Sequence[float], candidate: Sequence[float], mode: str,
                   min_improvement: float = MIN_IMPROVEMENT, margin: float = MARGIN) -> str:
    """pyperf's rule mapped to accept / reject / rerun.

    pyperf's own code: ``pyperf._compare.is_significant_benchs`` (``pyperf compare_to``'s
    test: Student's two-sample t-test with pooled variance, two-tailed at 95%; with equal
    sizes its statistic is Welch's; unequal sizes or all-equal samples make it raise, and pyperf
    then calls the difference significant: its FIXME, kept), and the ratio of means
    (``compute_normalized_mean``: candidate mean / baseline mean). Not significant: a rerun
    (pyperf hides the benchmark as not significant). Significant: improvement mode accepts when
    the ratio is at most ``1 - min_improvement`` (``--min-speed`` at that threshold) and
    rejects otherwise; non_regression mode rejects when it exceeds ``1 + margin`` and accepts
    otherwise. An arm without a successful attempt: a rerun.
    """
    from pyperf._compare import is_significant_benchs

    if not baseline or not candidate:
        return "rerun"
    significant, _ = is_significant_benchs(_Values(baseline), _Values(candidate))
    if not significant:
        return "rerun"
    ratio = statistics.fmean(candidate) / statistics.fmean(baseline)
    if mode == "improvement":
        return "accept" if ratio <= (1 - min_improvement) * (1 + REL_TOL) else "reject"
    return "reject" if ratio > (1 + margin) * (1 + REL_TOL) else "accept"


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


# --- targets and the recommendation --------------------------------------------------------------


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


# --- the table -----------------------------------------------------------------------------------


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


def judged_mode(rows: Sequence[dict], step_mode: str | None = None) -> str:
    """The step mode whose rounds are judged: ``step_mode`` if given; else ``process``, unless only
    step-interleaved rounds carry effects (a ``--step-mode steps`` run). A CSV can hold both (the
    interleave hook adds identical-arm ``steps`` rounds to a process run): their round numbers
    overlap, so the two are never pooled."""
    if step_mode is not None:
        return step_mode
    modes = {row["step_mode"] for row in rows if row["effect"] != 0.0} or {row["step_mode"] for row in rows}
    return "process" if "process" in modes or not modes else "steps"


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


# --- the CSV -------------------------------------------------------------------------------------


def _json_or_none(text: str):
    return json.loads(text) if text not in ("", None) else None


def _float_or_none(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def read_rows(path: str) -> list[dict]:
    """The attempt rows of a CSV this script wrote (or its gzipped copy, ``.csv.gz``), typed."""
    rows = []
    opened = gzip.open(path, "rt", newline="") if str(path).endswith(".gz") else open(path, newline="")
    with opened as handle:  # the committed results are gzipped (results/noise_lab/*.csv.gz)
        for raw in csv.DictReader(handle):
            row = dict(raw)
            for key in ("seq", "cycle", "block", "round", "position", "extra_units", "unit_size"):
                row[key] = int(row[key])
            row["torch_threads"] = int(row["torch_threads"]) if row["torch_threads"] else None
            for key in ("effect", "started_s", "wall_s", "latency_ms", "quality", "uncontended_latency_ms",
                        "wait_share", "neighbours_on", "loadavg_1m"):
                row[key] = _float_or_none(row[key])
            row["ok"] = row["ok"] == "true"
            row["failure"] = row["failure"] or None
            row["step_times_ms"] = _json_or_none(row["step_times_ms"]) or []
            row["step_wait_share"] = _json_or_none(row["step_wait_share"])
            rows.append(row)
    return rows


def pools_of(rows: Iterable[dict]) -> dict[tuple[str, float], dict[int, list[dict]]]:
    """``(condition, effect) -> round -> rows``."""
    pools: dict = {}
    for row in rows:
        pools.setdefault((row["condition"], row["effect"]), {}).setdefault(row["round"], []).append(row)
    return pools


def attempt_row(result, *, seq: int, condition: str, cycle: int, block: int, effect: float, arm: str,
                round_: int, position: int, step_mode: str, units: int, unit_size: int, started_s: float,
                neighbours_on: float, load: str, wait_bound: float) -> dict:
    """One CSV row for an :class:`AttemptResult`."""
    shares = list(result.step_wait_share) if result.step_wait_share is not None else None
    return {
        "seq": seq, "condition": condition, "cycle": cycle, "block": block, "effect": effect, "arm": arm,
        "round": round_, "position": position, "step_mode": step_mode, "extra_units": units,
        "unit_size": unit_size, "started_s": round(started_s, 3), "wall_s": result.wall_s,
        "ok": "true" if result.ok else "false", "failure": result.failure or "",
        "latency_ms": result.latency_ms if result.ok else "", "quality": result.quality if result.ok else "",
        "uncontended_latency_ms": (uncontended_latency(result.step_times_ms, shares, wait_bound) or "")
        if result.ok else "",
        "wait_share": "" if result.wait_share is None else result.wait_share,
        "step_times_ms": json.dumps([round(t, 4) for t in result.step_times_ms]),
        "step_wait_share": "" if shares is None else json.dumps([None if s is None else round(s, 4) for s in shares]),
        "torch_threads": result.torch_threads or "", "runner": result.runner or "",
        "neighbours_on": round(neighbours_on, 3), "loadavg_1m": load.split()[0] if load[:1].isdigit() else "",
        "loadavg": load,
    }


# --- neighbours ----------------------------------------------------------------------------------


class Neighbours:
    """Busy neighbour processes this script starts and ends by PID (a context manager).

    Args:
        schedules: one list of on-intervals per neighbour (seconds from the common start).
        cores: the core each neighbour is pinned to (-1: not pinned).
        lease_s: a neighbour ends itself when the lease file is older than this.
        horizon_s: and at most this long after the common start.
    """

    def __init__(self, schedules: list[list[tuple[float, float]]], cores: list[int], lease_s: float,
                 horizon_s: float):
        self.schedules, self.cores = schedules, cores
        self.lease_s, self.horizon_s = lease_s, horizon_s
        self.processes: list[subprocess.Popen] = []
        self.t0 = 0.0
        self._dir = tempfile.TemporaryDirectory(prefix="noise-lab-lease-")
        self.lease = os.path.join(self._dir.name, "lease")

    def __enter__(self) -> "Neighbours":
        self.renew()
        # A common start, late enough for every neighbour to be up.
        self.t0 = time.monotonic() + 0.3 + 0.2 * len(self.schedules)
        try:
            for schedule, core in zip(self.schedules, self.cores):
                process = subprocess.Popen(
                    [sys.executable, "-c", _NEIGHBOUR, str(core), str(os.getpid()), self.lease, str(self.lease_s),
                     str(self.horizon_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                self.processes.append(process)
                process.stdin.write(json.dumps({"t0": self.t0, "on": schedule}) + "\n")
                process.stdin.close()
                if process.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"neighbour {process.pid} did not start")
        except BaseException:
            self.stop()
            raise
        time.sleep(max(0.0, self.t0 - time.monotonic()) + 0.2)  # on the run queues before the first attempt
        return self

    def renew(self) -> None:
        """Touch the lease: the neighbours live on while this script does."""
        with open(self.lease, "a"):
            pass
        os.utime(self.lease)

    def check(self) -> None:
        """Raise if a neighbour ended before its time (the condition would no longer be what it says)."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"neighbour {process.pid} ended early (exit {process.returncode}): the block ran "
                                   f"past its horizon of {self.horizon_s:.0f} s or lost its lease")

    def busy(self, start: float, end: float) -> float:
        return busy_neighbours(self.schedules, self.t0, start, end)

    def stop(self) -> None:
        """End the neighbours this script started, by PID."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=10)
            process.stdout.close()
        self.processes = []

    def __exit__(self, *exc_info) -> None:
        self.stop()
        self._dir.cleanup()


def neighbour_plan(condition: str, seed: int, block: int, horizon_s: float,
                   cores: list[int]) -> tuple[list[list[tuple[float, float]]], list[int]]:
    """The schedules and cores of a condition's neighbours in one block."""
    if condition == "quiet":
        return [], []
    if condition == "steady":
        return [[(0.0, horizon_s)] for _ in cores], list(cores)
    if condition == "bursty":
        return ([burst_schedule(seed * 1_000_003 + block * 101 + index, horizon_s) for index in range(BURSTY_NEIGHBOURS)],
                [cores[index % len(cores)] for index in range(BURSTY_NEIGHBOURS)])
    raise ValueError(f"condition must be one of {list(CONDITIONS)}, got {condition!r}")


# --- collecting ----------------------------------------------------------------------------------


def base_conditions(args) -> dict:
    """The harness's default TinyLM conditions, with this run's shape, warm-up and steps."""
    from mlflow_perfgate.harness import DEFAULT_CONDITIONS

    shape = [int(part) for part in str(args.input_shape).replace("x", ",").split(",")]
    return {**DEFAULT_CONDITIONS, "input_shape": ",".join(map(str, shape)), "batch_size": shape[0],
            "warmup": args.warmup, "steps": args.steps, "unit_size": args.unit_size}


def calibrate(args, runner, conditions: dict) -> dict:
    """The units of extra work each effect needs, measured now (see the module docstring)."""
    from mlflow_perfgate.workloads import run_attempt

    start = loadavg()
    print(f"calibration (quiet, no neighbour): {args.calibration_rounds} rounds of plain TinyLM against "
          f"{args.probe_units} units of {args.unit_size}^3 matmul per step; cat /proc/loadavg: {start}")
    busy = float(start.split()[0]) if start[:1].isdigit() else 0.0
    if busy > CALIBRATION_LOAD:
        print(f"  WARNING: the 1-minute load average is {busy:.2f} (> {CALIBRATION_LOAD}): other work shares the "
              "machine, so the calibrated effects will be off; calibrate when it is idle, or reuse an idle "
              "calibration with --calibration JSON")
    shared = getattr(args, "step_mode", None) == "steps"
    if shared:
        print("  (step-interleaved, as the attempts will run: plain and loaded arms in one child a round)")
    plain, loaded, walls = [], [], []
    for index in range(args.calibration_rounds):
        order = (0, args.probe_units) if index % 2 == 0 else (args.probe_units, 0)
        got = {}
        if shared:
            pairs = list(zip(order, shared_pair(args, runner, conditions, *order)))
        else:
            pairs = [(units, run_attempt(WORKLOAD, {**conditions, "extra_units": units}, runner=runner,
                                         timeout_s=args.timeout, probe=not args.no_probe, threads=args.threads))
                     for units in order]
        for units, result in pairs:
            if not result.ok:
                raise SystemExit(f"calibration attempt failed: {result.failure}\n{result.failure_detail}")
            got[units] = result.latency_ms
            walls.append(result.wall_s)
        plain.append(got[0])
        loaded.append(got[args.probe_units])
    step_ms = statistics.median(plain)
    unit_ms = unit_cost_ms(plain, loaded, args.probe_units)
    effects = effect_list(args.effects)
    units = {f"{effect:+.2f}": arm_units(effect, step_ms, unit_ms) for effect in effects}
    end = loadavg()
    calibration = {
        "step_ms": step_ms, "unit_ms": unit_ms, "unit_size": args.unit_size, "probe_units": args.probe_units,
        "plain_ms": plain, "loaded_ms": loaded, "units": units, "attempt_wall_s": statistics.median(walls),
        "expected_ratio": {key: expected_ratio(tuple(value), step_ms, unit_ms) for key, value in units.items()},
        "loadavg_start": start, "loadavg_end": end, "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "warmup": args.warmup, "steps": args.steps, "step_mode": "steps" if shared else "process",
    }
    print(f"  plain step (median attempt latency) {step_ms:.3f} ms; one unit {unit_ms:.4f} ms; median attempt "
          f"wall {calibration['attempt_wall_s']:.2f} s")
    for key, value in units.items():
        print(f"  effect {float(key):+.0%}: baseline +{value[0]} units, candidate +{value[1]} units "
              f"(expected ratio {calibration['expected_ratio'][key]:.3f})")
    print(f"  cat /proc/loadavg: {end}\n")
    return calibration


def effect_list(sizes: Sequence[float]) -> list[float]:
    """Identical arms, then each size as a speedup and as a slowdown, as candidate/baseline - 1."""
    return [0.0] + [-s for s in sizes] + list(sizes)


def block_plan(conditions: Sequence[str], rounds: int, cycles: int) -> list[tuple[int, str, int]]:
    """``(cycle, condition, rounds in the block)``: conditions in order, then reversed, ``cycles`` times."""
    plan = []
    for cycle in range(cycles):
        share = rounds // cycles + (1 if cycle < rounds % cycles else 0)
        order = list(conditions) if cycle % 2 == 0 else list(conditions)[::-1]
        plan.extend((cycle, condition, share) for condition in order if share)
    return plan


def round_wall_s(rows: Sequence[dict]) -> float:
    """A round's wall time: its attempts' walls summed; a step-interleaved round's one child counted once
    (both its arms' rows carry that child's wall)."""
    if any(row.get("step_mode") == "steps" for row in rows):
        return max((row["wall_s"] or 0.0 for row in rows), default=0.0)
    return sum(row["wall_s"] or 0.0 for row in rows)


def attempt_wall_s(calibration: dict, warmup: int, steps: int) -> float:
    """A quiet attempt's wall time at ``warmup`` + ``steps`` steps, from the calibration's (measured at its own
    step counts, 2 + 10 when it does not say): scaled by the step count, which over-estimates (the fixed
    costs do not grow), as the neighbours' time bound wants."""
    measured = calibration.get("warmup", 2) + calibration.get("steps", 10)
    return calibration["attempt_wall_s"] * max(1.0, (warmup + steps) / measured)


def collect(args, runner, conditions: dict, calibration: dict, writer, lab_t0: float) -> int:
    """Every block of every condition; each attempt is written (and flushed) as it ends. Returns the attempts run."""
    from mlflow_perfgate.workloads import run_attempt

    cores = sorted(os.sched_getaffinity(0))
    effects = effect_list(args.effects)
    plan = block_plan(args.conditions, args.rounds, args.cycles)
    next_round = Counter()
    seq = 0
    wall = attempt_wall_s(calibration, args.warmup, args.steps)
    for block, (cycle, condition, rounds) in enumerate(plan):
        expected_s = rounds * len(effects) * 2 * wall
        horizon = 4 * expected_s + 300
        schedules, pinned = neighbour_plan(condition, args.seed, block, horizon, cores)
        print(f"condition {condition} (block {block + 1}/{len(plan)}, cycle {cycle}): {rounds} rounds x "
              f"{len(effects)} effects, {len(schedules)} neighbour(s) on cores {pinned}; "
              f"cat /proc/loadavg: {loadavg()}", flush=True)
        failures = 0
        latencies = []
        with Neighbours(schedules, pinned, lease_s=args.timeout + 30, horizon_s=horizon) as hood:
            for sweep in range(rounds):
                order = list(effects)
                random.Random(f"{args.seed}-{block}-{sweep}").shuffle(order)
                for effect in order:
                    round_ = next_round[(condition, effect)]
                    next_round[(condition, effect)] += 1
                    units = calibration["units"][f"{effect:+.2f}"]
                    arms = ("baseline", "candidate") if round_ % 2 == 0 else ("candidate", "baseline")
                    if args.step_mode == "steps":
                        seq, failed = _interleaved_round(args, runner, conditions, units, arms, hood, writer,
                                                         lab_t0, seq=seq, cycle=cycle, block=block,
                                                         condition=condition, effect=effect, round_=round_,
                                                         latencies=latencies)
                        failures += failed
                        continue
                    for position, arm in enumerate(arms):
                        hood.renew()
                        hood.check()
                        load = loadavg()
                        arm_units_ = units[0] if arm == "baseline" else units[1]
                        started = time.monotonic()
                        result = run_attempt(WORKLOAD, {**conditions, "extra_units": arm_units_}, runner=runner,
                                             timeout_s=args.timeout, probe=not args.no_probe, threads=args.threads)
                        ended = time.monotonic()
                        writer.writerow(attempt_row(
                            result, seq=seq, condition=condition, cycle=cycle, block=block, effect=effect, arm=arm,
                            round_=round_, position=position, step_mode="process", units=arm_units_,
                            unit_size=args.unit_size, started_s=started - lab_t0,
                            neighbours_on=hood.busy(started, ended), load=load, wait_bound=args.wait_bound))
                        seq += 1
                        failures += not result.ok
                        if result.ok:
                            latencies.append(result.latency_ms)
                if (sweep + 1) % 5 == 0 or sweep + 1 == rounds:
                    print(f"  {condition}: sweep {sweep + 1}/{rounds}, median latency "
                          f"{statistics.median(latencies):.2f} ms, {failures} failed; "
                          f"loadavg {loadavg()}", flush=True)
        print(f"condition {condition} (block {block + 1}/{len(plan)}) end: cat /proc/loadavg: {loadavg()}\n",
              flush=True)
    return seq


def shared_pair(args, runner, conditions: dict, units_a: int, units_b: int) -> tuple:
    """Both arms in one supervised child, ``units_a`` and ``units_b`` of extra work, their measured
    steps interleaved (``compare --interleave steps``; the child's limit twice one attempt's)."""
    from mlflow_perfgate.workloads import run_interleaved

    return run_interleaved(WORKLOAD, {**conditions, "extra_units": units_a}, {**conditions, "extra_units": units_b},
                           warmup=args.warmup, steps=args.steps, threads=args.threads, timeout_s=2 * args.timeout,
                           probe=not args.no_probe, supervised=True, runner=runner)


def _interleaved_round(args, runner, conditions: dict, units: Sequence[int], arms: Sequence[str], hood, writer,
                       lab_t0: float, *, seq: int, cycle: int, block: int, condition: str, effect: float,
                       round_: int, latencies: list) -> tuple[int, int]:
    """One round of ``--step-mode steps``: both arms in one supervised child (``compare --interleave
    steps``), the leading arm the round's first (ABBA over rounds), their measured steps interleaved
    A B B A inside it. Two rows, one per arm; ``(seq, failures)``."""
    hood.renew()
    hood.check()
    load = loadavg()
    per_arm = {"baseline": units[0], "candidate": units[1]}
    started = time.monotonic()
    pair = shared_pair(args, runner, conditions, per_arm[arms[0]], per_arm[arms[1]])
    ended = time.monotonic()
    failures = 0
    for position, (arm, result) in enumerate(zip(arms, pair)):
        writer.writerow(attempt_row(
            result, seq=seq, condition=condition, cycle=cycle, block=block, effect=effect, arm=arm, round_=round_,
            position=position, step_mode="steps", units=per_arm[arm], unit_size=args.unit_size,
            started_s=started - lab_t0, neighbours_on=hood.busy(started, ended), load=load,
            wait_bound=args.wait_bound))
        seq += 1
        failures += not result.ok
        if result.ok:
            latencies.append(result.latency_ms)
    return seq, failures


# --- HOOK: compare --interleave steps --------------------------------------------------------------
#
# ``compare --interleave steps`` runs both arms' steps interleaved inside one child
# (``mlflow_perfgate.workloads.run_interleaved``). Whether sharing a process biases identical
# arms is for this lab to measure: the hook runs identical arms that way under each condition.

INTERLEAVE_API = "run_interleaved"


def _run_interleaved(execute, conditions: dict, args, runner) -> tuple:
    """Both arms in one supervised child, steps interleaved A B B A ...; ``(baseline, candidate)`` results."""
    baseline, candidate = execute(WORKLOAD, conditions, conditions, warmup=args.warmup, steps=args.steps,
                                  threads=args.threads, timeout_s=args.timeout, probe=not args.no_probe,
                                  supervised=True, runner=runner)
    return baseline, candidate


def interleave_hook(args, runner, conditions: dict, writer, lab_t0: float, seq: int) -> None:
    """Identical arms sharing one process, under each condition, when the harness can run them (HOOK)."""
    import inspect

    import mlflow_perfgate.workloads as workloads

    execute = getattr(workloads, INTERLEAVE_API, None)
    if execute is None:
        print(f"interleave steps: skipped: mlflow_perfgate.workloads does not expose {INTERLEAVE_API} (the harness's "
              "compare --interleave steps has not landed here); the same-process bias of identical arms is not "
              "measured\n")
        return
    try:
        inspect.signature(execute).bind(WORKLOAD, conditions, conditions, warmup=args.warmup, steps=args.steps,
                                        threads=args.threads, timeout_s=args.timeout, probe=True, supervised=True,
                                        runner=runner)
    except TypeError as error:
        print(f"interleave steps: skipped: {INTERLEAVE_API}{inspect.signature(execute)} does not take the call this "
              f"hook assumes ({error}); adapt noise_lab._run_interleaved\n")
        return
    cores = sorted(os.sched_getaffinity(0))
    rounds = args.interleave_rounds
    for block, condition in enumerate(args.conditions):
        horizon = 4 * rounds * 2 * 5.0 + 300
        schedules, pinned = neighbour_plan(condition, args.seed + 1, 1000 + block, horizon, cores)
        print(f"interleave steps, {condition}: {rounds} shared-process attempts of identical arms; "
              f"cat /proc/loadavg: {loadavg()}", flush=True)
        with Neighbours(schedules, pinned, lease_s=args.timeout + 30, horizon_s=horizon) as hood:
            for round_ in range(rounds):
                hood.renew()
                hood.check()
                load = loadavg()
                started = time.monotonic()
                pair = _run_interleaved(execute, {**conditions, "extra_units": 0}, args, runner)
                ended = time.monotonic()
                for position, (arm, result) in enumerate(zip(("baseline", "candidate"), pair)):
                    writer.writerow(attempt_row(
                        result, seq=seq, condition=condition, cycle=0, block=1000 + block, effect=0.0, arm=arm,
                        round_=round_, position=position, step_mode="steps", units=0, unit_size=args.unit_size,
                        started_s=started - lab_t0, neighbours_on=hood.busy(started, ended), load=load,
                        wait_bound=args.wait_bound))
                    seq += 1
        print(f"interleave steps, {condition} end: cat /proc/loadavg: {loadavg()}\n", flush=True)


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


# --- fitting the old simulation ------------------------------------------------------------------


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


# --- main ----------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers separated by commas, got {text!r}")
    return values


def _effects(text: str) -> list[float]:
    values = [float(part) for part in text.split(",") if part.strip()]
    if not values or any(not 0 < value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"effects must be fractions in (0, 1) separated by commas, got {text!r}")
    return values


def _conditions(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(values) - set(CONDITIONS))
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"conditions must be some of {list(CONDITIONS)}, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=80, help="ABBA rounds per condition and effect")
    parser.add_argument("--cycles", type=int, default=2,
                        help="blocks per condition: the conditions run in order, then reversed, ...")
    parser.add_argument("--conditions", type=_conditions, default=list(CONDITIONS), help="quiet,steady,bursty")
    parser.add_argument("--effects", type=_effects, default=list(EFFECT_SIZES),
                        help="true effect sizes, each as a speedup and a slowdown (identical arms always)")
    parser.add_argument("--sizes", type=_sizes, default=list(SIZES), help="window sizes n (rounds)")
    parser.add_argument("--stride", type=int, default=1, help="rounds between the starts of two windows")
    parser.add_argument("--input-shape", default="4,128")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the harness's default)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-attempt timeout, s (compare's default)")
    parser.add_argument("--no-probe", action="store_true", help="skip the correctness probe (compare runs it)")
    parser.add_argument("--unit-size", type=int, default=128, help="matrix size of one unit of extra work")
    parser.add_argument("--probe-units", type=int, default=100, help="units of extra work the calibration measures")
    parser.add_argument("--calibration-rounds", type=int, default=6)
    parser.add_argument("--calibration", metavar="JSON", help="reuse an earlier calibration instead of measuring")
    parser.add_argument("--wait-bound", type=float, default=WAIT_BOUND,
                        help="a step counts as uncontended at this wait share or below")
    parser.add_argument("--interleave", choices=("auto", "off"), default="auto",
                        help="HOOK: identical arms sharing one process, when the harness exposes execute_interleaved")
    parser.add_argument("--interleave-rounds", type=int, default=20)
    parser.add_argument("--step-mode", choices=("process", "steps"), default=None,
                        help="process (default): every attempt its own child; steps: both arms of a round in one "
                             "child, their steps interleaved (compare --interleave steps). With --from-csv: which "
                             "rounds to judge (default: the process rounds, or the steps rounds when only those "
                             "carry effects)")
    parser.add_argument("--seed", type=int, default=20240612)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for judging the windows")
    parser.add_argument("--csv", default=f"noise_lab-{time.strftime('%Y%m%d-%H%M%S')}.csv")
    parser.add_argument("--from-csv", metavar="PATH", help="judge an earlier run's attempts; measure nothing")
    parser.add_argument("--fit-simulation", metavar="FROM_CSV",
                        help="fit benchmarks/decision_quality.py's noise to a CSV's attempts and print it")
    args = parser.parse_args(argv)
    if args.wait_bound != WAIT_BOUND and args.from_csv:
        parser.error("--wait-bound applies when collecting (the CSV keeps each attempt's uncontended latency)")

    if args.fit_simulation:
        return print_fit(args.fit_simulation, args.threads)
    missing = sorted(set(REFERENCES) - set(available_judges()))
    if missing:
        # Checked before any attempt runs: the reference columns are half of the table's point.
        parser.error(f"{' and '.join(missing)} not installed; the lab judges by their rules too: "
                     "pip install -e '.[bench]'")
    if args.from_csv:
        calibration = None
        sidecar = args.from_csv.removesuffix(".gz") + ".calibration.json"  # beside the CSV, gzipped or not
        if os.path.exists(sidecar):
            with open(sidecar) as handle:
                calibration = json.load(handle)
        print(f"noise lab, from {args.from_csv}; cat /proc/loadavg: {loadavg()}")
        return report(read_rows(args.from_csv), args.sizes, args.stride, args.jobs, calibration, args.step_mode)

    if HERE not in sys.path:
        sys.path.insert(0, HERE)  # the children import the wrapper workload from here (runners pass sys.path on)
    # SIGTERM (a timeout) unwinds like Ctrl-C: the neighbours end in their finally, the runner closes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch

    from mlflow_perfgate.workloads import attempt_runner

    lab_t0 = time.monotonic()
    started = time.perf_counter()
    conditions = base_conditions(args)
    threads = args.threads or torch.get_num_threads()
    effects = effect_list(args.effects)
    total = len(args.conditions) * args.rounds * len(effects) * 2
    print(f"noise lab: torch {torch.__version__}, {threads} thread(s), cores {sorted(os.sched_getaffinity(0))}, "
          f"seed {args.seed}; {len(args.conditions)} conditions x {len(effects)} effects x {args.rounds} rounds x 2 "
          f"= {total} attempts; cat /proc/loadavg: {loadavg()}")
    print(f"attempts to {os.path.abspath(args.csv)}", flush=True)
    with attempt_runner("auto", workload=WORKLOAD) as runner:
        if runner.kind == "fork":
            runner.status()  # the server's warm-up is the runner's, once
        if args.calibration:
            with open(args.calibration) as handle:
                calibration = json.load(handle)
            missing = [f"{e:+.2f}" for e in effects if f"{e:+.2f}" not in calibration["units"]]
            if missing:
                raise SystemExit(f"--calibration {args.calibration} has no units for effects {missing}")
            print(f"calibration from {args.calibration} (measured {calibration['at']})")
        else:
            calibration = calibrate(args, runner, conditions)
        with open(args.csv + ".calibration.json", "w") as handle:
            json.dump(calibration, handle, indent=1)
        slow = {"quiet": 1.0, "steady": 2.0, "bursty": 1.5}
        wall = attempt_wall_s(calibration, args.warmup, args.steps)
        estimate = sum(slow[c] for c in args.conditions) * args.rounds * len(effects) * 2 * wall
        print(f"expected collection time about {estimate / 60:.0f} min ({wall:.2f} s an "
              f"attempt when quiet, assumed 2x under steady and 1.5x under bursty neighbours)\n", flush=True)
        with open(args.csv, "w", newline="", buffering=1) as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            seq = collect(args, runner, conditions, calibration, writer, lab_t0)
            if args.interleave == "auto" and args.step_mode != "steps":
                interleave_hook(args, runner, conditions, writer, lab_t0, seq=seq)
    print(f"collected in {(time.perf_counter() - started) / 60:.1f} min; cat /proc/loadavg: {loadavg()}\n", flush=True)
    code = report(read_rows(args.csv), args.sizes, args.stride, args.jobs, calibration, args.step_mode)
    print(f"\nattempts: {os.path.abspath(args.csv)} (recompute: python benchmarks/noise_lab.py --from-csv "
          f"{args.csv}); total {(time.perf_counter() - started) / 60:.1f} min; cat /proc/loadavg: {loadavg()}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
