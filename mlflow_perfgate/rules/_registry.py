"""Registries of decision methods and objectives: each one is a single entry.

A method is its name, its rule function and the figures it logs; an objective is its metric,
direction, unit, thresholds, figures and checks. The command line's choices, the evaluator's
records, the decision run's metric names, the columns of ``decisions()`` and the report's rows
are all derived from these entries, so a new method or objective is one
:func:`register_method` / :func:`register_objective` call and touches no other file.

The built-in entries are declared here by name and loaded on first use, so that listing the
names (``--help``) imports no statistics library.

Plugins: an installed distribution adds entries through the entry-point groups
``mlflow_perfgate.methods`` and ``mlflow_perfgate.objectives``; each entry point names a
:class:`Method` (or :class:`Objective`), or a callable returning one, of the entry point's name.
They are loaded, and registered, the first time a registry is listed or looked up; one that fails
to load is left out with a warning naming it and its distribution.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ._errors import PolicyError
from ._settings import MODES, SPEC_THRESHOLDS, Setting

if TYPE_CHECKING:  # pragma: no cover
    from ._policy import Policy
    from ._records import ArmSummary, Check, Decision

__all__ = [
    "Figure",
    "METHODS",
    "Method",
    "OBJECTIVES",
    "Objective",
    "Registry",
    "register_method",
    "register_objective",
    "threshold_settings",
    "unregister_method",
    "unregister_objective",
]


@dataclass(frozen=True)
class Figure:
    """A number a method or an objective reports.

    Attributes:
        name: its key in the decision's dict.
        label: its name in the report (default: ``name``).
        unit: its unit in the report (``" ms"``, ``" MiB"``, ``""``).
        metric: the decision run's metric name; ``None`` for ``name``; ``""`` for none (a
            figure logged as a param, such as a level).
    """

    name: str
    label: str = ""
    unit: str = ""
    metric: str | None = None

    @property
    def metric_name(self) -> str:
        """The MLflow metric it is logged under ('' when it is not logged as a metric)."""
        return self.name if self.metric is None else self.metric


@dataclass(frozen=True)
class Method:
    """A decision method.

    Attributes:
        name: what ``--method`` takes.
        rule: ``rule(baseline, candidate, policy, objective, *, look=None, max_looks=None) ->
            Decision``, given each arm's :class:`ArmSummary` (built with the objective's metric),
            the :class:`Policy` and the :class:`Objective` entry.
        figures: what it reports beside the checks; each companion summary of a decision holds
            them, and the decision run logs those with a metric name.
        objectives: the objectives it judges; ``None`` for every objective (through the
            objective's own checks).
        modes: the modes it answers.
        help: one line for ``--help`` and the documentation.
        describe: one line for the report from its companion summary; default: its figures.
        boundary_p_value: ``boundary_p_value(baseline, candidate, boundary) -> p``: the one-sided
            p-value of "the latency ratio candidate / baseline exceeds ``boundary``" that its
            interval inverts (``rules.boundary_p_value``); optional: a suite reads each entry's
            p-values from its decision (:attr:`Decision.deciding`), and this function only for a
            result dict of the earlier release that lacks them.
        statistical: whether its decisions carry test p-values (:attr:`Deciding.tests`), which a
            suite's error control and ``history --bisect`` need. ``False`` (the seed method): a
            suite refuses it for a latency entry before anything runs. A plugin's method is taken
            at its word (default ``True``); a decision of it without them is refused when the
            suite is judged, naming the method.
        floor: ``floor(policy, attempts, looks_for) -> str | None``: why ``attempts`` per arm can
            never accept at the policy's levels (``looks_for`` as :func:`too_few_to_decide` takes
            it), or ``None``; ``compare`` refuses such a plan before it runs. ``None``: no floor.
    """

    name: str
    rule: Callable[..., "Decision"]
    figures: tuple[Figure, ...] = ()
    objectives: tuple[str, ...] | None = ("latency",)
    modes: tuple[str, ...] = MODES
    help: str = ""
    describe: Callable[[Mapping[str, Any]], str] | None = None
    boundary_p_value: Callable[["ArmSummary", "ArmSummary", float], float] | None = None
    floor: Callable[..., str | None] | None = None
    statistical: bool = True

    def judges(self, objective: str) -> bool:
        return self.objectives is None or objective in self.objectives


@dataclass(frozen=True)
class Objective:
    """What a comparison is judged on.

    Attributes:
        name: what ``--objective`` takes.
        metric: the attempt metric it needs beyond ``latency_ms`` and ``quality``
            (``peak_mem_mib``); ``None`` when it judges latency itself.
        direction: ``"lower"`` or ``"higher"`` is better.
        unit: the metric's unit (``ms``, ``MiB``, ``tok/s``).
        checks: ``checks(baseline, candidate, policy) -> (checks, figures)``: the objective's
            checks after the common failure-rate and quality checks (for the seed method, and
            any method that judges every objective), and the figures they computed.
        thresholds: its own threshold settings (``min_memory_reduction``); every policy accepts them.
        arm_figures: per-arm summary figures the decision run logs (``baseline_<name>``,
            ``candidate_<name>``) and the report shows as rows.
        figures: decision figures the decision run logs and the report shows.
        modes: the modes it answers.
        headlines: the accept headline for each mode.
        help: one line for ``--help`` and the documentation.
        label: the metric's name in words, for the plot's axis (``peak memory``); default the metric.
        measure: how an attempt measures ``metric`` when no attempt logs it by itself:
            ``measure(workload, facts) -> number | None``, called in the attempt's process after
            its measured steps and ``quality()``, with the live workload and a read-only mapping
            of what the attempt measured (``latency_ms``, ``step_times_ms``, ``quality``,
            ``tokens_per_step``, ``conditions``, ``device``). A comparison on this objective asks
            every attempt for it and logs it as the attempt run's metric ``metric``; ``None``
            leaves it out (a successful attempt without it cannot be judged), an exception or a
            value that is not a finite number > 0 fails the attempt with that reason. ``None``
            (the default): the figure is one attempts log already (``peak_mem_mib``,
            ``throughput_tok_s``, ``attempt_wall_s``).
    """

    name: str
    metric: str | None
    direction: str
    unit: str
    checks: Callable[["ArmSummary", "ArmSummary", "Policy"], tuple[list["Check"], dict]]
    thresholds: tuple[Setting, ...] = ()
    arm_figures: tuple[Figure, ...] = ()
    figures: tuple[Figure, ...] = ()
    modes: tuple[str, ...] = ("improvement",)
    headlines: Mapping[str, str] = field(default_factory=dict)
    help: str = ""
    label: str = ""
    measure: Callable[[Any, Mapping[str, Any]], Any] | None = None

    def __post_init__(self):
        if self.direction not in ("lower", "higher"):
            raise ValueError(f"direction must be 'lower' or 'higher', got {self.direction!r}")
        if self.measure is not None and (not self.metric or not callable(self.measure)):
            raise ValueError(f"objective {self.name!r}: measure must be a callable, and it needs a metric to log")

    @property
    def metric_label(self) -> str:
        """The metric in words (``label``), else its name."""
        return self.label or self.metric or "latency"

    @property
    def metrics(self) -> tuple[str, ...]:
        """The attempt metrics an arm summary needs for this objective."""
        return () if self.metric is None else (self.metric,)

    def check_method(self, method: Method, mode: str) -> None:
        """Raise :class:`PolicyError` unless ``method`` judges this objective in ``mode``."""
        if not method.judges(self.name) or mode not in self.modes or mode not in method.modes:
            judges = [name for name in METHODS if METHODS[name].judges(self.name)]
            raise PolicyError(
                f"the {self.name} objective is judged by the {' or '.join(judges)} method in "
                f"{' or '.join(self.modes)} mode; got method={method.name!r}, mode={mode!r}")


class Registry(Mapping):
    """Entries by name, in the order they were registered; built-ins load on first use, plugins
    (the entry points of ``entry_point_group``) on the first listing or lookup."""

    def __init__(self, kind: str, entry_point_group: str | None = None):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._entries: dict[str, Any] = {}
        self._declared: dict[str, tuple[str, str]] = {}
        self._plugins_loaded = entry_point_group is None
        #: plugin entry points that failed to load, by name: why
        self.plugin_errors: dict[str, str] = {}
        self._from_plugins: set[str] = set()

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # first: registering a plugin lists the registry
        try:
            from importlib.metadata import entry_points

            found = list(entry_points(group=self.entry_point_group))
        except Exception:  # noqa: BLE001 - a broken distribution's metadata: no plugins, as before
            return
        for point in found:
            where = getattr(getattr(point, "dist", None), "name", None) or point.value
            try:
                entry = point.load()
                if not isinstance(entry, _ENTRY_TYPES[self.kind]) and callable(entry):
                    entry = entry()
                if not isinstance(entry, _ENTRY_TYPES[self.kind]):
                    raise TypeError(f"it gave a {type(entry).__name__}, not a {_ENTRY_TYPES[self.kind].__name__}")
                if entry.name != point.name:
                    raise ValueError(f"its entry is named {entry.name!r}")
                (register_objective if self.kind == "objective" else self.register)(entry)
                self._from_plugins.add(entry.name)
            except Exception as exc:  # noqa: BLE001 - one broken plugin leaves the others and the built-ins
                self.plugin_errors[point.name] = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"mlflow_perfgate: the {self.kind} plugin {point.name!r} ({point.value}, from "
                              f"{where}) could not be loaded and is not available: {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=2)

    def require(self, name: str):
        """The entry named ``name``; a :class:`PolicyError` naming it (and where plugins come from) if
        this process has none (a policy made where a plugin is installed, judged where it is not)."""
        if name not in self:
            why = f" (its plugin failed to load: {self.plugin_errors[name]})" if name in self.plugin_errors else ""
            raise PolicyError(
                f"no {self.kind} named {name!r} is registered in this process{why}; known: {list(self)}. A plugin's "
                f"{self.kind} is registered by installing its package here (entry points "
                f"{self.entry_point_group!r}) or calling register_{self.kind}")
        return self[name]

    def in_every_process(self, name: str) -> bool:
        """Whether every process of this installation has the entry: a built-in or an installed plugin's,
        not one registered by hand here (a fresh interpreter, such as an attempt's child, lacks that)."""
        self._load_plugins()
        return name in self._declared or name in self._from_plugins

    def declare(self, name: str, target: str, help: str) -> None:
        """A built-in entry at ``module:attribute``, imported when first looked up."""
        self._declared[name] = (target, help)

    def register(self, entry) -> Any:
        """Add an entry; a second entry of the same name is refused."""
        if entry.name in self._declared or entry.name in self._entries:
            loaded = self._entries.get(entry.name)
            if loaded is not entry:
                raise ValueError(f"a {self.kind} named {entry.name!r} is already registered")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove a registered entry (built-ins stay)."""
        if name in self._declared:
            raise ValueError(f"the built-in {self.kind} {name!r} cannot be removed")
        self._entries.pop(name)

    def help(self, name: str) -> str:
        """The entry's one-line help, without loading a declared built-in."""
        self._load_plugins()
        if name in self._declared and name not in self._entries:
            return self._declared[name][1]
        return self[name].help

    def __getitem__(self, name: str):
        self._load_plugins()
        if name not in self._entries and name in self._declared:
            module, _, attribute = self._declared[name][0].partition(":")
            self._entries[name] = getattr(importlib.import_module(module), attribute)
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self._load_plugins()
        yield from self._declared
        yield from (name for name in self._entries if name not in self._declared)

    def __len__(self) -> int:
        self._load_plugins()
        return len(set(self._declared) | set(self._entries))

    def __contains__(self, name) -> bool:
        self._load_plugins()
        return isinstance(name, str) and (name in self._declared or name in self._entries)

    def __repr__(self) -> str:
        return f"<{self.kind} registry: {', '.join(self)}>"


#: The decision methods by name.
METHODS = Registry("method", "mlflow_perfgate.methods")
METHODS.declare("seed", "mlflow_perfgate.rules._regression:SEED",
                "the specification's rule, exact")
METHODS.declare("robust", "mlflow_perfgate.rules._robust:ROBUST",
                "one-sided Mann-Whitney U and a Hodges-Lehmann interval of the latency ratio")
METHODS.declare("paired", "mlflow_perfgate.rules._paired:PAIRED",
                "Wilcoxon signed-rank test (it cannot accept below its floor of rounds) and Hodges-Lehmann "
                "interval on the ABBA rounds' latency ratios")
#: The objectives by name.
OBJECTIVES = Registry("objective", "mlflow_perfgate.objectives")
_ENTRY_TYPES = {"method": Method, "objective": Objective}
for _name, _help in (("latency", "median and P95 step latency, lower is better"),
                     ("memory", "peak memory, lower is better, within a latency budget"),
                     ("throughput", "tokens per second, higher is better")):
    OBJECTIVES.declare(_name, f"mlflow_perfgate.rules._objectives:{_name.upper()}", _help)


def register_method(entry: Method) -> Method:
    """Register a decision method (see :class:`Method`); returns it."""
    return METHODS.register(entry)


def register_objective(entry: Objective) -> Objective:
    """Register an objective (see :class:`Objective`); its thresholds join every policy's."""
    taken = threshold_settings()
    for setting in entry.thresholds:
        if setting.name in taken and taken[setting.name] != setting:
            raise ValueError(f"threshold {setting.name!r} is already declared with other settings")
    return OBJECTIVES.register(entry)


def unregister_method(name: str) -> None:
    """Remove a method registered with :func:`register_method`."""
    METHODS.unregister(name)


def unregister_objective(name: str) -> None:
    """Remove an objective registered with :func:`register_objective`."""
    OBJECTIVES.unregister(name)


def threshold_settings() -> dict[str, Setting]:
    """Every threshold setting by name: the specification's, then each objective's own."""
    settings = {setting.name: setting for setting in SPEC_THRESHOLDS}
    for name in OBJECTIVES:
        for setting in OBJECTIVES[name].thresholds:
            settings.setdefault(setting.name, setting)
    return settings
