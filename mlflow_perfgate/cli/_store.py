"""The store's upkeep: ``forget``, ``sync``, ``reap``, and the ``demo``."""

from __future__ import annotations

import json
import os

import click

from ._common import guarded, print_decision, reads_only
from ._group import cli


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
