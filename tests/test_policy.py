"""The Policy: defaults written once, validated on construction, and read by the CLI and MLproject."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mlflow_perfgate.cli import cli
from mlflow_perfgate.errors import PerfgateError, PolicyError
from mlflow_perfgate.rules import DEFAULT_THRESHOLDS, Policy
from mlflow_perfgate.rules._policy import POLICY_SETTINGS, SPEC_THRESHOLDS
from mlflow_perfgate.rules._registry import threshold_settings

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_the_specifications_and_written_once():
    policy = Policy()
    assert policy.spec_thresholds() == dict(DEFAULT_THRESHOLDS) == {
        "min_valid_runs": 5, "min_improvement": 0.05, "quality_tolerance": 0.01, "maximum_failure_rate": 0.0,
        "maximum_p95_ratio": 1.05}
    assert (policy.method, policy.mode, policy.objective) == ("seed", "improvement", "latency")
    assert (policy.margin, policy.alpha, policy.confidence) == (0.05, 0.02, 0.90)
    assert policy.min_memory_reduction == 0.10 and policy.maximum_latency_cost == 0.30
    assert Policy(min_valid_runs=None).min_valid_runs == 5  # None means the default


@pytest.mark.parametrize("kwargs, needle", [
    (dict(min_valid_runs=0), "min_valid_runs must be a positive integer, got 0"),
    (dict(min_valid_runs=True), "min_valid_runs must be a positive integer"),
    (dict(min_improvement=1.0), "min_improvement must be in the range [0, 1), got 1.0"),
    (dict(maximum_failure_rate=1.5), "maximum_failure_rate must be in the range [0, 1]"),
    (dict(maximum_p95_ratio=0.9), "maximum_p95_ratio must be >= 1"),
    (dict(quality_tolerance=float("nan")), "quality_tolerance must be finite"),
    (dict(margin=-0.1), "margin must be >= 0"),
    (dict(alpha=1.0), "alpha must be in the range (0, 1)"),
    (dict(confidence=0), "confidence must be in the range (0, 1)"),
    (dict(min_memory_reduction=1), "min_memory_reduction must be in the range [0, 1)"),
    (dict(method="magic"), "method must be one of ['seed', 'robust', 'paired']"),
    (dict(mode="sideways"), "mode must be one of"),
    (dict(objective="speed"), "objective must be one of ['latency', 'memory', 'throughput']"),
    (dict(objective="memory", method="robust"), "the memory objective is judged by the seed method"),
    (dict(objective="memory", mode="non_regression"), "in improvement mode"),
    (dict(warmup_steps=3), "unknown thresholds ['warmup_steps']"),
])
def test_validated_on_construction_naming_the_field_and_range(kwargs, needle):
    with pytest.raises(PolicyError) as info:
        Policy(**kwargs)
    assert needle in str(info.value)
    assert isinstance(info.value, PerfgateError) and isinstance(info.value, ValueError)


def test_a_wrong_type_names_the_field():
    with pytest.raises(TypeError, match="min_improvement must be a real number"):
        Policy(min_improvement="0.05")


def test_immutable_comparable_and_replaceable():
    policy = Policy(method="robust", min_valid_runs=10)
    with pytest.raises(AttributeError, match="immutable"):
        policy.alpha = 0.5
    assert policy == Policy(method="robust", min_valid_runs=10) and hash(policy) == hash(Policy(**policy.options()))
    other = policy.replace(mode="non_regression", margin=0.1)
    assert (other.mode, other.margin, other.min_valid_runs) == ("non_regression", 0.1, 10)
    assert policy.mode == "improvement"
    with pytest.raises(PolicyError):
        policy.replace(alpha=2)
    assert "min_valid_runs=10" in repr(policy)
    assert Policy(objective="memory").objective_thresholds() == {
        **DEFAULT_THRESHOLDS, "min_memory_reduction": 0.10, "maximum_latency_cost": 0.30}


def _mlproject_defaults() -> list[tuple[str, str, object]]:
    project = yaml.safe_load((REPO / "MLproject").read_text())
    return [(entry, name, spec["default"]) for entry, point in project["entry_points"].items()
            for name, spec in point.get("parameters", {}).items() if isinstance(spec, dict) and "default" in spec]


#: The entry points that run their attempts: what they leave empty is the command's configuration (harness.configure).
CONFIGURED = {"main", "compare"}
CONFIGURED_NAMES = {"method", "latency", "interleave", "attempts", "steps", "threads"}


def test_mlproject_defaults_agree_with_the_policy():
    defaults = Policy().options()
    checked = 0
    for entry, name, value in _mlproject_defaults():
        if (entry in CONFIGURED and name in CONFIGURED_NAMES) or (entry == "evaluate" and name in ("method", "latency")):
            # left to the comparison's configuration: the recommended one, falling back per comparison
            assert value == "", f"MLproject {entry}.{name} = {value!r}: leave it to the configuration ('')"
            checked += 1
        elif name in defaults:
            assert value == defaults[name], f"MLproject {entry}.{name} = {value!r}, Policy says {defaults[name]!r}"
            checked += 1
    assert checked >= 20  # the thresholds of evaluate, main's, mode of compare, the configured ones of both, ...


def test_cli_options_and_help_come_from_the_settings():
    runner = CliRunner()
    for command in ("evaluate", "compare", "pipeline"):
        text = runner.invoke(cli, [command, "--help"], terminal_width=200).output
        for setting in (*SPEC_THRESHOLDS, *POLICY_SETTINGS, *threshold_settings().values()):
            option = f"--{setting.name.replace('_', '-')}"
            assert option in text, (command, option)
        assert "in the range [0, 1) [0.05]" in " ".join(text.split())  # min_improvement's range and default
        assert "seed: the specification's rule, exact" in " ".join(text.split())


def test_latency_is_a_decision_option_of_every_deciding_command():
    from mlflow_perfgate.cli import collect_policy

    runner = CliRunner()
    for command in ("evaluate", "compare", "pipeline"):
        text = " ".join(runner.invoke(cli, [command, "--help"], terminal_width=200).output.split())
        default = ("[default: the latency the group's comparison was run with, else raw]" if command == "evaluate"
                   else "[default: p10; raw with --method seed]")
        assert "--latency [raw|uncontended|fastest|p10]" in text and default in text, command
    refused = runner.invoke(cli, ["evaluate", "--group", "g", "--latency", "quiet"])
    assert refused.exit_code == 2 and "'quiet' is not one of 'raw', 'uncontended', 'fastest', 'p10'" in refused.output
    collected = collect_policy({"latency": "uncontended", "method": "robust", "mode": None, "env_mismatch": "warn"})
    policy = collected.pop("policy")
    assert collected == {"env_mismatch": "warn"}
    # one Policy from the command line: what was typed is its given; the rest is left to be configured
    assert (policy.latency, policy.method, policy.given) == ("uncontended", "robust", {"latency", "method"})


def test_a_policy_knows_what_it_was_given_and_a_reset_option_is_no_longer_given():
    policy = Policy(mode="non_regression", margin=0.2)
    assert policy.given == {"mode", "margin"} and Policy().given == frozenset()
    reset = policy.replace(margin=None)
    assert (reset.margin, reset.given) == (0.05, {"mode"})  # back to its default: filled downstream again
    assert policy.settled().given == set(policy.options()) and policy.settled() == policy
    for option in ("margin", "alpha", "confidence"):
        with pytest.raises(PolicyError, match=f"{option} must be a number, got True"):
            Policy(**{option: True})


def test_evaluate_group_refuses_a_policy_that_is_no_policy_before_reading_a_store():
    from mlflow_perfgate.tracking import evaluate_group

    for wrong in ({"method": "robust"}, "robust", 3):
        with pytest.raises(PolicyError, match=f"policy must be a mlflow_perfgate.Policy, got {type(wrong).__name__}"):
            evaluate_group("g", policy=wrong, experiment_name="never-created")
