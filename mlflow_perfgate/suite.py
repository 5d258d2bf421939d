"""A suite of comparisons, one gate: read a suite file, run (or collect) every entry, judge them together.

The application layer beside :mod:`mlflow_perfgate.harness`: it runs attempts (``workloads``),
records them (``tracking``) and leaves every verdict to the rules (``rules.suite_gate`` through
``tracking.evaluate_suite``).

A suite file (TOML)::

    [suite]
    name = "nightly-cpu"            # required: the suite's name (perfgate.suite)
    experiment = "perf"             # optional; else MLFLOW_EXPERIMENT_NAME / Default
    alpha = 0.05                    # the error rate of the suite's rejects across its entries
    control = "holm"                # holm (family-wise, a gate) or bh (false-discovery rate, a report)
    tail_share = 0.1                # the share of each entry's level its tail (P95) test gets; the main check the rest
    interleave = "rounds"           # rounds: one ABBA round of each entry at a time; entries: one after another

    [defaults]                      # any entry key, for every entry (tables are merged)
    workload = "tinylm"
    method = "robust"               # a statistical method (robust or paired) for latency entries
    mode = "non_regression"
    attempts = 6
    set = {input_shape = "2,16", steps = 2}

    [[entry]]
    name = "checkpointing"
    change = {checkpoint = true}    # a comparison to run

    [[entry]]
    name = "pr-42"
    group = "pr-42-run-7"           # attempts already recorded: collected, never run

(``groups = ["g1", "g2"]`` in ``[suite]`` adds one collected entry per recorded group, named by it.)

Entry keys: ``name`` (required, unique), ``workload``, ``set`` (the fixed conditions),
``change`` (the one variable the candidate changes; without it the entry is collected from
``group``), ``group`` (default ``<suite name>/<entry name>`` for an entry that runs),
``objective``, ``method``, ``mode``, ``margin``, ``alpha``, ``confidence``, ``thresholds`` (a
table of any registered threshold), ``attempts``, ``until_decisive``, ``max_attempts``,
``supervised``, ``timeout_s``, ``threads``, ``runner``, ``latency`` (``raw``, ``uncontended``,
``fastest``, ``p10``: the figure the rules judge), ``interleave`` (within the entry, as ``compare
--interleave``: ``attempts``; ``steps``: one child a round holding both arms, their measured
steps interleaved; ``lockstep``: one child per arm and round, their measured steps alternated;
not the ``[suite]`` key, which orders the entries), ``env_mismatch``. ``revision`` and ``python``
place an entry's arms as they place ``compare``'s (a revision's worktree, ``working-tree`` for the
checkout as it is, another interpreter; :mod:`mlflow_perfgate.sites`), in lockstep rounds on a
runner of the entry's own; the worktrees go when the suite ends (not on a Ray node: its entries
run in the node's working directory).

An entry that runs takes ``compare``'s defaults for what it leaves out (``harness.configure``):
the paired method on ``p10``, steps interleaved, one thread, 10 rounds of 30 measured steps,
falling back per entry where they do not apply (a memory or throughput entry: the seed method on
``raw``, 5 rounds of 10 steps, outside the error control; a change of device, warmup or steps:
lockstep rounds, one child per arm); its comparison run's ``perfgate.configuration`` says which. A
collected entry (``group``) is judged by the robust method on ``raw`` unless told otherwise.

How entries share a machine (``interleave = "rounds"``, the default): the attempts of all the
entries that run are interleaved round-robin, one ABBA round (2 attempts per arm: baseline,
candidate, candidate, baseline) of each entry in turn, so a slow drift of the machine (a
neighbour starting, thermal throttling) touches every entry alike instead of the last one.
With ``until_decisive`` the suite looks after each pass over the entries still open: an entry
stops as soon as the suite's gate (its error control included) decides it, or at
``max_attempts`` per arm. ``interleave = "entries"`` runs each entry whole in turn
(:func:`run_entry`, the function a dispatcher to other machines calls, one entry per task).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import rules
from .errors import InputError, PolicyError, RuleTypeError, StoreUnavailable
from .rules import TAIL_SHARE

__all__ = ["ENTRY_KEYS", "EntrySpec", "SuiteSpec", "evaluate", "load_suite", "parse_suite", "run", "run_entry", "start"]

#: The keys an entry (or the ``[defaults]`` table) may hold.
ENTRY_KEYS = ("name", "workload", "set", "change", "group", "objective", "method", "mode", "margin", "alpha",
              "confidence", "latency", "thresholds", "attempts", "until_decisive", "max_attempts", "supervised",
              "timeout_s", "threads", "runner", "interleave", "env_mismatch")
_SUITE_KEYS = ("name", "experiment", "alpha", "control", "tail_share", "interleave", "groups")
_INTERLEAVE = ("rounds", "entries")
#: Attempts per arm in one round of the round-robin: one ABBA block.
ROUND = 2


@dataclass(frozen=True)
class EntrySpec:
    """One entry of a suite, validated.

    Attributes:
        name: unique in the suite.
        group: the group holding its attempts.
        policy: how its comparison is decided.
        workload, conditions, change: what runs (``change`` ``None``: collected, never run).
        attempts, until_decisive, max_attempts: how many attempts per arm.
        supervised, timeout_s, threads, runner: how each attempt runs.
        interleave: within the entry, as ``compare --interleave``: ``attempts`` (each attempt its
            own child, in ABBA order), ``steps`` (one child a round, both arms' steps interleaved) or
            ``lockstep`` (one child per arm a round, their steps alternated).
        env_mismatch: ``evaluate_group``'s option.
    """

    name: str
    group: str
    policy: rules.Policy
    workload: str = "tinylm"
    conditions: dict = field(default_factory=dict)
    change: dict | None = None
    attempts: int = 5
    until_decisive: bool = False
    max_attempts: int | None = None
    supervised: bool = True
    timeout_s: float = 300.0
    threads: int | None = None
    runner: str = "auto"
    interleave: str = "attempts"
    env_mismatch: str = "fail"
    #: what was given, defaulted and fallen back to (``harness.configure``; an entry that runs attempts)
    configuration: Any = None

    @property
    def runs(self) -> bool:
        """Whether the suite runs this entry's attempts (else it collects a recorded group)."""
        return self.change is not None

    @property
    def max_looks(self) -> int | None:
        """The last look of a sequential entry (``None`` without ``until_decisive``)."""
        if not self.until_decisive:
            return None
        return self.looks_with(self.max_attempts)

    def looks_with(self, max_attempts: int) -> int:
        """How many looks this entry's sequential plan would have with ``max_attempts`` per arm."""
        return 1 + math.ceil(max(0, max_attempts - self.attempts) / ROUND)

    def look_at(self, attempts_per_arm: int) -> int | None:
        """The look a sequential entry is at with that many attempts per arm (as ``compare`` counts)."""
        if not self.until_decisive:
            return None
        extra = max(0, attempts_per_arm - self.attempts)
        return min(self.max_looks, 1 + math.ceil(extra / ROUND))


@dataclass(frozen=True)
class SuiteSpec:
    """A suite, validated: its name, where it records, its error control and its entries."""

    name: str
    entries: tuple[EntrySpec, ...]
    experiment: str | None = None
    alpha: float = 0.05
    control: str = "holm"
    interleave: str = "rounds"
    source: str = "<suite>"
    tail_share: float = TAIL_SHARE

    def settings(self) -> dict:
        """What the suite run logs as params."""
        return {"alpha": self.alpha, "control": self.control, "tail_share": self.tail_share,
                "interleave": self.interleave,
                "entries": len(self.entries), "source": self.source}


def load_suite(path: str | os.PathLike, **overrides: Any) -> SuiteSpec:
    """Read and validate a suite file (TOML); ``overrides`` replace ``[suite]`` keys (``name``, ``alpha``, ...).

    Raises:
        InputError: the file cannot be read or parsed, or an entry is invalid (named).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read suite file {str(path)!r}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    return parse_suite(data, source=str(path), **overrides)


def _where(source: str, position: int | None, name: Any = None) -> str:
    if position is None:
        return f"{source}: [defaults]"
    return f"{source}: [[entry]] {position + 1}" + (f" ({name})" if isinstance(name, str) else "")


def parse_suite(data: dict, *, source: str = "<suite>", **overrides: Any) -> SuiteSpec:
    """A :class:`SuiteSpec` from a parsed suite file (the dict ``tomllib`` gives), every entry checked.

    Every policy is validated here, before anything runs: a latency entry judged by the seed
    method is refused (it has no p-value for the suite's error control); ``method`` defaults to
    ``robust`` for a latency entry and to ``seed`` for the other objectives (which only the
    specification-style rule judges; they take part outside the error control).
    """
    if not isinstance(data, dict):
        raise InputError(f"{source}: a suite must be a table")
    unknown = sorted(set(data) - {"suite", "defaults", "entry"})
    if unknown:
        raise InputError(f"{source}: unknown tables {unknown}; expected [suite], [defaults] and [[entry]]")
    head = dict(data.get("suite") or {})
    extra = sorted(set(head) - set(_SUITE_KEYS))
    if extra:
        raise InputError(f"{source}: [suite] has unknown keys {extra}; expected some of {list(_SUITE_KEYS)}")
    head.update({key: value for key, value in overrides.items() if value is not None})
    name = head.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{source}: [suite] needs a name (a non-empty string)")
    alpha = head.get("alpha", 0.05)
    control = head.get("control", "holm")
    from .rules import CONTROLS, SUITE_SETTINGS, check_settings

    tail_share = head.get("tail_share", TAIL_SHARE)
    try:
        check_settings(SUITE_SETTINGS, {"alpha": alpha, "tail_share": tail_share}, PolicyError)
    except (PolicyError, RuleTypeError) as exc:  # a value out of range, or no number: name the file
        raise type(exc)(f"{source}: {exc}") from None
    if control not in CONTROLS:
        raise PolicyError(f"{source}: control must be one of {list(CONTROLS)}, got {control!r}")
    interleave = head.get("interleave", "rounds")
    if interleave not in _INTERLEAVE:
        hint = (" (the order of the entries; step interleaving within an entry is interleave = \"steps\" in "
                "[defaults] or in the entry)" if interleave in ("steps", "attempts") else "")
        raise InputError(f"{source}: [suite] interleave must be one of {list(_INTERLEAVE)}{hint}, got {interleave!r}")
    experiment = head.get("experiment")
    if experiment is not None and (not isinstance(experiment, str) or not experiment.strip()):
        raise InputError(f"{source}: experiment must be a non-empty string")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise InputError(f"{source}: [defaults] must be a table")
    _check_keys(defaults, _where(source, None), allow_name=False)
    items = data.get("entry") or []
    groups = head.get("groups") or []
    if not isinstance(items, list) or not isinstance(groups, list) \
            or not all(isinstance(group, str) and group.strip() for group in groups):
        raise InputError(f"{source}: [[entry]] must be a list of tables and [suite] groups a list of group names")
    items = [{"name": group, "group": group} for group in groups] + items  # recorded groups, each an entry
    if not items:
        raise InputError(f"{source}: a suite needs at least one [[entry]] (or [suite] groups)")
    entries = [_entry(item, defaults, name, source, position) for position, item in enumerate(items)]
    names = [entry.name for entry in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"{source}: entry names must be unique; given twice: {twice}")
    groups = [entry.group for entry in entries]
    shared = sorted({g for g in groups if groups.count(g) > 1})
    if shared:
        raise InputError(f"{source}: two entries share the group(s) {shared}; each entry needs its own")
    return SuiteSpec(name, tuple(entries), experiment=experiment, alpha=float(alpha), control=control,
                     interleave=interleave, source=source, tail_share=float(tail_share))


def _check_keys(table: dict, where: str, *, allow_name: bool = True) -> None:
    if not isinstance(table, dict):
        raise InputError(f"{where}: must be a table")
    allowed = ENTRY_KEYS if allow_name else tuple(key for key in ENTRY_KEYS if key != "name")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise InputError(f"{where}: unknown keys {unknown}; expected some of {list(allowed)}")
    for key in ("set", "change", "thresholds"):
        if key in table and not isinstance(table[key], dict):
            raise InputError(f"{where}: {key} must be a table of KEY = VALUE")


def _typed(value: Any, kind: type, key: str, where: str, *, minimum: float | None = None):
    if value is None:
        return None
    if kind is bool:
        if type(value) is not bool:
            raise InputError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if kind is int and (type(value) is not int or (minimum is not None and value < minimum)):
        raise InputError(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (minimum is not None and value <= minimum):
            raise InputError(f"{where}: {key} must be a number > {minimum}, got {value!r}")
        return float(value)
    if kind is str and (not isinstance(value, str) or not value.strip()):
        raise InputError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _entry(item: Any, defaults: dict, suite_name: str, source: str, position: int) -> EntrySpec:
    where = _where(source, position, item.get("name") if isinstance(item, dict) else None)
    _check_keys(item, where)
    merged = {**defaults, **item}
    for key in ("set", "thresholds"):
        merged[key] = {**(defaults.get(key) or {}), **(item.get(key) or {})}
    name = _typed(merged.get("name"), str, "name", where)
    if name is None:
        raise InputError(f"{where}: an entry needs a name")
    where = _where(source, position, name)
    change = merged.get("change")
    group = _typed(merged.get("group"), str, "group", where)
    if change is None and group is None:
        raise InputError(f"{where}: give change (a comparison to run) or group (attempts already recorded)")
    workload = _typed(merged.get("workload", "tinylm"), str, "workload", where)
    attempts = _typed(merged.get("attempts"), int, "attempts", where, minimum=1)
    supervised = _typed(merged.get("supervised", True), bool, "supervised", where)
    threads = _typed(merged.get("threads"), int, "threads", where, minimum=1)
    interleave = merged.get("interleave")
    if interleave is not None and interleave not in ("attempts", "steps", "lockstep", "duet"):
        raise InputError(f"{where}: interleave must be one of ['attempts', 'steps', 'lockstep', 'duet'] (within the "
                         f"entry; the [suite] key orders the entries), got {interleave!r}")
    configuration = None
    if change is not None:  # an entry that runs: compare's defaults, per entry (harness.configure)
        from .harness import base_conditions, configure

        variable = next(iter(change)) if isinstance(change, dict) and len(change) == 1 else None
        configuration = configure(
            merged.get("objective") or "latency", merged.get("mode") or "improvement", variable,
            base_conditions(workload, dict(merged["set"]), 1), method=merged.get("method"),
            latency=merged.get("latency"), interleave=interleave, threads=threads, attempts=attempts,
            steps_given="steps" in merged["set"], supervised=supervised)
        merged = {**merged, "method": configuration.method, "latency": configuration.latency}
        attempts, interleave, threads = configuration.attempts, configuration.interleave, configuration.threads
        if configuration.steps is not None:
            merged["set"] = {**merged["set"], "steps": configuration.steps}
    attempts = 5 if attempts is None else attempts
    interleave = interleave or "attempts"
    until_decisive = _typed(merged.get("until_decisive", False), bool, "until_decisive", where)
    max_attempts = _typed(merged.get("max_attempts"), int, "max_attempts", where, minimum=1)
    if until_decisive:
        max_attempts = 4 * attempts if max_attempts is None else max_attempts
        if max_attempts < attempts:
            raise InputError(f"{where}: max_attempts ({max_attempts}) must be >= attempts ({attempts})")
    env_mismatch = merged.get("env_mismatch", "fail")
    if env_mismatch not in ("fail", "warn", "ignore"):
        raise InputError(f"{where}: env_mismatch must be fail, warn or ignore, got {env_mismatch!r}")
    runner = merged.get("runner", "auto")
    if runner not in ("auto", "fork", "spawn"):
        raise InputError(f"{where}: runner must be auto, fork or spawn, got {runner!r}")
    policy = _entry_policy(merged, where)
    conditions = dict(merged["set"])
    if change is not None:
        _check_entry_change(change, workload, conditions, attempts, interleave, policy, supervised, where)
    return EntrySpec(
        name=name, group=group or f"{suite_name}/{name}", policy=policy, workload=workload, conditions=conditions,
        change=dict(change) if change is not None else None, attempts=attempts, until_decisive=until_decisive,
        max_attempts=max_attempts, supervised=supervised, interleave=interleave,
        timeout_s=_typed(merged.get("timeout_s", 300.0), float, "timeout_s", where, minimum=0),
        threads=threads, runner=runner, env_mismatch=env_mismatch, configuration=configuration)


def _entry_policy(merged: dict, where: str):
    """An entry's policy: a statistical method by default where one judges the objective (latency;
    an entry that runs has it from ``harness.configure``, a collected one gets ``robust``), the
    specification-style rule elsewhere (memory, throughput: outside the error control); a latency
    entry's method must give the gate a p-value."""
    from .rules import METHODS, methods_with_p_values

    options = {key: merged.get(key) for key in ("method", "mode", "objective", "margin", "alpha", "confidence",
                                                "latency")}
    options["objective"] = options["objective"] or "latency"
    options["method"] = options["method"] or ("robust" if options["objective"] == "latency" else "seed")
    options["mode"] = options["mode"] or "improvement"
    try:
        policy = rules.Policy(**{k: v for k, v in options.items() if v is not None}, **merged["thresholds"])
    except PolicyError as exc:
        raise PolicyError(f"{where}: {exc}") from None
    if policy.objective == "latency" and not METHODS.require(policy.method).statistical:
        raise PolicyError(f"{where}: the {policy.method} method gives no p-value; a suite's error control needs a "
                          f"statistical method for a latency entry: method = one of {methods_with_p_values()}")
    return policy.settled()  # an entry says how it is judged: nothing is filled in from a recorded run


def _check_entry_change(change, workload: str, conditions: dict, attempts: int, interleave: str, policy,
                        supervised: bool, where: str) -> None:
    """The entry's change as ``compare`` checks it (one variable, declared, interleavable), before anything runs."""
    if len(change) != 1:
        raise InputError(f"{where}: change must name exactly one variable, got {sorted(change)}")
    from .harness import base_conditions, check_interleave, validated_change
    from .errors import PerfgateError

    try:
        base = base_conditions(workload, conditions, attempts)
        validated_change(base, dict(change), "the candidate change improves the objective")
        check_interleave(interleave, str(next(iter(change))), base, policy.objective, supervised, None)
    except PerfgateError as exc:
        raise type(exc)(f"{where}: {exc}") from None


# --- running ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _entry_errors(name: str):
    """An error of one entry's own (its arms' sites, its group, its workload's setup: not the store's),
    named for it: its message starts ``suite entry 'NAME': `` and ``exc.suite_entry`` holds the name, so a
    caller can leave that entry out and run the others (the pytest plugin does)."""
    from .errors import PerfgateError, StoreError

    try:
        yield
    except (PerfgateError, ValueError) as exc:
        if not isinstance(exc, StoreError) and getattr(exc, "suite_entry", None) is None:
            exc.suite_entry = name
            if exc.args and isinstance(exc.args[0], str) and not exc.args[0].startswith(f"suite entry {name!r}"):
                exc.args = (f"suite entry {name!r}: {exc.args[0]}", *exc.args[1:])
        raise


class _Entry:
    """A running entry: its comparison run, its arms, its ABBA rounds so far (``compare``'s steps)."""

    def __init__(self, spec: EntrySpec, suite: SuiteSpec, *, suite_run_id: str | None, resume: bool, runners):
        with _entry_errors(spec.name):
            self._open(spec, suite, suite_run_id=suite_run_id, resume=resume, runners=runners)

    def _open(self, spec: EntrySpec, suite: SuiteSpec, *, suite_run_id: str | None, resume: bool, runners):
        from .harness import base_conditions, Comparison, Plan, validated_change
        from .tracking import group_state

        self.spec = spec
        self.suite = suite
        self._runners = runners
        base = base_conditions(spec.workload, spec.conditions, spec.attempts)
        variable, value = validated_change(base, spec.change, "the candidate change improves the objective")
        held = group_state(spec.group, experiment_name=suite.experiment)
        if held["attempts"] and not resume:
            raise InputError(
                f"suite entry {spec.name!r}: group {spec.group!r} already holds {held['attempts']} attempts; pass "
                "--resume to add to them, or run the suite under another --name")
        # the rounds are compare's own (the change witnessed, the quality gate checked, the memory
        # estimate carried, a refused step interleaving stopping the entry), and so is the comparison
        # run: resumed, the group's own (its planned size kept, what a killed run left RUNNING ended)
        plan = Plan(workload=spec.workload, base=base, candidate={**base, variable: value}, variable=variable,
                     objective=spec.policy.objective, policy=spec.policy, attempts=spec.attempts,
                     until_decisive=spec.until_decisive, max_attempts=spec.max_attempts, interleave=spec.interleave,
                     supervised=spec.supervised, runner=spec.runner, timeout_s=spec.timeout_s, threads=spec.threads,
                     group=spec.group, experiment_name=suite.experiment, parent_run_id=suite_run_id, resume=resume,
                     allow_undecidable=False, progress=False, on_attempt=None, evaluate_kwargs={},
                     configuration=spec.configuration)
        self.rounds = Comparison(plan)
        self.rounds.place_arms()  # a revision's worktree, another interpreter: checked and made before anything runs
        runners.hold(self.rounds.sites)
        self.rounds.attach(group=spec.group, held=held, runner=None, who=f"suite entry {spec.name!r}")
        self.comparison_id = self.rounds.comparison_id
        self.done = held["attempts"] // 2
        self.started_with = self.done

    @property
    def deferred(self) -> list[str]:
        return self.rounds.deferred

    @property
    def runner(self):
        return self._runners(self.spec, self.rounds.sites) if self.spec.supervised else None

    def run_round(self, per_arm: int, on_attempt: Callable[[str, Any], None] | None = None) -> None:
        """``per_arm`` attempts of each arm in ABBA order, each recorded as it ends (``compare``'s blocks).

        With ``interleave = "steps"`` each ABBA round is one child holding both arms, their steps
        interleaved, the leading arm alternating between rounds.
        """
        from .workloads import interleave

        name = self.spec.name
        self.rounds.active = self.runner
        self.rounds.on_attempt = None if on_attempt is None else (lambda arm, result: on_attempt(f"{name} {arm}",
                                                                                                 result))
        with _entry_errors(name):
            self.rounds.run_block(interleave(per_arm), None)
        self.done += per_arm

    @property
    def initial_left(self) -> int:
        return max(0, self.started_with + self.spec.attempts - self.done)

    def extra_left(self) -> int:
        cap = (self.spec.max_attempts or self.spec.attempts) + self.started_with
        return max(0, cap - self.done) if self.spec.until_decisive else 0

    def look(self) -> int | None:
        return self.spec.look_at(self.done)


class _Runners:
    """One attempt runner per (workload, kind), shared by the entries that run them, and one of its own for an
    entry whose arms run elsewhere (a revision's worktree, another interpreter); closed at the end, and the
    entries' worktrees removed."""

    def __init__(self):
        self._open: dict[tuple, Any] = {}
        self._sites: list = []

    def __call__(self, spec: EntrySpec, sites: Any = None):
        from .harness import LOCKSTEP_MODES
        from .workloads import SiteRunner, attempt_runner

        lockstep = spec.interleave in LOCKSTEP_MODES  # one child per arm: a runner per arm
        if sites is not None:  # the entry's own: its arms' sites are its own
            key = ("sites", spec.name)
            if key not in self._open:
                self._open[key] = SiteRunner(spec.runner, spec.workload, site_of=sites.site_of,
                                             sites=(sites.of("baseline"), sites.of("candidate")), lockstep=lockstep)
            return self._open[key]
        key = (spec.workload, spec.runner, lockstep)
        if key not in self._open:
            self._open[key] = SiteRunner(spec.runner, spec.workload, sites=(None, None)) if lockstep else \
                attempt_runner(spec.runner, workload=spec.workload)
        return self._open[key]

    def hold(self, sites: Any) -> None:
        """An entry's arm sites (``sites.ArmSites``, or ``None``), whose worktrees go when the runners close."""
        if sites is not None:
            self._sites.append(sites)

    def close(self) -> None:
        for runner in self._open.values():
            with contextlib.suppress(Exception):
                runner.close()
        self._open.clear()
        for sites in self._sites:
            with contextlib.suppress(Exception):
                sites.close()
        self._sites.clear()


def _items(suite: SuiteSpec, looks: dict[str, int | None] | None = None):
    """The entries as the evaluator judges them, each at its look."""
    from .tracking import SuiteItem

    looks = looks or {}
    return [SuiteItem(entry.name, entry.group, entry.policy, look=looks.get(entry.name),
                      max_looks=entry.max_looks if looks.get(entry.name) is not None else None,
                      env_mismatch=entry.env_mismatch) for entry in suite.entries]


def _recorded_looks(suite: SuiteSpec) -> dict[str, int | None]:
    """Each sequential entry's look from the attempts its group holds (as its run counted them)."""
    from .tracking import group_state

    looks = {}
    for entry in suite.entries:
        if entry.runs and entry.until_decisive:
            held = group_state(entry.group, experiment_name=suite.experiment)
            looks[entry.name] = entry.look_at(held["attempts"] // 2) if held["attempts"] else None
    return looks


def run_entry(entry: EntrySpec, suite: SuiteSpec, *, suite_run_id: str | None = None, resume: bool = False,
              on_attempt: Callable[[str, Any], None] | None = None, running: list | None = None) -> dict:
    """Run one entry whole: its attempts in ABBA rounds, more while its own rule answers rerun (``until_decisive``).

    The unit a dispatcher to other machines runs as one task: it needs the entry, the suite
    (for the experiment) and the suite run to nest the entry's comparison under; the suite is
    then judged by :func:`evaluate` (``suite_run_id``) once every entry has run. Its stopping
    rule is the entry's own decision; the suite's error control holds whatever rule stops the
    entries, because each look's test is held to its share spent at that look.

    ``running``: the caller's list of running entries, which a stop ends (:func:`run`'s); without it
    (a task of its own, on a Ray node) a stop or an error ends the entry's runs here.

    Returns:
        ``{"name", "group", "comparison_run_id", "attempts_per_arm", "look", "max_looks", "deferred"}``.
    """
    if not entry.runs:
        return {"name": entry.name, "group": entry.group, "comparison_run_id": None, "attempts_per_arm": None,
                "look": None, "max_looks": None, "deferred": []}
    from .harness import terminate_as_exception

    runners = _Runners()
    item = None
    with contextlib.ExitStack() as stack:
        if running is None:  # a task of its own: SIGTERM is Terminated here, as in compare
            stack.enter_context(terminate_as_exception())
        stack.callback(runners.close)
        try:
            item = _Entry(entry, suite, suite_run_id=suite_run_id, resume=resume, runners=runners)
            if running is not None:
                running.append(item)
            while item.initial_left:
                item.run_round(min(ROUND, item.initial_left), on_attempt)
            while item.extra_left():
                from .tracking import evaluate_group

                interim = evaluate_group(entry.group, experiment_name=suite.experiment, policy=entry.policy,
                                         env_mismatch=entry.env_mismatch, look=item.look(),
                                         max_looks=entry.max_looks, dry_run=True)
                if interim["decision"] != "rerun" or interim["reason"] not in ("insufficient_valid_runs",
                                                                               "inconclusive"):
                    break
                item.run_round(min(ROUND, item.extra_left()), on_attempt)
        except BaseException as exc:
            if item is not None and running is None:
                with contextlib.suppress(Exception):  # the original error matters
                    item.rounds.stop(exc, by="suite entry")
            raise
    return {"name": entry.name, "group": entry.group, "comparison_run_id": item.comparison_id,
            "attempts_per_arm": item.done, "look": item.look(), "max_looks": entry.max_looks,
            "deferred": item.deferred}


_CONTINUE = ("insufficient_valid_runs", "inconclusive", "not_significant_in_suite")


def run(suite: SuiteSpec, *, resume: bool = False, progress: bool = True, parent_run_id: str | None = None,
        on_attempt: Callable[[str, Any], None] | None = None, stale_after_s: float | None = None) -> dict:
    """Run every entry that runs, collect the others, and judge the suite (``suite run``).

    A suite run (``perfgate.kind=suite``) is created first; each entry's comparison run nests
    under it. Entries run as ``suite.interleave`` says (see the module docstring); with
    ``until_decisive`` an entry gets another round while the suite's gate answers ``rerun`` for
    it for lack of evidence (``insufficient_valid_runs``, ``inconclusive``,
    ``not_significant_in_suite``), up to its ``max_attempts``. The decision is then written onto
    the suite run by :func:`~mlflow_perfgate.tracking.evaluate_suite`. If the run stops (an
    error, SIGTERM), the suite run and the open comparison runs end KILLED with the reason.

    Returns:
        ``evaluate_suite``'s result.
    """
    from .harness import Terminated, signal_held, terminate_as_exception
    from .rules import preload_step_quantile
    from .tracking import DEFAULT_STALE_AFTER_S, end_run
    _require_importable(suite)
    stale_after_s = DEFAULT_STALE_AFTER_S if stale_after_s is None else stale_after_s
    runners = _Runners()
    running: list[_Entry] = []
    outcomes: dict[str, dict] = {}
    total = sum(2 * entry.attempts for entry in suite.entries if entry.runs)
    suite_run_id = None
    try:
        # SIGTERM is Terminated from before the suite run exists, and held while it is created (see compare's)
        with terminate_as_exception():
            with signal_held():
                suite_run_id = start(suite, parent_run_id=parent_run_id)
            _warn_below_floors(suite, resume)
            preload_step_quantile()  # each attempt's p10 is computed as it is written, between attempts
            summary = _run_entries(suite, suite_run_id, resume, on_attempt, progress, stale_after_s, total, runners,
                                   running, outcomes)
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, Terminated) else f"{type(exc).__name__}: {exc}"
        with signal_held():  # a second signal meanwhile is raised once every run is ended
            for item in running:  # compare's stop: the round measured before it written, the rest withdrawn
                with contextlib.suppress(Exception):  # the server may be what failed; the original error matters
                    item.rounds.stop(exc, by="suite")
            if suite_run_id is not None:  # None: stopped before the suite run was created, nothing to end
                with contextlib.suppress(Exception):
                    end_run(suite_run_id, "KILLED", reason=f"suite stopped before its decision: {reason}")
        raise
    finally:
        runners.close()
    return summary


def _run_entries(suite: SuiteSpec, suite_run_id: str, resume: bool, on_attempt, progress: bool, stale_after_s: float,
                 total: int, runners, running: list, outcomes: dict) -> dict:
    """:func:`run_suite`'s entries under its suite run, then judged together: ``evaluate_suite``'s result.
    ``running`` and ``outcomes`` are the caller's, filled here (the comparison runs a stop must end)."""
    from tqdm import tqdm

    from .tracking import evaluate_suite, sync

    with tqdm(total=total, desc=f"suite {suite.name[:30]}", unit="attempt", disable=not progress or not total,
              file=sys.stderr) as bar:
        def counted(label: str, result) -> None:
            bar.set_postfix_str(f"{label} {'%.3g ms' % result.latency_ms if result.ok else result.failure[:30]}")
            bar.update(1)
            if on_attempt is not None:
                on_attempt(label, result)

        if suite.interleave == "entries":
            for entry in suite.entries:  # each entry's _Entry joins ``running``: a stop ends its runs
                outcomes[entry.name] = run_entry(entry, suite, suite_run_id=suite_run_id, resume=resume,
                                                 on_attempt=counted, running=running)
        else:
            for entry in suite.entries:  # one by one: a refused group leaves the others' runs to end KILLED
                if entry.runs:
                    running.append(_Entry(entry, suite, suite_run_id=suite_run_id, resume=resume, runners=runners))
            _round_robin(suite, running, counted, bar, stale_after_s)
            for item in running:
                outcomes[item.spec.name] = {"look": item.look(), "deferred": item.deferred}
        if any(outcome.get("deferred") for outcome in outcomes.values()):
            with contextlib.suppress(StoreUnavailable):  # the server may be back: send what waits
                sync()
        looks = {name: outcome.get("look") for name, outcome in outcomes.items()}
        return evaluate_suite(suite.name, _items(suite, looks), experiment_name=suite.experiment, alpha=suite.alpha,
                              control=suite.control, tail_share=suite.tail_share, stale_after_s=stale_after_s,
                              suite_run_id=suite_run_id)


def _require_importable(suite: SuiteSpec) -> None:
    """A module off the path, a revision git cannot resolve: refused before the suite run or any child starts."""
    from .sites import resolve_revisions
    from .workloads import require_importable

    for entry in suite.entries:
        if entry.runs:
            with _entry_errors(entry.name):  # named for the entry, before the suite run exists
                try:
                    require_importable(entry.workload, child=entry.supervised)
                except ValueError as exc:
                    raise InputError(f"{exc}; nothing was run or logged") from None
                resolve_revisions({"baseline": entry.conditions, "candidate": {**entry.conditions, **entry.change}})


def _warn_below_floors(suite: SuiteSpec, resume: bool) -> None:
    """As compare says it: an entry planned below its method's floor (a warning: the suite may still reject)."""
    from .rules import too_few_to_decide

    for entry in suite.entries:
        planned = entry.max_attempts if entry.until_decisive else entry.attempts
        looks_for = entry.looks_with if entry.until_decisive else None
        too_few = too_few_to_decide(entry.policy, planned, looks_for=looks_for) if entry.runs and not resume else None
        if too_few:
            print(f"warning: suite entry {entry.name!r}: {too_few}", file=sys.stderr)


def _round_robin(suite: SuiteSpec, running: list[_Entry], counted, bar, stale_after_s: float) -> None:
    """The entries' planned rounds in turn, one ABBA round each; then, with ``until_decisive``, another
    round for each entry the suite's gate answers rerun for lack of evidence, up to its most."""
    from .tracking import judge_entries

    while any(item.initial_left for item in running):
        for item in running:
            if item.initial_left:
                item.run_round(min(ROUND, item.initial_left), counted)
    open_ = [item for item in running if item.extra_left()]
    while open_:
        looks = {item.spec.name: item.look() for item in running}
        _, gate = judge_entries(_items(suite, looks), experiment_name=suite.experiment, alpha=suite.alpha,
                                control=suite.control, tail_share=suite.tail_share, stale_after_s=stale_after_s,
                                dry_run=True)
        verdicts = {entry.name: entry for entry in gate.entries}
        open_ = [item for item in open_ if item.extra_left() and verdicts[item.spec.name].verdict == "rerun"
                 and verdicts[item.spec.name].reason in _CONTINUE]
        for item in open_:
            bar.total += 2 * min(ROUND, item.extra_left())
            item.run_round(min(ROUND, item.extra_left()), counted)


def _ray_task(item: dict) -> dict:
    """What a Ray node runs for one entry (``run_on_ray``): the entry whole, in the group the dispatcher gives."""
    entry = dataclasses.replace(item["entry"], group=item["group"])
    return run_entry(entry, item["suite"], suite_run_id=item["suite_run_id"])


def run_on_ray(suite: SuiteSpec, address: str, *, parent_run_id: str | None = None, gpus: int = 0,
               cpus_per_node: float | None = None, timeout_s: float = 3600.0, stale_after_s: float | None = None,
               on_lost: str = "rerun") -> dict:
    """``suite run --ray ADDRESS``: every entry that runs goes whole to one node of the Ray cluster it holds
    (``ray_dispatch.run_entries_on_ray``), then the suite is judged once, waiting for every entry.

    An entry whose node was lost is run again on another node, in a fresh group (its lost
    attempts end as failures, never successes); the suite then judges that group. An entry that
    failed, timed out, was lost for good or could not be scheduled is judged on what its group
    holds, and the suite says why (``ray`` in the result).

    Returns:
        ``evaluate_suite``'s result, with ``ray``: each entry's dispatch state, node and group.
    """
    from .harness import Terminated, signal_held, terminate_as_exception
    from .tracking import end_run

    suite_run_id = None
    try:
        with terminate_as_exception():  # SIGTERM is Terminated (ray.init's own handler is put back)
            with signal_held():
                suite_run_id = start(suite, parent_run_id=parent_run_id)
            return _judge_on_ray(suite, suite_run_id, address, gpus=gpus, cpus_per_node=cpus_per_node,
                                 timeout_s=timeout_s, stale_after_s=stale_after_s, on_lost=on_lost)
    except BaseException as exc:
        # A signal's exception raised while Ray's core worker waits comes out as a SystemError around it
        stop = next((e for e in (exc, exc.__cause__, exc.__context__) if isinstance(e, (Terminated,
                                                                                      KeyboardInterrupt))), None)
        if suite_run_id is not None:  # the entries' runs are ended on their nodes, or by the dispatcher
            cause = stop or exc
            reason = str(cause) if isinstance(cause, Terminated) else f"{type(cause).__name__}: {cause}"
            with signal_held(), contextlib.suppress(Exception):
                end_run(suite_run_id, "KILLED", reason=f"suite stopped before its decision: {reason}")
        if stop is not None and stop is not exc:
            raise stop from None
        raise


def _judge_on_ray(suite: SuiteSpec, suite_run_id: str, address: str, *, gpus: int, cpus_per_node: float | None,
                  timeout_s: float, stale_after_s: float | None, on_lost: str) -> dict:
    """:func:`run_on_ray` once its suite run exists: the entries dispatched, then judged."""
    from .ray_dispatch import run_entries_on_ray
    from .tracking import evaluate_suite

    running = [entry for entry in suite.entries if entry.runs]
    items = [{"group": entry.group, "experiment_name": suite.experiment, "entry": entry, "suite": suite,
              "suite_run_id": suite_run_id} for entry in running]
    outcomes = run_entries_on_ray(address, items, _ray_task, cpus_per_node=cpus_per_node, gpus=gpus,
                                  timeout_s=timeout_s, on_lost=on_lost) if items else []
    _refuse_setup_errors(running, outcomes)
    groups = {entry.name: outcome.group or entry.group for entry, outcome in zip(running, outcomes)}
    judged = dataclasses.replace(suite, entries=tuple(
        dataclasses.replace(entry, group=groups.get(entry.name, entry.group)) for entry in suite.entries))
    looks = {entry.name: outcome.result.get("look") for entry, outcome in zip(running, outcomes)
             if outcome.decided and isinstance(outcome.result, dict)}
    from .tracking import DEFAULT_STALE_AFTER_S

    summary = evaluate_suite(judged.name, _items(judged, looks), experiment_name=judged.experiment,
                             alpha=judged.alpha, control=judged.control, tail_share=judged.tail_share,
                             stale_after_s=DEFAULT_STALE_AFTER_S if stale_after_s is None else stale_after_s,
                             suite_run_id=suite_run_id)
    summary["ray"] = [{"entry": entry.name, "state": outcome.state, "group": outcome.group,
                       "node_id": outcome.node_id, "reason": outcome.reason, "tries": len(outcome.tries)}
                      for entry, outcome in zip(running, outcomes)]
    return summary


def _refuse_setup_errors(running: list, outcomes: list) -> None:
    """An entry whose node could not set it up stops the suite: exit 2, one line naming the entry and the
    cause (a module the node cannot import, say), nothing judged.

    Raises:
        WorkloadFailed: the first such entry, its node and its cause.
    """
    from .errors import WorkloadFailed

    for entry, outcome in zip(running, outcomes):
        if outcome.setup_error:
            cause = (outcome.reason or "").removeprefix("entry_failed: ")
            raise WorkloadFailed(f"suite entry {entry.name!r} could not be set up on Ray node {outcome.node_id}: "
                                 f"{cause} (the suite was not judged; every node must be able to import the "
                                 "workload: install it there or pass it in a runtime_env)")


def start(suite: SuiteSpec, *, parent_run_id: str | None = None) -> str:
    """Create the suite run (RUNNING) that the entries' comparisons nest under; its id.

    For a dispatcher that runs the entries elsewhere: ``suite_run_id = start(spec)``, then
    :func:`run_entry` for each entry (``suite_run_id=suite_run_id``), then :func:`evaluate`
    with the same ``suite_run_id`` writes the decision onto it.
    """
    from .tracking import group_state, start_suite

    # a collected entry whose group holds nothing would fail the suite after every other entry ran
    empty = [entry for entry in suite.entries
             if not entry.runs and not group_state(entry.group, experiment_name=suite.experiment)["attempts"]]
    if empty:
        raise InputError("; ".join(f"suite entry {entry.name!r}: group {entry.group!r} holds no attempts to collect"
                                   for entry in empty)
                         + " (record them first, or give the entry a change to run); nothing was run")
    return start_suite(suite.name, experiment_name=suite.experiment, settings=suite.settings(),
                       parent_run_id=parent_run_id)


def evaluate(suite: SuiteSpec, *, dry_run: bool = False, stale_after_s: float | None = None,
             suite_run_id: str | None = None) -> dict:
    """Judge a suite's recorded groups and write its decision (``suite evaluate``); nothing runs.

    A sequential entry's look is read from the attempts its group holds, so judging again what
    ``suite run`` judged gives the same decisions (and adopts the same runs).
    """
    from .tracking import DEFAULT_STALE_AFTER_S, evaluate_suite

    return evaluate_suite(suite.name, _items(suite, _recorded_looks(suite)), experiment_name=suite.experiment,
                          alpha=suite.alpha, control=suite.control, tail_share=suite.tail_share,
                          stale_after_s=DEFAULT_STALE_AFTER_S if stale_after_s is None else stale_after_s,
                          dry_run=dry_run, suite_run_id=suite_run_id, settings=suite.settings())

