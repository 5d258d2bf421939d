"""A benchmark's history end to end: a recorded series with a known change point, failures counted as the
evaluator counts them, the history run it leaves; and a bisect in a small git repository."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.cli import main

from helpers import BISECT_BENCH, BISECT_SETS, slowing_repository

EXPERIMENT = "history-e2e"
BENCH = {"model": "TinyLM", "input_shape": "4,128", "batch_size": 4, "dtype": "fp32", "device": "cpu",
         "measurement_method": "wall_ms"}
T0 = 1_700_000_000


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def log_revision(index, latencies, failures=0, *, conditions=BENCH, environment=None):
    revision = f"{index:02d}" + "a" * 38
    for latency in latencies:
        pg.log_attempt(f"nightly-{index}", "baseline", {**conditions, "revision": revision}, latency_ms=float(latency),
                       quality=0.9, experiment_name=EXPERIMENT, commit_time=T0 + 3600 * index, environment=environment)
    for _ in range(failures):
        pg.log_attempt(f"nightly-{index}", "baseline", {**conditions, "revision": revision}, ok=False,
                       failure="timeout", experiment_name=EXPERIMENT, commit_time=T0 + 3600 * index,
                       environment=environment)
    return revision


def test_a_recorded_series_with_a_known_change_point(sqlite_uri, capsys):
    rng = np.random.default_rng(5)
    revisions = [log_revision(i, (100 if i < 7 else 130) * np.exp(rng.normal(0, 0.02, 3))) for i in range(12)]
    log_revision(3, [500.0], environment={"host": "another-machine"})  # another benchmark: another host
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--list")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "host=another-machine" in out
    code, _, err = run_cli(capsys, "history", "--experiment", EXPERIMENT)
    assert code == 2 and "2 benchmarks match; choose one with --benchmark KEY" in err
    key = next(line.split()[0] for line in out.splitlines() if "another-machine" not in line)
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--benchmark", key[:6])
    assert code == 0, err
    assert f"regression (slower) at {revisions[7]} (after {revisions[6]})" in out
    assert "1 regression, 0 improvements, 0 suspicious" in out
    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name(EXPERIMENT).experiment_id],
                                      "tags.\"perfgate.kind\" = 'history'")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.tags["perfgate.benchmark"] == key and run.data.metrics["regressions"] == 1
    assert run.data.metrics["revisions"] == 12 and run.data.params["perfgate.alpha"] == "0.01"
    medians = MlflowClient().get_metric_history(run.info.run_id, "revision_median_ms")
    assert [m.step for m in sorted(medians, key=lambda m: m.step)] == list(range(12))
    assert "## History of benchmark" in run.data.tags["mlflow.note.content"]
    payload = pg.tracking._history.read_history(run.info.run_id)
    assert payload["format_version"] == 1 and [r["revision"] for r in payload["revisions"]] == revisions
    artifacts = {f.path for f in MlflowClient().list_artifacts(run.info.run_id, "perfgate")}
    assert artifacts == {"perfgate/history.json", "perfgate/history.png", "perfgate/history.md"}


def test_a_history_too_short_for_the_permutation_test_says_so(sqlite_uri, capsys):
    # found by a hostile run: 8 revisions with a clean 30% step gave "none found" and exit 0
    assert pg.rules.permutation_floor(8) > 0.01 >= pg.rules.permutation_floor(12)
    assert pg.rules.permutation_floor(1) is None
    rng = np.random.default_rng(3)
    revisions = [log_revision(i, (100 if i < 4 else 130) * np.exp(rng.normal(0, 0.01, 3))) for i in range(8)]
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--no-log")
    assert code == 0, err
    assert "with 8 revisions the permutation test cannot find a latency change at alpha = 0.01" in out
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--no-log", "--test", "t")
    assert code == 0 and f"regression (slower) at {revisions[4]}" in out and "permutation test cannot" not in out


def test_a_history_with_no_revision_to_analyse_is_an_input_error(sqlite_uri, capsys):
    # found by a hostile run: revisions without commit times left nothing, and history exited 0
    for revision in ("aaa111", "bbb222"):
        pg.log_attempt("g-" + revision, "baseline", {**BENCH, "revision": revision}, latency_ms=100.0, quality=0.9,
                       experiment_name=EXPERIMENT)
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--no-log")
    assert code == 2 and "no revision of benchmark" in err and "2 revisions have no commit time" in err


def test_failed_attempts_count_as_the_evaluator_counts_them(sqlite_uri, capsys):
    rng = np.random.default_rng(9)
    revisions = []
    for i in range(12):  # latency steady; from revision 6 on, 2 of 5 attempts fail
        revisions.append(log_revision(i, 100 * np.exp(rng.normal(0, 0.02, 3 if i >= 6 else 5)),
                                      failures=2 if i >= 6 else 0))
    # an attempt that crashed without reporting (ended FAILED, no perfgate.ok) is a failure too
    client = MlflowClient()
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    env = {k: v for k, v in client.search_runs([experiment_id], max_results=1)[0].data.tags.items()
           if k.startswith("perfgate.env.")}
    crashed = client.create_run(experiment_id, tags={"perfgate.kind": "attempt", "perfgate.group": "nightly-9",
                                                     "perfgate.arm": "baseline", **env,
                                                     "perfgate.commit_time": str(T0 + 9 * 3600)})
    for key, value in {**BENCH, "revision": revisions[9]}.items():
        client.log_param(crashed.info.run_id, key, pg.tracking.canonical_value(value))
    client.set_terminated(crashed.info.run_id, "FAILED")
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--set", "model=TinyLM", "--format", "json")
    assert code == 0, err
    payload = json.loads(out)
    by_revision = {r["revision"]: r for r in payload["revisions"]}
    assert by_revision[revisions[9]]["failed"] == 3 and by_revision[revisions[9]]["attempted"] == 6
    assert by_revision[revisions[2]]["failure_rate"] == 0
    (point,) = payload["change_points"]
    assert point["label"] == "regression" and point["direction"] == "more_failures"
    assert point["revision"] == revisions[6] and "failure_rate" in point["signals"]


@pytest.mark.slow
def test_bisect_finds_the_commit_that_slowed_the_bench_and_reuses_its_decisions(sqlite_uri, tmp_path, capsys,
                                                                              monkeypatch):
    repo = tmp_path / "repo"
    shas = slowing_repository(repo, 8, 5, commit_time=lambda index: T0 + 60 * index)  # commit 5: 3x slower steps
    monkeypatch.chdir(repo)
    argv = ["history", "--bisect", shas[0], shas[-1], "--workload", BISECT_BENCH, *BISECT_SETS, "--margin", "0.5",
            "--experiment", "bisect"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, out + err
    assert f"first bad commit: {shas[5]} commit 5" in out
    client = MlflowClient()
    experiment_id = client.get_experiment_by_name("bisect").experiment_id
    comparisons = client.search_runs([experiment_id], "tags.\"perfgate.comparison\" = 'true'")
    assert 2 <= len(comparisons) <= 4  # the bad end, then at most ceil(log2(7)) = 3 steps
    attempts = client.search_runs([experiment_id], "tags.\"perfgate.kind\" = 'attempt'", max_results=1000)
    for attempt in attempts:  # the revision's commit time, read from git when the attempt was recorded
        revision = attempt.data.params["revision"]
        assert attempt.data.tags["perfgate.commit_time"] == str(T0 + 60 * shas.index(revision))
    assert not (repo / ".git" / "perfgate-worktrees").exists() or not any((repo / ".git" / "perfgate-worktrees").iterdir())
    # again: every decision is reused, nothing runs
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and f"first bad commit: {shas[5]}" in out and "recorded before" in out
    assert len(client.search_runs([experiment_id], "tags.\"perfgate.comparison\" = 'true'")) == len(comparisons)
    # a range whose bad end is no regression: nothing to bisect, exit 1
    code, out, _ = run_cli(capsys, *[shas[1] if a == shas[-1] else a for a in argv])
    assert code == 1 and "shows no regression" in out, out


def test_revisions_sharing_a_commit_time_are_ordered_by_git_ancestry(sqlite_uri, capsys, tmp_path, monkeypatch):
    # found by a hostile run: scripted commits share whole-second commit times, and history refused them
    env = {"GIT_COMMITTER_DATE": "2026-11-30T10:00:00Z", "GIT_AUTHOR_DATE": "2026-11-30T10:00:00Z"}
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(12):
        (repo / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", f"c{i}"], cwd=repo, check=True, env={**os.environ, **env})
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                   check=True).stdout.strip())
    monkeypatch.chdir(repo)
    for i, sha in enumerate(reversed(shas)):  # recorded newest first: the store's order is no help
        index = len(shas) - 1 - i
        for latency in ((100.0, 101.0, 99.0) if index < 6 else (130.0, 131.0, 129.0)):
            pg.log_attempt(f"tied-{index}", "baseline", {**BENCH, "revision": sha}, latency_ms=latency, quality=0.9,
                           experiment_name=EXPERIMENT)
    code, out, err = run_cli(capsys, "history", "--experiment", EXPERIMENT, "--no-log")
    assert code == 0, err
    assert f"regression (slower) at {shas[6]} (after {shas[5]})" in out
    assert "12 revisions share the commit time 1796032800 (" in out and "): ordered by git ancestry" in out


def test_a_commit_time_in_the_future_is_refused_before_anything_is_written(sqlite_uri, capsys):
    """Milliseconds given as seconds (or 1e30) would place a revision after every real one."""
    in_ms = (T0 + 60) * 1000
    for given, hint in ((str(in_ms), "(milliseconds? divide by 1000)"), ("1e30", "lies in the future")):
        code, out, err = run_cli(capsys, "record", "--group", "future", "--arm", "baseline", "--set", "revision=abc",
                                 "--commit-time", given, "--latency-ms", "10", "--quality", "0.9",
                                 "--experiment", EXPERIMENT)
        assert code == 2 and hint in err and "commit_time" in err, out + err
    assert MlflowClient().get_experiment_by_name(EXPERIMENT) is None or \
        not MlflowClient().search_runs([MlflowClient().get_experiment_by_name(EXPERIMENT).experiment_id])
    with pytest.raises(pg.errors.InputError, match="lies in the future"):
        pg.log_attempt("future", "baseline", {"revision": "abc"}, latency_ms=10.0, quality=0.9,
                       experiment_name=EXPERIMENT, commit_time=in_ms)


@pytest.mark.parametrize("given", [["--method", "robust"], ["--margin", "0.2"], ["--attempts", "4"],
                                   ["--threshold", "min_valid_runs=3"], ["--workload", "bench:make"]])
def test_a_bisect_option_without_bisect_is_refused_never_ignored(sqlite_uri, capsys, given):
    with pytest.raises(SystemExit) as exited:
        main(["history", "--no-log", *given])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{given[0]} only apply with --bisect GOOD BAD" in err
