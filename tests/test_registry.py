"""A method and an objective are one registry entry each: a toy of each, added here and nowhere else.

Everything downstream is derived from the entries: the command line's choices (and, through
``--threshold``, the new objective's threshold), the evaluator's records (the objective's
metric reaches the rule), the decision run's metric names, the columns of ``decisions()`` and
the report's rows.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main
from mlflow_perfgate.rules import Check, Decision, Figure, Method, Objective, Setting

from helpers import CANDIDATE, CONDITIONS


def _energy_checks(b, c, policy):
    base, cand = b.figures["median_energy_j"], c.figures["median_energy_j"]
    saving = (base - cand) / base
    check = Check.build(
        "energy_ok", saving >= policy.min_energy_saving,
        {"saving": saving, "threshold": policy.min_energy_saving, "candidate": cand, "baseline": base},
        lambda f: (f"candidate median energy {f['candidate']:g} J against baseline {f['baseline']:g} J saves "
                   f"{f['saving'] * 100:.1f}%; required min_energy_saving {f['threshold'] * 100:.1f}%"))
    return [check], {"energy_saving": saving}


ENERGY = Objective(
    "energy", metric="energy_j", direction="lower", unit="J", checks=_energy_checks,
    thresholds=(Setting("min_energy_saving", 0.10, "Energy objective: least saving", low=0, high=1,
                        high_open=True),),
    arm_figures=(Figure("median_energy_j", "median energy", " J"),),
    figures=(Figure("energy_saving", "energy saving"),),
    headlines={"improvement": "ACCEPT: the candidate uses less energy, no worse in quality, and no less reliable"},
    help="joules per step, lower is better",
)


def _coin_rule(b, c, policy, objective, *, look=None, max_looks=None):
    ratio = c.median_ms / b.median_ms
    check = Check.build("faster_ok", ratio < 1, {"ratio": ratio}, lambda f: f"median ratio {f['ratio']:.3f} below 1")
    return Decision("accept" if ratio < 1 else "reject", "declared_thresholds_checked", b, c, (check,),
                    figures={"speed_ratio": ratio}, method="coin", mode=policy.mode, objective=objective.name)


COIN = Method("coin", _coin_rule, figures=(Figure("speed_ratio", "speed ratio"),), objectives=("latency",),
              help="a toy: accept when the candidate's median is lower")


@pytest.fixture
def toys():
    pg.register_objective(ENERGY)
    pg.register_method(COIN)
    try:
        yield
    finally:
        pg.unregister_method("coin")
        pg.unregister_objective("energy")


def _log(group, baseline_energy, candidate_energy):
    for index in range(5):
        pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=100 + index, quality=0.9,
                       metrics={"energy_j": baseline_energy + index})
        pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=90 + index, quality=0.9,
                       metrics={"energy_j": candidate_energy + index})


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_a_toy_objective_flows_from_cli_to_decisions_and_report(sqlite_uri, capsys, toys):
    _log("energy", 50.0, 30.0)
    code, out, err = _run(capsys, "evaluate", "--group", "energy", "--objective", "energy",
                          "--threshold", "min_energy_saving=0.2", "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["decision"] == "accept" and result["objective"] == "energy"
    assert result["energy_ok"] is True and result["energy_saving"] == pytest.approx(20 / 52)
    assert result["thresholds"]["min_energy_saving"] == 0.2
    assert result["baseline"]["median_energy_j"] == 52.0  # the evaluator's records carried the metric

    run = MlflowClient().get_run(result["decision_run_id"])
    assert run.data.metrics["baseline_median_energy_j"] == 52.0
    assert run.data.metrics["candidate_median_energy_j"] == 32.0
    assert run.data.metrics["energy_saving"] == pytest.approx(20 / 52)
    assert run.data.params["perfgate.min_energy_saving"] == "0.2"
    assert run.data.tags["mlflow.note.content"].startswith("## ACCEPT: the candidate uses less energy")

    frame = pg.decisions(group="energy")
    assert {"baseline_median_energy_j", "candidate_median_energy_j", "energy_saving"} <= set(frame.columns)
    assert frame.iloc[0]["energy_saving"] == pytest.approx(20 / 52)

    code, out, _ = _run(capsys, "report", "--group", "energy")
    assert code == 0 and "| median energy | 52 J | 32 J |" in out
    assert "`energy_ok` ok: candidate median energy 32 J" in out


def test_a_toy_objective_rejects_below_its_threshold(sqlite_uri, capsys, toys):
    _log("energy-small", 50.0, 48.0)
    code, out, _ = _run(capsys, "evaluate", "--group", "energy-small", "--objective", "energy", "--format", "json")
    result = json.loads(out)
    assert code == 1 and result["failed_checks"] == ["energy_ok"]


def test_a_toy_method_is_a_choice_and_its_figures_are_logged(sqlite_uri, capsys, toys):
    _log("coin", 50.0, 30.0)
    code, out, err = _run(capsys, "evaluate", "--group", "coin", "--method", "coin", "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["method"] == "coin" and result["faster_ok"] is True
    # the other methods that judge latency still say what they would have decided
    assert {"seed", "robust", "coin"} <= set(result) and result["coin"]["speed_ratio"] == result["speed_ratio"]
    run = MlflowClient().get_run(result["decision_run_id"])
    assert run.data.metrics["speed_ratio"] == pytest.approx(result["speed_ratio"])
    assert run.data.tags["perfgate.coin_decision"] == "accept"
    assert run.data.tags["perfgate.method"] == "coin"
    assert "speed_ratio" in pg.decisions(group="coin").columns
    code, out, _ = _run(capsys, "report", "--group", "coin")
    assert "- coin (a toy: accept when the candidate's median is lower): `accept`" in out


def test_without_the_toys_the_choices_and_columns_are_the_built_ins(sqlite_uri, capsys):
    code, _, err = _run(capsys, "evaluate", "--group", "g", "--method", "coin")
    assert code == 2 and "'coin' is not one of" in err
    code, _, err = _run(capsys, "evaluate", "--group", "g", "--threshold", "min_energy_saving=0.2")
    assert code == 2 and "unknown threshold 'min_energy_saving'" in err
    assert "energy_saving" not in pg.decisions().columns
    with pytest.raises(ValueError, match="objective must be one of"):
        pg.Policy(objective="energy")


def test_registering_a_name_twice_is_refused(toys):
    with pytest.raises(ValueError, match="already registered"):
        pg.register_method(Method("coin", _coin_rule))
    with pytest.raises(ValueError, match="cannot be removed"):
        pg.unregister_method("seed")
