"""Calibration: what identical-arm rounds say about the effects the paired method can resolve. Pure.

``mlflow-perfgate calibrate`` runs rounds of one workload whose two arms have the same
conditions, their measured steps interleaved in one child as ``compare --interleave steps``
runs them, so whatever differs between the arms of a round is noise. For each figure an attempt
can be judged on (:data:`~._settings.LATENCY_KEYS`: the median step ``latency_ms``, the 10th
percentile ``step_p10_ms``, the fastest step ``fastest_step_ms``, the quiet steps' median
``uncontended_latency_ms``) the within-round log ratio ``d_r = log(candidate_r) -
log(baseline_r)`` is what the paired method's test sees (``_paired.complete_rounds``,
``_stats.log_ratios``), and its spread is the noise that test must beat.

The spread is the paired method's own: ``1.4826 * MAD`` of the ``d_r`` (the sample standard
deviation when the MAD is 0; ``_stats.robust_sigma``), the figure its rerun advice
(``_stats.recommended_pairs``) plans with, so ``compare --rounds auto`` and a rerun's "about N
attempts per arm" agree; the sample standard deviation is reported beside it.

The planning formula is the paired method's rerun advice's with Student's t in place of the
normal quantiles: a one-sided one-sample test on the log ratios, divided by ``3 / pi``, the
asymptotic relative efficiency of the Wilcoxon signed-rank test against the t-test for normal
data (Lehmann, *Nonparametrics*, 1975, section 3.3). With ``z(n) = t_{1-level, n-1} +
t_{power, n-1}`` (``scipy.stats.t``):

- the smallest log shift detectable at ``n`` rounds: ``delta = z(n) * s / sqrt(n * 3/pi)``, none
  below the paired method's floor (:func:`paired_floor`: the fewest complete rounds with which it
  can accept at all, and ``min_valid_runs``);
- the rounds needed for a shift ``delta``, its inverse: the least ``n`` at or above the floor with
  ``n >= z(n)^2 * s^2 / delta^2 / (3/pi)``.

Why t: simulated with normal noise (4,000 samples each, ``scipy.stats.wilcoxon``), the exact
one-sided signed-rank test at ``alpha = 0.02`` reached power 0.69 at 10 rounds and 0.75 at 20
where the normal quantiles promised 0.8; with t it reached 0.80 and 0.81 (0.79 at 8, 0.68 at 6,
where the exact test's few attainable p-values bite). ``tests/test_calibrate.py`` checks it.

Which test (:class:`PowerTest`, from a :class:`~._policy.Policy`): in ``improvement`` mode the
one-sided signed-rank test at ``alpha`` that the candidate is faster, against no change; an
effect ``e`` is a speedup, ``delta = -log(1 - e)``. (An accept also needs the Hodges-Lehmann
estimate to show at least ``min_improvement``: a true speedup of exactly ``min_improvement``
clears that bar about half the time, whatever the rounds.) In ``non_regression`` mode the
paired method's signed-rank interval at ``confidence`` must end below ``1 + margin``, a
one-sided test at ``(1 - confidence) / 2``, planned for a candidate that is truly no slower;
an effect ``e`` is the margin, ``delta = log(1 + e)``. Near the floor the exact test is weaker
than the approximation says (at 6 rounds and ``alpha = 0.02`` it accepts only when all six
ratios favour the candidate): these are planning figures, not promises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from ._errors import InputError, check_finite, check_unit_interval
from ._policy import Policy
from ._settings import LATENCY_KEYS
from ._stats import _MAX_RECOMMENDED, _MWU_EFFICIENCY, _norm, log_ratios, robust_sigma, step_figures

__all__ = [
    "CALIBRATION_LATENCIES",
    "DEFAULT_HORIZONS",
    "MAX_AUTO_ROUNDS",
    "MAX_ROUNDS",
    "PowerTest",
    "Spread",
    "age_text",
    "arm_figures",
    "auto_rounds",
    "detectable_effect",
    "paired_floor",
    "power_test",
    "rounds_needed",
    "spreads",
]

#: The latency options a calibration measures, in the order its table shows them.
CALIBRATION_LATENCIES = ("raw", "p10", "fastest", "uncontended")
#: The numbers of rounds at which the table shows the smallest detectable effect.
DEFAULT_HORIZONS = (5, 10, 20, 40)
#: The most rounds ``compare --rounds auto`` plans (a larger need is capped, and said).
MAX_AUTO_ROUNDS = 100
#: The most rounds :func:`rounds_needed` answers (the paired method's advice caps there too).
MAX_ROUNDS = _MAX_RECOMMENDED


def arm_figures(latency_ms: float | None, step_times_ms: Sequence[float],
                uncontended_latency_ms: float | None = None) -> dict[str, float | None]:
    """An arm's figures in one round, by record key, as an attempt run gets them from its steps.

    ``latency_ms`` the median step (the attempt's), ``step_p10_ms`` the Harrell-Davis 10th
    percentile of the steps and ``fastest_step_ms`` the fastest step (``_stats.step_figures``),
    ``uncontended_latency_ms`` the quiet steps' median where the attempt has one (else ``None``).

    Raises:
        InputError: no step times, or a step time or figure that is not a finite number > 0.
    """
    steps = step_figures(step_times_ms)  # refuses an empty or bad list
    figures = {LATENCY_KEYS["raw"]: latency_ms, LATENCY_KEYS["p10"]: steps[LATENCY_KEYS["p10"]],
               LATENCY_KEYS["fastest"]: steps[LATENCY_KEYS["fastest"]], LATENCY_KEYS["uncontended"]: uncontended_latency_ms}
    for key, value in figures.items():
        if value is not None and (isinstance(value, bool) or not check_finite(value, key) or value <= 0):
            raise InputError(f"{key} must be a finite number > 0, got {value!r}")
    return {key: None if value is None else float(value) for key, value in figures.items()}


@dataclass(frozen=True)
class Spread:
    """One figure's within-round log ratios over a calibration's complete rounds, and their spread.

    Attributes:
        latency: the latency option (``raw``, ``p10``, ``fastest``, ``uncontended``).
        log_ratios: ``log(candidate) - log(baseline)`` of each round holding the figure in both arms.
    """

    latency: str
    log_ratios: tuple[float, ...]

    @property
    def key(self) -> str:
        """The attempt record's key of the figure (``step_p10_ms``, ...)."""
        return LATENCY_KEYS[self.latency]

    @property
    def rounds(self) -> int:
        return len(self.log_ratios)

    @property
    def spread(self) -> float | None:
        """``1.4826 * MAD`` of the log ratios (their sample sd when the MAD is 0); ``None`` below 2 rounds."""
        return None if self.rounds < 2 else float(robust_sigma(np.asarray(self.log_ratios)))

    @property
    def sd(self) -> float | None:
        """The sample standard deviation of the log ratios; ``None`` below 2 rounds."""
        return None if self.rounds < 2 else float(np.std(self.log_ratios, ddof=1))

    def to_dict(self) -> dict:
        return {"latency": self.latency, "key": self.key, "rounds": self.rounds, "spread": self.spread,
                "sd": self.sd, "log_ratios": list(self.log_ratios)}


def spreads(rounds: Iterable[Mapping[str, Mapping[str, float | None]]]) -> dict[str, Spread]:
    """Each figure's :class:`Spread` over the rounds that hold it in both arms.

    Args:
        rounds: one mapping per complete round, ``{"baseline": figures, "candidate": figures}``,
            each ``figures`` keyed as :func:`arm_figures` returns them; a figure that is
            ``None`` (or absent) in either arm leaves the round out for that figure.

    Returns:
        ``{latency option: Spread}`` for every option of :data:`CALIBRATION_LATENCIES`.
    """
    rounds = list(rounds)
    found = {}
    for latency in CALIBRATION_LATENCIES:
        key = LATENCY_KEYS[latency]
        pairs = [(r["baseline"].get(key), r["candidate"].get(key)) for r in rounds]
        pairs = [(b, c) for b, c in pairs if b is not None and c is not None]
        d = log_ratios([b for b, _ in pairs], [c for _, c in pairs]) if pairs else np.asarray([])
        found[latency] = Spread(latency, tuple(float(value) for value in d))
    return found


def paired_floor(policy: Policy) -> int:
    """The fewest complete rounds with which the paired method can accept under ``policy``.

    The larger of ``min_valid_runs`` and the paired method's floor at the policy's levels
    (``_statistical.statistical_floor``: in improvement mode the signed-rank test's ``2^-n <
    alpha``, 6 rounds at 0.02; in non_regression mode the rounds from which its interval at
    ``confidence`` has an upper bound, 5 at 90%).
    """
    from ._statistical import statistical_floor

    paired = policy if policy.method == "paired" else policy.replace(method="paired")
    n = 1
    while n < MAX_ROUNDS and statistical_floor(paired, n) is not None:
        n += 1
    return max(n, paired.min_valid_runs)


@dataclass(frozen=True)
class PowerTest:
    """The test a calibration's figures are for: the paired method's, in a mode, at a level and power.

    Attributes:
        mode: ``improvement`` (is the candidate faster?) or ``non_regression`` (is it no slower than
            the margin?).
        level: the one-sided level: ``alpha``, or ``(1 - confidence) / 2`` in non_regression mode.
        power: the chance wanted to settle it, in (0, 1).
        floor: :func:`paired_floor`.
        alpha, confidence: the policy's.
    """

    mode: str
    level: float
    power: float
    floor: int
    alpha: float
    confidence: float

    def z(self, rounds: int) -> float:
        """``t_{1-level, rounds-1} + t_{power, rounds-1}`` (``scipy.stats.t``); the normal quantiles at 1 round."""
        if rounds < 2:
            return float(_norm().isf(self.level) + _norm().ppf(self.power))
        from scipy.stats import t

        return float(t.isf(self.level, rounds - 1) + t.ppf(self.power, rounds - 1))

    def shift(self, effect: float) -> float:
        """The log shift of an effect: ``-log(1 - e)`` for a speedup, ``log(1 + e)`` for a margin."""
        return -math.log1p(-effect) if self.mode == "improvement" else math.log1p(effect)

    def effect(self, shift: float) -> float:
        """The effect of a log shift (the inverse of :meth:`shift`)."""
        return -math.expm1(-shift) if self.mode == "improvement" else math.expm1(shift)

    @property
    def effect_name(self) -> str:
        return "speedup" if self.mode == "improvement" else "margin"

    def describe(self) -> str:
        """The test in words, for the output and the calibration run."""
        if self.mode == "improvement":
            test = (f"the paired method's one-sided Wilcoxon signed-rank test (improvement mode: is the candidate "
                    f"faster?) at alpha = {self.alpha:g}")
        else:
            test = (f"the paired method's {self.confidence:.0%} signed-rank interval ending below 1 + margin "
                    f"(non_regression mode, a one-sided test at {self.level:g}) for a candidate truly no slower")
        return (f"{test}, power {self.power:g}, on the within-round log ratios (t approximation with the "
                f"signed-rank test's efficiency 3/pi); it cannot accept below {self.floor} rounds")

    def to_dict(self) -> dict:
        return {"mode": self.mode, "level": self.level, "power": self.power, "floor": self.floor,
                "alpha": self.alpha, "confidence": self.confidence, "test": self.describe()}


def power_test(policy: Policy, power: float = 0.8) -> PowerTest:
    """The paired method's test under ``policy`` (its mode, alpha, confidence, min_valid_runs), at ``power``.

    Raises:
        InputError: ``power`` outside (0, 1).
    """
    check_unit_interval(power, "power", InputError)
    level = policy.alpha if policy.mode == "improvement" else (1 - policy.confidence) / 2
    return PowerTest(policy.mode, float(level), float(power), paired_floor(policy), float(policy.alpha),
                     float(policy.confidence))


def _check_spread(spread: float) -> None:
    if isinstance(spread, bool) or not check_finite(spread, "spread") or spread < 0:
        raise InputError(f"spread must be a finite number >= 0, got {spread!r}")


def detectable_effect(spread: float, rounds: int, test: PowerTest) -> float | None:
    """The smallest effect the test detects with its power at ``rounds`` complete rounds, at this spread.

    ``delta = z(rounds) * spread / sqrt(rounds * 3/pi)`` (:meth:`PowerTest.z`) as an effect
    (:meth:`PowerTest.effect`: a speedup ``1 - exp(-delta)``, a margin ``exp(delta) - 1``); 0 at
    no spread.

    Returns:
        The effect, a fraction; ``None`` below the test's floor (it cannot accept there).

    Raises:
        InputError: a negative or non-finite spread, or ``rounds`` not a positive integer.
    """
    _check_spread(spread)
    if type(rounds) is not int or rounds < 1:
        raise InputError(f"rounds must be a positive integer, got {rounds!r}")
    if rounds < test.floor:
        return None
    return test.effect(test.z(rounds) * spread / math.sqrt(rounds * _MWU_EFFICIENCY))


def rounds_needed(spread: float, effect: float, test: PowerTest) -> int:
    """Complete rounds for the test to detect ``effect`` with its power, at this spread.

    The least ``n >= test.floor`` with ``n >= z(n)^2 * spread^2 / delta^2 / (3/pi)`` (``delta =
    test.shift(effect)``, :meth:`PowerTest.z`; a hair over, ``1e-9``, counts as met), so that
    ``rounds_needed(detectable_effect(s, n, test), test) == n``; at most :data:`MAX_ROUNDS`
    (which then means "that many or more").

    Raises:
        InputError: a negative or non-finite spread, or ``effect`` outside (0, 1).
    """
    _check_spread(spread)
    check_unit_interval(effect, "effect", InputError)
    scale = (spread / test.shift(effect)) ** 2 / _MWU_EFFICIENCY

    def enough(n: int) -> bool:
        return n >= test.z(n) ** 2 * scale * (1 - 1e-9)

    # the normal quantiles are below t's: their answer is where to start looking
    start = (float(_norm().isf(test.level) + _norm().ppf(test.power))) ** 2 * scale
    if not math.isfinite(start) or start >= MAX_ROUNDS:
        return MAX_ROUNDS
    n = max(test.floor, math.ceil(start * (1 - 1e-9)))
    while n < MAX_ROUNDS and not enough(n):
        n += 1
    return n


def auto_rounds(spread: float, policy: Policy, *, power: float = 0.8,
                maximum: int = MAX_AUTO_ROUNDS) -> dict:
    """The rounds ``compare --rounds auto`` runs: those the policy's smallest effect needs at this spread.

    The effect is ``min_improvement`` in improvement mode, ``margin`` in non_regression mode
    (:class:`PowerTest`); the rounds are :func:`rounds_needed`'s, at most ``maximum``.

    Returns:
        ``{"rounds", "needed", "capped", "effect", "effect_name", "detectable_at_rounds",
        "test": PowerTest.to_dict()}``: ``needed`` is the uncapped figure, ``capped`` whether
        ``rounds`` is below it, ``detectable_at_rounds`` the smallest effect those rounds detect.

    Raises:
        InputError: the policy's effect is 0 (any effect at all: no number of rounds detects
            it), or ``maximum`` is not a positive integer.
    """
    if type(maximum) is not int or maximum < 1:
        raise InputError(f"maximum must be a positive integer, got {maximum!r}")
    test = power_test(policy, power)
    effect, name = ((policy.min_improvement, "min_improvement") if policy.mode == "improvement"
                    else (policy.margin, "margin"))
    if not effect > 0:
        raise InputError(f"{name} is {effect:g}: no number of rounds detects an effect of 0; give {name} > 0 "
                         "(--min-improvement or --margin) or the rounds yourself (--rounds N)")
    needed = rounds_needed(spread, effect, test)
    rounds = max(min(needed, maximum), test.floor)
    return {"rounds": rounds, "needed": needed, "capped": rounds < needed, "effect": float(effect),
            "effect_name": name, "detectable_at_rounds": detectable_effect(spread, rounds, test),
            "test": test.to_dict()}


def age_text(seconds: float) -> str:
    """A duration in words for a message: ``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
