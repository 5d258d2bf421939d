"""Collecting: the CSV's schema and rows, the blocks of ABBA rounds under each condition, and the
step-interleaved rounds (one child a round, the product's ``run_interleaved``).

Every attempt is a CSV row as soon as it ends, so ``--from-csv`` recomputes everything and a
stopped run keeps what it measured.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import random
import statistics
import time
from collections import Counter
from typing import Iterable, Sequence

from mlflow_perfgate.workloads._contention import CONTENTION_WAIT_SHARE_BOUND
from mlflow_perfgate.workloads._contention import uncontended_latency as _quiet_steps_median

from .attempts import one_attempt, shared_pair
from .effects import effect_list
from .neighbours import Neighbours, loadavg, neighbour_plan

#: A step counts as uncontended when its run-queue wait share is at most this (the product's bound).
WAIT_BOUND = CONTENTION_WAIT_SHARE_BOUND
#: The CSV's columns, one row per attempt (:func:`attempt_row`).

FIELDS = ("seq", "condition", "cycle", "block", "effect", "arm", "round", "position", "step_mode",
          "extra_units", "unit_size", "started_s", "wall_s", "ok", "failure", "latency_ms", "quality",
          "uncontended_latency_ms", "wait_share", "step_times_ms", "step_wait_share", "torch_threads",
          "runner", "neighbours_on", "loadavg_1m", "loadavg")


def uncontended_latency(step_times_ms: Sequence[float] | None, step_wait_share: Sequence[float | None] | None,
                        bound: float = WAIT_BOUND) -> float | None:
    """The median of the steps whose wait share is at most ``bound``; ``None`` if fewer than half are kept.

    The product's reading (``workloads._contention.uncontended_latency``, what ``compare
    --latency uncontended`` judges), at the lab's ``--wait-bound``: a step without a wait share is
    not kept. Only the figure is returned (not the count of quiet steps), and an attempt without
    contention figures at all (``step_wait_share`` ``None``: no sampler measured) has none, where
    the product's function asks for a share per step (and raises when the lengths differ).
    """
    if not step_times_ms or step_wait_share is None:
        return None
    return _quiet_steps_median(step_times_ms, step_wait_share, bound)[0]


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


def _json_or_none(text: str):
    return json.loads(text) if text not in ("", None) else None


def _float_or_none(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def read_rows(path: str) -> list[dict]:
    """The attempt rows of a CSV the lab wrote (or its gzipped copy, ``.csv.gz``), typed."""
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
                        result = one_attempt(args, runner, conditions, arm_units_)
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


def interleave_hook(args, runner, conditions: dict, writer, lab_t0: float, seq: int) -> None:
    """Identical arms sharing one process (``run_interleaved``, as ``compare --interleave steps`` runs
    them), ``--interleave-rounds`` of them under each condition, beside a run of separate processes:
    whether sharing a process biases identical arms is for the lab to measure (``report_interleaved``)."""
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
                pair = shared_pair(args, runner, conditions, 0, 0)
                ended = time.monotonic()
                for position, (arm, result) in enumerate(zip(("baseline", "candidate"), pair)):
                    writer.writerow(attempt_row(
                        result, seq=seq, condition=condition, cycle=0, block=1000 + block, effect=0.0, arm=arm,
                        round_=round_, position=position, step_mode="steps", units=0, unit_size=args.unit_size,
                        started_s=started - lab_t0, neighbours_on=hood.busy(started, ended), load=load,
                        wait_bound=args.wait_bound))
                    seq += 1
        print(f"interleave steps, {condition} end: cat /proc/loadavg: {loadavg()}\n", flush=True)
