"""An objective entry's ``measure`` (issue 25, point 1): run in the attempt, its figure in the result.

In-process attempts of a real TinyLM, with objectives registered here for the test (the plugin
tests, ``test_plugins.py``, take one through ``compare`` and ``suite run`` from an installed package).
"""

from __future__ import annotations

import numpy as np
import pytest

from mlflow_perfgate.workloads import run_attempt, run_interleaved
from mlflow_perfgate.rules import Objective
from mlflow_perfgate.rules._registry import OBJECTIVES

TINY = {"input_shape": "2,16", "steps": 3, "warmup": 1}
seen = []


def _checks(b, c, policy):
    return [], {}


@pytest.fixture
def objective():
    """Register objectives whose measure returns what ``answer`` holds (a value, or an exception to raise)."""
    made = []

    def make(name, answer):
        def measure(workload, facts):
            seen.append((type(workload).__name__, dict(facts)))
            if isinstance(answer, BaseException):
                raise answer
            return answer(facts) if callable(answer) else answer

        OBJECTIVES.register(Objective(name, metric=f"{name}_figure", direction="lower", unit="x", checks=_checks,
                                      measure=measure, label=f"{name} in words"))
        made.append(name)
        return name

    yield make
    for name in made:
        OBJECTIVES.unregister(name)


def test_the_figure_is_measured_in_the_attempt_with_the_live_workload(objective):
    name = objective("fastest_x", lambda facts: np.float64(min(facts["step_times_ms"])))  # a numpy scalar
    seen.clear()
    result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
    assert result.ok, result.failure
    assert result.figures == {"fastest_x_figure": min(result.step_times_ms)}
    assert type(result.figures["fastest_x_figure"]) is float
    kind, facts = seen[-1]
    assert kind == "TinyLMWorkload" and facts["quality"] == result.quality and facts["conditions"] == TINY
    assert facts["latency_ms"] == result.latency_ms and len(facts["step_times_ms"]) == 3


def test_both_arms_of_an_interleaved_round_measure_their_own(objective):
    name = objective("steps_x", lambda facts: float(len(facts["step_times_ms"])) + facts["conditions"]["marker"])
    a, b = run_interleaved("tinylm", {**TINY, "marker": 1}, {**TINY, "marker": 2}, supervised=False, probe=False,
                           measures=(name,))
    assert (a.figures, b.figures) == ({"steps_x_figure": 4.0}, {"steps_x_figure": 5.0})


def test_one_registered_by_hand_is_refused_for_a_supervised_attempt_whose_child_lacks_it(objective):
    name = objective("forked_x", 7.5)  # an installed plugin's reaches the child: test_plugins.py
    for runner in ("fork", "spawn"):
        with pytest.raises(ValueError, match="registered in this process only.*install it as a plugin"):
            run_attempt("tinylm", TINY, runner=runner, probe=False, measures=(name,))


@pytest.mark.parametrize("answer, reason", [
    (ValueError("no counter"), "the bad_x objective's measure failed: ValueError: no counter"),
    (float("nan"), "the bad_x objective's measure returned nan for bad_x_figure"),
    (-1.0, "returned -1.0 for bad_x_figure; it must be a finite number > 0, or None"),
    (True, "returned True"),
])
def test_a_measure_that_fails_fails_the_attempt_saying_why(objective, answer, reason):
    name = objective("bad_x", answer)
    result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
    assert not result.ok and reason in result.failure
    assert result.figures == {} and result.latency_ms is None  # a failed attempt reports no headline figures


def test_none_leaves_the_figure_out(objective):
    name = objective("none_x", None)
    result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
    assert result.ok and result.figures == {}


def test_bad_measures_are_refused_before_anything_runs(objective):
    with pytest.raises(ValueError, match="the latency objective measures nothing in an attempt"):
        run_attempt("tinylm", TINY, supervised=False, measures=("latency",))
    with pytest.raises(ValueError, match="unknown objective|not a registered|nope"):
        run_attempt("tinylm", TINY, supervised=False, measures=("nope",))
    with pytest.raises(ValueError, match="a sequence of objective names"):
        run_attempt("tinylm", TINY, supervised=False, measures="latency")


def test_an_entry_with_a_measure_needs_a_metric():
    with pytest.raises(ValueError, match="needs a metric"):
        Objective("m", metric=None, direction="lower", unit="x", checks=_checks, measure=lambda w, f: 1.0)
    assert Objective("m", metric="m_x", direction="lower", unit="x", checks=_checks).metric_label == "m_x"


def test_compare_refuses_a_measured_objective_its_attempts_could_not_measure(objective, sqlite_uri):
    from mlflow_perfgate.harness import compare
    from mlflow_perfgate.rules._errors import InputError
    from mlflow.tracking import MlflowClient

    name = objective("hand_x", 1.0)
    with pytest.raises(InputError, match="registered in this process only"):
        compare("tinylm", TINY, {"checkpoint": True}, objective=name, attempts=3, progress=False)
    assert MlflowClient().search_experiments() == [] or not MlflowClient().search_runs(
        [e.experiment_id for e in MlflowClient().search_experiments()])  # nothing written


def test_compare_in_process_judges_a_figure_measured_by_an_objective_registered_here(objective, sqlite_uri):
    from mlflow_perfgate.harness import compare
    from mlflow_perfgate.rules import Check
    from mlflow.tracking import MlflowClient

    def checks(b, c, policy):
        ratio = c.figures["median_depth_x_figure"] / b.figures["median_depth_x_figure"]
        return [Check.build("depth_ok", ratio <= 1.0, {"ratio": ratio}, lambda f: f"ratio {f['ratio']:.3g}")], {}

    OBJECTIVES.register(Objective("depth_x", metric="depth_x_figure", direction="lower", unit="x", checks=checks,
                                  measure=lambda workload, facts: 2.0 if facts["conditions"].get("checkpoint") else 3.0))
    try:
        result = compare("tinylm", TINY, {"checkpoint": True}, objective="depth_x", attempts=3, supervised=False,
                         progress=False, min_valid_runs=3)
    finally:
        OBJECTIVES.unregister("depth_x")
    assert result["objective"] == "depth_x" and result["depth_ok"] is True, result["messages"]
    figures = {a["arm"]: a["depth_x_figure"] for a in result["attempts"]}
    assert figures == {"baseline": 3.0, "candidate": 2.0}
    run = MlflowClient().get_run(result["attempts"][0]["run_id"])
    assert run.data.metrics["depth_x_figure"] in (2.0, 3.0)


def test_numpy_and_torch_scalars_are_numbers_and_a_tensor_of_many_is_refused(objective):
    import torch

    for answer, expected in ((np.int64(3), 3.0), (torch.tensor(2.5), 2.5), (np.array(4.0), 4.0)):
        name = objective(f"scalar_{int(expected * 10)}", answer)
        result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
        assert result.ok and result.figures == {f"{name}_figure": expected}
        assert type(result.figures[f"{name}_figure"]) is float
    name = objective("many_x", torch.tensor([1.0, 2.0]))
    result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
    assert not result.ok and "the many_x objective's measure returned tensor([1., 2.])" in result.failure
    name = objective("flag_x", np.True_)
    result = run_attempt("tinylm", TINY, supervised=False, probe=False, measures=(name,))
    assert not result.ok and "returned True" in result.failure
