"""The pytest plugin: tests declare comparisons; ``pytest --perfgate`` runs them as one suite.

Registered through the ``pytest11`` entry point, so it loads in every pytest run where the
package is installed: importing it loads nothing but pytest (no mlflow, torch, scipy, pandas),
and without ``--perfgate`` it only skips the declared tests.

A test declares one comparison with the ``perfgate`` marker; its keywords are a suite entry's
keys (:data:`mlflow_perfgate.suite.ENTRY_KEYS`: ``workload``, ``change``, ``objective``, ``mode``,
``method``, ``attempts``, ``timeout_s``, ...) with ``conditions`` for the fixed conditions (a
suite file's ``set``), any registered threshold by name (``min_valid_runs=3``), or a pair of
module-level callables (``baseline=``, ``candidate=``: the workload
:mod:`mlflow_perfgate.workloads.callables`, the change ``impl=candidate``)::

    @pytest.mark.perfgate(workload="tinylm", conditions={"input_shape": "2,16", "steps": 3},
                          change={"checkpoint": True}, mode="non_regression", attempts=6)
    def test_checkpointing_is_no_slower():
        pass

A marker on a class or module gives defaults to the tests under it (the closest wins; the
``conditions`` and ``thresholds`` tables merge), as a suite file's ``[defaults]``.

With ``--perfgate`` every declared comparison of the session is an entry of one suite
(:func:`mlflow_perfgate.suite.run`: its ABBA rounds, its error control across the entries, its
records in MLflow), run once, before the first declared test; then each test gets its entry's
verdict within the suite:

- ``accept``: the test runs (its body may read the outcome through the ``perfgate`` fixture);
- ``reject`` and ``blocked_by_correctness``: the test fails, with the decision's reasons;
- ``rerun``: the test is reported as a rerun of its own (``RERUN``, counted as ``perfgate_rerun``),
  neither a pass nor a failure: pytest's outcome is a skip, so a rerun alone does not fail the
  session; ``--perfgate-rerun fail`` makes it a failure (a strict gate);
- a declaration the product refuses (an unknown objective, a change of two variables) fails its
  test with the product's message; the others still run.

With ``--perfgate-against REV`` each declared comparison asks instead whether the working tree
is no slower than revision ``REV`` (:func:`against`): its candidate (the declared change applied)
runs from the working tree, uncommitted changes included, and from a git worktree of ``REV``, one
child per arm in lockstep, judged in ``non_regression`` mode; a branch is gated against ``main``
in one session, as pytest-benchmark's ``--benchmark-compare`` does against a saved run, without
the drift of a baseline measured hours earlier. The inline fixture's comparisons are unchanged.

The session ends with a table: each test, its verdict, the ratio candidate / baseline with its
interval (the statistical methods; the seed method's observed improvement), its decision run.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MARKER", "Outcome", "against", "declaration", "declares"]

#: The marker that declares a comparison, and the fixture that reads its outcome.
MARKER = "perfgate"
#: The verdicts that fail their test (a rerun is its own outcome unless ``--perfgate-rerun fail``).
_FAILING = ("reject", "blocked_by_correctness")
#: The marker's keywords beside the suite entry's keys (``conditions`` is the entry's ``set``).
_OWN_KEYWORDS = ("conditions", "baseline", "candidate")
#: The entry keys a test's marker may not give: the plugin names the entry and its group.
_NOT_DECLARED = ("name", "group", "set")
_RERUN_CATEGORY = "perfgate_rerun"
_SKIP_REASON = "perfgate comparison: run with --perfgate"

_GATE = pytest.StashKey["_Gate"]()
_OUTCOME = pytest.StashKey["Outcome"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "mlflow-perfgate: performance comparisons, judged as one suite")
    group.addoption("--perfgate", action="store_true", default=False,
                    help="Run the comparisons declared with @pytest.mark.perfgate as one suite, log them to MLflow "
                         "and give each test its entry's verdict (without it they are skipped).")
    group.addoption("--perfgate-tracking-uri", default=None, metavar="URI",
                    help="Where the suite records (default: MLFLOW_TRACKING_URI, else MLflow's sqlite:///mlflow.db).")
    group.addoption("--perfgate-experiment", default=None, metavar="NAME",
                    help="The MLflow experiment (default: MLFLOW_EXPERIMENT_NAME, else Default).")
    group.addoption("--perfgate-suite", default="pytest", metavar="NAME",
                    help="The suite's name (perfgate.suite) [pytest]; each session records into fresh groups "
                         "NAME/<session>/<test id>.")
    group.addoption("--perfgate-alpha", type=float, default=None, metavar="ALPHA",
                    help="The error rate of the suite's rejects across its tests [0.05].")
    group.addoption("--perfgate-control", choices=("holm", "bh"), default=None,
                    help="holm: family-wise error (a gate, the default); bh: false-discovery rate.")
    group.addoption("--perfgate-against", default=None, metavar="REV",
                    help="Run each declared comparison's candidate from the working tree (uncommitted changes "
                         "included) against the same candidate at git revision REV (a branch, tag or sha), one child "
                         "per arm in lockstep, asking whether the working tree is no slower (non_regression, the "
                         "marker's margin): a branch gated against main in one session.")
    group.addoption("--perfgate-rerun", choices=("report", "fail"), default="report",
                    help="What a rerun verdict does to its test: report (its own outcome, RERUN; the default) "
                         "or fail.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(workload=..., conditions={{...}}, change={{...}}, objective=..., mode=..., ...): a "
                   "comparison of mlflow-perfgate, run with --perfgate (the keys of a suite entry; baseline= and "
                   "candidate= for two callables)")
    if not config.getoption("perfgate"):
        if config.getoption("perfgate_against") is not None:
            raise pytest.UsageError("--perfgate-against runs the declared comparisons: give --perfgate too")
        return
    uri = config.getoption("perfgate_tracking_uri")
    from .tracking import scheme_problem  # no mlflow

    problem = scheme_problem(uri if uri is not None else os.environ.get("MLFLOW_TRACKING_URI"))
    if problem:  # one line now, not a failure of every comparison later
        raise pytest.UsageError(f"{'--perfgate-tracking-uri' if uri is not None else 'MLFLOW_TRACKING_URI'}: {problem}")
    against = config.getoption("perfgate_against")
    if against is not None:  # a revision git cannot resolve: one line now, before anything runs
        from .errors import InputError
        from .sites import git

        try:
            top = git("rev-parse", "--show-toplevel")
        except InputError:
            raise pytest.UsageError(f"--perfgate-against {against}: {os.getcwd()} is in no git repository: run pytest "
                                    "in the checkout to gate") from None
        try:
            git("rev-parse", "--verify", "--quiet", f"{against}^{{commit}}", cwd=top)
        except InputError:
            raise pytest.UsageError(f"--perfgate-against {against}: not a commit git can resolve in {top}; give a "
                                    "branch, tag or sha of that repository (git fetch it first if it is remote)"
                                    ) from None
        from .sites import WORKING_TREE

        if against == WORKING_TREE:
            raise pytest.UsageError(f"--perfgate-against {WORKING_TREE}: that name is the working tree itself (the "
                                    "arm the comparisons gate); give the branch, tag or sha to gate it against")
    gate = _Gate(config)
    from .errors import PerfgateError
    from .suite import parse_suite

    try:  # the suite's own settings, checked by its parser (a recorded group stands in for the entries)
        parse_suite({"suite": {**gate.head(), "groups": ["-"]}}, source="--perfgate options")
    except PerfgateError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_GATE] = gate
    config.pluginmanager.register(gate, "mlflow_perfgate_gate")


def pytest_unconfigure(config: pytest.Config) -> None:
    gate = config.stash.get(_GATE, None)
    if gate is not None:
        gate.restore_environment()


def declares(item: pytest.Item) -> bool:
    """Whether a test declares a comparison: a ``perfgate`` marker of its own, or one above it (its class,
    its module) that names the change or the callables; a marker above that gives only defaults leaves
    the tests without one of their own alone."""
    if any(marker.name == MARKER for marker in item.own_markers):
        return True
    return any(key in marker.kwargs for marker in item.iter_markers(MARKER) for key in ("change", "baseline",
                                                                                         "candidate"))


def _skipped(item: pytest.Item) -> bool:
    """Whether a ``skip``/``skipif`` marker skips the test: its comparison is then no entry of the suite."""
    try:
        from _pytest.skipping import evaluate_skip_marks  # pytest's own reading of the marks
    except ImportError:  # pragma: no cover - a pytest without it: the unconditional marks only
        return item.get_closest_marker("skip") is not None
    try:
        return evaluate_skip_marks(item) is not None
    except (Exception, pytest.fail.Exception):  # a broken condition: pytest reports it at the test's setup
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("perfgate"):
        return
    skip = pytest.mark.skip(reason=_SKIP_REASON)
    for item in items:
        if declares(item):
            item.add_marker(skip)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A test's comparison as the suite judged it (what the ``perfgate`` fixture gives).

    Attributes:
        name: the suite entry's name (the test's node id).
        verdict: its verdict within the suite (``accept``, ``reject``, ``rerun``, ``blocked_by_correctness``).
        own_verdict: its own rule's verdict (a reject the suite's error control withheld is ``rerun`` above).
        reason: the reason's key; ``message``: the decision in words, as the test reports it.
        ratio, ratio_ci_low, ratio_ci_high: candidate / baseline of the judged figure and its
            interval (the statistical methods; ``None`` where the method gives none).
        group, decision_run_id, decision_run_url: where it is recorded.
        result: the entry's ``evaluate_group`` result (every figure and check).
    """

    name: str
    verdict: str
    own_verdict: str
    reason: str
    message: str
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    group: str
    decision_run_id: str | None
    decision_run_url: str | None
    result: dict = dataclasses.field(repr=False, default_factory=dict)


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> Outcome:
    """The outcome of the comparison this test declares with ``@pytest.mark.perfgate`` (after the suite ran).

    Only an accepted comparison runs its test's body, so the body can check more than the gate
    does (``assert perfgate.ratio < 1.02``).
    """
    gate = request.config.stash.get(_GATE, None)
    if gate is None:
        pytest.skip(_SKIP_REASON)
    if request.node.nodeid not in gate.declared:
        pytest.fail("the perfgate fixture reads the comparison a test declares with @pytest.mark.perfgate(...); "
                    f"{request.node.nodeid} declares none", pytrace=False)
    gate.ensure_run()
    outcome = gate.outcome(request.node.nodeid)
    if outcome is None:
        pytest.fail(gate.failure(request.node.nodeid), pytrace=False)
    return outcome


#: What the inline fixture sets itself: an option of these is refused, never passed twice.
_INLINE_FIXED = frozenset({"attempts", "group", "experiment_name", "supervised", "progress", "interleave", "runner",
                           "workload", "conditions", "change"})


@pytest.fixture
def perfgate_compare(request: pytest.FixtureRequest):
    """Compare two callables inline, in the test body: ``perfgate_compare(old_sum, new_sum)``.

    The two module-level callables run step-interleaved in this process (each round alternates
    their measured steps, so both see the same moments of the machine), in ``rounds`` ABBA rounds
    of ``steps`` steps, each step calling its callable ``calls_per_step`` times; the comparison is
    recorded in MLflow (the session's ``--perfgate-tracking-uri`` and ``--perfgate-experiment``, a
    group ``<suite>/<session>/inline/<test id>/<n>``) and judged under ``mode`` and any decision
    option ``compare`` takes (``margin=0.05``, ``method="robust"``, a threshold by name; in
    non_regression mode it goes on while undecided, up to twice ``rounds``, as ``compare`` does,
    unless ``until_decisive=False``). It returns
    ``compare``'s result: ``result["decision"]``, ``result["deciding"]["improvement"]``,
    ``result["report"]``, ... so the test asserts what it means::

        def test_the_new_sum_is_faster(perfgate_compare):
            result = perfgate_compare(old_sum, new_sum)
            assert result["decision"] == "accept", result["report"]

    Without ``--perfgate`` the test is skipped, as a declared comparison is. Each call is its own
    decision, outside the session suite's error control (a declared comparison,
    ``@pytest.mark.perfgate(baseline=..., candidate=...)``, takes part in it).
    """
    gate = request.config.stash.get(_GATE, None)
    if gate is None:
        pytest.skip(_SKIP_REASON)
    calls = []

    def compare_inline(baseline, candidate, *, mode: str = "improvement", rounds: int = 10, steps: int = 30,
                       warmup: int = 3, calls_per_step: int = 1, **options: Any) -> dict:
        from .harness import compare
        from .errors import InputError
        from .workloads.callables import WORKLOAD, callable_conditions

        fixed = sorted(set(options) & _INLINE_FIXED)
        if fixed:
            raise InputError(f"perfgate_compare sets {fixed} itself (in this process, steps interleaved, its own "
                             "group); leave them out")
        if type(rounds) is not int or rounds < 1:
            raise InputError(f"rounds must be a positive integer, got {rounds!r}")

        conditions, change = callable_conditions(baseline, candidate, {"steps": steps, "warmup": warmup,
                                                                       "calls_per_step": calls_per_step})
        calls.append(None)
        group = f"{gate.suite_name}/{gate.session}/inline/{request.node.nodeid}/{len(calls)}"
        try:
            return compare(WORKLOAD, conditions, change, attempts=rounds, group=group,
                           experiment_name=request.config.getoption("perfgate_experiment"), supervised=False,
                           progress=False, interleave="steps", mode=mode, **options)
        except InputError as exc:  # compare's advice names its command-line options: say them as given here
            if "--attempts" not in str(exc) and "--allow-undecidable" not in str(exc):
                raise
            raise InputError(f"{exc} (here: --attempts N is rounds=N, --allow-undecidable is allow_undecidable=True)"
                             ) from None

    return compare_inline


# --- the session's suite ---------------------------------------------------------------------------


def declaration(item: pytest.Item) -> dict:
    """The suite entry keys an item's ``perfgate`` markers declare (the closest wins; tables merge).

    Raises:
        ValueError: positional arguments, a key the plugin sets itself, a lone ``baseline`` or
            ``candidate``, or callables beside ``workload``/``change``.
    """
    merged: dict[str, Any] = {}
    for marker in reversed(list(item.iter_markers(MARKER))):
        if marker.args:
            raise ValueError(f"@pytest.mark.{MARKER} takes keywords only, got positional {marker.args!r}")
        for key, value in marker.kwargs.items():
            if key in ("conditions", "thresholds") and isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    from .suite import ENTRY_KEYS

    given = sorted(key for key in _NOT_DECLARED if key in merged)
    if given:
        raise ValueError(f"@pytest.mark.{MARKER} does not take {given}: the plugin names each test's entry and group "
                         "(conditions= holds the fixed conditions)")
    entry: dict[str, Any] = {}
    thresholds = dict(merged.pop("thresholds", None) or {})
    baseline, candidate = merged.pop("baseline", None), merged.pop("candidate", None)
    conditions = merged.pop("conditions", None)
    for key, value in merged.items():
        if key in ENTRY_KEYS:
            entry[key] = value
        else:  # a threshold by name; the policy refuses an unknown one, listing those it knows
            thresholds[key] = value
    if thresholds:
        entry["thresholds"] = thresholds
    if baseline is not None or candidate is not None:
        if baseline is None or candidate is None:
            raise ValueError("give both baseline= and candidate= (two callables), or neither")
        beside = sorted(key for key in ("workload", "change") if key in entry)
        if beside:
            raise ValueError(f"baseline= and candidate= are the workload and the change: leave out {beside}")
        from .workloads.callables import WORKLOAD, callable_conditions

        entry["set"], entry["change"] = callable_conditions(baseline, candidate, conditions)
        entry["workload"] = WORKLOAD
    else:
        if conditions is not None:
            entry["set"] = conditions
        if "change" not in entry:
            raise ValueError(f"@pytest.mark.{MARKER} needs change={{variable: value}} (the one variable the candidate "
                             "changes), or baseline= and candidate= (two callables)")
    return entry


def against(entry: dict, revision: str) -> dict:
    """A declared entry as ``--perfgate-against REVISION`` runs it: its candidate (the fixed conditions with
    the declared change applied: the code as the test means it to run now) at ``revision`` as the
    baseline, and the same from the working tree as the candidate (``revision = working-tree``,
    :data:`mlflow_perfgate.sites.WORKING_TREE`), asked whether the working tree is no slower
    (``non_regression``; the marker's margin and thresholds kept).

    Raises:
        ValueError: the declaration already places its arms (``revision`` or ``python``).
    """
    from .sites import WORKING_TREE

    conditions = {**(entry.get("set") or {}), **dict(entry["change"])}
    placed = sorted(key for key in ("revision", "python") if key in conditions)
    if placed:
        raise ValueError(f"the comparison declares {placed[0]} itself, and --perfgate-against places its arms at "
                         f"{revision} and the working tree: run it without --perfgate-against")
    return {**entry, "set": {**conditions, "revision": revision}, "change": {"revision": WORKING_TREE},
            "mode": "non_regression"}


def module_root(path: str, name: str) -> str:
    """The folder a module was imported from (the ``sys.path`` entry that finds it): its file, less its dotted name."""
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(name.count(".") + (1 if os.path.basename(path).startswith("__init__.") else 0)):
        root = os.path.dirname(root)
    return root


def _workload_roots(entries: list[dict]) -> list[str]:
    """Where the entries' workload and callable modules were found in this process: a supervised
    attempt's child imports them by name, and pytest may have found them on a path of its own
    (a test folder it put on ``sys.path``)."""
    import importlib.util

    from .workloads import workload_target

    modules = []
    for entry in entries:
        try:
            modules.append(workload_target(entry.get("workload", "tinylm"))[0])
        except ValueError:
            pass  # refused by the suite's own check, with its message
        modules += [str(value).partition(":")[0] for key, value in (entry.get("set") or {}).items()
                    if key.endswith("_callable")]
    roots = []
    for module_name in modules:
        module = sys.modules.get(module_name)
        path, name = getattr(module, "__file__", None), module_name
        if path is None:
            try:
                spec = importlib.util.find_spec(module_name.split(".")[0])
            except (ImportError, ValueError):
                continue
            if spec is None or not spec.origin or not os.path.isabs(spec.origin):
                continue
            path, name = spec.origin, spec.name
        root = module_root(path, name)
        if root not in roots:
            roots.append(root)
    return roots


class _Gate:
    """The session's comparisons: declared at collection, run once as one suite, then each test's outcome."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.suite_name: str = config.getoption("perfgate_suite")
        self.against: str | None = config.getoption("perfgate_against")
        self.session = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()
        self.declared: dict[str, pytest.Item] = {}
        self.refused: dict[str, str] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.summary: dict | None = None
        self.error: str | None = None
        self.ran = False
        self._saved_env: dict[str, str | None] = {}
        # Under pytest-xdist every worker collects every test, and each would run the suite: the
        # controller makes a folder the workers share and gives them its session, the first worker
        # to need the outcomes runs the suite under a lock there, the others (and the controller's
        # summary) read what it left.
        self.shared: Path | None = None
        self._own_shared = False
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and workerinput.get("perfgate_shared"):
            self.shared = Path(workerinput["perfgate_shared"])
            self.session = workerinput["perfgate_session"]
        elif getattr(config.option, "dist", "no") != "no":  # the xdist controller (-n N, --dist ...)
            self.shared = Path(tempfile.mkdtemp(prefix="perfgate-xdist-"))
            self._own_shared = True
        uri = config.getoption("perfgate_tracking_uri")
        if uri is not None:
            self._set_env("MLFLOW_TRACKING_URI", uri)

    def _set_env(self, name: str, value: str) -> None:
        self._saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def restore_environment(self) -> None:
        if self._own_shared and self.shared is not None:
            shutil.rmtree(self.shared, ignore_errors=True)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

    # hooks ----------------------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist's controller, for each worker: the shared folder and the session's groups."""
        if self.shared is not None:
            node.workerinput["perfgate_shared"] = str(self.shared)
            node.workerinput["perfgate_session"] = self.session

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.declared = {item.nodeid: item for item in session.items if declares(item) and not _skipped(item)}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.nodeid in self.declared:
            self.ensure_run()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if item.nodeid not in self.declared:
            return
        outcome = self.outcome(item.nodeid)
        if outcome is None:
            pytest.fail(self.failure(item.nodeid), pytrace=False)
        item.stash[_OUTCOME] = outcome
        item.user_properties += [("perfgate_verdict", outcome.verdict),
                                 ("perfgate_decision_run", outcome.decision_run_url or "")]
        if outcome.verdict in _FAILING or (outcome.verdict == "rerun" and
                                           self.config.getoption("perfgate_rerun") == "fail"):
            pytest.fail(outcome.message, pytrace=False)
        if outcome.verdict == "rerun":
            pytest.skip(outcome.message)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        outcome = item.stash.get(_OUTCOME, None)
        if report.when == "call" and outcome is not None:
            report.perfgate_verdict = outcome.verdict
            if report.skipped and outcome.verdict == "rerun":  # at the test, not at this module's pytest.skip
                line = item.location[1]
                report.longrepr = (str(item.path), (line or 0) + 1, outcome.message)
        return report

    def pytest_report_teststatus(self, report, config):
        if getattr(report, "perfgate_verdict", None) == "rerun" and report.when == "call" and report.skipped:
            return _RERUN_CATEGORY, "R", ("RERUN", {"yellow": True})
        return None

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config) -> None:
        if self._own_shared and not self.declared:  # the xdist controller: what the worker that ran it left
            self._load_shared()
        if not self.declared or not (self.ran or self.refused):
            return
        for line in summary_lines(self):
            if line.startswith("="):
                terminalreporter.write_sep("=", line.strip("= "))
            else:
                terminalreporter.write_line(line)

    # the suite ------------------------------------------------------------------------------------

    def ensure_run(self) -> None:
        """Declare every entry and run the suite, once (never raises: each test reports what failed)."""
        if self.ran:
            return
        if self.shared is not None and not self._own_shared:
            self._ensure_run_shared()
            return
        self._ensure_run_here()

    def _ensure_run_shared(self) -> None:
        """Under xdist: run the suite in the first worker that needs it, once; the others wait and read it."""
        import fcntl

        with open(self.shared / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held while the suite runs: the other workers wait here
            if self._load_shared():
                return
            if (self.shared / "started").exists():  # the worker that ran it ended before writing its outcomes
                self.ran = True
                self.error = ("the worker that ran the suite ended before it was judged; its runs are in the "
                              f"store under groups {self.suite_name}/{self.session}/...")
                return
            (self.shared / "started").write_text(os.environ.get("PYTEST_XDIST_WORKER", "?"))
            self._ensure_run_here()
            self._save_shared()

    _SHARED_FIELDS = ("declared", "refused", "outcomes", "summary", "error")

    def _save_shared(self) -> None:
        state = {name: _plain(getattr(self, name)) for name in self._SHARED_FIELDS}
        state["declared"] = list(self.declared)
        tmp = self.shared / f"outcomes.{os.getpid()}.tmp"
        with open(tmp, "wb") as handle:
            pickle.dump(state, handle)
        os.replace(tmp, self.shared / "outcomes.pickle")  # whole or absent, never half

    def _load_shared(self) -> bool:
        """Take the outcomes another worker left (``False``: none yet)."""
        path = None if self.shared is None else self.shared / "outcomes.pickle"
        if path is None or not path.exists():
            return False
        with open(path, "rb") as handle:
            state = pickle.load(handle)
        items = self.declared
        for name in self._SHARED_FIELDS:
            setattr(self, name, state[name])
        self.declared = {nodeid: items.get(nodeid) for nodeid in state["declared"]}
        self.ran = True
        return True

    def _ensure_run_here(self) -> None:
        self.ran = True
        entries = self._entries()
        if not entries:
            return
        saved = os.environ.get("PYTHONPATH")
        roots = [root for root in _workload_roots(entries) if root not in (saved or "").split(os.pathsep)]
        if roots:  # for the attempts' children, and the fork runner's server
            os.environ["PYTHONPATH"] = os.pathsep.join(roots + ([saved] if saved else []))
        try:
            self._run(entries)
        except BaseException as exc:
            if type(exc).__name__ == "Terminated":  # SIGTERM (harness.Terminated): the suite ended its runs
                self.error = str(exc)
                pytest.exit(f"perfgate: {exc}; the suite's runs were ended KILLED and the session stops",
                            returncode=143)
            if not isinstance(exc, Exception):  # Ctrl-C: pytest's own interrupt (exit 2)
                raise
            # every declared test fails with it; the traceback is kept
            import traceback

            from .errors import PerfgateError

            if isinstance(exc, PerfgateError):
                self.error = f"{type(exc).__name__}: {exc}"
            else:
                self.error = "".join(traceback.format_exception(exc)).rstrip()
        finally:
            if roots:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved

    def head(self) -> dict:
        """The suite file's ``[suite]`` table the options give."""
        head = {"name": self.suite_name, "experiment": self.config.getoption("perfgate_experiment"),
                "alpha": self.config.getoption("perfgate_alpha"), "control": self.config.getoption("perfgate_control")}
        return {key: value for key, value in head.items() if value is not None}

    def _entries(self) -> list[dict]:
        """Each declared test's entry, checked by the suite's own parser one by one: a refused one fails its test."""
        from .errors import PerfgateError
        from .suite import parse_suite

        entries = []
        for nodeid, item in self.declared.items():
            source = f"@pytest.mark.{MARKER}"
            try:
                entry = {"name": nodeid, "group": f"{self.suite_name}/{self.session}/{nodeid}", **declaration(item)}
                if self.against is not None:
                    entry = against(entry, self.against)
                parse_suite({"suite": self.head(), "entry": [entry]}, source=source)
            except (PerfgateError, ValueError) as exc:
                message = str(exc)
                for prefix in (f"{source}: [[entry]] 1 ({nodeid}): ", f"{source}: "):
                    message = message.removeprefix(prefix)
                self.refused[nodeid] = f"{type(exc).__name__}: {message}"
                continue
            entries.append(entry)
        return entries

    def _run(self, entries: list[dict]) -> None:
        from .suite import parse_suite

        spec = parse_suite({"suite": self.head(), "entry": entries}, source=f"@pytest.mark.{MARKER}")
        self._say(f"perfgate: running {len(entries)} comparison{'s' if len(entries) > 1 else ''} as suite "
                  f"{spec.name!r} (groups {spec.name}/{self.session}/...)"
                  + ("" if self.against is None else f": each candidate from the working tree against {self.against}"
                                                     ", no slower?"))
        verbose = self.config.get_verbosity() > 0

        def on_attempt(label: str, result) -> None:
            if verbose:
                self._say(f"  {label}: " + (f"{result.latency_ms:.3g} ms" if result.ok else f"failed: {result.failure}"))

        with warnings.catch_warnings():
            # the session's warning filters (``error``, say) are for its tests; the suite's libraries
            # run under Python's defaults, as the command line runs them
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning,
                             ResourceWarning):
                warnings.simplefilter("ignore", category)
            self.summary = self._run_leaving_out_setup_errors(spec, entries, on_attempt)
        if self.summary is None:
            return
        for entry, result in zip(self.summary["entries"], self.summary["results"]):
            self.outcomes[entry["name"]] = _outcome(entry, result, self.summary)

    def _run_leaving_out_setup_errors(self, spec, entries: list[dict], on_attempt) -> dict | None:
        """The suite's summary; an entry that cannot be set up (its code missing at a revision, its
        workload not importable: an error the suite names for it, ``exc.suite_entry``) fails its own
        test, and the suite runs again without it, in fresh groups (the stopped run's runs stay,
        ended KILLED, saying why); ``None`` when no entry is left."""
        from .suite import parse_suite, run

        tries = 0
        while True:
            try:
                return run(spec, progress=False, on_attempt=on_attempt)
            except Exception as exc:  # noqa: BLE001 - only an entry's own setup error is handled here
                name = getattr(exc, "suite_entry", None)
                if name is None or name not in {entry["name"] for entry in entries}:
                    raise
                message = str(exc).removeprefix(f"suite entry {name!r}: ")
                self.refused[name] = f"{type(exc).__name__}: {message}"
                self._say(f"perfgate: {name}: could not be set up ({message.splitlines()[0]}); the others run again "
                          "without it")
            entries = [entry for entry in entries if entry["name"] != name]
            if not entries:
                return None
            tries += 1
            entries = [{**entry, "group": f"{self.suite_name}/{self.session}-{tries}/{entry['name']}"}
                       for entry in entries]
            spec = parse_suite({"suite": self.head(), "entry": entries}, source=f"@pytest.mark.{MARKER}")

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)
        else:
            reporter.write_line(line)

    def outcome(self, nodeid: str) -> Outcome | None:
        return self.outcomes.get(nodeid)

    def failure(self, nodeid: str) -> str:
        """Why a declared test has no outcome: its declaration was refused, or the suite did not run."""
        if nodeid in self.refused:
            return f"perfgate: the comparison declared here was refused: {self.refused[nodeid]}"
        if self.error is not None:
            return f"perfgate: the suite did not run: {self.error}"
        return "perfgate: the suite judged no entry for this test"


def _plain(value: Any) -> Any:
    """A copy of an outcome's figures another process can read (read-only mappings as dicts)."""
    from collections.abc import Mapping

    if isinstance(value, Outcome):
        return dataclasses.replace(value, result=_plain(value.result))
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - an object only this process can hold: its words
        return repr(value)
    return value


def _outcome(entry: dict, result: dict, summary: dict) -> Outcome:
    from .rules import REASONS, SUITE_REASONS
    from .tracking import decision_summary

    verdict = entry["verdict"]
    lines = [f"perfgate: {verdict.upper()} in suite {summary['suite']!r}"]
    if verdict != entry["own_verdict"]:
        why = SUITE_REASONS.get(entry["reason"]) or REASONS.get(entry["reason"], entry["reason"])
        withheld = f" (withheld: {', '.join(entry['withheld_checks'])})" if entry.get("withheld_checks") else ""
        lines.append(f"the suite's error control: {why}{withheld}; the entry's own rule said:")
    lines += decision_summary(result)
    for arm in ("baseline", "candidate"):
        reasons = (result.get(arm) or {}).get("failure_reasons") or []
        if reasons:
            counted = {reason: reasons.count(reason) for reason in reasons}
            lines.append(f"{arm} attempts failed: " + "; ".join(f"{reason} (x{count})" if count > 1 else reason
                                                                for reason, count in counted.items()))
    deciding = entry.get("deciding") or {}  # the deciding method's figures, whatever the method
    return Outcome(name=entry["name"], verdict=verdict, own_verdict=entry["own_verdict"], reason=entry["reason"],
                   message="\n".join(lines), ratio=deciding.get("ratio"),
                   ratio_ci_low=deciding.get("ratio_ci_low"), ratio_ci_high=deciding.get("ratio_ci_high"),
                   group=entry["group"], decision_run_id=entry.get("decision_run_id"),
                   decision_run_url=entry.get("decision_run_url"), result=result)


# --- the summary table -----------------------------------------------------------------------------

_LOCAL_LINK = ", then open "  # tracking._client.ui_link's form for a local store


def _number(value: float) -> str:
    """A ratio with three decimals, or in scientific notation where three decimals would show it as 0.000
    (a ratio of 1.5e-4) or hide its size (10,000 and more)."""
    return f"{value:.3e}" if value != 0 and not 1e-3 <= abs(value) < 1e4 else f"{value:.3f}"


def _figure(outcome: Outcome) -> str:
    """The deciding method's ratio with its interval (where it has one), else "n/a"."""
    if outcome.ratio is None:
        return "n/a"
    low, high = outcome.ratio_ci_low, outcome.ratio_ci_high
    if low is None and high is None and ((outcome.result or {}).get("deciding") or {}).get("confidence") is None:
        return _number(outcome.ratio)  # a method without an interval
    return f"{_number(outcome.ratio)} [{'-inf' if low is None else _number(low)}, {'inf' if high is None else _number(high)}]"


def summary_lines(gate: _Gate) -> list[str]:
    """The end of the session: the suite's verdict, then a row per declared test (verdict, ratio [interval], run)."""
    from .tracking import UI_ADDRESS  # no mlflow

    summary = gate.summary
    title = f"perfgate suite {gate.suite_name!r}"
    if summary is not None:
        title += f": {summary['decision'].upper()}"
    lines = [f"= {title} ="]
    rows = [("test", "verdict", "ratio [interval]", "decision run")]
    local = None
    for nodeid in gate.declared:
        outcome = gate.outcome(nodeid)
        if outcome is None:
            word = "refused" if nodeid in gate.refused else "not run"
            rows.append((nodeid, word, "", "(see the test's failure)"))
            continue
        verdict = outcome.verdict if outcome.verdict == outcome.own_verdict else \
            f"{outcome.verdict} (own: {outcome.own_verdict})"
        link = outcome.decision_run_url or ""
        if _LOCAL_LINK in link:  # a local store: the command once, below the table; the page in the row
            local, link = link.split(_LOCAL_LINK, 1)
            link = link.removeprefix(UI_ADDRESS)
        rows.append((nodeid, verdict, _figure(outcome), link))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3])
    if summary is not None:
        confidence = {result.get("confidence") for result in summary["results"]} - {None}
        if len(confidence) == 1:
            lines.append(f"ratio: candidate / baseline of the judged figure, {confidence.pop():.0%} interval; the "
                         "error across the tests controlled by "
                         f"{'Holm' if summary['control'] == 'holm' else 'Benjamini-Hochberg'} at {summary['alpha']:g}")
        if summary.get("suite_run_url"):
            run_link = summary["suite_run_url"]
            if _LOCAL_LINK in run_link:
                local, run_link = run_link.split(_LOCAL_LINK, 1)
                run_link = run_link.removeprefix(UI_ADDRESS)
            lines.append(f"suite run: {run_link}")
    if local:
        lines.append(f"open the links with: {local}, each under the address it prints")
    for nodeid in gate.declared:
        outcome = gate.outcome(nodeid)
        if outcome is not None and outcome.verdict == "rerun":
            lines.append(f"RERUN {nodeid}: {_rerun_text(outcome)}")
    if gate.error is not None:
        lines.append(f"the suite did not run: {gate.error.splitlines()[-1]}")
    return lines


def _rerun_text(outcome: Outcome) -> str:
    """Why a rerun, in one line, and what would settle it."""
    from .rules import SUITE_REASONS
    from .tracking import reason_text

    text = SUITE_REASONS.get(outcome.reason) or reason_text(outcome.result)
    attempts = outcome.result.get("recommended_attempts")
    if attempts:
        text += f"; about {attempts} attempts per arm would likely settle it"
    return text
