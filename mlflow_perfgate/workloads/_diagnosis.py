"""A diagnosis's evidence (probe, stage times, memory, operator profile), collected supervised.

The collection runs the workload's code for many steps, so it is supervised as an attempt is:
by default in a spawned, contained child (``python -m mlflow_perfgate.workloads._child`` with
the spec's ``task`` ``diagnose``), under a timeout and a pinned thread count. Whatever the
workload does there (raise, ``sys.exit``, segfault, hang, get killed) is a failed
:class:`DiagnosisResult` with its reason, never an exception or a dead caller. The judgement
(``rules.synthesize_evidence``) is left to the caller.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ._attempt import DEFAULT_TIMEOUT_S, WorkloadRefused, caller_threads, exit_reason, spawn_contained
from ._failures import describe_failure, tail, timeout_reason
from ._names import workload_target
from ._wire import FormatError, read_json, write_json_atomic

# torch and the modules that need it are imported where the evidence is collected (the child,
# or here unsupervised): a supervised caller imports no torch.

__all__ = ["DiagnosisResult", "run_diagnosis"]


@dataclass(frozen=True)
class DiagnosisResult:
    """What a diagnosis's evidence collection gave, or why it failed.

    Attributes:
        ok: the evidence was collected (the probe ran; when it found the run valid, the time
            and memory records and the profile too).
        failure: why not: an attempt's reasons (``exception: <Type>: <message>``,
            ``exited: sys.exit(<code>) inside the workload``, ``timeout after <s>s``,
            ``killed by signal <NAME>``, ``exited with code <n>``, ...). ``None`` when ok.
        failure_detail: a traceback, or the child's log tail.
        bundle: ``{"validity", "time", "memory"}`` (the last two when the run is valid), the
            evidence bundle of ``rules.synthesize_evidence``; ``None`` when it failed.
        files: the profile's files ``{name: path}``, in the caller's ``out_dir``.
        torch_threads: torch's intra-op thread count at the end of the collection (the time
            record's ``torch_threads`` is the count while the stages were timed).
        threads_requested: the count pinned.
        wall_s: the collection's wall time, as the caller saw it.
        supervised: whether it ran in a child process.
        exitcode: the child's exit code (supervised only).
    """

    ok: bool
    failure: str | None = None
    failure_detail: str | None = None
    bundle: dict | None = None
    files: dict = field(default_factory=dict)
    torch_threads: int | None = None
    threads_requested: int | None = None
    wall_s: float | None = None
    supervised: bool = False
    exitcode: int | None = None

    def __post_init__(self) -> None:
        if type(self.ok) is not bool:
            raise ValueError(f"ok must be a bool, got {self.ok!r}")
        if self.ok and (self.failure is not None or not isinstance(self.bundle, dict)):
            raise ValueError("an ok diagnosis needs a bundle and no failure")
        if not self.ok and (not isinstance(self.failure, str) or not self.failure.strip()):
            raise ValueError(f"a failed diagnosis needs a failure reason, got {self.failure!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DiagnosisResult":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown DiagnosisResult fields: {unknown}")
        return cls(**data)


def collect_in_process(workload_name: str, conditions: dict, *, steps: int, capacity_mib: float | None,
                       profile: bool, threads: int | None, out_dir: str) -> DiagnosisResult:
    """Collect the evidence here; every failure of the workload becomes the result.

    The body of both modes (the child calls it). ``KeyboardInterrupt`` propagates.
    """
    import torch

    from ._evidence import collect_memory_evidence, collect_time_evidence, profile_operators
    from ._interface import make_workload
    from ._probe import probe_correctness
    from ._timing import pinned_threads

    started = time.perf_counter()
    instance = None
    bundle: dict = {}
    files: dict = {}
    failure = detail = None
    with pinned_threads(threads) as requested:
        try:
            instance = make_workload(workload_name, conditions)
            validity = probe_correctness(instance)
            bundle["validity"] = validity
            if validity["run_valid"]:
                bundle["time"] = collect_time_evidence(instance, steps=steps)
                bundle["memory"] = collect_memory_evidence(instance, capacity_mib=capacity_mib)
                if profile:
                    files = profile_operators(instance, out_dir, steps=min(steps, 3))
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the workload's failure is data
            failure, detail = describe_failure(error), tail(traceback.format_exc())
        finally:
            close = getattr(instance, "close", None)
            if callable(close):
                try:
                    close()
                except (Exception, SystemExit) as error:  # noqa: BLE001
                    if failure is None:
                        failure, detail = describe_failure(error), tail(traceback.format_exc())
            measured = torch.get_num_threads()
    if failure is None:
        # What the child writes must survive JSON; what the caller gets is what it would read.
        bundle = json.loads(json.dumps(bundle, default=str))
    return DiagnosisResult(ok=failure is None, failure=failure, failure_detail=detail,
                           bundle=bundle if failure is None else None, files=files if failure is None else {},
                           torch_threads=measured, threads_requested=requested,
                           wall_s=time.perf_counter() - started)


def run_diagnosis_spec(spec: dict, result_path: str) -> None:
    """In the child: collect the evidence of ``spec`` and write the result for :func:`run_diagnosis`."""
    result = collect_in_process(spec["workload"], spec["conditions"], steps=spec["steps"],
                                capacity_mib=spec["capacity_mib"], profile=spec["profile"],
                                threads=spec["threads"], out_dir=spec["out_dir"])
    write_json_atomic(result_path, {"diagnosis": result.to_dict()})


def write_diagnosis_failure(result_path: str, error: BaseException) -> None:
    """In the child, inside ``except``: the workload's module raised while it was imported."""
    failed = DiagnosisResult(ok=False, failure=describe_failure(error), failure_detail=tail(traceback.format_exc()))
    write_json_atomic(result_path, {"diagnosis": failed.to_dict()})


def run_diagnosis(workload_name: str, conditions: dict, *, out_dir: str | os.PathLike, steps: int = 5,
                  capacity_mib: float | None = None, profile: bool = True, threads: int | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, supervised: bool = True,
                  runner=None) -> DiagnosisResult:
    """Collect a diagnosis's evidence: the probe, then (a valid run) stage times, memory, a profile.

    Args:
        workload_name: ``"tinylm"`` or a factory ``"module:function"``.
        conditions: the conditions passed to the factory (JSON-serialisable when supervised).
        out_dir: where the profile's files are written (an existing directory).
        steps: steps timed for the time record (the profile takes ``min(steps, 3)``).
        capacity_mib: the memory budget of the memory record (default: the device's).
        profile: run the operator profile.
        threads: torch's intra-op threads during the collection; ``None`` uses the caller's.
        timeout_s: wall-clock limit, the child's start included. Supervised: the child and
            everything below it is killed. In-process: not enforced.
        supervised: in a spawned, contained child (the default); ``False`` runs it here (a
            crash ends the caller, a hang is never interrupted).
        runner: supervised, the :class:`AttemptRunner` whose child collects (a fork runner's
            warm server forks it: no ``import torch`` of its own); ``None``, a spawned child.

    Returns:
        The :class:`DiagnosisResult`; a failure of the workload is ``ok=False`` with its reason.

    Raises:
        ValueError: a malformed or unresolvable workload name (:class:`WorkloadRefused` when a
            child found it), bad ``steps``/``threads``/``timeout_s``, or conditions JSON
            cannot carry.
    """
    if type(steps) is not int or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if threads is not None and (type(threads) is not int or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    out_dir = os.fspath(out_dir)
    if not supervised:
        from ._interface import resolve_workload

        try:
            resolve_workload(workload_name)
        except ValueError:
            raise
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the module's own code failed: data
            return DiagnosisResult(ok=False, failure=describe_failure(error), failure_detail=tail(traceback.format_exc()))
        return collect_in_process(workload_name, conditions, steps=steps, capacity_mib=capacity_mib,
                                  profile=profile, threads=threads, out_dir=out_dir)
    workload_target(workload_name)
    try:
        conditions = json.loads(json.dumps(conditions))
    except (TypeError, ValueError) as error:
        raise ValueError(f"conditions must be JSON-serialisable for a supervised diagnosis: {error}") from error
    spec = {"task": "diagnose", "workload": workload_name, "conditions": conditions, "steps": steps,
            "capacity_mib": capacity_mib, "profile": profile, "out_dir": out_dir,
            "threads": threads if threads is not None else
            (caller_threads() if runner is None else runner.default_threads())}
    with tempfile.TemporaryDirectory(prefix="perfgate-diagnosis-") as tmp:
        result_path = Path(tmp) / "result.json"
        if runner is None:
            ended = spawn_contained(spec, result_path, float(timeout_s), Path(tmp) / "child.log")
        else:
            ended = runner.run_task(spec, result_path, Path(tmp) / "child.log", float(timeout_s))
        stored = note = None
        if not ended.timed_out and result_path.exists():
            try:
                stored = read_json(result_path, "the diagnosis result")
            except (OSError, FormatError) as error:
                note = f"unreadable result ({error})"
    base = {"supervised": True, "exitcode": ended.exitcode, "wall_s": ended.wall_s,
            "threads_requested": spec["threads"]}
    if ended.timed_out:
        return DiagnosisResult(ok=False, failure=timeout_reason(timeout_s), failure_detail=ended.log_tail or None,
                               **base)
    if ended.reason is not None:
        return DiagnosisResult(ok=False, failure=ended.reason, failure_detail=ended.log_tail or None, **base)
    if stored is not None and "refused" in stored:
        raise WorkloadRefused(str(stored["refused"]))
    if ended.exitcode != 0 or stored is None or not isinstance(stored.get("diagnosis"), dict):
        written = "after" if stored is not None else "before"
        detail = "\n".join(filter(None, [note, f"the child died {written} writing its result", ended.log_tail]))
        return DiagnosisResult(ok=False, failure=exit_reason(ended.exitcode), failure_detail=detail, **base)
    return DiagnosisResult.from_dict({**stored["diagnosis"], **base})
