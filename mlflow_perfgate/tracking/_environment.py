"""The environment fingerprint of an attempt, and the check that arms share one.

A fingerprint is a few strings that, when they differ between attempts, make a timing
comparison meaningless: interpreter and library versions, CPU model and count, GPU, torch
threads, host and git revision. They are logged as ``perfgate.env.<key>`` tags. Nothing here
imports torch: its version is read from the installed package's metadata, and the workload
runner adds what only it knows (torch threads, GPU name).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import subprocess

from ._schema import TAG

__all__ = ["ENV_MISMATCH_MODES", "ENV_TAG_PREFIX", "commit_time", "compare_fingerprints", "env_from_tags",
           "excused_by", "fingerprint", "process_alive", "process_identity"]

ENV_TAG_PREFIX = TAG.ENV_PREFIX
ENV_MISMATCH_MODES = ("fail", "warn", "ignore")
#: A changed variable that legitimately changes a fingerprint key (the variable under test).
_EXCUSES = {
    "git_revision": {"revision", "git_revision", "commit", "git_sha"},
    "torch_threads": {"threads", "torch_threads", "num_threads"},
    "torch": {"torch", "torch_version", "python"},  # another interpreter: another environment, its own torch
    "python": {"python", "python_version"},
    "mlflow": {"mlflow", "mlflow_version", "python"},
    "gpu_name": {"gpu", "gpu_name"},
    "host": {"host"},
}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_revision() -> str:
    """The checkout in the working directory (each arm's worktree in CI), else ``GITHUB_SHA``."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if completed.returncode == 0 and completed.stdout.strip():
            return completed.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("GITHUB_SHA") or "unknown"


_GIT_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")


@functools.lru_cache(maxsize=1024)
def commit_time(revision: str, cwd: str | None = None) -> int | None:
    """The commit time (POSIX seconds) of ``revision`` in the git repository of ``cwd`` (the working
    directory), when it is a commit sha that repository holds; ``None`` otherwise (not a sha, no git,
    no repository, an unknown commit). One ``git show`` per revision, cached."""
    if not isinstance(revision, str) or not _GIT_SHA.match(revision.strip()):
        return None
    try:
        completed = subprocess.run(["git", "show", "-s", "--format=%ct", f"{revision.strip()}^{{commit}}", "--"],
                                   capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    text = completed.stdout.strip()
    return int(text) if completed.returncode == 0 and text.isdigit() else None


def is_ancestor(older: str, newer: str, cwd: str | None = None) -> bool | None:
    """Whether commit ``older`` is an ancestor of ``newer`` in the git repository of ``cwd``
    (``git merge-base --is-ancestor``); ``None`` when git cannot say (not shas, no repository)."""
    if not all(isinstance(r, str) and _GIT_SHA.match(r.strip()) for r in (older, newer)):
        return None
    try:
        completed = subprocess.run(["git", "merge-base", "--is-ancestor", older.strip(), newer.strip()],
                                   capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(completed.returncode)


@functools.lru_cache(maxsize=1)
def _static_fingerprint() -> tuple[tuple[str, str], ...]:
    return tuple({
        "python": platform.python_version(),
        "torch": _version("torch"),
        "mlflow": _version("mlflow"),
        "cpu_model": _cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "host": platform.node(),
        "git_revision": _git_revision(),
    }.items())


def fingerprint(extra: dict | None = None) -> dict[str, str]:
    """This process's fingerprint (computed once), with the caller's keys added or replaced."""
    values = dict(_static_fingerprint())
    values.update({str(k): str(v) for k, v in (extra or {}).items()})
    return values


def env_from_tags(tags: dict) -> dict[str, str]:
    return {key[len(ENV_TAG_PREFIX):]: value for key, value in tags.items() if key.startswith(ENV_TAG_PREFIX)}


def compare_fingerprints(fingerprints: list[tuple[str, dict]], changed_variable: str | None) -> list[str]:
    """Keys on which the attempts' fingerprints differ, each with its values, beyond the changed variable.

    Args:
        fingerprints: ``(run_id, fingerprint)`` for every attempt (empty fingerprints, from
            attempts logged without one, are skipped).
        changed_variable: the condition under test; a fingerprint key it accounts for (say
            ``git_revision`` for ``revision``) may differ.

    Returns:
        One message per differing key, e.g. ``"host: 'a' (3 runs), 'b' (2 runs)"``.
    """
    values: dict[str, dict[str, int]] = {}
    for _, env in fingerprints:
        for key, value in env.items():
            values.setdefault(key, {}).setdefault(value, 0)
            values[key][value] += 1
    mismatches = []
    for key, seen in sorted(values.items()):
        if len(seen) < 2:
            continue
        if changed_variable is not None and excused_by(key, changed_variable):
            continue
        listed = ", ".join(f"{value!r} ({count} runs)" for value, count in sorted(seen.items()))
        mismatches.append(f"{key}: {listed}")
    return mismatches


def excused_by(key: str, changed_variable: str) -> bool:
    """Whether a fingerprint key may differ between the arms because of the variable under test."""
    return changed_variable == key or changed_variable in _EXCUSES.get(key, ())


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat``, field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the fields after the command name, from field 3 (the state)
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended


def process_identity(pid: int | None = None) -> str:
    """Who is writing an attempt or a comparison: ``host|boot id|pid|start ticks`` (a PID reused later,
    or after a reboot, does not match)."""
    pid = os.getpid() if pid is None else pid
    return "|".join([platform.node(), _boot_id(), str(pid), _start_ticks(pid) or "?"])


def process_alive(identity: str) -> bool | None:
    """Whether the process an identity names still runs: ``None`` when this host cannot tell
    (another host, another boot, no ``/proc``)."""
    try:
        host, boot, pid, ticks = identity.split("|")
        pid_number = int(pid)
    except ValueError:
        return None
    if host != platform.node() or boot != _boot_id() or boot == "unknown" or ticks == "?":
        return None
    return _start_ticks(pid_number) == ticks
