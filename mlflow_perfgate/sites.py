"""Where each arm of a comparison runs: a revision's git worktree, another Python environment.

Two conditions say where an arm's code comes from rather than how its workload is built, so the
runner reads them, not the factory:

- ``revision``: a git revision of the repository in the working directory. Each arm's children
  start in a git worktree of its revision (``<git dir>/perfgate-worktrees/<sha>``), at the
  same place in it as the working directory in the checkout, with every import path under the
  checkout moved into the worktree: ``--workload bench:make`` imports each revision's own
  ``bench.py``. A factory that finds its code itself reads the worktree with
  :func:`mlflow_perfgate.history.revision_worktree`. The condition is recorded as the full sha.
  The value :data:`WORKING_TREE` (``working-tree``) is the checkout itself, uncommitted changes
  included: that arm's children run here (no worktree), and its fingerprint's ``git_revision``
  is the checkout's ``HEAD``; ``--set revision=main --change revision=working-tree`` gates what
  you have not committed yet against ``main``.
- ``python``: an interpreter (a path, or a name on ``PATH``): each arm's children run in it,
  another virtual environment with its own torch, say. It needs torch and what the workload
  imports; this package's child side comes from here (``workloads._site``). Recorded as the
  interpreter's absolute path; the attempts' environment fingerprint carries its Python and torch
  versions.

:func:`arm_sites` checks all of it before anything runs (a revision git cannot resolve, an
interpreter that is missing or lacks torch: one :class:`~mlflow_perfgate.rules.InputError` naming
the arm and the fix), makes the worktrees, and gives the :class:`ArmSites` the runner routes by.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["SITE_CONDITIONS", "WORKING_TREE", "WORKTREES_ENV", "ArmSites", "arm_sites", "git", "resolve_revisions",
           "worktree_root"]

#: The conditions that place an arm's children (read by the runner, never by the factory).
SITE_CONDITIONS = ("revision", "python")
#: The ``revision`` of the checkout in the working directory as it is, uncommitted changes included.
WORKING_TREE = "working-tree"
#: The folder holding one git worktree per revision (``<folder>/<sha>``), set for the children of a
#: comparison of revisions (and of ``history --bisect``).
WORKTREES_ENV = "MLFLOW_PERFGATE_WORKTREES"


def git(*args: str, cwd: str | os.PathLike | None = None, what: str | None = None) -> str:
    """``git ARGS`` in ``cwd``, its output; a failure is an :class:`InputError` (``what`` names the attempt)."""
    try:
        completed = subprocess.run(["git", *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    except OSError as exc:
        raise InputError(f"git could not be run: {exc.strerror}") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {' '.join(args)} did not finish within 300 s") from None
    if completed.returncode != 0:
        said = completed.stderr.strip() or completed.stdout.strip() or f"exit status {completed.returncode}"
        raise InputError(f"{what or 'git ' + ' '.join(args)} failed: {said}")
    return completed.stdout.strip()


def worktree_root(top: str | os.PathLike) -> Path:
    """The folder of the repository at ``top`` where its revisions' worktrees go (in its git directory)."""
    common = Path(git("rev-parse", "--git-common-dir", cwd=top))
    return (common if common.is_absolute() else Path(top) / common).resolve() / "perfgate-worktrees"


def checkout(top: str | os.PathLike, sha: str) -> tuple[Path, bool]:
    """The worktree of commit ``sha`` (made with ``git worktree add --detach`` if it is not there yet);
    whether this call made it. A twin making the same one at the same moment is waited for, not raced."""
    root = worktree_root(top)
    root.mkdir(parents=True, exist_ok=True)
    path = root / sha
    if _at(path, sha):
        return path, False
    try:
        git("worktree", "add", "--detach", str(path), sha, cwd=top)
    except InputError:
        if _at(path, sha):  # a twin made it meanwhile
            return path, False
        raise
    return path, True


def _at(path: Path, sha: str) -> bool:
    if not (path / ".git").exists():
        return False
    try:
        return git("rev-parse", "HEAD", cwd=path) == sha
    except InputError:
        return False


def remove_worktree(top: str | os.PathLike, path: Path) -> None:
    """Remove a worktree this process made (and prune git's record of it); whatever fails is left."""
    with contextlib.suppress(InputError):
        git("worktree", "remove", "--force", str(path), cwd=top)
    with contextlib.suppress(InputError):
        git("worktree", "prune", cwd=top)
    with contextlib.suppress(OSError):  # the folder of worktrees, once it holds none (a twin's may be there)
        path.parent.rmdir()


@dataclasses.dataclass
class ArmSites:
    """The sites of a comparison's arms, by the values of their site conditions.

    Attributes:
        conditions: each arm's site conditions as recorded (``revision`` a full sha, ``python``
            an absolute path), by arm.
        environment: each arm's environment fingerprint keys its site sets (``git_revision``;
            ``python`` and ``torch`` of its interpreter), by arm.
        labels: what each arm's site is, for messages, by arm.
        top: the repository's top folder (revisions), else ``None``.
        made: the worktrees this call made (removed by :meth:`close` unless kept).
    """

    sites: dict[tuple, Any]
    conditions: dict[str, dict]
    environment: dict[str, dict]
    labels: dict[str, str]
    top: str | None = None
    made: list[Path] = dataclasses.field(default_factory=list)
    keep: bool = False

    def site_of(self, conditions: dict):
        """The site of an attempt's conditions (``None``: here)."""
        return self.sites.get(_key(conditions))

    def of(self, arm: str):
        return self.sites.get(_key(self.conditions[arm]))

    def close(self) -> None:
        """Remove the worktrees this comparison made, unless they are to be kept."""
        if not self.keep and self.top is not None:
            for path in self.made:
                remove_worktree(self.top, path)
        self.made = []


def _key(conditions: dict) -> tuple:
    return tuple(str(conditions.get(name)) if conditions.get(name) is not None else None for name in SITE_CONDITIONS)


def arm_sites(workload: str, arms: dict[str, dict], *, keep_worktrees: bool = False,
              repository: str | os.PathLike | None = None) -> ArmSites | None:
    """Check where each arm runs and prepare it (worktrees made); ``None`` when every arm runs here.

    Args:
        workload: the workload (named in messages).
        arms: each arm's conditions, by arm name (``baseline``, ``candidate``); their site
            conditions are read, never changed (:attr:`ArmSites.conditions` holds what to record).
        keep_worktrees: leave the worktrees made in place when the comparison ends.
        repository: the repository of ``revision`` (default: the working directory's).

    Raises:
        InputError: a revision outside a git repository or one git cannot resolve, a ``python``
            that is missing, cannot be run or lacks torch; one line naming the arm and the fix.
    """
    from .workloads import Site, probe_python

    if not any(conditions.get(name) not in (None, "") for conditions in arms.values() for name in SITE_CONDITIONS):
        return None
    here = Site.here()
    top = None
    if any(conditions.get("revision") not in (None, "") for conditions in arms.values()):
        top = _top(repository)
    result = ArmSites(sites={}, conditions={}, environment={}, labels={}, top=top, keep=keep_worktrees)
    probed: dict[str, dict] = {}
    try:
        for arm, conditions in arms.items():
            site, recorded, environment, labels = here, {}, {}, []
            revision = conditions.get("revision")
            working = str(revision) == WORKING_TREE
            if working:  # the checkout as it is: its children run here
                head = _resolve(top, "HEAD", arm)
                # uncommitted changes give the fingerprint a digest of their diff: a group whose working tree
                # changed between two calls (a resume) holds two environments within one arm, refused
                diff = git("diff", "HEAD", "--binary", cwd=top)
                dirty = bool(diff)
                state = f"{head}+{hashlib.sha256(diff.encode()).hexdigest()[:12]}" if dirty else head
                recorded["revision"], environment["git_revision"] = WORKING_TREE, state
                labels.append(f"the working tree (HEAD {head[:12]}{', with uncommitted changes' if dirty else ''})")
            elif revision not in (None, ""):
                sha = _resolve(top, str(revision), arm)
                path, made = checkout(top, sha)
                if made:
                    result.made.append(path)
                site = site.moved(top, path, label=f"worktree of {sha[:12]}",
                                  env={WORKTREES_ENV: str(path.parent)})
                _require_moved(workload, top, site, path, arm, callables=_callable_modules(conditions))
                recorded["revision"], environment["git_revision"] = sha, sha
                labels.append(f"revision {sha[:12]}" + ("" if sha.startswith(str(revision)) else f" ({revision})"))
            python = conditions.get("python")
            if python not in (None, ""):
                path = _interpreter(str(python), arm)
                site = site.with_python(path)
                found = probed.get(path) or probe_python(site)
                probed[path] = found
                if "error" in found:
                    raise InputError(f"the {arm}'s python ({python}): {found['error']}; nothing was run or logged")
                recorded["python"] = path
                environment.update({"python": found["python"], "torch": found["torch"]})
                labels.append(f"python {path} (Python {found['python']}, torch {found['torch']})")
            result.sites[_key({**conditions, **recorded})] = site if (python or (revision and not working)) else None
            result.conditions[arm] = recorded
            result.environment[arm] = environment
            result.labels[arm] = ", ".join(labels) or "here"
    except BaseException:
        result.close()
        raise
    return result


def _callable_modules(conditions: dict) -> list[str]:
    """The modules of a callables workload's functions (``*_callable`` conditions: ``module:function``)."""
    return [str(value).partition(":")[0] for key, value in conditions.items()
            if str(key).endswith("_callable") and ":" in str(value)]


def _top(repository: str | os.PathLike | None) -> str:
    try:
        return git("rev-parse", "--show-toplevel", cwd=repository)
    except InputError:
        raise InputError(f"a revision condition names a commit of the git repository in the working directory, and "
                         f"{os.path.abspath(repository or os.getcwd())} is in none: run from the repository's "
                         "checkout; nothing was run or logged") from None


def resolve_revisions(arms: dict[str, dict], *, repository: str | os.PathLike | None = None) -> None:
    """The checks of :func:`arm_sites` that make nothing: each arm's ``revision`` resolves (``working-tree``:
    a repository here), so a list of comparisons is refused before any of them runs or logs.

    Raises:
        InputError: as :func:`arm_sites` says it.
    """
    revisions = {arm: str(conditions["revision"]) for arm, conditions in arms.items()
                 if conditions.get("revision") not in (None, "")}
    if revisions:
        top = _top(repository)
        for arm, revision in revisions.items():
            if revision != WORKING_TREE:
                _resolve(top, revision, arm)


def _require_moved(workload: str, top: str, site: Any, worktree: Path, arm: str, *,
                   callables: list[str] = ()) -> None:
    """Refuse a workload module in the repository (or a module of its callables) that the arm's
    children would import from the checkout here rather than from the arm's worktree (an editable
    install's finder, a path outside the moved ones, a module the revision does not hold): both arms
    would run the same code, and the comparison would measure nothing.

    Found without importing anything: where this process finds the module's top-level package, and
    where the child's path (moved into the worktree) finds it.
    """
    from .workloads import workload_target

    for module in dict.fromkeys([workload_target(workload)[0], *callables]):
        _require_module_moved(module.split(".")[0], top, site, worktree, arm)


def _require_module_moved(top_module: str, top: str, site: Any, worktree: Path, arm: str) -> None:
    import importlib.machinery
    import importlib.util

    try:
        here = importlib.util.find_spec(top_module)
    except (ImportError, ValueError):
        here = None
    here_origin = _origin(here) or _origin(importlib.machinery.PathFinder.find_spec(top_module, [os.getcwd()]))
    if here_origin is None or not _under(here_origin, top):
        return  # outside the repository: a factory that finds each revision's code itself (revision_worktree)
    # a child runs ``python -m`` in the site's folder: that folder comes first on its path
    there = _origin(importlib.machinery.PathFinder.find_spec(top_module, [site.cwd, *site.path]))
    if there is not None and _under(there, str(worktree)):
        return
    where = os.path.relpath(os.path.realpath(here_origin), os.path.realpath(top))
    if not os.path.exists(worktree / where):
        raise InputError(f"the {arm}'s revision {worktree.name[:12]} has no {where} (its "
                         f"worktree {worktree} lacks the module {top_module!r} its workload imports): compare revisions that both "
                         "hold the benchmark; nothing was run or logged")
    raise InputError(f"the {arm}'s workload module {top_module!r} would be imported from {here_origin}, the checkout "
                     f"here, not from its revision's worktree ({worktree}): both arms would run the same code. Run "
                     f"from the folder that holds it, or put that folder on PYTHONPATH (an editable install maps the "
                     f"module to the checkout); nothing was run or logged")


def _origin(spec) -> str | None:
    if spec is None:
        return None
    if spec.origin not in (None, "namespace", "built-in", "frozen"):
        return os.path.abspath(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return os.path.abspath(locations[0]) if locations else None


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def _resolve(top: str, revision: str, arm: str) -> str:
    try:
        return git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", cwd=top)
    except InputError:
        raise InputError(f"the {arm}'s revision {revision!r} is not a commit git can resolve in {top}: give a sha, "
                         f"a branch or a tag of that repository (git fetch it first if it is remote); nothing was run "
                         "or logged") from None


def _interpreter(python: str, arm: str) -> str:
    """The absolute path of an interpreter named by a path or by a name on ``PATH``."""
    if os.sep in python or (os.altsep and os.altsep in python):
        path = os.path.abspath(os.path.expanduser(python))
        if not os.path.exists(path):
            raise InputError(f"the {arm}'s python {python!r}: no such file ({path}); give the interpreter of the "
                             "environment to measure, e.g. /path/to/venv/bin/python; nothing was run or logged")
        return path
    found = shutil.which(python)
    if found is None:
        raise InputError(f"the {arm}'s python {python!r} is not on PATH: give the interpreter's path, e.g. "
                         "/path/to/venv/bin/python; nothing was run or logged")
    return os.path.abspath(found)
