"""Tiny ``transformers`` models built from configs (no weights, no hub), for the HF adapter's tests.

Named as ``hf:tests.workloads_fixtures.hf_models:<factory>``. Importing this module imports
transformers: the tests that use it skip when it is missing.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel

from mlflow_perfgate.workloads import hf_workload, integer

VOCAB = 100


def tiny_config(conditions: dict, **extra) -> GPT2Config:
    """GPT-2 with two layers of width 32 over 100 tokens; ``n_layer`` may be set by a condition."""
    return GPT2Config(n_layer=integer(conditions, "n_layer", 2, minimum=1), n_embd=32, n_head=2,
                      vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0, **extra)


def tiny_gpt2(conditions: dict) -> GPT2LMHeadModel:
    """A freshly initialised tiny ``GPT2LMHeadModel``."""
    return GPT2LMHeadModel(tiny_config(conditions))


def tiny_gpt2_config(conditions: dict) -> GPT2Config:
    """Only the config: the adapter builds the model (``AutoModelForCausalLM``)."""
    return tiny_config(conditions)


def tiny_gpt2_ignoring_layers() -> GPT2LMHeadModel:
    """Takes no conditions, so a changed ``n_layer`` changes nothing (the fingerprint says so)."""
    return GPT2LMHeadModel(tiny_config({}))


def tiny_classifier(conditions: dict) -> GPT2ForSequenceClassification:
    """A tiny GPT-2 sequence classifier over 3 labels, with no pad token (the adapter sets one)."""
    return GPT2ForSequenceClassification(tiny_config(conditions, num_labels=3))


def checkpointed_gpt2(conditions: dict) -> GPT2LMHeadModel:
    """A model that arrives with activation checkpointing on: ``checkpoint=false`` must turn it off."""
    model = tiny_gpt2(conditions)
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable()
    else:
        model.gradient_checkpointing_enable()
    return model


class NaNActivation(nn.Module):
    """An activation whose own arithmetic turns a finite input into NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.log(torch.tensor(-1.0))


def nan_gpt2(conditions: dict) -> GPT2LMHeadModel:
    """A tiny GPT-2 whose second block's MLP activation makes NaNs: ``transformer.h.1.mlp.act``."""
    model = tiny_gpt2(conditions)
    model.transformer.h[1].mlp.act = NaNActivation()
    return model


def user_make(conditions: dict):
    """A user's own workload factory (``--workload module:function``) through the helper."""
    return hf_workload(tiny_gpt2, conditions)
