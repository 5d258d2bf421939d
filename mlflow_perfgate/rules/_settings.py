"""The knobs of a decision, a leaf of the rules: :class:`Setting`, the modes, the latencies judged,
the specification's thresholds and the decision options, with their defaults and ranges.

Every default is written here once (``Policy`` and the registries read them, and import nothing
back): the rules, the evaluator, the harness, the command line (its options and their help) and
the ``MLproject`` defaults (a test checks they agree) read it through :mod:`._policy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ._errors import PolicyError, check_finite

__all__ = [
    "DEFAULT_THRESHOLDS",
    "LATENCIES",
    "LATENCY_KEYS",
    "MODES",
    "POLICY_SETTINGS",
    "SPEC_THRESHOLDS",
    "STEP_FIGURES",
    "Setting",
    "check_settings",
]

#: The questions a comparison can ask: the specification's (is the candidate faster by at least
#: ``min_improvement``?) and CI's (is the candidate at most ``margin`` slower?).
MODES = ("improvement", "non_regression")
#: Which latency of an attempt the rules judge, and the attempt record's key for it: ``raw``, the
#: median of every measured step (``latency_ms``, the specification's); ``uncontended``, the
#: median of the quiet steps (``uncontended_latency_ms``: those whose run-queue wait share is at
#: most the workloads' bound), where an attempt has it; ``fastest``, the attempt's fastest measured
#: step (``fastest_step_ms``: the step least disturbed by a busy neighbour, which only adds time;
#: every successful attempt must have it); ``p10``, the Harrell-Davis estimate of the 10th
#: percentile of its measured steps (``step_p10_ms``, ``_stats.step_quantile``: the fastest few
#: steps averaged, steadier than the fastest one; every successful attempt must have it). The
#: policy's default stays ``raw``, the specification's; ``compare``'s is ``p10`` (``harness.configure``;
#: the noise lab's figures for the others are in ``docs/explanation/evidence.md``).
LATENCY_KEYS = MappingProxyType({"raw": "latency_ms", "uncontended": "uncontended_latency_ms",
                                 "fastest": "fastest_step_ms", "p10": "step_p10_ms"})
LATENCIES = tuple(LATENCY_KEYS)
#: The figures of an attempt's measured steps that answer the user's question, whatever latency
#: option estimates the typical step: the typical step (``latency_ms``, the median of the steps),
#: the mean step (``step_mean_ms``: measured time over steps, what throughput is) and the step
#: tail (``step_p95_ms``, the nearest-rank P95 of the steps). A decision judges each of them
#: (``_guards``); the latter two exist where the attempts were logged with their step times.
STEP_FIGURES = MappingProxyType({"typical": "latency_ms", "mean": "step_mean_ms", "tail": "step_p95_ms"})


@dataclass(frozen=True)
class Setting:
    """One numeric knob of a decision: its name, default, range and help.

    Attributes:
        name: the keyword argument, the MLflow param and (with dashes) the CLI option.
        default: the value when none is given.
        help: what it means, for ``--help`` and the docs.
        integer: an ``int`` (``True``/``False`` refused), else any real number.
        low, high: the bounds; ``None`` for none.
        low_open, high_open: whether the bound itself is excluded.
    """

    name: str
    default: float | int
    help: str
    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def range_text(self) -> str:
        """The allowed values in words: ``a positive integer``, ``in [0, 1)``, ``>= 1``."""
        if self.integer and self.low == 1 and self.high is None:
            return "a positive integer"
        if self.low is not None and self.high is not None:
            return (f"in the range {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "a finite number"

    def in_range(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def check(self, value: Any, error: type[Exception] = PolicyError) -> Any:
        """``value`` if it is allowed, else ``error`` naming the field and the range."""
        check_settings((self,), {self.name: value}, error)
        return value


def check_settings(settings: Iterable[Setting], values: Mapping[str, Any],
                   error: type[Exception] = PolicyError) -> None:
    """Check values against their settings, in the specification's order.

    First each integer setting (its type and range), then the finiteness of every real one
    (a value that is no number is a :class:`RuleTypeError` naming it), then their ranges: so a
    NaN anywhere is reported before a range elsewhere, as ``evaluate_regression`` does.
    """
    settings = [setting for setting in settings if setting.name in values]
    for setting in settings:
        value = values[setting.name]
        if setting.integer and (type(value) is not int or not setting.in_range(value)):
            raise error(f"{setting.name} must be {setting.range_text()}, got {value!r}")
    reals = [setting for setting in settings if not setting.integer]
    for setting in reals:
        if not check_finite(values[setting.name], setting.name):
            raise error(f"{setting.name} must be finite, got {values[setting.name]!r}")
    for setting in reals:
        if not setting.in_range(values[setting.name]):
            raise error(f"{setting.name} must be {setting.range_text()}, got {values[setting.name]!r}")


#: The specification's thresholds of ``evaluate_regression``, with its defaults and ranges.
SPEC_THRESHOLDS = (
    Setting("min_valid_runs", 5, "Successful attempts each arm needs", integer=True, low=1),
    Setting("min_improvement", 0.05, "Least median improvement", low=0, high=1, high_open=True),
    Setting("quality_tolerance", 0.01, "Allowed quality drop", low=0),
    Setting("maximum_failure_rate", 0.0, "Highest candidate (and baseline) failure rate", low=0, high=1),
    Setting("maximum_p95_ratio", 1.05, "Highest candidate/baseline P95", low=1),
)
#: The specification's defaults for :func:`evaluate_regression`.
DEFAULT_THRESHOLDS = MappingProxyType({setting.name: setting.default for setting in SPEC_THRESHOLDS})

#: The decision options beyond the thresholds.
POLICY_SETTINGS = (
    Setting("margin", 0.05, "Slowdown tolerated in non_regression mode (0.05 = 5%)", low=0),
    Setting("alpha", 0.02, "One-sided significance level of the statistical methods", low=0, high=1,
            low_open=True, high_open=True),
    Setting("confidence", 0.90, "Confidence of the statistical methods' ratio interval", low=0, high=1,
            low_open=True, high_open=True),
)
_OPTIONS = {setting.name: setting for setting in POLICY_SETTINGS}
