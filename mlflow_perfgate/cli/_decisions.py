"""``evaluate``, ``decisions`` and ``report``: judging a group, and reading decisions back."""

from __future__ import annotations

import json
import os
import shlex

import click

from ._common import exit_for, guarded, only_reads, print_decision, reads_only
from ._group import cli
from ._options import SectionedCommand, collect_policy, decision_options


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
    from mlflow_perfgate.tracking import decisions_frame, default_uri

    def through_mlflow(*query):
        from mlflow_perfgate.tracking import mlflow_decision_records  # imports MLflow

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
        from mlflow_perfgate.tracking import current_store

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
