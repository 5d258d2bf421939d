"""The workload base class and protocol, a leaf of ``workloads``: what every adapter builds on.

:mod:`._interface` (which resolves and makes workloads, and so knows every adapter, the
Hugging Face one included) and the adapters (``tinylm``, ``_hf``) import these from here, so
that no adapter imports the module that imports it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ._outputs import loss_of

__all__ = ["STAGES", "Workload", "WorkloadProtocol"]


#: The non-overlapping stages of a training step, in execution order, and the method behind each.
STAGES: tuple[tuple[str, str], ...] = (
    ("dataloader", "next_batch"),
    ("forward", "forward"),
    ("backward", "backward"),
    ("optimizer", "optimizer_step"),
)


@runtime_checkable
class WorkloadProtocol(Protocol):
    """The least a workload must offer to be run as an attempt.

    ``step()`` runs one training or inference step and may return the loss (a tensor or a
    float; a non-finite value fails the attempt). ``quality()`` returns a finite float computed
    the same way for every arm (for example held-out accuracy), after the attempt's steps.
    """

    def step(self) -> Any:
        """Run one step; optionally return its loss."""

    def quality(self) -> float:
        """Return the quality metric of the current state."""


class Workload:
    """Base class for workloads with stages, a model and an optimizer.

    Subclasses implement the four stages; :meth:`step` composes them, so that the timed step and
    the stage-by-stage timing of :func:`collect_time_evidence` run the same code.

    Attributes:
        model: the ``nn.Module`` being trained; the probe hooks its submodules and the memory
            estimate counts its parameters. ``None`` disables both.
        optimizer: the optimizer whose state the memory estimate counts, or ``None``.
        device: where the workload runs (``torch.device``); CUDA work is synchronised inside
            the clock.
        tokens_per_step: tokens consumed by one step, for throughput; ``None`` when unknown.
        seed: the seed the workload was built from; the probe replays a failing step from it.
    """

    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    device: torch.device = torch.device("cpu")
    tokens_per_step: int | None = None
    seed: int = 0

    def next_batch(self) -> Any:
        """Return the next training batch, already on :attr:`device` (stage ``dataloader``)."""
        raise NotImplementedError

    def forward(self, batch: Any) -> Any:
        """Run the model on ``batch`` and return the scalar loss (stage ``forward``).

        The model's own output is accepted too when it holds the loss: a ``transformers``
        ``ModelOutput`` or a dict with ``loss``, or a tuple with the loss first (a Hugging Face
        model called with labels), so ``return self.model(**batch)`` is a valid forward.
        """
        raise NotImplementedError

    def backward(self, loss: Any) -> None:
        """Back-propagate ``loss``, or the loss in a model output (stage ``backward``)."""
        loss_of(loss).backward()

    def optimizer_step(self) -> None:
        """Apply and then clear the gradients (stage ``optimizer``).

        Clearing here, not at the start of the next step, keeps gradients ``None`` between steps,
        which the gradient-chain check of the probe relies on.
        """
        if self.optimizer is None:
            raise NotImplementedError("optimizer_step needs an optimizer")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> torch.Tensor:
        """Run one training step through the four stages and return its loss."""
        batch = self.next_batch()
        loss = loss_of(self.forward(batch))
        self.backward(loss)
        self.optimizer_step()
        return loss.detach()

    def quality(self) -> float:
        """Return the quality metric (higher is better) of the current model."""
        raise NotImplementedError

    def probe_batch(self) -> Any:
        """Return a batch for the correctness probe and the memory estimate.

        The default takes the next training batch; workloads whose data order matters should
        return a fixed batch instead, so that probing leaves training untouched.
        """
        return self.next_batch()

    def expected_output_shape(self, batch: Any) -> tuple[int, ...] | None:
        """The model output's shape for ``batch`` under the output contract, or ``None`` if free."""
        return None

    def describe(self) -> dict:
        """Return the workload dict shared by the time and memory records.

        Keys: ``model``, ``input_shape`` (a list, so that it survives JSON unchanged),
        ``batch_size``, ``dtype``, ``device`` and ``scope``.
        """
        return {
            "model": type(self.model).__name__ if self.model is not None else type(self).__name__,
            "input_shape": None,
            "batch_size": None,
            "dtype": None,
            "device": torch.device(self.device).type,
            "scope": "training_step",
        }

    def close(self) -> None:
        """Release resources such as DataLoader worker processes. Safe to call twice."""
