"""``suite run`` and ``suite evaluate``: a file of comparisons under one error control."""

from __future__ import annotations

import json
import os

import click

from ._common import EXIT_CODES, exit_for_suite, guarded, reads_only
from ._group import cli


def print_suite(summary: dict, output_format: str) -> None:
    """The suite's report table (or its JSON), then the tail: the gate's answer, what is open, where to look."""
    if output_format == "json":
        shown = {key: value for key, value in summary.items() if key not in ("gate", "results")}
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    from mlflow_perfgate.rules import REASONS, SUITE_REASONS

    click.echo(summary["report"])
    reason = summary["reason"]
    tail = [f"suite decision: {summary['decision'].upper()} (exit code {EXIT_CODES[summary['decision']]})",
            f"why: {SUITE_REASONS.get(reason, reason)} ({reason})"]
    for entry in summary["entries"]:
        if entry["verdict"] != "accept":
            why = SUITE_REASONS.get(entry["reason"]) or REASONS.get(entry["reason"], entry["reason"])
            if entry.get("failed_checks") and entry["verdict"] == "reject" and \
                    entry["reason"] == "declared_thresholds_checked":
                why = f"FAILED: {', '.join(entry['failed_checks'])}"  # as the table says it: never "every ... checked"
            elif entry.get("failed_checks"):
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
