"""The correctness probe: NaN localisation, gradient chain, output contract, replay."""

from __future__ import annotations

import pytest
import torch

from mlflow_perfgate.rules import synthesize_evidence, validate_validity_report
from mlflow_perfgate.workloads import make_workload, probe_correctness
from tests.workloads_fixtures import probe_models as pm


def _probe(workload, **kwargs):
    record = probe_correctness(workload, **kwargs)
    validate_validity_report(record)
    return record


def test_clean_model_is_valid():
    record = _probe(pm.toy(pm.Stack))
    assert record["run_valid"] is True and record["status"] == "valid"
    assert record["issues"] == [] and record["first_failure"] is None
    assert record["reproducible"] is False and record["replayed"] is False


def test_first_non_finite_module_in_execution_order():
    # encoder.1 makes the NaN; encoder.2, encoder, head and the root only pass it on.
    record = _probe(pm.toy(pm.Stack, pm.InjectNaN()))
    assert record["issues"] == ["numerical"]
    assert record["first_failure"] == "encoder.1"
    assert record["details"]["non_finite_modules"][:4] == ["encoder.1", "encoder.2", "encoder", "head"]
    assert record["reproducible"] is True and record["replayed"] is True
    assert synthesize_evidence({"validity": record})["status"] == "blocked_by_correctness"


def test_transient_nan_is_not_reproducible():
    injector = pm.InjectNaN(times=1)
    record = _probe(pm.toy(pm.Stack, injector))
    assert record["first_failure"] == "encoder.1"
    assert record["reproducible"] is False
    assert record["details"]["replay"] == {"issues": [], "first_failure": None}
    assert injector.calls == 2


def test_no_replay_means_not_reproduced():
    record = _probe(pm.toy(pm.Stack, pm.InjectNaN()), replay=False)
    assert record["run_valid"] is False and record["reproducible"] is False and record["replayed"] is False


@pytest.mark.parametrize(("model_cls", "name"), [(pm.UnusedParameter, "extra"), (pm.DetachedParameter, "scale")])
def test_parameter_without_gradient_breaks_the_chain(model_cls, name):
    record = _probe(pm.toy(model_cls))
    assert record["issues"] == ["gradient_chain"]
    assert record["first_failure"] == name
    assert record["details"]["params_without_grad"] == [name]
    assert record["reproducible"] is True


def test_frozen_parameter_is_not_a_failure():
    assert _probe(pm.toy(pm.FrozenParameter))["run_valid"] is True


def test_output_contract_shape_and_dtype():
    shape = _probe(pm.toy(pm.WrongShape))
    assert shape["issues"] == ["output_contract"] and shape["first_failure"] == "output"
    assert "shape (2, 3, 1) != expected (2, 3)" in shape["details"]["output_contract"]
    dtype = _probe(pm.toy(pm.IntegerOutput))
    assert dtype["issues"] == ["output_contract"]
    assert "not floating point" in dtype["details"]["output_contract"]


def test_findings_keep_execution_order():
    # A NaN in forward comes before a gradient-chain failure found after backward.
    class Both(pm.UnusedParameter):
        def __init__(self):
            super().__init__()
            self.encoder[1] = pm.InjectNaN()

    record = _probe(pm.toy(Both))
    assert record["issues"] == ["numerical", "gradient_chain"]
    assert record["first_failure"] == "encoder.1"


def test_probe_leaves_the_model_as_found():
    workload = pm.toy(pm.UnusedParameter)
    before = {k: v.clone() for k, v in workload.model.state_dict().items()}
    rng = torch.get_rng_state()
    _probe(workload)
    assert all(torch.equal(before[k], v) for k, v in workload.model.state_dict().items())
    assert all(p.grad is None for p in workload.model.parameters())
    assert torch.equal(rng, torch.get_rng_state())


def test_probe_on_tinylm_checks_the_logits_contract():
    workload = make_workload("tinylm", {"input_shape": (2, 8), "checkpoint": True})
    record = _probe(workload)
    assert record["run_valid"] is True
    assert record["details"]["output_shape"] == [2, 8, 64]


def test_probe_needs_a_model():
    class NoModel:
        def step(self):
            return 0.0

        def quality(self):
            return 0.0

    with pytest.raises(TypeError, match="workload.model"):
        probe_correctness(NoModel())


# Model outputs as Hugging Face models return them: a dict (a ModelOutput is one) or a tuple.


@pytest.mark.parametrize("model_cls", [pm.DictOutput, pm.TupleOutput])
@pytest.mark.parametrize("labels_by_keyword", [True, False])
def test_dict_and_tuple_outputs_are_checked_on_their_logits(model_cls, labels_by_keyword):
    record = _probe(pm.output_toy(model_cls, labels_by_keyword=labels_by_keyword))
    assert record["run_valid"] is True, record
    assert record["details"]["output_shape"] == [2, 3]
    assert record["details"]["output_type"] == ("dict" if model_cls is pm.DictOutput else "tuple")
    assert record["details"]["logits_at"] == ("output.logits" if model_cls is pm.DictOutput else "output[1]")
    assert isinstance(record["details"]["loss"], float)


def test_tuple_without_labels_keeps_its_logits_first():
    from mlflow_perfgate.workloads._outputs import logits_of, loss_of

    logits = torch.ones(2, 3)
    assert logits_of((logits,), labels_given=False) == (logits, "output[0]")
    assert logits_of((torch.tensor(1.0), logits))[1] == "output[1]"
    assert logits_of((logits, torch.ones(2)))[1] == "output[0]"
    assert loss_of({"loss": torch.tensor(2.0), "logits": logits}).item() == 2.0
    with pytest.raises(TypeError, match="without a loss.*pass labels"):
        loss_of({"logits": logits})
    with pytest.raises(TypeError, match="must return the loss"):
        loss_of(object())


def test_nan_inside_a_dict_output_is_found_where_it_began():
    record = _probe(pm.output_toy(pm.DictOutput, pm.InjectNaN()))
    assert record["issues"] == ["numerical"]
    assert record["first_failure"] == "inner.encoder.1"
    assert record["reproducible"] is True


def test_output_without_logits_breaks_the_contract():
    record = _probe(pm.output_toy(pm.NoLogits))
    assert record["issues"] == ["output_contract"] and record["first_failure"] == "output"
    assert record["details"]["output_contract"] == "output is dict without logits at output.logits"


@pytest.mark.parametrize("model_cls", [pm.DictOutput, pm.TupleOutput])
def test_stages_accept_a_model_output_as_the_loss(model_cls):
    from mlflow_perfgate.workloads import collect_memory_evidence, collect_time_evidence

    workload = pm.output_toy(model_cls)
    assert float(workload.step()) >= 0
    time_record = collect_time_evidence(workload, steps=1, warmup=0)
    assert [stage["name"] for stage in time_record["stages"]] == ["dataloader", "forward", "backward", "optimizer"]
    memory = collect_memory_evidence(workload)
    assert memory["objects"]["gradients"] == memory["objects"]["parameters"]


@pytest.mark.parametrize(("values", "dtype", "expected"), [
    ([3e38, 3e38, -1.0], torch.float32, False),  # finite, but their sum overflows: still finite
    ([6e4, 6e4], torch.float16, False),
    ([3e38, float("inf")], torch.float32, True),
    ([1.0, float("-inf")], torch.float32, True),
    ([float("inf"), float("-inf")], torch.float32, True),  # a sum of NaN
    ([1.0, float("nan")], torch.bfloat16, True),
    ([], torch.float32, False),
    ([1, 2], torch.int64, False),  # not floating: never a numerical finding
])
def test_finiteness_is_judged_element_by_element(values, dtype, expected):
    from mlflow_perfgate.workloads._probe import _non_finite

    tensor = torch.tensor(values, dtype=dtype)
    assert _non_finite(tensor) is expected
    assert _non_finite({"nested": [tensor.reshape(1, -1)]}) is expected
    assert _non_finite(torch.complex(tensor.float(), torch.zeros(len(values)))) is (expected and dtype.is_floating_point)


class _Huge(torch.nn.Module):
    """Returns finite values so large that their sum overflows float32."""

    def forward(self, x):
        return x * 0.0 + 3e38


class _ThroughHuge(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.big = _Huge()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.big(x) * 1e-38 + x)


def test_outputs_whose_sum_overflows_are_still_valid():
    record = _probe(pm.toy(_ThroughHuge))
    assert record["issues"] == [], record
    assert record["details"]["non_finite_modules"] == []
    assert not bool(torch.isfinite(_Huge()(torch.ones(2, 4)).sum()))  # the sum does overflow
