"""Small staged workloads with known correctness defects, for the probe's tests."""

from __future__ import annotations

import torch
from torch import nn

from mlflow_perfgate.workloads import Workload


class InjectNaN(nn.Module):
    """Returns NaN from its own arithmetic (finite input) while ``active``; counts its calls."""

    def __init__(self, times: int | None = None):
        super().__init__()
        self.remaining = times
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.remaining is None or self.remaining > 0:
            if self.remaining is not None:
                self.remaining -= 1
            return x + torch.log(torch.tensor(-1.0))
        return x


class Stack(nn.Module):
    """``encoder`` (linear, optional NaN injector, linear) then ``head``."""

    def __init__(self, inject: nn.Module | None = None):
        super().__init__()
        layers = [nn.Linear(4, 8), inject if inject is not None else nn.Identity(), nn.Linear(8, 8)]
        self.encoder = nn.Sequential(*layers)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))


class UnusedParameter(Stack):
    """Has a trainable parameter that forward never touches."""

    def __init__(self):
        super().__init__()
        self.extra = nn.Parameter(torch.ones(3))


class DetachedParameter(Stack):
    """Uses a parameter only through ``.detach()``, which cuts it from the graph."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale.detach()


class FrozenParameter(Stack):
    """A parameter with ``requires_grad=False`` is not a gradient-chain failure."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Parameter(torch.ones(3), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.frozen


class WrongShape(Stack):
    """Returns ``(batch, 3, 1)`` where ``(batch, 3)`` is promised."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).unsqueeze(-1)


class IntegerOutput(nn.Module):
    """Returns class indices instead of logits; the loss goes through a float side path."""

    def __init__(self):
        super().__init__()
        self.inner = Stack()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last_logits = self.inner(x)
        return self.last_logits.argmax(dim=-1)


class ToyWorkload(Workload):
    """A staged workload around ``model`` on a fixed ``(2, 4)`` batch, promising ``(2, 3)`` outputs."""

    def __init__(self, model: nn.Module, *, seed: int = 0):
        self.model = model
        self.seed = seed
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.batch = torch.linspace(-1, 1, 8).reshape(2, 4)

    def next_batch(self) -> torch.Tensor:
        return self.batch

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        output = self.model(batch)
        if not output.is_floating_point():
            output = self.model.last_logits
        return output.float().pow(2).mean()

    def expected_output_shape(self, batch: torch.Tensor) -> tuple[int, ...]:
        return (batch.shape[0], 3)

    def quality(self) -> float:
        return 0.0


def toy(model_cls, *args, **kwargs) -> ToyWorkload:
    """A :class:`ToyWorkload` around ``model_cls(*args, **kwargs)`` built from seed 0."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model_cls(*args, **kwargs)
    return ToyWorkload(model)


class DictOutput(nn.Module):
    """Returns ``{'loss': ..., 'logits': ...}`` as a Hugging Face model does given labels."""

    def __init__(self, inject: nn.Module | None = None):
        super().__init__()
        self.inner = Stack(inject)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        logits = self.inner(x)
        output = {"logits": logits}
        if labels is not None:
            output = {"loss": (logits - labels).pow(2).mean(), **output}
        return output


class TupleOutput(DictOutput):
    """Returns ``(loss, logits)`` given labels, else ``(logits,)``: ``return_dict=False``."""

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> tuple:
        return tuple(super().forward(x, labels=labels).values())


class NoLogits(DictOutput):
    """Returns a dict with a loss and no logits."""

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        return {"loss": super().forward(x, labels=labels)["loss"]}


class OutputWorkload(ToyWorkload):
    """Returns the model's own output from ``forward``, as ``return self.model(**batch)`` does."""

    def __init__(self, model: nn.Module, *, labels_by_keyword: bool = True):
        super().__init__(model)
        self.labels = torch.zeros(2, 3)
        self.labels_by_keyword = labels_by_keyword

    def forward(self, batch: torch.Tensor):
        if self.labels_by_keyword:
            return self.model(batch, labels=self.labels)
        return self.model(batch, self.labels)


def output_toy(model_cls, *args, labels_by_keyword: bool = True, **kwargs) -> OutputWorkload:
    """An :class:`OutputWorkload` around ``model_cls(*args, **kwargs)`` built from seed 0."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model_cls(*args, **kwargs)
    return OutputWorkload(model, labels_by_keyword=labels_by_keyword)
