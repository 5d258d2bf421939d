"""What a comparison runs with when its caller does not say: the recommended configuration, falling back
per comparison where it does not apply, and the specification's rule one option away (``--method seed``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate import harness
from mlflow_perfgate.cli import cli
from mlflow_perfgate.harness import RECOMMENDED, SPECIFICATION, configure
from mlflow_perfgate.tracking import TAG
from mlflow_perfgate.workloads import AttemptRunner

CPU = dict(harness.DEFAULT_CONDITIONS)


def test_left_out_is_the_recommended_configuration():
    config = configure("latency", "improvement", "checkpoint", CPU, steps_given=False)
    assert (config.method, config.latency, config.interleave, config.threads, config.attempts, config.steps) == (
        "paired", "p10", "steps", 1, 10, 30)
    assert RECOMMENDED == {"method": "paired", "latency": "p10", "interleave": "steps", "threads": 1,
                           "attempts": 10, "steps": 30}
    assert config.defaulted == ("method", "latency", "interleave", "threads", "attempts", "steps")
    assert config.fallbacks == ()
    assert config.text() == ("paired method on p10, steps interleaved, 1 torch thread, 10 rounds of 30 steps; "
                             "defaults: method, latency, interleave, threads, attempts, steps")


def test_given_values_are_kept_and_not_called_defaults():
    config = configure("latency", "non_regression", "checkpoint", CPU, method="robust", latency="fastest",
                       interleave="attempts", threads=2, attempts=7, steps_given=True)
    assert (config.method, config.latency, config.interleave, config.threads, config.attempts, config.steps) == (
        "robust", "fastest", "attempts", 2, 7, None)
    assert config.defaulted == () and config.fallbacks == ()


def test_method_seed_is_the_specification_on_its_figure_and_sample():
    config = configure("latency", "improvement", "checkpoint", CPU, method="seed", steps_given=False)
    assert (config.method, config.latency, config.attempts, config.steps) == (
        "seed", SPECIFICATION["latency"], SPECIFICATION["attempts"], SPECIFICATION["steps"]) == ("seed", "raw", 5, 10)
    assert config.fallbacks == ()  # asked for, not fallen back to
    # the measurement design stays the recommended one: both arms in one child, one thread
    assert (config.interleave, config.threads) == ("steps", 1)


@pytest.mark.parametrize("objective", ["memory", "throughput"])
def test_an_objective_the_paired_method_does_not_judge_falls_back_to_the_specification(objective):
    config = configure(objective, "improvement", "checkpoint", CPU, steps_given=False)
    assert (config.method, config.latency, config.attempts, config.steps) == ("seed", "raw", 5, 10)
    assert config.fallbacks == (f"method seed: the paired method does not judge the {objective} objective in "
                                "improvement mode",)
    assert "fell back from the recommended configuration: method seed" in config.text()


@pytest.mark.parametrize("variable", ["steps", "warmup", "device", "revision", "python"])
def test_a_change_both_arms_cannot_share_a_process_with_runs_lockstep_rounds(variable):
    config = configure("latency", "improvement", variable, CPU, steps_given=False)
    assert config.interleave == "lockstep" and config.method == "paired"
    why, = config.fallbacks
    assert why.startswith("steps interleaved across two processes (lockstep), not steps in one process: ")
    assert f"the changed variable is {variable!r}" in why
    assert "10 rounds of 30 steps" in config.text()


@pytest.mark.parametrize("variable", ["steps", "device"])
def test_where_lockstep_cannot_run_such_a_change_runs_whole_attempts(variable):
    """In-process, no child per arm can run: whole attempts, saying why."""
    config = configure("latency", "improvement", variable, CPU, steps_given=False, supervised=False)
    assert config.interleave == "attempts"
    why, = config.fallbacks
    assert why.startswith("whole attempts interleaved, not steps in one process: ") and f"the changed variable is {variable!r}" in why
    assert "10 attempts per arm of 30 steps" in config.text()


def test_memory_on_cuda_runs_lockstep_and_a_runner_without_step_interleaving_whole_attempts():
    cuda = configure("memory", "improvement", "checkpoint", {**CPU, "device": "cuda"}, steps_given=True)
    assert cuda.interleave == "lockstep" and "one caching allocator" in cuda.fallbacks[-1]

    class Plain(AttemptRunner):  # runs attempts, never step-interleaved pairs
        def run(self, spec, timeout_s):  # pragma: no cover - never called
            raise AssertionError

    plain = configure("latency", "improvement", "checkpoint", CPU, runner=Plain(), steps_given=True)
    assert plain.interleave == "attempts" and "Plain does not" in plain.fallbacks[0]


@pytest.mark.slow
def test_compare_with_its_defaults_says_its_configuration(sqlite_uri):
    """Only the sizes shrunk: the comparison is step-interleaved, paired on p10, on one thread, and says so."""
    result = harness.compare("tinylm", {"input_shape": "2,16"}, {"checkpoint": True}, attempts=6,
                             experiment_name="configured", progress=False, min_valid_runs=3)
    assert (result["method_asked"], result["latency"]) == ("paired", "p10")
    assert result["configuration"].startswith("paired method on p10, steps interleaved, 1 torch thread, 6 rounds "
                                              "of 30 steps; defaults: method, latency, interleave, threads, steps")
    assert f"- configuration: {result['configuration']}" in result["report"]
    client = MlflowClient()
    comparison = client.get_run(result["comparison_run_id"])
    assert comparison.data.tags[TAG.CONFIGURATION] == result["configuration"]
    assert comparison.data.tags[TAG.INTERLEAVE] == "steps"
    attempts = [client.get_run(run_id) for run_id in result["run_ids"]]
    assert len(attempts) == 12
    assert {a.data.params["steps"] for a in attempts} == {"30"}
    assert {a.data.tags[TAG.ENV_PREFIX + "torch_threads"] for a in attempts} == {"1"}
    assert sorted(int(a.data.tags[TAG.PAIR]) for a in attempts) == sorted(list(range(6)) * 2)
    assert "seed" in result and "decision" in result["seed"]  # the specification's verdict beside it
    assert (comparison.data.tags[TAG.CONFIGURED_METHOD], comparison.data.tags[TAG.CONFIGURED_LATENCY]) == (
        "paired", "p10")
    # judged again without saying how: as the comparison was (not by evaluate's seed on raw)
    again = pg.evaluate_group(result["group"], experiment_name="configured", min_valid_runs=3)
    assert (again["method_asked"], again["latency"], again["decision"]) == ("paired", "p10", result["decision"])
    assert again["decision_key"] == result["decision_key"]  # the same judgement: the same decision run
    seed = pg.evaluate_group(result["group"], experiment_name="configured", min_valid_runs=3, method="seed")
    assert (seed["method_asked"], seed["latency"]) == ("seed", "p10")  # what is given is kept


def _invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_empty_values_leave_it_to_the_configuration(sqlite_uri):
    """The MLproject passes ``--attempts=`` for 'the default'; a bad value is still refused."""
    refused = _invoke("compare", "--change", "checkpoint=true", "--attempts=", "--method=", "--latency=",
                      "--interleave=", "--threads=", "--steps=", "--set", "input_shape=2,16", "--attempts", "2")
    # the last --attempts wins: 2 paired rounds can never accept, refused before anything runs
    assert refused.exit_code == 2 and "nothing was run or logged" in refused.output
    bad = _invoke("compare", "--change", "checkpoint=true", "--interleave=sideways")
    assert bad.exit_code == 2 and "sideways" in bad.output


def test_help_says_the_defaults():
    text = " ".join(_invoke("compare", "--help").output.split())
    assert "[default: paired where it judges the objective (latency), else seed" in text
    assert "[default: p10; raw with --method seed]" in text
    assert "[default: 10; 5 with --method seed]" in text and "[default: 30; 10 with --method seed]" in text
    assert "torch threads in every attempt. [default: 1]" in text
    evaluate = " ".join(_invoke("evaluate", "--help").output.split())
    assert "[default: the method the group's comparison was run with, else seed]" in evaluate
    assert "[default: the latency the group's comparison was run with, else raw]" in evaluate
