"""Pure statistics: no I/O, no records, no verdicts (as asv keeps ``_stats.py``).

Latency statistics work on log latencies: a change that makes a workload a factor faster is a
shift there, whatever the shape of the noise. Every function states its method and its source.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._errors import InputError, check_finite, check_unit_interval

__all__ = [
    "LOG_RATIO_DECIMALS",
    "MAD_TO_SIGMA",
    "SMALL_SAMPLE_MIN_ROUNDS",
    "exceedance_p_value",
    "flag_contention",
    "hodges_lehmann_paired_ratio",
    "hodges_lehmann_ratio",
    "interval_rank",
    "log_latencies",
    "log_ratios",
    "log_shift",
    "min_attempts_mann_whitney",
    "min_pairs_signed_rank",
    "min_rounds_to_accept",
    "nearest_rank",
    "paired_log_shift",
    "preload_step_quantile",
    "recommended_attempts",
    "recommended_pairs",
    "robust_sigma",
    "settling_pairs",
    "signed_rank_interval_rank",
    "signed_rank_null_cdf",
    "signed_rank_test",
    "small_sample_test",
    "step_figures",
    "step_quantile",
    "u_null_cdf",
    "walsh_averages",
]

#: ``1.4826 * MAD`` estimates the standard deviation of a normal sample (1 / Phi^-1(3/4)).
MAD_TO_SIGMA = 1.482602218505602
#: The Mann-Whitney test's asymptotic relative efficiency against the t-test for normal data.
_MWU_EFFICIENCY = 3 / math.pi
#: Above this many attempts per arm the interval uses the normal approximation of U's
#: distribution; at or below, its exact distribution (a cached table of at most 51 x 51 cells).
_EXACT_U_MAX = 50
#: The probability with which the rounds :func:`settling_pairs` plans settle a change that does nothing.
SETTLE_POWER = 0.9
#: The most attempts per arm :func:`recommended_attempts` returns.
_MAX_RECOMMENDED = 1000
#: Up to this many pairs the signed-rank interval uses the exact null distribution of the
#: signed-rank statistic (a cached table of n(n+1)/2 + 1 cells); above, its normal
#: approximation. ``scipy.stats.wilcoxon`` switches its p-value at the same size.
_EXACT_W_MAX = 50
#: Within-pair log ratios are rounded to this many decimals (a ratio to about 1e-12), so that
#: pairs with the same ratio tie exactly whatever the unit (log 190 - log 200 and log 95 -
#: log 100 differ in their last bits) and a pair of equal latencies is a zero.
LOG_RATIO_DECIMALS = 12
#: The fewest complete rounds on which :func:`small_sample_test` may stand in for the
#: signed-rank test below that test's floor: the size from which the signed-rank interval
#: exists at 90% (:func:`signed_rank_interval_rank`), so that an accept still has an estimate
#: and an interval beside its p-value; below it a t-test's p would rest on a spread of four or
#: fewer ratios.
SMALL_SAMPLE_MIN_ROUNDS = 5


def normal_cdf(x: float) -> float:
    """The standard normal distribution function (``math.erfc``: no scipy)."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _norm():
    """``scipy.stats.norm``, imported on first use: listing the methods (``--help``) needs no scipy."""
    from scipy.stats import norm

    return norm


def log_latencies(values, field: str) -> np.ndarray:
    """Logs of a list of latencies, each a finite number > 0."""
    if values is None or isinstance(values, (str, bytes, dict)):
        raise InputError(f"{field} must be a list of latencies, got {type(values).__name__}")
    values = list(values)
    for value in values:
        if isinstance(value, bool) or not check_finite(value, field) or value <= 0:
            raise InputError(f"{field} must hold finite numbers > 0, got {value!r}")
    return np.log(np.asarray(values, dtype=float))


def robust_sigma(logs: np.ndarray) -> float:
    """``1.4826 * MAD`` of log latencies; the sample standard deviation when the MAD is 0."""
    if logs.size < 2:
        return 0.0
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(logs - np.median(logs))))
    if sigma == 0:
        sigma = float(np.std(logs, ddof=1))
    return sigma


@functools.lru_cache(maxsize=256)
def u_null_cdf(m: int, n: int) -> np.ndarray:
    """Exact null CDF of the Mann-Whitney U statistic for arms of ``m`` and ``n`` (no ties).

    Recurrence on the largest of the ``m + n`` values: it belongs to the first arm with
    probability ``m / (m + n)`` and then beats all ``n`` values of the second, so
    ``P_{m,n}(u) = m/(m+n) P_{m-1,n}(u-n) + n/(m+n) P_{m,n-1}(u)`` (Mann and Whitney 1947).
    """
    m, n = min(m, n), max(m, n)
    previous = [np.ones(1)] * (n + 1)  # row i = 0: U = 0 with certainty
    for i in range(1, m + 1):
        row = [np.ones(1)]
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            pmf[j:j + previous[j].size] += i / (i + j) * previous[j]
            pmf[:row[j - 1].size] += j / (i + j) * row[j - 1]
            row.append(pmf)
        previous = row
    cdf = np.cumsum(previous[n])
    cdf.setflags(write=False)
    return cdf


def interval_rank(m: int, n: int, confidence: float) -> int:
    """The rank ``k`` (1-based) of the pairwise differences bounding the interval.

    ``k`` is the largest integer with ``P(U <= k - 1) <= (1 - confidence) / 2`` under the null;
    the interval is ``[D_(k), D_(mn + 1 - k)]`` (Hollander and Wolfe, section 4.3). 0 means the
    sample is too small for a bound at this confidence.
    """
    tail = (1 - confidence) / 2
    if max(m, n) <= _EXACT_U_MAX:
        cdf = u_null_cdf(m, n)
        return int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    spread = math.sqrt(m * n * (m + n + 1) / 12)
    return max(0, math.floor(m * n / 2 + 0.5 - _norm().isf(tail) * spread))


def log_shift(base_logs: np.ndarray, cand_logs: np.ndarray, confidence: float | None):
    """Hodges-Lehmann shift of ``cand_logs`` over ``base_logs`` and its interval (logs; None: unbounded)."""
    diffs = np.subtract.outer(cand_logs, base_logs).ravel()
    rank = interval_rank(base_logs.size, cand_logs.size, confidence) if confidence is not None else 0
    return _median_and_bounds(diffs, rank)


def _median_and_bounds(values: np.ndarray, rank: int) -> tuple[float, float | None, float | None]:
    """The median of ``values`` and its ``rank``-th smallest and largest (the interval; None when ``rank < 1``).

    One partial sort (``np.partition``) finds all four order statistics.
    """
    size = values.size
    kth = {(size - 1) // 2, size // 2}
    if rank >= 1:
        kth |= {rank - 1, size - rank}
    ordered = np.partition(values, sorted(kth))
    centre = float((ordered[(size - 1) // 2] + ordered[size // 2]) / 2)
    if rank < 1:
        return centre, None, None
    return centre, float(ordered[rank - 1]), float(ordered[size - rank])


def exceedance_p_value(m: int, rank: int, n: int, exceeding: int) -> float:
    """P(J >= exceeding) for J, the candidates above the baseline's ``rank``-th smallest, under the null.

    With both arms from one continuous distribution every ordering of the pooled labels is
    equally likely, so ``P(J = j) = C(rank - 1 + n - j, n - j) * C(m - rank + j, j) / C(m + n, n)``
    (the number of exceedances: E. J. Gumbel and H. von Schelling, "The distribution of the number
    of exceedances", Ann. Math. Statist. 21(2), 247-262, 1950).
    """
    if exceeding <= 0:
        return 1.0
    favourable = sum(math.comb(rank - 1 + n - j, n - j) * math.comb(m - rank + j, j)
                     for j in range(exceeding, n + 1))
    return favourable / math.comb(m + n, n)


def _exp(value):
    return None if value is None else math.exp(value)




def hodges_lehmann_ratio(baseline_latencies, candidate_latencies, *, confidence: float = 0.95) -> dict:
    """Ratio of typical latencies, candidate over baseline, with a distribution-free interval.

    Method: Hodges-Lehmann on log latencies. With ``D`` the ``m * n`` pairwise differences
    ``log(candidate_j) - log(baseline_i)``, the estimate of the log ratio is ``median(D)``; the
    interval is ``[D_(k), D_(mn+1-k)]`` where ``k`` is the largest integer with
    ``P(U <= k - 1) <= (1 - confidence) / 2`` for the Mann-Whitney statistic ``U`` under the
    null: U's exact distribution up to 50 attempts per arm, its normal approximation with a
    continuity correction above. Exponentiated, these bound the ratio candidate / baseline.
    When the arms differ by a factor (a shift of log latency) the interval covers it with
    probability at least ``confidence`` whatever the shape of the noise, and the estimate is
    the ratio of medians; it inverts the Mann-Whitney test, so a two-sided test at level
    ``1 - confidence`` rejects "no change" exactly when the interval excludes 1 (for untied
    samples). Chosen over a bootstrap because it is deterministic (no seed to record), exact in
    small samples, and a slow outlier moves it by at most one rank. It holds the ``m * n``
    differences in memory (8 MB at 1,000 attempts per arm).

    References:
        J. L. Hodges and E. L. Lehmann, "Estimates of location based on rank tests", Ann. Math.
        Statist. 34(2), 598-611, 1963. M. Hollander and D. A. Wolfe, *Nonparametric Statistical
        Methods*, 2nd ed., Wiley, 1999, section 4.3. H. B. Mann and D. R. Whitney, Ann. Math.
        Statist. 18(1), 50-60, 1947.

    Args:
        baseline_latencies, candidate_latencies: latencies (finite, > 0), at least one each.
        confidence: the interval's confidence, in (0, 1).

    Returns:
        ``ratio_estimate``, ``ratio_ci_low``, ``ratio_ci_high`` and ``confidence``. A bound is
        ``None`` when the arms are too small for it at this confidence (the interval is
        unbounded on that side; with the exact distribution two arms need ``m + n`` choose
        ``m`` >= ``2 / (1 - confidence)`` orderings, 3 + 4 attempts at 95%).

    Raises:
        InputError: an arm is empty, a latency is not a finite number > 0, or ``confidence`` is
            out of range.
    """
    check_unit_interval(confidence, "confidence", InputError)
    base = log_latencies(baseline_latencies, "baseline_latencies")
    cand = log_latencies(candidate_latencies, "candidate_latencies")
    if base.size == 0 or cand.size == 0:
        raise InputError(
            f"baseline_latencies and candidate_latencies must each hold at least one latency, got "
            f"{base.size} and {cand.size}"
        )
    shift, low, high = log_shift(base, cand, confidence)
    return {"ratio_estimate": math.exp(shift), "ratio_ci_low": _exp(low), "ratio_ci_high": _exp(high),
            "confidence": confidence}


def recommended_attempts(baseline_latencies, candidate_latencies, *, margin: float, alpha: float = 0.05,
                         power: float = 0.8) -> int | None:
    """Attempts per arm that would likely settle where the ratio stands against ``1 + margin``.

    Method: the normal approximation for a one-sided two-sample test on log latencies with
    equal arms, ``n = (z_{1-alpha} + z_{power})^2 * (s_b^2 + s_c^2) / delta^2``, divided by
    ``3 / pi``, the asymptotic relative efficiency of the Mann-Whitney test against the t-test
    for normal data (Lehmann, *Nonparametrics*, 1975, section 2.4). ``s_b`` and ``s_c`` are the
    arms' spreads of log latency, ``1.4826 * MAD`` (the sample standard deviation when the MAD is
    0), so a few contended attempts do not inflate them; ``delta = |log(r) - log(1 + margin)|``
    is the distance of the Hodges-Lehmann log ratio ``r`` from the boundary. It assumes the
    observed ratio and spreads are the true ones, so it is a planning figure, not a promise.

    Args:
        baseline_latencies, candidate_latencies: latencies (finite, > 0).
        margin: the boundary as a signed relative change of the ratio candidate / baseline, > -1:
            ``0.05`` to settle "at most 5% slower" (non-regression), ``-0.05`` to settle "at
            least 5% faster", ``0`` to settle "faster at all".
        alpha: the one-sided level of the test that will decide, in (0, 1).
        power: the chance to settle it wanted, in (0, 1).

    Returns:
        The attempts per arm, between 2 and 1000 (1000 also when the estimate sits on the
        boundary); ``None`` when not estimable: fewer than 2 latencies in an arm, or no spread
        and the estimate exactly on the boundary.

    Raises:
        InputError: a latency is not a finite number > 0, or an argument is out of range.
    """
    if not check_finite(margin, "margin") or margin <= -1:
        raise InputError(f"margin must be a finite number > -1, got {margin!r}")
    check_unit_interval(alpha, "alpha", InputError)
    check_unit_interval(power, "power", InputError)
    base = log_latencies(baseline_latencies, "baseline_latencies")
    cand = log_latencies(candidate_latencies, "candidate_latencies")
    if min(base.size, cand.size) < 2:
        return None
    shift, _, _ = log_shift(base, cand, None)
    delta = abs(float(shift) - math.log1p(margin))
    return _attempts_for(float(robust_sigma(base)) ** 2 + float(robust_sigma(cand)) ** 2, delta, alpha, power)


def settling_pairs(d, *, bound: float, alpha: float | None, power: float = SETTLE_POWER) -> int | None:
    """Rounds (pairs) that settle a change that does nothing against the ratio ``bound``, at the noise of ``d``.

    A plan from the noise alone, never from where the estimate happens to stand: ``n = (z_{1-alpha}
    + z_{power})^2 * s_d^2 / log(bound)^2``, divided by the signed-rank test's efficiency ``3 / pi``,
    where ``s_d`` is the spread of the rounds' log ratios (``1.4826 * MAD``; the sample standard
    deviation when the MAD is 0). So the same machine and workload get about the same figure run
    after run, however close to the bound one run's estimate came; a change as large as the bound
    itself cannot be settled by any number of rounds, and no plan promises that.

    Args:
        d: the rounds' log ratios (finite).
        bound: the ratio candidate / baseline the question is asked against (``1 + margin``,
            ``1 - min_improvement``, ``maximum_p95_ratio``), > 0 and not 1.
        alpha: the one-sided level of the interval that must clear the bound; ``None`` where only
            the estimate must stay on its side (the step checks' pass).
        power: the chance to settle it wanted, in (0, 1).

    Returns:
        Between 2 and 1000; ``None`` when not estimable (fewer than 2 rounds, or a bound of 1).
    """
    check_unit_interval(power, "power", InputError)
    d = np.asarray(d, dtype=float)
    if d.size < 2 or not math.isfinite(bound) or bound <= 0 or bound == 1:
        return None
    if not np.all(np.isfinite(d)):
        raise InputError("log ratios must be finite")
    return _attempts_for(float(robust_sigma(d)) ** 2, abs(math.log(bound)), 0.5 if alpha is None else alpha, power)


def _attempts_for(variance: float, delta: float, alpha: float, power: float) -> int | None:
    """Attempts per arm for a one-sided rank test at ``alpha`` to settle a gap ``delta`` of log latency
    with ``power``, the spread ``variance`` (normal approximation, the rank test's efficiency)."""
    if variance == 0:
        return None if delta == 0 else 2
    if delta == 0:
        return _MAX_RECOMMENDED
    z = float(_norm().isf(alpha) + _norm().ppf(power))
    try:  # a boundary a hair away overflows: that many attempts is "more than the cap"
        attempts = z * z * variance / (delta * delta) / _MWU_EFFICIENCY
    except (OverflowError, ZeroDivisionError):
        return _MAX_RECOMMENDED
    if not math.isfinite(attempts):
        return _MAX_RECOMMENDED
    return int(min(_MAX_RECOMMENDED, max(2, math.ceil(attempts))))


def flag_contention(latencies, *, k: float = 3.5, min_excess: float = 0.25) -> list[int]:
    """Indices of attempts so much slower than the rest of their arm that contention is likely.

    Rule: on log latencies, an attempt is flagged when
    ``log(x) > median + max(k * 1.4826 * MAD, log(1 + min_excess))``: the modified z-score
    outlier rule with ``k = 3.5`` (Iglewicz and Hoaglin, *How to Detect and Handle Outliers*,
    ASQC, 1993), one-sided because contention only slows an attempt, with a floor so that a
    tight arm (MAD near or at 0, all-equal samples) flags only attempts at least
    ``min_excess`` slower than its median. Nothing is dropped: the statistics of
    :func:`evaluate_robust` use every attempt; the flags are for the report.

    Args:
        latencies: one arm's latencies (finite, > 0), possibly empty.
        k: the number of robust standard deviations, > 0.
        min_excess: the smallest relative excess over the median ever flagged, >= 0.

    Returns:
        The sorted indices into ``latencies`` of the flagged attempts.

    Raises:
        InputError: a latency is not a finite number > 0, or ``k`` or ``min_excess`` is out of
            range.
    """
    if not check_finite(k, "k") or k <= 0:
        raise InputError(f"k must be a finite number > 0, got {k!r}")
    if not check_finite(min_excess, "min_excess") or min_excess < 0:
        raise InputError(f"min_excess must be a finite number >= 0, got {min_excess!r}")
    logs = log_latencies(latencies, "latencies")
    if logs.size < 2:
        return []
    centre = np.median(logs)
    mad = MAD_TO_SIGMA * float(np.median(np.abs(logs - centre)))
    bar = centre + max(k * mad, math.log1p(min_excess))
    return [int(index) for index in np.flatnonzero(logs > bar)]


def preload_step_quantile() -> None:
    """Import what :func:`step_quantile` needs now: a comparison calls this before its first attempt,
    so that the import does not fall between two attempts (in the process that runs them when
    unsupervised)."""
    import scipy.stats.mstats  # noqa: F401


def step_quantile(step_times, fraction: float) -> float:
    """The Harrell-Davis estimate of the ``fraction`` quantile of an attempt's measured step times.

    A weighted mean of every order statistic, with Beta(``fraction (n + 1)``, ``(1 - fraction)
    (n + 1)``) weights (F. E. Harrell and C. E. Davis, "A new distribution-free quantile
    estimator", Biometrika 69(3), 635-640, 1982): ``scipy.stats.mstats.hdquantiles``. At the
    10th percentile (``latency="p10"``) it rests on the fastest few steps, where a busy
    neighbour, which only adds time, disturbs least, yet it averages over them where the
    fastest step alone is one draw: in the noise lab's step-interleaved rounds (30 measured steps
    under busy neighbours) the spread of its within-round log ratio of identical arms was 0.61
    to 1.0 times the fastest step's (``docs/explanation/evidence.md``).
    One step: that step.

    Raises:
        InputError: no steps, a step time that is not finite and > 0, or ``fraction`` outside (0, 1).
    """
    check_unit_interval(fraction, "fraction", InputError)
    values = [float(value) for value in step_times]
    if not values or not all(check_finite(value, "step time") and value > 0 for value in values):
        raise InputError("step_quantile needs at least one step time, each finite and > 0")
    if len(values) == 1:
        return values[0]
    from scipy.stats.mstats import hdquantiles

    estimate = float(np.asarray(hdquantiles(np.asarray(values), prob=[fraction]))[0])
    # A weighted mean of the order statistics lies within them; rounding may step just outside.
    return min(max(estimate, min(values)), max(values))


#: The quantile of the measured steps ``step_p10_ms`` estimates (``latency="p10"``).
STEP_P10 = 0.1


def step_figures(step_times) -> dict[str, float]:
    """Every figure of one attempt's measured steps, computed here and nowhere else, by record key.

    ``fastest_step_ms`` (the fastest step: ``latency="fastest"``), ``step_p10_ms`` (the
    Harrell-Davis 10th percentile, :func:`step_quantile`: ``latency="p10"``), ``step_mean_ms``
    (measured time over steps: what throughput is) and ``step_p95_ms`` (the nearest-rank P95: the
    step tail). The typical step (``latency_ms``, the median) is the attempt's own; the tracking
    layer checks what it is given against these and stores them.

    Raises:
        InputError: no steps, or a step time that is not finite and > 0.
    """
    values = [float(value) for value in step_times]
    p10 = step_quantile(values, STEP_P10)  # refuses an empty or bad list
    return {"fastest_step_ms": min(values), "step_p10_ms": p10, "step_mean_ms": math.fsum(values) / len(values),
            "step_p95_ms": float(nearest_rank(sorted(values), 0.95))}


def nearest_rank(ordered, fraction: float):
    """The nearest-rank percentile of an already sorted, non-empty sequence.

    The rank is ``ceil(n * fraction)`` (1-based, at least 1), as in the specification; the result
    is always one of the samples, never an interpolation. Callers validate the samples.
    """
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]



# --- paired samples: the Wilcoxon signed-rank test and its Hodges-Lehmann interval -------------


def log_ratios(baseline_latencies, candidate_latencies) -> np.ndarray:
    """``log(candidate_i) - log(baseline_i)`` for each pair, rounded to :data:`LOG_RATIO_DECIMALS` decimals.

    Raises:
        InputError: the two lists differ in length, or a latency is not a finite number > 0.
    """
    base = log_latencies(baseline_latencies, "baseline_latencies")
    cand = log_latencies(candidate_latencies, "candidate_latencies")
    if base.size != cand.size:
        raise InputError(f"paired latencies must come in pairs, got {base.size} baseline and {cand.size} "
                         f"candidate latencies")
    return np.round(cand - base, LOG_RATIO_DECIMALS)


@functools.lru_cache(maxsize=64)
def signed_rank_null_cdf(n: int) -> np.ndarray:
    """Exact null CDF of the Wilcoxon signed-rank statistic ``T+`` for ``n`` pairs (no ties, no zeros).

    Under the null each of the ranks 1..n carries a plus sign with probability 1/2,
    independently, so ``P(T+ = t)`` is the number of subsets of {1, ..., n} summing to ``t``
    over ``2^n``; the counts follow from adding the ranks one at a time (Hollander and Wolfe,
    section 3.1). Counts are exact integers (``2^50`` fits in 64 bits).

    Returns:
        ``cdf[t] = P(T+ <= t)`` for ``t = 0 .. n(n+1)/2``, read-only.
    """
    if type(n) is not int or n < 0:
        raise InputError(f"n must be an integer >= 0, got {n!r}")
    counts = np.ones(1, dtype=np.int64)
    for rank in range(1, n + 1):
        grown = np.zeros(counts.size + rank, dtype=np.int64)
        grown[:counts.size] += counts
        grown[rank:] += counts
        counts = grown
    cdf = np.cumsum(counts) / float(2 ** n)
    cdf.setflags(write=False)
    return cdf


def signed_rank_interval_rank(n: int, confidence: float) -> int:
    """The rank ``k`` (1-based) of the Walsh averages bounding the signed-rank interval.

    ``k`` is the largest integer with ``P(T+ <= k - 1) <= (1 - confidence) / 2`` under the
    null; the interval is ``[W_(k), W_(M + 1 - k)]`` with ``M = n(n+1)/2`` (Hollander and
    Wolfe, section 3.2). Up to 50 pairs from the exact distribution; above, from its normal
    approximation with a continuity correction, ``k = floor(M/2 + 0.5 - z * sqrt(n(n+1)(2n+1)/24))``.
    0 means the sample is too small for a bound at this confidence (``2^-n`` above the tail).
    """
    tail = (1 - confidence) / 2
    if n <= _EXACT_W_MAX:
        return int(np.searchsorted(signed_rank_null_cdf(n), tail * (1 + 1e-12), side="right"))
    spread = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(0, math.floor(n * (n + 1) / 4 + 0.5 - _norm().isf(tail) * spread))


def walsh_averages(d: np.ndarray) -> np.ndarray:
    """The ``n(n+1)/2`` Walsh averages ``(d_i + d_j) / 2``, ``i <= j``, unsorted."""
    d = np.asarray(d, dtype=float)
    rows, cols = np.triu_indices(d.size)
    return (d[rows] + d[cols]) / 2


def paired_log_shift(d: np.ndarray, confidence: float | None):
    """Hodges-Lehmann estimate of the centre of ``d`` and its signed-rank interval (None: unbounded)."""
    rank = signed_rank_interval_rank(int(d.size), confidence) if confidence is not None else 0
    return _median_and_bounds(walsh_averages(d), rank)


def signed_rank_test(d, alternative: str) -> tuple[float, str]:
    """One- or two-sided Wilcoxon signed-rank p-value of paired differences ``d`` against a centre of 0.

    Method: ``scipy.stats.wilcoxon(d, zero_method="wilcox", alternative=alternative,
    method="auto")``. Zeros (pairs whose latencies are equal, to :data:`LOG_RATIO_DECIMALS`
    decimals) are dropped, Wilcoxon's own rule; tied ``|d|`` get average ranks. scipy's
    ``"auto"`` then uses, for up to 50 pairs, the exact null distribution when there are no
    ties and no zeros, and an exact enumeration of the ``2^n`` sign flips (its permutation
    test, deterministic up to 13 pairs) when there are; for more than 50 pairs, or ties with
    more than 13, the normal approximation with its tie correction and no continuity
    correction. With no non-zero difference at all there is no evidence either way: ``p = 1``.

    Returns:
        ``(p_value, how)``: ``how`` is ``"exact"``, ``"exact (sign flips; ties or zeros)"``,
        ``"normal approximation"`` or ``"no non-zero difference"``.
    """
    from scipy.stats import wilcoxon

    d = np.asarray(d, dtype=float)
    nonzero = d[d != 0]
    if nonzero.size == 0:
        return 1.0, "no non-zero difference"
    magnitudes = np.abs(nonzero)
    ties = np.unique(magnitudes).size < magnitudes.size
    if d.size > 50:
        how = "normal approximation"
    elif not ties and nonzero.size == d.size:
        how = "exact"
    elif d.size <= 13:
        how = "exact (sign flips; ties or zeros)"
    else:
        how = "normal approximation"
    result = wilcoxon(d, zero_method="wilcox", alternative=alternative, method="auto")
    return float(result.pvalue), how


def small_sample_test(d, alpha: float) -> tuple[float, str] | None:
    """The one-sided t-test towards a faster candidate, where the signed-rank test cannot reach ``alpha``.

    With ``n`` rounds the one-sided signed-rank p-value is at least ``2^-n`` (every ratio of one
    sign): 5 rounds can never go below ``alpha = 0.02``. There, and only when

    - ``n`` is at least :data:`SMALL_SAMPLE_MIN_ROUNDS` and below
      :func:`min_pairs_signed_rank` of ``alpha`` (at 0.02: exactly 5 rounds), and
    - every round's log ratio is below zero (the candidate faster in each: the signed-rank
      test's own strongest evidence, ``p = 2^-n``),

    this returns the one-sided one-sample t-test's p-value of ``d`` against 0 (``scipy.stats.
    ttest_1samp(d, 0, alternative="less")``), which also weighs how far the ratios lie from 1
    against their spread. A single round the other way (or a tie) leaves the signed-rank p-value
    in force, so an outlier can only make an accept less likely. Under the null hypothesis the
    t-test's error rate is ``alpha`` for normal log ratios, and the sign condition only lowers
    it. Used in ``improvement`` mode only (``non_regression`` decides by the interval).

    Returns:
        ``(p_value, how)``, ``how`` naming the test and why it was used (the decision's
        ``p_value_method``), or ``None`` where the signed-rank test stands.
    """
    from scipy.stats import ttest_1samp

    d = np.asarray(d, dtype=float)
    if not SMALL_SAMPLE_MIN_ROUNDS <= d.size < min_pairs_signed_rank(alpha) or not np.all(d < 0):
        return None
    if np.ptp(d) == 0:  # every ratio the same: no spread to weigh them by (t would be infinite)
        return None
    p_value = float(ttest_1samp(d, 0.0, alternative="less").pvalue)
    return p_value, (f"t-test on the log ratios ({d.size} rounds, every one faster, below the signed-rank "
                     f"test's floor of {min_pairs_signed_rank(alpha)} at alpha = {alpha:g})")


def min_rounds_to_accept(alpha: float) -> int:
    """The fewest complete rounds with which the paired method can accept at ``alpha``.

    The signed-rank test's floor (:func:`min_pairs_signed_rank`), or from
    :data:`SMALL_SAMPLE_MIN_ROUNDS` rounds where the floor is higher (:func:`small_sample_test`).
    """
    return min(min_pairs_signed_rank(alpha), SMALL_SAMPLE_MIN_ROUNDS)


def hodges_lehmann_paired_ratio(baseline_latencies, candidate_latencies, *, confidence: float = 0.95) -> dict:
    """Typical within-pair ratio, candidate over baseline, with a distribution-free interval.

    Method: the one-sample Hodges-Lehmann estimate on the pairs' log ratios ``d_i =
    log(candidate_i) - log(baseline_i)``: the median of the ``M = n(n+1)/2`` Walsh averages
    ``(d_i + d_j) / 2`` (``i <= j``). The interval is ``[W_(k), W_(M+1-k)]``, ``k`` from the
    null distribution of the Wilcoxon signed-rank statistic (:func:`signed_rank_interval_rank`:
    exact up to 50 pairs, the normal approximation above). It is the set of centres the
    two-sided signed-rank test at level ``1 - confidence`` does not reject: ``T+(d - theta)``
    is the number of Walsh averages above ``theta`` (Tukey). When the ``d_i`` are symmetric
    about their centre (a pair's shared load cancels in its ratio; what is left is the
    difference of two similar noises) it covers the centre with probability at least
    ``confidence``; exponentiated, these bound the ratio candidate / baseline. With ties the
    coverage is approximate (the distribution assumes none).

    References:
        J. L. Hodges and E. L. Lehmann, Ann. Math. Statist. 34(2), 598-611, 1963. M. Hollander
        and D. A. Wolfe, *Nonparametric Statistical Methods*, 2nd ed., Wiley, 1999, sections
        3.1 (the signed-rank test) and 3.2 (the estimator and Tukey's interval). F. Wilcoxon,
        "Individual comparisons by ranking methods", Biometrics Bulletin 1(6), 80-83, 1945.

    Args:
        baseline_latencies, candidate_latencies: the pairs' latencies (finite, > 0), in pair
            order, at least one pair.
        confidence: the interval's confidence, in (0, 1).

    Returns:
        ``ratio_estimate``, ``ratio_ci_low``, ``ratio_ci_high`` (``None`` where too few pairs
        give no bound: at 95%, 6 pairs are needed, ``2^-n <= 0.025``), ``confidence``, ``pairs``.

    Raises:
        InputError: no pairs, lists of different lengths, a latency not a finite number > 0,
            or ``confidence`` out of range.
    """
    check_unit_interval(confidence, "confidence", InputError)
    d = log_ratios(baseline_latencies, candidate_latencies)
    if d.size == 0:
        raise InputError("hodges_lehmann_paired_ratio needs at least one pair, got none")
    shift, low, high = paired_log_shift(d, confidence)
    return {"ratio_estimate": math.exp(shift), "ratio_ci_low": _exp(low), "ratio_ci_high": _exp(high),
            "confidence": confidence, "pairs": int(d.size)}


def recommended_pairs(d, *, margin: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Pairs (attempts per arm, one of each per round) that would likely settle ``d`` against ``1 + margin``.

    Method: the normal approximation for a one-sided one-sample test on the log ratios,
    ``n = (z_{1-alpha} + z_{power})^2 * s_d^2 / delta^2``, divided by ``3 / pi``, the asymptotic
    relative efficiency of the signed-rank test against the t-test for normal data (Lehmann,
    *Nonparametrics*, 1975, section 3.3; the same factor as :func:`recommended_attempts`'s).
    ``s_d`` is the spread of the log ratios, ``1.4826 * MAD`` (the sample standard deviation
    when the MAD is 0); ``delta = |h - log(1 + margin)|`` the distance of their Hodges-Lehmann
    estimate ``h`` from the boundary. A planning figure, not a promise.

    Args:
        d: the pairs' log ratios (finite).
        margin, alpha, power: as for :func:`recommended_attempts`.

    Returns:
        Between 2 and 1000 (1000 also when the estimate sits on the boundary); ``None`` when not
        estimable: fewer than 2 pairs, or no spread and the estimate exactly on the boundary.
    """
    if not check_finite(margin, "margin") or margin <= -1:
        raise InputError(f"margin must be a finite number > -1, got {margin!r}")
    check_unit_interval(alpha, "alpha", InputError)
    check_unit_interval(power, "power", InputError)
    d = np.asarray(d, dtype=float)
    if d.size < 2:
        return None
    if not np.all(np.isfinite(d)):
        raise InputError("log ratios must be finite")
    shift, _, _ = paired_log_shift(d, None)
    delta = abs(shift - math.log1p(margin))
    return _attempts_for(float(robust_sigma(d)) ** 2, delta, alpha, power)


def min_attempts_mann_whitney(alpha: float) -> int:
    """The fewest attempts per arm with which a one-sided Mann-Whitney test can reach ``p < alpha``.

    With ``n`` attempts per arm and no ties the smallest one-sided p-value is that of complete
    separation, ``1 / C(2n, n)`` (exact): 3 per arm give 1/20, so at ``alpha = 0.02`` 4 are
    needed (1/70). Capped at 1000.
    """
    check_unit_interval(alpha, "alpha", InputError)
    n = 1
    while n < _MAX_RECOMMENDED and not 1 / math.comb(2 * n, n) < alpha * (1 - 1e-9):
        n += 1
    return n


def min_pairs_signed_rank(alpha: float) -> int:
    """The fewest pairs with which a one-sided Wilcoxon signed-rank test can reach ``p < alpha``.

    The smallest one-sided p-value of ``n`` pairs is ``2^-n`` (every difference of one sign):
    5 pairs give 1/32, so at ``alpha = 0.02`` 6 are needed (1/64). Capped at 1000.
    """
    check_unit_interval(alpha, "alpha", InputError)
    n = 1
    while n < _MAX_RECOMMENDED and not 2.0 ** -n < alpha * (1 - 1e-9):
        n += 1
    return n
