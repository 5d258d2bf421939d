"""The options commands share: how a decision is made (:func:`decision_options`, one
:func:`collect_policy` check of them), how attempts run (:func:`run_options`), and the help's sections."""

from __future__ import annotations

import click

from ._common import parse_assignments


class OptionalFloat(click.ParamType):
    """A float, or nothing when given as an empty string (an MLproject default)."""

    name = "float"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, float):
            return value
        if isinstance(value, str) and not value.strip():
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a valid float", param, ctx)



class OrDefault(click.ParamType):
    """Another type's value, or the command's default (``None``) when given as an empty string: how an
    MLproject parameter (``default: ""``) leaves a setting to the configuration the command chooses."""

    def __init__(self, inner):
        self.inner = click.types.convert_type(inner)
        self.name = self.inner.name

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            return None
        return self.inner.convert(value, param, ctx)

    def get_metavar(self, *args, **kwargs):
        return self.inner.get_metavar(*args, **kwargs)

    def shell_complete(self, ctx, param, incomplete):
        return self.inner.shell_complete(ctx, param, incomplete)


class RegistryChoice(click.Choice):
    """The names of a registry (methods, objectives, plugins' too), read when the option is parsed;
    ``keep(entry)`` leaves out the entries an option cannot take."""

    def __init__(self, registry, keep=None):
        self.registry = registry
        self.keep = keep
        super().__init__([])  # read from the registry when asked (a filter loads the entries it reads)

    @property
    def choices(self):
        if self.keep is None:
            return tuple(self.registry)
        return tuple(name for name in self.registry if self.keep(self.registry[name]))

    @choices.setter
    def choices(self, value):  # click.Choice.__init__ assigns it
        pass


def _setting_option(setting, *, prefix: str = ""):
    kind = int if setting.integer else float
    return click.option(f"--{setting.name.replace('_', '-')}", type=kind, default=None,
                        help=f"{prefix}{setting.help}, {setting.range_text()} [{setting.default:g}].")


#: The sections of a long command's help, by purpose; a parameter named in none is under "Other options".
_SECTIONS = (
    ("What to run", ("workload", "sets", "change", "allow_empty", "attempts", "rounds", "interleave", "steps",
                     "comparison_steps",
                     "warmup", "capacity_mib",
                     "fallback_change", "until_decisive", "max_attempts", "resume", "new_plan", "allow_undecidable", "keep_worktrees",
                     "threads",
                     "timeout_s", "in_process", "runner", "group", "stale_after")),
    ("How to decide", ("method", "mode", "objective", "latency", "alpha", "confidence", "margin", "env_mismatch",
                       "power", "effects")),
    ("Thresholds", ()),  # the registries' thresholds: filled when the help is written
    ("Output", ("experiment", "output_format", "no_progress", "gate")),
)


class SectionedCommand(click.Command):
    """A command whose options are listed by purpose: what to run, how to decide, thresholds, output."""

    def format_options(self, ctx, formatter):
        from mlflow_perfgate.rules import threshold_settings

        thresholds = {*threshold_settings(), "extra_thresholds"}
        rows: dict[str, list] = {title: [] for title, _ in _SECTIONS}
        rows["Other options"] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            title = "Thresholds" if param.name in thresholds else next(
                (title for title, names in _SECTIONS if param.name in names), "Other options")
            rows[title].append(record)
        for title, records in rows.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


#: What ``--workload`` takes, in every command that runs one.
_WORKLOAD_HELP = ("tinylm (the bundled model), a factory module:function taking the conditions, or "
                  "hf:module:function for a factory of a Hugging Face transformers model.")


def decision_options(func=None, *, configured: bool = False):
    """How a decision is made, derived from ``Policy`` and the registries: method, mode, objective,
    the levels, every threshold (the specification's and the objectives'), the environment check.

    ``configured``: a command that runs its attempts (``compare``, ``pipeline``), whose method and
    latency default to the recommended configuration (``harness.configure``); else (``evaluate``)
    to those the group's comparison was configured with, and without one (attempts recorded
    elsewhere, which may carry no rounds or step times) to the specification's rule on the raw
    figure. Either way the option's default is ``None`` (an empty value too).
    """
    if func is None:
        return lambda f: decision_options(f, configured=configured)
    from mlflow_perfgate.rules import LATENCIES, METHODS, MODES, OBJECTIVES, POLICY_SETTINGS, threshold_settings

    methods = "; ".join(f"{name}: {METHODS.help(name)}" for name in METHODS)
    objectives = "; ".join(f"{name}: {OBJECTIVES.help(name)}" for name in OBJECTIVES)
    method_default = ("[default: paired where it judges the objective (latency), else seed, the specification's "
                      "rule, exact]" if configured else
                      "[default: the method the group's comparison was run with, else seed]")
    latency_default = ("[default: p10; raw with --method seed]" if configured else
                       "[default: the latency the group's comparison was run with, else raw]")
    options = [
        click.option("--method", type=OrDefault(RegistryChoice(METHODS)), default=None,
                     help=f"How to decide ({methods}). {method_default}"),
        click.option("--mode", type=click.Choice(MODES), default="improvement", show_default=True,
                     help="improvement: must be faster; non_regression: may not be slower than --margin."),
        click.option("--objective", type=RegistryChoice(OBJECTIVES), default=None,
                     help=f"What to judge on ({objectives}) [the comparison run's objective, else latency]."),
        click.option("--latency", type=OrDefault(click.Choice(LATENCIES)), default=None,
                     help="Which latency of each attempt is judged: raw (the median of every measured step), "
                          "uncontended (the median of its steps that barely waited for a CPU, where it has one; "
                          "rerun with reason contention when more than half of an arm's attempts have none) or "
                          "fastest (its fastest measured step: what a busy neighbour disturbs least) or p10 (the "
                          "10th percentile of its measured steps, Harrell-Davis: the fastest few averaged, "
                          "steadier than the fastest one; with 30 steps a round, the recommended figure on a "
                          f"busy machine). {latency_default}"),
        *(_setting_option(setting) for setting in POLICY_SETTINGS),
        *(_setting_option(setting) for setting in threshold_settings().values()),
        click.option("--threshold", "extra_thresholds", multiple=True, metavar="NAME=VALUE",
                     help="Any registered threshold by name (those of an objective registered by a plugin)."),
        click.option("--env-mismatch", type=click.Choice(["fail", "warn", "ignore"]), default="fail", show_default=True,
                     help="When attempts' environment fingerprints differ beyond the changed variable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def policy_options(kwargs: dict) -> dict:
    """Pop the decision options from a command's kwargs: those given (``None`` ones left out), by name.

    Raises:
        click.BadParameter: a ``--threshold`` that names no threshold, is given twice or is no number.
    """
    from mlflow_perfgate.rules import POLICY_SETTINGS, threshold_settings

    settings = threshold_settings()
    names = ["method", "mode", "objective", "latency", *(s.name for s in POLICY_SETTINGS), *settings]
    collected = {name: kwargs.pop(name) for name in names if name in kwargs}
    collected = {name: value for name, value in collected.items() if value is not None}
    for name, text in parse_assignments(kwargs.pop("extra_thresholds", ()), "--threshold").items():
        if name not in settings:
            raise click.BadParameter(f"unknown threshold {name!r}; expected one of {sorted(settings)}",
                                     param_hint="--threshold")
        if name in collected:
            raise click.BadParameter(f"{name!r} given twice", param_hint="--threshold")
        try:
            collected[name] = int(text) if settings[name].integer else float(text)
        except ValueError:
            raise click.BadParameter(f"{name}={text!r} is not a number", param_hint="--threshold") from None
    return collected


def collect_policy(kwargs: dict) -> dict:
    """Pop the decision options from a command's kwargs as one ``Policy``, made and checked here (no store
    read, nothing heavy imported) and carried to the decision.

    Returns:
        ``{"policy": Policy}`` (its ``given``: the options on the command line; the others are
        configured, or read from the recorded comparison, downstream), with ``env_mismatch``
        where the command has it: the keywords of ``evaluate_group`` and ``compare``.

    Raises:
        PolicyError: a value out of its range or a combination no method judges.
    """
    from mlflow_perfgate.rules import Policy

    collected = {"policy": Policy(**policy_options(kwargs))}
    if "env_mismatch" in kwargs:
        collected["env_mismatch"] = kwargs.pop("env_mismatch")
    return collected


_ALLOW_EMPTY = click.option("--allow-empty", is_flag=True, help="Accept a condition with an empty value (KEY=).")
_INTERLEAVE = click.option(
    "--interleave", type=OrDefault(click.Choice(["attempts", "steps", "lockstep", "duet"])), default=None,
    help="steps: one child per ABBA round runs both arms (same workload, device, revision and python), their "
         "measured steps alternating A B B A, so both see the same contention (its limit is twice --timeout); "
         "lockstep: one child per arm and round (each at its revision's worktree or its python), their measured "
         "steps alternated A B B A by compare, each child timing its own; duet: the same children stepping at once; "
         "attempts: whole attempts in ABBA order, each in its own child. [default: steps where both arms can share "
         "a process; lockstep for a change of revision, python, device, warmup or steps]")


def run_options(*, timeout: str, threads: str, in_process: str, runner: str | None = None):
    """How a command's attempts (or rounds, or evidence) run: ``--timeout``, ``--threads``,
    ``--in-process`` and, where a runner starts children, ``--runner``; declared once for
    ``compare``, ``pipeline``, ``calibrate`` and ``diagnose``, each worded for its command."""
    options = [
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=300.0,
                     show_default=True, help=timeout),
        click.option("--threads", type=OrDefault(click.IntRange(min=1)), default=None, help=threads),
        click.option("--in-process", is_flag=True, help=in_process),
    ]
    if runner is not None:
        options.append(click.option("--runner", type=click.Choice(["auto", "fork", "spawn"]), default="auto",
                                    show_default=True, help=runner))

    def apply(func):
        for option in reversed(options):
            func = option(func)
        return func

    return apply
