"""The Ray dispatcher (``mlflow_perfgate.ray_dispatch``): each entry whole on a node it holds, nothing dropped.

The cluster tests start a head and two worker nodes on 127.0.0.1 (1 CPU each; ``tests/ray_cluster.py``)
and a real tracking server; they skip, saying why, when Ray is not installed
(``pip install 'mlflow-perfgate[ray]'``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mlflow_perfgate.errors import InputError
from mlflow_perfgate.ray_dispatch import DECIDED, LOST, NODE_RESOURCE, run_entries_on_ray

from tests.ray_entries import run_tinylm_entry

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed: pip install 'mlflow-perfgate[ray]'")
TINY = {"input_shape": "2,16", "steps": 2, "warmup": 1}
#: TinyLM's conditions in full, for a factory workload (which gets no TinyLM defaults)
FULL = {"model": "TinyLM", "batch_size": 2, "dtype": "fp32", "device": "cpu",
        "measurement_method": "wall_median_step_ms", "checkpoint": False, **TINY}


def _entry(group: str, **extra) -> dict:
    return {"group": group, "conditions": TINY, "change": {"checkpoint": True}, "attempts": 2, **extra}


# --- arguments: refused before anything is dispatched (no Ray needed)

@pytest.mark.parametrize("entries, message", [
    ([{"conditions": {}}], "needs a 'group'"),
    ([{"group": ""}], "needs a 'group'"),
    ([{"group": "a"}, {"group": "a"}], "used by an earlier entry"),
    (["not a dict"], "must be a dict"),
    ({"group": "a"}, "must be a list of dicts"),
])
def test_bad_entries_are_refused(monkeypatch, entries, message):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with pytest.raises(InputError, match=message):
        run_entries_on_ray("127.0.0.1:1", entries, run_tinylm_entry)


@pytest.mark.parametrize("uri", [None, "sqlite:///mlflow.db", "file:///tmp/mlruns", "mlruns", "/abs/mlruns"])
def test_a_store_the_nodes_cannot_share_is_refused(monkeypatch, uri):
    if uri is not None:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(InputError, match="MLFLOW_TRACKING_URI"):
        run_entries_on_ray("127.0.0.1:1", [{"group": "a"}], run_tinylm_entry)


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": -1}, "gpus"), ({"gpus": 1.5}, "gpus"), ({"cpus_per_node": 0}, "cpus_per_node"),
    ({"timeout_s": 0}, "timeout_s"), ({"on_lost": "ignore"}, "on_lost"), ({"max_reruns": -1}, "max_reruns"),
    ({"runtime_env": {"env_vars": {"MLFLOW_TRACKING_URI": "http://elsewhere:5000"}}}, "another store"),
])
def test_bad_options_are_refused(monkeypatch, kwargs, message):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with pytest.raises(InputError, match=message):
        run_entries_on_ray("127.0.0.1:1", [{"group": "a"}], run_tinylm_entry, **kwargs)


def test_credentials_travel_in_the_runtime_env_unless_told_not_to(monkeypatch):
    from mlflow_perfgate.ray_dispatch import _runtime_env

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example.com")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ci")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "perf")
    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(name, raising=False)  # set by our own client once it has run in this process
    env = _runtime_env({"pip": ["mlflow-perfgate"], "env_vars": {"EXTRA": "1"}}, pass_credentials=True)
    assert env["pip"] == ["mlflow-perfgate"]
    assert env["env_vars"] == {"EXTRA": "1", "MLFLOW_TRACKING_URI": "https://mlflow.example.com",
                               "MLFLOW_EXPERIMENT_NAME": "perf", "MLFLOW_TRACKING_USERNAME": "ci",
                               "MLFLOW_TRACKING_PASSWORD": "s3cret"}
    bare = _runtime_env(None, pass_credentials=False)["env_vars"]
    assert "MLFLOW_TRACKING_PASSWORD" not in bare and "MLFLOW_TRACKING_USERNAME" not in bare


# --- which nodes take entries (Ray's node table, no cluster)

class _FakeRay:
    def __init__(self, nodes):
        self.table = nodes

    def nodes(self):
        return self.table

    @staticmethod
    def remote(**_):
        return lambda function: function


def _node(node_id, cpus, gpus=0, alive=True, **resources):
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": f"h-{node_id}",
            "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **resources}}


def _dispatch(nodes, **options):
    from mlflow_perfgate.ray_dispatch import _Dispatch

    settings = dict(cpus_per_node=None, gpus=0, timeout_s=60, on_lost="rerun", max_reruns=1, env={}, poll_s=1,
                    on_start=None)
    settings.update(options)
    return _Dispatch(_FakeRay(nodes), [], run_tinylm_entry, **settings)


@needs_ray
def test_an_entry_holds_all_of_its_nodes_cpus_and_gpus_only_when_asked():
    table = [_node("head", 0), _node("small", 2), _node("big", 8, gpus=2), _node("gone", 8, alive=False)]
    usable, refused = _dispatch(table).nodes()
    assert [(n.id, n.cpus, n.gpus) for n in usable] == [("small", 2, 0), ("big", 8, 0)]
    assert any("head" in why and "fewer than 1 CPUs" in why for why in refused)
    usable, _ = _dispatch(table, gpus=1).nodes()
    assert [(n.id, n.cpus, n.gpus) for n in usable] == [("big", 8, 2)]
    usable, _ = _dispatch(table, cpus_per_node=4).nodes()
    assert [(n.id, n.cpus) for n in usable] == [("big", 4)]


@needs_ray
def test_nodes_marked_perfgate_node_are_the_only_ones_and_stay_so():
    table = [_node("head", 4), _node("w1", 1, **{NODE_RESOURCE: 1}), _node("w2", 1, **{NODE_RESOURCE: 1})]
    dispatch = _dispatch(table)
    usable, refused = dispatch.nodes()
    assert [(n.id, n.marker) for n in usable] == [("w1", 1), ("w2", 1)]
    assert any("head" in why and NODE_RESOURCE in why for why in refused)
    for node in table[1:]:  # the marked nodes die: the head still takes no entry
        node["Alive"] = False
    assert dispatch.nodes()[0] == []


# --- a lost node's attempts in the store (no Ray needed)

def test_abandon_makes_a_lost_nodes_attempts_failures(sqlite_uri):
    """An attempt whose supervisor ran on another host is RUNNING for the evaluator until stale;
    ``abandon`` (what the dispatcher calls when the node died) makes it a failed attempt at once."""
    from mlflow_perfgate.tracking import TAG, abandon, evaluate_group, start_attempt, start_comparison
    from mlflow_perfgate.tracking._group import attempt_state

    conditions = {"model": "m", "input_shape": "2,16", "batch_size": 2, "dtype": "fp32", "device": "cpu",
                  "repeats": 2, "measurement_method": "wall_ms", "checkpoint": False}
    comparison = start_comparison("lost", conditions, "checkpoint")
    done = start_attempt("lost", "baseline", conditions, parent_run_id=comparison, pair=0)
    done.finish(latency_ms=10.0, quality=0.5)
    flying = start_attempt("lost", "candidate", {**conditions, "checkpoint": True}, parent_run_id=comparison, pair=0)
    client = MlflowClient(sqlite_uri)
    client.set_tag(flying.run_id, TAG.SUPERVISOR, "another-host|boot|4242|123")  # it ran on the node that died

    run = client.get_run(flying.run_id)
    now_ms = int(time.time() * 1000)
    assert attempt_state(run.data.tags, run.info.status, run.info.start_time, now_ms, 3600)[0] == "running"
    interim = evaluate_group("lost", dry_run=True)
    assert (interim["decision"], interim["reason"]) == ("rerun", "attempts_in_progress")

    ended = abandon("lost", "node_lost: Ray node n1 died while the entry ran")
    assert sorted(ended) == sorted([flying.run_id, comparison])
    run = client.get_run(flying.run_id)
    assert run.info.status == "KILLED"
    assert attempt_state(run.data.tags, run.info.status, run.info.start_time, now_ms, 3600) == (
        "crashed", "node_lost: Ray node n1 died while the entry ran")
    assert client.get_run(done.run_id).info.status == "FINISHED"  # a finished attempt is left as it is
    assert client.get_run(comparison).data.tags[TAG.END_REASON].startswith("node_lost")
    after = evaluate_group("lost", dry_run=True)
    assert after["candidate"]["failed_runs"] == 1 and after["candidate"]["valid_runs"] == 0
    assert after["decision"] != "accept"
    assert abandon("lost", "again") == []  # nothing RUNNING is left


# --- a real cluster: a head and two worker nodes on loopback

@pytest.fixture(scope="module")
def ray_cluster():
    if not HAVE_RAY:
        pytest.skip("Ray is not installed: pip install 'mlflow-perfgate[ray]'")
    from tests.ray_cluster import LocalRayCluster

    # a short path of its own: Ray's socket paths must stay under 108 characters
    root = Path(tempfile.mkdtemp(prefix="perfgate-ray-"))
    cluster = LocalRayCluster(root, workers=2, cpus=1, worker_resources={NODE_RESOURCE: 1})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def on_cluster(ray_cluster, mlflow_server, monkeypatch):
    from tests.ray_cluster import keep_loopback

    keep_loopback(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", f"ray-{time.time_ns()}")
    return ray_cluster


def _runs_of(client: MlflowClient, group: str) -> tuple[object, list]:
    from mlflow_perfgate.tracking import TAG

    experiment = client.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"])
    runs = client.search_runs([experiment.experiment_id], f"tags.`{TAG.GROUP}` = '{group}'", max_results=1000)
    comparison = [r for r in runs if r.data.tags.get(TAG.COMPARISON) == "true"]
    attempts = [r for r in runs if r.data.tags.get(TAG.KIND) == "attempt"]
    assert len(comparison) == 1, [r.data.tags for r in runs]
    return comparison[0], attempts


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_entries_run_whole_on_distinct_nodes_and_write_to_the_server(on_cluster, mlflow_server):
    from mlflow_perfgate.tracking import TAG

    workers = {on_cluster.node_id(name): name for name in ("worker1", "worker2")}
    started = []
    entries = [_entry("ray-a"), _entry("ray-b")]
    t0 = time.monotonic()
    outcomes = run_entries_on_ray(on_cluster.address, entries, run_tinylm_entry, timeout_s=900,
                                  on_start=lambda entry, node: started.append((entry["group"], node)))
    print(f"two entries on two nodes: {time.monotonic() - t0:.1f} s")
    assert [o.state for o in outcomes] == [DECIDED, DECIDED], [o.to_dict() for o in outcomes]
    assert [o.entry for o in outcomes] == entries
    nodes = [o.node_id for o in outcomes]
    assert len(set(nodes)) == 2 and set(nodes) == set(workers)  # distinct nodes, never the head
    assert sorted(started) == sorted(zip(("ray-a", "ray-b"), nodes))
    client = MlflowClient(mlflow_server)
    for outcome in outcomes:
        result = outcome.result
        assert result["assigned"] == {"CPU": 1.0, NODE_RESOURCE: 1.0}  # the node's whole CPU, and its marker
        assert result["tracking_uri"] == mlflow_server
        assert result["omp_num_threads"] == "1"  # Ray sets it to the CPUs the task holds
        assert result["journal_env"].endswith(f"state-{workers[outcome.node_id]}")  # the node's own journal
        (try_,) = outcome.tries
        assert try_.journal.startswith(result["journal_env"]) and try_.journal_pending == 0
        comparison, attempts = _runs_of(client, outcome.group)
        assert comparison.info.run_id == result["comparison_run_id"]
        assert comparison.data.tags[TAG.NODE] == outcome.node_id
        assert comparison.data.tags[TAG.NODE_HOST] == try_.node_host
        assert comparison.data.tags[TAG.DECISION] == result["decision"]
        assert len(attempts) == 4 and {a.info.status for a in attempts} == {"FINISHED"}
        assert {a.data.tags[TAG.OK] for a in attempts} == {"true"}
        assert {a.data.tags[TAG.PARENT] for a in attempts} == {comparison.info.run_id}
        assert len({a.data.tags[TAG.SUPERVISOR] for a in attempts}) == 1  # one process ran both arms


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_an_entry_that_fails_or_hangs_is_reported_and_leaves_nothing_running(on_cluster, mlflow_server, tmp_path):
    from mlflow_perfgate.ray_dispatch import FAILED, TIMEOUT, UNSCHEDULABLE
    from mlflow_perfgate.tracking import TAG

    marker = tmp_path / "stall"
    marker.write_text("stall every candidate step")
    bad = _entry("ray-bad", change={"checkpoint": False})  # not a change: SingleVariableError on the node
    hung = _entry("ray-hung", workload="tests.workloads_fixtures.ray_stall:make", conditions=FULL)
    t0 = time.monotonic()
    outcomes = run_entries_on_ray(on_cluster.address, [bad, hung], run_tinylm_entry, timeout_s=25,
                                  runtime_env={"env_vars": {"PERFGATE_RAY_STALL": str(marker)}})
    print(f"failed and timed-out entries: {time.monotonic() - t0:.1f} s")
    failed, timed_out = outcomes
    assert failed.state == FAILED and failed.reason.startswith("entry_failed: SingleVariableError")
    assert [t.state for t in failed.tries] == [FAILED]  # the entry's own error: not re-run
    assert timed_out.state == TIMEOUT and timed_out.reason.startswith("entry_timeout")
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"])
    runs = client.search_runs([experiment.experiment_id], f"tags.`{TAG.GROUP}` = 'ray-hung'")
    assert runs and {r.info.status for r in runs} <= {"FINISHED", "KILLED"}  # nothing left RUNNING
    for run in runs:
        if run.info.status == "KILLED" and run.data.tags.get(TAG.KIND) == "attempt":
            assert run.data.tags[TAG.FAILURE].startswith("entry_timeout") and TAG.OK not in run.data.tags
    assert set(timed_out.tries[0].ended_runs) == {r.info.run_id for r in runs if r.info.status == "KILLED"}

    # asking for a GPU on a cluster without one: reported at once, nothing dispatched
    (none,) = run_entries_on_ray(on_cluster.address, [_entry("ray-gpu")], run_tinylm_entry, gpus=1)
    assert none.state == UNSCHEDULABLE and none.tries == () and "fewer than 1 GPUs" in none.reason


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_suite_run_on_the_cluster_judges_every_entry_once(on_cluster, mlflow_server, tmp_path, capsys):
    """``suite run --ray ADDRESS``: each running entry on a node of its own, one suite decision over all.

    Before the test that kills a worker (the cluster is the module's).
    """
    from mlflow_perfgate.cli import main
    from mlflow_perfgate.tracking import TAG

    experiment = os.environ["MLFLOW_EXPERIMENT_NAME"]
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
[suite]
name = "on-ray"
experiment = "{experiment}"

[defaults]
mode = "non_regression"
attempts = 2
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}

[[entry]]
name = "workers"
change = {{num_workers = 1}}
""", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", "run", str(suite), "--ray", on_cluster.address, "--format", "json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, 1, 3), out + err
    import json

    summary = json.loads(out)
    assert [item["state"] for item in summary["ray"]] == ["decided", "decided"], summary["ray"]
    workers = {on_cluster.node_id(name) for name in ("worker1", "worker2")}
    assert {item["node_id"] for item in summary["ray"]} == workers  # side by side, never on the head
    client = MlflowClient(mlflow_server)
    suite_run = client.get_run(summary["suite_run_id"])
    assert suite_run.info.status == "FINISHED" and suite_run.data.tags[TAG.KIND] == "suite"
    assert suite_run.data.tags[TAG.DECISION] == summary["decision"]
    for group in ("on-ray/checkpoint", "on-ray/workers"):
        comparison, attempts = _runs_of(client, group)
        assert comparison.data.tags["mlflow.parentRunId"] == suite_run.info.run_id
        assert comparison.data.tags[TAG.NODE] in workers
        assert len(attempts) == 4 and {a.data.tags[TAG.OK] for a in attempts} == {"true"}
    # refused before anything runs: a lost entry re-runs in a fresh group, so there is nothing to resume
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", "run", str(suite), "--ray", on_cluster.address, "--resume"])
    assert exit_info.value.code == 2 and "--resume is not taken with --ray" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_an_entry_whose_node_cannot_import_its_workload_is_a_setup_error(on_cluster, mlflow_server, tmp_path,
                                                                          capsys, monkeypatch):
    """The workload imports a package only this machine has (the nodes lack it): each node fails the entry's
    first round; exit 2, one line naming the entry and the cause, nothing judged."""
    from mlflow_perfgate.cli import main
    from mlflow_perfgate.tracking import TAG

    (tmp_path / "only_here_bench.py").write_text(
        "import os\n"
        "if os.environ.get('ONLY_HERE_BENCH') != '1':  # the nodes' environment lacks this package\n"
        "    raise ModuleNotFoundError(\"No module named 'only_on_the_driver'\", name='only_on_the_driver')\n"
        "from mlflow_perfgate.workloads.tinylm import make_workload as make\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ONLY_HERE_BENCH", "1")  # not passed to the nodes (the dispatcher passes MLflow's only)
    experiment = os.environ["MLFLOW_EXPERIMENT_NAME"]
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
[suite]
name = "on-ray-unimportable"
experiment = "{experiment}"

[defaults]
workload = "only_here_bench:make"
mode = "non_regression"
attempts = 2
set = {{model = "TinyLM", input_shape = "2,16", batch_size = 2, dtype = "fp32", device = "cpu", measurement_method = "wall_median_step_ms", steps = 2, warmup = 1, checkpoint = false}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}
""", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", "run", str(suite), "--ray", on_cluster.address, "--format", "json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, out + err
    assert out == ""  # nothing judged, no summary
    line = err.strip().splitlines()[-1]
    assert "suite entry 'checkpoint' could not be set up on Ray node" in line and "only_on_the_driver" in line, err
    client = MlflowClient(mlflow_server)
    found = client.get_experiment_by_name(experiment)
    [suite_run] = [r for r in client.search_runs([found.experiment_id], f"tags.`{TAG.KIND}` = 'suite'")
                   if r.data.tags.get("perfgate.suite") == "on-ray-unimportable"]
    assert suite_run.info.status == "KILLED" and TAG.DECISION not in suite_run.data.tags


#: ``mlflow-perfgate`` in a fresh process that connects to the loopback cluster as given (``keep_loopback``'s).
_LOOPBACK_CLI = ("import ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h; import sys; "
                 "sys.argv = ['mlflow-perfgate'] + sys.argv[1:]; from mlflow_perfgate.cli import entry; entry()")


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_a_sigterm_to_suite_run_on_the_cluster_ends_the_suite_run_and_exits_143(on_cluster, mlflow_server, tmp_path):
    """ray.init puts its own SIGTERM handler in (it printed and exited 1, the suite run left RUNNING)."""
    import signal
    import subprocess
    import sys

    from mlflow_perfgate.tracking import TAG

    experiment = os.environ["MLFLOW_EXPERIMENT_NAME"]
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
[suite]
name = "on-ray-stopped"
experiment = "{experiment}"

[defaults]
mode = "non_regression"
attempts = 4
set = {{input_shape = "2,16", steps = 2, warmup = 1}}
thresholds = {{min_valid_runs = 2}}

[[entry]]
name = "checkpoint"
change = {{checkpoint = true}}
""", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "RAY_USAGE_STATS_ENABLED": "0"}
    process = subprocess.Popen([sys.executable, "-c", _LOOPBACK_CLI, "suite", "run", str(suite), "--ray",
                                on_cluster.address, "--format", "json"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    client = MlflowClient(mlflow_server)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:  # an attempt running on a node
        found = client.get_experiment_by_name(experiment)  # the test's own experiment (on_cluster's)
        if found and client.search_runs([found.experiment_id], f"tags.`{TAG.KIND}` = 'attempt'"):
            break
        time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 143, err[-3000:]
    assert out == ""  # no half summary on stdout
    found = client.get_experiment_by_name(experiment)
    [suite_run] = [r for r in client.search_runs([found.experiment_id], f"tags.`{TAG.KIND}` = 'suite'")
                   if r.data.tags.get("perfgate.suite") == "on-ray-stopped"]
    assert suite_run.info.status == "KILLED" and "terminated by SIGTERM" in suite_run.data.tags[TAG.END_REASON]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_a_worker_killed_mid_entry_fails_its_attempts_and_the_entry_reruns_elsewhere(on_cluster, mlflow_server,
                                                                                     tmp_path):
    from mlflow_perfgate.tracking import TAG, evaluate_group

    client = MlflowClient(mlflow_server)
    workers = {on_cluster.node_id(name) for name in ("worker1", "worker2")}
    marker = tmp_path / "stall"
    marker.write_text("stall the candidate until its node is killed")
    # whole attempts: the baseline's attempt ends before the candidate's stalls (a round's child would hold both)
    victim = _entry("ray-victim", workload="tests.workloads_fixtures.ray_stall:make", conditions=FULL,
                    interleave="attempts")
    other = _entry("ray-other")
    killed: dict = {}
    dispatched = threading.Event()

    def kill_when_candidate_runs(node_id: str) -> None:
        try:
            while not dispatched.is_set():
                experiment = client.get_experiment_by_name(experiment_name)
                if experiment is not None:
                    running = client.search_runs(
                        [experiment.experiment_id],
                        f"tags.`{TAG.GROUP}` = 'ray-victim' AND tags.`{TAG.ARM}` = 'candidate' "
                        "AND attributes.status = 'RUNNING'")
                    if running:
                        name = on_cluster.name_of(node_id)
                        killed.update(node=node_id, name=name, at=time.monotonic(), pids=on_cluster.kill_node(name))
                        return
                time.sleep(0.3)
        except Exception as exc:  # reported by the assertion below, not lost in a thread
            killed["error"] = repr(exc)
        finally:
            marker.unlink(missing_ok=True)  # the re-run on the other node runs at full speed

    experiment_name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    threads = []

    def on_start(entry, node_id):
        if entry["group"] == "ray-victim":
            thread = threading.Thread(target=kill_when_candidate_runs, args=(node_id,), daemon=True)
            thread.start()
            threads.append(thread)

    t0 = time.monotonic()
    outcomes = run_entries_on_ray(on_cluster.address, [victim, other], run_tinylm_entry, timeout_s=900,
                                  runtime_env={"env_vars": {"PERFGATE_RAY_STALL": str(marker)}}, on_start=on_start)
    elapsed = time.monotonic() - t0
    dispatched.set()
    for thread in threads:
        thread.join(timeout=60)
    print(f"kill test: {elapsed:.1f} s; node killed {killed.get('at', t0) - t0:.1f} s in: {killed}")
    assert killed.get("pids"), f"the victim's node was not killed: {[o.to_dict() for o in outcomes]}"

    # every entry has a decision: the victim's from its re-run on the surviving node
    assert [o.state for o in outcomes] == [DECIDED, DECIDED], [o.to_dict() for o in outcomes]
    lost_victim, rerun = outcomes[0].tries
    assert lost_victim.state == LOST and lost_victim.node_id == killed["node"]
    assert lost_victim.reason.startswith(f"node_lost: Ray node {killed['node']}")
    assert rerun.state == DECIDED and rerun.group == "ray-victim.rerun-1" and rerun.node_id != killed["node"]
    assert outcomes[0].group == "ray-victim.rerun-1" and outcomes[0].node_id == rerun.node_id
    assert outcomes[1].node_id != killed["node"] and outcomes[1].node_id == rerun.node_id  # the node that survived
    assert {lost_victim.node_id, outcomes[1].tries[0].node_id} == set(workers)  # side by side at first

    # the lost try's attempts: the one in flight is a failure, none in flight is a success
    comparison, attempts = _runs_of(client, "ray-victim")
    assert comparison.info.status == "KILLED" and comparison.data.tags[TAG.END_REASON].startswith("node_lost")
    assert comparison.data.tags[TAG.NODE] == killed["node"]
    by_arm = {arm: [a for a in attempts if a.data.tags[TAG.ARM] == arm] for arm in ("baseline", "candidate")}
    assert [a.data.tags.get(TAG.OK) for a in by_arm["baseline"]] == ["true"]  # finished before the kill
    (in_flight,) = by_arm["candidate"]
    assert in_flight.info.status == "KILLED" and TAG.OK not in in_flight.data.tags
    assert in_flight.data.tags[TAG.FAILURE].startswith("node_lost")
    assert in_flight.info.run_id in lost_victim.ended_runs
    lost_judged = evaluate_group("ray-victim", dry_run=True)
    assert lost_judged["candidate"]["failed_runs"] == 1 and lost_judged["candidate"]["valid_runs"] == 0
    assert lost_judged["decision"] != "accept"

    # the re-run: a whole comparison on the surviving node, every attempt on the server
    for outcome in outcomes:
        comparison, attempts = _runs_of(client, outcome.group)
        assert comparison.data.tags[TAG.NODE] == outcome.node_id and TAG.DECISION in comparison.data.tags
        assert len(attempts) == 4 and {a.data.tags[TAG.OK] for a in attempts} == {"true"}
