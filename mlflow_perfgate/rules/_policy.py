"""How a decision is made, validated once: :class:`Policy` and the :class:`Setting` behind each knob.

In the style of MLflow's ``MetricThreshold`` (validated on construction, data rather than code)
and httpx's ``Timeout`` (related settings in one object). Every default is written here once;
the rules, the evaluator, the harness, the command line (its options and their help) and the
``MLproject`` defaults (a test checks they agree) read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ._errors import PolicyError, check_finite
from ._scalars import to_python

__all__ = [
    "DEFAULT_THRESHOLDS",
    "LATENCIES",
    "LATENCY_KEYS",
    "STEP_FIGURES",
    "MODES",
    "POLICY_SETTINGS",
    "Policy",
    "SPEC_THRESHOLDS",
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
#: default stays ``raw``, the specification's (the noise lab's figures for the others are in the
#: README).
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


class Policy:
    """Everything a decision is made with: method, mode, objective, margin, levels and thresholds.

    Validated on construction (messages name the field and its range) and immutable. The
    thresholds are the specification's five plus those of every registered objective; unknown
    names are refused.

    Args:
        method: a registered method (``seed``, ``robust``, ...).
        mode: ``improvement`` or ``non_regression``.
        objective: a registered objective (``latency``, ``memory``, ``throughput``, ...).
        margin: the slowdown tolerated in ``non_regression`` mode, >= 0.
        alpha: the one-sided level of the statistical methods, in (0, 1).
        confidence: the confidence of their ratio interval, in (0, 1).
        latency: which latency of each attempt is judged (:data:`LATENCY_KEYS`): ``raw``
            (default: ``latency_ms``, every measured step) or ``uncontended``
            (``uncontended_latency_ms``, the quiet steps' median, where an attempt has it; an
            attempt without it is judged on ``latency_ms`` and counts as contended, and when
            more than half of an arm's successful attempts are contended the answer is
            ``rerun``, reason ``contention``) or ``fastest`` (``fastest_step_ms``, the fastest
            measured step; a successful attempt without it is an error) or ``p10``
            (``step_p10_ms``, the 10th percentile of the measured steps, Harrell-Davis; a
            successful attempt without it is an error).
        **thresholds: any threshold setting by name (``min_valid_runs=10``); ``None`` means
            the default.

    Raises:
        PolicyError: an unknown name, an unknown method, mode or objective, a combination the
            registered methods do not judge, or a value out of its range.
    """

    __slots__ = ("method", "mode", "objective", "margin", "alpha", "confidence", "latency", "_thresholds")

    def __init__(self, *, method: str = "seed", mode: str = "improvement", objective: str = "latency",
                 margin: float | None = None, alpha: float | None = None, confidence: float | None = None,
                 latency: str | None = None, **thresholds: Any):
        from ._registry import METHODS, OBJECTIVES, threshold_settings

        options = {"margin": to_python(margin), "alpha": to_python(alpha), "confidence": to_python(confidence)}
        options = {name: _OPTIONS[name].default if value is None else value for name, value in options.items()}
        thresholds = {name: to_python(value) for name, value in thresholds.items()}
        if objective not in OBJECTIVES:
            raise PolicyError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}{_plugin_hint('objective')}")
        if method not in METHODS:
            raise PolicyError(f"method must be one of {list(METHODS)}, got {method!r}{_plugin_hint('method')}")
        if mode not in MODES:
            raise PolicyError(f"mode must be one of {list(MODES)}, got {mode!r}")
        latency = "raw" if latency is None else latency
        if latency not in LATENCIES:
            raise PolicyError(f"latency must be one of {list(LATENCIES)}, got {latency!r}")
        settings = threshold_settings()
        unknown = sorted(set(thresholds) - set(settings))
        if unknown:
            raise PolicyError(f"unknown thresholds {unknown}; expected some of {list(settings)}")
        values = {name: setting.default for name, setting in settings.items()}
        values.update({name: value for name, value in thresholds.items() if value is not None})
        check_settings(settings.values(), values)
        check_settings(POLICY_SETTINGS, options)
        OBJECTIVES[objective].check_method(METHODS[method], mode)
        set_ = object.__setattr__
        set_(self, "method", method)
        set_(self, "mode", mode)
        set_(self, "objective", objective)
        set_(self, "latency", latency)
        for name, value in options.items():
            set_(self, name, value)
        set_(self, "_thresholds", MappingProxyType(values))

    def __setattr__(self, name, value):
        raise AttributeError(f"a Policy is immutable; use policy.replace({name}=...)")

    def __getattr__(self, name: str):
        # thresholds read as attributes: policy.min_valid_runs
        thresholds = object.__getattribute__(self, "_thresholds")
        try:
            return thresholds[name]
        except KeyError:
            raise AttributeError(f"Policy has no setting {name!r}") from None

    @property
    def thresholds(self) -> Mapping[str, Any]:
        """Every threshold by name, defaults filled in."""
        return self._thresholds

    @property
    def latency_key(self) -> str:
        """The attempt record's key of the latency judged: ``latency_ms``, ``uncontended_latency_ms``,
        ``fastest_step_ms`` or ``step_p10_ms``."""
        return LATENCY_KEYS[self.latency]

    def spec_thresholds(self) -> dict:
        """The five arguments of ``evaluate_regression``."""
        return {setting.name: self._thresholds[setting.name] for setting in SPEC_THRESHOLDS}

    def objective_thresholds(self) -> dict:
        """The specification's thresholds and the objective's own (what its decision run logs)."""
        from ._registry import OBJECTIVES

        names = [setting.name for setting in SPEC_THRESHOLDS] + [s.name for s in OBJECTIVES[self.objective].thresholds]
        return {name: self._thresholds[name] for name in names}

    def options(self) -> dict:
        """Every constructor argument, as a dict (``Policy(**policy.options())`` is equal)."""
        return {"method": self.method, "mode": self.mode, "objective": self.objective, "margin": self.margin,
                "alpha": self.alpha, "confidence": self.confidence, "latency": self.latency, **self._thresholds}

    def replace(self, **changes: Any) -> "Policy":
        """A new, validated policy with ``changes`` applied."""
        return Policy(**{**self.options(), **changes})

    def __eq__(self, other) -> bool:
        return isinstance(other, Policy) and self.options() == other.options()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.options().items())))

    def __reduce__(self):
        # pickled by its options (a suite entry travels to a Ray node): the slots are read-only
        return _from_options, (self.options(),)

    def __repr__(self) -> str:
        return "Policy(" + ", ".join(f"{key}={value!r}" for key, value in self.options().items()) + ")"



def _plugin_hint(kind: str) -> str:
    """Where a plugin's entries come from (a policy made where a plugin is installed, unpickled where not)."""
    return (f" (a plugin's {kind} is registered in a process by installing its package there: entry points "
            f"'mlflow_perfgate.{kind}s')")


def _from_options(options: dict) -> Policy:
    return Policy(**options)
