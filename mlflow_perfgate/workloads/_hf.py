"""Hugging Face ``transformers`` models as workloads, as they come.

``--workload hf:<module>:<factory>`` (or :func:`hf_workload` from Python) wraps a model from a
factory of yours into a :class:`HFWorkload`: batches of ``input_shape`` tokens from a seeded
generator, AdamW, ``checkpoint`` through the model's own activation checkpointing, ``dtype``
through autocast, quality on a fixed held-out set. ``transformers`` stays optional: it is
imported when such a workload is built, never by importing :mod:`mlflow_perfgate.workloads`.

The task (learnable, so that quality moves with training and a broken candidate shows in it):
each sequence counts modulo the vocabulary from a random start with a random stride,
``x[t] = (x[0] + s * t) mod V``, the TinyLM task. A causal LM learns the next token; a
sequence classifier (a ``...ForSequenceClassification`` model, or ``task=sequence_classification``)
learns the stride class, ``label = s - 1`` with ``s`` in ``1..num_labels``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import json
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ._conditions import choice, flag, integer, number, parse_device, shape
from ._base import Workload
from ._outputs import logits_of, loss_of
from ._reads import READ_ATTRIBUTE, ConditionReads

__all__ = ["HF_TASKS", "HFWorkload", "hf_workload", "resolve_hf_factory"]

#: The tasks an :class:`HFWorkload` trains, and the ``transformers`` auto class that builds a
#: model of each from a bare config.
HF_TASKS: dict[str, str] = {
    "causal_lm": "AutoModelForCausalLM",
    "sequence_classification": "AutoModelForSequenceClassification",
}
_DTYPES = {"fp32": "fp32", "float32": "fp32", "torch.float32": "fp32", "float": "fp32",
           "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16"}
DEFAULT_INPUT_SHAPE = (4, 64)
DEFAULT_LEARNING_RATE = 1e-3
#: Largest stride of the causal-LM task (the classification task's is ``num_labels``).
MAX_STRIDE = 4
#: Held-out sequences that ``quality()`` scores, in chunks of the batch size.
EVAL_SEQUENCES = 32
#: Offsets the held-out and probe streams from the training stream of the same seed.
_EVAL_SEED_OFFSET = 1_000_003
_PROBE_SEED_OFFSET = 2_000_003
#: Config keys that say where or with what a model was made, not what it is.
_FINGERPRINT_SKIP = frozenset({"transformers_version", "_name_or_path", "_commit_hash"})
_INSTALL_HINT = "pip install 'mlflow-perfgate[hf]' (or pip install transformers)"


def _transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError as error:
        raise ImportError(f"a Hugging Face workload needs transformers: {_INSTALL_HINT} ({error})") from error


def _is_config(value: Any) -> bool:
    if isinstance(value, (type, torch.nn.Module, dict, str, bytes)) or value is None:
        return False
    return callable(getattr(value, "to_dict", None)) and hasattr(value, "model_type")


def config_fingerprint(config: Any) -> str:
    """A short hash of a model config's content: 12 hex digits of SHA-256 of its sorted JSON.

    Keys that record provenance rather than the model (``transformers_version``,
    ``_name_or_path``) are left out, so the same model built by two versions or from two paths
    gets the same fingerprint and a changed layer count a different one.
    """
    if config is None:
        return "none"
    content = {key: value for key, value in config.to_dict().items() if key not in _FINGERPRINT_SKIP}
    text = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _call_factory(factory: Callable, conditions: dict) -> Any:
    """Call ``factory(conditions)``, or ``factory()`` when it takes no argument."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: pass the conditions
        return factory(conditions)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    return factory(conditions) if positional else factory()


def _task_of(model_or_config: Any, conditions: dict) -> str:
    """The ``task`` condition, by default from the model's class name (or the config's architectures)."""
    if isinstance(model_or_config, torch.nn.Module):
        names = [type(model_or_config).__name__]
    else:
        names = list(getattr(model_or_config, "architectures", None) or [])
    classifier = any(str(name).endswith("ForSequenceClassification") for name in names)
    return choice(conditions, "task", "sequence_classification" if classifier else "causal_lm", list(HF_TASKS))


def _build_model(made: Any, conditions: dict, seed: int) -> tuple[torch.nn.Module, Any]:
    """A model from what a factory returned: a model, ``(model, config)`` or a config."""
    config = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        made, config = made
    if isinstance(made, torch.nn.Module):
        return made, config if config is not None else getattr(made, "config", None)
    if _is_config(made):
        auto = getattr(_transformers(), HF_TASKS[_task_of(made, conditions)])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = auto.from_config(made)
        return model, made
    raise TypeError(
        "a Hugging Face factory must return a transformers model, a (model, config) pair or a "
        f"config to build the model from, got {type(made).__name__}"
    )


class HFWorkload(Workload):
    """A ``transformers`` model trained with AdamW on the counting task of this module.

    Built by :func:`hf_workload` (and by ``--workload hf:<module>:<factory>``). Each step draws
    a fresh batch of ``input_shape`` (batch, seq) tokens from a generator seeded with ``seed``;
    the probe uses a fixed batch from a stream of its own, so probing leaves training untouched.
    The model is called the Hugging Face way, ``model(input_ids=..., labels=...)``, and its
    own loss is trained (causal LM: next-token cross-entropy, the model shifting the labels;
    classification: cross-entropy over ``num_labels``).

    Quality (higher is better, computed the same way for every arm, in eval mode, under the
    arm's ``dtype``, on a held-out set of 32 sequences from a separate seeded stream):

    * causal LM: ``exp(-mean next-token cross-entropy)``, the geometric mean of the probability
      given to the right next token, in (0, 1];
    * sequence classification: accuracy of the predicted stride class, in [0, 1].

    Dropout, where the model has it, draws from torch's global RNG, as in any training loop;
    the probe seeds it for its own pass, and a supervised attempt starts a fresh process.

    Args:
        model: the ``transformers`` model (any ``nn.Module`` called as
            ``model(input_ids=..., labels=...)`` that returns a ``ModelOutput``, dict or tuple).
        conditions: see :func:`hf_workload`.
        config: the model's config when it is not ``model.config``; used for the fingerprint.

    Attributes:
        task: ``'causal_lm'`` or ``'sequence_classification'``.
        config_fingerprint: :func:`config_fingerprint` of the model's config as the factory
            made it; :meth:`describe` reports it.
    """

    def __init__(self, model: torch.nn.Module, conditions: dict | None = None, *, config: Any = None):
        conditions = dict(conditions or {})
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"HFWorkload needs a transformers model (an nn.Module), got {type(model).__name__}")
        # The config the model reads (and this adapter adjusts: use_cache, pad_token_id); the
        # fingerprint is of the config the factory gave, before any adjustment.
        self.config = getattr(model, "config", None) if getattr(model, "config", None) is not None else config
        self.config_fingerprint = config_fingerprint(config if config is not None else self.config)
        self.task = _task_of(model, conditions)
        self.seed = integer(conditions, "seed", 0)
        batch, seq = shape(conditions, "input_shape", DEFAULT_INPUT_SHAPE)
        given_batch = integer(conditions, "batch_size", None, minimum=1)
        if given_batch is not None and given_batch != batch:
            raise ValueError(
                f"batch_size={conditions['batch_size']!r} disagrees with input_shape="
                f"{conditions['input_shape']!r}: batch_size must equal input_shape[0]={batch}"
            )
        for key, minimum in (("steps", 1), ("warmup", 0), ("repeats", 1)):
            integer(conditions, key, None, minimum=minimum)  # validated here, used by the runner
        self.batch_size, self.seq_len = batch, seq
        self.dtype = choice(conditions, "dtype", "fp32", _DTYPES)
        self.checkpoint = flag(conditions, "checkpoint", False)
        self.lr = number(conditions, "lr", DEFAULT_LEARNING_RATE, minimum=0, strict=True)
        self.device = torch.device(_device(conditions))
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"device={conditions.get('device')!r} requested but CUDA is not available "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); use device='cpu'"
            )
        self.vocab_size = _vocab_size(model, self.config)
        max_positions = _max_positions(self.config)
        if max_positions is not None and seq > max_positions:
            raise ValueError(
                f"input_shape={conditions.get('input_shape')!r}: the sequence length {seq} exceeds the "
                f"model's {max_positions} positions"
            )
        self._pad = None
        if self.task == "sequence_classification":
            self.num_labels = int(getattr(self.config, "num_labels", 0) or 0)
            if self.num_labels < 2:
                raise ValueError(
                    f"task=sequence_classification needs a config with num_labels >= 2, got {self.num_labels}"
                )
            if self.config is not None and getattr(self.config, "pad_token_id", None) is None:
                # Sequence classifiers that pool the last token refuse batches > 1 without a pad
                # token; the pad id is never drawn, so every token counts.
                self.config.pad_token_id = self.vocab_size - 1
            self._pad = getattr(self.config, "pad_token_id", None)
            if self.num_labels >= self._modulus():
                raise ValueError(
                    f"num_labels={self.num_labels} needs a vocabulary larger than {self.num_labels + 1}, "
                    f"got {self.vocab_size}"
                )
        else:
            self.num_labels = None
        if self.config is not None and hasattr(self.config, "use_cache"):
            self.config.use_cache = False  # a training step has no use for a generation cache
        self.model = model.to(self.device)
        self.model.train()
        _set_checkpointing(self.model, self.checkpoint)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=self.lr)
        self.tokens_per_step = batch * seq
        self._autocast_dtype = torch.bfloat16 if self.dtype == "bf16" else None
        self._train_gen = torch.Generator().manual_seed(self.seed)
        self._probe = self._draw(batch, torch.Generator().manual_seed(self.seed + _PROBE_SEED_OFFSET))
        self._eval = self._draw(EVAL_SEQUENCES, torch.Generator().manual_seed(self.seed + _EVAL_SEED_OFFSET))

    # -- data -------------------------------------------------------------------------------

    def _modulus(self) -> int:
        return self.vocab_size - (self._pad is not None and 0 <= self._pad < self.vocab_size)

    def _draw(self, count: int, generator: torch.Generator) -> dict:
        """``count`` counting sequences and their labels, on the device."""
        modulus = self._modulus()
        max_stride = self.num_labels if self.num_labels else min(MAX_STRIDE, max(1, modulus - 1))
        starts = torch.randint(0, modulus, (count, 1), generator=generator)
        strides = torch.randint(1, max_stride + 1, (count, 1), generator=generator)
        tokens = (starts + strides * torch.arange(self.seq_len)) % modulus
        if modulus < self.vocab_size:
            tokens = tokens + (tokens >= self._pad).long()  # skip the pad id
        labels = tokens if self.task == "causal_lm" else strides.squeeze(1) - 1
        return {"input_ids": tokens.to(self.device), "labels": labels.to(self.device)}

    def next_batch(self) -> dict:
        """A fresh ``{'input_ids', 'labels'}`` batch on the device (stage ``dataloader``)."""
        return self._draw(self.batch_size, self._train_gen)

    def probe_batch(self) -> dict:
        """A fixed batch, so that probing does not shift the data stream."""
        return self._probe

    # -- steps ------------------------------------------------------------------------------

    def _autocast(self):
        if self._autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self._autocast_dtype)

    def forward(self, batch: dict) -> torch.Tensor:
        """The model's own loss on ``batch`` (``model(input_ids=..., labels=...).loss``)."""
        with self._autocast():
            output = self.model(**batch)
        return loss_of(output)

    def expected_output_shape(self, batch: dict) -> tuple[int, ...]:
        """Logits are ``(batch, seq, vocab)`` for a causal LM, ``(batch, num_labels)`` for a classifier."""
        rows = batch["input_ids"].shape[0]
        if self.task == "causal_lm":
            return (rows, batch["input_ids"].shape[1], self.vocab_size)
        return (rows, self.num_labels)

    @torch.no_grad()
    def quality(self) -> float:
        """Held-out quality, higher is better: exp(-cross-entropy) (causal LM) or accuracy (classifier)."""
        was_training = self.model.training
        self.model.eval()
        try:
            total, count = 0.0, 0
            ids, labels = self._eval["input_ids"], self._eval["labels"]
            for start in range(0, ids.shape[0], self.batch_size):
                chunk, target = ids[start:start + self.batch_size], labels[start:start + self.batch_size]
                with self._autocast():
                    output = self.model(input_ids=chunk)
                logits = logits_of(output, labels_given=False)[0].float()
                if self.task == "causal_lm":
                    total += float(F.cross_entropy(
                        logits[:, :-1].reshape(-1, logits.shape[-1]), target[:, 1:].reshape(-1), reduction="sum"))
                    count += target[:, 1:].numel()
                else:
                    total += int((logits.argmax(dim=-1) == target).sum())
                    count += target.numel()
        finally:
            self.model.train(was_training)
        return math.exp(-total / count) if self.task == "causal_lm" else total / count

    # -- records ----------------------------------------------------------------------------

    def describe(self) -> dict:
        """The workload dict of the evidence records, with the model's class and config fingerprint."""
        return {
            "model": type(self.model).__name__,
            "config_fingerprint": self.config_fingerprint,
            "task": self.task,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "input_shape": [self.batch_size, self.seq_len],
            "batch_size": self.batch_size,
            "dtype": self.dtype,
            "device": self.device.type,
            "scope": "training_step",
        }

    def conditions(self) -> dict:
        """The parsed conditions, JSON-ready."""
        return {
            "model": type(self.model).__name__, "task": self.task, "input_shape": [self.batch_size, self.seq_len],
            "batch_size": self.batch_size, "dtype": self.dtype, "device": str(self.device),
            "checkpoint": self.checkpoint, "seed": self.seed, "lr": self.lr,
        }


#: The conditions this adapter reads itself (:class:`HFWorkload`); a factory may read others.
_ADAPTER_KEYS = ("batch_size", "checkpoint", "device", "dtype", "input_shape", "lr", "repeats", "seed", "steps",
                 "task", "warmup")


def _device(conditions: dict) -> str:
    return parse_device(conditions.get("device") if conditions.get("device") is not None else "cpu")


def _vocab_size(model: torch.nn.Module, config: Any) -> int:
    size = getattr(config, "vocab_size", None)
    if size is None:
        embeddings = getattr(model, "get_input_embeddings", lambda: None)()
        size = getattr(embeddings, "num_embeddings", None)
    if not isinstance(size, int) or size < 2:
        raise ValueError(f"the model's config must declare a vocab_size >= 2, got {size!r}")
    return size


def _max_positions(config: Any) -> int | None:
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _set_checkpointing(model: torch.nn.Module, enabled: bool) -> None:
    """Activation checkpointing on or off through the model's own switch (non-reentrant).

    ``transformers`` 5 names it ``activation_checkpointing_enable``; 4.35 and later
    ``gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)``.
    """
    if enabled and not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"checkpoint=true, but {type(model).__name__} does not support activation checkpointing")
    if hasattr(model, "activation_checkpointing_enable"):
        if enabled:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        elif getattr(model, "supports_gradient_checkpointing", False):
            model.activation_checkpointing_disable()
    elif hasattr(model, "gradient_checkpointing_enable"):
        if enabled:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif getattr(model, "supports_gradient_checkpointing", False):
            model.gradient_checkpointing_disable()
    elif enabled:
        raise ValueError(f"checkpoint=true, but {type(model).__name__} has no activation checkpointing switch")


def checkpointing_enabled(model: torch.nn.Module) -> bool:
    """Whether the model's activation checkpointing is on (``is_activation_checkpointing`` or,
    before ``transformers`` 5, ``is_gradient_checkpointing``)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def hf_workload(model_or_factory: Any, conditions: dict | None = None) -> HFWorkload:
    """Wrap a Hugging Face ``transformers`` model into a workload.

    For a factory module of your own, either name it on the command line,
    ``--workload hf:mypkg.models:tiny_gpt2``, or return ``hf_workload(...)`` from a workload
    factory (``--workload mypkg.bench:make``)::

        from transformers import GPT2Config, GPT2LMHeadModel
        from mlflow_perfgate.workloads import hf_workload, integer

        def tiny_gpt2(conditions):
            config = GPT2Config(n_layer=integer(conditions, "n_layer", 2, minimum=1), n_embd=32,
                                n_head=2, vocab_size=100, n_positions=64)
            return GPT2LMHeadModel(config)

        def make(conditions):
            return hf_workload(tiny_gpt2, conditions)

    Read conditions with :func:`flag`, :func:`integer`, :func:`shape` (they arrive as text
    from ``--set``). A factory is called with the conditions (or with nothing when it takes no
    argument) under ``torch.manual_seed(seed)`` in a private RNG stream, so both arms start
    from the same weights.

    Args:
        model_or_factory: a ``transformers`` model; a config (the model is built from it with
            ``AutoModelForCausalLM`` or ``AutoModelForSequenceClassification``); or a factory
            returning a model, a ``(model, config)`` pair or a config.
        conditions: ``input_shape`` (batch, seq; default ``(4, 64)``), ``batch_size`` (must
            equal ``input_shape[0]``), ``dtype`` (``fp32``, or ``bf16`` under autocast),
            ``device`` (``cpu``, ``cuda``, ``cuda:N``), ``checkpoint`` (the model's activation
            checkpointing, on or off), ``seed`` (default 0), ``lr`` (AdamW, default 1e-3),
            ``task`` (``causal_lm``, or ``sequence_classification``; by default from the model's
            class name), and ``steps``, ``warmup``, ``repeats`` (validated here, used by the
            runner). Values may be text. Other keys go to the factory only.

    Returns:
        The :class:`HFWorkload`.

    Raises:
        ValueError: a condition has a bad value (the message names the key).
        TypeError: the factory returned no model or config.
        ImportError: a config must be built into a model and ``transformers`` is missing.
        RuntimeError: ``device`` is CUDA and CUDA is not available.
    """
    conditions = dict(conditions or {})
    seed = integer(conditions, "seed", 0)
    reads = ConditionReads(conditions)  # the keys the factory reads, beside the adapter's own
    made = model_or_factory
    if not isinstance(made, torch.nn.Module) and not _is_config(made):
        if not callable(made):
            raise TypeError(f"hf_workload needs a model, a config or a factory, got {type(made).__name__}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            made = _call_factory(made, reads)
    model, config = _build_model(made, reads, seed)
    workload = HFWorkload(model, conditions, config=config)
    read = reads.read()
    if read is not None:  # a key neither the factory nor this adapter read cannot reach the model
        setattr(workload, READ_ATTRIBUTE, sorted(set(read) | set(_ADAPTER_KEYS)))
    return workload


def resolve_hf_factory(target: str) -> Callable[[dict], HFWorkload]:
    """The workload factory behind ``hf:<module>:<factory>`` (``target`` is ``<module>:<factory>``).

    Raises:
        ValueError: ``transformers`` is missing, ``target`` is not ``module:function``, or the
            module or function cannot be found.
    """
    try:
        _transformers()
    except ImportError as error:
        raise ValueError(str(error)) from error
    module_name, sep, function_name = target.strip().partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"workload must be 'hf:module:function', got 'hf:{target}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"workload 'hf:{target}': cannot import module {module_name!r}: {error}") from error
    factory = getattr(module, function_name, None)
    if factory is None or not (callable(factory) or _is_config(factory)):
        raise ValueError(f"workload 'hf:{target}': module {module_name!r} has no callable {function_name!r}")
    return functools.partial(hf_workload, factory)
