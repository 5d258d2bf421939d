"""One gate over many comparisons: the error across a suite's entries, controlled.

A suite judges many comparisons (benchmarks, configurations) at once and answers with one
verdict. Each entry's own rule holds its errors at its own levels (a reject is a one-sided
test at ``(1 - confidence) / 2 = 5%``, the tail test at ``alpha = 2%``); twenty entries judged
that way would raise a false alarm in most runs of a suite whose changes are all harmless (1 -
0.95^20 = 64%). Here the suite's verdict is drawn from the entries' evidence so that its own
error stays at the declared level:

- **Rejects** (any entry's reject fails the gate: a union) are controlled across entries. The
  family is every entry's statistical reject tests: its main check (``no_regression_ok``:
  "the latency ratio exceeds ``1 + margin``"; ``improvement_ok``: "the ratio exceeds ``1 -
  min_improvement``", i.e. the interval rules the improvement out) and its tail test
  (``p95_ok``). ``control="holm"`` (the default, for a gate) holds the family-wise error
  rate, the chance of any false reject, at ``alpha`` (Holm's step-down); ``control="bh"``
  (for a report of changes, a nightly sweep where a few false findings among many are
  tolerable) holds the false-discovery rate at ``alpha`` (Benjamini-Hochberg's step-up). Both
  are *weighted*: each entry's tests share one unit of weight, its tail test ``tail_share``
  (default :data:`TAIL_SHARE` = 0.1) of it and its main check the rest, so that a test is held
  to ``alpha x its weight / the weight still in play`` at each of Holm's steps (Holm 1979's
  weighted procedure; for BH, Genovese, Roeder and Wasserman 2006). Why: the main check is
  what a suite gates on, and its rank test's p-value is discrete. With ``n`` = 10 ABBA rounds
  the paired test's smallest p-values are 1/1024 and 2/1024; unweighted Holm over 20 entries'
  40 tests holds the first at 0.05/40 = 0.00125, so only a window whose every round lies beyond
  the boundary could pass; weighted, the main check is held to 0.05 x 0.9/20 = 0.00225, which
  2/1024 meets (one round may fall short). The tail test's exceedance p-value reaches
  ``1 / C(2n, n)`` (5e-6 at n = 10), so its smaller share still lets a gross tail regression
  through. Equal weights would be ``tail_share`` = 0.5. An
  entry's statistical reject stands only if its test is rejected by that procedure; one that
  is not becomes ``rerun`` (``not_significant_in_suite``). A reject by a check without
  statistics (the failure rate, the quality, a hopeless candidate) stands as it is.
- **Accepts** need no adjustment: the gate accepts only when *every* entry accepts, so a false
  accept of the suite needs the false accept of a particular entry, whose chance its own rule
  already bounds (the intersection-union principle, R. L. Berger, "Multiparameter hypothesis
  testing and acceptance sampling", Technometrics 24(4), 295-300, 1982). An entry's accept,
  rerun and ``blocked_by_correctness`` pass through unchanged.
- The suite never makes an entry's verdict a reject that its own rule did not give: it only
  withholds rejects, so it can never be less strict than the entries' rules about accepting.

**p-values.** The main check's p-value is the one-sided test *against the decision boundary*
``b`` (``1 + margin``, or ``1 - min_improvement``) that inverts the entry's own interval, so
that ``p <= (1 - confidence) / 2`` exactly when the interval's lower bound exceeds ``b`` (the
entry's reject): for the robust method the Mann-Whitney statistic ``U_b``, the number of
pairwise log differences ``log(candidate) - log(baseline)`` at or below ``log b``, with ``p =
P(U <= U_b)`` under U's exact null distribution (up to 50 attempts per arm; its normal
approximation with a continuity correction above), as :func:`~._stats.hodges_lehmann_ratio`
bounds its interval; for the paired method the same count over the Walsh averages of the ABBA
rounds' log ratios against the signed-rank null distribution. The tail test's p-value is the
exceedance test's (``p95_p_value``) where the candidate's P95 exceeds ``maximum_p95_ratio``
times the baseline's, else 1. An entry whose rule stopped before its checks (too few
successful attempts, an unreliable baseline, attempts in progress) has p = 1: it is counted in
the family (conservative) and cannot be rejected by a test.

**The seed method has no p-value.** A latency entry judged by ``seed`` is refused
(:class:`PolicyError`): a suite needs ``robust`` or ``paired`` for its latency entries. The
memory and throughput objectives are judged by their specification-style rule only (no
statistical method judges them): such entries take part in the gate with their own verdict,
outside the error control, and the suite says so.

**Repeated looks** (``--until-decisive``): an entry's tests at look ``k`` of ``K`` were made at
the spent level ``sequential_alpha(k, K, a)`` of an overall level ``a``. Its *look-adjusted*
p-value is the least overall level at which this look's test rejects, ``p* = min{a:
p <= sequential_alpha(k, K, a)}``, and Holm or BH run on the ``p*``. So an entry's reject test
is held to its Holm share spent at its look: at Holm rank ``j``, ``p <= sequential_alpha(k,
K, alpha w / W_j)`` with ``w`` its weight and ``W_j`` the weight of the tests ranked ``j`` or
later (unweighted: ``alpha / (m - j + 1)``). Each entry's union over its looks stays within
its share, and Holm is monotone in its p-values, so a reject at any look keeps the family-wise
error at ``alpha``. The O'Brien-Fleming-type increment is increasing in the overall level below
about 0.317 (where ``z_{1 - a/2} > 1``), so the inversion is exact for the levels used here
(``alpha <= 0.3``); a ``p*`` above 0.3 is reported as 1.

Pure: no I/O, no mlflow, no torch. :func:`suite_gate` is the function a study of the suite's
error rates calls, with :class:`EntryEvidence` records built by :func:`entry_evidence` from a
rule's decision, or by hand from verdicts and p-values.

References:
    S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6(2),
    65-70, 1979. Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate", J. R.
    Statist. Soc. B 57(1), 289-300, 1995. K. K. G. Lan and D. L. DeMets, Biometrika 70(3),
    659-663, 1983.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ._checks import REL_TOL, above
from ._errors import InputError, PolicyError, RuleTypeError, check_finite
from ._policy import LATENCY_KEYS, Setting, check_settings
from ._records import VERDICTS, ArmSummary, Deciding, Decision

__all__ = [
    "CONTROLS",
    "EntryEvidence",
    "SUITE_REASONS",
    "SUITE_SETTINGS",
    "SuiteDecision",
    "SuiteEntry",
    "TAIL_SHARE",
    "adjusted_p_values",
    "family_weights",
    "boundary_p_value",
    "entry_evidence",
    "look_adjusted_p",
    "suite_gate",
    "suite_verdict",
]

#: The error the gate controls across entries: ``holm`` (family-wise, for a gate) or ``bh``
#: (false-discovery rate, for a report of changes).
CONTROLS = ("holm", "bh")
#: The knobs of :func:`suite_gate`.
#: The default share of each entry's level that its tail test gets (see the module docstring).
TAIL_SHARE = 0.1
SUITE_SETTINGS = (
    Setting("alpha", 0.05, "Error rate of the suite's rejects across its entries (family-wise with holm, "
            "false-discovery with bh)", low=0, high=0.3, low_open=True),
    Setting("tail_share", TAIL_SHARE, "Share of an entry's part of alpha spent on its tail (P95) test; its main "
            "test gets the rest", low=0, high=0.5, low_open=True),
)
#: What a suite says beyond the entries' own reasons.
SUITE_REASONS = MappingProxyType({
    "not_significant_in_suite": "the entry's statistical reject is not significant once the error across the "
                                "suite's entries is controlled; more attempts may settle it",
    "entry_rejected": "at least one entry is rejected",
    "entry_undecided": "at least one entry needs more evidence",
    "entry_blocked": "at least one entry is blocked by correctness",
    "every_entry_accepted": "every entry is accepted",
})
#: Above this overall level the look adjustment is not inverted (the spending increment stops
#: growing with the level near 0.317); such a p* is reported as 1.
_MAX_LEVEL = 0.3
#: The order of precedence of the suite's verdict (first found wins), and its reasons.
_PRECEDENCE = (("reject", "entry_rejected"), ("rerun", "entry_undecided"),
               ("blocked_by_correctness", "entry_blocked"))


# --- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryEvidence:
    """One entry of a suite, as the gate reads it: its own verdict and the p-values of its reject tests.

    Validated on construction; immutable.

    Attributes:
        name: the entry's name in the suite (unique).
        verdict: the entry's own decision (one of ``accept``, ``reject``, ``rerun``,
            ``blocked_by_correctness``).
        reason: its own reason.
        failed_checks: the checks its rule failed.
        tests: the p-value of each statistical reject test, by check name (the decision's
            :attr:`Deciding.tests`: the built-in methods' main check and ``p95_ok``, a plugin's
            own); empty for an entry outside the error control (``controlled`` false).
        controlled: whether the entry takes part in the error control (it has p-values).
        look, max_looks: the look of a sequential comparison (``None``: a single look).
        objective, method, mode: how the entry was judged.
        figures: what the report shows beyond ``deciding`` (``paired_fallback``), where known.
        deciding: the entry's deciding figures (:class:`Deciding`: its ratio, interval, boundary),
            ``None`` where its decision gave none.
    """

    name: str
    verdict: str
    reason: str = ""
    failed_checks: tuple[str, ...] = ()
    tests: Mapping[str, float] = field(default_factory=dict)
    controlled: bool = True
    look: int | None = None
    max_looks: int | None = None
    objective: str = "latency"
    method: str = "robust"
    mode: str = "improvement"
    figures: Mapping[str, Any] = field(default_factory=dict)
    deciding: Deciding | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError(f"an entry's name must be a non-empty string, got {self.name!r}")
        if self.verdict not in VERDICTS:
            raise InputError(f"entry {self.name!r}: verdict must be one of {list(VERDICTS)}, got {self.verdict!r}")
        if isinstance(self.failed_checks, str):
            raise RuleTypeError(f"entry {self.name!r}: failed_checks must be a sequence of check names")
        object.__setattr__(self, "failed_checks", tuple(self.failed_checks))
        if not isinstance(self.tests, Mapping):
            raise RuleTypeError(f"entry {self.name!r}: tests must map check names to p-values")
        for check, p in self.tests.items():
            if not isinstance(check, str) or not check:
                raise InputError(f"entry {self.name!r}: a test must be named by its check, got {check!r}")
            if isinstance(p, bool) or not check_finite(p, f"p-value of {check}") or not 0 <= p <= 1:
                raise InputError(f"entry {self.name!r}: the p-value of {check} must be in [0, 1], got {p!r}")
        if self.controlled and not self.tests:
            raise InputError(f"entry {self.name!r} is controlled but has no test p-value; give its tests, or "
                             "controlled=False for an entry outside the error control")
        if (self.look is None) != (self.max_looks is None):
            raise InputError(f"entry {self.name!r}: give both look and max_looks, or neither")
        if self.max_looks is not None:
            if type(self.max_looks) is not int or self.max_looks < 1:
                raise InputError(f"entry {self.name!r}: max_looks must be a positive integer, got {self.max_looks!r}")
            if type(self.look) is not int or not 1 <= self.look <= self.max_looks:
                raise InputError(f"entry {self.name!r}: look must be an integer in [1, {self.max_looks}], "
                                 f"got {self.look!r}")
        if self.deciding is not None and not isinstance(self.deciding, Deciding):
            raise RuleTypeError(f"entry {self.name!r}: deciding must be a Deciding or None")
        object.__setattr__(self, "tests", MappingProxyType(dict(self.tests)))
        object.__setattr__(self, "figures", MappingProxyType(dict(self.figures)))


@dataclass(frozen=True)
class SuiteEntry:
    """An entry's place in the suite's verdict.

    Attributes:
        name: the entry's name.
        verdict: its verdict within the suite (after the error control).
        reason: why (its own reason, or ``not_significant_in_suite``).
        own_verdict, own_reason: what its own rule said.
        failed_checks: the failed checks that stand in the suite.
        withheld_checks: statistical failed checks the error control did not confirm.
        controlled: whether it takes part in the error control.
        p_values: each test's p-value at its look.
        adjusted: each test's look-adjusted p-value (``p*``).
        holm: each test's Holm-adjusted p-value (the family-wise level at which it is rejected).
        bh: each test's Benjamini-Hochberg adjusted p-value (q-value).
        share: each test's share of ``alpha`` (its level, before the look's spending): Holm's
            ``alpha w / W`` (its weight over the weight of the tests ranked with or after it), BH's
            ``alpha w' rank / m``.
        level: each test's level at its look: the share spent at the look (``sequential_alpha``).
        significant: each test rejected by the suite's control at ``alpha``.
        evidence: the :class:`EntryEvidence` it came from.
    """

    name: str
    verdict: str
    reason: str
    own_verdict: str
    own_reason: str
    failed_checks: tuple[str, ...]
    withheld_checks: tuple[str, ...]
    controlled: bool
    p_values: Mapping[str, float]
    adjusted: Mapping[str, float]
    holm: Mapping[str, float]
    bh: Mapping[str, float]
    share: Mapping[str, float]
    level: Mapping[str, float]
    significant: Mapping[str, bool]
    evidence: EntryEvidence

    def to_dict(self) -> dict:
        """A plain dict of the fields (the evidence's figures and labels flattened in)."""
        evidence = self.evidence
        return {"name": self.name, "verdict": self.verdict, "reason": self.reason, "own_verdict": self.own_verdict,
                "own_reason": self.own_reason, "failed_checks": list(self.failed_checks),
                "withheld_checks": list(self.withheld_checks), "controlled": self.controlled,
                "p_values": dict(self.p_values), "adjusted": dict(self.adjusted), "holm": dict(self.holm),
                "bh": dict(self.bh), "share": dict(self.share), "level": dict(self.level),
                "significant": dict(self.significant), "objective": evidence.objective, "method": evidence.method,
                "mode": evidence.mode, "look": evidence.look, "max_looks": evidence.max_looks,
                "figures": {**_shown(evidence.deciding), **evidence.figures},
                "deciding": None if evidence.deciding is None else evidence.deciding.to_dict()}


def _shown(deciding: Deciding | None) -> dict:
    """The deciding figures under the names of the earlier release's entry dicts."""
    if deciding is None:
        return {}
    return {"ratio_estimate": deciding.ratio, "ratio_ci_low": deciding.ratio_ci_low,
            "ratio_ci_high": deciding.ratio_ci_high, "boundary": deciding.boundary}


@dataclass(frozen=True)
class SuiteDecision:
    """The suite's answer: one verdict over its entries, with the error control's figures.

    Attributes:
        verdict: ``reject`` if any entry is rejected; else ``rerun`` if any needs more evidence;
            else ``blocked_by_correctness`` if any is blocked; else ``accept`` (every entry accepted).
        reason: a key of :data:`SUITE_REASONS`.
        entries: one :class:`SuiteEntry` per entry, in the suite's order.
        alpha: the suite's error rate.
        control: ``holm`` or ``bh``.
        tests: how many tests the family holds.
        counts: entries by verdict within the suite.
        notes: what the reader must know (entries outside the control, withheld rejects).
        tail_share: the share of each entry's weight its tail test had.
    """

    verdict: str
    reason: str
    entries: tuple[SuiteEntry, ...]
    alpha: float
    control: str
    tests: int
    counts: Mapping[str, int]
    notes: tuple[str, ...] = ()
    tail_share: float = TAIL_SHARE

    def entry(self, name: str) -> SuiteEntry:
        """The entry of that name."""
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def to_dict(self) -> dict:
        """A plain dict: the verdict, reason, levels, counts, notes and each entry's dict."""
        return {"decision": self.verdict, "reason": self.reason, "alpha": self.alpha, "control": self.control,
                "tail_share": self.tail_share,
                "tests": self.tests, "counts": dict(self.counts), "notes": list(self.notes),
                "entries": [entry.to_dict() for entry in self.entries]}


# --- statistics ------------------------------------------------------------------------------------


def adjusted_p_values(p_values: Sequence[float], control: str = "holm",
                      weights: Sequence[float] | None = None) -> list[float]:
    """Holm's or Benjamini-Hochberg's adjusted p-values, in the order given, optionally weighted.

    Method: unweighted, with ``p_(1) <= ... <= p_(m)`` sorted, Holm's adjusted value of ``p_(j)``
    is ``max_{i <= j} min(1, (m - i + 1) p_(i))`` and BH's is ``min_{i >= j} min(1, m p_(i) /
    i)`` (Wright, "Adjusted p-values for simultaneous inference", Biometrics 48(4), 1005-1013,
    1992). A hypothesis is rejected at level ``alpha`` exactly when its adjusted value is ``<=
    alpha``, which is Holm's step-down and BH's step-up procedure. Ties keep the order given.

    Weighted (positive weights ``w``, a test's share of the level): the tests are ordered by
    ``p / w``; Holm's adjusted value is ``max_{i <= j} min(1, p_(i) W_(i) / w_(i))`` with
    ``W_(i)`` the weight of the tests ranked ``i`` or later (Holm 1979's weighted procedure:
    at each step a test is held to ``alpha w / W``; the family-wise error stays at ``alpha``
    under any dependence); BH's is BH's on ``p / w'`` with the weights scaled to mean 1, ``w' =
    w m / sum(w)`` (Genovese, Roeder and Wasserman, "False discovery control with p-value
    weighting", Biometrika 93(3), 509-524, 2006). Equal weights give the unweighted values.

    Args:
        p_values: each in [0, 1].
        control: ``"holm"`` or ``"bh"``.
        weights: one positive weight per p-value (``None``: all equal).

    Returns:
        The adjusted p-values, each in [0, 1], one per p-value given.
    """
    if control not in CONTROLS:
        raise PolicyError(f"control must be one of {list(CONTROLS)}, got {control!r}")
    values = [float(p) for p in p_values]
    for p in values:
        if not math.isfinite(p) or not 0 <= p <= 1:
            raise InputError(f"p-values must be in [0, 1], got {p!r}")
    m = len(values)
    if m == 0:
        return []
    weights, order, remaining = _weighted_ranks(values, weights)
    adjusted = [0.0] * m
    if control == "holm":
        running = 0.0
        for rank, index in enumerate(order):
            running = max(running, min(1.0, values[index] * remaining[rank] / weights[index]))
            adjusted[index] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            index = order[rank]
            running = min(running, min(1.0, m * values[index] / weights[index] / (rank + 1)))
            adjusted[index] = running
    return adjusted


def _weighted_ranks(values: Sequence[float], weights: Sequence[float] | None):
    """``(weights, order, remaining)`` of weighted Holm and BH: the weights checked and scaled to
    mean 1 (Holm's ratios are unchanged, BH needs it), the tests' order by ``p / w`` (ties keep
    the order given), and ``remaining[rank]``, the weight of the tests ranked there or later."""
    m = len(values)
    weights = [1.0] * m if weights is None else [float(w) for w in weights]
    if len(weights) != m or any(not math.isfinite(w) or w <= 0 for w in weights):
        raise InputError(f"weights must be {m} positive numbers, one per p-value, got {weights!r}")
    scale = m / math.fsum(weights) if m else 1.0
    weights = [w * scale for w in weights]
    order = sorted(range(m), key=lambda i: values[i] / weights[i])
    remaining = [0.0] * (m + 1)
    for rank in range(m - 1, -1, -1):
        remaining[rank] = remaining[rank + 1] + weights[order[rank]]
    return weights, order, remaining


def family_weights(evidence: Sequence["EntryEvidence"], tail_share: float) -> list[tuple[int, str, float]]:
    """The family of a suite's tests, ``(entry position, check, weight)``: each controlled entry's
    tests share a weight of 1, its tail test (``p95_ok``) ``tail_share`` of it and its main test
    the rest; an entry with one test gives it the whole weight."""
    family = []
    for position, item in enumerate(evidence):
        if not item.controlled:
            continue
        checks = list(item.tests)
        others = [check for check in checks if check != "p95_ok"]
        for check in checks:
            if len(others) in (0, len(checks)):  # no tail test, or only one: equal shares
                weight = 1 / len(checks)
            else:
                weight = tail_share if check == "p95_ok" else (1 - tail_share) / len(others)
            family.append((position, check, weight))
    return family


def look_adjusted_p(p: float, look: int | None, max_looks: int | None, *, spending: str = "obrien_fleming") -> float:
    """The least overall level at which a look's test rejects: ``min{a: p <= sequential_alpha(look, K, a)}``.

    Without a sequential design (``look`` or ``max_looks`` ``None``, or one look) it is ``p``.
    Otherwise the spent level increases with ``a`` (for the O'Brien-Fleming-type function up to
    about 0.317), and the inverse is found by bisection to 1e-12 over ``(0, 0.3]``; a p-value
    that no level up to 0.3 rejects gives 1.

    Args:
        p: the test's p-value at this look, in [0, 1].
        look, max_looks: the look and the last possible look.
        spending: the spending function of :func:`~._sequential.sequential_alpha`.
    """
    if isinstance(p, bool) or not check_finite(p, "p") or not 0 <= p <= 1:
        raise InputError(f"p must be in [0, 1], got {p!r}")
    if look is None or max_looks is None or max_looks <= 1:
        return float(p)
    from ._sequential import sequential_alpha

    def level(a: float) -> float:
        return sequential_alpha(look, max_looks, a, spending=spending)

    if p == 0:
        return 0.0
    if p > level(_MAX_LEVEL):
        return 1.0
    low, high = 0.0, _MAX_LEVEL
    while high - low > 1e-12:
        middle = (low + high) / 2
        if middle > 0 and p <= level(middle):
            high = middle
        else:
            low = middle
    return high


def boundary_p_value(b: ArmSummary, c: ArmSummary, boundary: float, *, method: str = "robust") -> float:
    """One-sided p-value of "the latency ratio candidate / baseline exceeds ``boundary``".

    The test the entry's interval inverts (see the module docstring): ``p <= (1 - confidence) /
    2`` exactly when the interval's lower bound exceeds ``boundary``, up to the relative
    tolerance of the rules' comparisons. The method's registry entry computes it
    (:attr:`~._registry.Method.boundary_p_value`): ``_robust.robust_boundary_p_value`` and
    ``_paired.paired_boundary_p_value`` for the built-ins, a plugin's own for its method.

    Returns:
        The p-value in [0, 1]; 1 when an arm has no successful attempt (or no complete round).

    Raises:
        PolicyError: the method has no boundary p-value (``seed``), or is not registered here.
        InputError: ``boundary`` is not a finite ratio > 0.
    """
    from ._registry import METHODS

    if isinstance(boundary, bool) or not check_finite(boundary, "boundary") or boundary <= 0:
        raise InputError(f"boundary must be a finite ratio > 0, got {boundary!r}")
    entry = METHODS.require(method)
    if entry.boundary_p_value is None:
        declared = [name for name in METHODS if METHODS[name].boundary_p_value is not None]
        raise PolicyError(f"method must be one of {declared} for a boundary p-value, got {method!r}")
    p = float(entry.boundary_p_value(b, c, float(boundary)))
    if not 0.0 <= p <= 1.0:
        raise PolicyError(f"the {method} method's boundary p-value must be in [0, 1], got {p!r}")
    return p


def methods_with_p_values() -> list[str]:
    """The registered methods a suite's latency entry can be judged by (those whose decisions carry test p-values)."""
    from ._registry import METHODS

    return [name for name in METHODS if METHODS[name].statistical]


def _tail_p_value(figures: Mapping[str, Any], maximum_p95_ratio: float | None) -> float:
    ratio, p = figures.get("p95_ratio"), figures.get("p95_p_value")
    if ratio is None or p is None or maximum_p95_ratio is None:
        return 1.0
    return float(p) if above(float(ratio), float(maximum_p95_ratio)) else 1.0


# --- evidence from a decision ----------------------------------------------------------------------


def _summaries_from_attempts(attempts: Iterable[Mapping],
                             latency_key: str = "latency_ms") -> tuple[ArmSummary, ArmSummary]:
    arms: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for attempt in attempts:
        if attempt.get("state") in ("running", "excluded") or attempt.get("arm") not in arms:
            continue
        record = {"ok": bool(attempt.get("ok")), "latency_ms": attempt.get("latency_ms"),
                  "quality": attempt.get("quality"), "failure": attempt.get("failure")}
        if latency_key != "latency_ms" and attempt.get(latency_key) is not None:
            record[latency_key] = attempt[latency_key]
        if type(attempt.get("pair")) is int:
            record["pair"] = attempt["pair"]
        if not record["ok"]:
            record = {"ok": False, "failure": record["failure"] or "unspecified",
                      **({"pair": record["pair"]} if "pair" in record else {})}
        arms[attempt["arm"]].append(record)
    return (ArmSummary.from_runs(arms["baseline"], latency_key=latency_key),
            ArmSummary.from_runs(arms["candidate"], latency_key=latency_key))


def entry_evidence(name: str, decision: Decision | Mapping[str, Any], *, baseline_runs: list | None = None,
                   candidate_runs: list | None = None, look: int | None = None,
                   max_looks: int | None = None) -> EntryEvidence:
    """An entry's :class:`EntryEvidence` from its rule's decision.

    The p-values come from the decision's deciding figures (:attr:`Decision.deciding`), whatever
    its method: :attr:`Deciding.tests` names its statistical checks and the p-value each one's
    failure rests on (for the built-in methods, the main check's test against the boundary its
    rule used, :func:`boundary_p_value`, and the tail test), computed on the latency figure its
    rule judged. An entry whose rule stopped before its checks has p = 1 for each; a blocked one
    too.

    Args:
        name: the entry's name.
        decision: a :class:`Decision` (``rules.judge``), or a result dict of ``rules.decide`` or
            ``evaluate_group`` (its ``deciding``).
        baseline_runs, candidate_runs: the attempt records, for a result dict of the earlier
            release (without ``deciding``): the p-values are then computed from them (or from its
            ``attempts``) with the method's :attr:`~._registry.Method.boundary_p_value`.
        look, max_looks: the look the decision was made at (``compare --until-decisive``).

    Returns:
        The evidence: for a latency entry, its tests' p-values; for an entry of another objective,
        uncontrolled (no p-value).

    Raises:
        PolicyError: a latency entry whose decision gives no test p-value (``seed``, a plugin's
            method whose rule returns no :class:`Deciding` with ``tests``).
        InputError: the records are missing or malformed.
    """
    records = None
    if isinstance(decision, Decision):
        verdict, reason, failed = decision.verdict, decision.reason, decision.failed_checks
        figures, objective, method, mode = dict(decision.figures), decision.objective, decision.method, decision.mode
        deciding = decision.deciding
    elif isinstance(decision, Mapping):
        verdict, reason = decision.get("decision"), decision.get("reason", "")
        failed = list(decision.get("failed_checks") or [])
        objective = decision.get("objective", "latency")
        method, mode = decision.get("method", "seed"), decision.get("mode", "improvement")
        figures = dict(decision)
        given = decision.get("deciding")
        deciding = Deciding.from_dict(given) if isinstance(given, Mapping) else None
        if deciding is None or not deciding.tests:
            records = _records_of(name, decision, baseline_runs, candidate_runs)
    else:
        raise RuleTypeError(f"entry {name!r}: decision must be a Decision or a result dict, got "
                            f"{type(decision).__name__}")
    labels = dict(look=look, max_looks=max_looks, objective=objective, method=method, mode=mode)
    if objective != "latency":
        return EntryEvidence(name, verdict, reason, tuple(failed), {}, controlled=False, **labels, deciding=deciding)
    shown = {"paired_fallback": figures["paired_fallback"]} if figures.get("paired_fallback") else {}
    if deciding is None or not deciding.tests:
        from ._registry import METHODS

        if isinstance(decision, Mapping) and METHODS.require(method).boundary_p_value is not None:
            if records is None:
                raise InputError(f"entry {name!r}: give the attempt records (baseline_runs, candidate_runs) or a "
                                 "result with 'attempts' or 'deciding'")
            deciding = _earlier_deciding(figures, method, mode, verdict, records)
    if deciding is None or not deciding.tests:
        raise PolicyError(f"entry {name!r} is judged by the {method} method, whose decisions give no test p-value "
                          "(Decision.deciding.tests): a suite's error control needs one for each latency entry "
                          f"(method = one of {methods_with_p_values()}, or a plugin's whose rule returns them)")
    tests = dict(deciding.tests)
    if verdict == "blocked_by_correctness":  # no performance reading stands: no test is significant
        tests = {check: 1.0 for check in tests}
    return EntryEvidence(name, verdict, reason, tuple(failed), tests, **labels, figures=shown, deciding=deciding)


def _records_of(name: str, decision: Mapping, baseline_runs, candidate_runs):
    """An earlier release's result dict's arms, from the records given or its ``attempts`` (else ``None``)."""
    # the figure the entry's rule judged (fastest step, p10, ...), so the gate tests what the entry did
    latency_key = ((decision.get("baseline") or {}).get("latency_key")
                   or LATENCY_KEYS.get(decision.get("latency") or "raw", "latency_ms"))
    if baseline_runs is not None or candidate_runs is not None:
        return (ArmSummary.from_runs(baseline_runs or [], latency_key=latency_key),
                ArmSummary.from_runs(candidate_runs or [], latency_key=latency_key))
    if "attempts" in decision:
        return _summaries_from_attempts(decision["attempts"], latency_key)
    return None


def _earlier_deciding(figures: Mapping, method: str, mode: str, verdict: str, records) -> Deciding:
    """The deciding figures of an earlier release's result dict, computed from its records with the method's
    boundary p-value."""
    main = "improvement_ok" if mode == "improvement" else "no_regression_ok"
    shown = {key: figures.get(key) for key in ("ratio_estimate", "ratio_ci_low", "ratio_ci_high")}
    if "required_improvement" not in figures or verdict == "blocked_by_correctness":
        return Deciding(tests={main: 1.0, "p95_ok": 1.0})
    boundary = 1 - float(figures["required_improvement"])
    b, c = records
    main_p = boundary_p_value(b, c, boundary, method=method)
    maximum = figures.get("maximum_p95_ratio", (figures.get("thresholds") or {}).get("maximum_p95_ratio"))
    return Deciding(ratio=shown["ratio_estimate"], ratio_ci_low=shown["ratio_ci_low"],
                    ratio_ci_high=shown["ratio_ci_high"], boundary=boundary, boundary_p_value=main_p,
                    tests={main: main_p, "p95_ok": _tail_p_value(figures, maximum)})


# --- the gate --------------------------------------------------------------------------------------


def suite_verdict(verdicts: Iterable[str]) -> tuple[str, str]:
    """The suite's verdict from its entries': any reject, else any rerun, else any blocked, else accept.

    Returns:
        ``(verdict, reason)`` with a reason of :data:`SUITE_REASONS`.
    """
    verdicts = list(verdicts)
    for verdict, reason in _PRECEDENCE:
        if verdict in verdicts:
            return verdict, reason
    return "accept", "every_entry_accepted"


def suite_gate(evidence: Sequence[EntryEvidence], *, alpha: float = 0.05, control: str = "holm",
               spending: str = "obrien_fleming", tail_share: float = TAIL_SHARE) -> SuiteDecision:
    """One verdict over a suite's entries, with its rejects' error controlled across them.

    The method is the module docstring's: every controlled entry's tests form the family; each
    p-value is look-adjusted (:func:`look_adjusted_p`), then adjusted by Holm (``control="holm"``,
    family-wise error <= ``alpha``) or Benjamini-Hochberg (``"bh"``, false-discovery rate <=
    ``alpha``, :func:`adjusted_p_values`); an entry's failed statistical check stands when its
    adjusted p-value is at most ``alpha``. An entry rejected only by statistical checks that do
    not stand becomes ``rerun`` (``not_significant_in_suite``); every other verdict passes
    through. The suite's verdict is :func:`suite_verdict` of the entries'.

    Args:
        evidence: one :class:`EntryEvidence` per entry (distinct names), at least one.
        alpha: the suite's error rate, in (0, 0.3].
        control: one of :data:`CONTROLS`.
        spending: the spending function the entries' looks used.

    Returns:
        A :class:`SuiteDecision`.

    Raises:
        PolicyError: ``alpha`` or ``control`` out of range.
        InputError: no entry, a name twice, or an item that is not an :class:`EntryEvidence`.
    """
    check_settings(SUITE_SETTINGS, {"alpha": alpha, "tail_share": tail_share}, PolicyError)
    if control not in CONTROLS:
        raise PolicyError(f"control must be one of {list(CONTROLS)}, got {control!r}")
    evidence = list(evidence)
    if not evidence:
        raise InputError("a suite needs at least one entry")
    seen: set[str] = set()
    for position, item in enumerate(evidence):
        if not isinstance(item, EntryEvidence):
            raise RuleTypeError(f"evidence[{position}] must be an EntryEvidence, got {type(item).__name__}")
        if item.name in seen:
            raise InputError(f"entry {item.name!r} appears twice in the suite")
        seen.add(item.name)
    weighted = family_weights(evidence, tail_share)
    family = [(position, check) for position, check, _ in weighted]
    m = len(family)
    raw = [evidence[position].tests[check] for position, check in family]
    stars = [look_adjusted_p(p, evidence[position].look, evidence[position].max_looks, spending=spending)
             for p, (position, check) in zip(raw, family)]
    holm = adjusted_p_values(stars, "holm", [w for _, _, w in weighted])
    bh = adjusted_p_values(stars, "bh", [w for _, _, w in weighted])
    chosen = holm if control == "holm" else bh
    weights, order, remaining = _weighted_ranks(stars, [w for _, _, w in weighted])  # remaining: Holm's W_j
    ranks = {index: rank for rank, index in enumerate(order)}
    per_entry: dict[int, dict[str, dict]] = {}
    for index, (position, check) in enumerate(family):
        item = evidence[position]
        rank = ranks[index]
        share = (alpha * weights[index] / remaining[rank] if control == "holm"
                 else alpha * weights[index] * (rank + 1) / m)
        level = share
        if item.look is not None and item.max_looks is not None and item.max_looks > 1:
            from ._sequential import sequential_alpha

            level = sequential_alpha(item.look, item.max_looks, share, spending=spending)
        values = per_entry.setdefault(position, {key: {} for key in
                                                 ("p", "star", "holm", "bh", "share", "level", "significant")})
        values["p"][check], values["star"][check] = raw[index], stars[index]
        values["holm"][check], values["bh"][check] = holm[index], bh[index]
        values["share"][check], values["level"][check] = share, level
        values["significant"][check] = chosen[index] <= alpha * (1 + REL_TOL)
    entries, notes, withheld_total = [], [], 0
    for position, item in enumerate(evidence):
        values = per_entry.get(position) or {key: {} for key in
                                             ("p", "star", "holm", "bh", "share", "level", "significant")}
        verdict, reason, failed, withheld = item.verdict, item.reason, item.failed_checks, ()
        if item.controlled and item.verdict == "reject":
            statistical = [check for check in item.failed_checks if check in item.tests]
            other = [check for check in item.failed_checks if check not in item.tests]
            standing = [check for check in statistical if values["significant"].get(check, False)]
            withheld = tuple(check for check in statistical if check not in standing)
            failed = tuple(check for check in item.failed_checks if check in other or check in standing)
            if not failed and item.reason != "unreliable_candidate":
                verdict, reason = "rerun", "not_significant_in_suite"
            withheld_total += bool(withheld)
        entries.append(SuiteEntry(
            name=item.name, verdict=verdict, reason=reason, own_verdict=item.verdict, own_reason=item.reason,
            failed_checks=tuple(failed), withheld_checks=withheld, controlled=item.controlled,
            p_values=MappingProxyType(values["p"]), adjusted=MappingProxyType(values["star"]),
            holm=MappingProxyType(values["holm"]), bh=MappingProxyType(values["bh"]),
            share=MappingProxyType(values["share"]), level=MappingProxyType(values["level"]),
            significant=MappingProxyType(values["significant"]), evidence=item))
    outside = [item.name for item in evidence if not item.controlled]
    if outside:
        are = "entry is" if len(outside) == 1 else "entries are"
        notes.append(f"{len(outside)} {are} outside the error control (no p-value: their objective is judged "
                     f"by its specification-style rule only): {', '.join(outside)}")
    if withheld_total:
        whose = "entry's statistical reject is" if withheld_total == 1 else "entries' statistical rejects are"
        notes.append(f"{withheld_total} {whose} withheld: not significant once the "
                     f"{'family-wise error' if control == 'holm' else 'false-discovery rate'} across the suite "
                     f"is held at {alpha:g}")
    verdict, reason = suite_verdict(entry.verdict for entry in entries)
    counts = {name: sum(entry.verdict == name for entry in entries) for name in VERDICTS}
    return SuiteDecision(verdict, reason, tuple(entries), float(alpha), control, m, MappingProxyType(counts),
                         tuple(notes), float(tail_share))
