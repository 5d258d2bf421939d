"""A round's child keeps what its tail frees in its heap (``workloads._heap``); checked in a fresh
interpreter, so that this process's allocator is left as it is."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="mallopt's thresholds are glibc's")

# mmapped blocks (glibc's mallinfo2().hblks) a 4 MiB tensor adds, without and with the call
_SCRIPT = """
import ctypes, sys, torch
from mlflow_perfgate.workloads._heap import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
before = mallinfo2().hblks
tensor = torch.empty(1 << 20)
print(kept, mallinfo2().hblks - before)
"""


def _blocks(mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_after_the_call_large_blocks_come_from_the_heap():
    assert _blocks("default") == ["None", "1"]  # glibc's own default: a fresh mapping, unmapped when freed
    assert _blocks("keep") == ["True", "0"]
