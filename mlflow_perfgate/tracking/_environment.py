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
import subprocess

from ._schema import TAG

__all__ = ["fingerprint", "ENV_TAG_PREFIX", "env_from_tags", "compare_fingerprints", "ENV_MISMATCH_MODES"]

ENV_TAG_PREFIX = TAG.ENV_PREFIX
ENV_MISMATCH_MODES = ("fail", "warn", "ignore")
#: A changed variable that legitimately changes a fingerprint key (the variable under test).
_EXCUSES = {
    "git_revision": {"revision", "git_revision", "commit", "git_sha"},
    "torch_threads": {"threads", "torch_threads", "num_threads"},
    "torch": {"torch", "torch_version"},
    "python": {"python", "python_version"},
    "mlflow": {"mlflow", "mlflow_version"},
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
        if changed_variable is not None and (changed_variable == key or changed_variable in _EXCUSES.get(key, ())):
            continue
        listed = ", ".join(f"{value!r} ({count} runs)" for value, count in sorted(seen.items()))
        mismatches.append(f"{key}: {listed}")
    return mismatches
