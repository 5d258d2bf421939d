"""``history``: a benchmark's series over revisions, its change points, and ``--bisect``."""

from __future__ import annotations

import json
import os
import sys

import click

from ._common import _conditions, guarded
from ._group import cli
from ..rules import METHODS

from ._options import RegistryChoice, _setting_option, policy_options


def history_options(func):
    """The settings of ``rules.find_change_points``, derived from ``HISTORY_SETTINGS``."""
    from mlflow_perfgate.rules import HISTORY_SETTINGS, TESTS

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
@click.option("--method", type=RegistryChoice(METHODS, lambda entry: entry.statistical),
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
        thresholds = policy_options({"extra_thresholds": extra_thresholds})
        from mlflow_perfgate.history import bisect

        good, bad = bisect_range
        outcome = bisect(good, bad, workload=workload, conditions=conditions, attempts=attempts,
                         max_attempts=max_attempts, margin=margin, method=method,
                         timeout_s=timeout_s, experiment_name=experiment, keep_worktrees=keep_worktrees,
                         on_step=None if output_format == "json" else click.echo, **thresholds)
        if output_format == "json":
            click.echo(json.dumps(outcome, indent=2, default=str))
        sys.exit({"found": 0, "not_bad": 1}.get(outcome["status"], 3))
    from mlflow_perfgate.tracking import DEFAULT_STALE_AFTER_S, analyze, benchmark_lines, load_benchmarks

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
    from mlflow_perfgate.tracking import change_point_line

    click.echo(payload["report"])
    points = payload["change_point_records"]
    tail = [f"benchmark {payload['benchmark']}: {len(payload['revisions'])} revisions, {len(points)} change points"]
    tail += [f"  {change_point_line(point)}" for point in points]
    if payload["history_run_id"]:
        tail.append(f"history run: {payload['history_run_id']}")
        tail.append(f"see it: {payload['history_run_url']}")
    click.echo("\n".join(tail))
