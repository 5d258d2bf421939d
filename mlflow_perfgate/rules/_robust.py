"""A robust comparison beside the specification's rule: a rank test and an interval for the ratio.

The specification's rule (:func:`evaluate_regression`) asks the median improvement to reach the
baseline's ``(P95 - median) / median``, a teaching proxy for noise. On a shared machine a few
slow attempts set that bar: a true 20% speedup is accepted only a fraction of the time. The
functions here judge the same attempt records with distribution-free statistics instead:

- a one-sided Mann-Whitney U test (is one arm's latency stochastically smaller?);
- the Hodges-Lehmann estimate of the ratio of medians, candidate over baseline, with its
  Mann-Whitney confidence interval, both computed on log latencies;
- a non-regression mode for CI (the candidate may not be slower than a declared margin),
  for this method and for the specification's (:func:`evaluate_seed_non_regression`);
- the number of attempts that would likely settle an inconclusive comparison;
- flags (never removals) on attempts that look slowed by contention.

The specification's failure-rate, quality and P95 checks keep their meaning; only the P95 check
is judged with a test (see :func:`evaluate_robust`), because with 10 attempts the nearest-rank
P95 is the slowest attempt, whatever slowed it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.stats import mannwhitneyu, norm

from ._explain import failure_rate_message, ms as _ms, pct as _pct, quality_message
from ._errors import check_finite, typed_inputs
from ._regression import check_thresholds, evaluate_regression, summarize_repeated_runs

__all__ = [
    "MODES",
    "evaluate_robust",
    "evaluate_seed_non_regression",
    "explain_robust_checks",
    "flag_contention",
    "hodges_lehmann_ratio",
    "recommended_attempts",
]

#: The questions a comparison can ask: the specification's (is the candidate faster by at least
#: ``min_improvement``?) and CI's (is the candidate at most ``margin`` slower?).
MODES = ("improvement", "non_regression")
#: ``1.4826 * MAD`` estimates the standard deviation of a normal sample (1 / Phi^-1(3/4)).
_MAD_TO_SIGMA = 1.482602218505602
#: The Mann-Whitney test's asymptotic relative efficiency against the t-test for normal data.
_MWU_EFFICIENCY = 3 / math.pi
#: Above this many attempts per arm the interval uses the normal approximation of U's
#: distribution; at or below, its exact distribution (a cached table of at most 51 x 51 cells).
_EXACT_U_MAX = 50
#: The most attempts per arm :func:`recommended_attempts` returns.
_MAX_RECOMMENDED = 1000


# --- helpers ------------------------------------------------------------------------------------


def _check_unit_interval(value, field: str) -> None:
    if not check_finite(value, field) or not 0 < value < 1:
        raise ValueError(f"{field} must be a float in the range (0; 1), got {value!r}")


def _log_latencies(values, field: str) -> np.ndarray:
    """Logs of a list of latencies, each a finite number > 0."""
    if values is None or isinstance(values, (str, bytes, dict)):
        raise ValueError(f"{field} must be a list of latencies, got {type(values).__name__}")
    values = list(values)
    for value in values:
        if isinstance(value, bool) or not check_finite(value, field) or value <= 0:
            raise ValueError(f"{field} must hold finite numbers > 0, got {value!r}")
    return np.log(np.asarray(values, dtype=float))


def _robust_sigma(logs: np.ndarray) -> float:
    """``1.4826 * MAD`` of log latencies; the sample standard deviation when the MAD is 0."""
    if logs.size < 2:
        return 0.0
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(logs - np.median(logs))))
    if sigma == 0:
        sigma = float(np.std(logs, ddof=1))
    return sigma


@functools.lru_cache(maxsize=256)
def _u_null_cdf(m: int, n: int) -> np.ndarray:
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


def _interval_rank(m: int, n: int, confidence: float) -> int:
    """The rank ``k`` (1-based) of the pairwise differences bounding the interval.

    ``k`` is the largest integer with ``P(U <= k - 1) <= (1 - confidence) / 2`` under the null;
    the interval is ``[D_(k), D_(mn + 1 - k)]`` (Hollander and Wolfe, section 4.3). 0 means the
    sample is too small for a bound at this confidence.
    """
    tail = (1 - confidence) / 2
    if max(m, n) <= _EXACT_U_MAX:
        cdf = _u_null_cdf(m, n)
        return int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    spread = math.sqrt(m * n * (m + n + 1) / 12)
    return max(0, math.floor(m * n / 2 + 0.5 - norm.isf(tail) * spread))


def _log_shift(base_logs: np.ndarray, cand_logs: np.ndarray, confidence: float | None):
    """Hodges-Lehmann shift of ``cand_logs`` over ``base_logs`` and its interval (logs; None: unbounded)."""
    diffs = np.subtract.outer(cand_logs, base_logs).ravel()
    size = diffs.size
    kth = {(size - 1) // 2, size // 2}
    rank = _interval_rank(base_logs.size, cand_logs.size, confidence) if confidence is not None else 0
    if rank >= 1:
        kth |= {rank - 1, size - rank}
    ordered = np.partition(diffs, sorted(kth))
    shift = float((ordered[(size - 1) // 2] + ordered[size // 2]) / 2)
    if rank < 1:
        return shift, None, None
    return shift, float(ordered[rank - 1]), float(ordered[size - rank])


def _exceedance_p_value(m: int, rank: int, n: int, exceeding: int) -> float:
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


# --- public statistics --------------------------------------------------------------------------


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
        ValueError: an arm is empty, a latency is not a finite number > 0, or ``confidence`` is
            out of range.
    """
    _check_unit_interval(confidence, "confidence")
    base = _log_latencies(baseline_latencies, "baseline_latencies")
    cand = _log_latencies(candidate_latencies, "candidate_latencies")
    if base.size == 0 or cand.size == 0:
        raise ValueError(
            f"baseline_latencies and candidate_latencies must each hold at least one latency, got "
            f"{base.size} and {cand.size}"
        )
    shift, low, high = _log_shift(base, cand, confidence)
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
        ValueError: a latency is not a finite number > 0, or an argument is out of range.
    """
    if not check_finite(margin, "margin") or margin <= -1:
        raise ValueError(f"margin must be a finite number > -1, got {margin!r}")
    _check_unit_interval(alpha, "alpha")
    _check_unit_interval(power, "power")
    base = _log_latencies(baseline_latencies, "baseline_latencies")
    cand = _log_latencies(candidate_latencies, "candidate_latencies")
    if min(base.size, cand.size) < 2:
        return None
    shift, _, _ = _log_shift(base, cand, None)
    delta = abs(float(shift) - math.log1p(margin))
    variance = float(_robust_sigma(base)) ** 2 + float(_robust_sigma(cand)) ** 2
    if variance == 0:
        return None if delta == 0 else 2
    if delta == 0:
        return _MAX_RECOMMENDED
    z = float(norm.isf(alpha) + norm.ppf(power))
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
        ValueError: a latency is not a finite number > 0, or ``k`` or ``min_excess`` is out of
            range.
    """
    if not check_finite(k, "k") or k <= 0:
        raise ValueError(f"k must be a finite number > 0, got {k!r}")
    if not check_finite(min_excess, "min_excess") or min_excess < 0:
        raise ValueError(f"min_excess must be a finite number >= 0, got {min_excess!r}")
    logs = _log_latencies(latencies, "latencies")
    if logs.size < 2:
        return []
    centre = np.median(logs)
    mad = _MAD_TO_SIGMA * float(np.median(np.abs(logs - centre)))
    bar = centre + max(k * mad, math.log1p(min_excess))
    return [int(index) for index in np.flatnonzero(logs > bar)]


# --- decisions ----------------------------------------------------------------------------------


def _check_mode(mode, margin) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not check_finite(margin, "margin") or margin < 0:
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")


def _finish(result: dict, checks: dict) -> dict:
    """Reject on any failed check, rerun on an undecided one (``None``), else accept."""
    failed_checks = [name for name, passed in checks.items() if passed is False]
    if failed_checks:
        decision, reason = "reject", "declared_thresholds_checked"
    elif any(passed is None for passed in checks.values()):
        decision, reason = "rerun", "inconclusive"
    else:
        decision, reason = "accept", "declared_thresholds_checked"
    return {**result, **checks, "failed_checks": failed_checks, "decision": decision, "reason": reason}


@typed_inputs
def evaluate_seed_non_regression(
    baseline_runs: list,
    candidate_runs: list,
    *,
    margin: float = 0.05,
    min_valid_runs: int = 5,
    min_improvement: float = 0.05,
    quality_tolerance: float = 0.01,
    maximum_failure_rate: float = 0.0,
    maximum_p95_ratio: float = 1.05,
) -> dict:
    """The specification's rule turned around for CI: the candidate may not be slower than ``margin``.

    Method: :func:`evaluate_regression` exactly (its preconditions, its early ``rerun``
    answers, its failure-rate, quality and P95 checks, its noise proxy), with the improvement
    check replaced by ``no_regression_ok``: ``observed_improvement >= -max(margin,
    baseline_noise)``, i.e. the candidate's median may be slower than the baseline's by the
    margin or by the baseline's own ``(P95 - median) / median``, whichever is larger. The same
    proxy that sets a high bar for an improvement sets a lenient one for a regression; the P95
    check, kept as the specification has it, is what makes this rule false-alarm on a noisy
    machine (``benchmarks/decision_quality.py``).

    Args:
        baseline_runs, candidate_runs: attempt records (see :func:`summarize_repeated_runs`).
        margin: the slowdown allowed, a finite number >= 0 (0.05: 5% slower).
        min_valid_runs, quality_tolerance, maximum_failure_rate, maximum_p95_ratio: as for
            :func:`evaluate_regression`.
        min_improvement: validated as there, not used by this mode.

    Returns:
        :func:`evaluate_regression`'s keys with ``no_regression_ok`` in place of
        ``improvement_ok``, ``required_improvement = -max(margin, baseline_noise)``, plus
        ``method`` (``"seed"``), ``mode`` (``"non_regression"``) and ``margin``.

    Raises:
        ValueError: a threshold is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    _check_mode("non_regression", margin)
    result = evaluate_regression(baseline_runs, candidate_runs, min_valid_runs, min_improvement,
                                 quality_tolerance, maximum_failure_rate, maximum_p95_ratio)
    result = {**result, "method": "seed", "mode": "non_regression", "margin": margin}
    if "improvement_ok" not in result:
        return result
    required = -max(margin, result["baseline_noise"])
    checks = {name: result.pop(name) for name in ("failure_rate_ok", "quality_ok", "p95_ok")}
    del result["improvement_ok"]
    checks["no_regression_ok"] = result["observed_improvement"] >= required
    failed_checks = [name for name, passed in checks.items() if not passed]
    return {**result, **checks, "required_improvement": required, "failed_checks": failed_checks,
            "decision": "reject" if failed_checks else "accept"}


@typed_inputs
def evaluate_robust(
    baseline_runs: list,
    candidate_runs: list,
    *,
    mode: str = "improvement",
    margin: float = 0.05,
    alpha: float = 0.02,
    min_valid_runs: int = 5,
    min_improvement: float = 0.05,
    quality_tolerance: float = 0.01,
    maximum_failure_rate: float = 0.0,
    maximum_p95_ratio: float = 1.05,
    confidence: float = 0.90,
) -> dict:
    """Decide accept, reject or rerun with a rank test and an interval for the latency ratio.

    Preconditions as in :func:`evaluate_regression`: both arms need ``min_valid_runs``
    successful attempts (else ``rerun``, ``insufficient_valid_runs``) and the baseline's failure
    rate may not exceed ``maximum_failure_rate`` (else ``rerun``, ``unreliable_baseline``).
    Then these checks, each with its own flag: ``True`` passed, ``False`` failed (the decision
    is ``reject``), ``None`` undecided (the decision is ``rerun`` with reason ``inconclusive``
    when nothing failed):

    - ``failure_rate_ok`` and ``quality_ok``: the specification's, unchanged.
    - ``p95_ok``: fails when the candidate's P95 exceeds ``maximum_p95_ratio`` times the
      baseline's (the specification's comparison) *and* that is more than chance: ``j``, the
      number of the candidate's successful attempts above that bar, is improbably large for
      two arms of one distribution, ``P(J >= j) < alpha`` under the exact, distribution-free
      law of the number of exceedances of a baseline order statistic (Gumbel and von
      Schelling, 1950; conservative here, as the bar is ``maximum_p95_ratio`` times that order
      statistic). With 10 attempts per arm the P95 is the slowest attempt, and one contended
      attempt would otherwise reject; at ``alpha = 0.02``, 5 of 10 candidate attempts above the
      bar are needed (``P(J >= 5) = 0.016``).
    - ``improvement_ok`` (mode ``"improvement"``): ``True`` when the improvement is both
      significant and large enough, as asv's ``_is_result_better`` asks: the one-sided
      Mann-Whitney p-value (candidate faster) is below ``alpha`` and the Hodges-Lehmann
      estimate of the improvement, ``1 - ratio_estimate``, is at least ``min_improvement``.
      ``False`` when the interval rules such an improvement out (``ratio_ci_low > 1 -
      min_improvement``), ``None`` otherwise.
    - ``no_regression_ok`` (mode ``"non_regression"``): ``False`` when the interval shows a
      slowdown beyond the margin (``ratio_ci_low > 1 + margin``), ``True`` when it rules one
      out (``ratio_ci_high <= 1 + margin``), ``None`` when it straddles ``1 + margin``.

    The ratio is Hodges-Lehmann's on log latencies (:func:`hodges_lehmann_ratio`), every
    successful attempt included; attempts that look contended are flagged
    (:func:`flag_contention`) but never dropped. ``observed_improvement`` and
    ``baseline_noise`` are the specification's figures, for the report.

    Args:
        baseline_runs, candidate_runs: attempt records (see :func:`summarize_repeated_runs`).
        mode: ``"improvement"`` (the specification's question) or ``"non_regression"``.
        margin: the slowdown tolerated in ``"non_regression"``, a finite number >= 0.
        alpha: the one-sided significance level of the improvement and tail tests, in (0, 1).
            It is the rate of accepting a candidate that is not faster at all that one signs up
            for: on a noisy machine a significant result nearly always also estimates at least
            ``min_improvement``, so the false-accept rate approaches ``alpha``. 0.02 holds it at
            2%; 0.01 would cost power to contention (each contended candidate attempt adds
            ``n`` to U: in simulations with the noise model of ``benchmarks/decision_quality.py``
            and 5-10% contended attempts, a 20% speedup at 10 attempts per arm is accepted
            82-93% of the time instead of 94-99%).
        min_valid_runs, min_improvement, quality_tolerance, maximum_failure_rate,
            maximum_p95_ratio: as for :func:`evaluate_regression`.
        confidence: the confidence of the ratio interval, in (0, 1); each of its tails is a
            one-sided error of ``(1 - confidence) / 2``. 0.90 makes the non-regression decision
            Schuirmann's two one-sided tests at 5% each (the convention of non-inferiority and
            equivalence testing; D. J. Schuirmann, J. Pharmacokinet. Biopharm. 15(6), 657-680,
            1987): a candidate exactly ``margin`` slower is rejected, and accepted, 5% of the
            time.

    Returns:
        ``baseline``, ``candidate``, ``decision``, ``reason``, ``method`` (``"robust"``),
        ``mode`` and ``recommended_attempts`` (attempts per arm; on an ``inconclusive`` or
        ``insufficient_valid_runs`` rerun when estimable, else ``None``); once the checks ran
        also ``failure_rate_ok``, ``quality_ok``, ``p95_ok``, ``improvement_ok`` or
        ``no_regression_ok``, ``failed_checks``, ``baseline_noise``, ``observed_improvement``,
        ``required_improvement`` (``min_improvement``, or ``-margin``), ``maximum_failure_rate``,
        ``maximum_p95_ratio``, ``margin``, ``alpha``, ``confidence``, ``p_value`` (one-sided
        Mann-Whitney U, ``scipy.stats.mannwhitneyu`` defaults, towards a faster candidate in
        ``"improvement"`` and a slower one in ``"non_regression"``), ``ratio_estimate``,
        ``ratio_ci_low``, ``ratio_ci_high`` (``None`` where unbounded), ``p95_ratio``,
        ``p95_p_value`` and ``contention`` (``{"baseline": [...], "candidate": [...]}``, indices
        into the run lists of flagged successful attempts).

    Raises:
        ValueError: a threshold or argument is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    check_thresholds(min_valid_runs, min_improvement, quality_tolerance,
                     maximum_failure_rate, maximum_p95_ratio)
    _check_mode(mode, margin)
    _check_unit_interval(alpha, "alpha")
    _check_unit_interval(confidence, "confidence")
    b = summarize_repeated_runs(baseline_runs)
    c = summarize_repeated_runs(candidate_runs)
    result = {"baseline": b, "candidate": c, "method": "robust", "mode": mode}
    base_ok = [index for index, run in enumerate(baseline_runs) if run["ok"]]
    cand_ok = [index for index, run in enumerate(candidate_runs) if run["ok"]]
    base_ms = [baseline_runs[index]["latency_ms"] for index in base_ok]
    cand_ms = [candidate_runs[index]["latency_ms"] for index in cand_ok]
    boundary = margin if mode == "non_regression" else -min_improvement
    tail_alpha = (1 - confidence) / 2
    if min(b["valid_runs"], c["valid_runs"]) < min_valid_runs:
        estimate = None
        if min(len(base_ms), len(cand_ms)) >= 2:
            estimate = recommended_attempts(base_ms, cand_ms, margin=boundary, alpha=tail_alpha)
        return {**result, "decision": "rerun", "reason": "insufficient_valid_runs",
                "recommended_attempts": None if estimate is None else max(estimate, min_valid_runs)}
    if b["failure_rate"] > maximum_failure_rate:
        return {**result, "decision": "rerun", "reason": "unreliable_baseline", "recommended_attempts": None}

    alternative = "less" if mode == "improvement" else "greater"
    p_value = float(mannwhitneyu(cand_ms, base_ms, alternative=alternative).pvalue)
    interval = hodges_lehmann_ratio(base_ms, cand_ms, confidence=confidence)
    ratio, low, high = interval["ratio_estimate"], interval["ratio_ci_low"], interval["ratio_ci_high"]

    p95_bar = maximum_p95_ratio * b["p95_ms"]
    above = sum(value > p95_bar for value in cand_ms)
    p95_rank = max(1, math.ceil(len(base_ms) * 0.95))  # the nearest rank of the baseline's P95
    p95_p_value = _exceedance_p_value(len(base_ms), p95_rank, len(cand_ms), above)
    p95_ratio = c["p95_ms"] / b["p95_ms"]
    checks = {
        "failure_rate_ok": c["failure_rate"] <= maximum_failure_rate,
        "quality_ok": c["quality"] >= b["quality"] - quality_tolerance,
        "p95_ok": p95_ratio <= maximum_p95_ratio or p95_p_value >= alpha,
    }
    if mode == "improvement":
        if p_value < alpha and 1 - ratio >= min_improvement:
            checks["improvement_ok"] = True
        elif low is not None and low > 1 - min_improvement:
            checks["improvement_ok"] = False
        else:
            checks["improvement_ok"] = None
    else:
        if low is not None and low > 1 + margin:
            checks["no_regression_ok"] = False
        elif high is not None and high <= 1 + margin:
            checks["no_regression_ok"] = True
        else:
            checks["no_regression_ok"] = None

    result = _finish(result, checks)
    recommended = None
    if result["reason"] == "inconclusive":
        if mode == "improvement" and 1 - ratio >= min_improvement:
            # large enough already: what is missing is significance against "no change"
            estimate = recommended_attempts(base_ms, cand_ms, margin=0.0, alpha=alpha)
        else:
            estimate = recommended_attempts(base_ms, cand_ms, margin=boundary, alpha=tail_alpha)
        if estimate is not None:
            recommended = max(estimate, min(len(base_ms), len(cand_ms)) + 1)
    flags = {"baseline": [base_ok[i] for i in flag_contention(base_ms)],
             "candidate": [cand_ok[i] for i in flag_contention(cand_ms)]}
    return {
        **result,
        "recommended_attempts": recommended,
        "baseline_noise": (b["p95_ms"] - b["median_ms"]) / b["median_ms"],
        "observed_improvement": (b["median_ms"] - c["median_ms"]) / b["median_ms"],
        "required_improvement": -boundary,
        "maximum_failure_rate": maximum_failure_rate,
        "maximum_p95_ratio": maximum_p95_ratio,
        "margin": margin,
        "alpha": alpha,
        "confidence": confidence,
        "p_value": p_value,
        "ratio_estimate": ratio,
        "ratio_ci_low": low,
        "ratio_ci_high": high,
        "p95_ratio": p95_ratio,
        "p95_p_value": p95_p_value,
        "contention": flags,
    }


def _ratio(value) -> str:
    return "unbounded" if value is None else f"{value:.3f}"


def explain_robust_checks(result: dict, quality_tolerance: float | None = None) -> dict[str, str]:
    """A message for every check of an :func:`evaluate_robust` result, passed, failed or undecided.

    Args:
        result: the dict :func:`evaluate_robust` returned.
        quality_tolerance: the tolerance used, for the quality message.

    Returns:
        ``{check_name: message}`` in the order of the checks; empty when the checks did not run.
    """
    if "failure_rate_ok" not in result:
        return {}
    b, c = result["baseline"], result["candidate"]
    verdict = {True: "ok", False: "FAILED", None: "INCONCLUSIVE"}
    interval = (f"ratio candidate/baseline {result['ratio_estimate']:.3f} "
                f"({result['confidence'] * 100:g}% interval {_ratio(result['ratio_ci_low'])} to "
                f"{_ratio(result['ratio_ci_high'])}, Hodges-Lehmann)")
    messages = {
        "failure_rate_ok": failure_rate_message(result["failure_rate_ok"], b, c, result["maximum_failure_rate"]),
        "quality_ok": quality_message(result["quality_ok"], b, c, quality_tolerance),
        "p95_ok": (
            f"{verdict[result['p95_ok']]}: candidate P95 {_ms(c['p95_ms'])} is {result['p95_ratio']:.3f}x "
            f"baseline P95 {_ms(b['p95_ms'])}; maximum_p95_ratio {result['maximum_p95_ratio']:g}, "
            f"tail test p = {result['p95_p_value']:.3g} against alpha {result['alpha']:g}"
        ),
    }
    if "improvement_ok" in result:
        messages["improvement_ok"] = (
            f"{verdict[result['improvement_ok']]}: {interval}, an improvement of "
            f"{_pct(1 - result['ratio_estimate'])}; required {_pct(result['required_improvement'])} "
            f"with one-sided Mann-Whitney p = {result['p_value']:.3g} below alpha {result['alpha']:g}"
        )
    else:
        messages["no_regression_ok"] = (
            f"{verdict[result['no_regression_ok']]}: {interval} against the allowed slowdown "
            f"1 + margin = {1 + result['margin']:.3f}; one-sided Mann-Whitney p (slower) = "
            f"{result['p_value']:.3g}"
        )
    return messages
