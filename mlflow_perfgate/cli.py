"""The ``mlflow-perfgate`` command line: parsing, printing and exit codes, nothing else."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shlex
import sys
import traceback
from typing import NoReturn

import click

#: Exit codes of the gate (docs/design.md).
EXIT_CODES = {"accept": 0, "reject": 1, "rerun": 3, "blocked_by_correctness": 4}
EXIT_USAGE = 2
#: A comparison stopped by SIGTERM (a cancelled CI job): 128 + 15, as a shell reports it.
EXIT_TERMINATED = 143
#: A command stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports it (never 2, a usage error's code).
EXIT_INTERRUPTED = 130
_DEBUG_ENV = "MLFLOW_PERFGATE_DEBUG"


def _fail(message: str) -> NoReturn:
    from mlflow_perfgate.tracking._redact import redact_text  # no mlflow: passwords and tokens never printed

    click.echo(f"Error: {redact_text(message)}", err=True)
    sys.exit(EXIT_USAGE)


def _one_line(exc: BaseException) -> str:
    from mlflow_perfgate.tracking._schema import fit  # no mlflow

    message = getattr(exc, "message", None) or str(exc)
    text = " ".join(str(message).split())
    return fit(text, 2000)  # the one marker of a cut text of ours (tracking/_schema.fit)


def _check_store_uri(writes: bool = True) -> None:
    """A misspelled store scheme in ``MLFLOW_TRACKING_URI`` (``sqllite:///mlflow.db``) is one line
    at once, before MLflow is imported; so is a local store a command that writes cannot write."""
    from mlflow_perfgate.tracking._store import require_writable_store, scheme_problem

    uri = os.environ.get("MLFLOW_TRACKING_URI")
    problem = scheme_problem(uri)
    if problem:
        _fail(problem)
    if writes:
        require_writable_store(uri or _DEFAULT_STORE)


#: MLflow's default tracking store, where ``MLFLOW_TRACKING_URI`` names none.
_DEFAULT_STORE = "sqlite:///mlflow.db"


def only_reads(func):
    """A command that writes nothing to the store (``decisions``, ``report``): a read-only store serves it."""
    func._perfgate_only_reads = True
    return func


def reads_only(func):
    """A command that works on what the store holds (it judges, lists, reports or marks runs already
    there): a local store that does not exist is refused in one line (exit 2), never created (nor
    its folder, nor an experiment). Inside :func:`guarded`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from mlflow_perfgate.tracking._probe import ensure_reachable
        from mlflow_perfgate.tracking._store import read_only

        # A dead or silent server is one line before MLflow's import; what the probe found is
        # remembered, so the client does not ask again.
        ensure_reachable(os.environ.get("MLFLOW_TRACKING_URI") or "")
        with read_only():  # checked by the client, after the command's own input (the URI MLflow resolves)
            return func(*args, **kwargs)

    return wrapper


def guarded(func):
    """Print what the user can fix in one line (exit 2); show anything else as the bug it is.

    A :class:`~mlflow_perfgate.errors.PerfgateError` (bad input, a broken single-variable rule,
    differing environments, a store that refused or could not be reached) and an ``OSError``
    (a file that cannot be read or written) are one line on stderr. Any other exception is a
    bug: its traceback is printed, with a request to report it, and the exit code is 2 too.
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from mlflow_perfgate.errors import PerfgateError

        try:
            _check_store_uri(writes=not getattr(func, "_perfgate_only_reads", False))
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except (PerfgateError, OSError) as exc:
            if os.environ.get(_DEBUG_ENV):
                raise
            _fail(_one_line(exc))
        except Exception as exc:
            if os.environ.get(_DEBUG_ENV):
                raise
            from mlflow_perfgate.tracking._redact import redact_text

            click.echo(redact_text(traceback.format_exc()).rstrip("\n"), err=True)
            _fail(f"internal error, a bug in mlflow-perfgate ({type(exc).__name__}: {_one_line(exc)}); "
                  "please report it with the traceback above")

    return wrapper


def parse_assignments(items: tuple[str, ...], option: str, *, allow_empty: bool = True) -> dict[str, str]:
    """``("a=1", "b=x")`` -> ``{"a": "1", "b": "x"}``, with a clear error for a bad item.

    With ``allow_empty=False`` a ``KEY=`` with nothing after it is refused: on a command line it is
    most often a shell variable that was not set (``--set revision=$GIT_SHA``).
    """
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        key = key.strip()
        if key in result:
            raise click.BadParameter(f"{key!r} given twice", param_hint=option)
        if not value.strip() and not allow_empty:
            raise click.BadParameter(f"{key!r} has an empty value (an unset shell variable?); give a value, or "
                                     "--allow-empty to record it empty", param_hint=option)
        result[key] = value.strip()
    return result


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


from mlflow_perfgate.rules._registry import METHODS as _METHODS  # noqa: E402 - light: entries load when read


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
        from mlflow_perfgate.rules._registry import threshold_settings

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
    from mlflow_perfgate.rules._policy import LATENCIES, MODES, POLICY_SETTINGS
    from mlflow_perfgate.rules._registry import METHODS, OBJECTIVES, threshold_settings

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


def collect_policy(kwargs: dict) -> dict:
    """Pop the decision options from a command's kwargs, and validate them as a ``Policy`` (no store read).

    Returns:
        The options given (``None`` ones left out), for ``evaluate_group`` / ``compare``.

    Raises:
        PolicyError: a value out of its range or a combination no method judges.
    """
    from mlflow_perfgate.rules._policy import POLICY_SETTINGS, Policy
    from mlflow_perfgate.rules._registry import threshold_settings

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
    Policy(**{"objective": "latency", **collected})
    if "env_mismatch" in kwargs:
        collected["env_mismatch"] = kwargs.pop("env_mismatch")
    return collected


def print_decision(result: dict, output_format: str, gate: bool = True) -> None:
    """The report (or the JSON result); for the text format, then the tail: what happened and where to look.

    ``gate=False`` (``pipeline`` without ``--gate``, which exits 0 whatever the decision) says the code
    the decision would give as a gate rather than calling it this command's exit code.
    """
    if output_format == "json":
        click.echo(json.dumps(result, indent=2, default=str))
        return
    from mlflow_perfgate.tracking import decision_markdown, decision_summary

    click.echo(result.get("report") or decision_markdown(result))
    click.echo(f"decision run: {result['decision_run_id']}")
    tail = decision_summary(result, ["mlflow-perfgate", *_INVOKED])
    code = EXIT_CODES[result["decision"]]
    tail[0] += f" (exit code {code})" if gate else f" (as a gate, exit code {code}; this command exits 0: --gate)"
    click.echo("\n".join(["", *tail]))


def exit_for(result: dict) -> None:
    """Exit with the decision's code; a result without a logged decision run never exits 0 (accept)."""
    if not result.get("decision_run_id"):
        _fail(f"no decision run was logged (decision {result.get('decision')!r}); nothing was accepted")
    sys.exit(EXIT_CODES[result["decision"]])


def exit_for_suite(summary: dict) -> None:
    """Exit with the suite decision's code; a suite decision not written onto a suite run never exits 0."""
    if not summary.get("suite_run_id"):
        _fail(f"no suite decision was logged (decision {summary.get('decision')!r}); nothing was accepted")
    sys.exit(EXIT_CODES[summary["decision"]])


def _until_decided(run, what: str, *args, **kwargs):
    """Call ``run``; a ``SystemExit`` from the code it ran (a workload's ``sys.exit``) is an error, never exit 0.

    A comparison or a pipeline ends in this process with an exit code only after a decision
    run is logged (:func:`exit_for`); whatever exits before that is reported in one line (exit 2).
    """
    try:
        return run(*args, **kwargs)
    except SystemExit as exc:
        _fail(f"{what} stopped before a decision was logged: sys.exit({exc.code!r}) was called by the code it ran "
              "(the workload?); nothing was accepted")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="mlflow-perfgate")
def cli():
    """Accept, reject or rerun a PyTorch performance change, with the evidence in MLflow.

    Tracking goes to MLFLOW_TRACKING_URI (default: MLflow's local sqlite:///mlflow.db).
    Exit codes of evaluate and compare: 0 accept, 1 reject, 2 usage or input error, 3 rerun,
    4 blocked by correctness.
    """


_RECORD_FIELDS = ("group", "arm", "set", "latency_ms", "quality", "failure", "validity", "metrics", "env",
                  "attempt_id", "parent_run_id", "experiment", "commit_time", "step_times_ms", "pair")


def _commit_time(value, where: str) -> float | None:
    """POSIX seconds from a number or an ISO 8601 time (``2024-06-01T12:00:00+00:00``; UTC when no zone)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither POSIX seconds nor an ISO 8601 time", param_hint=where) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _validity(text: str | None, where: str):
    """A correctness record from JSON text or ``@FILE``."""
    if not text:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {text[1:]!r}: {exc.strerror}", param_hint=where) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=where) from None


def _numbers(items: dict, where: str) -> dict:
    numbers = {}
    for key, value in items.items():
        try:
            numbers[key] = float(value)
        except (TypeError, ValueError):
            raise click.BadParameter(f"{key}={value!r} is not a number", param_hint=where) from None
    return numbers


#: The prefix of an attempt_id made from a ``--from-jsonl`` line (:func:`_jsonl_attempts`).
DERIVED_ID_PREFIX = "jsonl-"


def _pair(value, where: str) -> int | None:
    """An attempt's ABBA round: an integer >= 0 (JSON's ``3``, or ``"3"`` from a shell), or ``None``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if type(value) is int and value >= 0:
        return value
    raise click.BadParameter(f"'pair' is the attempt's round, an integer >= 0; got {value!r}", param_hint=where)


def _jsonl_attempts(source: str, defaults: dict) -> list[dict]:
    """The attempts of a JSON-lines file (``-``: stdin), each checked: ``record``'s options as fields.

    A line without an ``attempt_id`` gets one made from what it records: a digest of the command's
    options and of the file's lines up to and including this one (``jsonl-`` and 32 hex digits;
    ``derived`` is true). Recording the same file again (a retried CI step) names the same attempts,
    so the store counts and shows each once; lines appended to the file later get ids of their
    own and the earlier lines keep theirs. Two files alike up to a line, recorded under the same
    options, are taken for one: give ``attempt_id`` where identical files are distinct attempts.
    """
    try:
        handle = sys.stdin if source == "-" else open(source, encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(f"cannot read {source!r}: {exc.strerror}", param_hint="--from-jsonl") from None
    attempts = []
    digest = hashlib.sha256(json.dumps({key: value for key, value in defaults.items()
                                       if key != "allow_empty" and not (key == "pair" and value is None)},
                                       sort_keys=True, default=str).encode())
    with handle if source != "-" else contextlib.nullcontext(handle):
        for number, line in enumerate(handle, 1):
            digest.update(line.rstrip("\r\n").encode("utf-8", "surrogatepass") + b"\n")
            if not line.strip():
                continue
            where = f"--from-jsonl line {number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"not valid JSON: {exc}", param_hint=where) from None
            if not isinstance(item, dict):
                raise click.BadParameter(f"expected a JSON object, got {type(item).__name__}", param_hint=where)
            unknown = sorted(set(item) - set(_RECORD_FIELDS))
            if unknown:
                raise click.BadParameter(f"unknown fields {unknown}; expected some of {list(_RECORD_FIELDS)}",
                                         param_hint=where)
            # a field given as null is a field not given (what a JSON writer makes of None); so is
            # a condition or a fingerprint key given as null (the defaults' value stands)
            item = {key: value for key, value in item.items() if value is not None}
            for name in ("set", "metrics", "env"):
                if not isinstance(item.get(name, {}), dict):
                    raise click.BadParameter(f"{name!r} must be an object of KEY: VALUE", param_hint=where)
            for name in ("set", "env"):
                if name in item:
                    item[name] = {key: value for key, value in item[name].items() if value is not None}
            empty = sorted(key for key, value in item.get("set", {}).items() if isinstance(value, str) and
                           not value.strip())
            if empty and not defaults.get("allow_empty"):
                raise click.BadParameter(f"'set' gives {empty} an empty value; pass --allow-empty if empty is meant",
                                         param_hint=where)
            if not isinstance(item.get("step_times_ms", []), list):
                raise click.BadParameter("'step_times_ms' must be a list of the measured steps' times, in ms",
                                         param_hint=where)
            validity = item.get("validity")
            attempts.append(dict(
                where=where, group=item.get("group", defaults["group"]), arm=item.get("arm", defaults["arm"]),
                conditions={**defaults["conditions"], **item.get("set", {})},
                latency_ms=item.get("latency_ms"), quality=item.get("quality"), failure=item.get("failure") or None,
                validity=_validity(validity, where) if isinstance(validity, str) else validity,
                metrics=item.get("metrics") or None,
                environment={**defaults.get("environment", {}), **item.get("env", {})} or None,
                attempt_id=item.get("attempt_id", DERIVED_ID_PREFIX + digest.hexdigest()[:32]),
                derived="attempt_id" not in item, parent_run_id=item.get("parent_run_id", defaults["parent_run_id"]),
                experiment_name=item.get("experiment", defaults["experiment"]),
                commit_time=_commit_time(item.get("commit_time", defaults["commit_time"]), where),
                step_times_ms=item.get("step_times_ms"), pair=_pair(item.get("pair", defaults.get("pair")), where),
            ))
    if not attempts:
        raise click.BadParameter(f"{source!r} holds no attempt", param_hint="--from-jsonl")
    first: dict[str, str] = {}
    for attempt in attempts:  # an attempt_id names one attempt: a second line with it is another outcome
        if attempt["attempt_id"] is not None and not attempt["derived"]:
            key = str(attempt["attempt_id"])
            if key in first:
                raise click.BadParameter(f"attempt_id {key!r} is given on {first[key]} already: an attempt_id names "
                                         "one attempt (a retried write of it counts once), so two lines with one "
                                         "id would count only one of their outcomes", param_hint=attempt["where"])
            first[key] = attempt["where"].removeprefix("--from-jsonl ")
    return attempts


@cli.command()
@click.option("--group", default=None, help="Comparison id the attempt belongs to.")
@click.option("--arm", default=None, type=click.Choice(["baseline", "candidate"]))
@click.option("--set", "conditions", multiple=True, metavar="KEY=VALUE",
              help="A condition (param); repeat for each: model, input_shape, batch_size, ...")
@click.option("--conditions", "condition_list", default=None, metavar="K=V;K=V",
              help="Conditions as one semicolon-separated list (for the MLproject entry point).")
@click.option("--allow-empty", is_flag=True, help="Accept a condition with an empty value (KEY=).")
@click.option("--latency-ms", type=OptionalFloat(), default=None, help="The attempt's latency (required unless --failure).")
@click.option("--quality", type=OptionalFloat(), default=None, help="The attempt's quality score (required unless --failure).")
@click.option("--failure", default=None, help="Why the attempt failed; records a failed attempt.")
@click.option("--validity", default=None, metavar="JSON",
              help="The correctness record as JSON, or @FILE holding it.")
@click.option("--metric", "metrics", multiple=True, metavar="KEY=VALUE", help="An extra metric, e.g. peak_mem_mib=512.")
@click.option("--env", "environment", multiple=True, metavar="KEY=VALUE",
              help="A fingerprint key to add or override (torch_threads=2, gpu_name=...).")
@click.option("--attempt-id", default=None, help="A unique id: a retried record with the same id counts once.")
@click.option("--pair", default=None, type=click.IntRange(min=0), metavar="ROUND",
              help="The attempt's ABBA round (0, 1, ...): a baseline and a candidate of one round are compared "
                   "with each other by --method paired.")
@click.option("--parent-run-id", default=None, help="A comparison run to nest the attempt under [$MLFLOW_RUN_ID].")
@click.option("--experiment", default=None, help="Experiment name (created if missing).")
@click.option("--commit-time", default=None, metavar="TIME",
              help="The commit time of the revision condition, POSIX seconds or ISO 8601 (orders the benchmark's "
                   "history; default: from git when the revision is a commit of the repository here).")
@click.option("--from-jsonl", "from_jsonl", default=None, metavar="FILE",
              help="Many attempts, one JSON object per line (- for stdin) with record's options as fields "
                   "(group, arm, set, latency_ms, quality, failure, validity, metrics, env, attempt_id, "
                   "parent_run_id, experiment, commit_time, and step_times_ms: the measured steps' times, whose "
                   "fastest --latency fastest judges and whose 10th percentile --latency p10); the options "
                   "above are the defaults of every line, and a field given as null is a field not given. Every "
                   "line is checked before anything is written. A line without attempt_id is named by its "
                   "content (the options and the lines up to it): recording the file again writes nothing "
                   "twice. Once the server is found down, every remaining line waits in the journal for sync.")
@guarded
def record(group, arm, conditions, condition_list, allow_empty, latency_ms, quality, failure, validity, metrics,
           environment, attempt_id, pair, parent_run_id, experiment, commit_time, from_jsonl):
    """Log attempts from a shell (a workload not written in Python); prints each run id."""
    if condition_list:
        conditions = conditions + tuple(item for item in condition_list.split(";") if item.strip())
    parsed = parse_assignments(conditions, "--set", allow_empty=allow_empty)
    parent_run_id = parent_run_id or os.environ.get("MLFLOW_RUN_ID") or None  # nested under `mlflow run`
    if from_jsonl is not None:
        given = [name for name, value in (("--latency-ms", latency_ms), ("--quality", quality), ("--failure", failure),
                                          ("--validity", validity), ("--metric", metrics), ("--attempt-id", attempt_id))
                 if value]
        if given:
            raise click.UsageError(f"--from-jsonl takes each attempt's outcome from its line; drop {', '.join(given)}")
        attempts = _jsonl_attempts(from_jsonl, {"group": group, "arm": arm, "conditions": parsed,
                                                "parent_run_id": parent_run_id, "experiment": experiment,
                                                "commit_time": commit_time, "allow_empty": allow_empty,
                                                "pair": pair,
                                                "environment": parse_assignments(environment, "--env")})
    else:
        for name, value in (("--group", group), ("--arm", arm)):
            if value is None:
                raise click.UsageError(f"Missing option '{name}' (or give --from-jsonl)")
        attempts = [dict(
            where=None, group=group, arm=arm, conditions=parsed, latency_ms=latency_ms, quality=quality,
            failure=failure or None,  # an empty --failure (an MLproject default) means none
            validity=_validity(validity, "--validity"), metrics=_numbers(parse_assignments(metrics, "--metric"),
                                                                          "--metric") or None,
            environment=parse_assignments(environment, "--env") or None, attempt_id=attempt_id, derived=False,
            parent_run_id=parent_run_id, experiment_name=experiment,
            commit_time=_commit_time(commit_time, "--commit-time"), pair=pair,
        )]
    from mlflow_perfgate.errors import InputError
    from mlflow_perfgate.tracking._inputs import check_attempt

    parents = [(item["parent_run_id"], item["group"]) for item in attempts if item["parent_run_id"]]
    checked = []
    derived = {item["attempt_id"] for item in attempts if item.pop("derived")}
    for item in attempts:  # every attempt checked before mlflow is imported, and before anything is written
        where = item.pop("where")
        try:
            checked.append(check_attempt(item.pop("group"), item.pop("arm"), item.pop("conditions"),
                                         ok=item["failure"] is None, **item))
        except InputError as exc:
            raise InputError(f"{where}: {exc}" if where else str(exc)) from None
    from mlflow_perfgate.tracking import check_parent_runs
    from mlflow_perfgate.tracking._attempts import log_series
    from mlflow_perfgate.tracking._journal import journal_path

    check_parent_runs(parents)
    stored = []

    def echo(run_id: str) -> None:
        stored.append(run_id)
        click.echo(run_id)

    try:
        outcome = log_series(checked, derived=derived, on_run=echo)
    except Exception:
        if len(checked) > 1:
            click.echo(f"{len(stored)} of {len(checked)} attempts are in MLflow (their run ids above); the error below "
                       f"stopped the others, none of them written", err=True)
        raise
    if outcome.present:
        click.echo(f"{len(outcome.present)} of {len(checked)} attempts were in MLflow already (recorded before): "
                   "not written again", err=True)
    if outcome.deferred:
        if len(checked) == 1:
            _fail(str(outcome.cause))
        _fail(f"{len(outcome.deferred)} of {len(checked)} attempts are kept in the journal {journal_path()} because "
              f"the tracking server could not be reached ({_cause_text(outcome.cause)}); {len(outcome.run_ids)} are in "
              "MLflow (their run ids above); run 'mlflow-perfgate sync' when the server is back")


def _cause_text(deferred) -> str:
    cause = deferred.__cause__ if deferred is not None else None
    if cause is None:
        return "no answer"
    from mlflow_perfgate.tracking._client import short_error

    return short_error(cause)


@cli.command(cls=SectionedCommand)
@click.option("--group", required=True, help="Comparison id to judge.")
@click.option("--experiment", default=None, help="Experiment name.")
@decision_options
@click.option("--stale-after", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="A RUNNING attempt older than this counts as failed ('stale'), > 0 [3600].")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
@guarded
@reads_only
def evaluate(group, experiment, stale_after, output_format, **kwargs):
    """Judge a group's attempts, log the decision run, exit with the decision's code."""
    options = collect_policy(kwargs)
    from mlflow_perfgate.tracking import DEFAULT_STALE_AFTER_S, evaluate_group

    result = evaluate_group(group, experiment_name=experiment,
                            stale_after_s=DEFAULT_STALE_AFTER_S if stale_after is None else stale_after, **options)
    print_decision(result, output_format)
    exit_for(result)


@cli.command()
@click.option("--experiment", default=None, help="Experiment name.")
@click.option("--group", default=None, help="Only this comparison's decisions.")
@click.option("--suite", "suite_name", default=None,
              help="Only the decisions of this suite's entries (with --kind suite: only this suite's runs).")
@click.option("--kind", type=click.Choice(["decision", "suite"]), default="decision", show_default=True,
              help="decision: a comparison's decision runs; suite: the suite runs (one verdict over many entries).")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]), default="table")
@guarded
@only_reads
@reads_only
def decisions(experiment, group, suite_name, kind, output_format):
    """List decision runs (or suite runs), newest first."""
    frame = _decisions_frame(experiment, group, suite_name, kind)
    if output_format == "json":
        click.echo(frame.to_json(orient="records", date_format="iso", indent=2, double_precision=15))  # lists as arrays
    elif output_format == "csv":
        lists = {name: frame[name].map(json.dumps) for name in frame.columns  # an empty frame: its header alone
                 if not frame.empty and frame[name].map(lambda value: isinstance(value, list)).any()}
        click.echo(frame.assign(**lists).to_csv(index=False), nl=False)  # a list as its JSON array's text
    elif frame.empty:
        click.echo("no suite decisions" if kind == "suite" else "no decisions")
    elif kind == "suite":
        shown = frame.assign(start_time=frame["start_time"].dt.strftime("%Y-%m-%d %H:%M:%S"))
        click.echo(shown[["start_time", "suite", "decision", "reason", "entries", "entries_accept", "entries_reject",
                          "entries_rerun", "alpha", "control", "run_id"]].to_string(index=False, max_colwidth=48))
    else:
        columns = ["start_time", "group", "decision", "failed_checks", "reason_text", "objective", "method",
                   "latency", "changed_variable", "baseline_value", "candidate_value", "baseline_median_ms",
                   "candidate_median_ms", "improvement", "memory_reduction", "run_id"]
        if suite_name is not None:
            columns[1:1] = ["suite_entry", "suite_decision"]
        shown = frame[columns].assign(failed_checks=frame["failed_checks"].map(lambda names: ", ".join(names) or "-"),
                                      start_time=frame["start_time"].dt.strftime("%Y-%m-%d %H:%M:%S"))
        click.echo(shown.rename(columns={"reason_text": "why"}).to_string(index=False, max_colwidth=48))


def _decisions_frame(experiment, group, suite_name, kind="decision"):
    """``tracking.decisions``; a local SQLite store is read without importing MLflow (about 2 s less)."""
    from mlflow_perfgate.tracking._sqlite_decisions import decisions_frame, default_uri

    def through_mlflow(*query):
        from mlflow_perfgate.tracking._queries import mlflow_decision_records  # imports MLflow

        return mlflow_decision_records(*query)

    return decisions_frame(default_uri(), experiment, group, suite_name, through_mlflow, kind)


@cli.command()
@click.option("--group", required=True, help="Comparison id.")
@click.option("--experiment", default=None, help="Experiment name.")
@guarded
@only_reads
@reads_only
def report(group, experiment):
    """Print the markdown report of a group's newest decision."""
    from mlflow_perfgate.errors import InputError
    from mlflow_perfgate.tracking import attempts_since, decisions as query, read_report

    frame = query(experiment_name=experiment, group=group)
    if frame.empty:
        from mlflow_perfgate.tracking._client import current_store

        name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        where = f"experiment {name!r}" if name else "the default experiment"
        raise InputError(f"no decision for group {group!r} in {where} of {current_store()}; run evaluate first")
    run_id = frame.iloc[0]["run_id"]
    text = read_report(run_id)
    since = attempts_since(run_id, group, experiment_name=experiment)
    if since["newer"]:
        running = f", {since['running']} of them still running" if since["running"] else ""
        judged = "" if since["judged"] is None else f"it judged {since['judged']}; "
        note = (f"> **Out of date**: {len(since['newer'])} attempts of this group are newer than this decision"
                f"{running} ({judged}the group holds {since['held']} now). Decide on them with "
                f"`mlflow-perfgate evaluate --group {shlex.quote(group)}`.")
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n{note}\n{rest}"
        click.echo(f"warning: {len(since['newer'])} attempts of group {group!r} are newer than its decision; "
                   "evaluate again", err=True)
    click.echo(text, nl=False)


def print_suite(summary: dict, output_format: str) -> None:
    """The suite's report table (or its JSON), then the tail: the gate's answer, what is open, where to look."""
    if output_format == "json":
        shown = {key: value for key, value in summary.items() if key not in ("gate", "results")}
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    from mlflow_perfgate.rules._records import REASONS
    from mlflow_perfgate.rules._suite import SUITE_REASONS

    click.echo(summary["report"])
    reason = summary["reason"]
    tail = [f"suite decision: {summary['decision'].upper()} (exit code {EXIT_CODES[summary['decision']]})",
            f"why: {SUITE_REASONS.get(reason, reason)} ({reason})"]
    for entry in summary["entries"]:
        if entry["verdict"] != "accept":
            why = SUITE_REASONS.get(entry["reason"]) or REASONS.get(entry["reason"], entry["reason"])
            if entry.get("failed_checks"):
                why += f"; failed: {', '.join(entry['failed_checks'])}"
            tail.append(f"  {entry['name']}: {entry['verdict']} ({entry['reason']}: {why})")
    if summary.get("suite_run_id"):
        tail.append(f"suite run: {summary['suite_run_id']}")
    if summary.get("suite_run_url"):
        tail.append(f"see it: {summary['suite_run_url']}")
    click.echo("\n".join(["", *tail]))


@cli.group()
def suite():
    """One gate over many comparisons (a suite file), the error across its entries controlled.

    Exit codes: 1 if any entry is rejected; else 3 if any needs a rerun; else 4 if any is
    blocked by correctness; 0 when every entry is accepted; 2 for a usage or input error.
    """


_SUITE_FILE = click.argument("suite_file", metavar="SUITE.toml", type=click.Path(dir_okay=False))
_SUITE_OVERRIDES = (
    click.option("--name", default=None, help="The suite's name (overrides [suite] name; its groups follow it)."),
    click.option("--experiment", default=None, help="Experiment name (overrides [suite] experiment)."),
    click.option("--alpha", type=click.FloatRange(min=0, max=0.3, min_open=True), default=None,
                 help="Error rate of the suite's rejects across its entries, in (0, 0.3] [[suite] alpha, else 0.05]."),
    click.option("--control", type=click.Choice(["holm", "bh"]), default=None,
                 help="holm: family-wise error (a gate); bh: false-discovery rate (a report of changes) "
                      "[[suite] control, else holm]."),
    click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text"),
)


def _suite_options(func):
    for option in reversed(_SUITE_OVERRIDES):
        func = option(func)
    return _SUITE_FILE(func)


def _load(suite_file, name, experiment, alpha, control):
    from mlflow_perfgate.suite import load_suite

    return load_suite(suite_file, name=name, experiment=experiment, alpha=alpha, control=control)


@suite.command("run")
@_suite_options
@click.option("--resume", is_flag=True, help="Add to groups that already hold attempts (a re-run of the suite).")
@click.option("--in-process", is_flag=True, help="Run every entry's attempts in this process (overrides supervised).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run each entry whole on one node of this Ray cluster (HOST:PORT, ray://HOST:10001 or auto); "
                   "the tracking URI must be a server every node reaches.")
@click.option("--ray-gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs each entry holds on its node.")
@guarded
def suite_run(suite_file, name, experiment, alpha, control, output_format, resume, in_process, no_progress,
              ray_address, ray_gpus):
    """Run every entry's comparison (round-robin by ABBA rounds), collect the recorded ones, decide once."""
    import dataclasses

    spec = _load(suite_file, name, experiment, alpha, control)
    if in_process:
        spec = dataclasses.replace(spec, entries=tuple(dataclasses.replace(e, supervised=False) for e in spec.entries))
    parent = os.environ.get("MLFLOW_RUN_ID") or None
    if ray_address is not None:
        if resume:
            raise click.UsageError("--resume is not taken with --ray: a lost entry runs again in a fresh group")
        from mlflow_perfgate.suite import run_on_ray

        summary = run_on_ray(spec, ray_address, parent_run_id=parent, gpus=ray_gpus)
        for item in summary["ray"]:
            if item["state"] != "decided" or item["tries"] > 1:
                click.echo(f"ray: entry {item['entry']}: {item['state']} after {item['tries']} tries "
                           f"({item['reason'] or 'decided'}); judged on group {item['group']}", err=True)
    else:
        from mlflow_perfgate.suite import run as run_suite

        summary = run_suite(spec, resume=resume, progress=not no_progress, parent_run_id=parent)
    print_suite(summary, output_format)
    exit_for_suite(summary)


@suite.command("evaluate")
@_suite_options
@click.option("--stale-after", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="A RUNNING attempt older than this counts as failed ('stale'), > 0 [3600].")
@guarded
@reads_only
def suite_evaluate(suite_file, name, experiment, alpha, control, output_format, stale_after):
    """Judge a suite's recorded groups (nothing runs), write the suite decision, exit with its code."""
    spec = _load(suite_file, name, experiment, alpha, control)
    from mlflow_perfgate.suite import evaluate as evaluate_suite

    summary = evaluate_suite(spec, stale_after_s=stale_after)
    print_suite(summary, output_format)
    exit_for_suite(summary)


def _conditions(sets: tuple[str, ...], allow_empty: bool = False) -> dict:
    return parse_assignments(sets, "--set", allow_empty=allow_empty)


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


@cli.command(cls=SectionedCommand)
@click.option("--workload", default="tinylm", show_default=True, help=_WORKLOAD_HELP)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A fixed condition; repeat for each.")
@click.option("--change", "change", required=True, metavar="KEY=VALUE", help="The one variable the candidate changes.")
@_ALLOW_EMPTY
@click.option("--attempts", type=OrDefault(click.IntRange(min=1)), default=None,
              help="Attempts per arm (the ABBA rounds). [default: 10; 5 with --method seed]")
@click.option("--steps", type=OrDefault(click.IntRange(min=1)), default=None,
              help="Measured steps per attempt (the condition steps, as --set steps=N; diagnose's --steps too). "
                   "[default: 30; 10 with --method seed]")
@click.option("--rounds", default=None, metavar="N|auto",
              help="ABBA rounds, one attempt per arm each: the same as --attempts N. auto: the rounds the latest "
                   "calibration of this workload, conditions, threads and host calls for (mlflow-perfgate calibrate), "
                   "for the policy's min improvement (or margin) at its alpha with power 0.8; needs --method paired "
                   "--interleave steps.")
@click.option("--group", default=None, help="Comparison id (default: a new one).")
@click.option("--experiment", default=None, help="Experiment name (created if missing).")
@run_options(timeout="Per-attempt wall-clock limit, seconds.",
             threads="torch threads in every attempt. [default: 1]",
             in_process="Run attempts in this process (a crash takes the run down).",
             runner="What starts each supervised attempt's child: fork (a warm server forks a clean child per "
                    "attempt; auto where available) or spawn (a fresh python per attempt).")
@_INTERLEAVE
@click.option("--until-decisive/--fixed-rounds", default=None,
              help="Add attempt pairs while the answer is rerun for lack of evidence, up to --max-attempts (default 4 "
                   "times the rounds), or judge the planned rounds at one look. [default: --until-decisive up to 2 "
                   "times the rounds in non_regression mode with the paired or robust method (not on --resume); "
                   "--fixed-rounds otherwise]")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="Per-arm cap while undecided (--until-decisive, or non_regression mode's default).")
@click.option("--resume", is_flag=True, help="Add to a group that already holds attempts (a re-run), reusing its "
              "comparison run: a group stopped before its planned rounds were complete gets the rounds that complete "
              "them, a complete one --attempts more; without it such a group is refused.")
@click.option("--allow-undecidable", is_flag=True,
              help="Run even when the attempts planned are below --min-valid-runs or below the fewest with which the "
                   "method can accept (refused by default: such a comparison cannot mean anything).")
@click.option("--keep-worktrees", is_flag=True,
              help="With a revision condition: leave the revisions' git worktrees (under .git/perfgate-worktrees) in "
                   "place afterwards.")
@click.option("--new-plan", is_flag=True,
              help="With --resume: judge the group under these options although its rounds were planned under "
                   "others (refused otherwise, naming both); its earlier looks' spending does not carry over.")
@decision_options(configured=True)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@guarded
def compare(workload, sets, change, allow_empty, attempts, steps, rounds, group, experiment, timeout_s, threads,
            in_process, runner, interleave, until_decisive, max_attempts, resume, allow_undecidable, keep_worktrees,
            new_plan, output_format, no_progress, **kwargs):
    """Run baseline and candidate attempts interleaved (ABBA) as children of a comparison run, decide."""
    conditions = _with_steps(_conditions(sets, allow_empty), steps, "--steps")
    attempts = _attempts_of(conditions, attempts, rounds)
    change = parse_assignments((change,), "--change", allow_empty=allow_empty)
    options = collect_policy(kwargs)
    if rounds is not None:
        attempts = _rounds_option(rounds)
    from mlflow_perfgate.harness import compare as run_compare

    result = _until_decided(
        run_compare, "compare", workload, conditions, change, attempts=attempts, group=group,
        experiment_name=experiment, supervised=not in_process, timeout_s=timeout_s, runner=runner,
        threads=threads, until_decisive=until_decisive, max_attempts=max_attempts, progress=not no_progress,
        resume=resume, interleave=interleave, parent_run_id=os.environ.get("MLFLOW_RUN_ID") or None,
        allow_undecidable=allow_undecidable, keep_worktrees=keep_worktrees, new_plan=new_plan,
        **options,  # nested under `mlflow run`
    )
    print_decision(result, output_format)
    exit_for(result)


def _with_steps(conditions: dict, steps: int | None, flag: str) -> dict:
    """The conditions with the measured ``steps`` an option gave (refused beside a ``--set steps=`` that disagrees)."""
    if steps is not None:
        if conditions.get("steps", str(steps)) != str(steps):
            raise click.BadParameter(f"{flag} {steps} and --set steps={conditions['steps']} disagree: give one",
                                     param_hint=flag)
        conditions["steps"] = str(steps)
    return conditions


def _attempts_of(conditions: dict, attempts: int | None, rounds: str | None = None) -> int | None:
    """The attempts per arm, with a ``--set repeats=N`` read as ``--attempts N`` (the condition is the rounds
    the comparison runs, and always logged as them); refused beside an --attempts or --rounds that disagrees."""
    if "repeats" not in conditions:
        return attempts
    from mlflow_perfgate.workloads._conditions import parse_int

    try:
        repeats = parse_int("repeats", conditions["repeats"], minimum=1)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (the rounds per arm, as --attempts gives them)", param_hint="--set") from None
    flag, given = ("--rounds", rounds) if rounds is not None else ("--attempts", attempts)
    if given is not None and str(given) != str(repeats):
        raise click.BadParameter(f"--set repeats={conditions['repeats']} and {flag} {given} disagree: give one "
                                 "(a round is one attempt per arm)", param_hint="--set")
    return repeats if given is None else attempts


def _rounds_option(text: str) -> int | str:
    """``--rounds``: ``auto`` or a positive integer; refused beside an ``--attempts`` given too."""
    from click.core import ParameterSource

    if click.get_current_context().get_parameter_source("attempts") is not ParameterSource.DEFAULT:
        raise click.UsageError("give --rounds or --attempts, not both (a round is one attempt per arm)")
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise click.BadParameter(f"expected a positive integer or auto, got {text!r}", param_hint="--rounds")


@cli.command(cls=SectionedCommand)
@click.option("--workload", default="tinylm", show_default=True, help=_WORKLOAD_HELP)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A fixed condition of both arms; repeat for each (as compare's --set).")
@_ALLOW_EMPTY
@click.option("--rounds", type=click.IntRange(min=2), default=10, show_default=True,
              help="Identical-arm rounds, both arms the same conditions, run as --interleave says.")
@click.option("--steps", type=click.IntRange(min=1), default=30, show_default=True,
              help="Measured steps of each arm in a round (the condition steps; compare's --steps must match).")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Warm-up steps of each arm (the condition warmup) [the workload's: TinyLM 2].")
@click.option("--mode", type=click.Choice(("improvement", "non_regression")), default="improvement", show_default=True,
              help="The question the advice is for: improvement (is it faster by --effect?) or non_regression (is it "
                   "no slower than --effect?).")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=None,
              help="One-sided level of the paired method's test [0.02].")
@click.option("--confidence", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=None,
              help="Confidence of its interval, which non_regression mode plans for [0.9].")
@click.option("--power", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="The chance to detect the effect that the rounds are planned for.")
@click.option("--effect", "effects", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), multiple=True,
              metavar="FRACTION", help="An effect to plan the rounds for (0.05: 5% faster, or a 5% margin); repeat "
                                       "for each; the first is the advice's [0.02, 0.05, 0.1].")
@click.option("--latency", type=click.Choice(("raw", "p10", "fastest", "uncontended")), default="p10",
              show_default=True, help="The figure the advice is about (the table shows every figure).")
@click.option("--interleave", type=click.Choice(("steps", "lockstep", "duet", "attempts")), default="steps",
              show_default=True,
              help="How the rounds share the machine, as the comparison will (compare --interleave): steps (both arms "
                   "in one child), lockstep (one child per arm, as a comparison of revisions or pythons runs), duet, "
                   "attempts. compare --rounds auto finds only a calibration of its own interleaving.")
@click.option("--experiment", default=None, help="Experiment name (created if missing).")
@run_options(timeout="Per-attempt wall-clock limit, seconds (a round's child gets twice this).",
             threads="torch threads in every round. [default: 1, as compare's]",
             in_process="Run the rounds in this process.",
             runner="What starts each round's child (see compare --help).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@guarded
def calibrate(workload, sets, allow_empty, rounds, steps, warmup, mode, alpha, confidence, power, effects, latency,
              interleave, experiment, timeout_s, threads, in_process, runner, output_format, no_progress):
    """Measure this machine's noise for a workload now: identical-arm rounds, the spread of each figure,
    the smallest effect the paired method detects and the rounds it needs; logs a calibration run,
    which compare --rounds auto reads.
    """
    conditions = _conditions(sets, allow_empty)
    from mlflow_perfgate.calibrate import DEFAULT_EFFECTS
    from mlflow_perfgate.calibrate import calibrate as run_calibrate

    summary = run_calibrate(workload, conditions, rounds=rounds, steps=steps, warmup=warmup, mode=mode, alpha=alpha,
                            confidence=confidence, power=power, effects=effects or DEFAULT_EFFECTS, latency=latency,
                            experiment_name=experiment, supervised=not in_process, runner=runner,
                            timeout_s=timeout_s, threads=threads, progress=not no_progress,
                            parent_run_id=os.environ.get("MLFLOW_RUN_ID") or None, interleave=interleave)
    if summary["failed_rounds"]:
        reasons = sorted({arm["failure"] for r in summary["rounds"] for arm in (r["baseline"], r["candidate"])
                          if arm["failure"]})
        click.echo(f"warning: {summary['failed_rounds']} of {rounds} rounds failed and are left out: "
                   f"{'; '.join(reasons)[:300]}", err=True)
    if output_format == "json":
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    from mlflow_perfgate.calibrate import calibration_table, interleaving_text

    header, rows = calibration_table(summary)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()  # noqa: E731
    steps_text = summary["conditions"].get("steps", "?")
    click.echo(f"calibration of {workload}: {summary['complete_rounds']} of {rounds} identical-arm rounds complete, "
               f"{steps_text} measured steps per arm, {interleaving_text(summary)}")
    click.echo(f"test: {summary['test']['test']}")
    click.echo("spread: 1.4826 MAD of the rounds' log ratios of the two arms (sd: their standard deviation); "
               f"speedup at n: the smallest effect detected at n rounds with power {power:g}\n")
    for cells in (header, *rows):
        click.echo(line(cells))
    click.echo(f"\nadvice: {summary['advice']}")
    click.echo(f"calibration run: {summary['calibration_run_id']}")
    click.echo(f"see it: {summary['calibration_run_url']}")


@cli.command(cls=SectionedCommand)
@click.option("--workload", default="tinylm", show_default=True, help=_WORKLOAD_HELP)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A fixed condition; repeat for each.")
@_ALLOW_EMPTY
@click.option("--attempts", type=click.IntRange(min=1), default=None,
              help="Attempts per arm the proposed comparison will run. [default: compare's]")
@click.option("--capacity-mib", type=click.FloatRange(min=0), default=None,
              help="Memory budget of the target device, MiB (0 or unset: the GPU's memory, or the machine's RAM "
                   "on CPU).")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Steps timed for the evidence.")
@click.option("--experiment", default=None, help="Experiment name (created if missing).")
@run_options(timeout="Wall-clock limit of the evidence collection, seconds.",
             threads="torch threads while the evidence is collected. [default: the current count]",
             in_process="Collect the evidence in this process (a crash takes it down, a hang is never interrupted).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
@guarded
def diagnose(workload, sets, allow_empty, attempts, capacity_mib, steps, experiment, timeout_s, threads, in_process,
             output_format):
    """Evidence (probe, stage times, memory) -> hypothesis -> a single-variable plan; logs a diagnosis run.

    The evidence is collected supervised, in a child process: a workload that crashes, hangs past
    --timeout or exits there fails the diagnosis in one line, and a FAILED diagnosis run says why.
    """
    conditions = _conditions(sets, allow_empty)
    from mlflow_perfgate.harness import diagnose as run_diagnose

    report = run_diagnose(workload, conditions, attempts=attempts, capacity_mib=capacity_mib,
                          experiment_name=experiment, steps=steps, timeout_s=timeout_s, threads=threads,
                          supervised=not in_process,
                          parent_run_id=os.environ.get("MLFLOW_RUN_ID") or None)  # nested under `mlflow run`
    if output_format == "json":
        click.echo(json.dumps(report, indent=2, default=str))
        return
    synthesis, plan = report["synthesis"], report["plan"]
    click.echo(f"status: {synthesis['status']}")
    click.echo(f"primary signal: {synthesis['primary_signal']}")
    click.echo(f"hypothesis: {synthesis['hypothesis']}")
    if "hotspot" in synthesis:
        click.echo(f"hotspot: {synthesis['hotspot']} ({synthesis['hotspot_share_pct']}% of the step)")
        click.echo(f"memory: {synthesis['dominant_object']} dominates; reserved/capacity {synthesis['capacity_ratio']}")
    click.echo(f"plan: {plan['action']}")
    if report.get("change_reason") and synthesis["status"] != "blocked_by_correctness":
        click.echo(f"why: {report['change_reason']}")
    if plan["changed_variable"]:
        from mlflow_perfgate.tracking import canonical_value

        variable = plan["changed_variable"]
        click.echo(f"single change: {variable}: {canonical_value(plan['baseline'][variable])} -> "
                   f"{canonical_value(plan['candidate'][variable])}")
        click.echo(f"objective: {report['objective']}")
        click.echo(f"test it with:\n  {report['command']}")
    click.echo(f"diagnosis run: {report['diagnosis_run_id']}")
    click.echo(f"see it: {report['diagnosis_run_url']}")


@cli.command(cls=SectionedCommand)
@click.option("--workload", default="tinylm", show_default=True, help=_WORKLOAD_HELP)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A fixed condition; repeat for each.")
@_ALLOW_EMPTY
@click.option("--attempts", type=OrDefault(click.IntRange(min=1)), default=None,
              help="Attempts per arm (the ABBA rounds). [default: 10; 5 with --method seed or the memory objective]")
@click.option("--comparison-steps", type=OrDefault(click.IntRange(min=1)), default=None,
              help="Measured steps of each attempt of the comparison (the condition steps, as --set steps=N). "
                   "[default: 30; 10 with --method seed or the memory objective]")
@click.option("--capacity-mib", type=click.FloatRange(min=0), default=None,
              help="Memory budget of the target device, MiB (0 or unset: this machine's).")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Steps timed for the evidence.")
@click.option("--fallback-change", default=None, metavar="KEY=VALUE",
              help="The change to test on latency when the diagnosis proposes none.")
@click.option("--experiment", default=None, help="Experiment name (created if missing).")
@run_options(timeout="Wall-clock limit of the diagnosis's evidence collection and of each attempt, seconds.",
             threads="torch threads in the diagnosis and in every attempt. [default: 1]",
             in_process="Diagnose and run attempts in this process.",
             runner="What starts the diagnosis's child and each attempt's (see compare --help); with fork, "
                    "one warm server serves both.")
@_INTERLEAVE
@decision_options(configured=True)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--gate", is_flag=True, help="Exit with the decision's code (as compare does) instead of 0; without a "
              "comparison (the plan proposed none), 3 (rerun), never 0.")
@guarded
def pipeline(workload, sets, allow_empty, attempts, comparison_steps, capacity_mib, steps, fallback_change,
             experiment, timeout_s, threads, in_process, runner, interleave, no_progress, gate, **kwargs):
    """The main job: diagnose, compare the plan's change under the diagnosis's objective, decide.

    Exits 0 once a decision is logged (whatever it is), or once the diagnosis is logged when it
    proposes no comparison, unless --gate.
    """
    conditions = _with_steps(_conditions(sets, allow_empty), comparison_steps, "--comparison-steps")
    attempts = _attempts_of(conditions, attempts)
    options = collect_policy(kwargs)
    fallback = parse_assignments((fallback_change,), "--fallback-change") if fallback_change else None
    from mlflow_perfgate.harness import pipeline as run_pipeline

    outcome = _until_decided(
        run_pipeline, "pipeline", workload, conditions, attempts=attempts, capacity_mib=capacity_mib or None,
        fallback_change=fallback, experiment_name=experiment, steps=steps, progress=not no_progress,
        supervised=not in_process, timeout_s=timeout_s, runner=runner, threads=threads, interleave=interleave,
        **options)
    synthesis = outcome["diagnosis"]["synthesis"]
    click.echo(f"diagnosis: {synthesis['status']}, primary signal {synthesis['primary_signal']}: "
               f"{synthesis['hypothesis']} (run {outcome['diagnosis']['diagnosis_run_id']})")
    if outcome["decision"] is None:
        click.echo(f"no comparison: the plan is {outcome['diagnosis']['plan']['action']}")
        if synthesis["status"] == "blocked_by_correctness":
            sys.exit(EXIT_CODES["blocked_by_correctness"])
        if not outcome["diagnosis"].get("diagnosis_run_id"):
            _fail("no diagnosis run was logged; nothing was accepted")
        # As a gate, no comparison is no evidence: never the accept code.
        sys.exit(EXIT_CODES["rerun"] if gate else 0)
    (variable, value), = outcome["change"].items()
    from mlflow_perfgate.tracking import canonical_value

    value = canonical_value(value)
    source = "fallback (the diagnosis proposed no change)" if outcome["fallback_used"] else "the diagnosis's plan"
    click.echo(f"comparison: {variable}={value} from {source}, objective {outcome['objective']}\n")
    print_decision(outcome["decision"], "text", gate=gate or not outcome["decision"].get("decision_run_id"))
    if gate or not outcome["decision"].get("decision_run_id"):
        exit_for(outcome["decision"])


def history_options(func):
    """The settings of ``rules.find_change_points``, derived from ``HISTORY_SETTINGS``."""
    from mlflow_perfgate.rules._history import HISTORY_SETTINGS, TESTS

    options = [_setting_option(setting) for setting in HISTORY_SETTINGS]
    options.append(click.option("--test", type=click.Choice(TESTS), default="permutation", show_default=True,
                                help="The latency test: permutation (E-Divisive, robust to outlier revisions) or t "
                                     "(Otava's t-test, flags a single trailing revision)."))
    for option in reversed(options):
        func = option(func)
    return func


#: history's options that only --bisect reads (given without it, they are refused, never ignored).
_BISECT_ONLY = ("workload", "attempts", "max_attempts", "margin", "method", "extra_thresholds", "timeout_s",
                "keep_worktrees")


def _refuse_bisect_options_without_bisect(bisect_range) -> None:
    """A bisect option given to ``history`` without ``--bisect`` would change nothing: a usage error naming it."""
    from click.core import ParameterSource

    if bisect_range:
        return
    context = click.get_current_context()
    given = [param.opts[0] for param in context.command.params if param.name in _BISECT_ONLY
             and context.get_parameter_source(param.name) not in (ParameterSource.DEFAULT, None)]
    if given:
        raise click.UsageError(f"{', '.join(given)} only apply with --bisect GOOD BAD (the history itself is read "
                               "from the runs as they were judged): add --bisect, or leave them out")


@cli.command()
@click.option("--benchmark", default=None, metavar="KEY",
              help="The benchmark's key (or a prefix; --list shows them); needed when the selection matches several.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A condition: with --bisect the fixed conditions of the comparisons; otherwise only attempts "
                   "with this value.")
@click.option("--group-prefix", default=None, help="Only attempts of groups whose name starts with this.")
@click.option("--experiment", default=None, help="Experiment name.")
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks found (key, revisions, attempts) and stop.")
@history_options
@click.option("--stale-after", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="A RUNNING attempt older than this counts as failed ('stale'), > 0 [3600].")
@click.option("--no-log", is_flag=True, help="Print the history without logging a history run.")
@click.option("--bisect", "bisect_range", nargs=2, default=None, metavar="GOOD BAD",
              help="Narrow a regression between two revisions of the git repository here to one commit, comparing "
                   "revisions (git worktrees) against GOOD; every decision already recorded is reused.")
@click.option("--workload", default=None, help="With --bisect: the workload factory module:function (each revision's "
              "children import it from that revision's worktree; a factory outside the repository finds the "
              "revision's code with mlflow_perfgate.history.revision_worktree).")
@click.option("--attempts", type=click.IntRange(min=1), default=None,
              help="With --bisect: lockstep rounds (attempts per arm) of each comparison. [default: compare's, 10]")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="With --bisect: add attempt pairs while a comparison is undecided, up to this many per arm.")
@click.option("--margin", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="With --bisect: the slowdown against GOOD tolerated before a revision is bad (the step tail's "
                   "bound too, maximum_p95_ratio = 1 + margin, unless --threshold gives it).")
@click.option("--method", type=RegistryChoice(_METHODS, lambda entry: entry.statistical),
              default="paired", show_default=True,
              help="With --bisect: how each comparison decides (a method with a test: paired, robust, a plugin's).")
@click.option("--threshold", "extra_thresholds", multiple=True, metavar="NAME=VALUE",
              help="With --bisect: any threshold of the comparisons (min_valid_runs=3).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=300.0,
              show_default=True, help="With --bisect: per-attempt wall-clock limit, seconds.")
@click.option("--keep-worktrees", is_flag=True, help="With --bisect: leave the revisions' checkouts in place.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
@guarded
def history(benchmark, sets, group_prefix, experiment, list_only, stale_after, no_log, bisect_range, workload,
            attempts, max_attempts, margin, method, extra_thresholds, timeout_s, keep_worktrees,
            output_format, test, **settings):
    """A benchmark's series over revisions: change points, labelled, logged as a history run; or --bisect.

    The benchmark is every condition but the revision, and the host, CPU model and torch version.
    With --bisect exits 0 once the first bad commit is found, 1 when BAD shows no regression
    against GOOD, 3 when the evidence cannot narrow it to one commit.
    """
    conditions = _conditions(sets)
    _refuse_bisect_options_without_bisect(bisect_range)
    if bisect_range:
        if workload is None:
            raise click.UsageError("--bisect needs --workload (the factory that runs a revision's code)")
        thresholds = collect_policy({"extra_thresholds": extra_thresholds})
        from mlflow_perfgate.history import bisect

        good, bad = bisect_range
        outcome = bisect(good, bad, workload=workload, conditions=conditions, attempts=attempts,
                         max_attempts=max_attempts, margin=margin, method=method,
                         timeout_s=timeout_s, experiment_name=experiment, keep_worktrees=keep_worktrees,
                         on_step=None if output_format == "json" else click.echo, **thresholds)
        if output_format == "json":
            click.echo(json.dumps(outcome, indent=2, default=str))
        sys.exit({"found": 0, "not_bad": 1}.get(outcome["status"], 3))
    from mlflow_perfgate.tracking import DEFAULT_STALE_AFTER_S
    from mlflow_perfgate.tracking._history import analyze, benchmark_lines, load_benchmarks

    stale = DEFAULT_STALE_AFTER_S if stale_after is None else stale_after
    if list_only:
        _, found = load_benchmarks(experiment_name=experiment, conditions=conditions, group_prefix=group_prefix,
                                   stale_after_s=stale)
        if output_format == "json":
            click.echo(json.dumps({key: {"conditions": b.conditions, "env": b.env, "revisions": len(b.revisions),
                                         "attempts": b.attempts} for key, b in found.items()}, indent=2))
        elif not found:
            click.echo("no benchmarks with a revision condition")
        else:
            for line in benchmark_lines(found):
                click.echo(line)
        return
    payload = analyze(experiment_name=experiment, benchmark=benchmark, conditions=conditions,
                      group_prefix=group_prefix, stale_after_s=stale, test=test, log=not no_log,
                      parent_run_id=os.environ.get("MLFLOW_RUN_ID") or None, **settings)
    if output_format == "json":
        shown = {k: v for k, v in payload.items() if k not in ("change_point_records", "report")}
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    from mlflow_perfgate.tracking._history import change_point_line

    click.echo(payload["report"])
    points = payload["change_point_records"]
    tail = [f"benchmark {payload['benchmark']}: {len(payload['revisions'])} revisions, {len(points)} change points"]
    tail += [f"  {change_point_line(point)}" for point in points]
    if payload["history_run_id"]:
        tail.append(f"history run: {payload['history_run_id']}")
        tail.append(f"see it: {payload['history_run_url']}")
    click.echo("\n".join(tail))


@cli.command()
@click.option("--group", required=True, help="The comparison the attempts belong to.")
@click.option("--run-id", "run_ids", multiple=True, required=True, help="An attempt run to exclude; repeat for each.")
@click.option("--reason", required=True, help="What was mistaken about it (kept on the run).")
@guarded
@reads_only
def forget(group, run_ids, reason):
    """Exclude mistaken attempts from a group's decisions (tagged, with the reason; never deleted)."""
    from mlflow_perfgate.tracking import forget as exclude

    for run_id in exclude(group, list(run_ids), reason):
        click.echo(f"excluded {run_id}")
    click.echo("evaluate again to decide without them")


@cli.command()
@guarded
def sync():
    """Send journaled attempts that never reached the tracking server (idempotent)."""
    from mlflow_perfgate.tracking import sync as replay

    counts = replay()
    click.echo(f"{counts['sent']} sent, {counts['already_present']} already present "
               f"(of {counts['pending_before']} waiting in the journal)")
    if counts.reconciled:
        click.echo(f"{len(counts.reconciled)} runs shown otherwise than counted were ended as counted "
                   "(a second run of one attempt, a decision run without its decision, an outcome shown FAILED)")
    if counts.in_flight:
        click.echo(f"{counts.in_flight} attempts started and are still running (or ran on another host): left pending")
    for line in counts.skipped_lines:
        click.echo(f"warning: journal line skipped: {line}", err=True)


@cli.command()
@click.option("--older-than", required=True, metavar="DURATION", help="Age past which a RUNNING attempt is stale: 90s, 30m, 2h, 1d.")
@click.option("--experiment", default=None, help="Experiment name.")
@click.option("--group", default=None, help="Only this comparison's attempts.")
@guarded
@reads_only
def reap(older_than, experiment, group):
    """Mark attempts RUNNING for longer than DURATION as KILLED, with the reason."""
    from mlflow_perfgate.tracking import parse_duration, reap as reap_runs

    reaped = reap_runs(parse_duration(older_than), experiment_name=experiment, group=group)
    click.echo(f"{len(reaped)} runs ended as the evaluator counts them (stale or orphaned runs KILLED, written "
               "outcomes as they say)")
    for run_id in reaped:
        click.echo(f"  {run_id}")


@cli.command()
@click.option("--experiment", default="perfgate-demo", show_default=True, help="Experiment for the logged example.")
@click.option("--no-log", is_flag=True, help="Only run the rules; log nothing to MLflow.")
@guarded
def demo(experiment, no_log):
    """Run the specification's constructed example through the rules, then log it and decide."""
    from mlflow_perfgate import examples

    for title, result in examples.run_rules():
        decision = result.get("decision") or result.get("action") or result.get("status") or result.get("performance_action")
        click.echo(f"{title}: {decision or ''}")
        click.echo("  " + json.dumps(result, default=str))
    if no_log:
        return
    from mlflow_perfgate.tracking import evaluate_group, log_attempt

    group = f"demo-{os.getpid()}-{int(__import__('time').time())}"
    click.echo(f"\nlogging the example as group {group!r} in experiment {experiment!r} ...")
    candidate = {**examples.BASELINE, "checkpoint": True}
    for latency in examples.BASELINE_MS:
        log_attempt(group, "baseline", examples.BASELINE, latency_ms=latency, quality=0.9, experiment_name=experiment)
    for latency in examples.CANDIDATE_MS:
        log_attempt(group, "candidate", candidate, latency_ms=latency, quality=0.895, experiment_name=experiment)
    log_attempt(group, "candidate", candidate, ok=False, failure="timeout", experiment_name=experiment)
    result = evaluate_group(group, experiment_name=experiment)
    print_decision(result, "text")


#: The arguments of this process's command, as typed (a rerun's next step repeats them).
_INVOKED: list[str] = []


def main(argv: list[str] | None = None) -> None:
    """Entry point: click in non-standalone mode so usage errors are one line with exit code 2."""
    _INVOKED[:] = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=argv, prog_name="mlflow-perfgate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's word for Ctrl-C
            click.echo("Error: interrupted (Ctrl-C): every run it had started was ended (what was measured written, "
                       "the attempts cut short withdrawn, the comparison or suite run KILLED)", err=True)
            sys.exit(EXIT_INTERRUPTED)
        _fail("aborted")
    except click.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "))
    except BaseException as exc:
        if type(exc).__name__ != "Terminated":  # harness.Terminated: SIGTERM reached a comparison
            raise
        click.echo(f"Error: stopped, {exc}: every run it had started was ended (what was measured written, the "
                   "attempts cut short withdrawn, the comparison or suite run KILLED)", err=True)
        sys.exit(EXIT_TERMINATED)
    sys.exit(0)


def entry() -> NoReturn:
    """The console script's entry, and ``python -m mlflow_perfgate``'s: :func:`main`, then a quick end.

    A comparison leaves about 3,000 modules imported (mlflow, SQLAlchemy, scipy, matplotlib), and
    the interpreter's teardown of them took about a second on a 2-core machine, after everything
    was written. So when :func:`main` has returned its exit status and no other thread that the
    interpreter would wait for is alive, the exit handlers run here (MLflow's, the temporary
    directories', an attempt runner's), the streams are flushed, and the process ends without
    that teardown. Anything else (another thread alive, an uncaught error) ends as Python does.
    """
    import atexit
    import threading

    try:
        main()
        status = 0
    except SystemExit as exc:
        status = exc.code
    if any(thread is not threading.main_thread() and thread.is_alive() and not thread.daemon
           for thread in threading.enumerate()):
        sys.exit(status)
    if status is None:
        status = 0
    elif not isinstance(status, int):  # sys.exit("message"): the message on stderr, status 1
        print(status, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: Python's own exit says 120 then
            status = status or 120
    os._exit(status)
