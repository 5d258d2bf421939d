"""How a decision is made, validated once: :class:`Policy` and the :class:`Setting` behind each knob.

In the style of MLflow's ``MetricThreshold`` (validated on construction, data rather than code)
and httpx's ``Timeout`` (related settings in one object). Every default is written here once;
the rules, the evaluator, the harness, the command line (its options and their help) and the
``MLproject`` defaults (a test checks they agree) read it from here.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from ._errors import PolicyError
from ._scalars import to_python
from ._settings import (_OPTIONS, DEFAULT_THRESHOLDS, LATENCIES, LATENCY_KEYS, MODES, POLICY_SETTINGS,  # noqa: F401
                        SPEC_THRESHOLDS, STEP_FIGURES, Setting, check_settings)

# The settings live in the leaf ``_settings`` (the registries and records import them from there,
# so that nothing imports this module back); they are exported here as before.
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

class Policy:
    """Everything a decision is made with: method, mode, objective, margin, levels and thresholds.

    Validated on construction (messages name the field and its range) and immutable. The
    thresholds are the specification's five plus those of every registered objective; unknown
    names are refused.

    Every argument left out (or ``None``) takes its default; the names given are :attr:`given`,
    so that a decision of a recorded comparison fills the others from how the comparison was
    planned (``evaluate_group``), as it does for options left off the command line.

    Args:
        method: a registered method (``seed``, the default; ``robust``, ...).
        mode: ``improvement`` (the default) or ``non_regression``.
        objective: a registered objective (``latency``, the default; ``memory``, ``throughput``, ...).
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

    __slots__ = ("method", "mode", "objective", "margin", "alpha", "confidence", "latency", "_thresholds", "_given")

    def __init__(self, *, method: str | None = None, mode: str | None = None, objective: str | None = None,
                 margin: float | None = None, alpha: float | None = None, confidence: float | None = None,
                 latency: str | None = None, **thresholds: Any):
        from ._registry import METHODS, OBJECTIVES, threshold_settings

        given = frozenset(name for name, value in (("method", method), ("mode", mode), ("objective", objective),
                                                   ("margin", margin), ("alpha", alpha), ("confidence", confidence),
                                                   ("latency", latency), *thresholds.items()) if value is not None)
        method = "seed" if method is None else method
        mode = "improvement" if mode is None else mode
        objective = "latency" if objective is None else objective
        options = {"margin": to_python(margin), "alpha": to_python(alpha), "confidence": to_python(confidence)}
        for name, value in options.items():
            if isinstance(value, bool):  # True is no margin of 1.0
                raise PolicyError(f"{name} must be a number, got {value!r}")
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
        set_(self, "_given", given)

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

    @property
    def given(self) -> frozenset[str]:
        """The options its maker decided (named and not ``None``); the others are defaults."""
        return self._given

    def replace(self, **changes: Any) -> "Policy":
        """A new, validated policy with ``changes`` applied (given beside those this one was given)."""
        new = Policy(**{**self.options(), **changes})
        reset = {name for name, value in changes.items() if value is None}  # back to its default: not given
        return new._deciding((self._given - reset) | {name for name, value in changes.items() if value is not None})

    def settled(self) -> "Policy":
        """This policy with every option decided: judged as it is, nothing filled in from a recorded
        comparison (what a comparison's own decision is made by). Not validated again."""
        return self._deciding(frozenset(self.options()))

    def _deciding(self, given: frozenset) -> "Policy":
        new = object.__new__(Policy)
        for slot in Policy.__slots__:
            object.__setattr__(new, slot, object.__getattribute__(self, slot))
        object.__setattr__(new, "_given", frozenset(given))
        return new

    def __eq__(self, other) -> bool:
        return isinstance(other, Policy) and self.options() == other.options()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.options().items())))

    def __reduce__(self):
        # pickled by its options (a suite entry travels to a Ray node): the slots are read-only
        return _from_options, (self.options(), sorted(self._given))

    def __repr__(self) -> str:
        return "Policy(" + ", ".join(f"{key}={value!r}" for key, value in self.options().items()) + ")"



def _plugin_hint(kind: str) -> str:
    """Where a plugin's entries come from (a policy made where a plugin is installed, unpickled where not)."""
    return (f" (a plugin's {kind} is registered in a process by installing its package there: entry points "
            f"'mlflow_perfgate.{kind}s')")


def _from_options(options: dict, given=None) -> Policy:
    policy = Policy(**options)
    return policy if given is None else policy._deciding(frozenset(given))
