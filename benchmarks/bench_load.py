"""Write load: attempts recorded per second by 1, 4 and 16 concurrent writer processes.

Each writer is a separate process that logs K attempts with ``mlflow_perfgate.log_attempt``
to one local tracking server (``mlflow server`` on 127.0.0.1), the way CI jobs or a sweep on
one machine would. The server's store is a SQLite file, then a PostgreSQL database (a private
cluster started the way ``scripts/postgres_recipe.sh`` starts one; skipped with a message when
PostgreSQL or psycopg2 is not available).

What is timed: from the moment every writer has imported mlflow and computed its environment
fingerprint (each writer says so with a file, then waits for a start file) until the last
writer is done. Process start and imports are not write throughput and are left out.

After each round the store is checked: every attempt is one run, each attempt id once.

Usage: python benchmarks/bench_load.py [--writers 1,4,16] [--attempts 10] [--backends sqlite,postgresql]
                                       [--server-workers 2]
       python benchmarks/bench_load.py --scale [--group-size 2000] [--experiment-size 20000]

``--scale`` measures the evaluator and ``reap`` at scale instead: a group of 2,000 attempts
evaluated on the SQLite store and through a server over the same store (wall time and peak
memory of each, in a fresh process; the server's evaluation re-parents every attempt), and
``reap`` over an experiment of 20,000 attempt runs (a filter on RUNNING runs, not a load of
every attempt).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "scripts" / "postgres_recipe.sh"
CONDITIONS = {"model": "TinyLM", "input_shape": "4,128", "batch_size": 4, "dtype": "fp32", "device": "cpu",
              "repeats": 5, "measurement_method": "wall_ms", "checkpoint": False}


# ------------------------------------------------------------------------------------------------
# one writer process: python bench_load.py --worker GROUP EXPERIMENT INDEX K DIR

def worker(group: str, experiment: str, index: int, count: int, folder: Path) -> None:
    from mlflow_perfgate import log_attempt  # the package loads lazily: this imports mlflow now
    from mlflow_perfgate.tracking import _client, _environment

    _environment.fingerprint()  # once per process (git revision, CPU model): not write time
    _client.client()
    (folder / f"ready-{index}").touch()
    start = folder / "start"
    while not start.exists():
        time.sleep(0.002)
    latencies = []
    for attempt in range(count):
        arm = ("baseline", "candidate")[(index + attempt) % 2]
        begin = time.perf_counter()
        log_attempt(group, arm, {**CONDITIONS, "checkpoint": arm == "candidate"},
                    latency_ms=100.0 - 10 * (arm == "candidate") + attempt % 3, quality=0.9,
                    experiment_name=experiment, attempt_id=f"w{index}-a{attempt}")
        latencies.append(time.perf_counter() - begin)
    (folder / f"done-{index}").write_text(f"{time.time()} {' '.join(f'{x:.6f}' for x in latencies)}")


# ------------------------------------------------------------------------------------------------
# servers

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(root: Path, backend_uri: str, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(root / "server.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", backend_uri, "--artifacts-destination", str(root / "artifacts"),
         "--workers", str(workers)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.3)
    stop_server(process)
    raise TimeoutError(f"{url} did not answer")


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass


def start_postgres(root: Path) -> str | None:
    """The recipe's cluster; its SQLAlchemy URI, or None (with a message) when unavailable."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        print("PostgreSQL skipped: psycopg2 is not installed (pip install psycopg2-binary)", file=sys.stderr)
        return None
    if shutil.which("bash") is None or not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        print("PostgreSQL skipped: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin "
              "(apt-get install postgresql, or run scripts/postgres_recipe.sh as root once)", file=sys.stderr)
        return None
    completed = subprocess.run(["bash", str(RECIPE), "pg-start", str(root)], capture_output=True, text=True,
                               env={**os.environ, "PYTHON": sys.executable}, timeout=300)
    if completed.returncode != 0:
        print(f"PostgreSQL skipped: the cluster did not start: {completed.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return completed.stdout.strip().splitlines()[-1]


def stop_postgres(root: Path) -> None:
    subprocess.run(["bash", str(RECIPE), "pg-stop", str(root)], capture_output=True, timeout=120,
                   env={**os.environ, "PYTHON": sys.executable})


# ------------------------------------------------------------------------------------------------
# one round: N writers x K attempts

def run_round(url: str, root: Path, backend: str, writers: int, count: int) -> dict:
    folder = root / f"{backend}-{writers}"
    folder.mkdir()
    experiment, group = f"load-{backend}-{writers}-{time.time_ns()}", f"load-{writers}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": url, "MLFLOW_PERFGATE_JOURNAL": str(folder / "journal.jsonl")}
    for name in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        env.pop(name, None)
    processes = [subprocess.Popen([sys.executable, __file__, "--worker", group, experiment, str(i), str(count),
                                   str(folder)], env=env, cwd=folder, stderr=subprocess.PIPE, text=True)
                 for i in range(writers)]
    deadline = time.monotonic() + 600
    while sum(1 for i in range(writers) if (folder / f"ready-{i}").exists()) < writers:
        if any(p.poll() not in (None, 0) for p in processes):
            raise RuntimeError(f"a writer died while starting: {[p.stderr.read() for p in processes if p.poll()]}")
        if time.monotonic() > deadline:
            raise TimeoutError("writers did not get ready")
        time.sleep(0.02)
    start = time.time()
    (folder / "start").touch()
    errors = []
    for process in processes:
        _, err = process.communicate(timeout=1800)
        if process.returncode != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {process.returncode}")
    ends, per_attempt = [], []
    for i in range(writers):
        done = folder / f"done-{i}"
        if done.exists():
            end, *latencies = done.read_text().split()
            ends.append(float(end))
            per_attempt += [float(x) for x in latencies]
    wall = (max(ends) if ends else time.time()) - start
    stored = count_attempts(url, experiment)
    return {"backend": backend, "writers": writers, "attempts": writers * count, "stored": stored, "wall_s": wall,
            "rate": stored / wall if wall > 0 else float("nan"),
            "p50_ms": 1000 * statistics.median(per_attempt) if per_attempt else float("nan"),
            "p95_ms": 1000 * sorted(per_attempt)[max(0, math.ceil(0.95 * len(per_attempt)) - 1)]
            if per_attempt else float("nan"),
            "errors": errors}


def count_attempts(url: str, experiment: str) -> int:
    os.environ["MLFLOW_TRACKING_URI"] = url
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return 0
    runs = client.search_runs([found.experiment_id], max_results=50_000)
    return len({run.data.tags.get("perfgate.attempt_id") for run in runs})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="1,4,16")
    parser.add_argument("--attempts", type=int, default=10, help="K: attempts each writer logs")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--server-workers", type=int, default=2, help="mlflow server --workers")
    args = parser.parse_args()
    writer_counts = [int(x) for x in args.writers.split(",")]
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfgate-load-") as tmp:
        root = Path(tmp)
        for backend in args.backends.split(","):
            broot = root / backend
            broot.mkdir()
            if backend == "sqlite":
                uri = f"sqlite:///{broot}/mlflow.db"
            elif backend == "postgresql":
                uri = start_postgres(broot)
                if uri is None:
                    continue
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            process = None
            try:
                process, url = start_server(broot, uri, args.server_workers)
                for writers in writer_counts:
                    row = run_round(url, broot, backend, writers, args.attempts)
                    rows.append(row)
                    print(f"  {backend:10s} {writers:2d} writers: {row['rate']:.1f} attempts/s", file=sys.stderr)
            finally:
                if process is not None:
                    stop_server(process)
                if backend == "postgresql":
                    stop_postgres(broot)
    print(f"\nattempts per second to a local mlflow server (--workers {args.server_workers}), "
          f"{os.cpu_count()} CPUs, K={args.attempts} attempts per writer\n")
    header = "| store | writers | attempts | stored | wall s | attempts/s | per attempt p50 ms | p95 ms | errors |"
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['backend']} | {row['writers']} | {row['attempts']} | {row['stored']} | {row['wall_s']:.2f} | "
              f"{row['rate']:.1f} | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} | "
              f"{'; '.join(row['errors'])[:120] or 'none'} |")


_MEASURE = """
import json, resource, sys, time
import mlflow_perfgate as pg
from mlflow_perfgate.tracking import reap
what, arg = sys.argv[1], sys.argv[2]
begin = time.perf_counter()
if what == "evaluate":
    result = pg.evaluate_group("scale", experiment_name="scale", min_valid_runs=int(arg), env_mismatch="ignore")
    detail = {"decision": result["decision"], "attempts": len(result["run_ids"])}
else:
    detail = {"reaped": len(reap(float(arg), experiment_name="scale"))}
wall = time.perf_counter() - begin
print(json.dumps({"wall_s": wall, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **detail}))
"""


def _measure(uri: str, what: str, arg: str) -> dict:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO)}
    completed = subprocess.run([sys.executable, "-c", _MEASURE, what, arg], env=env, capture_output=True, text=True,
                               timeout=1800)
    if completed.returncode != 0:
        raise SystemExit(completed.stderr[-3000:])
    import json

    return json.loads(completed.stdout.strip().splitlines()[-1])


def scale(group_size: int, experiment_size: int, server_workers: int) -> None:
    """The evaluator on a large group (SQLite, then through a server) and reap on a large experiment."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_tracking import fill

    from mlflow.tracking import MlflowClient

    import mlflow_perfgate as pg

    with tempfile.TemporaryDirectory(prefix="perfgate-scale-") as tmp:
        root = Path(tmp)
        uri = f"sqlite:///{root}/mlflow.db"
        os.environ["MLFLOW_TRACKING_URI"] = uri
        client = MlflowClient(uri)
        experiment_id = client.create_experiment("scale")
        begin = time.perf_counter()
        for index in range(group_size):
            arm = ("baseline", "candidate")[index % 2]
            pg.log_attempt("scale", arm, {**CONDITIONS, "checkpoint": arm == "candidate"},
                           latency_ms=100.0 - 10 * (arm == "candidate") + index % 5, quality=0.9,
                           experiment_name="scale")
        print(f"  logged {group_size} attempts in {time.perf_counter() - begin:.0f} s", file=sys.stderr)
        fill(uri, experiment_id, experiment_size - group_size)
        rows = [("evaluate, SQLite", _measure(uri, "evaluate", "5"))]
        process, url = start_server(root, uri, server_workers)
        try:
            rows.append(("evaluate, server", _measure(url, "evaluate", "6")))  # another policy: a new decision
            rows.append(("reap, server", _measure(url, "reap", "3600")))
        finally:
            stop_server(process)
        rows.append(("reap, SQLite", _measure(uri, "reap", "3600")))
    print(f"\nscale, {os.cpu_count()} CPUs: a group of {group_size} attempts in an experiment of "
          f"{experiment_size} runs (server: mlflow server --workers {server_workers} over the same SQLite file)\n")
    print("| what | wall s | peak MiB | detail |")
    print("|---|---:|---:|---|")
    for label, row in rows:
        detail = {k: v for k, v in row.items() if k not in ("wall_s", "peak_mib")}
        print(f"| {label} | {row['wall_s']:.1f} | {row['peak_mib']:.0f} | {detail} |")
    sqlite_s, server_s = rows[0][1]["wall_s"], rows[1][1]["wall_s"]
    print(f"\nserver / SQLite evaluate: {server_s / sqlite_s:.2f} (target <= 2)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6]))
    elif "--scale" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--scale", action="store_true")
        parser.add_argument("--group-size", type=int, default=2000)
        parser.add_argument("--experiment-size", type=int, default=20000)
        parser.add_argument("--server-workers", type=int, default=2)
        options = parser.parse_args()
        scale(options.group_size, options.experiment_size, options.server_workers)
    else:
        main()
