"""SIGTERM and Ctrl-C during a comparison: raised as exceptions, held while a run is written.

A stopping signal that arrives while a run is created or written is raised once it is whole
(:func:`signal_held`); one that arrives during a round's tail waits for the tail, briefly
(:func:`_tail_held`). The comparison then ends its runs KILLED, saying why.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any


class Terminated(BaseException):
    """SIGTERM reached a running comparison (a cancelled CI job): stop, end every run with the reason."""


@contextlib.contextmanager
def terminate_as_exception():
    """Turn SIGTERM into :class:`Terminated`, and Ctrl-C (SIGINT) into ``KeyboardInterrupt``, for the block
    (main thread only), held while a run is created or written (:func:`signal_held`), so the running
    child is killed and every run the comparison holds is ended KILLED with the reason instead of the
    process vanishing or a run being left half-written. SIGINT is taken only where Python's own
    handler has it (a background job that ignores it keeps ignoring it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _HELD["depth"]:  # a run is being created or written: raised once it is, and its id kept
            if _HELD["pending"] is None and _HELD["grace_s"] is not None:  # a tail: waited for, not forever
                signal.setitimer(signal.ITIMER_REAL, _HELD["grace_s"])
            _HELD["pending"] = _HELD["pending"] or signum
            return
        _HELD["raised"] = signum  # should code between here and the comparison swallow it (stop_if_signalled)
        raise _stop_for(signum)

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, handler)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
        _HELD["pending"] = _HELD["raised"] = None


def stop_if_signalled() -> None:
    """Raise again a stop the handler raised that never reached the comparison.

    A library may swallow it: matplotlib's import catches ``Exception`` around a class whose
    ``__set_name__`` ran as the signal came, and Python wraps what ``__set_name__`` raises in a
    ``RuntimeError``; the comparison then went on to its decision. Called where the comparison
    goes on (the runner opened, each round, the decision); :func:`stop_handled` forgets one that
    did reach it.
    """
    signum = _HELD["raised"]
    if signum is not None:
        _HELD["raised"] = None
        raise _stop_for(signum)


def stop_handled() -> None:
    """The stop raised reached the comparison (it ends its runs): nothing to raise again."""
    _HELD["raised"] = None


def _stop_for(signum: int) -> BaseException:
    """What a stopping signal raises: ``KeyboardInterrupt`` for Ctrl-C, :class:`Terminated` otherwise."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Terminated(f"terminated by {signal.Signals(signum).name}")


#: :func:`terminate_as_exception`'s handler holds SIGTERM and SIGINT while ``depth`` > 0 (see :func:`signal_held`).
_HELD: dict[str, Any] = {"depth": 0, "pending": None, "grace_s": None, "raised": None}
#: How long a stopping signal waits for a round's tail once its measured steps are over (:func:`_tail_held`).
TAIL_GRACE_S = 3.0


@contextlib.contextmanager
def signal_held():
    """A stopping signal that reaches the block is raised when the block ends, not inside it (SIGTERM as
    :class:`Terminated`, Ctrl-C as ``KeyboardInterrupt``): a run created or written in it is whole
    and its id kept, so the stop that follows can end it (a signal inside MLflow's create_run would
    leave a RUNNING run whose id nobody holds; one inside an outcome's write, half an outcome)."""
    _HELD["depth"] += 1
    try:
        yield
    finally:
        _HELD["depth"] -= 1
    if not _HELD["depth"] and _HELD["pending"]:
        signum, _HELD["pending"] = _HELD["pending"], None
        raise _stop_for(signum)


@contextlib.contextmanager
def _tail_held(grace_s: float = TAIL_GRACE_S):
    """A round's tail after its measured steps (each arm's quality, memory record, probe: a fraction of a
    second): a stopping signal that comes then waits for the tail, so the round's measured attempts are
    written, not withdrawn; a tail still running ``grace_s`` after the signal is interrupted by it (the
    round withdrawn, as before). Only where :func:`terminate_as_exception` holds the signals (the main
    thread); elsewhere the block runs as it is."""
    if (threading.current_thread() is not threading.main_thread() or _HELD["grace_s"] is not None
            or not callable(signal.getsignal(signal.SIGTERM))):
        yield
        return

    def overdue(signum, frame):  # the grace is over: the held signal is raised inside the tail
        pending, _HELD["pending"] = _HELD["pending"], None
        if pending:
            raise _stop_for(pending)

    previous = signal.signal(signal.SIGALRM, overdue)
    _HELD["grace_s"] = grace_s
    try:
        with signal_held():
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _HELD["grace_s"] = None
