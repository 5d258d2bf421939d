"""One decision contract: every reader takes the deciding method's figures from ``Decision.deciding``.

The symptoms this guards against: ``decisions()`` headlining the robust method's ratio and p-value
for a decision the paired method made; a plugin's method (its own figure and check names) silently
exempted from a suite's error control, shown with no ratio in the pytest table and the frame.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from mlflow import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.rules import (ArmSummary, Check, Deciding, Decision, Figure, Method, Policy, entry_evidence,
                                   suite_gate)
from mlflow_perfgate.errors import InputError, PolicyError
from mlflow_perfgate.rules._checks import verdict_of
from mlflow_perfgate.rules._regression import SEED
from mlflow_perfgate.rules._robust import robust_boundary_p_value
from mlflow_perfgate.tracking import TAG

from helpers import CANDIDATE, CONDITIONS


def _paired_series(group: str, ratio: float, rounds: int = 10, seed: int = 3) -> None:
    """ABBA rounds whose within-round ratio is ``ratio`` while a drift moves both arms together: the
    paired method sees the change, the unpaired one much less sharply."""
    rng = np.random.default_rng(seed)
    for round_ in range(rounds):
        level = 100 * (1 + 0.3 * math.sin(round_))  # a drift shared within the round
        noise = rng.normal(0, 0.003, 2)
        pg.log_attempt(group, "baseline", CONDITIONS, latency_ms=level * (1 + noise[0]), quality=0.9, pair=round_)
        pg.log_attempt(group, "candidate", CANDIDATE, latency_ms=level * ratio * (1 + noise[1]), quality=0.9,
                       pair=round_)


def test_the_frame_headlines_the_deciding_method_and_prefixes_the_others(sqlite_uri):
    _paired_series("paired-headline", 0.93)
    result = pg.evaluate_group("paired-headline", method="paired")
    assert result["method"] == "paired"
    deciding = result["deciding"]
    assert deciding["ratio"] == pytest.approx(result["ratio_estimate"])  # the paired method's own figure
    assert deciding["ratio"] != pytest.approx(result["robust"]["ratio_estimate"], rel=1e-6)
    row = pg.decisions(group="paired-headline").iloc[0]
    assert row["method"] == "paired"
    assert row["ratio_estimate"] == pytest.approx(deciding["ratio"], rel=1e-12)
    assert row["ratio_ci_low"] == pytest.approx(deciding["ratio_ci_low"], rel=1e-12)
    assert row["ratio_ci_high"] == pytest.approx(deciding["ratio_ci_high"], rel=1e-12)
    assert row["p_value"] == pytest.approx(result["p_value"], rel=1e-12)  # the signed-rank test's
    assert row["p_value_method"].startswith("Wilcoxon signed-rank")
    assert row["improvement"] == pytest.approx(1 - deciding["ratio"], rel=1e-12)
    assert row["boundary"] == pytest.approx(0.95)
    # the other methods keep their prefix
    assert row["robust_ratio_estimate"] == pytest.approx(result["robust"]["ratio_estimate"], rel=1e-12)
    assert row["robust_p_value"] == pytest.approx(result["robust"]["p_value"], rel=1e-12)
    assert row["paired_ratio_estimate"] == pytest.approx(deciding["ratio"], rel=1e-12)
    # the report says the same estimate
    assert f"ratio candidate/baseline {deciding['ratio']:.3f}" in result["report"]


def test_decisions_of_the_earlier_release_are_read_with_their_meaning(sqlite_uri):
    """A decision run written before the headline existed: its unprefixed figures were the robust
    method's, the paired method's carried its prefix."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name("Default").experiment_id
    run = client.create_run(experiment, tags={TAG.KIND: "decision", TAG.DECISION: "accept", TAG.GROUP: "old",
                                              TAG.METHOD: "paired", TAG.MODE: "improvement", TAG.REASON: "x"})
    for name, value in {"ratio_estimate": 0.97, "ratio_ci_low": 0.9, "ratio_ci_high": 1.04, "p_value": 0.26,
                        "paired_ratio_estimate": 0.931, "paired_ratio_ci_low": 0.92, "paired_ratio_ci_high": 0.94,
                        "paired_p_value": 0.001, "observed_improvement": 0.191,
                        "required_improvement": 0.05}.items():
        client.log_metric(run.info.run_id, name, value)
    client.log_param(run.info.run_id, "perfgate.p_value_method", "exact")
    client.set_terminated(run.info.run_id)
    row = pg.decisions(group="old").iloc[0]
    assert (row["ratio_estimate"], row["ratio_ci_low"], row["ratio_ci_high"], row["p_value"]) == \
        pytest.approx((0.931, 0.92, 0.94, 0.001))
    assert row["improvement"] == pytest.approx(0.069)
    assert row["boundary"] == pytest.approx(0.95)
    assert (row["robust_ratio_estimate"], row["robust_p_value"]) == pytest.approx((0.97, 0.26))
    assert row["p_value_method"] == "exact"


# --- a plugin's method with its own figures and checks -----------------------------------------------


def _trim_rule(b, c, policy, objective, *, look=None, max_looks=None, **extra):
    """A toy method with names of its own: the ratio of 20%-trimmed means, its check ``trim_ok``, the robust
    method's boundary test as the p-value its failure rests on."""
    from scipy.stats import trim_mean

    del look, max_looks, extra
    ratio = float(trim_mean(c.latencies, 0.2) / trim_mean(b.latencies, 0.2))
    bar = 1 + policy.margin if policy.mode == "non_regression" else 1 - policy.min_improvement
    p = robust_boundary_p_value(b, c, bar)
    passed = False if p < policy.alpha else (True if ratio <= bar else None)
    check = Check.build("trim_ok", passed, {"ratio": ratio, "p": p}, lambda f: f"trimmed ratio {f['ratio']:.3f}")
    verdict, reason = verdict_of([check])
    return Decision(verdict, reason, b, c, (check,), figures={"trim_ratio": ratio, "trim_p": p}, method="trim",
                    mode=policy.mode, deciding=Deciding(ratio=ratio, boundary=bar, boundary_p_value=p,
                                                        tests={"trim_ok": p}))


TRIM = Method("trim", _trim_rule, figures=(Figure("trim_ratio", "trimmed ratio"), Figure("trim_p", "trim p")),
              help="a toy method with its own figure and check names")


@pytest.fixture
def trim_method():
    pg.register_method(TRIM)
    yield TRIM
    pg.unregister_method("trim")


def _summaries(base, cand):
    return ArmSummary.from_runs([{"ok": True, "latency_ms": v, "quality": 1.0} for v in base]), \
        ArmSummary.from_runs([{"ok": True, "latency_ms": v, "quality": 1.0} for v in cand])


def test_a_plugins_marginal_reject_is_withheld_by_the_suites_error_control(trim_method):
    rng = np.random.default_rng(0)
    policy = Policy(method="trim", mode="non_regression", margin=0.0, alpha=0.05)
    evidence, own = [], []
    for index in range(6):  # identical arms
        b, c = _summaries(100 * np.exp(rng.normal(0, 0.05, 10)), 100 * np.exp(rng.normal(0, 0.05, 10)))
        decision = trim_method.rule(b, c, policy, pg.rules.OBJECTIVES["latency"])
        own.append(decision)
        evidence.append(entry_evidence(f"e{index}", decision))
    assert all(set(item.tests) == {"trim_ok"} for item in evidence)  # its own check, found without a list
    marginal = [i for i, d in enumerate(own) if d.verdict == "reject"]
    gate = suite_gate(evidence, alpha=0.05)
    # a reject whose p-value does not survive Holm across the 6 entries is withheld, never passed through
    for index in marginal:
        entry = gate.entries[index]
        if not entry.significant["trim_ok"]:
            assert entry.verdict == "rerun" and entry.withheld_checks == ("trim_ok",)
    # and one forced marginal reject is withheld: p = 0.03 alone rejects at 0.05, not across 6 tests
    forced = dataclasses.replace(own[0], verdict="reject", reason="declared_thresholds_checked",
                                 checks=(Check("trim_ok", False, "FAILED: forced"),),
                                 deciding=Deciding(ratio=1.02, boundary=1.0, tests={"trim_ok": 0.03}))
    gate = suite_gate([entry_evidence("forced", forced), *evidence[1:]], alpha=0.05)
    assert gate.entries[0].own_verdict == "reject" and gate.entries[0].verdict == "rerun"
    assert gate.entries[0].reason == "not_significant_in_suite"
    assert gate.entries[0].to_dict()["deciding"]["ratio"] == pytest.approx(1.02)


def test_a_method_whose_decisions_give_no_p_value_is_refused_by_a_suite(trim_method):
    b, c = _summaries([100, 101, 99, 100, 102], [100, 99, 101, 100, 98])
    decision = trim_method.rule(b, c, Policy(method="trim"), pg.rules.OBJECTIVES["latency"])
    bare = dataclasses.replace(decision, deciding=None)
    with pytest.raises(PolicyError, match="trim method, whose decisions give no test p-value"):
        entry_evidence("bare", bare)
    seed = SEED.rule(b, c, Policy(), pg.rules.OBJECTIVES["latency"])
    assert seed.deciding.ratio == pytest.approx(c.median_ms / b.median_ms) and not seed.deciding.tests
    with pytest.raises(PolicyError, match="seed method"):
        entry_evidence("seed", seed)


def test_a_plugins_decision_run_and_frame_carry_its_deciding_figures(sqlite_uri, trim_method):
    _paired_series("trim-run", 0.9)
    result = pg.evaluate_group("trim-run", method="trim")
    assert result["method"] == "trim" and result["deciding"]["tests"].keys() == {"trim_ok"}
    row = pg.decisions(group="trim-run").iloc[0]
    assert row["ratio_estimate"] == pytest.approx(result["trim_ratio"], rel=1e-12)
    assert row["improvement"] == pytest.approx(1 - result["trim_ratio"], rel=1e-12)
    assert row["boundary_p_value"] == pytest.approx(result["trim_p"], rel=1e-12)
    assert row["trim_ratio"] == pytest.approx(result["trim_ratio"], rel=1e-12)  # its own figure, its own name
    assert math.isnan(row["p_value"])  # it names no test of its own
    assert f"ratio candidate/baseline {result['trim_ratio']:.3f}" in result["report"]


def test_deciding_figures_are_plain_and_checked():
    made = Deciding(ratio=np.float64(0.9), ratio_ci_low=np.float32(0.8), confidence=np.float64(0.9),
                    tests={"x": np.float64(0.2)})
    assert type(made.ratio) is float and type(made.tests["x"]) is float and made.improvement == pytest.approx(0.1)
    assert Deciding.from_dict(made.to_dict()) == made
    with pytest.raises(InputError, match="ratio must be a finite ratio"):
        Deciding(ratio=-1.0)
    with pytest.raises(InputError, match="p-value"):
        Deciding(tests={"x": 1.5})
    with pytest.raises(InputError, match="p_value"):
        Deciding(p_value=np.nan)


def test_suite_decisions_are_queryable_beside_the_comparisons(sqlite_uri):
    from mlflow_perfgate.tracking import SuiteItem, evaluate_suite
    from mlflow_perfgate.tracking._decision_frame import frame_of
    from mlflow_perfgate.tracking._queries import mlflow_decision_records

    _paired_series("s-fast", 0.9, seed=1)
    _paired_series("s-same", 1.0, seed=2)
    policy = Policy(method="paired")
    summary = evaluate_suite("nightly", [SuiteItem("fast", "s-fast", policy), SuiteItem("same", "s-same", policy)])
    suites = pg.decisions(kind="suite")
    assert len(suites) == 1
    row = suites.iloc[0]
    assert (row["suite"], row["decision"], row["entries"]) == ("nightly", summary["decision"], 2)
    assert row["entries_accept"] + row["entries_reject"] + row["entries_rerun"] == 2
    assert (row["alpha"], row["control"], row["tests"]) == (0.05, "holm", 4)
    assert row["run_id"] == summary["suite_run_id"]
    # the same rows through MLflow's client as read straight from the SQLite file
    through_mlflow = frame_of(mlflow_decision_records(None, None, None, "suite"), kind="suite")
    assert through_mlflow.drop(columns="start_time").equals(suites.drop(columns="start_time"))
    assert pg.decisions(kind="suite", suite="other").empty
    assert len(pg.decisions(suite="nightly")) == 2  # its entries' decisions, as before
    entries = pg.decisions(suite="nightly").set_index("suite_entry")
    assert entries.loc["fast", "ratio_estimate"] == pytest.approx(summary["entries"][0]["deciding"]["ratio"])
    with pytest.raises(InputError, match="a suite run has none"):
        pg.decisions(kind="suite", group="s-fast")
    with pytest.raises(InputError, match="kind must be one of"):
        pg.decisions(kind="suites")


def test_the_headline_is_the_typical_step_and_says_when_the_judged_figure_moved_apart():
    """Under contention a short step fits in a scheduler slice and a long one does not: the p10 step
    can move twice as far as the typical step. The number users quote is the typical step's."""
    from mlflow_perfgate.rules import judge
    from mlflow_perfgate.tracking._report import decision_summary, estimate_text

    rng = np.random.default_rng(5)

    def arm(typical: float, p10: float) -> list[dict]:
        return [{"ok": True, "quality": 1.0, "pair": r, "latency_ms": typical * (1 + rng.normal(0, 0.002)),
                 "step_p10_ms": p10 * (1 + rng.normal(0, 0.002)), "step_mean_ms": typical * 1.01,
                 "step_p95_ms": typical * 1.1} for r in range(10)]

    decision = judge(arm(100, 90), arm(92, 60), Policy(method="paired", latency="p10"))
    deciding = decision.deciding
    assert deciding.ratio == pytest.approx(60 / 90, rel=0.01)  # the judged p10 step
    assert deciding.typical_ratio == pytest.approx(0.92, rel=0.01)
    assert deciding.mean_ratio == pytest.approx(0.92, rel=0.01)
    assert deciding.improvement == pytest.approx(0.08, abs=0.01)  # the typical step's, not the p10's 33%
    assert deciding.judged_apart
    result = {**decision.to_dict(), "latency": "p10", "objective": "latency"}
    text = estimate_text(result)
    assert text.startswith("the typical step (median of the steps): an improvement of 8.")
    assert "judged on the 10th-percentile step" in text and "quote the typical step" in text
    assert decision_summary(result)[1].startswith("estimate (paired): the typical step")
    # where both figures agree nothing is said about them
    agree = judge(arm(100, 90), arm(92, 82.8), Policy(method="paired", latency="p10")).deciding
    assert not agree.judged_apart
    # a slowdown beyond 2x reads as one
    slow = judge(arm(100, 90), arm(460, 414), Policy(method="paired", latency="p10"))
    assert "4.61x slower" in estimate_text({**slow.to_dict(), "latency": "p10", "objective": "latency"})


def test_an_improvement_mode_reject_says_what_was_not_shown_and_what_to_ask_next():
    from mlflow_perfgate.rules import judge
    from mlflow_perfgate.tracking._report import decision_markdown, decision_summary

    rng = np.random.default_rng(9)

    def arm(level: float) -> list[dict]:
        return [{"ok": True, "quality": 1.0, "pair": r, "latency_ms": level * (1 + rng.normal(0, 0.002))}
                for r in range(10)]

    def result_of(ratio: float) -> dict:
        decision = judge(arm(100), arm(100 * ratio), Policy(method="paired"))
        return {**decision.to_dict(), "failed_checks": decision.failed_checks, "group": "g",
                "thresholds": {"min_improvement": 0.05}}

    same = result_of(1.0)  # not faster, not slower
    assert same["decision"] == "reject" and same["failed_checks"] == ["improvement_ok"]
    lines = decision_summary(same, ["mlflow-perfgate", "compare", "--change", "x=1", "--group", "g1"])
    assert lines[0] == "decision: REJECT: the candidate is not shown to be at least 5% faster (nor shown slower)"
    assert lines[-1] == ("next: it is not shown faster; to ask whether it is no slower (CI's question): "
                         "mlflow-perfgate compare --change x=1 --mode non_regression")
    assert decision_markdown(same).startswith("## REJECT: the candidate is not shown to be at least 5% faster")
    slower = result_of(1.02)  # the interval lies above 1: slower, said so
    assert slower["failed_checks"] == ["improvement_ok"]
    assert decision_summary(slower)[0] == \
        "decision: REJECT: the candidate is slower (its interval lies above 1), not at least 5% faster"
    assert not any(line.startswith("next:") for line in decision_summary(slower))
    much = result_of(1.3)  # more than the main check failed: each named
    assert decision_summary(much)[0].startswith("decision: REJECT: the candidate fails 2 declared checks: ")
    assert "p95_ok" in decision_summary(much)[0]


def test_links_are_built_from_the_tracking_servers_own_address_and_none_for_a_local_store():
    from mlflow_perfgate.tracking._client import run_link
    from mlflow_perfgate.tracking._views import view_link

    assert run_link("http://tracker.internal:8080/", "3", "abc") == "http://tracker.internal:8080/#/experiments/3/runs/abc"
    assert run_link("https://user:secret@host/mlflow", "3", "abc") == "https://host/mlflow/#/experiments/3/runs/abc"
    local = run_link("sqlite:////tmp/x y/mlflow.db", "0", "abc")
    assert local == ("mlflow ui --backend-store-uri 'sqlite:////tmp/x y/mlflow.db', then open the address it prints + "
                     "#/experiments/0/runs/abc")
    assert "127.0.0.1" not in local and "http" not in local  # its port is the user's: no address of ours
    assert view_link("http://h:1", "2", "k") == "http://h:1/#/experiments/2/runs?viewStateShareKey=k"


def test_a_seed_reject_of_a_slowdown_says_slower_and_empty_frames_print_as_csv(sqlite_uri, capsys):
    from mlflow_perfgate.cli import cli
    from mlflow_perfgate.rules import judge
    from mlflow_perfgate.tracking._report import decision_summary

    slow = judge([{"ok": True, "latency_ms": v, "quality": 1.0} for v in (100, 101, 99, 100, 102)],
                 [{"ok": True, "latency_ms": v, "quality": 1.0} for v in (141, 142, 140, 141, 143)],
                 Policy(method="seed", maximum_p95_ratio=2.0))
    result = {**slow.to_dict(), "failed_checks": slow.failed_checks, "group": "g"}
    assert slow.failed_checks == ["improvement_ok"]
    lines = decision_summary(result)
    assert lines[0] == "decision: REJECT: the candidate is slower (its median above the baseline's), not at least 5% faster"
    assert not any(line.startswith("next:") for line in lines)  # no "no slower?" for a change shown slower
    for argv in (["decisions", "--group", "none", "--format", "csv"], ["decisions", "--kind", "suite", "--format", "csv"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv, prog_name="mlflow-perfgate")
        assert exit_.value.code in (0, None)
        header = capsys.readouterr().out.splitlines()
        assert len(header) == 1 and header[0].split(",")[:2] in (["group", "decision"], ["suite", "decision"])
    with pytest.raises(InputError, match="lies above its high end"):
        Deciding(ratio=1.0, ratio_ci_low=1.2, ratio_ci_high=1.1)
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        Deciding(confidence=1.0)
