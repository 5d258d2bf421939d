"""What a person reads: the markdown note and report, the latency plot, the attempts table.

Public: :func:`decision_markdown` (the report of a result), :func:`read_report` and
:func:`read_decision` (a decision run's ``report.md`` and ``decision.json``). The report's
figure rows and its "what each method says" lines come from the registries.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shlex
import statistics
import tempfile
from pathlib import Path
from typing import Mapping, NamedTuple

from ..errors import FormatError
from ..rules import LATENCY_KEYS, METHODS, OBJECTIVES, REASONS, change_text, headline, interval_text, pct, plain
from . import _client, _markdown as md
from ._schema import ARMS, ARTIFACT_DIR, DECISION_FORMAT, MAX_TAG_VALUE, fit

__all__ = ["ARTIFACT_DIR", "decision_markdown", "decision_summary", "draw_plots", "fit_note", "latency_plot",
           "log_artifacts", "metric_figure", "objective_plot", "read_decision", "write_files",
           "read_report", "reason_text", "verdict_word", "write_step_summary"]

#: The rows every report has: (label, key of the arm summary, unit).
_COMMON_ROWS = (
    ("attempts", "attempted_runs", ""), ("successful", "valid_runs", ""), ("failed", "failed_runs", ""),
    ("failure rate", "failure_rate", "%"), ("median", "median_ms", " ms"), ("P95 (nearest rank)", "p95_ms", " ms"),
    ("quality", "quality", ""),
)


#: The step figures every latency decision judges (``rules._guards``), where the attempts carry step
#: times: each the median over the successful attempts of that attempt's figure.
_STEP_ROWS = (("typical step: median over attempts of each one's median step", "typical_step_ms"),
              ("mean step: median over attempts of each one's measured time / steps", "mean_step_ms"),
              ("step tail: median over attempts of each one's P95 step", "step_p95_ms"))
#: Each attempt's judged figure in the figures table's words, by the latency judged.
_PER_ATTEMPT = {"raw": "each one's median step", "p10": "each one's 10th-percentile step",
                "fastest": "each one's fastest step", "uncontended": "each one's uncontended latency"}
#: The step checks and what each judges, for the report's "judged" line.
_STEP_CHECKS = {"typical_step_ok": "the typical step", "mean_step_ok": "the mean step (throughput)",
                "step_tail_ok": "the step tail (P95 of the steps)"}


def judged_text(result: dict) -> str | None:
    """Which figures the decision judged, in words: the method's tested figure, then the step checks."""
    messages = result.get("messages") or {}
    if result.get("objective", "latency") != "latency" or "decision" not in result or not messages:
        return None
    latency = result.get("latency", "raw")
    tested = "the typical step (each attempt's median step)" if latency == "raw" else (
        f"`{latency}` ({_JUDGED.get(latency, latency)}), as the estimator of the typical step")
    guards = [words for name, words in _STEP_CHECKS.items() if name in messages]
    if not guards:
        return f"{tested}; the attempts carry no step times, so their tail is the P95 over attempts"
    return f"{tested}, tested by the method; and no worse beyond its bound: {', '.join(guards)}"


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and unit == "%":
        return pct(value)
    if isinstance(value, (int, float)):
        return f"{plain(value)}{unit}"
    return f"{value}{unit}"


def _rows() -> list[tuple[str, str, str, bool]]:
    """(label, key, unit, shown only when an arm has it): the common rows, then each objective's."""
    rows = [(label, key, unit, False) for label, key, unit in _COMMON_ROWS]
    rows += [(label, key, " ms", True) for label, key in _STEP_ROWS]
    seen = {key for _, key, _ in _COMMON_ROWS} | {key for _, key in _STEP_ROWS}
    for name in OBJECTIVES:
        for figure in OBJECTIVES[name].arm_figures:
            if figure.name not in seen:
                seen.add(figure.name)
                rows.append((figure.label or figure.name, figure.name, figure.unit, True))
    return rows


def _headline(result: dict) -> str:
    objective = OBJECTIVES[result["objective"]] if result.get("objective") in OBJECTIVES else None
    accept = objective.headlines.get(result.get("mode", "improvement")) if objective else None
    return _reject_headline(result) or headline(result["decision"], accept)


def _asked_improvement(result: dict) -> float | None:
    """The improvement an improvement-mode comparison asked for (the seed's bar, noise included, where it ran)."""
    for value in (result.get("required_improvement"), (result.get("thresholds") or {}).get("min_improvement")):
        if _number(value):
            return float(value)
    return None


def _shown_slower(deciding: dict) -> bool:
    """Whether the deciding figures show the candidate slower: the interval above 1, or, for a method
    without an interval (the seed's ratio of medians), the estimate above 1."""
    if _number(deciding.get("confidence")):
        low = deciding.get("ratio_ci_low")
        return _number(low) and low > 1
    ratio = deciding.get("ratio")
    return _number(ratio) and ratio > 1


def _not_shown_faster(result: dict) -> bool:
    """An improvement-mode reject on its main check alone, without the candidate shown slower."""
    return (result.get("decision") == "reject" and result.get("mode", "improvement") == "improvement"
            and list(result.get("failed_checks") or []) == ["improvement_ok"]
            and not _shown_slower(result.get("deciding") or {}))


def _reject_headline(result: dict) -> str | None:
    """A reject's headline in the words of the question asked (``None`` for another verdict).

    In improvement mode a reject on the main check alone is "not shown to be at least 5% faster",
    and "slower" only where the interval lies above 1; otherwise the failed checks, named."""
    failed = list(result.get("failed_checks") or [])
    if result.get("decision") != "reject" or not failed:
        return None
    asked = _asked_improvement(result)
    faster = f"at least {asked * 100:g}% faster" if asked is not None and asked > 0 else "faster"
    if failed == ["improvement_ok"] and result.get("mode", "improvement") == "improvement":
        if _not_shown_faster(result):
            return f"REJECT: the candidate is not shown to be {faster} (nor shown slower)"
        if _number((result.get("deciding") or {}).get("confidence")):
            return f"REJECT: the candidate is slower (its interval lies above 1), not {faster}"
        return f"REJECT: the candidate is slower (its median above the baseline's), not {faster}"
    return f"REJECT: the candidate fails {len(failed)} declared check{'s' if len(failed) > 1 else ''}: " + \
        ", ".join(failed)


def verdict_word(decision: str) -> str:
    """The verdict as the headline starts: ``ACCEPT``, ``REJECT``, ``RERUN``, ``BLOCKED BY CORRECTNESS``."""
    return headline(decision).split(":", 1)[0]


def _without_status(message: str) -> str:
    for word in ("FAILED: ", "INCONCLUSIVE: ", "ok: "):
        if message.startswith(word):
            return message[len(word):]
    return message


def reason_text(result: dict) -> str:
    """The reason in words: which checks failed and by how much, or what the answer waits for.

    - reject: each failed check and its message (the candidate value, the baseline value and
      the threshold), ``; ``-separated;
    - rerun: the undecided checks' messages (``inconclusive``), or the reason with the counts
      behind it (``insufficient_valid_runs``, ``unreliable_baseline``, ``attempts_in_progress``);
    - blocked by correctness: the issues and the first failure;
    - accept: every declared check passed, and which.
    """
    decision, reason = result["decision"], result["reason"]
    words = REASONS.get(reason, reason)
    messages = result.get("messages") or {}
    b, c = result.get("baseline") or {}, result.get("candidate") or {}
    if decision == "reject":
        failed = [name for name in result.get("failed_checks", []) if name in messages]
        if failed:
            return "; ".join(f"{name} failed: {_without_status(messages[name])}" for name in failed)
    if decision == "rerun" and reason == "inconclusive":
        open_checks = [name for name, text in messages.items() if text.startswith("INCONCLUSIVE")]
        if open_checks:
            return "; ".join(f"{name} undecided: {_without_status(messages[name])}" for name in open_checks)
    if reason == "insufficient_valid_runs":
        needed = (result.get("thresholds") or {}).get("min_valid_runs")
        return (f"{words}: baseline {b.get('valid_runs')} of {b.get('attempted_runs')} attempts succeeded, "
                f"candidate {c.get('valid_runs')} of {c.get('attempted_runs')}; min_valid_runs {needed}")
    if reason == "unreliable_baseline":
        limit = (result.get("thresholds") or {}).get("maximum_failure_rate")
        return (f"{words}: baseline failure rate {pct(b.get('failure_rate'))} ({b.get('failed_runs')} of "
                f"{b.get('attempted_runs')}) against maximum_failure_rate {pct(limit)}")
    if reason == "attempts_in_progress":
        return f"{words}: {len(result.get('running_runs', []))} still running"
    if decision == "blocked_by_correctness":
        return (f"{words}: issues {', '.join(result.get('issues', [])) or 'n/a'}; first failure "
                f"{result.get('first_failure')}; {len(result.get('invalid_runs', []))} invalid attempts")
    checks = [name for name, text in messages.items() if not str(text).startswith("NOTE")]  # notes are no checks
    if decision == "accept" and checks:
        return f"every declared check passed ({', '.join(checks)})"
    return words


def _ratio_words(ratio: float, low, high, confidence, how: str) -> str:
    """``an improvement of 8.0% (ratio candidate/baseline 0.920, 90% interval 0.910 to 0.930)``."""
    text = f"{change_text(ratio)} (ratio candidate/baseline {ratio:.3f}"
    if _number(confidence):
        text += ", " + interval_text(low, high, confidence)
    return text + (f"; {how}" if how else "") + ")"


def estimate_text(result: dict) -> str | None:
    """What the change did, from the deciding figures (``result["deciding"]``), the typical step first.

    ``the typical step (median of the steps): an improvement of 8.0% (ratio candidate/baseline 0.920,
    90% interval 0.910 to 0.930); the mean step 0.925; judged on the 10th-percentile step: 0.840
    (90% interval 0.830 to 0.850; one-sided Wilcoxon signed-rank (exact) p = 0.001), outside the typical
    step's interval: quote the typical step``. Where the method judged the typical step itself, one
    figure; without step times, the judged figure alone. ``None`` where nothing was estimated."""
    deciding = result.get("deciding") or {}
    ratio, typical = deciding.get("ratio"), deciding.get("typical_ratio")
    if not _number(ratio) and not _number(typical):
        return None
    confidence = deciding.get("confidence")
    test = (f"one-sided {deciding.get('test') or 'test'} p = {deciding['p_value']:.3g}"
            if _number(deciding.get("p_value")) else "")
    judged = result.get("latency") or "raw"
    if result.get("objective", "latency") != "latency":
        return _ratio_words(ratio, deciding.get("ratio_ci_low"), deciding.get("ratio_ci_high"), confidence, test)
    if not _number(typical):  # no step times: the judged figure is all there is
        return (f"{_JUDGED_FIGURE.get(judged, judged)}: "
                + _ratio_words(ratio, deciding.get("ratio_ci_low"), deciding.get("ratio_ci_high"), confidence, test))
    same = judged in ("raw",)
    text = "the typical step (median of the steps): " + _ratio_words(
        typical, deciding.get("typical_ci_low"), deciding.get("typical_ci_high"), confidence, test if same else "")
    if _number(deciding.get("mean_ratio")):
        text += f"; the mean step {deciding['mean_ratio']:.3f}"
    if not same and _number(ratio):
        judged_words = f"; judged on {_JUDGED_FIGURE.get(judged, judged)}: {ratio:.3f}"
        if _number(confidence):
            judged_words += (" (" + interval_text(deciding.get("ratio_ci_low"), deciding.get("ratio_ci_high"),
                                                  confidence) + (f"; {test}" if test else "") + ")")
        if deciding.get("judged_apart"):
            judged_words += (", outside the typical step's interval: the judged figure moved more than the typical "
                             "step; quote the typical step")
        text += judged_words
    return text


#: What the judged figure is, by the latency judged.
_JUDGED_FIGURE = {"raw": "the typical step (each attempt's median step)",
                  "p10": "the 10th-percentile step (each attempt's, Harrell-Davis)",
                  "fastest": "the fastest step (each attempt's)",
                  "uncontended": "the uncontended latency (each attempt's median quiet step)"}


def decision_markdown(result: dict) -> str:
    """The decision as markdown: headline, reasons, per-check messages and the figures.

    Args:
        result: what ``evaluate_group`` returned (or ``compare``).

    Returns:
        The report's text, as logged in ``report.md`` and the run's note.
    """
    decision = result["decision"]
    lines = [f"## {_headline(result)}", ""]
    # what the change did, then why: the run page shows the note's first lines above the fold
    estimate = estimate_text(result)
    if estimate:
        lines.append(f"- estimate ({result.get('method', 'seed')}): {md.text(estimate)}")
    lines.append(f"- reason: `{result['reason']}`: {md.text(reason_text(result))}")
    if result.get("failed_checks"):
        lines.append(f"- failed checks: {', '.join(f'`{c}`' for c in result['failed_checks'])}")
    if result.get("recommended_attempts"):
        lines.append(f"- to settle it: about {result['recommended_attempts']} attempts per arm settle a change that "
                     "does nothing 9 times in 10 (planned from the rounds' spread alone)")
    if result.get("changed_variable"):
        lines.append(
            f"- changed variable: {md.code(result['changed_variable'])}: "
            f"{md.code(result['baseline_value'])} (baseline) -> {md.code(result['candidate_value'])} (candidate)"
        )
    lines.append(f"- group: {md.code(result['group'])}")
    if result.get("view_url"):
        lines.append(f"- its attempts side by side in the MLflow UI: {result['view_url']} "
                     "(add `&compareRunsMode=CHART` for charts)")
    if result.get("objective"):
        how = (f"- objective: `{result['objective']}`; method: `{result.get('method', 'seed')}`; "
               f"mode: `{result.get('mode', 'improvement')}`")
        if result.get("mode") == "non_regression":
            how += f" (margin {result.get('margin', 0) * 100:.1f}%)"
        if result.get("latency", "raw") != "raw" and result.get("objective", "latency") == "latency":
            how += f"; latency judged: `{result['latency']}` ({_JUDGED.get(result['latency'], result['latency'])})"
        lines.append(how)
    judged = judged_text(result)
    if judged:
        lines.append(f"- judged: {judged}")
    if result.get("configuration"):
        lines.append(f"- configuration: {md.text(result['configuration'])}")
    if decision == "blocked_by_correctness":
        lines.append(f"- issues: {md.text(', '.join(result.get('issues', [])) or 'n/a')}")
        lines.append(f"- first failure: {md.code(result.get('first_failure'))}; reproducible: "
                     f"{_fmt(result.get('reproducible'))}")
        lines.append(f"- invalid runs: {md.text(', '.join(result.get('invalid_runs', [])))}")
    if result.get("running_runs"):
        lines.append(f"- still running: {', '.join(result['running_runs'])}")
    for warning in result.get("warnings", []):
        lines.append(f"- warning: {md.text(warning)}")
    messages = result.get("messages") or {}
    if messages:
        # our own texts of numbers and names: nothing of the user's is in them
        lines += ["", "### Checks", ""] + [f"- `{name}` {text}" for name, text in messages.items()]
    companions = [name for name in METHODS if isinstance(result.get(name), dict) and "decision" in result[name]]
    if companions:
        lines += ["", "### What each method says", ""]
        for name in companions:
            summary, method = result[name], METHODS[name]
            figures = method.describe(summary) if method.describe else ", ".join(
                f"{figure.label or figure.name} {_fmt(summary.get(figure.name))}" for figure in method.figures)
            lines.append(f"- {name} ({method.help}): `{summary['decision']}` ({summary['reason']}); {figures}")
    lines += ["", "### Figures", "", "| | baseline | candidate |", "|---|---|---|"]
    b, c = result.get("baseline", {}), result.get("candidate", {})
    of = _PER_ATTEMPT.get(result.get("latency") or "raw", "each one's latency")
    if result.get("objective", "latency") == "latency":  # what the median and the P95 are of
        named = {"median_ms": f"median over attempts of {of} (judged)",
                 "p95_ms": f"P95 over attempts (nearest rank) of {of}"}
    else:
        named = {}
    for label, key, unit, optional in _rows():
        if optional and b.get(key) is None and c.get(key) is None:
            continue
        lines.append(f"| {named.get(key, label)} | {_fmt(b.get(key), unit)} | {_fmt(c.get(key), unit)} |")
    if b.get("failure_reasons") or c.get("failure_reasons"):
        lines += ["", "### Failed attempts", ""]
        for arm, summary in (("baseline", b), ("candidate", c)):
            for reason in summary.get("failure_reasons", []):
                lines.append(f"- {arm}: {md.text(reason)}")
    lines += contention_lines(result)
    thresholds = result.get("thresholds") or {}
    if thresholds:
        lines += ["", "### Thresholds", ""] + [f"- `{k}` = {_fmt(v)}" for k, v in thresholds.items()]
    if "baseline_noise" in result:
        lines += ["", "The noise figure, (P95 - median) / median of the baseline, is a teaching proxy, "
                  "not a confidence interval."]
    return "\n".join(lines) + "\n"


def contended(attempt: dict) -> bool:
    """An ok attempt whose contention was measured and that has no uncontended latency: more
    than half its steps waited for a CPU (``workloads.CONTENTION_WAIT_SHARE_BOUND``)."""
    return bool(attempt.get("ok")) and attempt.get("wait_share") is not None \
        and attempt.get("uncontended_latency_ms") is None


def contention_lines(result: dict) -> list[str]:
    """The report's contention section: each arm's median wait share and its contended attempts
    (none when no attempt of the decision measured its contention)."""
    attempts = [a for a in result.get("attempts", []) if a.get("ok") and a.get("wait_share") is not None]
    if not attempts:
        return []
    lines = ["", "### Contention", "",
             "Run-queue wait of the attempt's threads over its measured step time (`wait_share`, from "
             "the kernel's schedstat); a contended attempt had more than half its steps wait for a CPU.", ""]
    for arm in ARMS:
        own = [a for a in attempts if a["arm"] == arm]
        if not own:
            continue
        median = statistics.median(a["wait_share"] for a in own)
        busy = sum(contended(a) for a in own)
        lines.append(f"- {arm}: median wait share {_fmt(median)}; {busy} of {len(own)} successful attempts "
                     "contended")
    return lines


#: More attempts per arm than this to settle a rerun: the effect is below what this machine resolves at
#: the noise it showed (a comparison of that size takes hours, and the noise would be the machine's).
RESOLVABLE_ATTEMPTS = 200


def _without(command: list[str], flags: dict[str, int]) -> list[str]:
    """``command`` without the options in ``flags`` (name -> how many values follow it, ``--x=v`` too)."""
    kept, skip = [], 0
    for word in command:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in flags:
            skip = 0 if "=" in word else flags[name]
            continue
        kept.append(word)
    return kept


def _noise_cuts(result: dict) -> str:
    """What cuts the noise a rerun met: the recommended configuration, unless it ran under it already."""
    recommended = (result.get("method") == "paired" and result.get("latency") == "p10"
                   and "steps interleaved" in str(result.get("configuration") or ""))
    if recommended:
        return "a quieter machine, or more measured steps per attempt (--steps)"
    return "--interleave steps --method paired --latency p10 (compare's defaults), a quieter machine"


#: The step checks a rerun can leave undecided, with the ratio figure each reads and the figure in words
#: (the deciding method's main check, :data:`_MAIN_CHECKS` or a plugin's, reads the deciding figures).
_MAIN_CHECKS = ("improvement_ok", "no_regression_ok")
_UNDECIDED = (("typical_step_ok", "typical_step_ratio", "the typical step"),
              ("mean_step_ok", "mean_step_ratio", "the mean step"),
              ("step_tail_ok", "step_tail_ratio", "the step tail"))


def _number(value) -> bool:
    """A figure that is a number (a numpy or a plain one; a flag is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _undecided(result: dict) -> str:
    """The figures a rerun left undecided, each with its ratio: ``the judged ratio 0.962, the step tail 1.079``.

    The deciding method's main check (a built-in's ``improvement_ok`` or ``no_regression_ok``, a
    plugin's own statistical check) reads its ratio from the deciding figures; the step checks
    from their own figures."""
    deciding = result.get("deciding") or {}
    ratio = deciding.get("ratio")
    words = []
    main = [check for check in (*_MAIN_CHECKS, *(deciding.get("tests") or {})) if check != "p95_ok"]
    for check in dict.fromkeys(main):
        if check in result and result[check] is None:
            words.append(f"the judged ratio {ratio:.3f}" if _number(ratio) else "the judged ratio")
            break
    words += [f"{text} {result[figure]:.3f}" if _number(result.get(figure)) else text
              for check, figure, text in _UNDECIDED if check in result and result[check] is None]
    return ", ".join(words) or "the judged figures"


def _question(result: dict) -> tuple[str, float | None]:
    """The question a rerun left open in words, and its bound as a signed relative change."""
    if result.get("mode") == "non_regression":
        margin = result.get("margin")
        if _number(margin):
            return f"no slower than {float(margin) * 100:g}%", float(margin)
        return "no slower than the margin", None
    required = result.get("required_improvement")
    if _number(required):
        return f"at least {float(required) * 100:g}% faster", -float(required)
    return "the declared improvement", None


def next_step(result: dict, command: list[str] | None = None) -> str | None:
    """What to do about a rerun, or an improvement-mode reject that is only not shown faster (ask the
    non_regression question instead), in one line (``None`` for another verdict).

    The advice (``recommended_attempts``) is a plan from the noise alone: the rounds per arm that
    settle a change that does nothing against the question's bound, 9 times in 10
    (:func:`mlflow_perfgate.rules._stats.settling_pairs`), so it does not grow run after run. Then:

    - more than :data:`RESOLVABLE_ATTEMPTS`: this machine cannot resolve the question at this noise,
      said with the bound it resolves in that many rounds, and what cuts the noise;
    - no more than the rounds already run: they should have settled a change that does nothing, so
      the change sits near the bound; more rounds are unlikely to settle it, said so, with the
      undecided figures;
    - otherwise ``command`` (the comparison's own, as typed) as a new comparison with
      ``--until-decisive`` and that many rounds as its cap (a new group: adding looks to a group
      decided at one look would be optional stopping).
    """
    if _not_shown_faster(result):  # the question may have been the wrong one: no slower?
        margin = result.get("margin")
        question = f" --margin {float(margin):g}" if _number(margin) else ""
        if command and len(command) > 1 and command[1] in ("compare", "pipeline"):
            base = _without(command, {"--group": 1, "--resume": 0, "--mode": 1})
            return ("next: it is not shown faster; to ask whether it is no slower (CI's question): "
                    + shlex.join([*base, "--mode", "non_regression"]))
        return ("next: it is not shown faster; to ask whether it is no slower (CI's question), compare again with "
                f"--mode non_regression{question}")
    if result.get("decision") != "rerun":
        return None
    reason, group = result.get("reason"), result.get("group", "")
    if reason == "attempts_in_progress":
        return f"next: evaluate again when they end: mlflow-perfgate evaluate --group {shlex.quote(group)}"
    if reason == "attempts_not_synced":
        return f"next: mlflow-perfgate sync, then mlflow-perfgate evaluate --group {shlex.quote(group)}"
    if reason == "contention":
        return ("next: run it on a quieter machine, or judge a figure a neighbour disturbs less "
                "(--interleave steps --latency p10, compare's defaults)")
    needed = result.get("recommended_attempts")
    question, bound = _question(result)
    if _number(needed) and needed > RESOLVABLE_ATTEMPTS:
        resolves = ""
        if bound is not None:  # the rounds needed grow as 1 / log(1 + bound)^2 at the same noise
            scaled = math.expm1(math.log1p(bound) * math.sqrt(needed / RESOLVABLE_ATTEMPTS))
            resolves = (f"; in {RESOLVABLE_ATTEMPTS} rounds it resolves about "
                        f"{'no slower than' if bound > 0 else 'at least'} {abs(scaled):.0%}"
                        f"{'' if bound > 0 else ' faster'}")
        return (f"next: this machine cannot resolve '{question}' at this noise: about {needed:.0f} rounds per arm "
                f"would be needed to settle even a change that does nothing{resolves}; cut the noise "
                f"({_noise_cuts(result)}), or ask a question it can answer (--margin)")
    if not _number(needed) or needed < 1:
        return "next: add attempts (a new comparison with more --attempts, or --until-decisive)"
    seen = result.get("pairs")
    if _number(seen) and needed <= seen:
        seen = int(seen)
        return (f"next: at the noise measured, {int(math.ceil(needed))} rounds settle '{question}' for a change that "
                f"does nothing 9 times in 10, and these {seen} did not: the change likely sits near the bound "
                f"({_undecided(result)}), so more rounds are unlikely to settle it; read it as a change of about "
                "that size, or ask a wider question (--margin)")
    settles = (f"next: at the noise measured, {int(math.ceil(needed))} rounds settle '{question}' for a change that "
               "does nothing 9 times in 10: ")
    if command and len(command) > 1 and command[1] in ("compare", "pipeline"):
        base = _without(command, {"--group": 1, "--resume": 0, "--until-decisive": 0, "--fixed-rounds": 0,
                                  "--max-attempts": 1})
        return settles + shlex.join([*base, "--until-decisive", "--max-attempts", str(int(math.ceil(needed)))])
    return (f"{settles}the same comparison, as a new group, with --until-decisive --max-attempts "
            f"{int(math.ceil(needed))}")


def decision_summary(result: dict, command: list[str] | None = None) -> list[str]:
    """The tail of a long command: the decision, its reason in words, and where to look.

    Args:
        result: the decision (``evaluate_group``'s or ``compare``'s).
        command: the command that made it, as typed (``["mlflow-perfgate", "compare", ...]``): a
            rerun's next step is that command with what it needs.

    Returns:
        Lines: the headline; the reason; each failed (or undecided) check's message, or for a
        rerun the attempts per arm that would likely settle it and the next step
        (:func:`next_step`); the experiment and the decision run; the link (``decision_run_url``).
    """
    lines = [f"decision: {_headline(result)}"]
    estimate = estimate_text(result)
    if estimate:
        lines.append(f"estimate ({result.get('method', 'seed')}): {estimate}")
    reason = result["reason"]
    messages = result.get("messages") or {}
    open_checks = [name for name in messages if messages[name].startswith(("FAILED", "INCONCLUSIVE"))]
    if open_checks:
        failed = sum(1 for name in open_checks if messages[name].startswith("FAILED"))
        undecided = len(open_checks) - failed
        counts = [f"{failed} declared check{'s' if failed > 1 else ''} failed"] if failed else []
        counts += [f"{undecided} undecided"] if undecided else []
        lines.append(f"why: {', '.join(counts)} ({reason})")
        lines += [f"  {name}: {messages[name]}" for name in open_checks]
    else:
        lines.append(f"why: {reason_text(result)} ({reason})")
    if result["decision"] == "rerun" and result.get("recommended_attempts"):
        lines.append(f"  about {result['recommended_attempts']} attempts per arm would likely settle it")
    step = next_step(result, command)
    if step:
        lines.append(step)
    if result.get("decision_run_id"):
        lines.append(f"experiment {result.get('experiment_id')}, decision run {result['decision_run_id']}")
    if result.get("decision_run_url"):
        lines.append(f"see it: {result['decision_run_url']}")
    if result.get("view_url"):
        lines.append(f"compare its attempts: {result['view_url']}")
    return lines


def fit_note(note: str) -> str:
    """The note, shortened to a tag's limit (the full text is in report.md)."""
    return fit(note, MAX_TAG_VALUE, "\n\n... (see the report.md artifact for the full text)\n")


#: The words for a latency judged other than ``raw`` (the median of every measured step).
_JUDGED = {"uncontended": "each attempt's median of its steps that barely waited for a CPU",
           "fastest": "each attempt's fastest measured step",
           "p10": "each attempt's 10th percentile of its measured steps (Harrell-Davis)"}


#: What each plot shows: (file, label, unit, the attempt record's key, the summary lines (key, label, style)).
_LATENCY_PLOT = ("latency.png", "latency", "ms", "latency_ms",
                 (("median_ms", "median", "solid"), ("p95_ms", "P95", "dashed")))


class _PlotInputs(NamedTuple):
    """What a plot reads of a decision, from an :class:`~._evaluation.Evaluation` or the public dict."""

    group: str
    verdict: str
    objective: str
    latency: str
    attempts: list
    arms: dict
    labels: dict

    @classmethod
    def of(cls, result) -> "_PlotInputs":
        if isinstance(result, Mapping):
            labels = _arm_labels(result.get("changed_variable"), {arm: result.get(f"{arm}_value") for arm in ARMS})
            return cls(result["group"], result["decision"], result.get("objective", "latency"),
                       result.get("latency", "raw"), list(result.get("attempts", [])),
                       {arm: result.get(arm) or {} for arm in ARMS}, labels)
        change = result.change
        labels = _arm_labels(change.variable, {"baseline": change.baseline_value, "candidate": change.candidate_value})
        return cls(result.group, result.verdict, result.objective, result.policy.latency, list(result.attempts),
                   {arm: result.arm(arm) for arm in ARMS}, labels)


def _arm_labels(variable: str | None, values: dict) -> dict:
    """Each arm's x-axis label: the changed variable's value in it (``checkpoint=false``), then the arm."""
    return {arm: f"{variable}={values[arm]}\n({arm})" if variable else arm for arm in ARMS}


def _plot_spec(objective_name: str) -> tuple | None:
    """The objective's own plot (memory, throughput: any objective with an attempt metric), or None."""
    objective = OBJECTIVES[objective_name] if objective_name in OBJECTIVES else None
    if objective is None or not objective.metric:
        return None
    metric = objective.metric
    tail = ("p95", "P95") if objective.direction == "lower" else ("p5", "P5")
    label = objective.metric_label
    return (f"{objective.name}.png", label, objective.unit, metric,
            ((f"median_{metric}", "median", "solid"), (f"{tail[0]}_{metric}", tail[1], "dashed")))


def preload_plotting() -> None:
    """Import matplotlib (its Agg backend) and pyplot now, before the decision's plots need them."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot  # noqa: F401
    import matplotlib.ticker  # noqa: F401


def metric_figure(result, spec: tuple = _LATENCY_PLOT):
    """The figure of one plot (of an evaluation, or of the public dict): each arm's attempts as points, its median and tail marked.

    The x axis names the changed variable's value in each arm (``checkpoint=false``); numbers
    are plain, with their unit (``1,034 ms``, never ``1.03e+03``); failed (and still running)
    attempts are not latencies: they are drawn apart, in a lane of their own below the axis, with
    their count. The caller closes the figure (``matplotlib.pyplot.close``).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    _, label, unit, key, lines = spec
    shown_of = _PlotInputs.of(result)
    attempts = shown_of.attempts
    if key == "latency_ms" and shown_of.latency in LATENCY_KEYS and shown_of.objective == "latency":
        # the points are what was judged, as the median and P95 lines are
        judged = LATENCY_KEYS[shown_of.latency]
        attempts = [{**a, key: a.get(judged, a.get(key))} for a in attempts]
        label = {"uncontended": "uncontended latency", "fastest": "fastest step",
                 "p10": "10th-percentile step"}.get(shown_of.latency, label)
    not_ok = {arm: [a for a in attempts if a["arm"] == arm and not a.get("ok")] for arm in ARMS}
    lane = any(not_ok.values())
    fig = plt.figure(figsize=(7.5, 4.8 if lane else 4.2), layout="constrained")
    grid = fig.add_gridspec(2 if lane else 1, 1, height_ratios=[6, 1] if lane else [1])
    ax = fig.add_subplot(grid[0])
    contended_shown = False
    for x, arm in enumerate(ARMS):
        shown = [a for a in attempts if a["arm"] == arm and a.get("ok") and a.get(key) is not None]
        values = [a[key] for a in shown]
        jitter = [x + 0.15 * ((i % 7) - 3) / 3 for i in range(len(values))]
        busy = [contended(a) for a in shown]
        quiet = [i for i, flag in enumerate(busy) if not flag]
        ax.scatter([jitter[i] for i in quiet], [values[i] for i in quiet], s=24, alpha=0.8, color=f"C{x}")
        if any(busy):  # contended attempts drawn hollow: their steps mostly waited for a CPU
            ax.scatter([jitter[i] for i, flag in enumerate(busy) if flag], [values[i] for i, flag in enumerate(busy) if flag],
                       s=24, facecolors="none", edgecolors=f"C{x}", label="contended" if not contended_shown else None)
            contended_shown = True
        summary = shown_of.arms[arm]
        levels = [(name, style, summary.get(figure)) for figure, name, style in lines]
        levels = [item for item in levels if item[2] is not None]
        for index, (name, style, level) in enumerate(levels):
            ax.hlines(level, x - 0.3, x + 0.3, colors="black" if style == "solid" else "gray", linestyles=style,
                      linewidth=2 if style == "solid" else 1)
            # the higher of two lines is labelled above itself, the lower below: close ones stay legible
            others = [other[2] for position, other in enumerate(levels) if position != index]
            above = bool(others) and (level > max(others) or (level == max(others) and index > 0))
            ax.annotate(f"{name} {plain(level)} {unit}", (x + 0.32, level), xytext=(0, 2 if above else -2),
                        textcoords="offset points", fontsize=8, va="bottom" if above else "top")
    if contended_shown:
        ax.legend(loc="upper right", fontsize=8, title="hollow: more than half the steps waited", title_fontsize=7)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: plain(value)))
    ax.set_ylabel(f"{label} ({unit})")
    ax.set_xlim(-0.6, len(ARMS) + 0.1)
    counts = {arm: sum(1 for a in attempts if a["arm"] == arm and a.get("ok")) for arm in ARMS}
    ticks = [f"{shown_of.labels[arm]}, {counts[arm]} ok" for arm in ARMS]
    ax.set_title(f"{shown_of.group[:60]}: {verdict_word(shown_of.verdict)} ({shown_of.objective})", fontsize=10)
    if not lane:
        ax.set_xticks(range(len(ARMS)), ticks)
        return fig
    below = fig.add_subplot(grid[1], sharex=ax)
    for x, arm in enumerate(ARMS):
        failed = [a for a in not_ok[arm] if a.get("state") != "running"]
        running = [a for a in not_ok[arm] if a.get("state") == "running"]
        if failed:
            below.scatter([x - 0.1 + 0.2 * i / max(1, len(failed) - 1) for i in range(len(failed))] if len(failed) > 1
                          else [x], [0] * len(failed), marker="x", color="red", s=50)
        words = [f"{len(failed)} failed"] if failed else []
        words += [f"{len(running)} running"] if running else []
        if words:
            below.annotate(", ".join(words), (x + 0.2, 0), fontsize=8, va="center", color="red")
    below.set_ylim(-1, 1)
    below.set_yticks([])
    below.set_ylabel("failed", rotation=0, ha="right", va="center", fontsize=8)
    below.set_xticks(range(len(ARMS)), ticks)
    ax.tick_params(axis="x", labelbottom=False)
    return fig


def _save(result, path: Path, spec: tuple) -> Path:
    import matplotlib.pyplot as plt

    fig = metric_figure(result, spec)
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def latency_plot(result, path: Path) -> Path:
    """Both arms' attempts' latencies as points, median and P95 marked, failed attempts in their own lane."""
    return _save(result, path, _LATENCY_PLOT)


def objective_plot(result, folder: Path) -> Path | None:
    """For an objective with its own metric (memory, throughput), that metric's plot (``memory.png``, ...)."""
    spec = _plot_spec(_PlotInputs.of(result).objective)
    return None if spec is None else _save(result, folder / spec[0], spec)


def attempts_table(result: dict) -> dict:
    """The attempts as columns, for ``MlflowClient.log_table``."""
    attempts = result.get("attempts", [])
    columns = ["run_id", "arm", "state", "ok", "latency_ms", "quality", "failure", "attempt_id"]
    columns += [name for name in dict.fromkeys(OBJECTIVES[o].metric for o in OBJECTIVES if OBJECTIVES[o].metric)
                if any(name in a for a in attempts)]
    columns += [name for name in ("uncontended_latency_ms", "fastest_step_ms", "step_p10_ms", "wait_share",
                                  "runq_wait_ms")
                if any(name in a for a in attempts)]
    return {c: [a.get(c) for a in attempts] for c in columns}


def _json_safe(value):
    """Non-finite floats become null: the artifact stays valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def draw_plots(evaluation, folder: Path) -> list[str]:
    """Draw latency.png (and the objective's plot) into ``folder``; the warnings of plots not drawn.

    A plot that cannot be drawn (latencies near the float limit, say) costs the plot alone,
    with a warning for the decision: never the decision.
    """
    warnings = []
    for spec in (_LATENCY_PLOT, _plot_spec(_PlotInputs.of(evaluation).objective)):
        if spec is None:
            continue
        try:
            _save(evaluation, folder / spec[0], spec)
        except Exception as exc:  # matplotlib's own limits; the figures stay in the JSON and the table
            (folder / spec[0]).unlink(missing_ok=True)
            warnings.append(f"{spec[1]} plot not drawn: {type(exc).__name__}: {exc}")
    return warnings


def write_files(result: dict, folder: Path) -> None:
    """Write ``decision.json`` (the public dict without its report, which is ``report.md``) and
    ``report.md`` into ``folder``, before anything is logged."""
    payload = {"format_version": DECISION_FORMAT, **_json_safe({k: v for k, v in result.items() if k != "report"})}
    (folder / "decision.json").write_text(json.dumps(payload, indent=2, default=str, allow_nan=False))
    (folder / "report.md").write_text(result["report"], encoding="utf-8")


def log_artifacts(mlflow_client, run_id: str, result: dict, folder: Path) -> None:
    """The prepared files and the attempts table, on the decision run."""
    _client.retrying(lambda: mlflow_client.log_artifacts(run_id, str(folder), ARTIFACT_DIR))
    _client.retrying(lambda: mlflow_client.log_table(run_id, data=attempts_table(result),
                                                     artifact_file=f"{ARTIFACT_DIR}/attempts.json"))


def write_step_summary(markdown: str) -> None:
    """Append a report to ``$GITHUB_STEP_SUMMARY`` when a CI job set it."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def _download(run_id: str, name: str) -> str:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow_client = _client.client()
    with tempfile.TemporaryDirectory() as tmp:
        path = _client.retrying(lambda: mlflow_client.download_artifacts(run_id, f"{ARTIFACT_DIR}/{name}", tmp))
        return Path(path).read_text(encoding="utf-8")


def read_report(run_id: str) -> str:
    """The ``report.md`` of a decision run."""
    return _download(run_id, "report.md")


def read_decision(run_id: str) -> dict:
    """The ``decision.json`` of a decision run: the full result and the ids of every run judged.

    Raises:
        FormatError: the file is of a format this version cannot read (newer, or not ours).
    """
    text = _download(run_id, "decision.json")
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"decision.json of run {run_id} is not valid JSON: {exc}") from None
    version = payload.get("format_version", 0) if isinstance(payload, dict) else None
    if version not in (0, DECISION_FORMAT):
        raise FormatError(f"decision.json of run {run_id} has format version {version!r}; this release reads "
                          f"versions 0 and {DECISION_FORMAT}: upgrade mlflow-perfgate")
    return payload
