"""Where the loss and the logits are in a model's output, by the conventions of ``transformers``.

A plain model returns a tensor. A Hugging Face model returns a ``ModelOutput`` (an ordered dict
whose fields are also attributes, holding only the fields that are not ``None``), or with
``return_dict=False`` a tuple: ``(loss, logits, ...)`` when labels were given, else
``(logits, ...)``. Other code returns a plain dict. This module reads all of them without
importing ``transformers``: a ``ModelOutput`` is a ``Mapping``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["describe_output", "logits_of", "loss_of"]


def describe_output(value: Any) -> str:
    """A short name for the kind of output, for messages (``'CausalLMOutputWithPast'``, ``'tuple'``)."""
    return type(value).__name__


def loss_of(value: Any) -> Any:
    """The loss in what a workload's ``forward`` returned.

    A tensor or a number is the loss itself; a mapping (a ``ModelOutput``, a dict) holds it under
    ``"loss"``; an object with a ``loss`` attribute holds it there; a tuple or list holds it first
    (``transformers``' convention when labels were given).

    Raises:
        TypeError: the output holds no loss (for a Hugging Face model: no labels were given),
            or is of a kind that cannot hold one.
    """
    if isinstance(value, (torch.Tensor, int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        loss = value.get("loss")
    elif isinstance(value, (tuple, list)):
        loss = value[0] if value else None
    elif hasattr(value, "loss"):
        loss = value.loss
    else:
        raise TypeError(
            f"forward() must return the loss (a tensor), or a model output holding it "
            f"(a ModelOutput or dict with 'loss', a tuple with the loss first); got {describe_output(value)}"
        )
    if loss is None:
        raise TypeError(
            f"forward() returned a {describe_output(value)} without a loss; for a Hugging Face model, "
            "pass labels so that it computes one, or return the loss itself"
        )
    return loss


def logits_of(output: Any, *, labels_given: bool | None = None) -> tuple[Any, str]:
    """The logits in a model's output, and where they were found.

    A tensor is the logits; a mapping holds them under ``"logits"``; an object with a
    ``logits`` attribute holds them there; a tuple holds them first, or second when labels were
    given (the loss comes first). When ``labels_given`` is ``None`` (unknown), a leading
    zero-dimensional tensor in a tuple of two or more is taken for the loss.

    Returns:
        ``(logits, where)``: ``where`` is ``'output'``, ``'output.logits'`` or ``'output[i]'``;
        ``logits`` is ``None`` when the output holds none.
    """
    if isinstance(output, torch.Tensor):
        return output, "output"
    if isinstance(output, Mapping):
        return output.get("logits"), "output.logits"
    if isinstance(output, (tuple, list)):
        if labels_given is None:
            first = output[0] if output else None
            labels_given = len(output) > 1 and isinstance(first, torch.Tensor) and first.dim() == 0
        index = 1 if labels_given else 0
        return (output[index] if len(output) > index else None), f"output[{index}]"
    if hasattr(output, "logits"):
        return output.logits, "output.logits"
    return None, "output"
