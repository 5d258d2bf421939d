"""The gate of a step-interleaved child: it builds and warms up, then waits for the parent.

A comparison's rounds each run in a fresh child. Between two rounds the parent logs the one that
ended (its two attempts' runs) and starts the next one's; the next child's fork, build and warm-up
do not depend on any of that, so they run beside it: the parent starts the child first, the child
stops at its gate once both arms are warm, and the parent opens the gate when it is done with the
store. Nothing the parent does then runs beside a measured step: the gate opens only after the
previous child has ended and the parent's writes are done.

The gate is a named pipe in the round's own temporary directory. The parent opens it read-write
(so that what it writes stays in the pipe until the child reads it, however late the child comes
to it) and writes one byte: ``go`` to let the measured steps run, ``stop`` when the comparison
stopped before them (an error while it logged, a signal). The child reads it; the end of the
pipe (the parent is gone) or a missing gate counts as ``stop``: the child then ends without
measuring, both arms failed with :data:`CANCELLED`.

A second named pipe beside it, ``measured``, goes the other way: the child writes one byte
there when its measured steps are over (its quality, memory record and probe still to come), so
that the parent may do what does not depend on this round's figures (start the next round's
runs) beside that tail, and still beside no measured step.

A lockstep child (``_lockstep``: one arm of a round whose arms run in two processes) keeps both
pipes open past its gate: the parent drives its measured steps one at a time, a ``next`` byte
on the gate for each, and the child answers each on ``measured`` with a :data:`REPLY_SIZE`-byte
reply (:func:`encode_reply`): the step's time, or that its arm has failed and measures no more.
An ``end`` byte ends its measured steps (its tail follows), a ``quit`` byte ends the child.
"""

from __future__ import annotations

import errno
import os
import select
import struct
import time
from pathlib import Path

__all__ = ["CANCELLED", "Commands", "Gate", "MEASURED", "NEXT", "END", "QUIT", "REPLY_SIZE", "decode_reply", "encode_reply",
           "tell_measured", "wait_at_gate"]

#: The failure of both arms of a child whose gate was closed for good before its measured steps.
CANCELLED = "cancelled: the comparison stopped before this round's measured steps"
_GO, _STOP = b"g", b"s"
#: The byte a step-interleaved child writes once its measured steps are over.
MEASURED = b"m"
#: A lockstep child's commands past its gate: one measured step, the end of its measured steps, the end.
NEXT, END, QUIT = b"n", b"e", b"q"
_STEPPED, _FAILED = b"d", b"f"
_REPLY = struct.Struct("<cd")
#: The size of a lockstep child's reply to :data:`NEXT` (one write, far below ``PIPE_BUF``: never torn).
REPLY_SIZE = _REPLY.size


def encode_reply(step_ms: float | None) -> bytes:
    """A lockstep child's reply: the step's time in ms, or ``None`` when its arm has failed."""
    return _REPLY.pack(_FAILED, 0.0) if step_ms is None else _REPLY.pack(_STEPPED, float(step_ms))


def decode_reply(data: bytes) -> float | None:
    """:func:`encode_reply`'s step time, ``None`` for a failed arm.

    Raises:
        ValueError: not a reply (a child that left the protocol).
    """
    if len(data) != REPLY_SIZE:
        raise ValueError(f"a lockstep reply is {REPLY_SIZE} bytes, got {len(data)}")
    kind, step_ms = _REPLY.unpack(data)
    if kind == _FAILED:
        return None
    if kind != _STEPPED or not step_ms >= 0:
        raise ValueError(f"not a lockstep reply: {data!r}")
    return step_ms


def _measured_path(gate_path: str) -> str:
    return os.path.join(os.path.dirname(gate_path), "measured")


class Gate:
    """The parent's side: a named pipe at ``directory/gate``, open until :meth:`close`.

    Attributes:
        path: the pipe's path, for the child's spec.
        opened_at: ``time.monotonic()`` when :meth:`open` let the child go on, else ``None``.
    """

    def __init__(self, directory: str | Path) -> None:
        self.path = str(Path(directory) / "gate")
        os.mkfifo(self.path, 0o600)
        # Read-write: never blocks, and keeps the pipe (and what is written to it) alive until
        # the child has read it, whenever it gets there.
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        measured = _measured_path(self.path)
        os.mkfifo(measured, 0o600)
        #: The parent's end of the ``measured`` pipe (read-write: the child's open never blocks).
        self.measured_fd: int | None = os.open(measured, os.O_RDWR | os.O_NONBLOCK)
        self.opened_at: float | None = None
        self.stopped = False
        self.measured = False
        self._replies = b""  # what the child has written of a reply not yet whole

    def open(self) -> None:
        """Let the child go on to its measured steps (once; a stopped gate stays stopped)."""
        if self.opened_at is None and not self.stopped:
            self._write(_GO)
            self.opened_at = time.monotonic()

    def stop(self) -> None:
        """Tell a child that has not been let through to end without measuring."""
        if self.opened_at is None and not self.stopped:
            self.stopped = True
            self._write(_STOP)

    def send(self, command: bytes) -> None:
        """A lockstep child's command (:data:`NEXT`, :data:`END`, :data:`QUIT`), once its gate is open."""
        if self.opened_at is None:
            raise ValueError("the gate is not open: open() it before sending commands")
        self._write(command)

    def _write(self, byte: bytes) -> None:
        if self._fd is not None:
            os.write(self._fd, byte)

    def read_measured(self) -> bool:
        """Whether the child has said its measured steps are over (never blocks)."""
        if not self.measured and self.read_reply(1) == MEASURED:
            self.measured = True
        return self.measured

    def read_reply(self, size: int) -> bytes | None:
        """The child's next reply of ``size`` bytes once it has all come, else ``None`` (never blocks)."""
        buffered = self._replies
        while len(buffered) < size and self.measured_fd is not None:
            try:
                chunk = os.read(self.measured_fd, size - len(buffered))
            except BlockingIOError:
                break
            if not chunk:
                break
            buffered += chunk
        if len(buffered) < size:
            self._replies = buffered
            return None
        self._replies = buffered[size:]
        return buffered[:size]

    def close(self) -> None:
        """Close the parent's ends (after the child has ended: what it had not read is lost)."""
        for name in ("_fd", "measured_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


def wait_at_gate(path: str) -> tuple[bool, float]:
    """In the child: wait until the parent opens the gate at ``path``.

    Returns:
        ``(go, waited_s)``: ``go`` is false when the parent stopped the round, is gone (the
        pipe's end) or the gate is missing.
    """
    started = time.perf_counter()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False, time.perf_counter() - started
    try:
        while True:
            # The parent's end is held open until the child has ended; a parent that died takes
            # the child with it (the runner's containment), so there is nothing to time out here.
            if not select.select([fd], [], [], 1.0)[0]:
                continue
            try:
                byte = os.read(fd, 1)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                return False, time.perf_counter() - started
            return byte == _GO, time.perf_counter() - started
    finally:
        os.close(fd)


def tell_measured(gate_path: str) -> None:
    """In the child: say that the measured steps are over; a parent that is gone hears nothing."""
    try:
        fd = os.open(_measured_path(gate_path), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader (the parent is gone) or no pipe
        return
    try:
        os.write(fd, MEASURED)
    except OSError:
        pass
    finally:
        os.close(fd)


class Commands:
    """The child's side of a lockstep gate: wait for ``go``, then read commands and answer each.

    Both pipes stay open until :meth:`close`. A parent that is gone, or a pipe that is missing,
    reads as :data:`QUIT`.
    """

    def __init__(self, gate_path: str) -> None:
        self.path = gate_path
        try:
            self._in: int | None = os.open(gate_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            self._in = None
        try:
            self._out: int | None = os.open(_measured_path(gate_path), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            self._out = None

    def _read(self) -> bytes:
        if self._in is None:
            return QUIT
        while True:
            # The parent's end is held open until the child has ended; a parent that died takes
            # the child with it (the runner's containment), so there is nothing to time out here.
            if not select.select([self._in], [], [], 1.0)[0]:
                continue
            try:
                byte = os.read(self._in, 1)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                return QUIT
            return byte or QUIT

    def wait_go(self) -> tuple[bool, float]:
        """As :func:`wait_at_gate`: ``(go, waited_s)``."""
        started = time.perf_counter()
        return self._read() == _GO, time.perf_counter() - started

    def next(self) -> bytes:
        """The next command: :data:`NEXT`, :data:`END` or :data:`QUIT` (anything else is :data:`QUIT`)."""
        byte = self._read()
        return byte if byte in (NEXT, END) else QUIT

    def reply(self, step_ms: float | None) -> None:
        """Answer a :data:`NEXT`: the step's time, or ``None`` (this arm failed); a parent gone hears nothing."""
        if self._out is None:
            return
        try:
            os.write(self._out, encode_reply(step_ms))
        except OSError:
            pass

    def close(self) -> None:
        for name in ("_in", "_out"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
