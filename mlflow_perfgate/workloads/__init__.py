"""The PyTorch layer: runs attempts and collects evidence records; it computes no verdicts.

It imports neither mlflow nor ``mlflow_perfgate.tracking``. Ranking and judging live in
``mlflow_perfgate.rules``; this layer uses them only to check the records it produces.
"""

from ._attempt import DEFAULT_TIMEOUT_S, AttemptResult, interleave, run_attempt
from ._conditions import choice, flag, integer, number, shape
from ._diagnosis import DiagnosisResult, run_diagnosis
from ._evidence import collect_memory_evidence, collect_time_evidence, profile_operators
from ._hardware import native_bf16
from ._hf import HFWorkload, hf_workload
from ._interleave import execute_interleaved, run_interleaved
from ._interface import (
    BUILTIN_WORKLOADS,
    STAGES,
    Workload,
    WorkloadProtocol,
    make_workload,
    resolve_workload,
)
from ._probe import probe_correctness
from ._runner import RUNNER_KINDS, AttemptRunner, ForkRunner, SpawnRunner, attempt_runner, fork_available
from ._timing import pinned_threads

__all__ = sorted([
    "AttemptResult",
    "AttemptRunner",
    "BUILTIN_WORKLOADS",
    "DEFAULT_TIMEOUT_S",
    "DiagnosisResult",
    "ForkRunner",
    "HFWorkload",
    "RUNNER_KINDS",
    "SpawnRunner",
    "STAGES",
    "attempt_runner",
    "Workload",
    "WorkloadProtocol",
    "choice",
    "collect_memory_evidence",
    "collect_time_evidence",
    "execute_interleaved",
    "flag",
    "fork_available",
    "hf_workload",
    "integer",
    "interleave",
    "make_workload",
    "native_bf16",
    "number",
    "pinned_threads",
    "probe_correctness",
    "profile_operators",
    "resolve_workload",
    "run_attempt",
    "run_interleaved",
    "run_diagnosis",
    "shape",
])
