"""A round's child keeps what its tail frees in its heap (glibc's malloc only).

After the measured steps a child runs each arm's tail: ``quality()``, the memory record and the
correctness probe, then it ends. By default glibc's malloc serves each large block (at or above a
threshold that starts at 128 KiB and rises only as such blocks are freed) with a fresh ``mmap``
and gives it back to the kernel when freed, so every forward pass of the tail faults in its
pages anew, and the evaluation's blocks, larger than a training batch's, are all such blocks
(measured on TinyLM: 3,000 to 5,000 minor faults and about 10 ms per ``quality()``; the two
arms' tails took 7 to 30 ms less per round with this). Raising the threshold and the trim
threshold lets the second arm's tail reuse the first's pages. Both values are where glibc's own
dynamic thresholds stop (a process that has freed a 32 MiB block has them by itself), so the
child is in no state its allocator could not reach alone; blocks above 32 MiB are still mapped
and unmapped. Only the tail, after the measured signal: the measured steps run with the
allocator as the workload would have it, and the child ends after its tail, so nothing outlives
it. Nothing an attempt reports reads the process's memory (the CPU memory record counts tensor
bytes).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest dynamic mmap threshold on a 64-bit machine (``DEFAULT_MMAP_THRESHOLD_MAX``), and
#: the trim threshold it sets beside it (twice the mmap threshold).
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 2 * _MMAP_THRESHOLD


def keep_freed_memory() -> bool:
    """Raise malloc's mmap and trim thresholds in this process; whether it could (glibc only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has it as a no-op that answers 0)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
