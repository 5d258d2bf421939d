"""The no-op gate lab: the CI gate's question ("no slower than 5%?", ``compare --mode non_regression
--margin 0.05``) on a change that does nothing, on a true 7% slowdown and on a true 15% slowdown, under
neighbours; every comparison a separate ``mlflow-perfgate compare`` command run as users type it (a
fresh process), on a change of git revision (the CI recipe: lockstep rounds) or of a condition.

Each comparison runs 20 rounds (``--attempts 20``). The candidate designs of the gate are judged on the
same collected rounds, each by the project's own rules (``rules.judge``):

- ``fixed 10``: the first 10 rounds, one look (the release's default);
- ``fixed 20``: all 20 rounds, one look (checked against the command's own decision);
- ``sequential 10-20``: looks after 10 rounds, then every 2 up to 20, alpha spent across the looks
  (O'Brien-Fleming, as ``compare --until-decisive --max-attempts 20`` spends it), ending at the first
  look that is not a rerun for lack of evidence: the new default of non_regression mode.

A design's wall time for a comparison is the command's own, less the rounds it would not have run (their
start times are the attempts' own).

Usage (the machine otherwise idle; about 25 minutes per neighbour kind):

    .venv/bin/python benchmarks/lab_gate.py --kinds disk,torchjob,square,mix --out gate.jsonl
    .venv/bin/python benchmarks/lab_gate.py --from-jsonl gate.jsonl     # judge again, measure nothing

The run the docs cite is kept, gzipped, as ``benchmarks/results/lab_gate.jsonl.gz`` (its report beside
it, ``lab_gate.md``).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lab_lockstep as lockstep  # noqa: E402 - after the path
import lab_neighbours as lab  # noqa: E402

ROUNDS = 20
FIRST_LOOK = 10
#: (source, effect) -> comparisons per neighbour kind at the defaults (``--collections`` scales them)
PLAN = {**{(source, effect): 20 for source in ("revision", "steps") for effect in (0.0, 0.07)},
        **{(source, 0.15): 4 for source in ("revision", "steps")}}
DESIGNS = ("fixed 10", "fixed 20", "sequential 10-20")


def _command(args, calibration: dict, setup: dict, source: str, effect: float, group: str):
    command, cwd = lockstep._command(args, calibration, setup, source, effect, ROUNDS, group)
    # one look at 20 rounds: the designs are judged offline on the rounds (the default would go on to 40)
    return [*command, "--mode", "non_regression", "--margin", str(lab.MARGIN), "--fixed-rounds"], cwd


def run_comparison(args, calibration: dict, setup: dict, kind: str, source: str, effect: float, index: int,
                   hood) -> dict:
    group = f"gate-{kind}-{source}-{effect:+.2f}-{index}"
    command, cwd = _command(args, calibration, setup, source, effect, group)
    return lockstep.run_command(command, cwd, setup, hood, {"kind": kind, "source": source, "effect": effect,
                                                            "index": index, "rounds": ROUNDS},
                                keys=(*lockstep.ATTEMPT_KEYS, "start_time"))


def collect(args, out) -> None:
    plan = {cell: max(1, round(count * args.collections)) for cell, count in PLAN.items()
            if cell[0] in args.sources and cell[1] in args.gate_effects}
    lockstep.collect_plan(args, out, plan, run_comparison, prefix="lab-gate-", seconds_each=90)


# --- judging ---------------------------------------------------------------------------------------

def _policy():
    from mlflow_perfgate.rules import Policy

    return Policy(method="paired", mode="non_regression", latency="p10", margin=lab.MARGIN,
                  min_improvement=lab.MIN_IMPROVEMENT, min_valid_runs=5)


def _round_starts(row: dict) -> list[float]:
    """Each round's start, seconds (the earliest start of its attempts)."""
    by_pair = defaultdict(list)
    for attempt in row["attempts"]:
        if attempt.get("start_time") is not None:
            by_pair[attempt["pair"]].append(attempt["start_time"] / 1e3)
    return [min(by_pair[p]) for p in sorted(by_pair)]


def wall_at(row: dict, rounds: int) -> float:
    """The command's wall time had it stopped after ``rounds`` rounds."""
    starts = _round_starts(row)
    if rounds >= len(starts) or len(starts) < 2:
        return row["wall_s"]
    duration = statistics.median(b - a for a, b in zip(starts, starts[1:]))
    return row["wall_s"] - (starts[-1] + duration - starts[rounds])


def designs(row: dict) -> dict:
    """``{design: (verdict, rounds run, wall s)}`` for this comparison's rounds."""
    from mlflow_perfgate.rules import judge

    pairs = lockstep._pairs(row)
    policy = _policy()

    def at(n, **look):
        return judge([p[0] for p in pairs[:n]], [p[1] for p in pairs[:n]], policy, **look)

    found = {}
    if len(pairs) >= FIRST_LOOK:
        found["fixed 10"] = (at(FIRST_LOOK).verdict, FIRST_LOOK, wall_at(row, FIRST_LOOK))
    if len(pairs) >= ROUNDS:
        found["fixed 20"] = (at(ROUNDS).verdict, ROUNDS, row["wall_s"])
        previous = 0.0
        for n in range(FIRST_LOOK, ROUNDS + 1, 2):
            made = at(n, look=n, max_looks=ROUNDS, previous_fraction=previous)
            previous = n / ROUNDS
            if made.verdict != "rerun" or n == ROUNDS or made.reason not in ("insufficient_valid_runs",
                                                                             "inconclusive"):
                found["sequential 10-20"] = (made.verdict, n, wall_at(row, n))
                break
    return found


def advice(row: dict, n: int = FIRST_LOOK) -> tuple[int | None, int | None]:
    """The rounds a rerun after ``n`` rounds is advised: ``(planned from the noise, the release's)``.

    The noise plan (``_stats.settling_pairs``) is the largest over the judged figure (p10, its
    interval at the tail level) and the step figures (their estimate alone), computed whatever the
    verdict, so its spread over separate comparisons is the advice's stability; the release's is
    ``recommended_pairs`` of the judged figure, from the distance of its estimate to the bound.
    """
    import math

    from mlflow_perfgate.rules._stats import recommended_pairs, settling_pairs

    pairs = lockstep._pairs(row)[:n]
    if len(pairs) < n:
        return None, None

    def d(key):
        return [math.log(c[key] / b[key]) for b, c in pairs if b["ok"] and c["ok"] and b.get(key) and c.get(key)]

    bound = 1 + lab.MARGIN
    plans = [settling_pairs(d("step_p10_ms"), bound=bound, alpha=0.05)]
    plans += [settling_pairs(d(key), bound=bound, alpha=None) for key in ("latency_ms", "step_mean_ms", "step_p95_ms")]
    plans = [p for p in plans if p is not None]
    return (max(plans) if plans else None), recommended_pairs(d("step_p10_ms"), margin=lab.MARGIN, alpha=0.05)


def analyse(rows: list[dict]) -> dict:
    cells, advised = defaultdict(list), defaultdict(list)
    agree = [0, 0]
    for row in rows:
        if row.get("decision") is None:
            continue
        found = designs(row)
        cells[(row["kind"], row["source"], row["effect"])].append(found)
        if row["effect"] == 0.0:
            advised[(row["kind"], row["source"])].append(advice(row))
        if "fixed 20" in found:
            agree[1] += 1
            agree[0] += found["fixed 20"][0] == row["decision"]
    return {"cells": cells, "agree": agree, "advised": advised}


TARGETS = (("identical arms passed >= 90%", 0.0, "accept", "min", 0.90),
           ("identical arms falsely alarmed <= 5%", 0.0, "reject", "max", 0.05),
           ("7% slowdown rejected >= 80%", 0.07, "reject", "min", 0.80))


def _quartiles(values: list[int]) -> str:
    values = sorted(v for v in values if v is not None)
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return f"{q[1]:g} ({q[0]:g} to {q[2]:g}; max {values[-1]})"


def _rate(verdicts: list[str], wanted: str) -> str:
    k, n = sum(v == wanted for v in verdicts), len(verdicts)
    low, high = lockstep.clopper_pearson(k, n)
    return f"{k}/{n}" + (f" (>= {low:.0%})" if k == n else f" ({low:.0%} to {high:.0%})")


def report(found: dict) -> str:
    cells = found["cells"]
    lines = ["# The no-op gate: candidate designs on the same collected rounds\n",
             "`compare --mode non_regression --margin 0.05`, 20 rounds per comparison, each comparison a "
             "separate command; every design judged on the same rounds by `rules.judge`. "
             f"The command's own decisions (20 rounds) agree with the offline judge's in "
             f"{found['agree'][0]}/{found['agree'][1]}.\n"]
    sources = sorted({source for _, source, _ in cells})
    kinds = list(dict.fromkeys(kind for kind, _, _ in cells))
    for source in sources:
        lines.append(f"\n## Source: {source}\n")
        lines.append("Identical arms: passed (accept) / false alarm (reject); +7% and +15%: rejected. "
                     "k/n, exact 95% interval; wall: median seconds of the command (the design's rounds).\n")
        lines.append("| kind | design | no-op passed | no-op false alarm | +7% rejected | +15% rejected | "
                     "wall no-op (s) | wall +15% (s) | rounds no-op (median, max) |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for kind in kinds:
            for design in DESIGNS:
                def of(effect):
                    return [f[design] for f in cells.get((kind, source, effect), []) if design in f]
                noop, seven, fifteen = of(0.0), of(0.07), of(0.15)
                if not noop:
                    continue
                wall_fifteen = f"{statistics.median(w for _, _, w in fifteen):.1f}" if fifteen else "n/a"
                lines.append(
                    f"| {kind} | {design} | {_rate([v for v, _, _ in noop], 'accept')} | "
                    f"{_rate([v for v, _, _ in noop], 'reject')} | "
                    f"{_rate([v for v, _, _ in seven], 'reject') if seven else 'n/a'} | "
                    f"{_rate([v for v, _, _ in fifteen], 'reject') if fifteen else 'n/a'} | "
                    f"{statistics.median(w for _, _, w in noop):.1f} | {wall_fifteen} | "
                    f"{statistics.median(n for _, n, _ in noop):g}, {max(n for _, n, _ in noop)} |")
    lines.append("\n## Targets, the default design (sequential 10-20)\n")
    lines.append("The weakest kind of each target, k/n of separate comparisons (exact 95% interval).\n")
    lines.append("| source | target | weakest kind | k/n | met |")
    lines.append("|---|---|---|---|---|")
    for source in sources:
        for name, effect, wanted, side, bound in TARGETS:
            rates = []
            for kind in kinds:
                verdicts = [f["sequential 10-20"][0] for f in cells.get((kind, source, effect), [])
                            if "sequential 10-20" in f]
                if verdicts:
                    rates.append((sum(v == wanted for v in verdicts) / len(verdicts), kind, verdicts))
            if not rates:
                continue
            rate, kind, verdicts = (min if side == "min" else max)(rates)
            met = rate >= bound if side == "min" else rate <= bound
            lines.append(f"| {source} | {name} | {kind} | {_rate(verdicts, wanted)} | {'yes' if met else 'NO'} |")
    lines.append("\n## Rerun advice on a change that does nothing, after 10 rounds\n")
    lines.append("Rounds per arm advised, median (quartiles; max) over the separate comparisons of identical "
                 "arms: planned from the noise (this release: the judged figure's interval and the step figures' "
                 "estimates against 1 + margin, 9 in 10) and the release before's (from the distance of the "
                 "p10 estimate to the bound, power 0.8).\n")
    lines.append("| kind | source | from the noise | from the estimate (before) |")
    lines.append("|---|---|---|---|")
    for (kind, source), pairs in found["advised"].items():
        lines.append(f"| {kind} | {source} | {_quartiles([a for a, _ in pairs])} | "
                     f"{_quartiles([b for _, b in pairs])} |")
    return "\n".join(lines)


def build_parser():
    parser = lab.build_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.set_defaults(kinds=["disk", "torchjob", "square", "mix"], input_shape="2,64", probe_units=80, out=None)
    parser.add_argument("--sources", type=lambda t: t.split(","), default=["revision"])
    parser.add_argument("--collections", type=float, default=1.0)
    parser.add_argument("--gate-effects", type=lambda t: [float(v) for v in t.split(",")], default=[0.0, 0.07, 0.15],
                        help="the heads' true effects to run (of 0, 0.07, 0.15)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--from-jsonl", default=None, help="judge an earlier collection; measure nothing")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.from_jsonl:
        _, rows = lockstep.load(args.from_jsonl)
    else:
        out_path = args.out or tempfile.mkstemp(prefix="lab-gate-", suffix=".jsonl")[1]
        print(f"writing {out_path}", file=sys.stderr)
        with open(out_path, "w") as out:
            collect(args, out)
        _, rows = lockstep.load(out_path)
    print(report(analyse(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
