"""``mlflow-perfgate calibrate``: how much noise this machine puts between two identical arms now, and
what the paired method can resolve through it.

A calibration runs ``rounds`` rounds of one workload whose two arms have the same conditions, the
way the comparison it plans for will run them (``interleave``): step-interleaved in one child per
round (``steps``, ``workloads.run_interleaved``), one child per arm their steps in lockstep
(``lockstep``, ``duet``: what a comparison of revisions or environments runs), or whole attempts
(``attempts``); the arm that leads alternates between rounds, as in a comparison. Conditions that
place the arms (``revision``, ``python``: ``mlflow_perfgate.sites``) place both. Whatever differs
between the arms of a round is noise. For each figure a decision can judge (``--latency raw``,
``p10``, ``fastest``, ``uncontended``) the rules compute the within-round log ratios, their spread,
the smallest effect the paired method's test detects at a few numbers of rounds, and the rounds
it needs for each effect asked (``rules._calibration``, where the formulas and the test they are
for are written). The calibration is logged as a calibration run (``tracking._calibration``);
``compare --rounds auto`` plans from the latest one of the same workload, conditions, threads and
host (``harness.auto_rounds``).
"""

from __future__ import annotations

import collections
import math
import sys
import time
from typing import Any, Sequence

from .rules import (CALIBRATION_LATENCIES, DEFAULT_HORIZONS, MAX_AUTO_ROUNDS, MAX_ROUNDS, arm_figures,
                    detectable_effect, power_test, rounds_needed, spreads)
from .rules import InputError, LATENCY_KEYS, check_unit_interval

__all__ = ["DEFAULT_EFFECTS", "calibrate", "calibration_table", "effect_text", "interleaving_text"]

#: The effects whose rounds a calibration reports when none are asked for (fractions: 5% is 0.05).
DEFAULT_EFFECTS = (0.02, 0.05, 0.10)


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if type(value) is not int or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _count(conditions: dict, name: str, given: int | None, minimum: int) -> None:
    """``steps`` / ``warmup`` as the argument gives it, refusing a condition that says otherwise."""
    if given is None:
        return
    _positive_int(given, name, minimum)
    held = conditions.get(name)
    if held is not None and str(held).strip() != str(given):
        raise InputError(f"{name} is given twice, {given} and as the condition {name}={held!r}: give it once "
                         f"(--{name})")
    conditions[name] = given


def calibrate(
    workload: str = "tinylm",
    conditions: dict | None = None,
    *,
    rounds: int = 10,
    steps: int | None = 30,
    warmup: int | None = None,
    mode: str = "improvement",
    alpha: float | None = None,
    confidence: float | None = None,
    power: float = 0.8,
    effects: Sequence[float] = DEFAULT_EFFECTS,
    latency: str = "p10",
    horizons: Sequence[int] = DEFAULT_HORIZONS,
    experiment_name: str | None = None,
    supervised: bool = True,
    runner: Any = "auto",
    timeout_s: float = 300.0,
    threads: int | None = None,
    progress: bool = True,
    parent_run_id: str | None = None,
    interleave: str = "steps",
) -> dict:
    """Run identical-arm rounds of a workload, measure each figure's within-round spread, log a calibration run.

    Args:
        workload: ``tinylm`` or a factory ``module:function`` (as for ``compare``).
        conditions: the fixed conditions (TinyLM fills in the specification's baseline), both arms'.
        rounds: step-interleaved rounds, >= 2.
        steps, warmup: measured and warm-up steps of each arm in a round (conditions ``steps`` and
            ``warmup``; ``None`` leaves the condition, or the workloads' default, as it is).
        mode, alpha, confidence: the paired method's test the advice is for (``Policy``).
        power: the chance to detect an effect that the advice plans for, in (0, 1).
        effects: the effects whose rounds are reported (speedups in improvement mode, margins in
            non_regression mode), each in (0, 1); the first is the advice's.
        latency: the figure the advice is about (every figure is measured).
        horizons: the numbers of rounds at which the smallest detectable effect is reported.
        experiment_name: where the calibration run goes (created if missing).
        supervised, runner, timeout_s, threads: as for ``compare`` (a round's child is limited to
            twice ``timeout_s``; ``threads`` defaults to 1, as ``compare``'s).
        progress: a progress bar on stderr.
        parent_run_id: a run to nest the calibration run under.
        interleave: how the rounds share the machine, as ``compare --interleave`` (``steps``,
            ``lockstep``, ``duet``, ``attempts``): the noise of the interleaving the comparison
            will use (a comparison of revisions runs ``lockstep``). ``compare --rounds auto``
            finds only a calibration of its own interleaving.

    Returns:
        The calibration: ``workload``, ``conditions``, ``identity``, ``environment``, ``threads``,
        ``rounds_asked``, ``complete_rounds``, ``failed_rounds``, ``test`` (the paired method's,
        in words too), ``latency``, ``effects``, ``horizons``, ``power``, ``figures`` (per figure:
        ``latency``, ``key``, ``rounds``, ``spread``, ``sd``, ``log_ratios``, ``detectable``
        ``{n: effect or None}``, ``needed`` ``{effect: rounds}``), ``advice``,
        ``advised_rounds``, ``detectable_effect``, ``rounds`` (each round's figures, step
        times and failures), ``calibration_run_id`` and ``calibration_run_url``.

    Raises:
        InputError, PolicyError: a bad argument (nothing runs or is logged).
        WorkloadFailed: fewer than 2 rounds completed in both arms; the calibration run is
            FAILED and says why (``run_id``).
    """
    from . import harness, rules
    from .errors import WorkloadFailed

    _positive_int(rounds, "rounds", 2)
    check_unit_interval(power, "power", InputError)
    effects = tuple(effects)
    if not effects:
        raise InputError("effects must hold at least one effect")
    for effect in effects:
        check_unit_interval(effect, "effect", InputError)
    horizons = tuple(sorted({_positive_int(n, "horizon") for n in horizons}))
    if threads is not None:
        _positive_int(threads, "threads")
    else:  # compare's default, so that its --rounds auto finds this calibration
        threads = harness.RECOMMENDED["threads"]
    if not (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0
            and math.isfinite(timeout_s)):
        raise InputError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    policy = rules.Policy(method="paired", mode=mode, alpha=alpha, confidence=confidence, latency=latency)
    test = power_test(policy, power)
    given = dict(conditions or {})
    _count(given, "steps", steps, 1)
    _count(given, "warmup", warmup, 0)
    base = harness.with_declared_conditions(workload, harness.base_conditions(workload, given, rounds))
    harness.require_fixed_conditions(base)
    harness.check_interleave(interleave, "", base, "latency", supervised, runner)
    for placed in ("revision", "python"):
        if base.get(placed) not in (None, "") and not supervised:
            raise InputError(f"{placed} places the arms in child processes of their own, and --in-process runs none: "
                             "leave --in-process out")
    started_ms = int(time.time() * 1000)
    from .sites import arm_sites

    sites = arm_sites(workload, {"baseline": base, "candidate": base})
    try:
        if sites is not None:  # both arms at the revision's worktree, or in the interpreter, given
            base = {**base, **sites.conditions["baseline"]}
        identity = harness.calibration_identity(workload, base, threads, interleave)
        conditions_logged = {key: value for key, value in base.items() if key != "repeats"}
        active, owned = harness.runner_for(runner, workload, supervised, sites=sites,
                                            lockstep=interleave in harness.LOCKSTEP_MODES)
        try:
            harness.ready_store_while_warming(workload, active, timeout_s)
            records = _run_rounds(workload, base, rounds, supervised=supervised, runner=active, timeout_s=timeout_s,
                                  threads=threads, progress=progress, interleave=interleave)
        finally:
            if owned:
                active.close()
    finally:
        if sites is not None:
            sites.close()
    from .tracking import fingerprint, log_calibration, run_url

    complete = [r for r in records if r["complete"]]
    found = spreads({"baseline": r["baseline"]["figures"], "candidate": r["candidate"]["figures"]} for r in complete)
    threads_seen = collections.Counter(arm["torch_threads"] for r in records for arm in (r["baseline"], r["candidate"])
                                       if arm["torch_threads"] is not None)
    environment = fingerprint({"gpu_name": harness.gpu_name_of(base),
                               **({"torch_threads": threads_seen.most_common(1)[0][0]} if threads_seen else {})})
    figures = []
    for option in CALIBRATION_LATENCIES:
        spread = found[option]
        item = spread.to_dict()
        item["detectable"] = {n: None if spread.spread is None else detectable_effect(spread.spread, n, test)
                              for n in horizons}
        item["needed"] = {effect: None if spread.spread is None else rounds_needed(spread.spread, effect, test)
                          for effect in effects}
        figures.append(item)
    summary = {
        "workload": workload, "conditions": conditions_logged, "identity": identity, "environment": environment,
        "interleave": interleave,
        "threads": "default" if threads is None else threads, "rounds_asked": rounds,
        "complete_rounds": len(complete), "failed_rounds": len(records) - len(complete), "test": test.to_dict(),
        "latency": latency, "effects": list(effects), "horizons": list(horizons), "power": power,
        "figures": figures, "rounds": records,
    }
    chosen = next(item for item in figures if item["latency"] == latency)
    summary["advised_rounds"] = chosen["needed"][effects[0]]
    summary["detectable_effect"] = (None if chosen["spread"] is None
                                    else detectable_effect(chosen["spread"], rounds, test))
    summary["advice"] = _advice(summary, chosen, policy)
    summary["note"] = _note(summary)
    failure = None
    if len(complete) < 2:
        reasons = sorted({arm["failure"] for r in records for arm in (r["baseline"], r["candidate"]) if arm["failure"]})
        failure = (f"only {len(complete)} of {rounds} rounds completed in both arms (a spread needs 2): "
                   f"{'; '.join(reasons)[:500] or 'no reason given'}")
    run_id = log_calibration(summary, experiment_name=experiment_name, parent_run_id=parent_run_id,
                             start_time=started_ms, failure=failure)
    if failure:
        raise WorkloadFailed(f"calibration failed: {failure} (FAILED calibration run {run_id})", run_id=run_id)
    summary.pop("note")
    summary["calibration_run_id"] = run_id
    summary["calibration_run_url"] = run_url(run_id)
    return summary


def _round(workload: str, base: dict, *, interleave: str, supervised: bool, runner: Any, timeout_s: float,
           threads: int | None) -> tuple:
    """One identical-arm round's two results, leading arm first, run as ``interleave`` says."""
    from .workloads import run_attempt, run_interleaved

    arguments = dict(threads=threads, memory=False, probe=False)
    if interleave == "steps":
        return run_interleaved(workload, base, base, supervised=supervised, timeout_s=2 * timeout_s, runner=runner,
                               **arguments)
    if interleave in ("lockstep", "duet"):
        return runner.run_lockstep(workload, base, base, timeout_s=2 * timeout_s, duet=interleave == "duet",
                                   **arguments)
    return tuple(run_attempt(workload, base, supervised=supervised, timeout_s=timeout_s, runner=runner, **arguments)
                 for _ in range(2))


def _run_rounds(workload: str, base: dict, rounds: int, *, supervised: bool, runner: Any, timeout_s: float,
                threads: int | None, progress: bool, interleave: str = "steps") -> list[dict]:
    """The identical-arm rounds, both arms ``base``, the leading arm alternating (ABBA)."""
    from tqdm import tqdm

    from .workloads import INTERLEAVE_REFUSED

    records = []
    with tqdm(total=rounds, desc="calibrate", unit="round", disable=not progress, file=sys.stderr) as bar:
        for index in range(rounds):
            order = ("baseline", "candidate") if index % 2 == 0 else ("candidate", "baseline")
            results = _round(workload, base, interleave=interleave, supervised=supervised, runner=runner,
                             timeout_s=timeout_s, threads=threads)
            refused = next((r.failure for r in results if (r.failure or "").startswith(INTERLEAVE_REFUSED)), None)
            if refused:
                raise InputError(refused.split(": ", 1)[1])
            arms = dict(zip(order, results))
            record = {"round": index, "lead": order[0]}
            for arm in ("baseline", "candidate"):
                result = arms[arm]
                figures = (arm_figures(result.latency_ms, result.step_times_ms, result.uncontended_latency_ms)
                           if result.ok else None)
                record[arm] = {"ok": result.ok, "failure": result.failure, "figures": figures,
                               "step_times_ms": list(result.step_times_ms), "torch_threads": result.torch_threads,
                               "wait_share": result.wait_share}
            record["complete"] = all(record[arm]["ok"] for arm in ("baseline", "candidate"))
            records.append(record)
            if record["complete"]:
                key = LATENCY_KEYS["raw"]
                ratio = record["candidate"]["figures"][key] / record["baseline"]["figures"][key]
                bar.set_postfix_str(f"median-step ratio {ratio:.3f}")
            else:
                bar.set_postfix_str(f"failed: {(results[0].failure or results[1].failure or '')[:40]}")
            bar.update(1)
    return records


def interleaving_text(summary: dict) -> str:
    """How a calibration's rounds shared the machine, in words."""
    return {"steps": "both arms' steps interleaved in one child per round",
            "lockstep": "one child per arm and round, their steps alternated in lockstep",
            "duet": "one child per arm and round, their steps run at once (duet)",
            "attempts": "whole attempts, one child each"}[summary.get("interleave", "steps")]


def effect_text(effect: float) -> str:
    """An effect as a percentage: ``0.05`` -> ``5%``, ``0.025`` -> ``2.5%``."""
    return f"{effect * 100:.3g}%"


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def _rounds_text(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value}+" if value >= MAX_ROUNDS else str(value)


def calibration_table(summary: dict) -> tuple[list[str], list[list[str]]]:
    """The calibration's table: a header and one row per figure (strings), for the text and the note.

    Columns: the latency option and its record key, the rounds holding it, its spread (1.4826
    MAD of the log ratios) and sample sd, the smallest detectable effect at each horizon (``-``
    below the test's floor), and the rounds needed for each effect (``1000+``: that many or more).
    """
    name = "speedup" if summary["test"]["mode"] == "improvement" else "margin"
    header = ["latency", "figure", "rounds", "spread", "sd",
              *(f"{name} at {n}" for n in summary["horizons"]),
              *(f"rounds for {effect_text(effect)}" for effect in summary["effects"])]
    rows = []
    for item in summary["figures"]:
        rows.append([item["latency"], item["key"], str(item["rounds"]), _pct(item["spread"], 2), _pct(item["sd"], 2),
                     *(_pct(item["detectable"][n]) for n in summary["horizons"]),
                     *(_rounds_text(item["needed"][effect]) for effect in summary["effects"])])
    return header, rows


def _advice(summary: dict, chosen: dict, policy) -> str:
    """One line: the rounds ``compare`` needs for the first effect on the chosen figure, or why it cannot tell."""
    latency, effect = summary["latency"], summary["effects"][0]
    if chosen["spread"] is None:
        return (f"no advice for --latency {latency}: only {chosen['rounds']} of the {summary['complete_rounds']} "
                f"complete rounds hold {chosen['key']} in both arms (a spread needs 2); choose another --latency")
    what = (f"a {effect_text(effect)} speedup" if policy.mode == "improvement"
            else f"no slowdown beyond a {effect_text(effect)} margin")
    needed = chosen["needed"][effect]
    steadier = min((item for item in summary["figures"] if item["spread"] is not None),
                   key=lambda item: item["spread"])
    hint = ""
    if steadier["latency"] != latency and steadier["spread"] < 0.8 * chosen["spread"]:
        hint = f"; --latency {steadier['latency']} is steadier here (spread {steadier['spread']:.2%})"
    if needed > MAX_AUTO_ROUNDS:
        return (f"at this noise ({chosen['key']} spread {chosen['spread']:.2%} per round) the paired method needs "
                f"{_rounds_text(needed)} rounds to show {what}, beyond compare --rounds auto's {MAX_AUTO_ROUNDS}: "
                f"calibrate at a quieter moment, pin --threads 1, or measure more --steps{hint}")
    mode = "" if policy.mode == "improvement" else " --mode non_regression"
    at = summary["rounds_asked"]
    detectable = summary["detectable_effect"]
    tail = (f"; {at} rounds detect {_pct(detectable)}" if detectable is not None
            else f"; {at} rounds are below the test's floor of {summary['test']['floor']}")
    threads = "" if summary["threads"] == "default" else f" --threads {summary['threads']}"
    return (f"to show {what} on {chosen['key']} (spread {chosen['spread']:.2%} per round), run compare --method paired "
            f"--latency {latency} --interleave {summary['interleave']}{mode}{threads} --rounds {needed} (or --rounds "
            f"auto){tail}{hint}")


def _note(summary: dict) -> str:
    """The calibration run's note (markdown, shown in the MLflow UI)."""
    header, rows = calibration_table(summary)
    lines = [f"## Calibration of `{summary['workload']}`: {summary['complete_rounds']} of {summary['rounds_asked']} "
             "identical-arm rounds complete", "",
             f"- advice: {summary['advice']}", f"- test: {summary['test']['test']}",
             f"- spread: 1.4826 MAD of each round's log ratio of two identical arms ({interleaving_text(summary)})",
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
