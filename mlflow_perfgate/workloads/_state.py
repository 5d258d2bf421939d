"""Leave a model as found: used by the probe and the memory estimate, which must not train."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["preserved", "rng_devices"]


def rng_devices(device: torch.device) -> list[int]:
    """The CUDA devices whose RNG ``torch.random.fork_rng`` must save for work on ``device``."""
    return [device.index or 0] if device.type == "cuda" else []


@contextlib.contextmanager
def preserved(model: torch.nn.Module) -> Iterator[None]:
    """Snapshot parameters, buffers and gradients; clear gradients; restore all on exit.

    Gradients start cleared so that a check inside sees only what its own backward produced.
    """
    saved_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
    saved_grads = {name: p.grad for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    try:
        yield
    finally:
        model.load_state_dict(saved_state)
        for name, p in model.named_parameters():
            p.grad = saved_grads[name]
