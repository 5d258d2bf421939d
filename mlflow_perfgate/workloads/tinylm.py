"""TinyLM: a tiny decoder-only transformer trained on a synthetic, learnable token task.

The task: each sequence counts modulo the vocabulary with its own stride,
``x[t] = (x[0] + s * t) mod V`` with ``s`` in ``1..MAX_STRIDE``. From the third token on, the
next token is a fixed function of the two before it, so held-out next-token accuracy rises with
training and is deterministic for a seed. A step takes milliseconds on a CPU, which is the point:
the harness, not the model, is under test.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as activation_checkpoint
from torch.utils.data import DataLoader, Dataset, RandomSampler

from ._conditions import parse_bool, parse_choice, parse_device, parse_int, parse_shape
from ._base import Workload

__all__ = ["TinyLM", "TinyLMConfig", "TinyLMWorkload", "make_workload"]

VOCAB_SIZE = 64
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
MLP_RATIO = 2
MAX_STRIDE = 4
LEARNING_RATE = 3e-3
#: Training sequences per batch row: enough that an epoch spans several steps, few enough that
#: building the dataset costs nothing.
TRAIN_BATCHES_PER_EPOCH = 16
EVAL_SEQUENCES = 32
#: Offsets the held-out stream from the training stream of the same seed.
_EVAL_SEED_OFFSET = 1_000_003

_MODELS = {"tinylm": "TinyLM"}
_DTYPES = {
    "fp32": "fp32", "float32": "fp32", "torch.float32": "fp32", "float": "fp32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
}
DEFAULT_INPUT_SHAPE = (4, 128)


@dataclass(frozen=True)
class TinyLMConfig:
    """The parsed conditions of a TinyLM workload (see :func:`make_workload`)."""

    model: str = "TinyLM"
    batch_size: int = DEFAULT_INPUT_SHAPE[0]
    seq_len: int = DEFAULT_INPUT_SHAPE[1]
    dtype: str = "fp32"
    device: str = "cpu"
    checkpoint: bool = False
    num_workers: int = 0
    seed: int = 0
    steps: int | None = None
    warmup: int | None = None
    repeats: int | None = None
    measurement_method: str | None = None

    @classmethod
    def from_conditions(cls, conditions: dict) -> "TinyLMConfig":
        """Parse and cross-check the conditions; unknown keys are ignored.

        Raises:
            ValueError: a value is malformed (the message names the key and the allowed
                values), or ``batch_size`` disagrees with ``input_shape[0]``.
        """
        get = conditions.get
        model = parse_choice("model", get("model", "TinyLM"), _MODELS)
        shape = get("input_shape")
        batch = get("batch_size")
        if shape is not None:
            batch_size, seq_len = parse_shape("input_shape", shape, ndim=2)
            if batch is not None and parse_int("batch_size", batch, minimum=1) != batch_size:
                raise ValueError(
                    f"batch_size={batch!r} disagrees with input_shape={shape!r}: "
                    f"batch_size must equal input_shape[0]={batch_size}"
                )
        else:
            seq_len = DEFAULT_INPUT_SHAPE[1]
            batch_size = (
                DEFAULT_INPUT_SHAPE[0] if batch is None else parse_int("batch_size", batch, minimum=1)
            )
        optional_counts = {
            key: None if get(key) is None else parse_int(key, get(key), minimum=minimum)
            for key, minimum in (("steps", 1), ("warmup", 0), ("repeats", 1))
        }
        method = get("measurement_method")
        return cls(
            model=model,
            batch_size=batch_size,
            seq_len=seq_len,
            dtype=parse_choice("dtype", get("dtype", "fp32"), _DTYPES),
            device=parse_device(get("device", "cpu")),
            checkpoint=parse_bool("checkpoint", get("checkpoint", False)),
            num_workers=parse_int("num_workers", get("num_workers", 0)),
            seed=parse_int("seed", get("seed", 0)),
            measurement_method=None if method is None else str(method),
            **optional_counts,
        )


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).split(d_model, dim=-1)
        q, k, v = (t.view(batch, seq, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, d_model))


class MLP(nn.Module):
    """Position-wise feed-forward layer."""

    def __init__(self, d_model: int, ratio: int):
        super().__init__()
        self.fc = nn.Linear(d_model, ratio * d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(ratio * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Decoder-only language model returning logits of shape ``(batch, seq, vocab)``.

    Args:
        max_len: the longest sequence (learned position embeddings).
        checkpoint: recompute each block in backward instead of keeping its activations
            (``torch.utils.checkpoint``, non-reentrant). Results are unchanged.
    """

    def __init__(self, max_len: int, *, vocab_size: int = VOCAB_SIZE, d_model: int = D_MODEL,
                 n_heads: int = N_HEADS, n_layers: int = N_LAYERS, mlp_ratio: int = MLP_RATIO,
                 checkpoint: bool = False):
        super().__init__()
        self.checkpoint = checkpoint
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, mlp_ratio) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            # Checkpointing only pays off when a backward will follow.
            if self.checkpoint and torch.is_grad_enabled():
                x = activation_checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln_f(x))


def stride_sequences(count: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` sequences of ``length`` tokens, each counting modulo the vocabulary by its own stride."""
    starts = torch.randint(0, VOCAB_SIZE, (count, 1), generator=generator)
    strides = torch.randint(1, MAX_STRIDE + 1, (count, 1), generator=generator)
    return (starts + strides * torch.arange(length)) % VOCAB_SIZE


class _Sequences(Dataset):
    """Precomputed sequences: a worker only indexes, so ``num_workers > 0`` stays cheap."""

    def __init__(self, data: torch.Tensor):
        self.data = data

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


class TinyLMWorkload(Workload):
    """TinyLM trained with AdamW on stride sequences, one batch of ``input_shape`` per step.

    Built by :func:`make_workload`. Training data is shuffled by a seeded generator and served by
    a ``DataLoader`` (``num_workers`` honoured, workers persistent across epochs). Quality is
    next-token accuracy on a held-out set drawn from a separate seeded stream.
    """

    def __init__(self, config: TinyLMConfig):
        self.config = config
        self.seed = config.seed
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"device={config.device!r} requested but CUDA is not available "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); use device='cpu'"
            )
        batch, seq = config.batch_size, config.seq_len
        self.tokens_per_step = batch * seq
        self._autocast_dtype = torch.bfloat16 if config.dtype == "bf16" else None
        # Seed a private RNG stream for initialisation: the caller's global RNG stays untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.model = TinyLM(seq, checkpoint=config.checkpoint).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        data_gen = torch.Generator().manual_seed(config.seed)
        train = stride_sequences(TRAIN_BATCHES_PER_EPOCH * batch, seq + 1, data_gen)
        eval_gen = torch.Generator().manual_seed(config.seed + _EVAL_SEED_OFFSET)
        self._eval = stride_sequences(EVAL_SEQUENCES, seq + 1, eval_gen).to(self.device)
        self._probe = train[:batch].to(self.device)
        dataset = _Sequences(train)
        self.loader = DataLoader(
            dataset,
            batch_size=batch,
            # The shuffle order has a generator of its own: the loader's generator also seeds
            # workers, and sharing it would make the data order depend on num_workers.
            sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(config.seed)),
            drop_last=True,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            generator=torch.Generator().manual_seed(config.seed),
        )
        self._iterator = None

    def _autocast(self):
        if self._autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self._autocast_dtype)

    def next_batch(self) -> torch.Tensor:
        """Return the next ``(batch, seq + 1)`` token block on the device (new epoch when exhausted)."""
        if self._iterator is None:
            self._iterator = iter(self.loader)
        try:
            tokens = next(self._iterator)
        except StopIteration:
            self._iterator = iter(self.loader)
            tokens = next(self._iterator)
        return tokens.to(self.device, non_blocking=True)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        """Return the mean next-token cross-entropy of ``batch``."""
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with self._autocast():
            logits = self.model(inputs)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def probe_batch(self) -> torch.Tensor:
        """A fixed training batch, so that probing does not shift the data order."""
        return self._probe

    def expected_output_shape(self, batch: torch.Tensor) -> tuple[int, ...]:
        """Logits are ``(batch, seq, vocab)``."""
        return (batch.shape[0], batch.shape[1] - 1, VOCAB_SIZE)

    @torch.no_grad()
    def quality(self) -> float:
        """Held-out next-token accuracy in [0, 1].

        One forward pass over the whole held-out set (``EVAL_SEQUENCES`` sequences): the same
        pass for every arm whatever its batch size, and cheaper than one pass per training
        batch (it runs once per attempt, outside the timed steps).
        """
        self.model.eval()
        try:
            with self._autocast():
                logits = self.model(self._eval[:, :-1])
            correct = int((logits.argmax(dim=-1) == self._eval[:, 1:]).sum())
        finally:
            self.model.train()
        return correct / self._eval[:, 1:].numel()

    def describe(self) -> dict:
        """The workload dict of the evidence records (``input_shape`` as a list)."""
        return {
            "model": self.config.model,
            "input_shape": [self.config.batch_size, self.config.seq_len],
            "batch_size": self.config.batch_size,
            "dtype": self.config.dtype,
            "device": self.device.type,
            "scope": "training_step",
        }

    def conditions(self) -> dict:
        """The parsed conditions, JSON-ready."""
        return asdict(self.config)

    def close(self) -> None:
        """Shut down persistent DataLoader workers."""
        # Dropping the iterator is what stops persistent workers.
        self._iterator = None
        self.loader._iterator = None


def make_workload(conditions: dict) -> TinyLMWorkload:
    """Build a TinyLM workload (the factory behind the built-in name ``tinylm``).

    Args:
        conditions: ``model`` (``'TinyLM'``), ``input_shape`` (batch, sequence; default
            ``(4, 128)``), ``batch_size`` (must equal ``input_shape[0]``), ``dtype``
            (``fp32`` or ``bf16``; bf16 runs the model under autocast), ``device`` (``cpu``,
            ``cuda``), ``checkpoint`` (bool), ``num_workers`` (int >= 0), ``seed`` (default 0),
            ``steps`` and ``warmup`` (validated here, used by the runner); ``repeats`` and
            ``measurement_method`` are only recorded. Values may be strings or natural types;
            other keys are ignored.

    Returns:
        The workload.

    Raises:
        ValueError: a condition has a bad value; the message names the key and the allowed values.
        RuntimeError: ``device`` is CUDA and CUDA is not available.
    """
    return TinyLMWorkload(TinyLMConfig.from_conditions(conditions))  # read, not copied: see _reads
