"""The PyTorch layer: runs attempts and collects evidence records; it computes no verdicts.

It imports neither mlflow nor ``mlflow_perfgate.tracking``. Ranking and judging live in
``mlflow_perfgate.rules``; this layer uses them only to check the records it produces.

Names load on first use: a caller that only runs supervised attempts (the runners,
``run_attempt``, ``run_interleaved``, ``run_lockstep``, ``run_diagnosis``) imports no torch; the children, and
in-process attempts, do.
"""

from .._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "AttemptResult": "_attempt",
    "AttemptRunner": "_runner",
    "BUILTIN_WORKLOADS": "_names",
    "DEFAULT_TIMEOUT_S": "_attempt",
    "DiagnosisResult": "_diagnosis",
    "ForkRunner": "_runner",
    "HFWorkload": "_hf",
    "RUNNER_KINDS": "_runner",
    "SpawnRunner": "_runner",
    "STAGES": "_interface",
    "Site": "_site",
    "SiteRunner": "_siterunner",
    "Workload": "_interface",
    "WorkloadProtocol": "_interface",
    "attempt_runner": "_runner",
    "choice": "_conditions",
    "collect_memory_evidence": "_evidence",
    "collect_time_evidence": "_evidence",
    "execute_interleaved": "_interleave",
    "flag": "_conditions",
    "fork_available": "_runner",
    "hf_workload": "_hf",
    "integer": "_conditions",
    "interleave": "_attempt",
    "make_workload": "_interface",
    "native_bf16": "_hardware",
    "number": "_conditions",
    "pinned_threads": "_timing",
    "probe_correctness": "_probe",
    "profile_operators": "_evidence",
    "resolve_workload": "_interface",
    "run_attempt": "_run",
    "run_diagnosis": "_diagnosis",
    "run_interleaved": "_run",
    "run_lockstep": "_run",
    "shape": "_conditions",
}

#: What the product's other layers import from this package: its face, not its public API (``__all__``);
#: names load on first use, as the public ones do.
_PRODUCT = {
    "ATTRIBUTE": "_declared",
    "DEFAULT_STEPS": "_attempt",
    "DEFAULT_WARMUP": "_attempt",
    "DeclarationUnreadable": "_declared",
    "INTERLEAVE_REFUSED": "_interleave",
    "WorkloadRefused": "_attempt",
    "check_measures": "_measures",
    "declared_conditions": "_declared",
    "parse_int": "_conditions",
    "probe_python": "_site",
    "require_importable": "_names",
    "runner_kind": "_runner",
    "workload_target": "_names",
}

__all__ = sorted(_EXPORTS)

_NAMES = {name: f".{module}" for name, module in {**_EXPORTS, **_PRODUCT}.items()}
__getattr__, __dir__ = _lazy_exports(__name__, _NAMES, globals())
