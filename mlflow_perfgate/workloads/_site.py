"""Where an arm's child runs: its interpreter, the folder it starts in and its import path.

A comparison of two configurations runs both arms' children from the caller's own interpreter
and folder (:meth:`Site.here`). A comparison of two revisions of the code, or of two Python
environments, cannot: each arm's child must import its own code (a git worktree of its
revision) or run in its own interpreter (another virtual environment, another torch). A
:class:`Site` says which, and the runners start every child of an arm there: the spawn runner's
fresh interpreter and the fork runner's warm server alike (``_runner``).

What a child needs from an interpreter of another environment: ``torch`` (and what the
workload itself imports). This package's child side comes from the caller's installation, on
the child's ``PYTHONPATH`` through a folder that holds only it (:func:`package_shim`), so the
other environment needs no mlflow-perfgate and none of the caller's site-packages leak into it
(its own torch is the one measured). :func:`probe_python` checks that before anything runs.

Standard library only: the side that starts children imports no torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["Site", "package_shim", "probe_python", "site_env"]

#: The package whose child side a foreign interpreter imports through :func:`package_shim`.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: What :func:`probe_python` runs in the arm's interpreter: its versions, and whether the child side imports.
_PROBE = r"""
import json, platform, sys
found = {"python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix}
try:
    import torch
    found["torch"] = torch.__version__
except BaseException as error:
    found["torch_error"] = f"{type(error).__name__}: {error}"
try:
    import mlflow_perfgate.workloads._child
except BaseException as error:
    found["perfgate_error"] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


@dataclasses.dataclass(frozen=True)
class Site:
    """Where the children of an arm run. Hashable: runners are kept per site.

    Attributes:
        python: the interpreter that starts them (an absolute path).
        cwd: the folder they start in.
        path: their import path, in order (``PYTHONPATH``; a foreign interpreter's own
            site-packages and standard library come after it).
        env: environment variables set for them, as ``(name, value)`` pairs.
        label: what the site is, for messages (``"worktree of 1a2b3c4d5e6f"``).
        foreign: ``python`` is another environment's interpreter: this process's own
            site-packages are kept off its path.
        moves: ``(checkout, worktree)`` pairs (:meth:`moved`): a folder under a checkout is read at
            the same place in its worktree, the ``PYTHONPATH`` set here too (:func:`site_env`).
    """

    python: str
    cwd: str
    path: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    label: str = "this interpreter"
    foreign: bool = False
    moves: tuple[tuple[str, str], ...] = ()

    @classmethod
    def here(cls) -> "Site":
        """This process's interpreter, folder and ``sys.path``: where children ran before sites existed."""
        return cls(python=sys.executable, cwd=os.getcwd(), path=_own_path())

    def moved(self, top: str | os.PathLike, root: str | os.PathLike, *, label: str,
              env: dict[str, str] | None = None) -> "Site":
        """This site with every folder under ``top`` (a checkout) moved to the same place under ``root``
        (a worktree of it): the folder the children start in and the import path."""
        moves = ((os.path.abspath(top), os.path.abspath(root)),)
        cwd = _moved(self.cwd, moves)
        while not os.path.isdir(cwd) and cwd.startswith(moves[0][1] + os.sep):  # a folder the revision lacks:
            cwd = os.path.dirname(cwd)                                          # its nearest one there
        return dataclasses.replace(self, cwd=cwd,
                                   path=tuple(dict.fromkeys(_moved(p, moves) for p in self.path)),
                                   env=tuple(sorted({**dict(self.env), **(env or {})}.items())), label=label,
                                   moves=self.moves + moves)

    def with_python(self, python: str, *, label: str | None = None) -> "Site":
        """This site, its children started by another interpreter (``python``, an absolute path): this
        process's environment (its site-packages, its standard library) is kept off their path, and
        this package's child side is put on it through :func:`package_shim`."""
        python = os.path.abspath(python)
        if python == os.path.abspath(sys.executable):  # not realpath: a virtual environment's python is a link
            return self
        own = _own_prefixes()
        kept = tuple(p for p in self.path if not any(p == prefix or p.startswith(prefix + os.sep) for prefix in own))
        return dataclasses.replace(self, python=python, path=(str(package_shim()), *kept), foreign=True,
                                   label=label or f"interpreter {python}")


def _moved(entry: str, moves: tuple[tuple[str, str], ...]) -> str:
    """``entry`` (a folder) at its place in the worktree of the checkout that holds it, if one does."""
    entry = os.path.abspath(entry)
    for top, root in moves:
        if entry == top or entry.startswith(top + os.sep):
            return os.path.join(root, os.path.relpath(entry, top)) if entry != top else root
    return entry


def _own_path() -> tuple[str, ...]:
    return tuple(dict.fromkeys(os.path.abspath(p) for p in sys.path if p))


def _own_prefixes() -> tuple[str, ...]:
    """The folders of this interpreter's environment: its prefixes, standard library and site-packages."""
    found = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        with_name = sysconfig.get_paths().get(name)
        if with_name:
            found.add(with_name)
    return tuple(sorted({os.path.abspath(p) for p in found if p}, key=len, reverse=True))


def site_env(site: Site | None = None) -> dict:
    """The environment of a child at ``site``: this process's, its import path in ``PYTHONPATH``.

    At this process's own site (``None``), every ``sys.path`` entry and the ``PYTHONPATH`` already
    set; at a site of another interpreter, only the site's path (``PYTHONPATH`` as set here would
    carry this environment's packages); then the site's own variables.
    """
    env = dict(os.environ)
    site = site or Site.here()
    entries = list(site.path)
    existing = env.get("PYTHONPATH")
    if existing and not site.foreign:  # a folder of the checkout on it is read in the site's worktree
        entries += [_moved(entry, site.moves) if site.moves else entry for entry in existing.split(os.pathsep) if entry]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))
    env["PYTHONFAULTHANDLER"] = "1"
    if site.foreign:
        for name in ("PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX"):
            env.pop(name, None)
    env.update(dict(site.env))
    return env


def package_shim() -> Path:
    """A folder holding only this package (a symbolic link to it), for another interpreter's path.

    One per installation (named by the package's folder), in the temporary directory; made once,
    atomically (a link made under a temporary name, then renamed), so that twins agree.
    """
    digest = hashlib.sha256(str(_PACKAGE_DIR).encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / f"perfgate-shim-{os.getuid() if hasattr(os, 'getuid') else 0}-{digest}"
    link = shim / _PACKAGE_DIR.name
    if link.is_symlink() and link.resolve() == _PACKAGE_DIR:
        return shim
    shim.mkdir(mode=0o700, exist_ok=True)
    temporary = shim / f".{_PACKAGE_DIR.name}.{os.getpid()}"
    if temporary.is_symlink():
        temporary.unlink()
    temporary.symlink_to(_PACKAGE_DIR, target_is_directory=True)
    os.replace(temporary, link)
    return shim


def probe_python(site: Site, timeout_s: float = 120.0) -> dict:
    """What the interpreter of ``site`` has, asked in a process of its own (with the site's path).

    Returns:
        ``python`` (its version), ``executable``, ``prefix`` and ``torch`` (the version), or
        ``error``: one sentence saying what is missing (the interpreter, torch, or this
        package's child side, which needs Python 3.11 or later).
    """
    try:
        completed = subprocess.run([site.python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s,
                                   env=site_env(site), cwd=site.cwd)
    except FileNotFoundError:
        return {"error": f"no interpreter at {site.python}"}
    except PermissionError:
        return {"error": f"{site.python} cannot be run (permission denied)"}
    except subprocess.TimeoutExpired:
        return {"error": f"{site.python} did not answer within {timeout_s:g} s"}
    except OSError as error:
        return {"error": f"{site.python} cannot be run ({error.strerror or error})"}
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    try:
        found = json.loads(lines[-1])
    except (IndexError, ValueError):
        said = (completed.stderr.strip().splitlines() or ["nothing"])[-1]
        return {"error": f"{site.python} is not a Python that can run this package's child side ({said})"}
    if "torch_error" in found:
        return {**found, "error": f"{site.python} cannot import torch ({found['torch_error']}): install torch "
                                  f"in that environment ({site.python} -m pip install torch)"}
    if "perfgate_error" in found:
        return {**found, "error": f"{site.python} (Python {found.get('python')}) cannot import mlflow-perfgate's "
                                  f"child side ({found['perfgate_error']}); it needs Python 3.11 or later"}
    return found
