"""The pytest plugin end to end: pytester sessions that declare comparisons, run them as one suite on a real
SQLite store, and get each verdict as their tests' outcome; without --perfgate they are skipped, cheaply."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.pytest_plugin import declaration, declares
from mlflow_perfgate.workloads import callables

from conftest import fresh_sqlite

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("mlflow", "torch", "scipy", "pandas", "numpy")

#: Callables in a module of their own, in a folder pytest puts on sys.path (the session's cwd is
#: not that folder): an attempt's child finds them only if the plugin says where they are.
PERF_FNS = """
import os, signal, time

def sleep20():
    time.sleep(0.02)

def sleep20_again():
    time.sleep(0.02)

def sleep2():
    time.sleep(0.002)

def boom():
    raise RuntimeError("boom in step")

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def hang():
    time.sleep(60)
"""

#: A session of every outcome: the module's marker gives defaults only (the plain test is no comparison).
GATE = """
import pytest
from perf_fns import boom, die, hang, sleep2, sleep20, sleep20_again

pytestmark = pytest.mark.perfgate(mode="non_regression", conditions={"steps": 3, "warmup": 1}, min_valid_runs=3)


def test_plain():
    assert True


# identical sleeps: a wide margin and tail bound, so that a busy machine's jitter cannot make the accept a rerun
@pytest.mark.perfgate(baseline=sleep20, candidate=sleep20_again, attempts=5, margin=0.5, maximum_p95_ratio=1.5)
def test_accept(perfgate):
    assert perfgate.verdict == "accept" and perfgate.decision_run_id
    assert perfgate.ratio_ci_low <= perfgate.ratio <= perfgate.ratio_ci_high


@pytest.mark.perfgate(baseline=sleep2, candidate=sleep20, attempts=5)
def test_reject():
    raise AssertionError("a rejected comparison's body does not run")


@pytest.mark.perfgate(workload="tinylm", conditions={"input_shape": "2,16"}, change={"checkpoint": True}, attempts=2)
def test_rerun():
    raise AssertionError("a rerun's body does not run")


@pytest.mark.perfgate(baseline=sleep2, candidate=boom, attempts=3)
def test_crash():
    pass


@pytest.mark.perfgate(baseline=sleep2, candidate=die, attempts=3)
def test_die():
    pass


# whole attempts: a hang in a round's child holding both arms (the default) fails both arms
@pytest.mark.perfgate(baseline=sleep2, candidate=hang, attempts=2, timeout_s=3, interleave="attempts")
def test_hang():
    pass
"""

ROW = r"^{test}\s+{verdict}\s+{figure}\s+(?P<link>\S+)$"
INTERVAL = r"(?P<ratio>\d+\.\d{3}) \[(?P<low>\d+\.\d{3}), (?P<high>\d+\.\d{3})\]"


def gate_folder(pytester, source: str) -> Path:
    folder = pytester.mkdir("bench")
    (folder / "perf_fns.py").write_text(PERF_FNS)
    (folder / "test_gate.py").write_text(textwrap.dedent(source))
    return folder


def table(output: str) -> dict[str, str]:
    """The summary table's rows by test id."""
    lines = output.split(" perfgate suite ", 1)[1].splitlines()[1:]
    return {line.split()[0]: line for line in lines if line.startswith("bench/")}


def test_importing_the_plugin_loads_nothing_heavy_and_takes_little_time():
    code = ("import json, sys, time\nimport pytest\nstart = time.perf_counter()\n"
            "import mlflow_perfgate.pytest_plugin\nelapsed = time.perf_counter() - start\n"
            f"print(json.dumps([elapsed, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    elapsed, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert heavy == [] and elapsed < 0.5, (elapsed, heavy)


def test_without_the_option_declared_tests_are_skipped_and_nothing_heavy_loads(pytester):
    folder = gate_folder(pytester, GATE + textwrap.dedent(f"""

        class TestDeclaredAbove:
            pytestmark = pytest.mark.perfgate(change={{"checkpoint": True}})

            def test_inherits_the_declaration(self):
                pass


        def test_nothing_heavy_was_imported():
            import sys

            assert sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}) == []
        """))
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider", str(folder))
    result.assert_outcomes(passed=2, skipped=7)
    assert result.ret == 0
    assert len(re.findall(r"SKIPPED \[1\] bench/test_gate.py(:\d+)?: perfgate comparison: run with --perfgate",
                          result.stdout.str())) == 7
    assert "perfgate suite" not in result.stdout.str()
    assert not (pytester.path / "mlflow.db").exists()  # nothing was logged anywhere


def test_a_declaration_merges_the_markers_above_it_and_two_callables_differ_in_impl_only(pytester):
    folder = gate_folder(pytester, """
        import pytest
        from perf_fns import sleep2, sleep20

        pytestmark = pytest.mark.perfgate(conditions={"steps": 3, "warmup": 1}, mode="non_regression",
                                          min_valid_runs=3)

        def test_plain():
            pass

        class TestGroup:
            pytestmark = pytest.mark.perfgate(conditions={"steps": 5}, attempts=4)

            @pytest.mark.perfgate(change={"checkpoint": True}, conditions={"input_shape": "2,16"}, margin=0.1)
            def test_tinylm(self):
                pass

        @pytest.mark.perfgate(baseline=sleep2, candidate=sleep20, thresholds={"maximum_p95_ratio": 1.2})
        def test_callables():
            pass
        """)
    items = {item.name: item for item in pytester.getitems(folder / "test_gate.py")}
    assert not declares(items["test_plain"]) and declares(items["test_tinylm"]) and declares(items["test_callables"])
    assert declaration(items["test_tinylm"]) == {
        "mode": "non_regression", "attempts": 4, "change": {"checkpoint": True}, "margin": 0.1,
        "set": {"steps": 5, "warmup": 1, "input_shape": "2,16"}, "thresholds": {"min_valid_runs": 3}}
    pair = declaration(items["test_callables"])
    assert pair["workload"] == callables.WORKLOAD and pair["change"] == {"impl": "candidate"}
    assert pair["thresholds"] == {"min_valid_runs": 3, "maximum_p95_ratio": 1.2}
    assert {key: pair["set"][key] for key in ("impl", "baseline_callable", "candidate_callable", "steps")} == {
        "impl": "baseline", "baseline_callable": "perf_fns:sleep2", "candidate_callable": "perf_fns:sleep20",
        "steps": 3}
    # the factory builds the arm impl names; each step calls its callable
    sys.path.insert(0, str(folder))
    try:
        arm = callables.make_workload({**pair["set"], **pair["change"], "calls_per_step": 2})
        assert arm.function.__name__ == "sleep20" and arm.calls_per_step == 2 and arm.quality() == 1.0
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("perf_fns", None)
    with pytest.raises(ValueError, match="impl must be one of"):
        callables.make_workload({"impl": "other"})


def test_a_callable_must_be_importable_by_name():
    def nested():
        pass

    with pytest.raises(ValueError, match="cannot be imported by name in the attempt's process"):
        callables.callable_name(nested, "baseline")
    with pytest.raises(ValueError, match="cannot be imported by name"):
        callables.callable_name(lambda: None, "candidate")
    with pytest.raises(ValueError, match="the same callable"):
        callables.callable_conditions(callables.make_workload, callables.make_workload)
    with pytest.raises(ValueError, match=r"conditions \['impl'\] are set from baseline= and candidate="):
        callables.callable_conditions(callables.make_workload, callables.callable_name, {"impl": "x"})


def test_refused_declarations_fail_their_tests_with_the_product_s_words_and_nothing_runs(pytester, tmp_path,
                                                                                       _migrated_sqlite):
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    folder = gate_folder(pytester, """
        import pytest
        from perf_fns import sleep2

        @pytest.mark.perfgate(change={"checkpoint": True, "dtype": "bf16"})
        def test_two_variables():
            pass

        @pytest.mark.perfgate(change={"checkpoint": True}, objective="speed")
        def test_unknown_objective():
            pass

        @pytest.mark.perfgate(change={"checkpoint": True}, steps=3)
        def test_a_condition_given_as_a_threshold():
            pass

        @pytest.mark.perfgate(baseline=sleep2, candidate=lambda: None)
        def test_a_lambda():
            pass

        @pytest.mark.perfgate(conditions={"steps": 3})
        def test_no_change():
            pass

        def test_the_fixture_without_a_declaration(perfgate):
            pass
        """)
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tracking-uri", uri, "-p", "no:cacheprovider",
                                           str(folder))
    result.assert_outcomes(failed=5, errors=1)  # the fixture's refusal is an error at setup, as pytest's are
    out = result.stdout.str()
    for words in ("InputError: change must name exactly one variable, got ['checkpoint', 'dtype']",
                  "PolicyError: objective must be one of ['latency', 'memory', 'throughput'], got 'speed'",
                  "PolicyError: unknown thresholds ['steps']; expected some of ['min_valid_runs',",
                  "ValueError: candidate '<lambda>' (module 'test_gate') cannot be imported by name in the attempt's",
                  "@pytest.mark.perfgate needs change={variable: value}",
                  "bench/test_gate.py::test_the_fixture_without_a_declaration declares none"):
        assert words in out, words
    rows = table(out)
    assert len(rows) == 5 and all(re.search(r"\srefused\s", row) for row in rows.values())
    assert MlflowClient(tracking_uri=uri).search_runs(["0"]) == []  # no suite ran, nothing was logged


def test_a_store_that_cannot_be_reached_fails_every_comparison_and_a_bad_uri_is_a_usage_error(pytester):
    from conftest import free_port

    folder = gate_folder(pytester, """
        import pytest
        from perf_fns import sleep2, sleep20

        @pytest.mark.perfgate(baseline=sleep2, candidate=sleep20)
        def test_one():
            pass

        @pytest.mark.perfgate(baseline=sleep20, candidate=sleep2)
        def test_two():
            pass

        @pytest.mark.skip(reason="not today")
        @pytest.mark.perfgate(baseline=sleep2, candidate=sleep20)
        def test_skipped():
            pass
        """)
    dead = f"http://127.0.0.1:{free_port()}"
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tracking-uri", dead, "-p", "no:cacheprovider",
                                           str(folder), timeout=300)
    result.assert_outcomes(failed=2, skipped=1)
    out = result.stdout.str()
    # in the failures' sections (the short summary repeats them whole where pytest sees CI set)
    failures = out.split("short test summary info")[0]
    assert failures.count("perfgate: the suite did not run: StoreUnavailable:") == 2, out[-3000:]
    assert len(table(out)) == 2 and "bench/test_gate.py::test_skipped " not in out  # a skipped test is no entry
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tracking-uri", "sqllite:///x.db", str(folder))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perfgate-tracking-uri:" in result.stderr.str() and "sqllite" in result.stderr.str()
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-alpha", "0.7", str(folder))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perfgate options: alpha must be in the range (0, 0.3], got 0.7" in result.stderr.str()


@pytest.mark.slow
def test_a_session_s_comparisons_run_as_one_suite_and_each_verdict_is_its_test_s_outcome(pytester, tmp_path,
                                                                                        _migrated_sqlite,
                                                                                        monkeypatch):
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    folder = gate_folder(pytester, GATE)
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tracking-uri", uri, "--perfgate-experiment",
                                           "plugin-e2e", "-v", "-p", "no:cacheprovider", str(folder), timeout=600)
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("perfgate_rerun")) == (2, 4, 1), out[-6000:]
    assert result.ret == 1
    assert re.search(r"test_gate.py::test_rerun RERUN", out) and "perfgate: running 6 comparisons as suite" in out

    # each failure says why, in the product's words, with the attempts' own failures
    failures = out.split("= FAILURES =", 1)[1]
    by_test = dict(re.findall(r"_{3,} (test_\w+) _{3,}\n(.*?)(?=\n_{3,} test_|\n=)", failures, re.DOTALL))
    assert sorted(by_test) == ["test_crash", "test_die", "test_hang", "test_reject"]
    assert "REJECT in suite 'pytest'" in by_test["test_reject"] and "no_regression_ok: FAILED" in by_test["test_reject"]
    assert "a rejected comparison's body" not in out
    assert "candidate attempts failed: exception: RuntimeError: boom in step (x3)" in by_test["test_crash"]
    assert "failure_rate_ok: FAILED: candidate failure rate 100.0% (3 of 3)" in by_test["test_die"]
    assert "SIGKILL" in by_test["test_die"] or "signal 9" in by_test["test_die"], by_test["test_die"]
    assert "candidate attempts failed: timeout after 3.0s (x2)" in by_test["test_hang"]

    # the table: a row per comparison, its verdict, the ratio with its interval, its decision run
    rows = table(out)
    assert sorted(rows) == sorted(f"bench/test_gate.py::test_{name}" for name in
                                  ("accept", "reject", "rerun", "crash", "die", "hang"))
    links = {}
    for name, verdict, figure in (("accept", "accept", INTERVAL), ("reject", "reject", INTERVAL),
                                  ("rerun", "rerun", "n/a"), ("crash", "reject", "n/a"), ("die", "reject", "n/a"),
                                  ("hang", "reject", "n/a")):
        test = f"bench/test_gate.py::test_{name}"
        match = re.match(ROW.format(test=re.escape(test), verdict=verdict, figure=figure), rows[test])
        assert match, rows[test]
        if figure == INTERVAL:
            assert float(match["low"]) <= float(match["ratio"]) <= float(match["high"])
        links[test] = match["link"]
    assert float(re.match(ROW.format(test=".*", verdict="reject", figure=INTERVAL),
                          rows["bench/test_gate.py::test_reject"])["low"]) > 2  # 20 ms against 2 ms
    assert f"open the links with: mlflow ui --backend-store-uri {uri}" in out
    assert re.search(r"RERUN bench/test_gate.py::test_rerun: an arm has fewer successful attempts than "
                     r"min_valid_runs: baseline 2 of 2 attempts succeeded, candidate 2 of 2; min_valid_runs 3", out)

    # MLflow holds one suite, its six decisions nested under it, each the run its row links to
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    suites = pg.tracking.suite_decisions(experiment_name="plugin-e2e", name="pytest")
    assert len(suites) == 1 and suites.iloc[0]["decision"] == "reject" and suites.iloc[0]["entries"] == 6
    frame = pg.decisions(experiment_name="plugin-e2e", suite="pytest")
    assert len(frame) == 6 and all(group.startswith("pytest/") for group in frame["group"])
    verdicts = dict(zip(frame["suite_entry"], frame["suite_decision"]))
    assert verdicts == {"bench/test_gate.py::test_accept": "accept", "bench/test_gate.py::test_reject": "reject",
                        "bench/test_gate.py::test_rerun": "rerun", "bench/test_gate.py::test_crash": "reject",
                        "bench/test_gate.py::test_die": "reject", "bench/test_gate.py::test_hang": "reject"}
    client = MlflowClient()
    for entry, run_id in zip(frame["suite_entry"], frame["run_id"]):
        assert links[entry].endswith(f"/runs/{run_id}")
        assert client.get_run(run_id).data.tags["perfgate.suite_run"] == suites.iloc[0]["run_id"]
    assert frame.set_index("suite_entry").loc["bench/test_gate.py::test_hang", "candidate_failed_runs"] == 2


@pytest.mark.slow
def test_a_rerun_fails_its_test_when_asked_and_the_store_comes_from_the_environment(pytester, tmp_path,
                                                                                  _migrated_sqlite, monkeypatch):
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    folder = gate_folder(pytester, """
        import pytest
        from perf_fns import sleep2, sleep20

        @pytest.mark.perfgate(baseline=sleep2, candidate=sleep20, attempts=2, min_valid_runs=3,
                              conditions={"steps": 2, "warmup": 0})
        def test_too_few():
            pass
        """)
    for _ in range(2):  # a second session records into fresh groups: nothing to resume, nothing refused
        result = pytester.runpytest_subprocess("--perfgate", "--perfgate-rerun", "fail", "--perfgate-suite", "nightly",
                                               "-p", "no:cacheprovider", str(folder), timeout=300)
        result.assert_outcomes(failed=1)
        assert "perfgate: RERUN in suite 'nightly'" in result.stdout.str()
    frame = pg.decisions(suite="nightly")
    assert list(frame["suite_decision"]) == ["rerun", "rerun"] and frame["group"].nunique() == 2


def test_the_docs_declarations_are_valid_entries(pytester):
    from helpers import blocks, doc_section

    source = blocks(doc_section("how-to/suites.md", "In pytest"), "python")
    assert len(source) == 1
    path = pytester.makepyfile(test_readme_gate=source[0])
    (pytester.path / "mybench.py").write_text("def slow_op():\n    sum(range(1000))\n\n\n"
                                              "def fast_op():\n    sum(range(10))\n")
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider", str(path))
    result.assert_outcomes(skipped=2)
    from mlflow_perfgate.suite import parse_suite

    pytester.syspathinsert()
    items = pytester.getitems(path)
    entries = [{"name": item.name, **declaration(item)} for item in items if declares(item)]
    assert len(entries) == 2
    parse_suite({"suite": {"name": "readme"}, "entry": entries})  # raises on any refused declaration


@pytest.mark.slow
def test_under_xdist_the_suite_runs_once_for_every_worker_on_a_fresh_store(pytester, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"  # no tables yet: the workers must not race to make them
    folder = gate_folder(pytester, """
        import pytest
        from perf_fns import sleep2, sleep20, sleep20_again

        pytestmark = pytest.mark.perfgate(conditions={"steps": 3, "warmup": 1}, min_valid_runs=3, attempts=6)

        @pytest.mark.perfgate(baseline=sleep20, candidate=sleep2, mode="improvement")
        def test_faster(perfgate):
            assert perfgate.verdict == "accept"

        @pytest.mark.perfgate(baseline=sleep2, candidate=sleep20, mode="non_regression")
        def test_slower():
            pass

        @pytest.mark.perfgate(baseline=sleep20, candidate=sleep20_again, mode="non_regression")
        def test_same():
            pass

        @pytest.mark.perfgate(baseline=sleep20_again, candidate=sleep2, mode="improvement")
        def test_faster_too(perfgate):
            assert perfgate.group.startswith("pytest/")
        """)
    result = pytester.runpytest_subprocess("-n", "2", "--perfgate", "--perfgate-tracking-uri", uri,
                                           "--perfgate-experiment", "xdist", "-p", "no:cacheprovider", str(folder),
                                           timeout=600)
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 2 and outcomes.get("failed") == 1, out[-6000:]
    assert "REJECT in suite 'pytest'" in out  # the rejected test's failure, from whichever worker read it
    rows = table(out)  # the controller prints the table the worker that ran the suite left
    assert sorted(rows) == sorted(f"bench/test_gate.py::test_{name}" for name in
                                  ("faster", "slower", "same", "faster_too")), out[-4000:]

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    suites = pg.tracking.suite_decisions(experiment_name="xdist", name="pytest")
    assert len(suites) == 1 and suites.iloc[0]["entries"] == 4  # once, not once per worker
    frame = pg.decisions(experiment_name="xdist", suite="pytest")
    assert len(frame) == 4 and frame["group"].nunique() == 4


def test_tiny_and_huge_ratios_are_printed_in_scientific_notation_in_the_table():
    """Issue 43: a ratio of 1.5e-4 printed as 0.000 [0.000, 0.000]."""
    from mlflow_perfgate.pytest_plugin import Outcome, _figure

    def figure(ratio, low, high):
        return _figure(Outcome(name="t", verdict="accept", own_verdict="accept", reason="r", message="m",
                               ratio=ratio, ratio_ci_low=low, ratio_ci_high=high, group="g", decision_run_id=None,
                               decision_run_url=None))

    assert figure(1.5e-4, 1.2e-4, 1.9e-4) == "1.500e-04 [1.200e-04, 1.900e-04]"
    assert figure(0.931, 0.9, None) == "0.931 [0.900, inf]"
    assert figure(25000.0, 0.5, 3e4) == "2.500e+04 [0.500, 3.000e+04]"


INLINE = """
import time


def slow_step():
    time.sleep(0.020)  # 20x the fast one: a busy machine's sleep overshoot (ms) leaves it far apart


def fast_step():
    time.sleep(0.001)


def test_fast_is_faster(perfgate_compare):
    result = perfgate_compare(slow_step, fast_step, rounds=8, steps=6, warmup=1)
    assert result["decision"] == "accept", result["report"]
    assert result["deciding"]["improvement"] > 0.5


def test_slow_is_not_faster(perfgate_compare):
    result = perfgate_compare(fast_step, slow_step, rounds=8, steps=6, warmup=1, mode="non_regression")
    assert result["decision"] == "reject"


def test_what_it_sets_itself_is_refused(perfgate_compare):
    import pytest
    from mlflow_perfgate.errors import InputError

    with pytest.raises(InputError, match=r"sets \['group', 'interleave'\] itself"):
        perfgate_compare(slow_step, fast_step, interleave="attempts", group="mine")
    with pytest.raises(InputError, match=r"--attempts N is rounds=N"):
        perfgate_compare(slow_step, fast_step, rounds=1)
"""


@pytest.mark.slow
def test_the_inline_fixture_times_two_callables_in_the_test_body(pytester, tmp_path, _migrated_sqlite):
    """pytest-benchmark users reach first for a fixture in the test body: ``perfgate_compare(old, new)`` runs
    both step-interleaved in the test's process, records the comparison, and returns its decision."""
    folder = pytester.mkdir("inline")
    (folder / "test_inline.py").write_text(INLINE)
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tracking-uri", uri, "--perfgate-experiment",
                                           "inline", "-p", "no:cacheprovider", str(folder), timeout=300)
    out = result.stdout.str()
    assert result.parseoutcomes().get("passed") == 3, out[-4000:]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("inline")
    runs = client.search_runs([experiment.experiment_id], "tags.`perfgate.kind` = 'decision'")
    assert sorted(run.data.tags["perfgate.decision"] for run in runs) == ["accept", "reject"]
    assert all("/inline/" in run.data.tags["perfgate.group"] for run in runs)
    skipped = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider", str(folder))  # without --perfgate
    assert skipped.parseoutcomes().get("skipped") == 3


#: A declared comparison of the toy repository's bench (its change, warmup, is folded into the fixed
#: conditions by --perfgate-against: the candidate is what runs at both revisions).
AGAINST_TEST = """
import pytest

BUSY = {"model": "busy", "input_shape": "1,1", "batch_size": 1, "dtype": "fp32", "device": "cpu",
        "measurement_method": "wall_ms", "warmup": 1, "steps": 8}


@pytest.mark.perfgate(workload="bench:make", conditions=BUSY, change={"warmup": 2}, attempts=6)
def test_bench_is_no_slower():
    pass


@pytest.mark.perfgate(workload="bench:make", conditions={**BUSY, "revision": "main"}, change={"warmup": 2})
def test_places_its_own_arms():
    pass
"""


def _pytest_in(repo: Path, *argv: str, uri: str | None = None) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` as typed in the repository's checkout, in a fresh process."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv], cwd=repo,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_against_a_revision_runs_the_working_tree_against_it_in_lockstep(tmp_path, _migrated_sqlite):
    """--perfgate-against main: each declared comparison's candidate from the working tree (an
    uncommitted change that doubles the step) against the same at main, one child per arm; a 2x
    slowdown fails its test, and the attempts record both revisions (main's sha, working-tree)."""
    from helpers import busy_bench, busy_repository, git

    repo = tmp_path / "repo"
    main_sha, = busy_repository(repo, [2.0])
    (repo / "test_perf.py").write_text(AGAINST_TEST)
    git(repo, "add", "test_perf.py")
    git(repo, "commit", "-q", "-m", "the perf test")
    main_sha = git(repo, "rev-parse", "HEAD")
    (repo / "bench.py").write_text(busy_bench("4.0"))  # not committed: the working tree is what is gated
    # a new benchmark, only in the working tree: main has no code to run it, so that test fails, naming
    # the arm, and the others are still judged (its callables never come from the working tree at main)
    (repo / "test_new.py").write_text("import pytest\n\n\ndef slow_op():\n    sum(range(2000))\n\n\n"
                                      "def fast_op():\n    sum(range(1000))\n\n\n"
                                      "@pytest.mark.perfgate(baseline=slow_op, candidate=fast_op, attempts=6)\n"
                                      "def test_new_op():\n    pass\n")
    uri = fresh_sqlite(tmp_path, _migrated_sqlite)
    done = _pytest_in(repo, "--perfgate", "--perfgate-against", "main", "--perfgate-tracking-uri", uri, "-rA")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "each candidate from the working tree against main" in out
    assert re.search(r"test_perf.py::test_bench_is_no_slower\s+reject", out), out
    assert "no_regression_ok: FAILED" in out and "slower" in out
    # a comparison that places its own arms is refused with the product's words; the other still ran
    assert "the comparison declares revision itself" in out
    assert re.search(r"FAILED test_new.py::test_new_op - .*could not be set up|the baseline's revision \w+ has no "
                     r"test_new.py", out), out
    client = MlflowClient(tracking_uri=uri)
    attempts = client.search_runs(["0"], "tags.\"perfgate.kind\" = 'attempt'", max_results=100)
    revisions = {(run.data.tags["perfgate.arm"], run.data.params["revision"]) for run in attempts}
    assert revisions == {("baseline", main_sha), ("candidate", "working-tree")}
    assert {run.data.params["warmup"] for run in attempts} == {"2"}  # the declared candidate, at both revisions
    assert git(repo, "worktree", "list").count("\n") == 0  # main's worktree is gone again


def test_against_is_refused_in_one_line_for_a_revision_git_cannot_resolve_or_without_perfgate(tmp_path):
    from helpers import busy_repository

    repo = tmp_path / "repo"
    busy_repository(repo, [2.0])
    (repo / "test_perf.py").write_text(AGAINST_TEST)
    done = _pytest_in(repo, "--perfgate", "--perfgate-against", "no-such-branch")
    assert done.returncode == 4 and "--perfgate-against no-such-branch" in done.stderr, done.stderr
    done = _pytest_in(repo, "--perfgate-against", "main")
    assert done.returncode == 4 and "give --perfgate too" in done.stderr, done.stderr
    assert not (repo / "mlflow.db").exists()
