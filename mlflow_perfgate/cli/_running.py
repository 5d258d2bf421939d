"""``compare``, ``calibrate``, ``diagnose`` and ``pipeline``: the commands that run attempts."""

from __future__ import annotations

import json
import os
import sys

import click

from ._common import (EXIT_CODES, _conditions, _fail, _until_decided, exit_for, guarded, parse_assignments,
                      print_decision)
from ._group import cli
from ._options import (OrDefault, SectionedCommand, _ALLOW_EMPTY, _INTERLEAVE, _WORKLOAD_HELP, collect_policy,
                       decision_options, run_options)


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
    from mlflow_perfgate.workloads import parse_int

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
    from mlflow_perfgate.calibrate import DEFAULT_EFFECTS, calibrate as run_calibrate

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
