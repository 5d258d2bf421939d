"""Containing supervised processes: a parent-death signal, a subreaper, and an end for every descendant.

Standard library only, and at the top of the package (whose ``__init__`` is light), so that a
supervised process runs it before anything heavy: ``python -m mlflow_perfgate._contain`` is
where a spawned attempt child and the fork runner's attempt server start (see :func:`main`).

What it guards against, each with the Linux call behind it (``prctl(2)``, ``/proc``):

* A process that outlives its supervisor. ``PR_SET_PDEATHSIG`` makes the kernel signal a
  process when its parent ends, even by ``SIGKILL``; :func:`die_with_parent` arms it and then
  checks that the parent it expects is still its parent (one that died before the signal was
  armed would never send it). Caveat of the kernel: the signal follows the *thread* that
  started the process, so a runner must stay with the thread that started its server.
* A grandchild in a session of its own (``setsid``, ``start_new_session=True``), which no
  process-group kill reaches. A subreaper (``PR_SET_CHILD_SUBREAPER``, :func:`become_subreaper`)
  adopts every orphan below it instead of ``init``, so the whole tree stays under it, and
  :func:`kill_tree` walks it (``/proc/<pid>/task/<tid>/children``, else every
  ``/proc/<pid>/stat``), stops each process it finds (a stopped process cannot fork), walks
  again until nothing new appears, then kills them all.

Where ``prctl`` is unavailable (any system but Linux), :data:`UNAVAILABLE` says why and both
calls do nothing: a supervised child then gets no parent-death signal, and a descendant that
leaves the child's process group can outlive the attempt.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable

__all__ = ["UNAVAILABLE", "become_subreaper", "descendants", "die_with_parent", "kill_tree", "main", "reap_children"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: The exit code of a process whose parent died before it could arm its parent-death signal.
ORPHANED_EXIT = 125
#: How many times :func:`kill_tree` walks a tree that keeps growing before it kills what it found.
_MAX_WALKS = 50
#: How long :func:`reap_children` waits for killed children to be reaped.
_REAP_S = 2.0


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None, f"prctl is Linux-only, and this is {sys.platform}"
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as error:
        return None, f"prctl cannot be loaded from the C library ({error})"
    function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    function.restype = ctypes.c_int
    return function, None


_PRCTL, UNAVAILABLE = _load_prctl()
UNAVAILABLE: str | None
"""Why this system cannot contain supervised processes (``None`` on Linux, where it can)."""


def _prctl(option: int, value: int) -> str | None:
    if _PRCTL is None:
        return UNAVAILABLE
    if _PRCTL(option, value, 0, 0, 0) != 0:
        return f"prctl({option}) failed: {os.strerror(ctypes.get_errno())}"
    return None


def die_with_parent(expected_parent: int, signum: int = signal.SIGKILL) -> str | None:
    """Have the kernel send ``signum`` to this process when its parent ends; end now if it has.

    Args:
        expected_parent: the pid of the parent that started this process (passed down by it):
            when ``os.getppid()`` is another one after the signal is armed, the parent died
            first and this process exits at once with :data:`ORPHANED_EXIT`.
        signum: ``SIGKILL`` where the process runs a user's code (no handler can delay it);
            a catchable one for our own processes that must end their descendants first.

    Returns:
        ``None``, or why the signal could not be armed (:data:`UNAVAILABLE`).
    """
    why = _prctl(PR_SET_PDEATHSIG, int(signum))
    if why is None and os.getppid() != expected_parent:
        os._exit(ORPHANED_EXIT)
    return why


def become_subreaper() -> str | None:
    """Adopt the orphans of this process's descendants (instead of ``init``); ``None`` or why not."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` from ``/proc/<pid>/task/*/children``; ``None`` where that file is missing."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    found: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(item) for item in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{task}"):
                continue  # the thread ended meanwhile
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            return None
    return found


def _parents() -> dict[int, list[int]]:
    """Every process's children, from the parent pid in each ``/proc/<pid>/stat``."""
    tree: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return tree
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(parent, []).append(int(entry))
    return tree


def descendants(pid: int, spare: Iterable[int] = ()) -> list[int]:
    """Every process below ``pid`` (children first), ``[]`` where there is no ``/proc``; a process in
    ``spare`` is left out, with everything below it."""
    spare = set(spare)
    found: list[int] = []
    stack = [pid]
    tree = None
    while stack:
        current = stack.pop()
        children = _children(current) if tree is None else tree.get(current, [])
        if children is None:
            tree = _parents()
            children = tree.get(current, [])
        for child in children:
            if child not in found and child != pid and child not in spare:
                found.append(child)
                stack.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int | None = None, *, include_root: bool = False, spare: Iterable[int] = ()) -> list[int]:
    """SIGKILL every descendant of ``root`` (default: this process), stopped first so none can fork away.

    Each walk stops what it finds (``SIGSTOP``); the walks go on until one finds nothing new (a
    process forking as it is stopped shows up in the next), then everything found is killed.
    Only the processes are killed: a caller that is their parent (or their subreaper) reaps them
    with :func:`reap_children`.

    Args:
        root: the top of the tree; ``None`` is this process (never stopped or killed itself).
        include_root: stop ``root`` first and kill it last (a child of the caller, say).
        spare: processes left alone, with everything below them (a child still at work).

    Returns:
        The pids killed (``root`` last when included).
    """
    own = root is None or root == os.getpid()
    root = os.getpid() if root is None else root
    if include_root and not own:
        _signal(root, signal.SIGSTOP)
    found: list[int] = []
    for _ in range(_MAX_WALKS):
        new = [pid for pid in descendants(root, spare) if pid not in found]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found.extend(new)
    for pid in found:
        _signal(pid, signal.SIGKILL)
    if include_root and not own:
        _signal(root, signal.SIGKILL)
        found.append(root)
    return found


def reap_children(wait_s: float = _REAP_S, spare: Iterable[int] = ()) -> int:
    """Reap this process's ended children (its own and those it adopted as a subreaper).

    For a process with no child it still means to wait for: it waits for any child, for up to
    ``wait_s`` seconds while some are left (orphans of killed processes arrive a moment after).
    With ``spare`` (children still at work, never reaped here), it waits for the others only.

    Returns:
        How many were reaped.
    """
    reaped = 0
    deadline = time.monotonic() + wait_s
    if spare:
        return _reap_all_but(set(spare), deadline)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid:
            reaped += 1
        elif time.monotonic() > deadline:
            return reaped
        else:
            time.sleep(0.002)


def _reap_all_but(spare: set[int], deadline: float) -> int:
    """:func:`reap_children`, the children in ``spare`` left alone: each other child is waited for
    by its pid, as ``/proc`` lists them (zombies included), until none is left or ``deadline``."""
    reaped = 0
    while True:
        children = _children(os.getpid())
        if children is None:  # no CONFIG_PROC_CHILDREN: every process's parent instead
            children = _parents().get(os.getpid(), [])
        left = [pid for pid in children if pid not in spare]
        for pid in left:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            reaped += bool(done)
        if not left or time.monotonic() > deadline:
            return reaped
        time.sleep(0.002)


def _end_tree_and_exit(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    kill_tree()
    os._exit(128 + signum)


def _exit_like(status: int) -> None:
    """End this process as its child ended: the same exit code, or death by the same signal."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        os._exit(code)
    try:
        signal.signal(-code, signal.SIG_DFL)  # SIGKILL and SIGSTOP have no handler to reset
    except (OSError, ValueError):
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child dumped its core, if any: not this one
    except (ImportError, OSError, ValueError):
        pass
    os.kill(os.getpid(), -code)
    os._exit(128 - code)


def _run_module(module: str, args: list[str]) -> None:
    import runpy

    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m mlflow_perfgate._contain MODE PARENT_PID MODULE [ARGS...]``: contain, then run ``MODULE``.

    Both modes first arm a parent-death ``SIGTERM`` towards ``PARENT_PID`` (the supervisor that
    started this process) and become a subreaper, before any import.

    * ``run``: then run ``MODULE`` here as ``__main__`` (the attempt server, whose ``SIGTERM``
      handler ends its descendants before it exits).
    * ``keep``: stay a small keeper and run ``MODULE`` in a forked child (the attempt's child:
      parent-death ``SIGKILL`` towards the keeper, a subreaper too). When that child ends, the
      keeper kills whatever it left (orphans in sessions of their own included) and exits as the
      child did, same code or same signal; a ``SIGTERM`` (the supervisor died) ends the whole
      tree first.
    """
    mode, parent, module, *args = sys.argv[1:] if argv is None else argv
    if mode not in ("run", "keep"):
        raise SystemExit(f"usage: python -m mlflow_perfgate._contain run|keep PARENT_PID MODULE [ARGS...], got {mode!r}")
    signal.signal(signal.SIGTERM, _end_tree_and_exit)
    die_with_parent(int(parent), signal.SIGTERM)
    become_subreaper()
    if mode == "run" or not hasattr(os, "fork"):  # without fork, no keeper: the module runs here
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the module installs its own
        _run_module(module, args)
        return
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(keeper, signal.SIGKILL)
        become_subreaper()
        try:
            _run_module(module, args)
        except SystemExit as error:
            os._exit(error.code if isinstance(error.code, int) else (0 if error.code is None else 1))
        except BaseException:  # noqa: BLE001 - shown in the child's log, as a crash
            import traceback

            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what is left is this keeper's to end
    kill_tree()
    reap_children()
    _exit_like(status)


if __name__ == "__main__":
    main()
