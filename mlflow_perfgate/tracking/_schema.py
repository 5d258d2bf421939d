"""Every MLflow name the project writes or reads, and the canonical forms of values.

This module is the schema of ``docs/design.md`` (and of the documentation's generated page
``docs/reference/schema.md``) in code:
tags, params and metrics of attempt, comparison, decision and diagnosis runs, the artifact
paths and the format versions of what we store as JSON. Nothing else in the project spells an
MLflow key; the names of the decision runs' figures come from the method and objective
registries (``mlflow_perfgate.rules``) through :func:`arm_metric`.

Values: what a user gives (a condition, a group, a failure reason, a tag) is refused when it
exceeds MLflow's limits, never cut; texts of our own making (a failure's detail, a note, a
hypothesis) are shortened by :func:`fit`, which always ends a cut text with a marker.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from ..errors import InputError
from ..rules import to_python

__all__ = [
    "ARMS",
    "ARTIFACT_DIR",
    "DECISION_FORMAT",
    "HEADLINE_DECIDING",
    "HEADLINE_METRICS",
    "JOURNAL_FORMAT",
    "PARAM",
    "RESERVED_METRICS",
    "RESERVED_PREFIXES",
    "TRUNCATION_MARKER",
    "UI_ADDRESS",
    "arm_metric",
    "fit",
    "KIND_ATTEMPT",
    "KIND_CALIBRATION",
    "KIND_DECISION",
    "KIND_DIAGNOSIS",
    "KIND_COMPARISON",
    "KIND_HISTORY",
    "KIND_SUITE",
    "CALIBRATION_FORMAT",
    "HISTORY_FORMAT",
    "SUITE_FORMAT",
    "VIEW_STATE_PREFIX",
    "TAG",
    "METRIC",
    "MAX_PARAM_VALUE",
    "MAX_TAG_VALUE",
    "canonical_value",
    "canonical_conditions",
    "group_key",
]

ARMS = ("baseline", "candidate")
#: Each arm's colour in the MLflow UI's run list and charts (an attempt's ``mlflow.runColor``), the
#: colours of its points in the decision's plots (matplotlib's C0 and C1).
ARM_COLORS = {"baseline": "#1f77b4", "candidate": "#ff7f0e"}
KIND_ATTEMPT = "attempt"
KIND_DECISION = "decision"
KIND_DIAGNOSIS = "diagnosis"
KIND_COMPARISON = "comparison"
#: A suite decision: one gate over many comparisons, their decisions nested under it.
KIND_SUITE = "suite"
#: A history: a benchmark's series over revisions, its change points.
KIND_HISTORY = "history"
#: A calibration: identical-arm rounds of a workload on a host, the spread of each figure and the advice.
KIND_CALIBRATION = "calibration"

# MLflow's own limits (mlflow.utils.validation); values beyond them are refused here, never
# truncated by MLflow.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY_LENGTH = 250
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000


class TAG:
    """Tag keys."""

    KIND = "perfgate.kind"
    GROUP = "perfgate.group"
    #: sha256 of the group name: a filter-safe key for group names MLflow's filter grammar
    #: cannot quote (both quote characters, backslashes, control characters).
    GROUP_KEY = "perfgate.group_key"
    ARM = "perfgate.arm"
    OK = "perfgate.ok"
    FAILURE = "perfgate.failure"
    ATTEMPT_ID = "perfgate.attempt_id"
    RUN_VALID = "perfgate.run_valid"
    ISSUES = "perfgate.issues"
    FIRST_FAILURE = "perfgate.first_failure"
    REPRODUCIBLE = "perfgate.reproducible"
    MEM_STATUS = "perfgate.mem_status"
    #: On an attempt of a comparison whose CPU memory estimate was made once per arm (an objective
    #: other than memory): the attempt id of its arm's first successful attempt, whose estimate its
    #: ``peak_mem_mib`` carries (a CPU estimate is a function of the conditions).
    MEM_ESTIMATE_FROM = "perfgate.mem_estimate_from"
    #: On an attempt: ``measured`` when the kernel's contention figures were read around every
    #: measured step, ``unavailable: <why>`` where they cannot be (no /proc).
    CONTENTION_STATUS = "perfgate.contention_status"
    #: On a decision run: which latency the rules judged, ``raw``, ``uncontended``, ``fastest`` or
    #: ``p10`` (the policy's).
    LATENCY = "perfgate.latency"
    DECISION = "perfgate.decision"
    REASON = "perfgate.reason"
    FAILED_CHECKS = "perfgate.failed_checks"
    #: On a decision run: the reason in words, with each failed (or undecided) check's message.
    REASON_TEXT = "perfgate.reason_text"
    CHANGED_VARIABLE = "perfgate.changed_variable"
    OBJECTIVE = "perfgate.objective"
    WARNINGS = "perfgate.warnings"
    METHOD = "perfgate.method"
    MODE = "perfgate.mode"
    WORKLOAD = "perfgate.workload"
    FAILURE_DETAIL = "perfgate.failure_detail"
    STATUS = "perfgate.status"
    PRIMARY_SIGNAL = "perfgate.primary_signal"
    HYPOTHESIS = "perfgate.hypothesis"
    PLAN_ACTION = "perfgate.plan_action"
    #: On a diagnosis run: why the plan proposes its change, or none, in words.
    CHANGE_REASON = "perfgate.change_reason"
    #: "true" on a run created by ``compare``: the decision is written onto it.
    COMPARISON = "perfgate.comparison"
    #: An attempt's ABBA round in its comparison (an int): the paired method pairs the arms by it.
    PAIR = "perfgate.pair"
    #: On a comparison run: ``attempts`` (ABBA attempts, each in its own child), ``steps`` (both
    #: arms in one child per round, their measured steps interleaved), ``lockstep`` (one child per
    #: arm and round, their measured steps alternated by the comparison) or ``duet`` (the same
    #: children, both arms' steps at once).
    INTERLEAVE = "perfgate.interleave"
    #: On a comparison run: how it was measured and judged, in words: the method and figure, the
    #: interleaving, threads, rounds and steps, which of them were the defaults, and why a value of
    #: the recommended configuration did not apply (``harness.Configuration.text``); the report
    #: shows it.
    CONFIGURATION = "perfgate.configuration"
    #: On a comparison run: the method and latency it is judged with (given or defaulted); an
    #: ``evaluate`` of its group that names neither judges with them.
    CONFIGURED_METHOD = "perfgate.configured_method"
    CONFIGURED_LATENCY = "perfgate.configured_latency"
    #: On a comparison run: the policy its rounds were planned for (JSON of ``Policy.options()``):
    #: a ``compare --resume`` under another policy is refused, naming both, unless ``--new-plan``.
    POLICY = "perfgate.policy"
    #: On the comparison run of a sequential comparison (``compare --until-decisive`` with more
    #: than one look): the look it reached (an int) and its planned last look. ``evaluate`` of the
    #: group judges at that look, its levels spent as the comparison's were, unless told a look.
    LOOK = "perfgate.look"
    MAX_LOOKS = "perfgate.max_looks"
    #: On a comparison run collected with ``--until-decisive``: the information fraction (attempts
    #: per arm over the most it may take) its looks had spent before the last look, and through it.
    #: With them, ``perfgate.look`` and ``perfgate.max_looks`` count attempts per arm; a later
    #: ``evaluate`` judges at the same levels, and ``compare --resume`` goes on spending from there.
    LOOK_PREVIOUS = "perfgate.look_previous_fraction"
    #: On a step-interleaved attempt: the process-global torch state its steps ran under (threads,
    #: default dtype, matmul precision, backend flags, ...), JSON, captured after its factory and
    #: re-applied before each of its steps (``workloads._globals``).
    TORCH_STATE = "perfgate.torch_state"
    LOOK_SPENT = "perfgate.look_spent_fraction"
    #: ``host|boot id|pid|start ticks`` of the process that runs an attempt or a comparison.
    SUPERVISOR = "perfgate.supervisor"
    #: On a decision run: a digest of the attempts judged and the policy; racing evaluators of the
    #: same attempts converge on the decision run that carries it first.
    DECISION_KEY = "perfgate.decision_key"
    #: On a decision run: how many attempts it judged (their ids are in ``decision.json``).
    ATTEMPTS_JUDGED = "perfgate.attempts_judged"
    #: On a decision run: ``deciding`` where its headline metrics (:data:`HEADLINE_METRICS`) are the
    #: deciding method's and every method's own figures carry its prefix. Absent on the decision runs
    #: of releases before it, whose unprefixed ``p_value`` and ``ratio_*`` are the robust method's
    #: whichever method decided (``decisions()`` reads them as such).
    HEADLINE = "perfgate.headline"
    #: On an attempt: "true" when ``forget`` excluded it (a mistaken attempt), with the reason.
    EXCLUDED = "perfgate.excluded"
    EXCLUDED_REASON = "perfgate.excluded_reason"
    #: On an attempt run: the run that holds this attempt's outcome, when this one is a second
    #: creation of the same attempt (a request sent again after its answer was lost): it was ended
    #: KILLED and counts for nothing (``tracking._reconcile``).
    DUPLICATE_OF = "perfgate.duplicate_of"
    #: On a comparison run: why it ended before its decision (KILLED).
    END_REASON = "perfgate.end_reason"
    #: On an attempt (and the ``record --commit-time`` of one): the commit time of its ``revision``
    #: condition, POSIX seconds; orders a benchmark's history.
    COMMIT_TIME = "perfgate.commit_time"
    #: On a suite run: its name; on an entry's decision run: the suite that judged it last.
    SUITE = "perfgate.suite"
    #: On a suite run: a digest of the entries' decisions and the suite's settings (a suite judged
    #: again on the same decisions adopts its earlier run).
    SUITE_KEY = "perfgate.suite_key"
    #: On an entry's decision run: the suite run, the entry's name, its verdict and reason within the suite.
    SUITE_RUN = "perfgate.suite_run"
    SUITE_ENTRY = "perfgate.suite_entry"
    SUITE_DECISION = "perfgate.suite_decision"
    SUITE_REASON = "perfgate.suite_reason"
    #: On a history run: the benchmark key (a digest of the conditions but the revision, and the host,
    #: CPU model and torch version); ``perfgate.benchmark_conditions`` holds them as JSON.
    BENCHMARK = "perfgate.benchmark"
    BENCHMARK_CONDITIONS = "perfgate.benchmark_conditions"
    #: On a decision run: the key of its prepared view of the attempts in the MLflow UI (the
    #: experiment tag ``mlflow.sharedViewState.<key>``, opened by ``?viewStateShareKey=<key>``).
    VIEW_KEY = "perfgate.view_key"
    #: On a comparison run dispatched to a Ray cluster (``ray_dispatch``): the Ray node id it ran on.
    NODE = "perfgate.node"
    #: On a comparison run dispatched to a Ray cluster: the host name of that node.
    NODE_HOST = "perfgate.node_host"
    #: On a calibration run: a digest of what it calibrated (the workload, its conditions but
    #: ``repeats``, the torch threads asked for, and the host's fingerprint but the git revision and
    #: the mlflow version); ``compare --rounds auto`` finds the latest one by it.
    CALIBRATION_KEY = "perfgate.calibration_key"
    #: On a calibration run: the test its figures are for, in words, and its one line of advice.
    CALIBRATION_TEST = "perfgate.calibration_test"
    CALIBRATION_ADVICE = "perfgate.calibration_advice"
    #: On a comparison run of ``compare --rounds auto``: the calibration run it planned from, that
    #: calibration's age when it was read (seconds), and the plan in words.
    CALIBRATION_RUN = "perfgate.calibration_run"
    CALIBRATION_AGE = "perfgate.calibration_age_s"
    ROUNDS_AUTO = "perfgate.rounds_auto"
    #: prefix of the environment fingerprint's tags (``perfgate.env.<key>``)
    ENV_PREFIX = "perfgate.env."
    PARENT = "mlflow.parentRunId"
    NOTE = "mlflow.note.content"
    RUN_NAME = "mlflow.runName"
    #: A run's colour in the MLflow UI (its run list and charts): an attempt's is its arm's (``ARM_COLORS``).
    RUN_COLOR = "mlflow.runColor"

    #: Prefix of an attempt's rounded figures (:meth:`rounded`).
    ROUNDED_PREFIX = "perfgate.rounded."

    @staticmethod
    def method_decision(method: str) -> str:
        """What a method said on a decision run judged by several (``perfgate.seed_decision``, ...)."""
        return f"perfgate.{method}_decision"

    @staticmethod
    def rounded(metric: str) -> str:
        """On an attempt: one of its metrics as a person reads it (``perfgate.rounded.latency_ms`` =
        ``11.28``: four significant digits, ``rules`` ``plain``), written by a decision whose view of
        the attempts shows that figure (``tracking._views``). MLflow 3.17's runs table shows a
        metric with every digit and has no setting to round it; the metric itself keeps them all."""
        return TAG.ROUNDED_PREFIX + metric


class METRIC:
    """Metric keys of an attempt run (and of a calibration run, below ``STEP_ORDER``)."""

    LATENCY = "latency_ms"
    QUALITY = "quality"
    STEP_TIME = "step_time_ms"
    PEAK_MEM = "peak_mem_mib"
    THROUGHPUT = "throughput_tok_s"
    ATTEMPT_WALL = "attempt_wall_s"
    #: The kernel's contention figures over an attempt's measured steps (``workloads._contention``).
    RUNQ_WAIT = "runq_wait_ms"
    CPU = "cpu_ms"
    WAIT_SHARE = "wait_share"
    NIVCSW = "nivcsw"
    #: History: each measured step's run-queue wait over its wall time (steps as ``step_time_ms``).
    STEP_WAIT_SHARE = "step_wait_share"
    #: The median of the quiet measured steps (wait share at most the bound); absent when fewer
    #: than half were quiet (a contended attempt) or not measured. What ``--latency uncontended`` judges.
    UNCONTENDED_LATENCY = "uncontended_latency_ms"
    UNCONTENDED_STEPS = "uncontended_steps"
    #: A successful attempt's fastest measured step (the least of ``step_time_ms``), written with
    #: the step times. What ``--latency fastest`` judges.
    FASTEST_STEP = "fastest_step_ms"
    #: A successful attempt's 10th percentile of ``step_time_ms`` (Harrell-Davis), written with
    #: the step times. What ``--latency p10`` judges.
    STEP_P10 = "step_p10_ms"
    #: A successful attempt's mean measured step (the measured time over the steps: what its
    #: throughput is), written with the step times. Judged beside the typical step (no worse
    #: beyond the margin), so a periodic stall that leaves the median alone is still seen.
    STEP_MEAN = "step_mean_ms"
    #: A successful attempt's nearest-rank P95 of ``step_time_ms``, written with the step times:
    #: its step tail, judged against ``maximum_p95_ratio``.
    STEP_P95 = "step_p95_ms"
    #: History of a step-interleaved or lockstep attempt: each measured step's position in its
    #: round's sequence of both arms' steps (A B B A ...).
    STEP_ORDER = "step_order"
    #: A calibration run's rounds: asked for, complete (both arms succeeded), failed.
    ROUNDS = "rounds"
    COMPLETE_ROUNDS = "complete_rounds"
    FAILED_ROUNDS = "failed_rounds"
    #: A calibration run's advice for its ``--latency`` figure: the rounds its first ``--effect``
    #: needs, and the smallest effect detectable at the rounds it ran.
    ADVISED_ROUNDS = "advised_rounds"
    DETECTABLE_EFFECT = "detectable_effect"

    @staticmethod
    def calibration_spread(key: str) -> str:
        """A calibration run's spread of a figure's within-round log ratios (1.4826 MAD):
        ``spread_step_p10_ms``."""
        return f"spread_{key}"

    @staticmethod
    def calibration_sd(key: str) -> str:
        """A calibration run's sample standard deviation of a figure's log ratios: ``sd_step_p10_ms``."""
        return f"sd_{key}"

    @staticmethod
    def calibration_rounds(key: str) -> str:
        """A calibration run's count of rounds holding a figure in both arms: ``rounds_step_p10_ms``."""
        return f"rounds_{key}"


#: The decision run's headline metrics: the deciding method's figures (``rules.Deciding``) under
#: fixed names, whatever the method: ``improvement`` (what users mean: the share of the typical
#: step saved, 1 - typical_step_ratio; of the judged figure where the attempts carry no step times),
#: the typical step's ratio candidate / baseline and its interval, the mean step's ratio; the judged
#: figure's ratio and interval, the main test's p-value, the main check's boundary and the one-sided
#: p-value of the ratio lying beyond it.
HEADLINE_METRICS = ("improvement", "typical_step_ratio", "typical_step_ci_low", "typical_step_ci_high",
                    "mean_step_ratio", "ratio_estimate", "ratio_ci_low", "ratio_ci_high", "p_value", "boundary",
                    "boundary_p_value")
#: Where a local store's page is opened (``_client.ui_link``): under the address ``mlflow ui`` prints
#: (its port is the user's, ``--port``: no link of ours can know it).
UI_ADDRESS = "the address it prints + "
#: ``TAG.HEADLINE``'s value on a decision run whose headline metrics are the deciding method's.
HEADLINE_DECIDING = "deciding"


class PARAM:
    """Param keys of a decision run, in their own ``perfgate.`` namespace.

    A comparison run's params are the baseline's conditions and its decision is written onto
    it: a condition named ``alpha`` or ``changed_variable`` must not collide with the decision's.
    Thresholds are ``perfgate.<setting name>`` (:meth:`of`).
    """

    PREFIX = "perfgate."
    CHANGED_VARIABLE = "perfgate.changed_variable"
    BASELINE_VALUE = "perfgate.baseline_value"
    CANDIDATE_VALUE = "perfgate.candidate_value"
    MARGIN = "perfgate.margin"
    #: On a comparison run: the evaluator that claimed it for its decision (a param, so only the first
    #: claim is taken: MLflow refuses to change a param's value). On an attempt run: which decision
    #: run the evaluators of one look agreed on (``<decision key>:<run id>``); it is not a condition
    #: of the attempt, and the evaluator leaves it out of the params it compares.
    DECISION_CLAIM = "perfgate.decision_claim"
    #: On an entry's decision run: which suite run the evaluators of one suite look agreed on
    #: (``<suite key>:<run id>``).
    SUITE_CLAIM = "perfgate.suite_claim"
    #: On a comparison run, ``perfgate.round_claim.<first round>``: the process that runs the rounds
    #: from that one on (its identity; a param, so two ``compare --resume`` of one group at once
    #: cannot both take the same round numbers: the second is refused).
    ROUND_CLAIM = "perfgate.round_claim"
    #: On a decision run: the deciding method's test behind its ``p_value`` (``rules.Deciding.test``).
    TEST = "perfgate.test"

    @staticmethod
    def of(name: str) -> str:
        """The decision run's param for a setting (``min_valid_runs`` -> ``perfgate.min_valid_runs``)."""
        return PARAM.PREFIX + name


#: Key prefixes mlflow-perfgate and MLflow write themselves: a condition, extra tag or metric may not use them.
RESERVED_PREFIXES = ("perfgate.", "mlflow.")
#: Metrics an attempt's own fields write: extra metrics may not override them.
RESERVED_METRICS = ("latency_ms", "quality", "step_time_ms")


#: Where a decision run keeps its files (``perfgate/report.md``, ``perfgate/decision.json``, ...).
ARTIFACT_DIR = "perfgate"
#: Format version of a journal line. History: 1 (this release; lines without one are of release 0.1).
JOURNAL_FORMAT = 1
#: Format version of ``decision.json``. History: 1 (this release; files without one are of release 0.1).
DECISION_FORMAT = 1
#: Format version of a suite run's ``suite.json``. History: 1 (its first release).
SUITE_FORMAT = 1
#: Format version of a history run's ``history.json``. History: 1 (its first release).
HISTORY_FORMAT = 1
#: Format version of a calibration run's ``calibration.json``. History: 1 (its first release).
CALIBRATION_FORMAT = 1
#: The experiment tag prefix the MLflow UI reads a shared view state from (MLflow 3.17's
#: ``mlflow.sharedViewState.<key>``, for the experiment page's ``?viewStateShareKey=<key>``).
VIEW_STATE_PREFIX = "mlflow.sharedViewState."
#: What ends a text :func:`fit` had to shorten.
TRUNCATION_MARKER = " ...[truncated]"


def arm_metric(arm: str, key: str) -> str:
    """A decision run's metric for one arm's figure: ``baseline_median_ms``, ``candidate_p95_ms``."""
    return f"{arm}_{key}"


def fit(text: str, limit: int, marker: str = TRUNCATION_MARKER) -> str:
    """``text`` if it fits in ``limit`` characters, else its head followed by ``marker``.

    Only for texts of our own making: a value the user gave is refused instead (see the module
    docstring).
    """
    return text if len(text) <= limit else text[: limit - len(marker)] + marker


_SHAPE_STRING = re.compile(r"^\s*[\(\[]\s*(-?\d+\s*(,\s*-?\d+\s*)*,?\s*)?[\)\]]\s*$")
_BARE_SHAPE = re.compile(r"^\s*\d+\s*(?:(?:,\s*\d+\s*)+|(?:[xX]\s*\d+\s*)+)$")


def group_key(group: str) -> str:
    """A filter-safe key for a group name: the hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_value(value: Any, *, key: str = "value") -> str:
    """The one string an MLflow param holds for a condition value.

    Booleans (and the strings ``true``/``false`` in any case) become ``true`` / ``false``;
    tuples, lists and strings such as ``"(4, 128)"``, ``"[4,128]"``, ``"4,128"`` or ``"4x128"``
    become ``"[4, 128]"``;
    finite numbers their ``repr``; dicts sorted JSON. So ``(4, 128)`` and ``[4, 128]``, or
    ``True`` and ``"true"``, give the same param and never look like a changed variable.

    Raises:
        InputError: a number (at any depth) is NaN or infinite.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):  # numpy's float64 is a float whose repr is np.float64(...): its number
        if not math.isfinite(value):
            raise InputError(f"condition {key!r} must be finite, got {value!r}")
        return repr(float(value))
    if isinstance(value, str):
        if value.strip().lower() in ("true", "false"):
            return value.strip().lower()
        if _SHAPE_STRING.match(value):
            inner = value.strip()[1:-1]
            return json.dumps([int(part) for part in inner.split(",") if part.strip()])
        if _BARE_SHAPE.match(value):  # "4,128" or "4x128", as typed on a command line
            return json.dumps([int(part) for part in re.split(r"[,xX]", value)])
        return value
    if isinstance(value, (list, tuple)):
        return json.dumps([_json_ready(item, key) for item in value])
    if isinstance(value, dict):
        return json.dumps({str(k): _json_ready(v, key) for k, v in value.items()}, sort_keys=True)
    return _numbers_of(value, key, canonical_value)


def _numbers_of(value: Any, key: str, again: Any) -> Any:
    """A numpy, pandas or torch value read as plain Python (``again`` of it): a scalar as the number it
    holds, an array or tensor of any size as its nested list; anything else as its ``str``."""
    plain = to_python(value)
    if plain is not value:
        return again(plain, key=key)
    if callable(getattr(value, "tolist", None)):
        try:
            listed = value.tolist()
        except Exception as error:  # noqa: BLE001 - an object's own tolist() failed: said with the key
            raise InputError(f"condition {key!r} could not be read as a list ({error})") from None
        if listed is not value:
            return again(listed, key=key)
    return str(value)


def _json_ready(value: Any, key: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"condition {key!r} must hold only finite numbers, got {value!r}")
    if isinstance(value, (list, tuple)):
        return [_json_ready(item, key) for item in value]
    if isinstance(value, dict):
        return {str(k): _json_ready(v, key) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return _numbers_of(value, key, _json_ready)


def canonical_conditions(conditions: dict) -> dict[str, str]:
    """Canonical param strings for every condition (see :func:`canonical_value`)."""
    if not isinstance(conditions, dict):
        raise InputError(f"conditions must be a dict, got {type(conditions).__name__}")
    return {str(key): canonical_value(value, key=str(key)) for key, value in conditions.items()}
