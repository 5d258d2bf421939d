"""The records a decision is made of: an arm's summary, one check, the decision itself.

Each is frozen and built once: a rule summarises each arm once (:class:`ArmSummary`), builds
each check once with the figures it used and a message that reads those figures
(:class:`Check`), and returns one :class:`Decision`. ``to_dict()`` gives the plain dicts of the
specification and of the first release, key for key.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from ._errors import InputError, MissingField, RuleTypeError, check_finite
from ._settings import LATENCY_KEYS, STEP_FIGURES
from ._scalars import plain_flag, plain_mapping, plain_record, to_python
from ._stats import nearest_rank

__all__ = [
    "ArmSummary",
    "Check",
    "Decision",
    "Deciding",
    "REASONS",
    "STATUS_WORDS",
    "VERDICTS",
    "headline",
    "interval_text",
    "level_text",
    "ms",
    "pct",
    "plain",
    "ratio_text",
]

#: The four answers, in the order of the gate's exit codes' meaning.
VERDICTS = ("accept", "reject", "rerun", "blocked_by_correctness")
#: The record key of an attempt's fastest measured step (a policy's ``latency="fastest"``).
FASTEST_KEY = LATENCY_KEYS["fastest"]
#: The record key of the 10th percentile of an attempt's measured steps (``latency="p10"``).
STEP_P10_KEY = LATENCY_KEYS["p10"]
#: Latency keys every successful record must carry when judged (figures of the steps: no
#: fallback), with the policy's name of each.
STEP_FIGURE_KEYS = {LATENCY_KEYS[option]: option for option in ("fastest", "p10")}
#: How a check's outcome reads at the start of its message.
STATUS_WORDS = MappingProxyType({True: "ok", False: "FAILED", None: "INCONCLUSIVE"})
#: One line per reason a rule or the evaluator can give.
REASONS = MappingProxyType({
    "insufficient_valid_runs": "an arm has fewer successful attempts than min_valid_runs",
    "unreliable_baseline": "the baseline's own failure rate exceeds maximum_failure_rate",
    "unreliable_candidate": "the candidate's failures exceed maximum_failure_rate even if the attempts still "
                            "needed all succeed",
    "attempts_in_progress": "some attempts are still running; evaluate again when they end",
    "declared_thresholds_checked": "every declared threshold was checked",
    "inconclusive": "the interval cannot yet tell whether the declared threshold is met",
    "run_invalid": "an attempt failed its correctness probe",
    "attempts_not_synced": "attempts of this group are still in the local journal, not in MLflow",
    "contention": "more than half of an arm's successful attempts have no uncontended latency (more than half "
                  "their steps waited for a CPU, or contention was not measured); run them on a quieter machine",
})
#: Headlines of the verdicts that do not depend on the objective (accept's comes from the objective).
_HEADLINES = MappingProxyType({
    "reject": "REJECT: the candidate fails at least one declared check",
    "rerun": "RERUN: the evidence is not enough to decide",
    "blocked_by_correctness": "BLOCKED BY CORRECTNESS: fix the invalid runs before any performance reading",
})


def headline(verdict: str, accept_text: str | None = None) -> str:
    """The headline of a verdict; ``accept_text`` (the objective's, for its mode) for an accept."""
    if verdict == "accept":
        return accept_text or "ACCEPT: every declared check passed"
    return _HEADLINES.get(verdict, verdict.upper())


def pct(value) -> str:
    """A fraction as a percentage with one decimal, ``n/a`` for ``None``."""
    return "n/a" if value is None else f"{value * 100:.1f}%"


def change_text(ratio) -> str:
    """A latency ratio candidate / baseline in words: ``an improvement of 8.0%`` (at most 1), ``a slowdown
    of 36.0%`` (below 2), ``4.65x slower`` (2 or more: never a negative improvement beyond 100%)."""
    if ratio is None or not math.isfinite(ratio):
        return "a change of n/a"
    if ratio <= 1:
        return f"an improvement of {pct(1 - ratio)}"
    if ratio < 2:
        return f"a slowdown of {pct(ratio - 1)}"
    return f"{ratio:.3g}x slower"


def plain(value, digits: int = 4) -> str:
    """A number as a person reads it: ``digits`` significant digits, never an exponent.

    ``1034.5`` -> ``"1,034"``, ``12345.6`` -> ``"12,346"``, ``88.4`` -> ``"88.4"``, ``100.0`` ->
    ``"100"``, ``0.0000123`` -> ``"0.0000123"``; integers as they are (with thousands
    separators); ``n/a`` for ``None``; NaN and infinities as Python writes them, and magnitudes
    below 1e-9 or from 1e15 on with an exponent.
    """
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if not -9 <= magnitude < 15:  # beyond what anyone reads digit by digit: an exponent after all
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def ms(value) -> str:
    """A latency in ms with four significant digits (:func:`plain`), ``n/a`` for ``None``."""
    return "n/a" if value is None else f"{plain(value)} ms"


def ratio_text(value) -> str:
    """A bound of a ratio interval, ``unbounded`` for ``None``."""
    return "unbounded" if value is None else f"{value:.3f}"


def level_text(confidence) -> str:
    """A confidence as a percentage that never rounds to ``0%`` or ``100%``: ``90%``, ``99.996%``.

    Enough decimals to show the smaller of the confidence and its complement to two significant
    digits; trailing zeros dropped. ``n/a`` for ``None``.
    """
    if confidence is None:
        return "n/a"
    percent = confidence * 100
    smaller = min(percent, 100 - percent)
    digits = 0 if smaller <= 0 else max(0, 1 - math.floor(math.log10(smaller)))
    text = f"{percent:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text}%"


def interval_text(low, high, confidence) -> str:
    """A ratio interval in words, saying which side is unbounded (``None``) rather than ``n/a``.

    ``90% interval 0.912 to 0.988``; ``90% interval unbounded below, up to 0.988``; ``90%
    interval from 0.912, unbounded above``; ``90% interval unbounded on both sides: too few
    attempts for a bound``.
    """
    level = level_text(confidence)
    if low is None and high is None:
        return f"{level} interval unbounded on both sides: too few attempts for a bound"
    if low is None:
        return f"{level} interval unbounded below, up to {ratio_text(high)}"
    if high is None:
        return f"{level} interval from {ratio_text(low)}, unbounded above"
    return f"{level} interval {ratio_text(low)} to {ratio_text(high)}"


def _frozen(mapping: Mapping | None) -> Mapping:
    """A read-only copy, its numpy, pandas and torch scalars made Python numbers (``_scalars.to_python``)."""
    return MappingProxyType(plain_mapping(mapping))


@dataclass(frozen=True)
class ArmSummary:
    """One arm's attempts, summarised once (the specification's ``summarize_repeated_runs``).

    Attributes:
        attempted_runs, valid_runs, failed_runs: every attempt, the successful ones, the failed ones.
        failure_rate: failed over attempted; ``None`` without attempts.
        failure_reasons: each failed attempt's ``failure`` (``"unspecified"`` where none was given).
        median_ms: ``statistics.median`` of the successful attempts' latencies.
        p95_ms: their nearest-rank P95.
        quality: the mean quality of the successful attempts.
        latencies: the successful attempts' latencies, in run order (the raw samples of the tests).
        ok_indices: the index in the run list of each successful attempt.
        pairs: the ABBA round of each successful attempt (``None`` where it was not recorded).
        values: for each objective metric asked for, the successful attempts' values.
        figures: per-metric summaries (``median_<m>``, ``p5_<m>``, ``p95_<m>``).
        latency_key: the record key the latencies were read from: ``latency_ms`` (the
            specification's), ``uncontended_latency_ms`` (a policy's ``latency="uncontended"``)
            or ``fastest_step_ms`` (``latency="fastest"``) or ``step_p10_ms`` (``latency="p10"``).
        contended_runs: with ``uncontended_latency_ms``, how many successful attempts lacked it
            and are judged on their ``latency_ms`` instead (each still counts once); ``None``
            with ``latency_ms``, ``fastest_step_ms`` and ``step_p10_ms`` (no fallback).
    """

    attempted_runs: int
    valid_runs: int
    failed_runs: int
    failure_rate: float | None
    failure_reasons: tuple[str, ...]
    median_ms: float | None
    p95_ms: float | None
    quality: float | None
    latencies: tuple[float, ...] = ()
    ok_indices: tuple[int, ...] = ()
    pairs: tuple[int | None, ...] = ()
    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    figures: Mapping[str, float | None] = field(default_factory=dict)
    latency_key: str = "latency_ms"
    contended_runs: int | None = None
    step_values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a summary built by hand from numpy figures holds Python numbers all the same
        for name in ("failure_rate", "median_ms", "p95_ms", "quality"):
            object.__setattr__(self, name, to_python(getattr(self, name)))
        for name in ("latencies", "pairs"):
            object.__setattr__(self, name, tuple(to_python(value) for value in getattr(self, name)))
        object.__setattr__(self, "values", _frozen({key: tuple(to_python(v) for v in values)
                                                    for key, values in dict(self.values).items()}))
        object.__setattr__(self, "figures", _frozen(self.figures))
        object.__setattr__(self, "step_values", _frozen({key: tuple(to_python(v) for v in values)
                                                         for key, values in dict(self.step_values).items()}))

    @classmethod
    def from_runs(cls, runs, metrics: Iterable[str] = (), latency_key: str = "latency_ms") -> "ArmSummary":
        """Summarise attempt records ``{"ok": bool, "latency_ms", "quality", "failure"}``.

        The specification's checks and errors, exactly: a record without a boolean ``ok`` is a
        ``ValueError``; a successful one without ``latency_ms`` or ``quality`` a ``KeyError``;
        a latency that is not finite and > 0, or a non-finite quality, a ``ValueError``.
        Each metric in ``metrics`` must then be on every successful record, finite and > 0.

        With ``uncontended_latency_ms``, each successful attempt's latency is that key's value
        where the record has one (finite and > 0, else an ``InputError``), else its
        ``latency_ms`` (counted in :attr:`contended_runs`). With ``fastest_step_ms`` or
        ``step_p10_ms``, every successful record must have it (a :class:`MissingField`
        otherwise: a fastest step and a median of steps are not one figure). The specification's
        functions always read ``latency_ms``.
        """
        runs = [plain_record(run) for run in runs]  # numpy, pandas and torch scalars as Python numbers
        if any(type(_ok_flag(run)) is not bool for run in runs):
            raise ValueError("every run must declare a boolean 'ok' (True or False)")
        ok_indices = tuple(index for index, run in enumerate(runs) if run["ok"])
        successful = [runs[index] for index in ok_indices]
        failed = [run for run in runs if not run["ok"]]
        if any("latency_ms" not in run or "quality" not in run for run in successful):
            raise KeyError("a successful run must contain 'latency_ms' and 'quality'")
        latencies = [run["latency_ms"] for run in successful]
        qualities = [run["quality"] for run in successful]
        if not all(check_finite(value, "latency_ms") and value > 0 for value in latencies):
            raise ValueError("latency_ms of a successful run must be a finite number > 0")
        contended = None
        if latency_key != "latency_ms":
            chosen = [run.get(latency_key) for run in successful]
            if not all(value is None or (check_finite(value, latency_key) and value > 0) for value in chosen):
                raise InputError(f"{latency_key} of a successful run must be a finite number > 0")
            missing = sum(value is None for value in chosen)
            if latency_key in STEP_FIGURE_KEYS and missing:
                older = (" (attempts logged with step times by an mlflow-perfgate without the p10 figure have "
                         "their fastest step: those can be judged with latency='fastest')"
                         if latency_key == STEP_P10_KEY else "")
                raise MissingField(
                    f"{missing} of {len(chosen)} successful runs lack {latency_key!r}, which "
                    f"latency={STEP_FIGURE_KEYS[latency_key]!r} judges (the harness logs it from the measured steps; "
                    f"record it with step times, or judge with latency='raw', --latency raw){older}")
            contended = missing if latency_key not in STEP_FIGURE_KEYS else None
            latencies = [raw if value is None else value for raw, value in zip(latencies, chosen)]
        if not all(check_finite(value, "quality") for value in qualities):
            raise ValueError("quality must be finite and scored by the same rule on every run")
        values, figures = {}, {}
        for key in metrics:
            if any(key not in run for run in successful):
                raise MissingField(f"a successful run must contain {key!r} for this objective")
            metric_values = tuple(run[key] for run in successful)
            if not all(check_finite(value, key) and value > 0 for value in metric_values):
                raise InputError(f"{key} of a successful run must be a finite number > 0")
            values[key] = metric_values
            figures.update(_metric_figures(metric_values, key))
        return cls(
            step_values=_step_values(successful),
            attempted_runs=len(runs),
            valid_runs=len(successful),
            failed_runs=len(failed),
            failure_rate=len(failed) / len(runs) if runs else None,
            failure_reasons=tuple(run.get("failure", "unspecified") for run in failed),
            median_ms=statistics.median(latencies) if successful else None,
            p95_ms=nearest_rank(sorted(latencies), 0.95) if successful else None,
            quality=statistics.mean(qualities) if successful else None,
            latencies=tuple(latencies),
            ok_indices=ok_indices,
            pairs=tuple(_pair(run) for run in successful),
            values=_frozen(values),
            figures=_frozen(figures),
            latency_key=latency_key,
            contended_runs=contended,
        )

    def step_figure(self, key: str) -> float | None:
        """The median over the successful attempts of one of :data:`STEP_FIGURES` (``None`` without it)."""
        values = self.step_values.get(key)
        return statistics.median(values) if values else None

    def to_dict(self) -> dict:
        """The specification's summary dict (plus the per-metric figures, when any, and
        ``latency_key`` and ``contended_runs`` when the latencies are not ``latency_ms``; and
        ``typical_step_ms``, ``mean_step_ms`` and ``step_p95_ms``, each the median over the
        attempts, when the records carry the mean step)."""
        judged = {} if self.latency_key == "latency_ms" else {"latency_key": self.latency_key}
        if self.contended_runs is not None:
            judged["contended_runs"] = self.contended_runs
        if STEP_FIGURES["mean"] in self.step_values:
            judged.update(typical_step_ms=self.step_figure(STEP_FIGURES["typical"]),
                          mean_step_ms=self.step_figure(STEP_FIGURES["mean"]),
                          step_p95_ms=self.step_figure(STEP_FIGURES["tail"]))
        return {
            "attempted_runs": self.attempted_runs,
            "valid_runs": self.valid_runs,
            "failed_runs": self.failed_runs,
            "failure_rate": self.failure_rate,
            "failure_reasons": list(self.failure_reasons),
            "median_ms": self.median_ms,
            "p95_ms": self.p95_ms,
            "quality": self.quality,
            **self.figures,
            **judged,
        }


def _step_values(successful: list[dict]) -> dict[str, tuple[float, ...]]:
    """Each of :data:`STEP_FIGURES` that every successful record carries, in run order (finite and > 0,
    else an :class:`InputError`); none without a successful record."""
    found = {}
    for key in STEP_FIGURES.values():
        values = [run.get(key) for run in successful]
        if not values or any(value is None for value in values):
            continue
        if not all(check_finite(value, key) and value > 0 for value in values):
            raise InputError(f"{key} of a successful run must be a finite number > 0")
        found[key] = tuple(values)
    return found


def _ok_flag(run: Any):
    try:
        return run.get("ok")
    except AttributeError:
        raise RuleTypeError(f"each run must be a dict, got {type(run).__name__}") from None


def _pair(run: dict) -> int | None:
    pair = run.get("pair")
    return pair if type(pair) is int else None


def _metric_figures(values: tuple, key: str) -> dict:
    if not values:
        return {f"median_{key}": None, f"p5_{key}": None, f"p95_{key}": None}
    ordered = sorted(values)
    return {f"median_{key}": statistics.median(values), f"p5_{key}": nearest_rank(ordered, 0.05),
            f"p95_{key}": nearest_rank(ordered, 0.95)}


@dataclass(frozen=True)
class Check:
    """One declared check: its flag, the figures it compared and a message that reads them.

    Attributes:
        name: ``failure_rate_ok``, ``quality_ok``, ``p95_ok``, ``improvement_ok``, ...
        passed: ``True`` passed, ``False`` failed (the decision rejects), ``None`` undecided
            (the decision is a ``rerun`` unless another check failed).
        message: ``"<ok|FAILED|INCONCLUSIVE>: ..."``, built from ``figures`` alone.
        figures: the candidate value, the baseline value, the threshold and whatever else the
            check computed, by name.
    """

    name: str
    passed: bool | None
    message: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # np.False_ is not False: a flag is made True, False or None here, or refused
        object.__setattr__(self, "passed", plain_flag(self.passed, f"check {self.name!r} passed"))
        object.__setattr__(self, "figures", _frozen(self.figures))

    @classmethod
    def build(cls, name: str, passed: bool | None, figures: Mapping[str, Any],
              text: Callable[[Mapping[str, Any]], str]) -> "Check":
        """A check whose message is ``text(figures)`` after the status word."""
        figures, passed = _frozen(figures), plain_flag(passed, f"check {name!r} passed")
        return cls(name, passed, f"{STATUS_WORDS[passed]}: {text(figures)}", figures)


def _ratio_or_none(value: Any, name: str) -> float | None:
    value = to_python(value)
    if value is None:
        return None
    if isinstance(value, bool) or not check_finite(value, name) or value <= 0:
        raise InputError(f"{name} must be a finite ratio > 0 or None, got {value!r}")
    return float(value)


def _p_or_none(value: Any, name: str) -> float | None:
    value = to_python(value)
    if value is None:
        return None
    if isinstance(value, bool) or not check_finite(value, name) or not 0 <= value <= 1:
        raise InputError(f"{name} must be a p-value in [0, 1] or None, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Deciding:
    """The deciding method's figures under fixed names: what every reader of a decision reads.

    A method's own figures (:attr:`Decision.figures`) keep its own names; these say the same
    answer in the names the suite's error control, the report's headline, the pytest plugin's
    table, the decision run's headline metrics and ``decisions()`` read, whatever the method.

    Attributes:
        ratio: the method's estimate of the judged ratio, candidate over baseline, on the figure
            it judged (``latency="p10"``: the attempts' p10 step), ``None`` where it computed none
            (a precondition answered first).
        ratio_ci_low, ratio_ci_high: its interval (``None``: none, or unbounded on that side).
        confidence: the interval's two-sided level at this look (``None``: no interval).
        p_value: the p-value of the method's main test as its report prints it (the paired
            method's signed-rank test, the robust method's Mann-Whitney test: one-sided, towards a
            faster candidate in improvement mode and a slower one in non_regression mode);
            ``None`` for a method without a test (``seed``).
        test: the name of that test (``"Wilcoxon signed-rank (exact)"``), ``None`` without one.
        boundary: the ratio the main check holds the estimate to: ``1 - min_improvement`` in
            improvement mode, ``1 + margin`` in non_regression mode.
        boundary_p_value: the one-sided p-value of "the ratio lies beyond ``boundary`` on the
            failing side" (above it): the test the interval inverts, small when the main check's
            failure is significant; ``None`` where the method gives none.
        tests: for each statistical check of the decision (the main check and the tail test, or
            a plugin's own), the p-value of the test its failure rests on, by check name: the
            family a suite's error control adjusts. Empty: the method gives none, and a suite
            refuses it.
        typical_ratio, typical_ci_low, typical_ci_high: the typical step's ratio (the median of the
            steps, candidate over baseline) and its interval at ``confidence``, by the method's own
            estimator: what a user means by "faster". The judged figure's own where the method
            judged the typical step; ``None`` where the attempts carry no step times.
        mean_ratio: the mean step's ratio (measured time over steps: throughput), by the same estimator.
    """

    ratio: float | None = None
    ratio_ci_low: float | None = None
    ratio_ci_high: float | None = None
    confidence: float | None = None
    p_value: float | None = None
    test: str | None = None
    boundary: float | None = None
    boundary_p_value: float | None = None
    tests: Mapping[str, float] = field(default_factory=dict)
    typical_ratio: float | None = None
    typical_ci_low: float | None = None
    typical_ci_high: float | None = None
    mean_ratio: float | None = None

    def __post_init__(self) -> None:
        for name in ("ratio", "ratio_ci_low", "ratio_ci_high", "typical_ratio", "typical_ci_low", "typical_ci_high",
                     "mean_ratio"):
            object.__setattr__(self, name, _ratio_or_none(getattr(self, name), name))
        boundary = to_python(self.boundary)  # the seed's bar, 1 - max(min_improvement, noise), may fall below 0
        if boundary is not None and (isinstance(boundary, bool) or not check_finite(boundary, "boundary")):
            raise InputError(f"boundary must be a finite number or None, got {boundary!r}")
        object.__setattr__(self, "boundary", None if boundary is None else float(boundary))
        for name in ("confidence", "p_value", "boundary_p_value"):
            object.__setattr__(self, name, _p_or_none(getattr(self, name), name))
        if self.confidence is not None and not 0 < self.confidence < 1:
            raise InputError(f"confidence must lie strictly between 0 and 1, got {self.confidence!r}")
        for low, high, what in ((self.ratio_ci_low, self.ratio_ci_high, "ratio"),
                                (self.typical_ci_low, self.typical_ci_high, "typical step's")):
            if low is not None and high is not None and low > high * (1 + 1e-12):
                raise InputError(f"the {what} interval's low end {low!r} lies above its high end {high!r}")
        if self.test is not None and not isinstance(self.test, str):
            raise RuleTypeError(f"test must be a string or None, got {type(self.test).__name__}")
        if not isinstance(self.tests, Mapping):
            raise RuleTypeError(f"tests must map check names to p-values, got {type(self.tests).__name__}")
        tests = {}
        for check, p in self.tests.items():
            if not isinstance(check, str) or not check:
                raise RuleTypeError(f"tests must be keyed by check names, got {check!r}")
            tests[check] = _p_or_none(p, f"the p-value of {check}")
            if tests[check] is None:
                raise InputError(f"the p-value of {check} must be a number in [0, 1], got None")
        object.__setattr__(self, "tests", MappingProxyType(tests))

    @property
    def improvement(self) -> float | None:
        """The share of the baseline's typical step the candidate saves (``1 - typical_ratio``; negative:
        slower), or of the judged figure (``1 - ratio``) where there is no typical step's estimate."""
        ratio = self.typical_ratio if self.typical_ratio is not None else self.ratio
        return None if ratio is None else 1 - ratio

    @property
    def judged_apart(self) -> bool:
        """Whether the judged figure's estimate lies outside the typical step's interval: the two moved
        apart by more than the typical step's own uncertainty (a p10 step that sped up more than the
        typical one, under contention), so the judged ratio is not the number to quote."""
        low, high = self.typical_ci_low, self.typical_ci_high
        if self.ratio is None or self.typical_ratio is None or (low is None and high is None):
            return False
        return (low is not None and self.ratio < low * (1 - 1e-9)) or \
            (high is not None and self.ratio > high * (1 + 1e-9))

    def to_dict(self) -> dict:
        """A plain dict of the fields, ``improvement`` and ``judged_apart`` beside them."""
        return {"ratio": self.ratio, "ratio_ci_low": self.ratio_ci_low, "ratio_ci_high": self.ratio_ci_high,
                "confidence": self.confidence, "p_value": self.p_value, "test": self.test,
                "boundary": self.boundary, "boundary_p_value": self.boundary_p_value, "tests": dict(self.tests),
                "typical_ratio": self.typical_ratio, "typical_ci_low": self.typical_ci_low,
                "typical_ci_high": self.typical_ci_high, "mean_ratio": self.mean_ratio,
                "improvement": self.improvement, "judged_apart": self.judged_apart}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Deciding":
        """The record of :meth:`to_dict`'s dict (``improvement`` and ``judged_apart`` are derived, and ignored)."""
        if not isinstance(data, Mapping):
            raise RuleTypeError(f"deciding figures must be a mapping, got {type(data).__name__}")
        names = ("ratio", "ratio_ci_low", "ratio_ci_high", "confidence", "p_value", "test", "boundary",
                 "boundary_p_value", "typical_ratio", "typical_ci_low", "typical_ci_high", "mean_ratio")
        return cls(**{name: data.get(name) for name in names}, tests=data.get("tests") or {})


@dataclass(frozen=True)
class Decision:
    """A rule's answer: the verdict, why, each check, the figures, and advice for a rerun.

    Attributes:
        verdict: ``accept``, ``reject``, ``rerun`` (or ``blocked_by_correctness``, the evaluator's).
        reason: a key of :data:`REASONS`.
        baseline, candidate: the arms' summaries.
        checks: the checks in the order they ran; empty when a precondition answered first.
        figures: the rule's figures beyond the checks' (``baseline_noise``, ``p_value``, ...),
            under the keys of the first release's dicts.
        method, mode, objective: how the decision was made.
        advice: ``recommended_attempts`` (attempts per arm that would likely settle a rerun) and
            ``contention`` (indices of flagged attempts per arm), where the rule gives them.
        companions: for an objective judged by several methods, each method's short answer and
            figures (``{"seed": {...}, "robust": {...}}``), whichever decided.
        notes: what the decision says beyond its checks, by name (the candidate failed every
            attempt; the paired method had no ABBA rounds and handed over to the robust one);
            each text starts with ``NOTE:`` and follows the checks' messages in :attr:`messages`.
        deciding: the deciding method's figures under fixed names (:class:`Deciding`), which
            every method's rule returns; ``None`` from a rule that gives none (its decisions show
            no ratio nor p-value in the headline, and a suite refuses them).
    """

    verdict: str
    reason: str
    baseline: ArmSummary
    candidate: ArmSummary
    checks: tuple[Check, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)
    method: str = "seed"
    mode: str = "improvement"
    objective: str = "latency"
    advice: Mapping[str, Any] = field(default_factory=dict)
    companions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    deciding: Deciding | None = None

    def __post_init__(self) -> None:
        if self.deciding is not None and not isinstance(self.deciding, Deciding):
            raise RuleTypeError(f"deciding must be a Deciding or None, got {type(self.deciding).__name__}")
        object.__setattr__(self, "figures", plain_mapping(self.figures))
        object.__setattr__(self, "advice", plain_mapping(self.advice))
        object.__setattr__(self, "companions", {name: plain_mapping(summary)
                                                for name, summary in (self.companions or {}).items()})

    @property
    def failed_checks(self) -> list[str]:
        """The names of the checks that failed, in order."""
        return [check.name for check in self.checks if check.passed is False]

    @property
    def messages(self) -> dict[str, str]:
        """``{check name: message}`` in the order of the checks, then the notes."""
        return {**{check.name: check.message for check in self.checks}, **self.notes}

    def check(self, name: str) -> Check | None:
        """The check of that name, or ``None`` when it did not run."""
        return next((check for check in self.checks if check.name == name), None)

    def to_dict(self, *, labels: Iterable[str] = ("objective", "method", "mode"), messages: bool = True,
                advice: bool = True, deciding: bool = True) -> dict:
        """The plain dict of the first release.

        Args:
            labels: which of ``objective``, ``method`` and ``mode`` to include.
            messages: include ``messages`` (the checks' texts).
            advice: include ``recommended_attempts`` and ``contention`` where the rule gave them.
            deciding: include ``deciding`` (:meth:`Deciding.to_dict`, or ``None``).

        Returns:
            ``baseline`` and ``candidate`` summaries, the labels, ``decision``, ``reason``; when
            the checks ran, each check's flag under its name and ``failed_checks``; the figures;
            the advice; ``messages`` (the checks' and the notes); and each companion under its
            method's name.
        """
        result = {"baseline": self.baseline.to_dict(), "candidate": self.candidate.to_dict()}
        for label in labels:
            result[label] = getattr(self, label)
        result["decision"], result["reason"] = self.verdict, self.reason
        if self.checks:
            result.update((check.name, check.passed) for check in self.checks)
            result["failed_checks"] = self.failed_checks
        result.update(self.figures)
        if advice:
            result.update(self.advice)
        if messages:
            result["messages"] = self.messages
        for name, summary in self.companions.items():
            result[name] = dict(summary)
        if deciding:
            result["deciding"] = None if self.deciding is None else self.deciding.to_dict()
        return result

