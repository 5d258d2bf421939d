"""The suite's error control (rules._suite): adjusted p-values, boundary tests, looks, the gate, and a simulation."""

from __future__ import annotations

import numpy as np
import pytest

from mlflow_perfgate.errors import InputError, PolicyError
from mlflow_perfgate.rules import ArmSummary, Policy, sequential_alpha
from mlflow_perfgate.rules._registry import METHODS, OBJECTIVES
from mlflow_perfgate.rules._suite import (
    EntryEvidence,
    TAIL_SHARE,
    adjusted_p_values,
    boundary_p_value,
    family_weights,
    entry_evidence,
    look_adjusted_p,
    suite_gate,
    suite_verdict,
)


def runs(values, *, pairs=False):
    return [{"ok": True, "latency_ms": float(v), "quality": 1.0, **({"pair": i} if pairs else {})}
            for i, v in enumerate(values)]


# --- adjusted p-values, by hand -------------------------------------------------------------------


def test_holm_and_bh_adjusted_p_values_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005, 0.01, 0.03, 0.04 -> Holm: 4*0.005, 3*0.01, 2*0.03, 1*0.04 = .02, .03, .06, max(.06,.04)
    assert adjusted_p_values(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: m p / rank = .02, .02, .04, .04, then running minimum from the top
    assert adjusted_p_values(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjusted_p_values([], "holm") == []
    assert adjusted_p_values([0.3, 0.9], "holm") == pytest.approx([0.6, 0.9])
    with pytest.raises(PolicyError, match="control must be one of"):
        adjusted_p_values([0.1], "bonferroni")
    with pytest.raises(InputError, match=r"in \[0, 1\]"):
        adjusted_p_values([1.5], "holm")


def test_holm_rejects_at_most_what_bonferroni_and_bh_reject_more():
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = list(rng.uniform(0, 0.2, size=8))
        holm = adjusted_p_values(p, "holm")
        bh = adjusted_p_values(p, "bh")
        assert all(min(1, 8 * raw) >= h - 1e-15 for raw, h in zip(p, holm))  # Holm is no stricter than Bonferroni
        assert all(b <= h + 1e-15 for b, h in zip(bh, holm))  # BH rejects whatever Holm does


# --- the boundary test inverts the entry's interval -------------------------------------------------


@pytest.mark.parametrize("method", ["robust", "paired"])
def test_boundary_p_value_rejects_exactly_where_the_interval_lies_beyond_the_boundary(method):
    rng = np.random.default_rng(11)
    policy = Policy(method=method, mode="non_regression", margin=0.05, min_valid_runs=3)
    rule, objective = METHODS[method].rule, OBJECTIVES["latency"]
    checked = 0
    for trial in range(150):
        n = int(rng.integers(4, 12))
        base = 10 * np.exp(rng.normal(0, 0.05, n))
        cand = 10 * float(rng.choice([1.0, 1.05, 1.1, 1.2])) * np.exp(rng.normal(0, 0.05, n))
        b, c = ArmSummary.from_runs(runs(base, pairs=True)), ArmSummary.from_runs(runs(cand, pairs=True))
        decision = rule(b, c, policy, objective)
        low = decision.figures["ratio_ci_low"]
        if low is None:
            continue
        p = boundary_p_value(b, c, 1.05, method=method)
        tail = (1 - decision.figures["confidence"]) / 2
        assert (p <= tail) == (low > 1.05), (trial, p, low)
        assert (decision.check("no_regression_ok").passed is False) == (p <= tail)
        checked += 1
    assert checked > 100


def test_boundary_p_value_small_cases():
    b, c = ArmSummary.from_runs(runs([10, 10.1, 9.9])), ArmSummary.from_runs(runs([20, 20.2, 19.8]))
    # every candidate/baseline ratio is about 2 > 1.05: U = 0, p = 1 / C(6, 3)
    assert boundary_p_value(b, c, 1.05) == pytest.approx(1 / 20)
    # the boundary above every ratio: U = 9, p = 1
    assert boundary_p_value(b, c, 3.0) == pytest.approx(1.0)
    empty = ArmSummary.from_runs([{"ok": False, "failure": "x"}])
    assert boundary_p_value(empty, c, 1.05) == 1.0
    with pytest.raises(InputError, match="boundary"):
        boundary_p_value(b, c, 0)
    with pytest.raises(PolicyError, match=r"one of \['robust', 'paired'\] for a boundary p-value, got 'seed'"):
        boundary_p_value(b, c, 1.05, method="seed")


# --- repeated looks ---------------------------------------------------------------------------------


def test_look_adjusted_p_inverts_the_spending():
    assert look_adjusted_p(0.013, None, None) == 0.013
    assert look_adjusted_p(0.013, 1, 1) == 0.013
    for look, max_looks, level in [(1, 4, 0.05), (2, 4, 0.01), (4, 4, 0.05), (3, 5, 0.2)]:
        p = sequential_alpha(look, max_looks, level)
        assert look_adjusted_p(p, look, max_looks) == pytest.approx(level, rel=1e-6)
        assert look_adjusted_p(p * 0.5, look, max_looks) < level < look_adjusted_p(min(1.0, p * 2), look, max_looks)
    assert look_adjusted_p(0.9, 2, 4) == 1.0  # no level up to 0.3 rejects it
    assert look_adjusted_p(0.0, 2, 4) == 0.0


def test_the_spending_increment_grows_with_the_level_where_it_is_inverted():
    for max_looks in (2, 3, 5, 10):
        for look in range(1, max_looks + 1):
            levels = [sequential_alpha(look, max_looks, a) for a in np.linspace(1e-4, 0.3, 200)]
            assert all(b > a for a, b in zip(levels, levels[1:])), (look, max_looks)


def test_a_sequential_entry_is_held_to_its_holm_share_spent_at_its_look():
    # two entries at look 2 of 3: the smaller p is held to sequential_alpha(2, 3, alpha w / W), its
    # weight w = 0.9 (the main check's share of its entry's unit) of W = 2 (two entries' units)
    share = 0.05 * (1 - TAIL_SHARE) / 2
    level = sequential_alpha(2, 3, share)
    just_in = EntryEvidence("a", "reject", "declared_thresholds_checked", ("no_regression_ok",),
                            {"no_regression_ok": level * 0.99, "p95_ok": 1.0}, look=2, max_looks=3,
                            mode="non_regression")
    just_out = EntryEvidence("a", "reject", "declared_thresholds_checked", ("no_regression_ok",),
                             {"no_regression_ok": level * 1.01, "p95_ok": 1.0}, look=2, max_looks=3,
                             mode="non_regression")
    other = EntryEvidence("b", "accept", "declared_thresholds_checked", (), {"no_regression_ok": 0.9, "p95_ok": 1.0})
    inside = suite_gate([just_in, other]).entry("a")
    assert inside.verdict == "reject" and inside.level["no_regression_ok"] == pytest.approx(level)
    assert inside.share["no_regression_ok"] == pytest.approx(share)
    outside = suite_gate([just_out, other]).entry("a")
    assert outside.verdict == "rerun" and outside.reason == "not_significant_in_suite"
    assert outside.withheld_checks == ("no_regression_ok",)


def test_weighted_holm_and_bh_by_hand():
    # weights 3 : 1, scaled to mean 1: 1.5 and 0.5; ordered by p / w
    assert adjusted_p_values([0.01, 0.04], "holm", [3, 1]) == pytest.approx([0.01 * 2 / 1.5, 0.04])
    assert adjusted_p_values([0.01, 0.04], "bh", [3, 1]) == pytest.approx([0.01 / 1.5 * 2, 0.04 / 0.5])
    # a small p with a small weight can rank after a larger p with a large weight
    assert adjusted_p_values([0.02, 0.03], "holm", [1, 9]) == pytest.approx([0.03 * 10 / 9, 0.03 * 10 / 9])
    rng = np.random.default_rng(3)
    for _ in range(20):  # equal weights are the unweighted procedures
        p = list(rng.uniform(0, 1, 6))
        for control in ("holm", "bh"):
            assert adjusted_p_values(p, control, [2.5] * 6) == pytest.approx(adjusted_p_values(p, control))
    for weights in ([1], [1, 0], [1, -1], [1, float("nan")]):
        with pytest.raises(InputError, match="weights must be"):
            adjusted_p_values([0.1, 0.2], "holm", weights)


def test_weighted_holm_holds_the_family_wise_error_under_the_null():
    # 40 independent uniform p-values of true nulls, weights 0.9 / 0.1 in pairs: any rejection at 5%
    rng = np.random.default_rng(11)
    weights = [0.9, 0.1] * 20
    hits = sum(min(adjusted_p_values(list(rng.uniform(0, 1, 40)), "holm", weights)) <= 0.05 for _ in range(4000))
    assert hits / 4000 <= 0.05 + 3 * (0.05 * 0.95 / 4000) ** 0.5


def test_each_entry_s_tests_share_one_unit_of_weight():
    both = EntryEvidence("a", "accept", tests={"no_regression_ok": 0.5, "p95_ok": 1.0}, mode="non_regression")
    main_only = EntryEvidence("b", "accept", tests={"no_regression_ok": 0.5}, mode="non_regression")
    tail_only = EntryEvidence("c", "accept", tests={"p95_ok": 0.5})
    outside = EntryEvidence("d", "accept", controlled=False, objective="memory", method="seed")
    assert family_weights([both, main_only, tail_only, outside], 0.1) == [
        (0, "no_regression_ok", pytest.approx(0.9)), (0, "p95_ok", 0.1), (1, "no_regression_ok", 1.0),
        (2, "p95_ok", 1.0)]
    with pytest.raises(PolicyError, match="tail_share must be"):
        suite_gate([both], tail_share=0.6)


def test_the_main_check_s_share_lets_a_clear_paired_window_of_ten_rounds_through():
    """20 entries, one whose 10 ABBA rounds all but one lie beyond the boundary: its signed-rank
    p-value is 2/1024. Weighted (the default), its main check is held to 0.05 x 0.9 / 20 = 0.00225
    and the reject stands; with equal weights (tail_share 0.5) it is held to 0.05 / 40 = 0.00125
    and withheld."""
    slowed = EntryEvidence("slowed", "reject", "declared_thresholds_checked", ("no_regression_ok",),
                           {"no_regression_ok": 2 / 1024, "p95_ok": 1.0}, mode="non_regression")
    others = [_evidence(f"e{i}", "accept", 0.5) for i in range(19)]
    weighted = suite_gate([slowed, *others])
    assert weighted.entry("slowed").verdict == "reject" and weighted.verdict == "reject"
    assert weighted.entry("slowed").share["no_regression_ok"] == pytest.approx(0.05 * 0.9 / 20)
    equal = suite_gate([slowed, *others], tail_share=0.5)
    assert equal.entry("slowed").verdict == "rerun" and equal.entry("slowed").reason == "not_significant_in_suite"
    assert equal.entry("slowed").share["no_regression_ok"] == pytest.approx(0.05 / 40)
    assert weighted.tail_share == 0.1 and weighted.to_dict()["tail_share"] == 0.1


# --- the gate ---------------------------------------------------------------------------------------


def _evidence(name, verdict, p=1.0, failed=(), reason="declared_thresholds_checked", **kwargs):
    return EntryEvidence(name, verdict, reason, failed, {"no_regression_ok": p, "p95_ok": 1.0}, mode="non_regression",
                         **kwargs)


def test_the_gate_withholds_unconfirmed_statistical_rejects_and_keeps_the_others():
    entries = [
        _evidence("clear", "reject", 1e-4, ("no_regression_ok",)),
        _evidence("marginal", "reject", 0.04, ("no_regression_ok",)),
        _evidence("failures", "reject", 0.5, ("failure_rate_ok",)),
        _evidence("fine", "accept", 0.9),
        EntryEvidence("memory", "accept", "declared_thresholds_checked", (), {}, controlled=False, objective="memory",
                      method="seed"),
    ]
    gate = suite_gate(entries, alpha=0.05)
    assert gate.tests == 8  # two tests per controlled entry
    assert gate.entry("clear").verdict == "reject"
    assert gate.entry("marginal").verdict == "rerun" and gate.entry("marginal").own_verdict == "reject"
    assert gate.entry("failures").verdict == "reject" and gate.entry("failures").failed_checks == ("failure_rate_ok",)
    assert gate.entry("fine").verdict == "accept"
    assert gate.entry("memory").verdict == "accept" and not gate.entry("memory").controlled
    assert gate.verdict == "reject" and gate.reason == "entry_rejected"
    assert any("outside the error control" in note for note in gate.notes)
    assert dict(gate.counts) == {"accept": 2, "reject": 2, "rerun": 1, "blocked_by_correctness": 0}
    # the same p-values under BH: the marginal one, second by p / w, still withheld
    # (weights scaled to mean 1: 0.9 x 8 / 4 = 1.8 for a main check; 0.04 / 1.8 x 8 / 2 = 0.089 > 0.05)
    assert gate.entry("marginal").bh["no_regression_ok"] == pytest.approx(0.04 / 1.8 * 8 / 2)
    assert suite_gate(entries, control="bh").entry("marginal").verdict == "rerun"
    assert suite_gate(entries, control="bh", alpha=0.2).entry("marginal").verdict == "reject"
    payload = gate.to_dict()
    assert payload["decision"] == "reject" and len(payload["entries"]) == 5
    assert payload["entries"][1]["withheld_checks"] == ["no_regression_ok"]


def test_the_suite_verdict_precedence():
    assert suite_verdict(["accept", "rerun", "reject", "blocked_by_correctness"]) == ("reject", "entry_rejected")
    assert suite_verdict(["accept", "blocked_by_correctness", "rerun"]) == ("rerun", "entry_undecided")
    assert suite_verdict(["accept", "blocked_by_correctness"]) == ("blocked_by_correctness", "entry_blocked")
    assert suite_verdict(["accept", "accept"]) == ("accept", "every_entry_accepted")


def test_the_gate_refuses_what_it_cannot_control():
    with pytest.raises(PolicyError, match="alpha must be"):
        suite_gate([_evidence("a", "accept")], alpha=0.5)
    with pytest.raises(PolicyError, match="control must be"):
        suite_gate([_evidence("a", "accept")], control="fdr")
    with pytest.raises(InputError, match="at least one entry"):
        suite_gate([])
    with pytest.raises(InputError, match="appears twice"):
        suite_gate([_evidence("a", "accept"), _evidence("a", "accept")])
    with pytest.raises(InputError, match="no test p-value"):
        EntryEvidence("a", "accept")
    with pytest.raises(InputError, match="verdict must be one of"):
        EntryEvidence("a", "maybe", tests={"p95_ok": 1.0})
    decision = METHODS["seed"].rule(ArmSummary.from_runs(runs([10] * 5)), ArmSummary.from_runs(runs([9] * 5)),
                                    Policy(), OBJECTIVES["latency"])
    with pytest.raises(PolicyError, match="seed method, whose decisions give no test p-value"):
        entry_evidence("seedy", decision)


def test_entry_evidence_from_a_decision_a_dict_and_a_precondition():
    policy = Policy(method="robust", mode="non_regression", margin=0.05)
    base, cand = runs([10, 10.1, 9.9, 10.2, 9.8]), runs([13, 13.1, 12.9, 13.2, 12.8])
    decision = METHODS["robust"].rule(ArmSummary.from_runs(base), ArmSummary.from_runs(cand), policy,
                                      OBJECTIVES["latency"])
    evidence = entry_evidence("slow", decision)
    assert evidence.verdict == "reject" and evidence.tests["no_regression_ok"] == pytest.approx(1 / 252)
    assert evidence.deciding.boundary == pytest.approx(1.05)
    from mlflow_perfgate.rules import decide

    as_dict = decide(base, cand, method="robust", mode="non_regression")
    again = entry_evidence("slow", as_dict)  # the dict's deciding figures: no records needed
    assert dict(again.tests) == dict(evidence.tests) and again.deciding.ratio == evidence.deciding.ratio
    earlier = {key: value for key, value in as_dict.items() if key != "deciding"}  # the earlier release's dict
    with pytest.raises(InputError, match="give the attempt records"):
        entry_evidence("slow", earlier)
    from_records = entry_evidence("slow", earlier, baseline_runs=base, candidate_runs=cand)
    assert dict(from_records.tests) == pytest.approx(dict(evidence.tests))
    few = decide(base[:2], cand[:2], method="robust", mode="non_regression")
    assert few["decision"] == "rerun"
    assert dict(entry_evidence("few", few, baseline_runs=base[:2], candidate_runs=cand[:2]).tests) == \
        {"no_regression_ok": 1.0, "p95_ok": 1.0}


# --- the simulation ---------------------------------------------------------------------------------

SIGMA = 0.05  # lognormal spread of one attempt's latency (5%)


def _simulated_suite(rng, ratios, policy, n=10):
    rule, objective = METHODS[policy.method].rule, OBJECTIVES["latency"]
    evidence = []
    for index, ratio in enumerate(ratios):
        base = runs(10 * np.exp(rng.normal(0, SIGMA, n)))
        cand = runs(10 * ratio * np.exp(rng.normal(0, SIGMA, n)))
        decision = rule(ArmSummary.from_runs(base), ArmSummary.from_runs(cand), policy, objective)
        evidence.append(entry_evidence(f"e{index}", decision))
    return evidence, suite_gate(evidence, alpha=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.05, 0.0])
def test_twenty_identical_entries_raise_a_false_alarm_at_most_5_percent_of_the_time(margin):
    """20 entries whose arms are identical (lognormal, sigma 5%, n = 10 per arm), non-regression mode.

    With ``margin = 0`` the boundary is the truth itself: each entry's own rule rejects about 5%
    of the time, and a suite of 20 judged entry by entry would alarm in most runs; the gate holds
    the chance of any false alarm at 5%.
    """
    rng = np.random.default_rng(20240601)
    policy = Policy(method="robust", mode="non_regression", margin=margin)
    suites, alarms, own_alarms = 150, 0, 0
    for _ in range(suites):
        evidence, gate = _simulated_suite(rng, [1.0] * 20, policy)
        alarms += gate.verdict == "reject"
        own_alarms += any(item.verdict == "reject" for item in evidence)
    # the gate's guarantee is a rate of at most 5%; 150 suites estimate it within about 1.8 points
    assert alarms / suites <= 0.05 + 2 * (0.05 * 0.95 / suites) ** 0.5
    if margin == 0.0:
        assert own_alarms / suites > 0.3  # what the gate prevents


@pytest.mark.slow
def test_a_true_20_percent_slowdown_among_19_identical_entries_is_found_at_n_10():
    rng = np.random.default_rng(7)
    policy = Policy(method="robust", mode="non_regression", margin=0.05)
    suites, found, other_alarms = 100, 0, 0
    for _ in range(suites):
        _, gate = _simulated_suite(rng, [1.2] + [1.0] * 19, policy)
        found += gate.entries[0].verdict == "reject"
        other_alarms += any(entry.verdict == "reject" for entry in gate.entries[1:])
    assert found / suites >= 0.85
    assert other_alarms / suites <= 0.05


def test_a_paired_entry_without_rounds_says_in_the_suite_report_why_it_was_judged_as_robust():
    from mlflow_perfgate.tracking._suite import suite_markdown

    policy = Policy(method="paired", mode="non_regression", margin=0.05)
    base, cand = runs([10, 10.1, 9.9, 10.2, 9.8]), runs([13, 13.1, 12.9, 13.2, 12.8])  # no pairs
    decision = METHODS["paired"].rule(ArmSummary.from_runs(base), ArmSummary.from_runs(cand), policy,
                                      OBJECTIVES["latency"])
    paired = METHODS["paired"].rule(ArmSummary.from_runs(runs([10, 10.1, 9.9, 10.2, 9.8], pairs=True)),
                                    ArmSummary.from_runs(runs([13, 13.1, 12.9, 13.2, 12.8], pairs=True)), policy,
                                    OBJECTIVES["latency"])
    gate = suite_gate([entry_evidence("unpaired", decision), entry_evidence("paired", paired)])
    summary = {"suite": "s", **{k: v for k, v in gate.to_dict().items() if k != "entries"},
               "entries": [{**entry.to_dict(), "group": entry.name} for entry in gate.entries]}
    rows = {line.split(" | ")[0].strip("| "): line for line in suite_markdown(summary).splitlines()
            if line.startswith("| ") and "`" in line}
    assert "latency, robust, non_regression (no ABBA rounds recorded: judged by the robust method)" in rows["unpaired"]
    assert "latency, paired, non_regression |" in rows["paired"] and "judged by the robust" not in rows["paired"]
    # a reject says which of its checks failed (found by a hostile run: the reason alone said "every
    # declared threshold was checked")
    assert "`declared_thresholds_checked`: FAILED: p95_ok, no_regression_ok" in rows["paired"]
    assert "every declared threshold was checked" not in rows["paired"]  # it read as a pass
    # the entry's own test's p-value beside the p-value of the ratio beyond the boundary (the suite's)
    cells = [cell.strip() for cell in rows["paired"].strip("|").split("|")]
    own = paired.deciding.p_value
    assert cells[6] == (f"{own:.2g}" if own < 0.01 else f"{own:.3f}") and cells[7] == "1.050"


def test_reason_text_counts_no_note_among_an_accept_s_checks():
    from mlflow_perfgate.rules import decide
    from mlflow_perfgate.tracking._report import reason_text

    base, cand = runs([10, 10.1, 9.9, 10.2, 9.8, 10.0]), runs([10, 10.1, 9.9, 10.2, 9.8, 10.05])
    result = decide(base, cand, method="paired", mode="non_regression")  # no rounds: judged by robust, a note
    assert result["decision"] == "accept" and "paired_fallback" in result["messages"]
    text = reason_text(result)
    assert text.startswith("every declared check passed (") and "paired_fallback" not in text
