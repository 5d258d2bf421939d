"""Scale-out on PostgreSQL: 16 writer processes, one tracking server, one evaluate, nothing lost.

Runs ``scripts/postgres_recipe.sh`` (a private PostgreSQL cluster on 127.0.0.1, an ``mlflow
server`` on it, 16 concurrent writers, ``mlflow-perfgate evaluate``) and checks its verdict.
Marked ``postgres`` (about 70 s on 2 cores): ``pytest -m postgres`` runs it, ``-m "not postgres"``
leaves it out. Skipped, with the reason, where the PostgreSQL server binaries or psycopg2 are
missing or cannot run.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).resolve().parents[1] / "scripts" / "postgres_recipe.sh"


def _documented_sizes() -> tuple[int, int]:
    """The writers and attempts of docs/how-to/postgresql.md's command: the test runs the recipe as documented."""
    import shlex

    from helpers import blocks, doc_section

    words = shlex.split(blocks(doc_section("how-to/postgresql.md"), "bash")[0])
    assert words[:3] == ["PYTHON=.venv/bin/python", "bash", "scripts/postgres_recipe.sh"], words
    return int(words[words.index("--writers") + 1]), int(words[words.index("--attempts") + 1])


WRITERS, ATTEMPTS = _documented_sizes()

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _postgres_unavailable() -> str | None:
    """Why the recipe cannot run here, or None."""
    if shutil.which("bash") is None:
        return "bash is not installed"
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    bindirs = [d for d in bindirs if all(os.access(f"{d}/{name}", os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))]
    if not bindirs:
        return "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
    initdb = f"{bindirs[-1]}/initdb"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser: PostgreSQL cannot be started as another user"
        try:
            subprocess.run(["id", "postgres"], check=True, capture_output=True, timeout=30)
        except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
            return "running as root but there is no 'postgres' user to run PostgreSQL as"
        command = ["runuser", "-u", "postgres", "--", initdb, "--version"]
    else:
        command = [initdb, "--version"]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
        return f"PostgreSQL binaries cannot run here: {exc}"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install psycopg2-binary)"
    return None


def test_sixteen_writers_on_postgresql_lose_nothing(tmp_path):
    reason = _postgres_unavailable()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path / "recipe"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_TRACKING_", "MLFLOW_EXPERIMENT_"))}
    env["PYTHON"] = sys.executable
    completed = subprocess.run(
        ["bash", str(RECIPE), "run", "--writers", str(WRITERS), "--attempts", str(ATTEMPTS),
         "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["problems"] == []
    assert summary["attempt_runs"] == summary["unique_attempt_ids"] == summary["judged"] == WRITERS * ATTEMPTS
    assert summary["decision"] == "accept"
    assert f"{WRITERS * ATTEMPTS} of {WRITERS * ATTEMPTS} attempts recorded" in completed.stderr
    # the trap cleaned up: no cluster, no server, no work directory left behind
    assert not workdir.exists()
