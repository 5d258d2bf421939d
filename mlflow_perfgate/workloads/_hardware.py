"""What the hardware does natively, for proposals that only pay off where it does."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["native_bf16"]

#: /proc/cpuinfo flags of x86 CPUs that compute in bf16 in hardware: AVX-512 BF16 (Cooper Lake,
#: Zen 4 and later) and AMX (Sapphire Rapids and later). Without them PyTorch emulates bf16 through
#: fp32 conversions, and a CPU step under bf16 autocast ran 1.9 to 3.1 times slower (TinyLM, GPT-2).
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpu_flags(cpuinfo: str | os.PathLike) -> set[str] | None:
    """The union of the ``flags`` lines of a cpuinfo file, ``None`` when it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            flags.update(value.split())
    return flags


def native_bf16(device: Any = "cpu", *, cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> tuple[bool, str]:
    """Whether ``device`` computes in bf16 natively, and why, in words.

    * CUDA: native when ``torch.cuda.is_bf16_supported(including_emulation=False)`` says so
      for the device (compute capability 8.0 or more, Ampere and later, on NVIDIA); older
      GPUs emulate bf16.
    * CPU: native when the CPU has AVX-512 BF16 or AMX, read from the ``flags`` of
      ``/proc/cpuinfo`` (``avx512_bf16``, ``amx_bf16``). Elsewhere (no such file, another
      architecture) the answer is ``False``: not known to be native.
    * any other device type: ``False``, not checked.

    Args:
        device: ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a ``torch.device``.
        cpuinfo: the file to read the CPU flags from (for tests).

    Returns:
        ``(native, reason)``, for instance ``(False, 'CPU without avx512_bf16 or amx_bf16 in
        /proc/cpuinfo: bf16 is emulated')``.

    Raises:
        ValueError: ``device`` is no device name.
    """
    if isinstance(device, str) and device.strip().lower() == "cpu":
        return _native_bf16_cpu(cpuinfo)  # the CPU's flags: no torch needed (the diagnosis's caller has none)
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be a device such as 'cpu' or 'cuda:0', got {device!r}") from error
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return False, f"CUDA is not available (torch {torch.__version__})"
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            return False, f"cuda:{index} does not exist ({torch.cuda.device_count()} CUDA devices)"
        name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        with torch.cuda.device(index):
            try:
                # Emulated bf16 is supported everywhere and fast nowhere: ask about hardware.
                native = bool(torch.cuda.is_bf16_supported(including_emulation=False))
            except TypeError:  # an older torch without the argument reports hardware support only
                native = bool(torch.cuda.is_bf16_supported())
        if native:
            return True, f"{name} (compute capability {major}.{minor}) computes in bf16 natively"
        return False, f"{name} (compute capability {major}.{minor}) emulates bf16"
    if dev.type == "cpu":
        return _native_bf16_cpu(cpuinfo)
    return False, f"bf16 support is not checked for device type {dev.type!r}"


def _native_bf16_cpu(cpuinfo: str | os.PathLike) -> tuple[bool, str]:
    flags = _cpu_flags(cpuinfo)
    if flags is None:
        return False, f"cannot read CPU flags from {os.fspath(cpuinfo)}: bf16 not known to be native"
    found = [flag for flag in CPU_BF16_FLAGS if flag in flags]
    if found:
        return True, f"CPU with {' and '.join(found)}: bf16 is native"
    return False, f"CPU without {' or '.join(CPU_BF16_FLAGS)} in {os.fspath(cpuinfo)}: bf16 is emulated"
