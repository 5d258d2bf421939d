"""The lab's true effects: extra work per step that makes candidate/baseline ``1 + effect``, and its
calibration on a quiet moment.

A slowdown ``s`` adds ``s`` x the step to the candidate (candidate/baseline = 1 + s); a speedup
``s`` adds ``s / (1 - s)`` x the step to the baseline (candidate/baseline = 1 - s). The
calibration measures the plain step and the cost of one unit of extra work (the median over
rounds of the within-round latency difference over the units), and from them the units each
effect needs.
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

from .attempts import one_attempt, shared_pair
from .neighbours import loadavg

#: The true effect sizes, each collected as a speedup and as a slowdown (and identical arms).
EFFECT_SIZES = (0.05, 0.10, 0.20)
#: Above this 1-minute load average the calibration warns that the machine is not quiet.
CALIBRATION_LOAD = 0.5


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


def effect_list(sizes: Sequence[float]) -> list[float]:
    """Identical arms, then each size as a speedup and as a slowdown, as candidate/baseline - 1."""
    return [0.0] + [-s for s in sizes] + list(sizes)


def calibrate(args, runner, conditions: dict) -> dict:
    """The units of extra work each effect needs, measured now (see the module docstring)."""
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
            pairs = [(units, one_attempt(args, runner, conditions, units)) for units in order]
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
