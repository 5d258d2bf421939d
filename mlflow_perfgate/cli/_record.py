"""``record``: an attempt measured elsewhere, logged from options or from JSON lines."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

import click

from ._common import _fail, guarded, parse_assignments
from ._group import cli
from ._options import OptionalFloat


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
    from mlflow_perfgate.tracking import check_attempt

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
    from mlflow_perfgate.tracking import check_parent_runs, journal_path, log_series

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
    from mlflow_perfgate.tracking import short_error

    return short_error(cause)
