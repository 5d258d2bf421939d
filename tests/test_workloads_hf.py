"""Hugging Face models as workloads: the hf: adapter, the helper, the probe on ModelOutputs, native bf16."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from mlflow_perfgate import harness
from mlflow_perfgate import workloads
from mlflow_perfgate.rules import validate_validity_report
from mlflow_perfgate.workloads import (
    HFWorkload,
    collect_memory_evidence,
    collect_time_evidence,
    hf_workload,
    make_workload,
    native_bf16,
    probe_correctness,
    resolve_workload,
    run_attempt,
)

try:
    import transformers
except ImportError:  # the adapter's own tests need it; the rest of this file does not
    transformers = None

needs_transformers = pytest.mark.skipif(
    transformers is None, reason="transformers is not installed (pip install 'mlflow-perfgate[hf]')"
)
FIXTURES = "tests.workloads_fixtures.hf_models"
GPT2 = f"hf:{FIXTURES}:tiny_gpt2"
SMALL = {"input_shape": "2,16"}


def _checkpointing(model) -> bool:
    from mlflow_perfgate.workloads._hf import checkpointing_enabled

    return checkpointing_enabled(model)


def _probe(workload, **kwargs) -> dict:
    record = probe_correctness(workload, **kwargs)
    validate_validity_report(record)
    return record


@needs_transformers
def test_adapter_builds_a_gpt2_workload_that_the_probe_passes():
    workload = make_workload(GPT2, SMALL)
    assert isinstance(workload, HFWorkload) and isinstance(workload.model, transformers.GPT2LMHeadModel)
    assert workload.tokens_per_step == 32 and workload.task == "causal_lm"
    record = _probe(workload)
    assert record["run_valid"] is True, record
    assert record["details"]["output_type"] == "CausalLMOutputWithCrossAttentions"
    assert record["details"]["logits_at"] == "output.logits"
    assert record["details"]["output_shape"] == [2, 16, 100]
    described = workload.describe()
    assert described["model"] == "GPT2LMHeadModel" and len(described["config_fingerprint"]) == 12
    assert {k: described[k] for k in ("input_shape", "batch_size", "dtype", "device", "scope")} == {
        "input_shape": [2, 16], "batch_size": 2, "dtype": "fp32", "device": "cpu", "scope": "training_step"}


@needs_transformers
def test_steps_train_and_quality_is_a_probability():
    workload = make_workload(GPT2, {"input_shape": "8,16", "lr": "1e-2"})
    before = workload.quality()
    torch.manual_seed(0)  # dropout draws from the global stream
    losses = [float(workload.step()) for _ in range(10)]
    after = workload.quality()
    assert all(math.isfinite(loss) for loss in losses)
    assert 0 < before <= 1 and 0 < after <= 1
    # The counting task is learnable: ten steps double it (from about 1/vocab; seen 2.0 to 2.3x).
    assert after > 1.5 * before
    # The held-out set is fixed: quality is a function of the weights alone.
    assert workload.quality() == after


@needs_transformers
def test_time_and_memory_evidence_on_a_model_output():
    workload = make_workload(GPT2, SMALL)
    time_record = collect_time_evidence(workload, steps=1, warmup=0)
    memory = collect_memory_evidence(workload)
    assert time_record["workload"] == memory["workload"] == workload.describe()
    assert memory["objects"]["gradients"] == memory["objects"]["parameters"]
    assert memory["objects"]["activation"] > 0


@needs_transformers
def test_user_factory_through_the_helper():
    via_module = make_workload(f"{FIXTURES}:user_make", SMALL)
    assert isinstance(via_module, HFWorkload) and _probe(via_module)["run_valid"] is True
    from tests.workloads_fixtures import hf_models

    # A ready model, a config to build from, and a factory returning (model, config).
    model = hf_models.tiny_gpt2({})
    assert hf_workload(model, SMALL).model is model
    from_config = hf_workload(hf_models.tiny_config({}), SMALL)
    assert type(from_config.model).__name__ == "GPT2LMHeadModel"
    pair = hf_workload(lambda conditions: (hf_models.tiny_gpt2(conditions), hf_models.tiny_config(conditions)), SMALL)
    assert pair.config_fingerprint == from_config.config_fingerprint
    # The factory runs in a seeded private stream: both arms start from the same weights.
    a, b = make_workload(GPT2, SMALL), make_workload(GPT2, SMALL)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    with pytest.raises(TypeError, match="must return a transformers model"):
        hf_workload(lambda conditions: "gpt2", SMALL)


@needs_transformers
def test_config_fingerprint_tells_an_ignored_change_apart():
    honours = [make_workload(GPT2, {**SMALL, "n_layer": n}).describe()["config_fingerprint"] for n in (2, 3)]
    ignores = [make_workload(f"hf:{FIXTURES}:tiny_gpt2_ignoring_layers", {**SMALL, "n_layer": n})
               .describe()["config_fingerprint"] for n in (2, 3)]
    assert honours[0] != honours[1]
    assert ignores[0] == ignores[1] == honours[0]


@needs_transformers
def test_nan_injected_into_gpt2_is_found_where_it_began():
    workload = make_workload(f"hf:{FIXTURES}:nan_gpt2", SMALL)
    record = _probe(workload)
    assert record["run_valid"] is False and record["issues"] == ["numerical"]
    assert record["first_failure"] == "transformer.h.1.mlp.act"
    assert record["reproducible"] is True


@needs_transformers
def test_nan_attempt_fails_and_names_the_module():
    result = run_attempt(f"hf:{FIXTURES}:nan_gpt2", SMALL, warmup=0, steps=1, supervised=False)
    assert result.ok is False and result.failure == "non_finite_loss"
    assert result.validity["first_failure"] == "transformer.h.1.mlp.act"


@needs_transformers
def test_checkpoint_condition_switches_the_models_checkpointing():
    on = make_workload(GPT2, {**SMALL, "checkpoint": "true"})
    off = make_workload(GPT2, {**SMALL, "checkpoint": "false"})
    assert _checkpointing(on.model) is True and _checkpointing(off.model) is False
    # The property the brief names, deprecated (FutureWarning) from transformers 5 on.
    assert on.model.is_gradient_checkpointing is True and off.model.is_gradient_checkpointing is False
    # A model that arrives checkpointed is switched off by checkpoint=false.
    arrived_on = make_workload(f"hf:{FIXTURES}:checkpointed_gpt2", {**SMALL, "checkpoint": "false"})
    assert _checkpointing(arrived_on.model) is False
    # Checkpointing really changes what backward keeps, and the probe still passes.
    assert collect_memory_evidence(on)["objects"]["activation"] < collect_memory_evidence(off)["objects"]["activation"]
    assert _probe(on)["run_valid"] is True


@needs_transformers
def test_string_conditions_are_parsed():
    workload = make_workload(GPT2, {"input_shape": "4x8", "batch_size": "4", "checkpoint": "False", "dtype": "BF16",
                                    "seed": "3", "lr": "3e-4", "device": "CPU", "steps": "2", "warmup": "0"})
    assert (workload.batch_size, workload.seq_len, workload.checkpoint) == (4, 8, False)
    assert (workload.dtype, workload.seed, workload.lr, workload.device) == ("bf16", 3, 3e-4, torch.device("cpu"))
    record = _probe(workload)
    assert record["run_valid"] is True and record["details"]["output_dtype"] == "torch.bfloat16"


@needs_transformers
@pytest.mark.parametrize(("conditions", "message"), [
    ({"checkpoint": "maybe"}, r"checkpoint must be a boolean"),
    ({"input_shape": "2"}, r"input_shape must be 2 positive integers"),
    ({"input_shape": "2,16", "batch_size": 4}, r"batch_size=4 disagrees with input_shape='2,16'"),
    ({"input_shape": "2,65"}, r"sequence length 65 exceeds the model's 64 positions"),
    ({"dtype": "fp16"}, r"dtype must be one of \['bf16', 'fp32'\], got 'fp16'"),
    ({"device": "tpu"}, r"device must be one of"),
    ({"lr": "0"}, r"lr must be a finite number > 0"),
    ({"task": "translation"}, r"task must be one of \['causal_lm', 'sequence_classification'\]"),
])
def test_bad_conditions_name_the_key(conditions, message):
    with pytest.raises(ValueError, match=message):
        make_workload(GPT2, conditions)


@needs_transformers
def test_sequence_classification_model():
    workload = make_workload(f"hf:{FIXTURES}:tiny_classifier", {**SMALL, "checkpoint": "true"})
    assert workload.task == "sequence_classification" and workload.num_labels == 3
    assert workload.model.config.pad_token_id == 99
    batch = workload.next_batch()
    assert batch["labels"].shape == (2,) and int(batch["labels"].max()) < 3
    assert int(batch["input_ids"].max()) < 99  # the pad id is never drawn
    record = _probe(workload)
    assert record["run_valid"] is True, record
    assert record["details"]["output_shape"] == [2, 3]
    assert record["details"]["output_type"] == "SequenceClassifierOutputWithPast"
    float(workload.step())
    assert 0 <= workload.quality() <= 1
    assert workload.describe()["task"] == "sequence_classification"


@needs_transformers
def test_in_process_attempt_succeeds():
    result = run_attempt(GPT2, {**SMALL, "checkpoint": "false"}, warmup=1, steps=3, supervised=False)
    assert result.ok is True, (result.failure, result.failure_detail)
    assert math.isfinite(result.latency_ms) and result.latency_ms > 0
    assert math.isfinite(result.quality) and 0 < result.quality <= 1
    assert result.validity["run_valid"] is True
    assert result.throughput_tok_s > 0 and result.peak_mem_mib > 0
    # The attempt's memory record carries the model class and config fingerprint.
    assert result.memory["workload"]["model"] == "GPT2LMHeadModel"
    assert result.memory["workload"]["config_fingerprint"] == make_workload(GPT2, SMALL).config_fingerprint


def test_hf_name_without_transformers_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    with pytest.raises(ValueError, match=r"needs transformers: pip install 'mlflow-perfgate\[hf\]'"):
        resolve_workload(GPT2)


def test_hf_name_must_name_a_function():
    if transformers is None:
        pytest.skip("transformers is not installed (pip install 'mlflow-perfgate[hf]')")
    with pytest.raises(ValueError, match="must be 'hf:module:function'"):
        resolve_workload(f"hf:{FIXTURES}")
    with pytest.raises(ValueError, match="has no callable 'nope'"):
        resolve_workload(f"hf:{FIXTURES}:nope")


def test_importing_the_workloads_layer_does_not_import_transformers():
    code = "import sys, mlflow_perfgate.workloads; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# native bf16 and the diagnosis's proposal


def test_native_bf16_on_this_machine_answers_with_a_reason():
    for device in ("cpu", "cuda", torch.device("cpu")):
        native, reason = native_bf16(device)
        assert isinstance(native, bool) and isinstance(reason, str) and reason


@pytest.mark.parametrize(("flags", "native"), [
    ("fpu sse avx2 avx512f avx512bw", False),
    ("fpu avx512f avx512_bf16", True),
    ("fpu amx_bf16 amx_tile", True),
])
def test_native_bf16_reads_the_cpu_flags(tmp_path, flags, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    answer, reason = native_bf16("cpu", cpuinfo=cpuinfo)
    assert answer is native
    assert ("is native" in reason) is native
    assert native_bf16("cpu", cpuinfo=tmp_path / "missing") == (
        False, f"cannot read CPU flags from {tmp_path / 'missing'}: bf16 not known to be native")
    with pytest.raises(ValueError, match="device must be a device"):
        native_bf16("gpu!")


@pytest.mark.parametrize("native", [True, False])
def test_compute_hotspot_proposes_bf16_only_where_native(monkeypatch, native):
    monkeypatch.setattr(workloads, "native_bf16", lambda device: (native, f"{device} says {native}"))
    synthesis = {"primary_signal": "time", "hotspot": "forward"}
    base = {"checkpoint": False, "num_workers": 0, "dtype": "fp32", "device": "cpu"}
    change, reason = harness.candidate_change_and_reason(synthesis, base)
    assert change == ({"dtype": "bf16"} if native else None)
    assert f"cpu says {native}" in reason
    assert harness.candidate_change_for(synthesis, base) == change
    # The other signals are as they were.
    assert harness.candidate_change_for({"primary_signal": "memory"}, base) == {"checkpoint": True}
    assert harness.candidate_change_for({"primary_signal": "time", "hotspot": "dataloader"}, base) == {"num_workers": 2}
    assert harness.candidate_change_for({"primary_signal": "none"}, base) is None
    assert harness.candidate_change_and_reason(synthesis, {**base, "dtype": "bf16"}) == (
        None, "forward hotspot, and dtype is already bf16")
