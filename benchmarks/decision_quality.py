"""How often each decision rule gets the answer right, with noise fitted on this machine.

1. Measure: time real attempts of a tiny transformer training step on the CPU (TinyLM's size:
   2 blocks, d_model 64, 4 heads, batch 4 x 128 tokens; each attempt builds a fresh model,
   warms up 2 steps and reports the median of 10 timed steps, as an attempt's ``latency_ms``
   is). Then time a few attempts while busy-looping processes compete for every core.
2. Fit: the body is lognormal, its sigma ``1.4826 * MAD`` of the log attempt latencies; the
   contention tail is the fraction of attempts ``rules.flag_contention`` flags (at least an
   assumed 5%: a few dozen attempts cannot measure a rate that small) slowed by a factor drawn
   uniformly between the smallest and largest slowdown (of at least 1.25x) measured under
   provoked contention (1.5-3x assumed when provoking failed to slow attempts).
3. Simulate: for n = 5, 10, 20 and 30 attempts per arm, arms that are identical, 5/10/20%
   faster and 5/10/20% slower, 2000 seeded comparisons each; every comparison is judged by
   the specification's rule (``evaluate_regression``; ``evaluate_seed_non_regression`` for CI)
   and by ``evaluate_robust`` in both modes, on the same simulated attempts. No attempt fails
   (``maximum_failure_rate`` is 0: a failure would decide by itself).

Printed: the fitted parameters; per method, mode and n, the acceptance rate on identical arms
(a false accept in improvement mode, the right answer in non-regression mode), the acceptance
rate of true speedups, and in non-regression mode the rejection rate on identical arms (a false
alarm) and of true slowdowns (detection); then the targets of the robust method, checked.

Usage: python benchmarks/decision_quality.py [--comparisons 2000] [--jobs 2] [--attempts 40]
       [--threads 1] [--sigma S --contention F] (S and F skip the measurement)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import numpy as np

from mlflow_perfgate.rules import evaluate_regression
from mlflow_perfgate.rules._robust import evaluate_robust, evaluate_seed_non_regression, flag_contention

SIZES = (5, 10, 20, 30)
SPEEDUPS = (0.05, 0.10, 0.20)
SLOWDOWNS = (0.05, 0.10, 0.20)
#: Scenarios as the candidate's latency ratio to the baseline: identical, faster, slower.
RATIOS = (1.0, *(1 - s for s in SPEEDUPS), *(1 + s for s in SLOWDOWNS))
ASSUMED_FRACTION = 0.05
ASSUMED_FACTORS = (1.5, 3.0)
#: A provoked attempt counts as slowed by contention from this factor on (``flag_contention``'s floor).
SLOWED = 1.25
QUALITY = 0.9


# --- measuring ----------------------------------------------------------------------------------


def _attempt(threads: int, steps: int, warmup: int, seed: int) -> float:
    """One attempt: a fresh tiny transformer, ``warmup`` steps, the median of ``steps`` timed steps (ms)."""
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    vocab, d_model, batch, seq = 64, 64, 4, 128
    layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.Embedding(vocab, d_model), nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                          nn.Linear(d_model, vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, vocab, (batch, seq + 1))

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _burn(stop) -> None:
    value = 0
    while not stop.is_set():
        for _ in range(100_000):
            value += 1


def measure(attempts: int, provoked: int, threads: int, steps: int, warmup: int) -> dict:
    """Natural attempts, then ``provoked`` attempts under one busy-looping process per core."""
    natural = [_attempt(threads, steps, warmup, seed) for seed in range(attempts)]
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    burners = [context.Process(target=_burn, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 1)]
    for burner in burners:
        burner.start()
    try:
        time.sleep(0.5)
        busy = [_attempt(threads, steps, warmup, attempts + seed) for seed in range(provoked)]
    finally:
        stop.set()
        for burner in burners:
            burner.join(timeout=10)
    return {"natural": natural, "provoked": busy}


def fit(measured: dict) -> dict:
    natural = measured["natural"]
    logs = np.log(natural)
    median_ms = float(np.exp(np.median(logs)))
    sigma = 1.482602218505602 * float(np.median(np.abs(logs - np.median(logs))))
    flagged = flag_contention(natural)
    fraction = len(flagged) / len(natural)
    factors = sorted(value / median_ms for value in measured["provoked"])
    slowed = [factor for factor in factors if factor >= SLOWED]
    if len(slowed) >= 2:
        low, high = slowed[0], slowed[-1]
        factor_source = (f"provoked: the {len(slowed)} of {len(factors)} attempts under {os.cpu_count()} "
                         f"busy-looping processes slowed >= {SLOWED}x")
    else:
        low, high = ASSUMED_FACTORS
        factor_source = "assumed (provoked contention did not slow the attempts)"
    return {
        "median_ms": median_ms,
        "sigma": sigma,
        "natural_flagged": [round(natural[i] / median_ms, 2) for i in flagged],
        "natural_fraction": fraction,
        "fraction": max(fraction, ASSUMED_FRACTION),
        "fraction_source": "measured" if fraction >= ASSUMED_FRACTION else f"assumed floor {ASSUMED_FRACTION:.0%}",
        "factors": (low, high),
        "factor_source": factor_source,
        "provoked_factors": [round(f, 2) for f in factors],
    }


# --- simulating ---------------------------------------------------------------------------------


def _arm(rng, n: int, ratio: float, model: dict) -> list[dict]:
    latencies = model["median_ms"] * ratio * np.exp(rng.normal(0.0, model["sigma"], n))
    contended = rng.random(n) < model["fraction"]
    latencies[contended] *= rng.uniform(*model["factors"], int(contended.sum()))
    return [{"ok": True, "latency_ms": float(value), "quality": QUALITY, "failure": None} for value in latencies]


RULES = {
    ("seed", "improvement"): lambda b, c: evaluate_regression(b, c),
    ("seed", "non_regression"): lambda b, c: evaluate_seed_non_regression(b, c),
    ("robust", "improvement"): lambda b, c: evaluate_robust(b, c, mode="improvement"),
    ("robust", "non_regression"): lambda b, c: evaluate_robust(b, c, mode="non_regression"),
}


def simulate_cell(args) -> tuple:
    """Decisions of every rule on ``comparisons`` seeded comparisons of one (n, ratio) cell."""
    n, index, ratio, comparisons, model, seed = args
    rng = np.random.default_rng([seed, n, index])
    counts = {key: {"accept": 0, "reject": 0, "rerun": 0} for key in RULES}
    for _ in range(comparisons):
        baseline, candidate = _arm(rng, n, 1.0, model), _arm(rng, n, ratio, model)
        for key, rule in RULES.items():
            if key[1] == "improvement" and ratio > 1:
                continue  # improvement mode is judged on identical arms and speedups
            counts[key][rule(baseline, candidate)["decision"]] += 1
    return n, ratio, counts


def _rate(counts, key, n, ratio, decision, comparisons) -> float:
    return counts[(n, ratio)][key][decision] / comparisons


def report(counts: dict, comparisons: int) -> dict:
    def cell(key, n, ratio, decision):
        return _rate(counts, key, n, ratio, decision, comparisons)

    header = (f"{'method':<7} {'mode':<15} {'n':>3} | {'accept':>7} {'rerun':>6} | {'accept faster by':^23} | "
              f"{'reject':>7} | {'reject slower by':^23}")
    sub = (f"{'':<7} {'':<15} {'':>3} | {'ident.':>7} {'ident.':>6} | "
           + " ".join(f"{s:>7.0%}" for s in SPEEDUPS) + f" | {'ident.':>7} | "
           + " ".join(f"{s:>7.0%}" for s in SLOWDOWNS))
    print(header)
    print(sub)
    print("-" * len(sub))
    for key in RULES:
        for n in SIZES:
            line = (f"{key[0]:<7} {key[1]:<15} {n:>3} | {cell(key, n, 1.0, 'accept'):>7.1%} "
                    f"{cell(key, n, 1.0, 'rerun'):>6.1%} | "
                    + " ".join(f"{cell(key, n, 1 - s, 'accept'):>7.1%}" for s in SPEEDUPS))
            if key[1] == "non_regression":
                line += (f" | {cell(key, n, 1.0, 'reject'):>7.1%} | "
                         + " ".join(f"{cell(key, n, 1 + s, 'reject'):>7.1%}" for s in SLOWDOWNS))
            else:
                line += f" | {'':>7} | " + " ".join(f"{'':>7}" for _ in SLOWDOWNS)
            print(line)
        print()

    improvement, ci = ("robust", "improvement"), ("robust", "non_regression")
    targets = {
        "false accept (improvement, identical arms) <= 2% at every n":
            max(cell(improvement, n, 1.0, "accept") for n in SIZES) <= 0.02,
        "accept a 20% speedup >= 90% at n = 10": cell(improvement, 10, 0.8, "accept") >= 0.90,
        "accept a 10% speedup >= 80% at n = 20": cell(improvement, 20, 0.9, "accept") >= 0.80,
        "false alarm (non_regression, identical arms) <= 5% at every n":
            max(cell(ci, n, 1.0, "reject") for n in SIZES) <= 0.05,
        "detect (reject) a 20% slowdown >= 90% at n = 10": cell(ci, 10, 1.2, "reject") >= 0.90,
    }
    print("targets of the robust method:")
    for name, held in targets.items():
        print(f"  {'PASS' if held else 'FAIL'}  {name}")
    return targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=2000, help="simulated comparisons per cell")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for the simulation")
    parser.add_argument("--attempts", type=int, default=40, help="attempts measured for the fit")
    parser.add_argument("--provoked", type=int, default=6, help="attempts measured under provoked contention")
    parser.add_argument("--threads", type=int, default=1, help="torch threads during the measured attempts")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per attempt")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per attempt")
    parser.add_argument("--sigma", type=float, help="skip the measurement: the body's sigma of log latency")
    parser.add_argument("--contention", type=float, help="with --sigma: the contended fraction")
    parser.add_argument("--factors", type=float, nargs=2, default=ASSUMED_FACTORS,
                        help="with --sigma: the contention slowdown range")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if args.sigma is None:
        print(f"measuring {args.attempts} attempts (+{args.provoked} under provoked contention) of a tiny "
              f"transformer training step, {args.threads} thread(s), median of {args.steps} steps each ...")
        model = fit(measure(args.attempts, args.provoked, args.threads, args.steps, args.warmup))
        print(f"  median attempt latency   {model['median_ms']:.3f} ms")
        print(f"  body sigma (log, 1.4826 MAD) {model['sigma']:.4f}")
        print(f"  contention flagged       {model['natural_fraction']:.1%} of natural attempts, at "
              f"{model['natural_flagged'] or 'none'} x median")
        print(f"  provoked slowdowns       {model['provoked_factors']} x median")
        print(f"  simulated contention     {model['fraction']:.1%} of attempts ({model['fraction_source']}), "
              f"slowed {model['factors'][0]:.2f}-{model['factors'][1]:.2f}x ({model['factor_source']})")
        print(f"  measured in {time.perf_counter() - started:.1f} s")
    else:
        model = {"median_ms": 10.0, "sigma": args.sigma, "fraction": args.contention or 0.0,
                 "factors": tuple(args.factors)}
        print(f"given noise: sigma {args.sigma}, contention {model['fraction']:.1%} at "
              f"{model['factors'][0]}-{model['factors'][1]}x")
    print()

    cells = [(n, index, ratio, args.comparisons, model, args.seed)
             for n in SIZES for index, ratio in enumerate(RATIOS)]
    simulated = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(simulate_cell, cells, chunksize=1)
    else:
        results = [simulate_cell(cell) for cell in cells]
    counts = {(n, ratio): cell for n, ratio, cell in results}
    print(f"{args.comparisons} seeded comparisons per cell. Columns: accept and rerun on identical arms; "
          f"accept of true speedups; (non_regression) reject of identical arms and of true slowdowns")
    targets = report(counts, args.comparisons)
    print(f"\nsimulated in {time.perf_counter() - simulated:.1f} s; total {time.perf_counter() - started:.1f} s")
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
