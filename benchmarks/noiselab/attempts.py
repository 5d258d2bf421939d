"""How the lab runs attempts: the product's own runs (``run_attempt``, ``run_interleaved``) on the
lab's wrapper workload, with a run's conditions and the extra work of one arm."""

from __future__ import annotations

import os

#: ``benchmarks/``: the children import the wrapper workload from there.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The wrapper workload (``benchmarks/noise_lab_workload.py``), imported by every attempt's child.
WORKLOAD = "noise_lab_workload:make"


def base_conditions(args) -> dict:
    """The harness's default TinyLM conditions, with this run's shape, warm-up and steps."""
    from mlflow_perfgate.harness import DEFAULT_CONDITIONS

    shape = [int(part) for part in str(args.input_shape).replace("x", ",").split(",")]
    return {**DEFAULT_CONDITIONS, "input_shape": ",".join(map(str, shape)), "batch_size": shape[0],
            "warmup": args.warmup, "steps": args.steps, "unit_size": args.unit_size}


def one_attempt(args, runner, conditions: dict, units: int):
    """One supervised attempt of its own, ``units`` of extra work a step (``run_attempt``)."""
    from mlflow_perfgate.workloads import run_attempt

    return run_attempt(WORKLOAD, {**conditions, "extra_units": units}, runner=runner, timeout_s=args.timeout,
                       probe=not args.no_probe, threads=args.threads)


def shared_pair(args, runner, conditions: dict, units_a: int, units_b: int) -> tuple:
    """Both arms in one supervised child, ``units_a`` and ``units_b`` of extra work, their measured
    steps interleaved (``run_interleaved``, as ``compare --interleave steps`` runs them; the child's
    limit twice one attempt's)."""
    from mlflow_perfgate.workloads import run_interleaved

    return run_interleaved(WORKLOAD, {**conditions, "extra_units": units_a}, {**conditions, "extra_units": units_b},
                           warmup=args.warmup, steps=args.steps, threads=args.threads, timeout_s=2 * args.timeout,
                           probe=not args.no_probe, supervised=True, runner=runner)
