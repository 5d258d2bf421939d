"""Repeated looks at a growing comparison: the nominal level of each look (alpha spending).

``compare --until-decisive --max-attempts N`` looks at the attempts after every batch and stops
at the first decisive answer. Testing at the full level at every look would inflate the type-I
error (five looks at 5% each reject a true null about 14% of the time for a normal statistic);
an alpha-spending function fixes in advance how much of ``alpha`` each look may use.
"""

from __future__ import annotations

import math

from ._errors import InputError, check_finite, check_unit_interval

__all__ = ["SPENDING_FUNCTIONS", "alpha_spent", "sequential_alpha", "sequential_thresholds", "spent_between"]

#: The spending functions :func:`alpha_spent` knows.
SPENDING_FUNCTIONS = ("obrien_fleming", "pocock")


def alpha_spent(fraction: float, alpha: float = 0.05, *, spending: str = "obrien_fleming") -> float:
    """Cumulative type-I error allowed once ``fraction`` of the attempts have been seen.

    Method: the Lan-DeMets spending functions, with ``t = fraction`` the information fraction
    (attempts so far over the maximum):

    - ``"obrien_fleming"``: ``alpha*(t) = 2 - 2 * Phi(z_{1 - alpha/2} / sqrt(t))``. Spends almost
      nothing early and keeps nearly all of ``alpha`` for the last look, so a comparison run to
      the end loses little power; an early stop needs a very clear difference.
    - ``"pocock"``: ``alpha*(t) = alpha * log(1 + (e - 1) * t)``. Spends evenly; stops early more
      often, at the price of a stricter final look.

    Both are 0 at ``t = 0`` and ``alpha`` at ``t = 1``, and increase in between.

    References:
        K. K. G. Lan and D. L. DeMets, "Discrete sequential boundaries for clinical trials",
        Biometrika 70(3), 659-663, 1983. C. Jennison and B. W. Turnbull, *Group Sequential
        Methods with Applications to Clinical Trials*, Chapman & Hall/CRC, 2000, chapter 7.

    Args:
        fraction: the information fraction, in [0, 1].
        alpha: the overall level, in (0, 1).
        spending: one of :data:`SPENDING_FUNCTIONS`.

    Returns:
        The cumulative level spent up to ``fraction``, in [0, alpha].

    Raises:
        ValueError: an argument is out of range or ``spending`` is unknown.
    """
    if not check_finite(fraction, "fraction") or not 0 <= fraction <= 1:
        raise InputError(f"fraction must be a float in the range [0; 1], got {fraction!r}")
    check_unit_interval(alpha, "alpha", InputError)
    if spending not in SPENDING_FUNCTIONS:
        raise InputError(f"spending must be one of {', '.join(SPENDING_FUNCTIONS)}, got {spending!r}")
    if fraction == 0:
        return 0.0
    if fraction == 1:
        return float(alpha)
    if spending == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * fraction))
    from scipy.stats import norm

    return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(fraction)))


def sequential_alpha(look: int, max_looks: int, alpha: float = 0.05, *, previous: int | None = None,
                     spending: str = "obrien_fleming") -> float:
    """The nominal level to test at one look so that the overall type-I error stays <= ``alpha``.

    Method: the level spent between the previous look and this one,
    ``alpha*(look / max_looks) - alpha*(previous / max_looks)`` (see :func:`alpha_spent`). Used
    as the nominal level of the look, the increments sum to exactly ``alpha`` over all looks,
    so by the union (Bonferroni) bound the chance of a false decision at any look is at most
    ``alpha``. This is conservative: the statistics at successive looks share attempts and are
    positively correlated, and the exact group-sequential boundaries (which need a recursive
    numerical integration, Jennison & Turnbull chapter 7) would allow slightly larger levels.
    With O'Brien-Fleming spending and ``alpha <= 0.05`` the levels increase from look to look.

    ``look`` and ``max_looks`` may count looks (equally spaced) or attempts per arm (the
    information fraction is their ratio); with unequal steps pass ``previous``, the position of
    the previous look on the same scale.

    Args:
        look: this look, an int in [1, max_looks].
        max_looks: the last possible look (or the maximum attempts per arm), a positive int.
        alpha: the overall level, in (0, 1).
        previous: the previous look, an int in [0, look); ``look - 1`` when ``None``.
        spending: ``"obrien_fleming"`` (default) or ``"pocock"``.

    Returns:
        The nominal level for this look, in (0, alpha].

    Raises:
        ValueError: an argument is out of range.
    """
    if type(max_looks) is not int or max_looks < 1:
        raise InputError(f"max_looks must be a positive integer, got {max_looks!r}")
    if type(look) is not int or not 1 <= look <= max_looks:
        raise InputError(f"look must be an integer in the range [1; {max_looks}], got {look!r}")
    if previous is None:
        previous = look - 1
    if type(previous) is not int or not 0 <= previous < look:
        raise InputError(f"previous must be an integer in the range [0; {look - 1}], got {previous!r}")
    spent = alpha_spent(look / max_looks, alpha, spending=spending)
    return spent - alpha_spent(previous / max_looks, alpha, spending=spending)


def sequential_thresholds(look: int, max_looks: int, *, alpha: float = 0.02, confidence: float = 0.90,
                          previous: int | None = None, spending: str = "obrien_fleming",
                          previous_fraction: float | None = None) -> dict:
    """``alpha`` and ``confidence`` to pass to ``evaluate_robust`` at one look.

    The significance level is spent as :func:`sequential_alpha` says; the interval's two tails
    (``(1 - confidence) / 2`` each, the one-sided errors of accepting and of rejecting in the
    non-regression mode) are spent the same way.

    Args:
        look, max_looks, previous, spending: as for :func:`sequential_alpha`.
        alpha: the overall significance level, in (0, 1); ``evaluate_robust``'s default.
        confidence: the overall confidence of the ratio interval, in (0, 1); ``evaluate_robust``'s
            default.

        previous_fraction: the information fraction already spent before this look, in [0, 1)
            and below ``look / max_looks``: where a comparison went on from looks of its own
            (``compare --resume``), what they spent, on any scale. Given, it replaces
            ``previous``: the look's levels are the spending between it and ``look / max_looks``.

    Returns:
        ``{"alpha": ..., "confidence": ...}`` for this look.

    Raises:
        ValueError: an argument is out of range.
    """
    check_unit_interval(confidence, "confidence", InputError)
    if previous_fraction is not None:
        return spent_between(look / max_looks if _look_ok(look, max_looks) else 0.0, previous_fraction,
                             alpha=alpha, confidence=confidence, spending=spending)
    tail = sequential_alpha(look, max_looks, (1 - confidence) / 2, previous=previous, spending=spending)
    return {
        "alpha": sequential_alpha(look, max_looks, alpha, previous=previous, spending=spending),
        "confidence": 1 - 2 * tail,
    }


def _look_ok(look, max_looks) -> bool:
    if type(max_looks) is not int or max_looks < 1:
        raise InputError(f"max_looks must be a positive integer, got {max_looks!r}")
    if type(look) is not int or not 1 <= look <= max_looks:
        raise InputError(f"look must be an integer in the range [1; {max_looks}], got {look!r}")
    return True


def spent_between(fraction: float, previous_fraction: float, *, alpha: float = 0.02, confidence: float = 0.90,
                  spending: str = "obrien_fleming") -> dict:
    """``alpha`` and ``confidence`` of a look at information ``fraction`` after ``previous_fraction`` was spent.

    The levels are the spending function's increments between the two fractions (for the
    significance level and for each tail of the interval), so that the looks of one comparison,
    wherever they fall and however often it was resumed, spend at most ``alpha`` together.
    The information fraction is the attempts seen over the most the comparison may take.

    Raises:
        ValueError: a fraction out of [0, 1], or ``fraction`` not above ``previous_fraction``
            (a look with nothing left to spend cannot decide).
    """
    for name, value in (("fraction", fraction), ("previous_fraction", previous_fraction)):
        if not check_finite(value, name) or not 0 <= value <= 1:
            raise InputError(f"{name} must be a float in the range [0; 1], got {value!r}")
    if not fraction > previous_fraction:
        raise InputError(f"a look at information fraction {fraction:.4g} has nothing to spend: "
                         f"{previous_fraction:.4g} was spent already")
    tail = (1 - confidence) / 2
    tail_spent = (alpha_spent(fraction, tail, spending=spending)
                  - alpha_spent(previous_fraction, tail, spending=spending))
    return {"alpha": alpha_spent(fraction, alpha, spending=spending)
            - alpha_spent(previous_fraction, alpha, spending=spending),
            "confidence": 1 - 2 * tail_spent}
