"""The lockstep lab: lockstep rounds beside in-process step rounds and whole attempts, on the same true
effects, under neighbours, and a change of revision and of environment; every comparison a separate
``mlflow-perfgate compare`` command, run as users type it (a fresh process).

Sources of a comparison (what changes between its arms, and how its rounds run):

- ``lockstep``, ``steps``, ``attempts``, ``duet``: the lab workload (``noise_lab_workload``: TinyLM plus
  fixed matrix products per step) whose candidate changes ``extra_units``, sized from a quiet
  calibration so that its step is ``1 + effect`` times the baseline's; ``compare --interleave
  <source>`` (``steps``: both arms in one child; ``lockstep``: one child per arm, their steps
  alternated; ``duet``: the same children stepping at once; ``attempts``: whole attempts, ABBA).
- ``revision``: a git repository the lab makes, whose ``labrev.py`` runs the lab workload and then
  spins a known busy wait per step; each commit spins its own (the base 0.3 of the base step, the
  others ``effect`` x the step more or less, one only a comment apart); ``compare --workload
  labrev:make --set revision=<base> --change revision=<commit>``, from the repository (lockstep by
  default: each revision's child imports its own ``labrev.py`` from its worktree).
- ``python``: a second virtual environment the lab makes (it sees this one's packages through a
  ``.pth`` file), whose package ``labeffect`` adds a spin of ``effect`` x the base step to each
  step of ``labenv:make``; ``compare --set python=<this one> --change python=<that one>``.

Each comparison runs ``R`` rounds (``--attempts R``: 10 for effects of 0 and 15%, 20 for 7%) and is
judged by the command itself (its exit code; improvement mode, the command's default question) and,
offline, on its first 10 rounds and on all of them, in both modes, by the default configuration
(the paired method on p10 with the step checks, ``rules.judge``) and by pyperf's rule on the same
attempts (``lab_neighbours.pyperf_verdict``: Student's t on the attempts' mean steps). A cell's
comparisons are separate: under one neighbour kind, collection ``i`` of every cell runs before
collection ``i + 1`` of any, in a seeded random order, so no two comparisons share a round.

Rates: accept in improvement mode (a false accept for identical arms and slowdowns), reject in
non_regression mode (a false alarm for identical arms and speedups); each with its count and an
exact 95% upper or lower bound (Clopper-Pearson), so that 0 of 20 reads as "at most 14%".

Usage (the machine otherwise idle; each kind about 70 minutes at the defaults on two cores):

    .venv/bin/python benchmarks/lab_lockstep.py --kinds quiet,torchjob,disk,square --out lab.jsonl
    .venv/bin/python benchmarks/lab_lockstep.py --from-jsonl lab.jsonl     # judge again, measure nothing

The run the docs cite is kept, gzipped, as ``benchmarks/results/lab_lockstep.jsonl.gz`` (its report
beside it, ``lab_lockstep.md``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lab_neighbours as lab  # noqa: E402 - after the path

SOURCES = ("lockstep", "steps", "attempts", "duet", "revision", "python")
#: The first run's lockstep rounds, whose children were free to run on any CPU (before they were held to
#: one): kept in the committed file under these names, beside the sources above.
FREE_SOURCES = ("lockstep-free", "revision-free", "python-free")
#: The sources whose rounds are lockstep ones (the issue's targets).
LOCKSTEP_SOURCES = ("lockstep", "revision", "python")
#: (source, effect) -> collections at the defaults (``--collections`` scales them)
PLAN = {
    **{(source, effect): 20 for source in ("lockstep", "steps") for effect in (0.0, -0.15, 0.15, -0.07, 0.07)},
    **{(source, effect): 10 for source in ("attempts", "duet") for effect in (0.0, -0.15, 0.15)},
    **{("revision", effect): 20 for effect in (0.0, 0.15)},
    ("revision", -0.15): 10,
    **{("python", effect): 10 for effect in (0.0, 0.15)},
}
#: ``--plan short``: the lockstep cells whole (the targets' 20 comparisons), the others fewer.
SHORT_PLAN = {
    **{("lockstep", effect): 20 for effect in (0.0, -0.15, 0.15, -0.07, 0.07)},
    **{("steps", effect): 10 for effect in (0.0, -0.15, 0.15, -0.07, 0.07)},
    **{(source, effect): 6 for source in ("attempts", "duet") for effect in (0.0, -0.15, 0.15)},
    **{("revision", effect): 20 for effect in (0.0, 0.15)},
    ("revision", -0.15): 6,
    **{("python", effect): 6 for effect in (0.0, 0.15)},
}
SIZES = (10, 20)
_REVISION_BENCH = '''"""The lockstep lab's revision benchmark: the lab workload's step, then a spin of SPIN_MS."""
import time

from noise_lab_workload import make as _make

SPIN_MS = {spin_ms!r}  # {label}


class _Spun:
    def __init__(self, inner):
        self._inner = inner

    def step(self):
        loss = self._inner.step()
        end = time.perf_counter() + SPIN_MS / 1e3
        while time.perf_counter() < end:
            pass
        return loss

    def __getattr__(self, name):
        return getattr(self._inner, name)


def make(conditions):
    return _Spun(_make(conditions))
'''
_ENV_BENCH = _REVISION_BENCH.replace("SPIN_MS = {spin_ms!r}  # {label}", """try:
    from labeffect import SPIN_MS  # the environment's own package
except ImportError:
    SPIN_MS = 0.0""").replace("revision benchmark", "environment benchmark")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=lab", "-c", "user.email=lab@lab", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_repository(folder: Path, step_ms: float) -> dict[float, str]:
    """The revision source's repository; its commits' shas by effect (the base: ``"base"``)."""
    repo = folder / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    base_spin = 0.3 * step_ms
    step = step_ms + base_spin
    commits = {"base": base_spin, 0.0: base_spin, -0.15: base_spin - 0.15 * step, 0.15: base_spin + 0.15 * step,
               -0.07: base_spin - 0.07 * step, 0.07: base_spin + 0.07 * step}
    shas = {}
    for effect, spin in commits.items():
        (repo / "labrev.py").write_text(_REVISION_BENCH.format(spin_ms=round(spin, 6), label=f"effect {effect}"))
        _git(repo, "add", "labrev.py")
        _git(repo, "commit", "-q", "-m", f"effect {effect}")
        shas[effect] = _git(repo, "rev-parse", "HEAD")
    return {"repo": str(repo), "shas": {str(k): v for k, v in shas.items()}, "base_spin_ms": base_spin}


def make_environments(folder: Path, step_ms: float) -> dict[float, str]:
    """The python source's second environments (one per effect: its ``labeffect`` spin) and the workload's folder."""
    bench = folder / "envbench"
    bench.mkdir(parents=True)
    (bench / "labenv.py").write_text(_ENV_BENCH)
    pythons = {}
    for effect in (0.0, 0.15, -0.15, 0.07, -0.07):
        if effect < 0:
            continue  # the base environment spins nothing: a speedup would need a negative spin
        where = folder / f"venv-{effect:+.2f}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
        python = where / "bin" / "python"
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        Path(purelib, "this_lab.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        Path(purelib, "labeffect.py").write_text(f"SPIN_MS = {effect * step_ms!r}\n")
        pythons[str(effect)] = str(python)
    return {"bench": str(bench), "pythons": pythons}


def _command(args, calibration: dict, setup: dict, source: str, effect: float, rounds: int,
             group: str) -> tuple[list[str], str]:
    """The ``compare`` command of one comparison and the folder it runs in."""
    base = {**lab.base_conditions(args), "extra_units": calibration["base_units"], "seed": 0}
    sets = [f"--set={key}={value}" for key, value in base.items() if key not in ("warmup", "steps")]
    sets += [f"--set=warmup={args.warmup}", f"--set=steps={args.steps}"]
    common = ["--attempts", str(rounds), "--format", "json", "--no-progress", "--allow-undecidable", "--group", group,
              "--threads", "1"]
    cli = [sys.executable, "-m", "mlflow_perfgate", "compare"]
    if source in ("lockstep", "steps", "attempts", "duet"):
        change = "seed=1" if effect == 0 else f"extra_units={lab.candidate_units(effect, calibration)}"
        return [*cli, "--workload", lab.WORKLOAD, *sets, "--change", change, "--interleave", source, *common], HERE
    if source == "revision":
        shas = setup["repository"]["shas"]
        return [*cli, "--workload", "labrev:make", *sets, f"--set=revision={shas['base']}",
                f"--change=revision={shas[str(effect)]}", *common], setup["repository"]["repo"]
    pythons = setup["environments"]["pythons"]
    return [*cli, "--workload", "labenv:make", *sets, f"--set=python={sys.executable}",
            f"--change=python={pythons[str(effect)]}", *common], setup["environments"]["bench"]


#: What a row keeps of each attempt the command reports.
ATTEMPT_KEYS = ("arm", "pair", "state", "latency_ms", "step_p10_ms", "fastest_step_ms", "step_mean_ms", "step_p95_ms")


def run_command(command: list[str], cwd: str, setup: dict, hood, row: dict, keys: tuple = ATTEMPT_KEYS) -> dict:
    """Run one comparison's command as a user does (a fresh process, the lab's store); ``row`` (its cell)
    completed with its wall time, exit code, load, decision and each attempt's ``keys``."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": setup["store"],
           "PYTHONPATH": os.pathsep.join(filter(None, [HERE, setup["environments"]["bench"],
                                                       os.environ.get("PYTHONPATH")]))}
    before, started = lab.loadavg(), time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    wall_s = time.monotonic() - started
    hood.check()
    row = {**row, "wall_s": wall_s, "exit": done.returncode, "load": (before + lab.loadavg()) / 2}
    try:
        result = json.loads(done.stdout)
    except ValueError:
        row.update(decision=None, error=(done.stderr or done.stdout)[-2000:], attempts=[])
        return row
    row["decision"] = result["decision"]
    row["configuration"] = result.get("configuration")
    row["attempts"] = [{key: attempt.get(key) for key in keys} for attempt in result["attempts"]]
    return row


def run_comparison(args, calibration: dict, setup: dict, kind: str, source: str, effect: float, index: int,
                   hood) -> dict:
    """One comparison as a user runs it; its row (the attempts' figures, the command's decision, its wall time)."""
    rounds = 20 if abs(effect) == 0.07 else 10
    group = f"lab-{kind}-{source}-{effect:+.2f}-{index}"
    command, cwd = _command(args, calibration, setup, source, effect, rounds, group)
    return run_command(command, cwd, setup, hood, {"kind": kind, "source": source, "effect": effect, "index": index,
                                                   "rounds": rounds})


def collect_plan(args, out, plan: dict, run, *, prefix: str, seconds_each: float) -> None:
    """Every kind's cells of ``plan`` (``(source, effect) -> comparisons``), each comparison ``run(args,
    calibration, setup, kind, source, effect, index, hood)``'s row appended to ``out`` (JSON lines) as soon
    as it ends; under one kind, comparison ``i`` of every cell runs before comparison ``i + 1`` of any, in a
    seeded random order. The neighbours' horizon allows ``seconds_each`` per comparison beyond two hours."""
    calibration = lab.calibrate(args)
    print(f"calibration: {json.dumps(calibration)}", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    step_ms = calibration["base_step_ms"]
    setup = {"store": f"sqlite:///{folder}/mlflow.db", "repository": make_repository(folder, step_ms),
             "environments": make_environments(folder, step_ms)}
    out.write(json.dumps({"calibration": calibration, "setup": setup, "args": vars(args)}) + "\n")
    out.flush()
    rng = random.Random(args.seed)
    for kind in args.kinds:
        horizon = 7200 + sum(plan.values()) * seconds_each
        with lab.Neighbours(lab.neighbour_plan(kind, step_ms / 1e3), horizon) as hood:
            for index in range(max(plan.values())):
                cells = [cell for cell, count in plan.items() if index < count]
                rng.shuffle(cells)
                for source, effect in cells:
                    row = run(args, calibration, setup, kind, source, effect, index, hood)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(f"{kind:8} {source:8} {effect:+.2f} #{index}: {row['wall_s']:.1f} s, exit {row['exit']}, "
                          f"{row.get('decision')}, load {row['load']:.2f}", file=sys.stderr)


def collect(args, out) -> None:
    """Every kind's cells, each comparison a row appended to ``out`` (JSON lines) as soon as it ends."""
    chosen = SHORT_PLAN if args.plan == "short" else PLAN
    plan = {cell: max(1, round(count * args.collections)) for cell, count in chosen.items() if cell[0] in args.sources}
    collect_plan(args, out, plan, run_comparison, prefix="lab-lockstep-", seconds_each=60)


# --- judging ---------------------------------------------------------------------------------------

def _pairs(row: dict) -> list[tuple[dict, dict]]:
    """The comparison's rounds as (baseline, candidate) records, in round order (both arms attempted)."""
    by_pair = defaultdict(dict)
    for attempt in row["attempts"]:
        record = {"ok": attempt["state"] == "ok", "pair": attempt["pair"], "quality": 0.9}
        if record["ok"]:
            record.update({key: attempt[key] for key in ("latency_ms", "step_p10_ms", "fastest_step_ms",
                                                         "step_mean_ms", "step_p95_ms") if attempt.get(key)})
        else:
            record["failure"] = attempt["state"]
        by_pair[attempt["pair"]][attempt["arm"]] = record
    return [(by_pair[p]["baseline"], by_pair[p]["candidate"]) for p in sorted(by_pair) if len(by_pair[p]) == 2]


def verdicts(row: dict) -> dict:
    """``{(n, config, mode): verdict}`` for this comparison's first ``n`` rounds (n in SIZES, up to its rounds)."""
    pairs = _pairs(row)
    found = {}
    for n in SIZES:
        if n > row["rounds"] or len(pairs) < n:
            continue
        base, cand = [p[0] for p in pairs[:n]], [p[1] for p in pairs[:n]]
        for mode in ("improvement", "non_regression"):
            found[(n, "paired/p10", mode)] = lab.judge("paired/p10", base, cand, mode)
            found[(n, "pyperf", mode)] = lab.judge("pyperf", base, cand, mode)
    return found


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided ``level`` interval of a binomial rate ``k / n``."""
    from scipy.stats import beta

    tail = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return low, high


def analyse(rows: list[dict]) -> dict:
    """Per (kind, source, effect, n, config, mode): (wanted count, comparisons); the consistency of the
    offline judge with the commands' own decisions; walls and loads."""
    counts = defaultdict(lambda: [0, 0])
    agree = [0, 0]
    walls, loads, spreads = defaultdict(list), defaultdict(list), defaultdict(list)
    for row in rows:
        if not row.get("attempts"):
            continue
        found = verdicts(row)
        ratios = [math.log(c["step_p10_ms"] / b["step_p10_ms"]) for b, c in _pairs(row)
                  if b["ok"] and c["ok"] and b.get("step_p10_ms") and c.get("step_p10_ms")]
        if len(ratios) > 2:
            spreads[(row["kind"], row["source"])].append(statistics.stdev(ratios))
        walls[(row["kind"], row["source"], row["rounds"])].append(row["wall_s"])
        loads[row["kind"]].append(row["load"])
        for (n, config, mode), verdict in found.items():
            wanted = "accept" if mode == "improvement" else "reject"
            cell = counts[(row["kind"], row["source"], row["effect"], n, config, mode)]
            cell[0] += verdict == wanted
            cell[1] += 1
            if mode == "non_regression":  # the CI gate's pass: "no slower than the margin"
                passed = counts[(row["kind"], row["source"], row["effect"], n, config, "gate_passes")]
                passed[0] += verdict == "accept"
                passed[1] += 1
        full = found.get((row["rounds"], "paired/p10", "improvement"))
        if full is not None and row.get("decision") is not None:
            agree[0] += full == row["decision"]
            agree[1] += 1
    return {"counts": dict(counts), "agree": agree, "walls": dict(walls), "loads": dict(loads),
            "spreads": dict(spreads)}


#: (label, effect, n, mode, direction, bound): the issue's targets for lockstep rounds (rates of the wanted verdict).
TARGETS = (
    ("identical arms falsely accepted <= 2%", 0.0, 10, "improvement", "max", 0.02),
    ("identical arms falsely alarmed <= 5%", 0.0, 10, "non_regression", "max", 0.05),
    ("15% speedup accepted >= 80% at 10 rounds", -0.15, 10, "improvement", "min", 0.80),
    ("15% slowdown rejected >= 80% at 10 rounds", 0.15, 10, "non_regression", "min", 0.80),
    ("7% speedup accepted >= 80% at 20 rounds", -0.07, 20, "improvement", "min", 0.80),
    ("7% slowdown rejected >= 80% at 20 rounds", 0.07, 20, "non_regression", "min", 0.80),
)


def _rate(cell) -> str:
    if not cell or not cell[1]:
        return "n/a"
    k, n = cell
    low, high = clopper_pearson(k, n)
    return f"{k}/{n} ({100 * k / n:.0f}%, 95% {100 * low:.0f}-{100 * high:.0f}%)"


def report(found: dict, kinds: list[str]) -> str:
    counts, lines = found["counts"], []
    effects = sorted({key[2] for key in counts})
    sources = [s for s in (*SOURCES, *FREE_SOURCES) if any(key[1] == s for key in counts)]
    lines.append("## Rates by neighbour kind, source and true effect\n")
    lines.append("Each cell: accept in improvement mode / reject in non_regression mode, as k/n of separate "
                 "comparisons (the default configuration: paired on p10 with the step checks); pyperf's rule on the "
                 "same attempts after the bar.\n")
    for kind in kinds:
        load = found["loads"].get(kind)
        if not load:
            continue
        lines.append(f"### {kind} (1-minute load average {min(load):.2f} to {max(load):.2f})\n")
        lines.append("| source | effect | n | ours: accept / reject | pyperf: accept / reject |")
        lines.append("|---|---|---|---|---|")
        for source in sources:
            for effect in effects:
                for n in SIZES:
                    ours = [counts.get((kind, source, effect, n, "paired/p10", m)) for m in ("improvement",
                                                                                             "non_regression")]
                    if not ours[0]:
                        continue
                    theirs = [counts.get((kind, source, effect, n, "pyperf", m)) for m in ("improvement",
                                                                                         "non_regression")]
                    lines.append(f"| {source} | {effect:+.2f} | {n} | {_short(ours[0])} / {_short(ours[1])} | "
                                 f"{_short(theirs[0])} / {_short(theirs[1])} |")
        lines.append("")
    lines.append("## Targets for lockstep rounds (each kind; the weakest cell)\n")
    lines.append("| target | source | " + " | ".join(kinds) + " | weakest |")
    lines.append("|---|---|" + "---|" * (len(kinds) + 1))
    for label, effect, n, mode, direction, bound in TARGETS:
        for source in [s for s in LOCKSTEP_SOURCES if s in sources]:
            cells = [counts.get((kind, source, effect, n, "paired/p10", mode)) for kind in kinds]
            if not any(cells):
                continue
            rates = [(c[0] / c[1], kind) for c, kind in zip(cells, kinds) if c and c[1]]
            worst = max(rates) if direction == "max" else min(rates)
            ok = worst[0] <= bound if direction == "max" else worst[0] >= bound
            lines.append(f"| {label} | {source} | " + " | ".join(_short(c) for c in cells)
                         + f" | {'ok' if ok else 'MISS'} {100 * worst[0]:.0f}% ({worst[1]}) |")
    lines.append("\n## Lockstep against in-process step interleaving and pyperf (same effects, same n)\n")
    lines.append("| kind | effect | n | mode | lockstep | steps | difference | pyperf (lockstep's attempts) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        for effect in effects:
            for n in SIZES:
                for mode in ("improvement", "non_regression"):
                    ours = counts.get((kind, "lockstep", effect, n, "paired/p10", mode))
                    steps = counts.get((kind, "steps", effect, n, "paired/p10", mode))
                    theirs = counts.get((kind, "lockstep", effect, n, "pyperf", mode))
                    if not ours or not steps:
                        continue
                    difference = 100 * (ours[0] / ours[1] - steps[0] / steps[1])
                    lines.append(f"| {kind} | {effect:+.2f} | {n} | {mode} | {_short(ours)} | {_short(steps)} | "
                                 f"{difference:+.0f} points | {_short(theirs)} |")
    lines.append("\n## The gate on a change that does nothing (identical arms, non_regression, margin 5%)\n")
    lines.append("Passed (accept: not slower beyond the margin) at 10 rounds, k/n of separate comparisons; the rest "
                 "are reruns or false alarms (the targets above count those).\n")
    lines += _kind_table(kinds, sources, lambda kind, source: counts.get((kind, source, 0.0, 10, "paired/p10",
                                                                          "gate_passes")), _short)
    lines.append("\n## Within-round spread (sd of each round's log p10 ratio, median over a cell's comparisons)\n")
    lines.append("What a round's pairing leaves of the machine's noise: the smaller, the smaller an effect the "
                 "paired method resolves in 10 rounds.\n")
    lines += _kind_table(kinds, sources, lambda kind, source: found["spreads"].get((kind, source)),
                         lambda cell: f"{statistics.median(cell):.4f}" if cell else "n/a")
    lines.append("\n## Wall time of a comparison, by source (median seconds; 10 and 20 rounds)\n")
    lines.append("| kind | " + " | ".join(f"{s} (10)" for s in sources) + " | revision / steps (10) |")
    lines.append("|---|" + "---|" * (len(sources) + 1))
    for kind in kinds:
        cells = []
        for source in sources:
            walls = found["walls"].get((kind, source, 10))
            cells.append(f"{statistics.median(walls):.1f}" if walls else "n/a")
        revision, steps = found["walls"].get((kind, "revision", 10)), found["walls"].get((kind, "steps", 10))
        ratio = f"{statistics.median(revision) / statistics.median(steps):.2f}" if revision and steps else "n/a"
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {ratio} |")
    agree = found["agree"]
    lines.append(f"\nThe offline judge agrees with the commands' own decisions (improvement mode, all rounds) in "
                 f"{agree[0]} of {agree[1]} comparisons.")
    return "\n".join(lines)


def _kind_table(kinds, sources, cell, shown) -> list[str]:
    """A table of a row per neighbour kind (those with any cell) and a column per source."""
    lines = ["| kind | " + " | ".join(sources) + " |", "|---|" + "---|" * len(sources)]
    for kind in kinds:
        cells = [cell(kind, source) for source in sources]
        if any(cells):
            lines.append(f"| {kind} | " + " | ".join(shown(c) for c in cells) + " |")
    return lines


def _short(cell) -> str:
    if not cell or not cell[1]:
        return "n/a"
    return f"{cell[0]}/{cell[1]}"


def build_parser() -> argparse.ArgumentParser:
    parser = lab.build_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.set_defaults(kinds=["quiet", *lab.MORE_KINDS], input_shape="2,64", probe_units=80)
    parser.add_argument("--sources", type=lambda t: t.split(","), default=list(SOURCES))
    parser.add_argument("--collections", type=float, default=1.0,
                        help="scale the comparisons per cell (1: 20 for the lockstep and steps cells and the "
                             "revision's 0 and +15%, 10 for the others)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plan", choices=("full", "short"), default="full",
                        help="short: the lockstep cells' 20 comparisons each, 10 for steps, 6 for the other sources")
    parser.add_argument("--from-jsonl", default=None, help="judge an earlier collection; measure nothing")
    parser.set_defaults(out=None)
    return parser


def load(path: str) -> tuple[dict, list[dict]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    return lines[0], lines[1:]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.from_jsonl:
        head, rows = load(args.from_jsonl)
        kinds = [k for k in head["args"]["kinds"] if any(r["kind"] == k for r in rows)]
    else:
        out_path = args.out or tempfile.mkstemp(prefix="lab-lockstep-", suffix=".jsonl")[1]
        print(f"writing {out_path}", file=sys.stderr)
        with open(out_path, "w") as out:
            collect(args, out)
        head, rows = load(out_path)
        kinds = args.kinds
    calibration = head["calibration"]
    print(f"calibration: TinyLM step {calibration['step_ms']:.2f} ms, unit {calibration['unit_ms']:.4f} ms, "
          f"baseline step {calibration['base_step_ms']:.2f} ms ({calibration['base_units']} units); "
          f"{len(rows)} comparisons")
    print(report(analyse(rows), kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
