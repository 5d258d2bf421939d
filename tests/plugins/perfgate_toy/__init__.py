"""A toy plugin of mlflow-perfgate, installed by the tests (``tests/test_plugins.py``).

It adds, through the entry points ``mlflow_perfgate.methods`` and ``mlflow_perfgate.objectives``:

- the method ``toy``: the robust rule under a name of its own, with its own metric names, its own
  boundary p-value and floor (the robust ones), so that a suite and a bisect can use it;
- the objective ``wall``: the attempt's wall time (``attempt_wall_s``, every supervised attempt
  logs it), lower is better, within ``maximum_wall_cost`` (a threshold of its own);
- the objective ``slowest``: a figure no attempt logs by itself, the slowest measured step
  (``slowest_step_ms``), which its entry's ``measure`` takes in the attempt's process from the
  attempt's step times (and, to show it has the live workload, only when the workload has a
  ``step``); lower is better, within ``maximum_slowest_cost``.
"""

from __future__ import annotations

import dataclasses

from mlflow_perfgate.rules import Check, Figure, Method, Objective
from mlflow_perfgate.rules._policy import Setting
from mlflow_perfgate.rules._robust import robust_rule
from mlflow_perfgate.rules._statistical import statistical_floor
from mlflow_perfgate.rules._robust import robust_boundary_p_value


def toy_rule(b, c, policy, objective, *, look=None, max_looks=None, **extra):
    return dataclasses.replace(robust_rule(b, c, policy, objective, look=look, max_looks=max_looks, **extra),
                               method="toy")


TOY_METHOD = Method(
    "toy", toy_rule,
    figures=(Figure("p_value", "toy p", metric="toy_p_value"),
             Figure("ratio_estimate", "toy ratio", metric="toy_ratio_estimate"),
             Figure("recommended_attempts", "toy attempts to settle it", metric="toy_recommended_attempts")),
    objectives=("latency",),
    help="the robust rule, as a plugin's method",
    boundary_p_value=robust_boundary_p_value,
    floor=statistical_floor,
)


def wall_checks(b, c, policy):
    b_wall, c_wall = b.figures["median_attempt_wall_s"], c.figures["median_attempt_wall_s"]
    cost = (c_wall - b_wall) / b_wall
    checks = [Check.build("wall_cost_ok", cost <= policy.maximum_wall_cost,
                          {"candidate": c_wall, "baseline": b_wall, "cost": cost,
                           "threshold": policy.maximum_wall_cost},
                          lambda f: (f"candidate median attempt wall {f['candidate']:.3g} s against baseline "
                                     f"{f['baseline']:.3g} s is a cost of {f['cost']:.1%}; allowed "
                                     f"maximum_wall_cost {f['threshold']:.1%}"))]
    return checks, {"wall_cost": cost}


def make_wall_objective():
    """The entry point may name a callable that returns the entry."""
    return Objective(
        "wall", metric="attempt_wall_s", direction="lower", unit="s", checks=wall_checks,
        thresholds=(Setting("maximum_wall_cost", 0.5, "Wall objective: most rise of the median attempt wall time",
                            low=0),),
        arm_figures=(Figure("median_attempt_wall_s", "median attempt wall", " s"),),
        figures=(Figure("wall_cost", "wall cost", metric="toy_wall_cost"),),
        headlines={"improvement": "ACCEPT: the candidate's attempts take no longer than allowed"},
        help="the attempt's wall time, lower is better (a plugin's objective)",
    )


def slowest_checks(b, c, policy):
    b_slow, c_slow = b.figures["median_slowest_step_ms"], c.figures["median_slowest_step_ms"]
    cost = (c_slow - b_slow) / b_slow
    checks = [Check.build("slowest_cost_ok", cost <= policy.maximum_slowest_cost,
                          {"candidate": c_slow, "baseline": b_slow, "cost": cost,
                           "threshold": policy.maximum_slowest_cost},
                          lambda f: (f"candidate median slowest step {f['candidate']:.3g} ms against baseline "
                                     f"{f['baseline']:.3g} ms is a cost of {f['cost']:.1%}; allowed "
                                     f"maximum_slowest_cost {f['threshold']:.1%}"))]
    return checks, {"slowest_cost": cost}


def measure_slowest(workload, facts):
    """In the attempt's process: the slowest of its measured steps (ms)."""
    if not callable(getattr(workload, "step", None)):
        raise TypeError("no live workload")
    return max(facts["step_times_ms"])


SLOWEST = Objective(
    "slowest", metric="slowest_step_ms", direction="lower", unit="ms", checks=slowest_checks,
    thresholds=(Setting("maximum_slowest_cost", 0.5, "Slowest objective: most rise of the median slowest step",
                        low=0),),
    arm_figures=(Figure("median_slowest_step_ms", "median slowest step", " ms"),),
    figures=(Figure("slowest_cost", "slowest-step cost", metric="toy_slowest_cost"),),
    headlines={"improvement": "ACCEPT: the candidate's slowest step is no slower than allowed"},
    help="the slowest measured step, lower is better (a plugin's objective on a figure it measures)",
    label="slowest step", measure=measure_slowest,
)
