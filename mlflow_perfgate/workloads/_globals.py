"""The process-global torch state two workloads in one process can disagree on, captured and re-applied.

Step interleaving (``_interleave``) builds both arms in one process. Whatever a factory sets
process-wide (torch's intra-op threads, the default dtype, the float32 matmul precision, the
cuDNN, TF32 and oneDNN flags, deterministic algorithms, grad mode, anomaly detection) would
otherwise hold for both arms' steps, the last factory's winning: a change of threads measured
as no change at all. So each arm's state is captured right after its own factory (built from
the state the process had before either), and:

- state that can be switched cheaply (:data:`SWITCHABLE`) is re-applied before each of that
  arm's steps, outside the clock, and the arm records what it ran under;
- state that cannot (the inter-op thread count, fixed at torch's first parallel work; the
  environment variables torch and its libraries read at start-up, :data:`ENV_PREFIXES`), where
  the arms differ, refuses step interleaving with a message naming it: such a change is measured
  with whole attempts interleaved (``--interleave attempts``), one process per attempt.

A workload may also declare conditions as per-process (``per_process_conditions``, a tuple of
condition names, on the workload object): a comparison that changes one of them is refused too.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

__all__ = ["ENV_PREFIXES", "SWITCHABLE", "apply", "capture", "differences", "per_process_refusal"]

#: Environment variables read by torch, OpenMP, MKL, OpenBLAS, oneDNN and CUDA at start-up.
ENV_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "DNNL_", "ONEDNN_", "TORCH_", "PYTORCH_", "CUDA_",
                "CUBLAS_", "CUDNN_", "NVIDIA_TF32_OVERRIDE", "ATEN_")


def _flag(getter: Callable[[], Any]) -> Any:
    try:
        return getter()
    except Exception:  # noqa: BLE001 - a backend this build lacks: nothing to capture
        return None


#: ``name: (read, write)``: state re-applied before each of an arm's steps.
SWITCHABLE: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "intra_op_threads": (torch.get_num_threads, torch.set_num_threads),
    "default_dtype": (lambda: str(torch.get_default_dtype()).replace("torch.", ""),
                      lambda v: torch.set_default_dtype(getattr(torch, v))),
    "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
    "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "deterministic_algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
    "anomaly_detection": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    "cudnn.enabled": (lambda: torch.backends.cudnn.enabled, lambda v: setattr(torch.backends.cudnn, "enabled", v)),
    "cudnn.benchmark": (lambda: torch.backends.cudnn.benchmark,
                        lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    "cudnn.deterministic": (lambda: torch.backends.cudnn.deterministic,
                            lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    "cudnn.allow_tf32": (lambda: torch.backends.cudnn.allow_tf32,
                         lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
    "cuda.matmul.allow_tf32": (lambda: torch.backends.cuda.matmul.allow_tf32,
                               lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
    "cuda.matmul.allow_fp16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", v)),
    "cuda.matmul.allow_bf16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", v)),
    "mkldnn.enabled": (lambda: torch.backends.mkldnn.enabled, lambda v: setattr(torch.backends.mkldnn, "enabled", v)),
}


def capture() -> dict[str, Any]:
    """The process-global state now: each of :data:`SWITCHABLE`, the inter-op threads and the
    environment variables of :data:`ENV_PREFIXES` (``env:<NAME>``)."""
    state = {name: _flag(read) for name, (read, _) in SWITCHABLE.items()}
    state["inter_op_threads"] = _flag(torch.get_num_interop_threads)
    state.update({f"env:{key}": value for key, value in os.environ.items() if key.startswith(ENV_PREFIXES)})
    return state


def apply(state: dict[str, Any]) -> None:
    """Set each switchable value of ``state`` that differs from the process's now (cheap when equal)."""
    for name, (read, write) in SWITCHABLE.items():
        wanted = state.get(name)
        if wanted is not None and _flag(read) != wanted:
            write(wanted)


def differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """``(switchable, fixed)``: the keys whose values differ between two captured states, each
    ``name: (a's, b's)``; ``fixed`` holds those that cannot be switched per step."""
    keys = sorted(set(a) | set(b))
    differing = {key: (a.get(key), b.get(key)) for key in keys if a.get(key) != b.get(key)}
    fixed = {key: value for key, value in differing.items() if key not in SWITCHABLE}
    return {key: value for key, value in differing.items() if key in SWITCHABLE}, fixed


def per_process_refusal(workloads: tuple[Any, Any], conditions: tuple[dict, dict],
                        fixed: dict[str, tuple]) -> str | None:
    """Why these two arms cannot share one process, or ``None``: a differing state that cannot be
    switched per step, or a differing condition a workload declares per-process."""
    declared = set()
    for workload in workloads:
        declared.update(getattr(workload, "per_process_conditions", ()) or ())
    changed = sorted(name for name in declared
                     if conditions[0].get(name) != conditions[1].get(name))
    reasons = [f"{key} ({a!r} against {b!r})" for key, (a, b) in fixed.items()]
    reasons += [f"condition {name!r}, which the workload declares per-process" for name in changed]
    if not reasons:
        return None
    return ("step interleaving runs both arms in one process, but they differ in process-wide state that cannot "
            f"be switched between steps: {'; '.join(reasons)}; compare them with whole attempts interleaved "
            "(--interleave attempts), one process per attempt")
