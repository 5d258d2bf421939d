"""A benchmark's history over revisions: change points, and the next revision to bisect.

Between pull requests a regression can arrive slowly or unnoticed; history tools find it after
the fact in the series of a benchmark's results over revisions (Apache Otava's E-Divisive with a
t-test, asv's step detection, Conbench's lookback z-score, the PyTorch HUD's "two trailing
violations"). None of them keeps failed attempts. Here each revision is a
:class:`RevisionSample` (its successful attempts' latencies *and* its failed attempts, so the
failure rate keeps the specification's denominator) and :func:`find_change_points` returns
:class:`ChangePoint` records, each labelled ``regression``, ``improvement`` or ``suspicious``.
:func:`bisect_next` narrows a range between a good and a bad revision, reusing every verdict
already known.

Pure: no I/O, no mlflow, no torch; the same input gives the same output (the permutation test's
shuffles come from a generator seeded by ``seed`` and the segment).

The method, in short (each step is documented where it is done, and chosen on the figures of
``benchmarks/bench_history.py``):

1. The unit of analysis is the revision: each contributes the median of its successful
   attempts (:data:`SIGNALS` ``latency``) and its failures out of its attempts
   (``failure_rate``).
2. Split (Hunter's split step, after Matteson and James): a segment is split where the
   E-Divisive statistic of the revision medians is largest, if Matteson and James's
   permutation test says it is significant (or, with ``test="t"``, Otava's Student's t-test,
   Bonferroni-corrected); or where the binomial likelihood ratio of the failures is largest,
   if Fisher's exact test (Bonferroni-corrected) says so. The more significant of the two
   splits; each half is split in turn until none splits.
3. Merge (Hunter's merge step): every change point is tested again between its final
   neighbours; the weakest that is no longer significant is removed, its neighbours are tested
   again, and so on until every change point is significant.
4. Label: a significant change is a ``regression`` (failures up, or slower by at least
   ``min_magnitude``) or an ``improvement`` (faster by at least ``min_magnitude``, or failures
   down) when both sides hold at least ``min_support`` revisions; anything else significant is
   ``suspicious``.

References:
    D. S. Matteson and N. A. James, "A nonparametric approach for multiple change point analysis
    of multivariate data", J. Amer. Statist. Assoc. 109(505), 334-345, 2014 (arXiv:1306.4933).
    D. Daly, W. Brown, H. Ingo, J. O'Leary and D. Bradford, "The use of change point detection to
    identify software performance regressions in a continuous integration system", ICPE 2020.
    M. Fleming et al., "Hunter: using change point detection to hunt for performance
    regressions", ICPE 2023 (doi:10.1145/3578244.3583719); Apache Otava's ``analysis.py``.
    G. J. Szekely and M. L. Rizzo, "Energy statistics: a class of statistics based on
    distances", J. Statist. Plann. Inference 143(8), 1249-1272, 2013. K. J. Worsley, "The power
    of likelihood ratio and cumulative sum tests for a change in a binomial probability",
    Biometrika 70(2), 455-464, 1983.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from ._errors import InputError, MissingField, PolicyError, RuleTypeError, check_finite
from ._policy import Setting, check_settings
from ._stats import hodges_lehmann_ratio, nearest_rank, robust_sigma

__all__ = [
    "BISECT_STATUSES",
    "BISECT_VERDICTS",
    "BisectStep",
    "CLIP_SIGMAS",
    "ChangePoint",
    "DIRECTIONS",
    "HISTORY_SETTINGS",
    "LABELS",
    "RevisionSample",
    "SIGNALS",
    "TESTS",
    "bisect_next",
    "energy_statistic",
    "find_change_points",
    "permutation_floor",
    "revision_samples",
]

#: What a change point is called: a significant adverse change of at least the declared size seen
#: in at least ``min_support`` revisions on each side, its favourable counterpart, or anything
#: else significant (too small, or seen in too few revisions to tell from an outlier).
LABELS = ("regression", "improvement", "suspicious")
#: The two series a history is read on: the revisions' median latencies and their failure rates.
SIGNALS = ("latency", "failure_rate")
#: Which way a change point goes, for the signal that labels it.
DIRECTIONS = ("slower", "faster", "more_failures", "fewer_failures")

#: The knobs of :func:`find_change_points`, with their defaults and ranges (a history command's
#: options and their help can be derived from them, as the decision options are from ``Policy``).
HISTORY_SETTINGS = (
    Setting("alpha", 0.01, "Significance level of each split test (latency, failures), the choice of the best "
            "split accounted for", low=0, high=1, low_open=True, high_open=True),
    Setting("min_magnitude", 0.05, "Least change of the median latency that is a regression (ratio >= 1 + m) or "
            "an improvement (ratio <= 1 - m); a smaller significant change is suspicious",
            low=0, high=1, high_open=True),
    Setting("min_segment", 1, "Fewest revisions on each side of a split", integer=True, low=1),
    Setting("min_support", 2, "Fewest revisions on each side for a regression or an improvement; a change seen "
            "in fewer is suspicious (the PyTorch HUD's two trailing violations)", integer=True, low=1),
    Setting("confidence", 0.90, "Confidence of the ratio's interval", low=0, high=1, low_open=True,
            high_open=True),
    Setting("permutations", 999, "Shuffles of the permutation test", integer=True, low=19),
    Setting("seed", 0, "Seed of the permutation test's shuffles", integer=True, low=0),
)
_DEFAULTS = {setting.name: setting.default for setting in HISTORY_SETTINGS}

#: The latency tests of :func:`find_change_points`: Matteson and James's permutation test of the
#: E-Divisive statistic (the default), or Otava's Student's t-test, Bonferroni-corrected.
TESTS = ("permutation", "t")

#: Robust standard deviations (``1.4826 * MAD``) at which the permutation test clips a revision's
#: centred log median: the modified z-score bar of Iglewicz and Hoaglin that
#: ``rules.flag_contention`` also uses. An outlier revision (a busy machine) then weighs at most
#: that much; a change of the segment's level is far inside it (the MAD of a segment holding a
#: step is about half the step). Chosen on ``benchmarks/bench_history.py --clip`` (300 histories,
#: ``alpha = 0.01``): a 20% step under heavy contention is found 71%, 68%, 62% and 58% of the time
#: at 3, 3.5, 5 and 16 (about no clip) sigmas; two slow trailing revisions on a quiet machine 80%,
#: 88%, 97% and 99% of the time.
CLIP_SIGMAS = 3.5
#: Steps per robust standard deviation of the permutation test's integer values (see
#: :func:`_clip_outliers`); the largest distance, ``2 * CLIP_SIGMAS * _QUANTUM``, must fit an int16.
_QUANTUM = 1000

#: Bytes of one block of pairwise distances of the E-Divisive statistic; time stays O(length^2)
#: per series.
_BLOCK_BYTES = 16 << 20
#: Shuffles first drawn at once by the permutation test (its early stop looks after each batch;
#: batches then double, within :data:`_BLOCK_BYTES`).
_PERMUTATION_CHUNK = 50
#: Relative size under which a spread of log medians counts as none (all revisions equal).
_EQUAL_TOL = 1e-12


def _scipy_stats():
    """``scipy.stats``, imported on first use (listing the settings needs no scipy)."""
    from scipy import stats

    return stats


# --- records --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RevisionSample:
    """One revision of a benchmark: its place in the history and every attempt it had.

    Validated on construction (pyperf's ``Run`` style); immutable.

    Attributes:
        revision: the revision's name (a git sha), non-empty.
        order: where it stands in the history: a commit time (POSIX seconds) or a position; a
            finite number, distinct between the revisions of one series.
        latencies_ms: the latencies of its successful attempts (finite, > 0), in run order.
        failed: how many of its attempts failed (each stays in the failure-rate denominator).
        quality: its quality (the mean over its successful attempts), if known; carried into
            the change points' figures, not tested.
    """

    revision: str
    order: float
    latencies_ms: tuple[float, ...] = ()
    failed: int = 0
    quality: float | None = None

    def __post_init__(self):
        if not isinstance(self.revision, str) or not self.revision.strip():
            raise InputError(f"revision must be a non-empty string, got {self.revision!r}")
        name = self.revision
        if isinstance(self.order, bool) or not check_finite(self.order, f"order of revision {name!r}"):
            raise InputError(f"order of revision {name!r} must be a finite number (a commit time or a "
                             f"position), got {self.order!r}")
        if self.latencies_ms is None or isinstance(self.latencies_ms, (str, bytes, Mapping)):
            raise RuleTypeError(f"latencies_ms of revision {name!r} must be a sequence of latencies, got "
                                f"{type(self.latencies_ms).__name__}")
        try:
            latencies = tuple(self.latencies_ms)
        except TypeError:
            raise RuleTypeError(f"latencies_ms of revision {name!r} must be a sequence of latencies, got "
                                f"{type(self.latencies_ms).__name__}") from None
        for value in latencies:
            if isinstance(value, bool) or not check_finite(value, f"latencies_ms of revision {name!r}") \
                    or value <= 0:
                raise InputError(f"latencies_ms of revision {name!r} must hold finite numbers > 0, got {value!r}")
        if type(self.failed) is not int or self.failed < 0:
            raise InputError(f"failed of revision {name!r} must be an integer >= 0, got {self.failed!r}")
        if not latencies and self.failed == 0:
            raise InputError(f"revision {name!r} has no attempt: give latencies_ms or failed > 0")
        if self.quality is not None and (isinstance(self.quality, bool)
                                         or not check_finite(self.quality, f"quality of revision {name!r}")):
            raise InputError(f"quality of revision {name!r} must be a finite number or None, got {self.quality!r}")
        object.__setattr__(self, "latencies_ms", tuple(float(value) for value in latencies))

    @property
    def attempted(self) -> int:
        """Every attempt: the successful ones and the failed ones."""
        return len(self.latencies_ms) + self.failed

    @property
    def valid(self) -> int:
        """The successful attempts."""
        return len(self.latencies_ms)

    @property
    def failure_rate(self) -> float:
        """Failed over attempted (the specification's denominator)."""
        return self.failed / self.attempted

    @property
    def median_ms(self) -> float | None:
        """``statistics.median`` of the successful latencies; ``None`` without any."""
        return statistics.median(self.latencies_ms) if self.latencies_ms else None

    @property
    def p95_ms(self) -> float | None:
        """Nearest-rank P95 of the successful latencies; ``None`` without any."""
        return nearest_rank(sorted(self.latencies_ms), 0.95) if self.latencies_ms else None

    def to_dict(self) -> dict:
        """A plain dict: the fields, then ``attempted``, ``valid``, ``failure_rate``, ``median_ms``, ``p95_ms``."""
        return {"revision": self.revision, "order": self.order, "latencies_ms": list(self.latencies_ms),
                "failed": self.failed, "quality": self.quality, "attempted": self.attempted, "valid": self.valid,
                "failure_rate": self.failure_rate, "median_ms": self.median_ms, "p95_ms": self.p95_ms}


@dataclass(frozen=True)
class ChangePoint:
    """A change in a benchmark's history, between two revisions, with the figures that found it.

    The figures compare the two neighbouring segments of the final segmentation: ``before`` runs
    from the previous change point (or the first revision) to ``previous_revision``, ``after``
    from ``revision`` to the revision before the next change point (or the last).

    Attributes:
        index: the position of ``revision`` in the series ordered by ``order``.
        revision: the first revision after the change (the one to blame, or to bisect towards).
        previous_revision: the last revision before it.
        label: one of :data:`LABELS`.
        direction: one of :data:`DIRECTIONS`: of the adverse signal when one is significant
            (more failures first), else of the favourable one.
        signals: the signals whose test is significant at ``alpha`` here (of :data:`SIGNALS`).
        ratio: median latency after over before, each the median of the segment's revision
            medians; ``None`` when a side has no successful attempt.
        ratio_low, ratio_high: the Hodges-Lehmann interval of that ratio at ``confidence``, over
            the revision medians (distribution-free; ``None`` where a side is too small for it).
        median_before_ms, median_after_ms: the two medians of revision medians.
        p_value: the latency test's p-value between the two segments, as if the change had been
            found by scanning them (the permutation test's, or the Bonferroni-corrected t-test's;
            see :func:`find_change_points`); ``None`` when a side has no successful attempt or
            the two hold fewer than three revisions with one.
        failure_p_value: the failure test's p-value (two-sided Fisher's exact test on the
            segments' failed and successful attempts, Bonferroni-corrected); ``None`` when the
            span has no failure or nothing but failures.
        failure_rate_before, failure_rate_after: failed over attempted in each segment.
        revisions_before, revisions_after: the revisions in each segment.
        attempts_before, attempts_after: the attempts in each segment (failed included).
        quality_before, quality_after: the mean quality of the segment's revisions that gave one.
        confidence: the confidence of the interval.
    """

    index: int
    revision: str
    previous_revision: str
    label: str
    direction: str
    signals: tuple[str, ...]
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    median_before_ms: float | None
    median_after_ms: float | None
    p_value: float | None
    failure_p_value: float | None
    failure_rate_before: float
    failure_rate_after: float
    revisions_before: int
    revisions_after: int
    attempts_before: int
    attempts_after: int
    quality_before: float | None = None
    quality_after: float | None = None
    confidence: float = _DEFAULTS["confidence"]

    def to_dict(self) -> dict:
        """A plain dict of the fields (``signals`` as a list)."""
        return {"index": self.index, "revision": self.revision, "previous_revision": self.previous_revision,
                "label": self.label, "direction": self.direction, "signals": list(self.signals),
                "ratio": self.ratio, "ratio_low": self.ratio_low, "ratio_high": self.ratio_high,
                "median_before_ms": self.median_before_ms, "median_after_ms": self.median_after_ms,
                "p_value": self.p_value, "failure_p_value": self.failure_p_value,
                "failure_rate_before": self.failure_rate_before, "failure_rate_after": self.failure_rate_after,
                "revisions_before": self.revisions_before, "revisions_after": self.revisions_after,
                "attempts_before": self.attempts_before, "attempts_after": self.attempts_after,
                "quality_before": self.quality_before, "quality_after": self.quality_after,
                "confidence": self.confidence}


def revision_samples(attempts: Iterable[Mapping[str, Any]], *, order_key: str = "order") -> list[RevisionSample]:
    """Group attempt records by revision into :class:`RevisionSample` records, ordered.

    Each record is the evaluator's attempt dict (``{"ok": bool, "latency_ms", "quality",
    "failure"}``, as ``ArmSummary.from_runs`` reads) plus ``revision`` and ``order_key``. A
    successful attempt must carry a finite ``latency_ms`` > 0; its ``quality``, where given,
    enters the revision's mean quality. A failed attempt counts in ``failed``. Every attempt of
    one revision must give the same order.

    Args:
        attempts: the attempt records of one benchmark (one set of conditions but the revision).
        order_key: the key holding the revision's order (``"order"``, ``"commit_time"``, ...).

    Returns:
        One sample per revision, sorted by order.

    Raises:
        InputError: a record is not a dict, lacks ``revision``, ``ok`` (a bool) or the order, a
            successful one lacks ``latency_ms``, or a revision's attempts disagree on its order
            (:class:`MissingField` for an absent key).
    """
    grouped: dict[str, dict] = {}
    for position, record in enumerate(attempts):
        if not isinstance(record, Mapping):
            raise RuleTypeError(f"attempt {position} must be a dict, got {type(record).__name__}")
        for key in ("revision", "ok", order_key):
            if key not in record:
                raise MissingField(f"attempt {position} has no {key!r}")
        if type(record["ok"]) is not bool:
            raise InputError(f"attempt {position}: ok must be True or False, got {record['ok']!r}")
        revision, order = record["revision"], record[order_key]
        entry = grouped.setdefault(revision, {"order": order, "latencies": [], "failed": 0, "qualities": []})
        if entry["order"] != order:
            raise InputError(f"the attempts of revision {revision!r} disagree on {order_key}: "
                             f"{entry['order']!r} and {order!r}")
        if record["ok"]:
            if "latency_ms" not in record:
                raise MissingField(f"attempt {position} (revision {revision!r}) is ok but has no 'latency_ms'")
            entry["latencies"].append(record["latency_ms"])
            if record.get("quality") is not None:
                entry["qualities"].append(record["quality"])
        else:
            entry["failed"] += 1
    samples = []
    for revision, entry in grouped.items():
        qualities = entry["qualities"]
        for value in qualities:
            if isinstance(value, bool) or not check_finite(value, f"quality of revision {revision!r}"):
                raise InputError(f"quality of revision {revision!r} must be a finite number, got {value!r}")
        samples.append(RevisionSample(revision, entry["order"], tuple(entry["latencies"]), entry["failed"],
                                      statistics.fmean(qualities) if qualities else None))
    return _ordered(samples)


def _ordered(samples) -> list[RevisionSample]:
    if samples is None or isinstance(samples, (str, bytes, Mapping)):
        raise RuleTypeError(f"samples must be a list of RevisionSample, got {type(samples).__name__}")
    samples = list(samples)
    for position, sample in enumerate(samples):
        if not isinstance(sample, RevisionSample):
            raise RuleTypeError(f"samples[{position}] must be a RevisionSample, got {type(sample).__name__}")
    ordered = sorted(samples, key=lambda sample: sample.order)
    for left, right in zip(ordered, ordered[1:]):
        if left.order == right.order:
            raise InputError(f"revisions {left.revision!r} and {right.revision!r} share order {left.order!r}: "
                             "the history needs one order per revision")
    seen: set[str] = set()
    for sample in ordered:
        if sample.revision in seen:
            raise InputError(f"revision {sample.revision!r} appears twice: give one sample per revision")
        seen.add(sample.revision)
    return ordered


# --- the statistics -------------------------------------------------------------------------------


def _lower_row_sums(rows: np.ndarray) -> np.ndarray:
    """``out[b, j] = sum_{i < j} |rows[b, j] - rows[b, i]|``, in blocks of about :data:`_BLOCK_BYTES`.

    Integer rows (the permutation test's quantised values) are summed exactly in int64.
    """
    batch, size = rows.shape
    exact = rows.dtype.kind == "i"
    out = np.empty((batch, size), dtype=np.int64 if exact else float)
    step = max(1, min(size, _BLOCK_BYTES // (rows.itemsize * batch * size)))
    for start in range(0, size, step):
        stop = min(size, start + step)
        block = np.subtract(rows[:, start:stop, None], rows[:, None, :stop])
        np.abs(block, out=block)
        block *= np.arange(stop)[None, :] < np.arange(start, stop)[:, None]
        out[:, start:stop] = block.sum(axis=2, dtype=out.dtype)
    return out


def energy_statistic(values) -> np.ndarray:
    """The E-Divisive statistic ``Q(tau)`` of every split of a series into ``[:tau]`` and ``[tau:]``.

    Method: Matteson and James (2014), equations (3)-(5), with exponent ``alpha = 1`` (their
    default, and Otava's): for ``X = values[:tau]`` (``n`` values) and ``Y = values[tau:]``
    (``m``),
    ``E = 2/(n m) sum|X_i - Y_j| - C(n,2)^-1 sum_{i<k}|X_i - X_k| - C(m,2)^-1 sum_{j<k}|Y_j - Y_k|``
    and ``Q = n m / (n + m) * E`` (a within term is 0 for a side of one value, as in Otava).
    Their divisive search also maximises over the end ``kappa`` of ``Y``; here ``kappa`` is the
    segment's end (binary segmentation: a change inside ``Y`` is found when ``Y`` is split in
    turn). The within sums come from prefix sums of pairwise distances: O(len^2) for all splits.

    Args:
        values: one series (1-D), or a batch of series of one length (2-D, one per row).

    Returns:
        ``Q`` for ``tau = 1 .. len - 1`` (column ``tau - 1``); empty for fewer than two values.
    """
    values = np.asarray(values)
    if values.dtype.kind not in "if":
        values = values.astype(float)
    rows = values[None, :] if values.ndim == 1 else values
    batch, size = rows.shape
    if size < 2:
        return np.empty((batch, 0))[0 if values.ndim == 1 else slice(None)]
    zeros = np.zeros((batch, 1))
    prefix = np.concatenate((zeros, np.cumsum(_lower_row_sums(rows), axis=1)), axis=1)
    suffix = np.concatenate((zeros, np.cumsum(_lower_row_sums(rows[:, ::-1]), axis=1)), axis=1)
    tau = np.arange(1, size)
    n, m = tau.astype(float), (size - tau).astype(float)
    within_x, within_y = prefix[:, tau], suffix[:, size - tau]
    cross = prefix[:, size:] - within_x - within_y
    mean_x = np.where(n >= 2, within_x / np.maximum(n * (n - 1) / 2, 1), 0.0)
    mean_y = np.where(m >= 2, within_y / np.maximum(m * (m - 1) / 2, 1), 0.0)
    q = n * m / (n + m) * (2 * cross / (n * m) - mean_x - mean_y)
    return q[0] if values.ndim == 1 else q


def _clip_outliers(centred: np.ndarray) -> np.ndarray:
    """Centred log medians clipped at ``+-`` :data:`CLIP_SIGMAS` robust standard deviations, as integers.

    The scale is ``sigma = 1.4826 * MAD`` of the segment (its standard deviation when the MAD is
    0). The result is ``round(clip(x, -k sigma, k sigma) / sigma * QUANTUM)`` as ``int16``
    (all zeros when ``sigma`` is 0: every revision equal): the E-Divisive statistic scales with
    its values, so dividing by ``sigma`` changes neither the split nor the p-value, and the
    integers make its sums exact (ties between shuffles are exact) and its distances two bytes.
    The rounding moves a value by at most ``sigma / 2000``. The transform is a function of the
    segment's values as a set, applied to each, so the permutation test stays exact: its
    shuffles permute the transformed values.
    """
    sigma = robust_sigma(centred)
    if sigma == 0:
        return np.zeros(centred.size, dtype=np.int16)
    clipped = np.clip(centred / sigma, -CLIP_SIGMAS, CLIP_SIGMAS)
    return np.rint(clipped * _QUANTUM).astype(np.int16)


def _permutation_p(values: np.ndarray, admissible: np.ndarray, observed: float, rng, permutations: int,
                   alpha: float) -> float:
    """Matteson and James's permutation p-value of an E-Divisive statistic ``observed``.

    Each of ``permutations`` shuffles of ``values`` gives the largest ``Q`` over the admissible
    splits; ``p = (1 + #{Q_perm >= observed}) / (permutations + 1)`` (ties count against the
    split). The draws stop as soon as that p-value is sure to exceed ``alpha`` (a segment with
    no change costs a few dozen shuffles); the value then returned, ``(1 + b) / (1 + r)`` after
    ``r`` draws with ``b`` exceedances, also exceeds ``alpha``, so no decision depends on the stop.
    """
    size = values.size
    cap = max(1, _BLOCK_BYTES // (values.itemsize * size * size))
    bar = observed - _EQUAL_TOL * (abs(observed) + 1e-300)
    exceeded = drawn = 0
    while drawn < permutations:
        batch = min(cap, max(_PERMUTATION_CHUNK, drawn), permutations - drawn)  # 50, 50, 100, 200, ...
        shuffled = rng.permuted(np.tile(values, (batch, 1)), axis=1)
        best = energy_statistic(shuffled)[:, admissible - 1].max(axis=1)
        exceeded += int(np.count_nonzero(best >= bar))
        drawn += batch
        if (1 + exceeded) / (permutations + 1) > alpha:
            break
    return (1 + exceeded) / (drawn + 1)


def _pooled_t(left: np.ndarray, right: np.ndarray) -> tuple[float, float]:
    """Two-sided Student's t-test with pooled variance: ``(p, mean(right) - mean(left))``.

    Pooled rather than Welch because a side may hold a single revision (the newest one): its
    variance then comes from the other side, which under the null of no change has the same
    (Otava's ``TTestSignificanceTester`` does the same, through ``ttest_ind_from_stats``). Needs
    ``n + m >= 3``. Sides without spread: ``p = 0`` when their means differ, ``1`` when equal.
    """
    n, m = left.size, right.size
    diff = float(right.mean() - left.mean())
    squares = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
    scale = max(float(np.abs(left).max()), float(np.abs(right).max()), 1.0)
    if squares <= (n + m) * (_EQUAL_TOL * scale) ** 2:
        return (1.0 if abs(diff) <= _EQUAL_TOL * scale else 0.0), diff
    df = n + m - 2
    t = diff / math.sqrt(squares / df * (1 / n + 1 / m))
    return float(min(1.0, 2 * _scipy_stats().t.sf(abs(t), df))), diff


def _binomial_lr(fails: np.ndarray, attempts: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The binomial likelihood-ratio statistic of a change at each ``k`` (Worsley 1983): 2 x log LR."""

    def loglik(f, a):
        rate = np.divide(f, a, out=np.zeros_like(f, dtype=float), where=a > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            failed = np.where(f > 0, f * np.log(np.where(rate > 0, rate, 1.0)), 0.0)
            passed = np.where(a - f > 0, (a - f) * np.log(np.where(rate < 1, 1 - rate, 1.0)), 0.0)
        return failed + passed

    cum_f = np.concatenate(([0], np.cumsum(fails))).astype(float)
    cum_a = np.concatenate(([0], np.cumsum(attempts))).astype(float)
    left_f, left_a = cum_f[ks], cum_a[ks]
    right_f, right_a = cum_f[-1] - left_f, cum_a[-1] - left_a
    return 2 * (loglik(left_f, left_a) + loglik(right_f, right_a) - loglik(cum_f[-1:], cum_a[-1:]))


class _Series:
    """The ordered samples as arrays (log medians, NaN without a success; failures; attempts) and the tests."""

    def __init__(self, samples: list[RevisionSample], settings: dict):
        self.samples = samples
        self.size = len(samples)
        self.logs = np.array([math.log(s.median_ms) if s.valid else math.nan for s in samples])
        self.fails = np.array([s.failed for s in samples], dtype=np.int64)
        self.attempts = np.array([s.attempted for s in samples], dtype=np.int64)
        self.timed = np.flatnonzero(~np.isnan(self.logs))  # positions with a latency
        self.settings = settings
        self._latency_p_values: dict[tuple[int, int, int], float] = {}  # (start, k, stop): p

    def positions(self, start: int, stop: int) -> np.ndarray:
        """The admissible split positions ``k`` (the first revision after) of ``[start, stop)``."""
        low = self.settings["min_segment"]
        return np.arange(start + low, stop - low + 1)

    # -- latency -------------------------------------------------------------------------------

    def _latency_span(self, start: int, stop: int):
        """``(ks, the test's values, tau of each k, admissible taus)`` of the span, or ``None``.

        The values are the centred log medians of the revisions with a latency (clipped and
        quantised by :func:`_clip_outliers` for the permutation test); ``tau`` counts those
        before ``k``.
        """
        ks = self.positions(start, stop)
        timed = self.timed[(self.timed >= start) & (self.timed < stop)]
        if timed.size < 3 or ks.size == 0:
            return None
        taus = np.searchsorted(timed, ks)  # revisions with a latency before k
        admissible = np.unique(taus[(taus >= 1) & (taus <= timed.size - 1)])
        if admissible.size == 0:
            return None
        values = self.logs[timed] - np.median(self.logs[timed])
        if self.settings["test"] == "permutation":
            values = _clip_outliers(values)
        return ks, values, taus, admissible

    def _latency_p(self, start: int, k: int, stop: int, values, admissible, tau: int, q) -> float:
        # the merge tests again the spans the split tested: the same test, the same seed, the same p
        key = (start, k, stop)
        if key not in self._latency_p_values:
            self._latency_p_values[key] = self._latency_p_uncached(start, stop, values, admissible, tau, q)
        return self._latency_p_values[key]

    def _latency_p_uncached(self, start: int, stop: int, values, admissible, tau: int, q) -> float:
        if self.settings["test"] == "t":
            p, _ = _pooled_t(values[:tau], values[tau:])
            return min(1.0, p * admissible.size)
        rng = np.random.default_rng([self.settings["seed"], start, stop])
        return _permutation_p(values, admissible, float(q[tau - 1]), rng, self.settings["permutations"],
                              self.settings["alpha"])

    def latency_split(self, start: int, stop: int) -> tuple[int, float] | None:
        """E-Divisive's split of ``[start, stop)`` and its p-value."""
        span = self._latency_span(start, stop)
        if span is None:
            return None
        ks, values, taus, admissible = span
        q = energy_statistic(values)
        tau = int(admissible[int(np.argmax(q[admissible - 1]))])  # ties: the earliest
        k = int(ks[np.flatnonzero(taus == tau)[0]])  # the earliest k giving that split
        return k, self._latency_p(start, k, stop, values, admissible, tau, q)

    def latency_test(self, start: int, k: int, stop: int) -> tuple[float, float] | None:
        """``(p, mean log difference)`` of the split at ``k``, as if found by scanning the span; or ``None``."""
        span = self._latency_span(start, stop)
        if span is None:
            return None
        _, values, _, admissible = span
        tau = int(np.searchsorted(self.timed[(self.timed >= start) & (self.timed < stop)], k))
        if tau not in admissible:
            return None
        q = energy_statistic(values)
        diff = float(values[tau:].mean() - values[:tau].mean())
        return self._latency_p(start, k, stop, values, admissible, tau, q), diff

    # -- failures ------------------------------------------------------------------------------

    def _failure_positions(self, start: int, stop: int) -> np.ndarray | None:
        ks = self.positions(start, stop)
        failed, attempted = int(self.fails[start:stop].sum()), int(self.attempts[start:stop].sum())
        return ks if ks.size > 0 and 0 < failed < attempted else None

    def failure_split(self, start: int, stop: int) -> tuple[int, float] | None:
        """The split of the span with the largest binomial likelihood ratio, and its p-value."""
        ks = self._failure_positions(start, stop)
        if ks is None:
            return None
        lr = _binomial_lr(self.fails[start:stop], self.attempts[start:stop], ks - start)
        k = int(ks[int(np.argmax(lr))])  # ties: the earliest
        return k, self.failure_test(start, k, stop)

    def failure_test(self, start: int, k: int, stop: int) -> float | None:
        """Fisher's exact test (two-sided) of the split at ``k``, Bonferroni-corrected; ``None`` if untestable."""
        ks = self._failure_positions(start, stop)
        if ks is None:
            return None
        left_f, left_a = int(self.fails[start:k].sum()), int(self.attempts[start:k].sum())
        right_f, right_a = int(self.fails[k:stop].sum()), int(self.attempts[k:stop].sum())
        table = [[left_f, left_a - left_f], [right_f, right_a - right_f]]
        p = float(_scipy_stats().fisher_exact(table, alternative="two-sided").pvalue)
        return min(1.0, p * ks.size)


# --- change points --------------------------------------------------------------------------------


def find_change_points(samples: Iterable[RevisionSample], *, alpha: float = _DEFAULTS["alpha"],
                       min_magnitude: float = _DEFAULTS["min_magnitude"],
                       min_segment: int = _DEFAULTS["min_segment"], min_support: int = _DEFAULTS["min_support"],
                       confidence: float = _DEFAULTS["confidence"], test: str = "permutation",
                       permutations: int = _DEFAULTS["permutations"],
                       seed: int = _DEFAULTS["seed"]) -> list[ChangePoint]:
    """The change points of one benchmark's history, oldest first.

    Method (Hunter's split and merge, Fleming et al. 2023, on revisions that keep their failures):

    - *Series.* One value per revision: the log of the median of its successful attempts. The
      revision, not the attempt, is the unit: attempts of one revision share its build and the
      machine's state when it ran, so they are not independent evidence of a change between
      revisions (five attempts of one revision on a busy machine are one outlier, not five); the
      median keeps a contended attempt from moving its revision; the log makes a factor a shift.
      A revision without a successful attempt has no latency and still counts its failures.
    - *Split.* For a segment ``[s, e)`` every split position ``k`` with at least ``min_segment``
      revisions on each side is scanned.

      Latency: the E-Divisive statistic (:func:`energy_statistic`, Matteson and James 2014)
      picks the split. With ``test="permutation"`` (the default) it is computed on the
      segment's centred log medians clipped at :data:`CLIP_SIGMAS` robust standard deviations,
      and its p-value is Matteson and James's: the share of ``permutations`` shuffles of those
      values (from a generator seeded by ``seed`` and the segment's bounds) whose best split
      scores at least as high. It accounts for the split being the best of many, and assumes
      only that without a change the revisions are exchangeable; clipped, an outlier revision
      (a busy machine) weighs at most 3.5 robust sigmas whatever its size, so the test
      keeps its level and most of its power under contention (``benchmarks/bench_history.py``,
      400 histories a cell, ``alpha = 0.01``: at most 1.0% of 20-revision noise histories with
      a change point under every noise model there; a 20% step with 10 revisions each side
      found 100%, 99% and 71% of the time when 0%, 5% and 20% of the attempts are contended).
      Its price: a change seen in few revisions cannot be told from outliers (a shuffle puts
      the ``r`` most extreme revisions at one end with probability about ``2 / C(n, r)``), so
      the newest revision alone is never significant in a short history: after 20 quiet
      revisions, one slow one is never found, two 89% of the time, three 99%. With ``test="t"``
      (Otava's ``TTestSignificanceTester``) the statistic is computed on the log medians and
      the p-value is Student's two-sided t-test (pooled) between the two sides times the
      number of distinct splits scanned (Bonferroni:
      uncorrected, the best of 19 splits passes a 5% test in 35% of 20-revision noise
      histories). It flags a single trailing revision (98%, as ``suspicious``) on a quiet
      machine, but assumes normal log medians: under heavy contention outlier revisions cost
      it power (37% for the same step) and its level (7.2% of noise histories at
      ``alpha = 0.01``).

      Failures: the binomial likelihood-ratio statistic (Worsley 1983) picks the split; its
      p-value is Fisher's exact two-sided test on the sides' failed and successful attempts
      (exact at five attempts per revision, where the chi-square approximation is poor) times
      the number of positions scanned (Bonferroni).

      The segment splits at the more significant of the two, if its p-value is at most
      ``alpha``; each half is split in turn until none splits. Each signal is tested at
      ``alpha``: a segment with no change splits by mistake with probability at most
      ``2 * alpha`` when it has failures to test, ``alpha`` otherwise.
    - *Merge.* Every change point is tested again (both signals, at its position, between its
      neighbours, as if found by scanning that span); while one is significant on neither
      signal, the weakest is removed and its neighbours are tested again (Otava's ``merge``).
      Unlike Otava, a significant change below ``min_magnitude`` is kept, as ``suspicious``.
    - *Label.* More failures (significant) is adverse, whatever the latency did; so is slower.
      ``regression``: an adverse change seen in at least ``min_support`` revisions on each side
      (for latency: revisions with a successful attempt), a slower one by a ratio of medians of
      at least ``1 + min_magnitude``. ``improvement``: no adverse change, and faster by a ratio
      of at most ``1 - min_magnitude``, or fewer failures, with that support. Anything else
      found is ``suspicious``: significant but smaller than declared, or seen in too few
      revisions to tell from an outlier revision or a flaky one.

    Deterministic: the same samples and arguments give the same change points (the shuffles
    come from a seeded generator; ties go to the earliest position).

    Cost: O(n^2) per segment for ``test="t"``; up to ``permutations`` times that for a
    significant segment with ``test="permutation"`` (a segment without a change stops after a
    few dozen shuffles). Measured on a shared 2-core machine: 20 revisions with a change 17 ms
    (3 ms without), 200 revisions 0.3 s, 1,000 revisions 3.5 s (0.1 s without); ``test="t"``
    under 25 ms at 1,000 revisions. For longer histories, analyse a window of recent revisions.

    Args:
        samples: the revisions (:class:`RevisionSample`), in any order; they are ordered by
            ``order``, which must be distinct, as the revision names must be.
        alpha: the level of each split test, in (0, 1); with ``test="permutation"`` at least
            ``1 / (permutations + 1)``.
        min_magnitude: the least relative change of the median latency that is a regression or
            an improvement, in [0, 1).
        min_segment: the fewest revisions on each side of a split, a positive integer.
        min_support: the fewest revisions on each side for a ``regression`` or an
            ``improvement``, a positive integer.
        confidence: the confidence of each ratio's interval, in (0, 1).
        test: the latency test, one of :data:`TESTS`.
        permutations: the shuffles of the permutation test, an integer >= 19.
        seed: the permutation test's seed, an integer >= 0.

    Returns:
        The change points, ordered by index; empty for fewer than two revisions or no change.

    Raises:
        PolicyError: an argument out of its range (the message names it and the range).
        InputError: a sample is not a :class:`RevisionSample`, or two share a revision or an order.
    """
    settings = {"alpha": alpha, "min_magnitude": min_magnitude, "min_segment": min_segment,
                "min_support": min_support, "confidence": confidence, "permutations": permutations,
                "seed": seed}
    check_settings(HISTORY_SETTINGS, settings, PolicyError)
    if test not in TESTS:
        raise PolicyError(f"test must be one of {list(TESTS)}, got {test!r}")
    if test == "permutation" and alpha < 1 / (permutations + 1):
        raise PolicyError(f"alpha must be >= 1 / (permutations + 1) = {1 / (permutations + 1):.6g} for the "
                          f"permutation test, got {alpha!r}: raise permutations or alpha")
    settings["test"] = test
    ordered = _ordered(samples)
    if len(ordered) < 2:
        return []
    series = _Series(ordered, settings)
    tests = _merge(series, _split(series))
    return [_change_point(series, bounds, found) for bounds, found in tests]


def permutation_floor(revisions: int, **settings: Any) -> float | None:
    """The permutation test's p-value for the clearest latency step ``revisions`` can show.

    Half the revisions at 100 ms, the rest at 200 ms, one attempt each: the split
    :func:`find_change_points` would test first, with its settings (``alpha``, ``min_segment``,
    ``permutations``, ``seed``). Above ``alpha``, no latency change can be found in a history of
    that length, whatever the data (a shuffle puts the slow half at one end too often); ``None``
    when the history is too short to split at all.
    """
    if type(revisions) is not int or revisions < 0:
        raise InputError(f"revisions must be an integer >= 0, got {revisions!r}")
    samples = [RevisionSample(f"r{i}", float(i), (100.0 if i < revisions // 2 else 200.0,), 0, None)
               for i in range(revisions)]
    series = _Series(samples, {**_DEFAULTS, **settings, "test": "permutation"})
    found = series.latency_split(0, revisions) if revisions >= 2 else None
    return None if found is None else found[1]


def _split(series: _Series) -> list[int]:
    """Recursive binary segmentation: the split positions, sorted."""
    alpha = series.settings["alpha"]
    splits, pending = [], [(0, series.size)]
    while pending:
        start, stop = pending.pop()
        found = [result for result in (series.latency_split(start, stop), series.failure_split(start, stop))
                 if result is not None and result[1] <= alpha]
        if not found:
            continue
        k, _ = min(found, key=lambda result: result[1])  # latency first on a tie (min is stable)
        splits.append(k)
        pending.extend([(start, k), (k, stop)])
    return sorted(splits)


def _test_at(series: _Series, start: int, k: int, stop: int) -> dict:
    latency = series.latency_test(start, k, stop)
    return {"p_value": None if latency is None else latency[0], "diff": None if latency is None else latency[1],
            "failure_p_value": series.failure_test(start, k, stop)}


def _strength(test: dict) -> float:
    return min(value if value is not None else 1.0 for value in (test["p_value"], test["failure_p_value"]))


def _merge(series: _Series, splits: list[int]) -> list[tuple[tuple, dict]]:
    """Otava's merge: test each change point between its neighbours, drop the weakest non-significant, repeat."""
    splits = list(splits)
    while splits:
        bounds = [(0 if i == 0 else splits[i - 1], k, series.size if i == len(splits) - 1 else splits[i + 1])
                  for i, k in enumerate(splits)]
        tests = [_test_at(series, *span) for span in bounds]
        weakest = max(range(len(tests)), key=lambda i: (_strength(tests[i]), -i))  # ties: the earliest
        if _strength(tests[weakest]) <= series.settings["alpha"]:
            return list(zip(bounds, tests))
        del splits[weakest]
    return []


def _change_point(series: _Series, bounds: tuple[int, int, int], test: dict) -> ChangePoint:
    settings = series.settings
    start, k, stop = bounds
    alpha, magnitude, support = settings["alpha"], settings["min_magnitude"], settings["min_support"]
    before, after = series.samples[start:k], series.samples[k:stop]
    medians_before = [s.median_ms for s in before if s.valid]
    medians_after = [s.median_ms for s in after if s.valid]
    median_before = statistics.median(medians_before) if medians_before else None
    median_after = statistics.median(medians_after) if medians_after else None
    ratio = low = high = None
    if medians_before and medians_after:
        ratio = median_after / median_before
        interval = hodges_lehmann_ratio(medians_before, medians_after, confidence=settings["confidence"])
        low, high = interval["ratio_ci_low"], interval["ratio_ci_high"]
    attempts_before = sum(s.attempted for s in before)
    attempts_after = sum(s.attempted for s in after)
    rate_before = sum(s.failed for s in before) / attempts_before
    rate_after = sum(s.failed for s in after) / attempts_after

    latency_significant = test["p_value"] is not None and test["p_value"] <= alpha
    failure_significant = test["failure_p_value"] is not None and test["failure_p_value"] <= alpha
    signals = tuple(name for name, significant in zip(SIGNALS, (latency_significant, failure_significant))
                    if significant)
    # the direction of latency: the ratio of medians, or the tested mean where the medians agree
    shift = math.log(ratio) if ratio is not None and ratio != 1 else (test["diff"] or 0.0)
    timed_support = min(len(medians_before), len(medians_after)) >= support
    all_support = min(len(before), len(after)) >= support
    # (direction, strong enough for a regression or an improvement) of each significant signal
    adverse, favourable = [], []
    if failure_significant and rate_after > rate_before:
        adverse.append(("more_failures", all_support))
    if latency_significant and shift > 0:
        adverse.append(("slower", timed_support and ratio >= 1 + magnitude))
    if latency_significant and shift < 0:
        favourable.append(("faster", timed_support and ratio <= 1 - magnitude))
    if failure_significant and rate_after < rate_before:
        favourable.append(("fewer_failures", all_support))
    strong_adverse = [direction for direction, strong in adverse if strong]
    strong_favourable = [direction for direction, strong in favourable if strong]
    if strong_adverse:
        label, direction = "regression", strong_adverse[0]
    elif adverse:
        label, direction = "suspicious", adverse[0][0]
    elif strong_favourable:
        label, direction = "improvement", strong_favourable[0]
    else:
        label, direction = "suspicious", favourable[0][0]
    return ChangePoint(
        index=k, revision=series.samples[k].revision, previous_revision=series.samples[k - 1].revision,
        label=label, direction=direction, signals=signals, ratio=ratio, ratio_low=low, ratio_high=high,
        median_before_ms=median_before, median_after_ms=median_after, p_value=test["p_value"],
        failure_p_value=test["failure_p_value"], failure_rate_before=rate_before, failure_rate_after=rate_after,
        revisions_before=len(before), revisions_after=len(after), attempts_before=attempts_before,
        attempts_after=attempts_after, quality_before=_mean_quality(before), quality_after=_mean_quality(after),
        confidence=settings["confidence"],
    )


def _mean_quality(samples) -> float | None:
    qualities = [s.quality for s in samples if s.quality is not None]
    return statistics.fmean(qualities) if qualities else None


# --- bisect ---------------------------------------------------------------------------------------

#: Verdicts :func:`bisect_next` reads, and what each means for the bisection: a decision's
#: ``accept`` (no regression: good) and ``reject`` (bad); ``None``, ``unknown`` and ``rerun``
#: (not yet decided: may be proposed); ``skip`` and ``blocked_by_correctness`` (cannot be judged:
#: never proposed, as ``git bisect skip``).
BISECT_VERDICTS = MappingProxyType({"accept": "good", "reject": "bad", None: "untested", "unknown": "untested",
                                    "rerun": "untested", "skip": "skipped", "blocked_by_correctness": "skipped"})
#: What a :class:`BisectStep` says: judge ``revision`` next; ``revision`` is the first bad one;
#: or only skipped revisions are left, so the first bad one is among ``candidates``.
BISECT_STATUSES = ("next", "found", "ambiguous")


@dataclass(frozen=True)
class BisectStep:
    """Where a bisection stands.

    Attributes:
        status: one of :data:`BISECT_STATUSES`.
        revision: the revision to judge next (``next``), the first bad revision (``found``), or
            ``None`` (``ambiguous``).
        good: the latest revision known good (no regression).
        bad: the earliest revision known bad.
        candidates: the revisions that may still be the first bad one, in order (``bad`` last).
        steps_left: the judgements still needed at most, without skips (0 once found).
    """

    status: str
    revision: str | None
    good: str
    bad: str
    candidates: tuple[str, ...]
    steps_left: int

    def to_dict(self) -> dict:
        """A plain dict of the fields (``candidates`` as a list)."""
        return {"status": self.status, "revision": self.revision, "good": self.good, "bad": self.bad,
                "candidates": list(self.candidates), "steps_left": self.steps_left}


def bisect_next(known, good: str, bad: str) -> BisectStep:
    """The next revision to judge between ``good`` and ``bad``, or the first bad revision.

    Method: ``git bisect`` on a linear history. The first bad revision lies after the latest
    revision judged good and at or before the earliest judged bad; of the revisions between
    them that can still be judged, the one nearest the middle (the earlier on a tie) halves the
    range, so at most ``ceil(log2(candidates))`` judgements remain. Every verdict already known
    narrows the range first, so a verdict is never asked twice.

    Args:
        known: the revisions in history order, oldest first, each with its verdict (one of
            :data:`BISECT_VERDICTS`): a sequence of ``(revision, verdict)`` pairs, or a mapping
            in that order. ``good`` and ``bad`` may be in it; where one is not, it is taken to
            stand just before the first (``good``) or just after the last (``bad``). Verdicts
            outside ``[good, bad]`` are not read.
        good: a revision with no regression (the older end).
        bad: a revision with the regression (the newer end).

    Returns:
        A :class:`BisectStep`.

    Raises:
        InputError: a malformed ``known`` (a revision twice, an empty name, an unknown verdict),
            ``good`` not before ``bad``, a verdict contradicting ``good`` or ``bad``, or verdicts
            that are not monotone (a revision accepted after one rejected), which no first bad
            revision explains: judge them again, or bisect a narrower range.
    """
    for name, value in (("good", good), ("bad", bad)):
        if not isinstance(value, str) or not value:
            raise InputError(f"{name} must be a non-empty revision name, got {value!r}")
    if good == bad:
        raise InputError(f"good and bad must be two revisions, got {good!r} for both")
    pairs = _known_pairs(known)
    names = [name for name, _ in pairs]
    index = {name: i for i, name in enumerate(names)}
    good_at = index.get(good, -1)
    bad_at = index.get(bad, len(names))
    if good_at >= bad_at:
        raise InputError(f"good ({good!r}) must come before bad ({bad!r}) in history order")
    if good_at >= 0 and pairs[good_at][1] == "bad":
        raise InputError(f"good ({good!r}) was judged a regression (reject)")
    if bad_at < len(names) and pairs[bad_at][1] == "good":
        raise InputError(f"bad ({bad!r}) was judged no regression (accept)")

    def name_at(i: int) -> str:
        return good if i < 0 else bad if i >= len(names) else names[i]

    inside = range(good_at + 1, bad_at)
    first_bad = next((i for i in inside if pairs[i][1] == "bad"), bad_at)
    last_good = max((i for i in inside if i < first_bad and pairs[i][1] == "good"), default=good_at)
    late_good = next((i for i in range(first_bad + 1, bad_at) if pairs[i][1] == "good"), None)
    if late_good is not None:
        raise InputError(f"revision {names[late_good]!r} was accepted after {names[first_bad]!r} was rejected: "
                         "the verdicts are not monotone; judge them again or bisect a narrower range")
    candidates = tuple(name_at(i) for i in range(last_good + 1, first_bad + 1))
    good_name, bad_name = name_at(last_good), name_at(first_bad)
    if len(candidates) == 1:
        return BisectStep("found", candidates[0], good_name, bad_name, candidates, 0)
    testable = [i for i in range(last_good + 1, first_bad) if pairs[i][1] == "untested"]
    if not testable:
        return BisectStep("ambiguous", None, good_name, bad_name, candidates, 0)
    # judging i leaves (last_good, i] if bad, (i, first_bad] if good: minimise the larger
    choice = min(testable, key=lambda i: (max(i - last_good, first_bad - i), i))
    return BisectStep("next", names[choice], good_name, bad_name, candidates,
                      math.ceil(math.log2(len(candidates))))


def _known_pairs(known) -> list[tuple[str, str]]:
    """``known`` as ``[(revision, meaning)]`` with meanings of :data:`BISECT_VERDICTS`."""
    if known is None or isinstance(known, (str, bytes)):
        raise RuleTypeError(f"known must be (revision, verdict) pairs or a mapping, got {type(known).__name__}")
    items = known.items() if isinstance(known, Mapping) else known
    pairs, seen = [], set()
    try:
        items = list(items)
    except TypeError:
        raise RuleTypeError(f"known must be (revision, verdict) pairs or a mapping, got "
                            f"{type(known).__name__}") from None
    for position, item in enumerate(items):
        try:
            name, verdict = item
        except (TypeError, ValueError):
            raise RuleTypeError(f"known[{position}] must be a (revision, verdict) pair, got {item!r}") from None
        if not isinstance(name, str) or not name:
            raise InputError(f"known[{position}]: the revision must be a non-empty string, got {name!r}")
        if name in seen:
            raise InputError(f"revision {name!r} appears twice in known")
        seen.add(name)
        try:
            meaning = BISECT_VERDICTS[verdict]
        except (KeyError, TypeError):
            allowed = ", ".join(repr(v) for v in BISECT_VERDICTS)
            raise InputError(f"the verdict of revision {name!r} must be one of {allowed}, "
                             f"got {verdict!r}") from None
        pairs.append((name, meaning))
    return pairs
