"""Repeated measurements and the regression decision (section Q4 of the specification), and the seed method.

The seed method is the specification's rule: its preconditions, its failure-rate and quality
checks, then the objective's own checks (for latency, the specification's P95 and improvement
checks; in ``non_regression`` mode the improvement check turned around for CI, beside it here).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

from ._checks import decided, failure_notes, failure_rate_check, precondition, quality_check, tail_check
from ._errors import RuleTypeError, check_finite, typed_inputs
from ._policy import DEFAULT_THRESHOLDS, SPEC_THRESHOLDS, Policy, check_settings
from ._scalars import to_python
from ._records import FASTEST_KEY, STEP_P10_KEY, ArmSummary, Check, Deciding, Decision, change_text, ms, pct
from ._registry import OBJECTIVES, Figure, Method, Objective
from ._stats import nearest_rank

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SEED",
    "evaluate_regression",
    "evaluate_seed_non_regression",
    "latency_checks",
    "percentile",
    "seed_rule",
    "summarize_repeated_runs",
]


@typed_inputs
def percentile(values, fraction: float):
    """Nearest-rank percentile: the smallest sample with at least ``fraction`` of samples at or below it.

    The rank is ``ceil(n * fraction)`` (1-based, at least 1), as in the specification; the
    result is always one of the samples, never an interpolation.

    Args:
        values: latency samples, each finite and > 0.
        fraction: in [0, 1]; 0.95 gives the P95.

    Raises:
        ValueError: ``values`` is empty, ``fraction`` is outside [0, 1], or a sample is not a
            finite number > 0.
    """
    if values is None:
        values = []
    try:
        values = list(values)
    except TypeError:
        raise RuleTypeError(f"values must be a list of numbers, got {type(values).__name__}") from None
    values, fraction = [to_python(value) for value in values], to_python(fraction)
    if not values or not check_finite(fraction, "fraction") or not 0 <= fraction <= 1:
        raise ValueError(
            f"values must be non-empty and fraction must be in the range [0, 1]; got "
            f"{len(values)} values and fraction={fraction!r}"
        )
    if not all(check_finite(value, "latency sample") and value > 0 for value in values):
        raise ValueError("latency samples must be finite numbers > 0")
    return nearest_rank(sorted(values), fraction)


@typed_inputs
def summarize_repeated_runs(runs: list) -> dict:
    """Summarise one arm's attempts; every attempt, failed or not, stays in the denominator.

    Args:
        runs: attempt records ``{"ok": bool, "latency_ms": ..., "quality": ..., "failure": ...}``;
            a successful attempt must carry ``latency_ms`` (finite, > 0) and ``quality`` (finite).

    Returns:
        ``attempted_runs``, ``valid_runs``, ``failed_runs``, ``failure_rate`` (failed over
        attempted; ``None`` with no attempts), ``failure_reasons`` (``"unspecified"`` where none
        was given), ``median_ms`` (``statistics.median``), ``p95_ms`` (nearest rank) and
        ``quality`` (mean); the last three are ``None`` without a successful attempt.

    Raises:
        ValueError: an attempt has no boolean ``ok``, or a latency or quality is out of range.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    return ArmSummary.from_runs(runs).to_dict()


def latency_checks(b: ArmSummary, c: ArmSummary, policy: Policy) -> tuple[list[Check], dict]:
    """The latency objective's checks after failure rate and quality (the specification's, exact).

    ``p95_ok``: candidate P95 over baseline P95 at most ``maximum_p95_ratio``. Then, with
    ``baseline_noise = (P95 - median) / median`` of the baseline (a teaching proxy for noise, not
    a confidence interval) and ``observed_improvement = (baseline median - candidate median) /
    baseline median``:

    - ``improvement`` mode, ``improvement_ok``: observed at least ``max(min_improvement, noise)``;
    - ``non_regression`` mode, ``no_regression_ok``: observed at least ``-max(margin, noise)``:
      the candidate's median may be slower by the margin or by the baseline's own noise,
      whichever is larger. The same proxy that sets a high bar for an improvement sets a lenient
      one for a regression; the P95 check, kept as the specification has it, is what makes this
      variant false-alarm on a noisy machine.
    """
    noise = (b.p95_ms - b.median_ms) / b.median_ms
    observed = (b.median_ms - c.median_ms) / b.median_ms
    tail = tail_check(b, c, policy.maximum_p95_ratio)
    if policy.mode == "improvement":
        required = max(policy.min_improvement, noise)
        figures = {"candidate": c.median_ms, "baseline": b.median_ms, "observed": observed,
                   "required": required, "noise": noise}
        main = Check.build("improvement_ok", observed >= required, figures,
                           lambda f: _improvement_text(f, latency_words(b.latency_key)))
    else:
        required = -max(policy.margin, noise)
        figures = {"candidate": c.median_ms, "baseline": b.median_ms, "observed": observed,
                   "required": required, "noise": noise, "margin": policy.margin}
        main = Check.build("no_regression_ok", observed >= required, figures,
                           lambda f: _no_regression_text(f, latency_words(b.latency_key)))
    return [tail, main], {"baseline_noise": noise, "required_improvement": required,
                          "observed_improvement": observed, "p95_ratio": tail.figures["ratio"]}


def latency_words(latency_key: str) -> str:
    """How the seed method's messages name the figure they compare: ``"median"`` (of ``latency_ms``),
    ``"median uncontended latency"``, ``"median fastest step"`` or ``"median 10th-percentile step"``, by
    the arms' ``latency_key``."""
    return {"uncontended_latency_ms": "median uncontended latency", FASTEST_KEY: "median fastest step",
            STEP_P10_KEY: "median 10th-percentile step"}.get(
        latency_key, "median")


def _improvement_text(f, what: str = "median") -> str:
    return (f"{what} {ms(f['candidate'])} against baseline {ms(f['baseline'])} is "
            f"{change_text(1 - f['observed'])}; required an improvement of {pct(f['required'])} (the larger of "
            "min_improvement and "
            f"baseline noise {pct(f['noise'])})")


def _no_regression_text(f, what: str = "median") -> str:
    return (f"{what} {ms(f['candidate'])} against baseline {ms(f['baseline'])} is "
            f"{change_text(1 - f['observed'])}; the least improvement allowed is {pct(f['required'])} "
            "(minus the larger of margin "
            f"and baseline noise {pct(f['noise'])})")


def seed_rule(b: ArmSummary, c: ArmSummary, policy: Policy, objective: Objective, *, look=None,
              max_looks=None, previous_fraction=None) -> Decision:
    """The specification's rule on any objective: preconditions, failure rate, quality, the objective's checks.

    Any failed check rejects; the looks of a sequential comparison change nothing here (the
    specification's rule has no error rate to spend). The specification's order is kept
    exactly: a candidate that failed every attempt gets ``rerun`` (``insufficient_valid_runs``,
    the first precondition), where the statistical methods reject it; the decision's notes
    (its ``messages``, so the report) say that the candidate failed every attempt. Comparisons
    are exact, as in the specification (see ``_checks``).
    """
    labels = {"method": "seed", "mode": policy.mode, "objective": objective.name, "notes": failure_notes(b, c)}
    reason = precondition(b, c, policy.min_valid_runs, policy.maximum_failure_rate)
    if reason is not None:
        return Decision("rerun", reason, b, c, deciding=Deciding(), **labels)
    checks = [failure_rate_check(b, c, policy.maximum_failure_rate), quality_check(b, c, policy.quality_tolerance)]
    own, figures = objective.checks(b, c, policy)
    figures = {**figures, "maximum_failure_rate": policy.maximum_failure_rate,
               "maximum_p95_ratio": policy.maximum_p95_ratio}
    if policy.mode == "non_regression":
        figures["margin"] = policy.margin
    made = decided(b, c, checks + own, figures=figures, **labels)
    return dataclasses.replace(made, deciding=_seed_deciding(objective, figures))


def _seed_deciding(objective: Objective, figures: Mapping) -> Deciding:
    """The seed method's deciding figures: on latency, the ratio of the medians and the bar it was held to
    (``1 - required_improvement``); no interval, no test (a suite refuses it); on another objective, none."""
    if objective.name != "latency" or figures.get("observed_improvement") is None:
        return Deciding()
    return Deciding(ratio=1 - figures["observed_improvement"], boundary=1 - figures["required_improvement"])


#: The seed method's entry in the method registry.
SEED = Method(
    "seed", seed_rule,
    figures=(Figure("baseline_noise", "noise proxy"), Figure("required_improvement", "required improvement"),
             Figure("observed_improvement", "observed improvement")),
    objectives=None,
    help="the specification's rule, exact",
    describe=lambda s: (f"noise proxy {_fmt(s.get('baseline_noise'))}, required improvement "
                        f"{_fmt(s.get('required_improvement'))}, observed {_fmt(s.get('observed_improvement'))}"),
    statistical=False,
)


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _summaries(baseline_runs, candidate_runs, metrics: Iterable[str] = ()) -> tuple[ArmSummary, ArmSummary]:
    return ArmSummary.from_runs(baseline_runs, metrics), ArmSummary.from_runs(candidate_runs, metrics)


@typed_inputs
def evaluate_regression(
    baseline_runs: list,
    candidate_runs: list,
    min_valid_runs: int = 5,
    min_improvement: float = 0.05,
    quality_tolerance: float = 0.01,
    maximum_failure_rate: float = 0.0,
    maximum_p95_ratio: float = 1.05,
) -> dict:
    """Decide accept, reject or rerun for a candidate against its baseline (the specification's rule).

    In order: both arms need ``min_valid_runs`` successful attempts (else ``rerun``,
    ``insufficient_valid_runs``); the baseline's failure rate may not exceed
    ``maximum_failure_rate`` (else ``rerun``, ``unreliable_baseline``). Then four checks, each
    with its own flag: the candidate's failure rate, its quality (at least the baseline's less
    ``quality_tolerance``), its P95 (at most ``maximum_p95_ratio`` times the baseline's) and its
    median improvement, which must reach ``max(min_improvement, baseline_noise)`` where
    ``baseline_noise = (P95 - median) / median`` of the baseline: a teaching proxy for noise, not
    a confidence interval. Any failed check rejects.

    Args:
        baseline_runs, candidate_runs: attempt records (see :func:`summarize_repeated_runs`).
        min_valid_runs: a positive int.
        min_improvement: in [0, 1).
        quality_tolerance: >= 0.
        maximum_failure_rate: in [0, 1].
        maximum_p95_ratio: >= 1.

    Returns:
        ``baseline`` and ``candidate`` summaries, ``decision`` and ``reason``; once the checks
        ran also ``failure_rate_ok``, ``quality_ok``, ``p95_ok``, ``improvement_ok``,
        ``failed_checks``, ``baseline_noise``, ``required_improvement``,
        ``observed_improvement``, ``maximum_failure_rate``, ``maximum_p95_ratio`` and
        ``p95_ratio``.

    Raises:
        ValueError: a threshold is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    thresholds = dict(min_valid_runs=min_valid_runs, min_improvement=min_improvement,
                      quality_tolerance=quality_tolerance, maximum_failure_rate=maximum_failure_rate,
                      maximum_p95_ratio=maximum_p95_ratio)
    check_settings(SPEC_THRESHOLDS, thresholds, ValueError)
    b, c = _summaries(baseline_runs, candidate_runs)
    decision = seed_rule(b, c, Policy(**thresholds), OBJECTIVES["latency"])
    return decision.to_dict(labels=(), messages=False, advice=False, deciding=False)


@typed_inputs
def evaluate_seed_non_regression(baseline_runs: list, candidate_runs: list, *, margin: float = 0.05,
                                 **thresholds) -> dict:
    """The specification's rule turned around for CI: the candidate may not be slower than ``margin``.

    Method: :func:`evaluate_regression` exactly (its preconditions, its early ``rerun``
    answers, its failure-rate, quality and P95 checks, its noise proxy), with the improvement
    check replaced by ``no_regression_ok`` (see :func:`latency_checks`): the candidate's median
    may be slower than the baseline's by the margin or by the baseline's own ``(P95 - median) /
    median``, whichever is larger.

    Args:
        baseline_runs, candidate_runs: attempt records (see :func:`summarize_repeated_runs`).
        margin: the slowdown allowed, a finite number >= 0 (0.05: 5% slower).
        **thresholds: as for :func:`evaluate_regression` (``min_improvement`` is validated, not used).

    Returns:
        :func:`evaluate_regression`'s keys with ``no_regression_ok`` in place of
        ``improvement_ok``, ``required_improvement = -max(margin, baseline_noise)``, plus
        ``method`` (``"seed"``), ``mode`` (``"non_regression"``) and ``margin``.

    Raises:
        ValueError: a threshold is out of range, or an attempt record is invalid.
        KeyError: a successful attempt misses ``latency_ms`` or ``quality``.
    """
    policy = Policy(mode="non_regression", margin=_margin(margin), **thresholds)
    b, c = _summaries(baseline_runs, candidate_runs)
    decision = seed_rule(b, c, policy, OBJECTIVES["latency"])
    result = decision.to_dict(labels=("method", "mode"), messages=False, advice=False, deciding=False)
    result.setdefault("margin", margin)
    return result


def _margin(margin):
    """``margin`` itself: a missing one (``None``) is an error here, not the default."""
    if margin is None:
        raise RuleTypeError("margin must be a real number, got NoneType None")
    return margin
