"""TinyLM: conditions, determinism, checkpointing, DataLoader workers, dtypes."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from mlflow_perfgate.workloads import Workload, WorkloadProtocol, make_workload, resolve_workload
from mlflow_perfgate.workloads.tinylm import TinyLMWorkload
from mlflow_perfgate.workloads.tinylm import make_workload as tinylm_factory

SMALL = {"input_shape": "(2, 32)"}


def _train(conditions, steps=4):
    workload = make_workload("tinylm", conditions)
    try:
        losses = [float(workload.step()) for _ in range(steps)]
        return workload.quality(), losses
    finally:
        workload.close()


def test_builtin_name_resolves_to_the_factory():
    assert resolve_workload("tinylm") is tinylm_factory
    assert resolve_workload("TinyLM") is tinylm_factory
    assert resolve_workload("mlflow_perfgate.workloads.tinylm:make_workload") is tinylm_factory
    workload = make_workload("tinylm", SMALL)
    assert isinstance(workload, Workload) and isinstance(workload, WorkloadProtocol)
    assert workload.tokens_per_step == 64


@pytest.mark.parametrize("shape", ["(2, 32)", "[2,32]", (2, 32), [2, 32], "2x32"])
def test_input_shape_spellings(shape):
    workload = make_workload("tinylm", {"input_shape": shape, "batch_size": "2"})
    assert workload.describe()["input_shape"] == [2, 32]
    assert workload.describe()["batch_size"] == 2


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"input_shape": "(4, 128)", "batch_size": 8}, "batch_size=8 disagrees with input_shape"),
        ({"input_shape": "(4,)"}, "input_shape must be 2 positive integers"),
        ({"input_shape": "(0, 8)"}, "input_shape must be 2 positive integers"),
        ({"dtype": "fp16"}, "dtype must be one of \\['bf16', 'fp32'\\], got 'fp16'"),
        ({"device": "tpu"}, "device must be one of \\['cpu', 'cuda', 'cuda:N'\\]"),
        ({"model": "GPT2"}, "model must be one of \\['TinyLM'\\]"),
        ({"checkpoint": "maybe"}, "checkpoint must be a boolean"),
        ({"num_workers": -1}, "num_workers must be an integer >= 0"),
        ({"num_workers": True}, "num_workers must be an integer >= 0"),
        ({"seed": "x"}, "seed must be an integer >= 0"),
        ({"steps": 0}, "steps must be an integer >= 1"),
        ({"repeats": "five"}, "repeats must be an integer >= 1"),
    ],
)
def test_bad_conditions_name_the_key(conditions, message):
    with pytest.raises(ValueError, match=message):
        make_workload("tinylm", conditions)


def test_unknown_keys_and_recorded_keys_are_accepted():
    workload = make_workload("tinylm", {**SMALL, "colour": "blue", "repeats": "5",
                                        "measurement_method": "cpu_wall_training_step_ms",
                                        "checkpoint": "true", "dtype": "bfloat16"})
    assert workload.config.repeats == 5 and workload.config.checkpoint is True
    assert workload.config.dtype == "bf16"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when CUDA is missing")
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        make_workload("tinylm", {"device": "cuda"})


def test_quality_is_deterministic_for_a_seed():
    first = _train({**SMALL, "seed": 3})
    assert _train({**SMALL, "seed": 3}) == first
    assert 0 <= first[0] <= 1


def test_training_learns_the_task():
    quality_before = make_workload("tinylm", SMALL).quality()
    quality_after, losses = _train(SMALL, steps=30)
    assert losses[-1] < losses[0]
    assert quality_after > quality_before


def test_checkpointing_does_not_change_quality():
    plain_quality, plain_losses = _train(SMALL)
    ckpt_quality, ckpt_losses = _train({**SMALL, "checkpoint": True})
    assert ckpt_quality == pytest.approx(plain_quality, abs=1e-4)
    assert ckpt_losses == pytest.approx(plain_losses, rel=1e-5)


def test_dataloader_workers_serve_the_same_data():
    plain = _train(SMALL, steps=3)
    workers = _train({**SMALL, "num_workers": 1}, steps=3)
    assert workers[0] == plain[0]
    assert workers[1] == pytest.approx(plain[1], rel=1e-6)


def test_bf16_runs_under_autocast():
    workload = make_workload("tinylm", {**SMALL, "dtype": "bf16"})
    assert isinstance(workload, TinyLMWorkload)
    loss = workload.step()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert next(workload.model.parameters()).dtype == torch.float32
    logits = workload.model(workload.probe_batch()[:, :-1])
    assert logits.dtype == torch.float32  # autocast is scoped to the workload's own calls


def test_epochs_roll_over():
    workload = make_workload("tinylm", {"input_shape": (1, 4)})
    # 16 batches per epoch: the 17th comes from a fresh pass over the data.
    batches = [workload.next_batch() for _ in range(17)]
    assert all(batch.shape == (1, 5) for batch in batches)


def test_close_stops_persistent_workers():
    workload = make_workload("tinylm", {**SMALL, "num_workers": 1})
    workload.step()
    assert multiprocessing.active_children()
    workload.close()
    workload.close()  # twice is fine
    assert not multiprocessing.active_children()
