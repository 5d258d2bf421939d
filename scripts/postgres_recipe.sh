#!/usr/bin/env bash
# Scale-out recipe: MLflow tracking server on PostgreSQL, N concurrent writers, one evaluate.
#
# Usage:
#   bash scripts/postgres_recipe.sh [run] [--writers N] [--attempts K] [--workdir DIR] [--server-workers W] [--keep]
#       Start a private PostgreSQL cluster on 127.0.0.1, a database, an `mlflow server` on it
#       (127.0.0.1), run N writer processes at once (each logs K attempts of ONE comparison with
#       mlflow_perfgate.log_attempt, half baseline, half candidate), then one
#       `mlflow-perfgate evaluate`, and check that nothing was lost: every attempt is a run, each
#       attempt_id once, all judged by the decision and nested under it. Exit 0 when all holds.
#       Everything (servers, cluster, temporary files) is removed on exit unless --keep.
#   bash scripts/postgres_recipe.sh pg-start DIR
#       Only start a PostgreSQL cluster (data under DIR/pg), print its SQLAlchemy URI on stdout.
#   bash scripts/postgres_recipe.sh pg-stop DIR
#       Stop the cluster started by pg-start DIR (and remove its data).
#
# Environment: PYTHON (the interpreter with mlflow-perfgate installed; default: .venv/bin/python
# of this repository, else python3). Runs as root (initdb/postgres then run as the `postgres`
# user, since PostgreSQL refuses root) or as any user (then as that user).
# Debian's `postgresql` is installed with apt-get when missing (root only); `psycopg2-binary`
# is pip-installed into PYTHON's environment when missing.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON="python3"; fi
fi

log() { echo "[postgres_recipe] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

pg_bindir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then echo "$dir"; return 0; fi
    done
    return 1
}

ensure_postgres() {
    if pg_bindir >/dev/null; then return 0; fi
    if [[ "$(id -u)" != 0 ]]; then die "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin and not root to apt-get install them"; fi
    log "installing Debian's postgresql (apt-get) ..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    pg_bindir >/dev/null || die "postgresql installed but no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
}

ensure_python() {
    "$PYTHON" -c 'import mlflow, mlflow_perfgate' 2>/dev/null \
        || die "$PYTHON cannot import mlflow_perfgate: set PYTHON to the venv's python (pip install -e . there)"
}

ensure_psycopg2() {
    ensure_python
    if "$PYTHON" -c 'import psycopg2' 2>/dev/null; then return 0; fi
    log "installing psycopg2-binary into $("$PYTHON" -c 'import sys; print(sys.prefix)') ..."
    "$PYTHON" -m pip install --quiet psycopg2-binary >&2
    "$PYTHON" -c 'import psycopg2' || die "psycopg2 still not importable"
}

# Run a PostgreSQL binary as the cluster's owner: `postgres` when we are root, else ourselves.
as_pg_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# pg_start DIR -> starts a cluster with data in DIR/pg; writes DIR/pg.env; prints the URI.
pg_start() {
    local dir="$1" bindir port password pgroot
    ensure_postgres
    bindir="$(pg_bindir)"
    mkdir -p "$dir"
    # The cluster lives in its own private directory, owned by the cluster's user (a root-owned
    # 0700 parent such as pytest's tmp dirs would lock the `postgres` user out): DIR/pg links to it.
    pgroot="$(mktemp -d "${TMPDIR:-/tmp}/perfgate-pg.XXXXXX")"
    chmod 700 "$pgroot"
    if [[ "$(id -u)" == 0 ]]; then chown postgres: "$pgroot"; fi
    ln -sfn "$pgroot" "$dir/pg"
    port="$(free_port)"
    password="$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
    as_pg_owner bash -c "umask 077; printf '%s\n' '$password' > '$pgroot/pwfile'"
    as_pg_owner "$bindir/initdb" -D "$pgroot/data" -U perfgate --pwfile="$pgroot/pwfile" \
        --auth-local=scram-sha-256 --auth-host=scram-sha-256 --encoding=UTF8 --locale=C >"$pgroot/initdb.log" 2>&1 \
        || { cat "$pgroot/initdb.log" >&2; die "initdb failed"; }
    as_pg_owner rm -f "$pgroot/pwfile"
    # loopback only; the socket in the private directory; enough connections for many writers
    as_pg_owner "$bindir/pg_ctl" -D "$pgroot/data" -l "$pgroot/postgres.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $pgroot -c max_connections=200" >/dev/null \
        || { cat "$pgroot/postgres.log" >&2 || true; die "pg_ctl start failed"; }
    PGPASSWORD="$password" "$bindir/psql" -h 127.0.0.1 -p "$port" -U perfgate -d postgres -q -v ON_ERROR_STOP=1 \
        -c "CREATE DATABASE mlflow" >/dev/null || die "CREATE DATABASE failed"
    {
        echo "PG_BINDIR='$bindir'"
        echo "PG_ROOT='$pgroot'"
        echo "PG_PORT='$port'"
        echo "PG_URI='postgresql+psycopg2://perfgate:$password@127.0.0.1:$port/mlflow'"
    } >"$dir/pg.env"
    chmod 600 "$dir/pg.env"
    echo "postgresql+psycopg2://perfgate:$password@127.0.0.1:$port/mlflow"
}

pg_stop() {
    local dir="$1"
    [[ -f "$dir/pg.env" ]] || return 0
    # shellcheck disable=SC1091
    source "$dir/pg.env"
    if [[ -d "$PG_ROOT/data" ]]; then
        as_pg_owner "$PG_BINDIR/pg_ctl" -D "$PG_ROOT/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$PG_ROOT" "$dir/pg" "$dir/pg.env"
}

write_helpers() {
    local dir="$1"
    cat >"$dir/worker.py" <<'EOF'
"""One writer: import, say ready, wait for the start file, log COUNT attempts of the group."""
import os
import sys
import time

from mlflow_perfgate import log_attempt  # mlflow_perfgate loads lazily: this pulls in mlflow now
from mlflow_perfgate.tracking import _client, _environment

group, experiment, worker, count, workdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
conditions = {"model": "TinyLM", "input_shape": "4,128", "batch_size": 4, "dtype": "fp32", "device": "cpu",
              "repeats": 5, "measurement_method": "wall_ms", "checkpoint": False}
_environment.fingerprint()  # computed once per process (git revision, CPU model): not write time
_client.client()
open(os.path.join(workdir, f"ready-{worker}"), "w").close()
while not os.path.exists(os.path.join(workdir, "start")):  # all writers start together
    time.sleep(0.005)
for index in range(count):
    arm = ("baseline", "candidate")[(worker + index) % 2]
    latency = (100.0 if arm == "baseline" else 80.0) + (worker * count + index) % 5 * 0.5
    log_attempt(group, arm, {**conditions, "checkpoint": arm == "candidate"}, latency_ms=latency,
                quality=0.9, experiment_name=experiment, attempt_id=f"w{worker}-a{index}")
with open(os.path.join(workdir, f"done-{worker}"), "w") as handle:  # before interpreter teardown
    handle.write(f"{time.time()!r}\n")
EOF
    cat >"$dir/check.py" <<'EOF'
"""Nothing lost: every attempt is one run, judged once by the decision, nested under it."""
import json
import sys

from mlflow.tracking import MlflowClient

experiment, writers, attempts, decision_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
expected_ids = {f"w{w}-a{i}" for w in range(writers) for i in range(attempts)}
client = MlflowClient()
exp = client.get_experiment_by_name(experiment)
runs = client.search_runs([exp.experiment_id], filter_string="tags.`perfgate.kind` = 'attempt'", max_results=50000)
ids = [run.data.tags["perfgate.attempt_id"] for run in runs]
with open(decision_file) as handle:
    decision = json.load(handle)
problems = []
if len(runs) != len(expected_ids):
    problems.append(f"{len(runs)} attempt runs, expected {len(expected_ids)}")
if set(ids) != expected_ids:
    problems.append(f"missing {sorted(expected_ids - set(ids))[:5]}, unexpected {sorted(set(ids) - expected_ids)[:5]}")
if len(set(ids)) != len(ids):
    problems.append(f"{len(ids) - len(set(ids))} duplicated attempt ids")
if sorted(decision["run_ids"]) != sorted(run.info.run_id for run in runs):
    problems.append(f"the decision judged {len(decision['run_ids'])} runs, not exactly the {len(runs)} attempts")
if decision["baseline"]["attempted_runs"] + decision["candidate"]["attempted_runs"] != len(expected_ids):
    problems.append("attempted_runs of the two arms do not add up")
not_finished = [run.info.run_id for run in runs if run.info.status != "FINISHED"]
if not_finished:
    problems.append(f"{len(not_finished)} attempts not FINISHED")
orphans = [run.info.run_id for run in runs if run.data.tags.get("mlflow.parentRunId") != decision["decision_run_id"]]
if orphans:
    problems.append(f"{len(orphans)} attempts not nested under the decision run")
if decision["decision"] != "accept":
    problems.append(f"decision {decision['decision']} ({decision['reason']}), expected accept")
print(json.dumps({"attempt_runs": len(runs), "unique_attempt_ids": len(set(ids)), "judged": len(decision["run_ids"]),
                  "decision": decision["decision"], "reason": decision["reason"], "problems": problems}))
sys.exit(1 if problems else 0)
EOF
}

run_recipe() {
    # workdir and keep are globals: the EXIT trap runs after this function has returned
    local writers=16 attempts=4 server_workers=2
    workdir="" keep=0
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --writers) writers="$2"; shift 2 ;;
            --attempts) attempts="$2"; shift 2 ;;
            --workdir) workdir="$2"; shift 2 ;;
            --server-workers) server_workers="$2"; shift 2 ;;
            --keep) keep=1; shift ;;
            *) die "unknown option $1" ;;
        esac
    done
    local t0=$SECONDS
    if [[ -z "$workdir" ]]; then workdir="$(mktemp -d "${TMPDIR:-/tmp}/perfgate-recipe.XXXXXX")"; fi
    mkdir -p "$workdir"
    workdir="$(cd "$workdir" && pwd)"
    SERVER_PID=""
    WRITER_PIDS=()
    cleanup() {
        local pid
        for pid in "${WRITER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
        if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" 2>/dev/null || true
            for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
            kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
        fi
        pg_stop "$workdir"
        if [[ "$keep" == 0 ]]; then rm -rf "$workdir"; else log "kept $workdir"; fi
    }
    trap cleanup EXIT
    trap 'exit 130' INT TERM

    ensure_psycopg2
    log "starting PostgreSQL ..."
    local pg_uri
    pg_uri="$(pg_start "$workdir")"
    local port url
    port="$(free_port)"
    url="http://127.0.0.1:$port"
    log "starting mlflow server on $url (backend: PostgreSQL on 127.0.0.1, $server_workers workers) ..."
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$PYTHON" -m mlflow server --host 127.0.0.1 --port "$port" \
        --backend-store-uri "$pg_uri" --artifacts-destination "$workdir/artifacts" \
        --workers "$server_workers" >"$workdir/server.log" 2>&1 &
    SERVER_PID=$!
    local ready=0
    for _ in $(seq 1 300); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then tail -30 "$workdir/server.log" >&2; die "mlflow server exited"; fi
        if "$PYTHON" -c "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('$url/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
            ready=1; break
        fi
        sleep 0.5
    done
    [[ "$ready" == 1 ]] || { tail -30 "$workdir/server.log" >&2; die "mlflow server did not answer"; }

    export MLFLOW_TRACKING_URI="$url"
    # the writers and evaluate share one journal in the work folder, not the user's own (the
    # per-user default, ~/.local/state/mlflow-perfgate/journal.jsonl): a run of the recipe leaves
    # nothing pending there, and nothing a user left pending there holds up its evaluate
    export MLFLOW_PERFGATE_JOURNAL="$workdir/journal.jsonl"
    unset MLFLOW_EXPERIMENT_NAME MLFLOW_EXPERIMENT_ID
    local experiment="recipe-$$-$RANDOM" group="scale-out-$$" expected=$((writers * attempts))
    write_helpers "$workdir"
    cd "$workdir"
    log "$writers writers x $attempts attempts of group '$group' (experiment '$experiment') ..."
    local w
    for ((w = 0; w < writers; w++)); do
        "$PYTHON" "$workdir/worker.py" "$group" "$experiment" "$w" "$attempts" "$workdir" >"$workdir/writer-$w.log" 2>&1 &
        WRITER_PIDS+=($!)
    done
    # start the clock once every writer has imported (process start is not write throughput)
    for _ in $(seq 1 1200); do
        ready=$(find "$workdir" -maxdepth 1 -name 'ready-*' | wc -l)
        [[ "$ready" -ge "$writers" ]] && break
        for w in "${!WRITER_PIDS[@]}"; do
            kill -0 "${WRITER_PIDS[$w]}" 2>/dev/null || [[ -e "$workdir/ready-$w" ]] \
                || { tail -5 "$workdir/writer-$w.log" >&2; die "writer $w exited before it was ready"; }
        done
        sleep 0.1
    done
    [[ "$ready" -ge "$writers" ]] || die "only $ready of $writers writers got ready"
    local t_start t_end
    t_start=$(date +%s.%N)
    touch "$workdir/start"
    local failed=0
    for w in "${!WRITER_PIDS[@]}"; do
        if ! wait "${WRITER_PIDS[$w]}"; then
            failed=$((failed + 1)); log "writer $w failed:"; tail -5 "$workdir/writer-$w.log" >&2
        fi
    done
    WRITER_PIDS=()
    [[ "$failed" == 0 ]] || die "$failed writers failed"
    t_end=$(cat "$workdir"/done-* | sort -g | tail -1)   # the last writer's last attempt
    "$PYTHON" -c "print(f'[postgres_recipe] {$expected} attempts by $writers writers in {$t_end - $t_start:.2f} s: {$expected / ($t_end - $t_start):.1f} attempts/s')" >&2

    log "evaluate ..."
    local code=0
    "$PYTHON" -m mlflow_perfgate evaluate --group "$group" --experiment "$experiment" \
        --min-valid-runs "$((expected / 2))" --format json >"$workdir/decision.json" 2>"$workdir/evaluate.err" || code=$?
    if [[ "$code" != 0 ]]; then cat "$workdir/evaluate.err" >&2; die "evaluate exited $code (expected 0: accept)"; fi
    local summary
    summary="$("$PYTHON" "$workdir/check.py" "$experiment" "$writers" "$attempts" "$workdir/decision.json")" \
        || { echo "$summary"; die "lost or duplicated attempts"; }
    echo "$summary"
    log "OK: $expected of $expected attempts recorded and judged, decision accept ($((SECONDS - t0)) s in all)"
}

command="${1:-run}"
case "$command" in
    run) [[ $# -gt 0 ]] && shift; run_recipe "$@" ;;
    --*) run_recipe "$@" ;;
    pg-start) [[ $# -eq 2 ]] || die "usage: $0 pg-start DIR"; ensure_psycopg2; pg_start "$2" ;;
    pg-stop) [[ $# -eq 2 ]] || die "usage: $0 pg-stop DIR"; pg_stop "$2" ;;
    *) die "unknown command $command (run, pg-start DIR, pg-stop DIR)" ;;
esac
