"""The correctness probe: fills the specification's correctness record from one probe step.

The probe runs one forward and backward pass of the workload's own stage methods on its probe
batch, outside any timed step, with forward hooks on every named module. It never steps the
optimizer and restores parameters, buffers, gradients and the global RNG afterwards, so probing
does not change what the attempt measures.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..rules import validate_validity_report
from ._interface import device_of
from ._outputs import describe_output, logits_of, loss_of
from ._state import preserved, rng_devices

__all__ = ["probe_correctness"]

#: How many names a detail list keeps; the first is what matters, the rest give context.
_DETAIL_LIMIT = 10


def _non_finite(value: Any) -> bool:
    """Whether any floating tensor in ``value`` (possibly nested) holds a NaN or an infinity."""
    if isinstance(value, torch.Tensor):
        return (value.is_floating_point() or value.is_complex()) and _tensor_non_finite(value.detach())
    if isinstance(value, (tuple, list)):
        return any(_non_finite(item) for item in value)
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    return False


def _tensor_non_finite(tensor: torch.Tensor) -> bool:
    """Whether a floating tensor holds a NaN or an infinity, element by element.

    A NaN or an infinity anywhere makes the tensor's sum non-finite, so a finite sum answers
    "no" with one reduction (about 8x cheaper than ``isfinite(...).all()``, which allocates a
    mask the size of the tensor: measured on TinyLM's module outputs). A non-finite sum may
    only be finite values that overflow when added, so that case is settled by the exact check.
    """
    if bool(torch.isfinite(tensor.sum())):
        return False
    return not bool(torch.isfinite(tensor).all())


class _Findings:
    """Issues in the order found; the first failure is the first place any issue showed."""

    def __init__(self) -> None:
        self.issues: list[str] = []
        self.first_failure: str | None = None
        self.details: dict[str, Any] = {}

    def add(self, issue: str, where: str) -> None:
        if issue not in self.issues:
            self.issues.append(issue)
        if self.first_failure is None:
            self.first_failure = where

    def signature(self) -> tuple:
        return tuple(self.issues), self.first_failure


def _probe_pass(workload: Any, model: torch.nn.Module, batch: Any, seed: int) -> _Findings:
    """One hooked forward and backward pass from ``seed``; gradients are left for the caller to clear."""
    findings = _Findings()
    root_name = type(model).__name__
    non_finite_modules: list[str] = []
    root_outputs: list[Any] = []
    collecting = True

    def make_hook(name: str):
        def hook(module, args, output):
            # Hooks fire again when checkpointed blocks are recomputed in backward; only the
            # forward pass tells the execution order we want.
            if not collecting:
                return
            if _non_finite(output) and name not in non_finite_modules:
                non_finite_modules.append(name)
        return hook

    # Forward hooks run when a module returns, so the first hit is the innermost module that
    # produced a non-finite value from finite inputs: the earliest failure in execution order.
    handles = [
        module.register_forward_hook(make_hook(name or root_name))
        for name, module in model.named_modules()
    ]

    def capture_root(module, args, kwargs, output):
        # With the call's keyword arguments: whether labels were given tells where a tuple
        # output keeps its logits.
        if collecting and not root_outputs:
            root_outputs.append((output, kwargs.get("labels") is not None if "labels" in kwargs else None))

    handles.append(model.register_forward_hook(capture_root, with_kwargs=True))
    try:
        with torch.random.fork_rng(devices=rng_devices(device_of(workload))):
            torch.manual_seed(seed)
            loss = loss_of(workload.forward(batch))
            collecting = False
            for name in non_finite_modules[:1]:
                findings.add("numerical", name)
            findings.details["non_finite_modules"] = non_finite_modules[:_DETAIL_LIMIT]
            loss_value = _loss_value(loss)
            findings.details["loss"] = loss_value if math.isfinite(loss_value) else repr(loss_value)
            if not math.isfinite(loss_value):
                findings.add("numerical", "loss")
            _check_output_contract(workload, batch, root_outputs, findings)
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                workload.backward(loss)
            else:
                findings.details["loss_requires_grad"] = False
                findings.add("gradient_chain", "loss")
    finally:
        for handle in handles:
            handle.remove()
    _check_gradients(model, findings, loss_finite=math.isfinite(loss_value))
    return findings


def _loss_value(loss: Any) -> float:
    if isinstance(loss, torch.Tensor):
        return float(loss.detach().float().mean()) if loss.numel() else math.nan
    return float(loss)


def _check_output_contract(workload: Any, batch: Any, outputs: list, findings: _Findings) -> None:
    if not outputs:
        findings.details["output_contract"] = "the model was not called by forward()"
        findings.add("output_contract", "output")
        return
    raw, labels_given = outputs[0]
    expected_shape = None
    expected = getattr(workload, "expected_output_shape", None)
    if callable(expected):
        expected_shape = expected(batch)
    output, where = logits_of(raw, labels_given=labels_given)
    if not isinstance(raw, torch.Tensor):
        findings.details["output_type"] = describe_output(raw)
        findings.details["logits_at"] = where
    if not isinstance(output, torch.Tensor):
        kind = describe_output(raw)
        findings.details["output_contract"] = (
            f"output is {kind}, not a tensor" if where == "output"
            else f"output is {kind} without logits at {where}"
        )
        findings.add("output_contract", "output")
        return
    findings.details["output_shape"] = list(output.shape)
    findings.details["output_dtype"] = str(output.dtype)
    findings.details["expected_output_shape"] = None if expected_shape is None else list(expected_shape)
    problems = []
    if expected_shape is not None and tuple(output.shape) != tuple(expected_shape):
        problems.append(f"shape {tuple(output.shape)} != expected {tuple(expected_shape)}")
    if not output.is_floating_point():
        problems.append(f"dtype {output.dtype} is not floating point")
    if problems:
        findings.details["output_contract"] = "; ".join(problems)
        findings.add("output_contract", "output")


def _check_gradients(model: torch.nn.Module, findings: _Findings, *, loss_finite: bool) -> None:
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    without_grad = [name for name, p in trainable if p.grad is None]
    findings.details["params_without_grad"] = without_grad[:_DETAIL_LIMIT]
    if without_grad:
        findings.add("gradient_chain", without_grad[0])
    # A non-finite loss makes every gradient non-finite; only a finite loss makes this a finding.
    if loss_finite:
        bad_grads = [
            name for name, p in trainable if p.grad is not None and _non_finite(p.grad)
        ]
        findings.details["non_finite_grads"] = bad_grads[:_DETAIL_LIMIT]
        if bad_grads:
            findings.add("numerical", bad_grads[0])


def probe_correctness(workload: Any, *, batch: Any = None, replay: bool = True) -> dict:
    """Check one probe step of ``workload`` and return the correctness record.

    Checks, in execution order:

    * ``numerical``: the first module (in execution order) whose output holds a NaN or an
      infinity, else a non-finite loss (``first_failure='loss'``), else the first parameter
      with a non-finite gradient under a finite loss;
    * ``output_contract``: the model's logits are a floating tensor of
      ``workload.expected_output_shape(batch)`` when the workload declares one
      (``first_failure='output'``). The logits are the model's output when it is a tensor;
      in a ``ModelOutput`` or a dict, its ``logits``; in a tuple, the first element, or the
      second when labels were given (``transformers``' conventions);
    * ``gradient_chain``: a trainable parameter left without a gradient (``grad is None``)
      after backward, for instance unused in forward or used through ``.detach()``
      (``first_failure`` is its qualified name).

    ``first_failure`` is where the earliest finding showed; the root module is named by its
    class name. When something failed and ``replay`` is true, the step is replayed from the same
    seed, state and batch; ``reproducible`` says whether the same issues and first failure
    recur. It is ``False`` for a valid run.

    ``workload.forward(batch)`` may return the loss or the model's output holding it (a
    ``ModelOutput`` or dict with ``loss``, a tuple with the loss first). Every floating tensor
    of every module's output, a ``ModelOutput``'s included, is checked for finiteness.

    Args:
        workload: a workload with ``model``, ``forward(batch)`` and ``backward(loss)``, and
            ``probe_batch()`` or ``next_batch()`` (see :class:`Workload`).
        batch: the batch to probe; by default ``workload.probe_batch()`` (or, lacking it,
            ``workload.next_batch()``).
        replay: replay a failing step to fill ``reproducible``; without it a failure is
            reported as not reproduced.

    Returns:
        ``{evidence_type: 'correctness', status, run_valid, issues, first_failure,
        reproducible}`` plus ``details`` (what each check saw) and ``replayed``. The record
        passes :func:`mlflow_perfgate.rules.validate_validity_report`.

    Raises:
        TypeError: the workload lacks ``model`` or the stage methods the probe needs.
    """
    model = getattr(workload, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"probe_correctness needs workload.model to be an nn.Module, got {type(model).__name__}")
    for method in ("forward", "backward"):
        if not callable(getattr(workload, method, None)):
            raise TypeError(f"probe_correctness needs workload.{method}()")
    if batch is None:
        get_batch = getattr(workload, "probe_batch", None) or getattr(workload, "next_batch", None)
        if not callable(get_batch):
            raise TypeError("probe_correctness needs workload.probe_batch() or workload.next_batch()")
        batch = get_batch()
    seed = int(getattr(workload, "seed", 0) or 0)
    replayed = reproducible = False
    with preserved(model):
        findings = _probe_pass(workload, model, batch, seed)
    if findings.issues and replay:
        with preserved(model):
            again = _probe_pass(workload, model, batch, seed)
        replayed = True
        reproducible = again.signature() == findings.signature()
        findings.details["replay"] = {"issues": again.issues, "first_failure": again.first_failure}
    record = {
        "evidence_type": "correctness",
        "status": "invalid" if findings.issues else "valid",
        "run_valid": not findings.issues,
        "issues": list(findings.issues),
        "first_failure": findings.first_failure,
        "reproducible": reproducible,
        "replayed": replayed,
        "details": findings.details,
    }
    # A record the rules reject is a bug here, not a property of the workload.
    validate_validity_report(record)
    return record
