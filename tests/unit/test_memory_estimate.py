"""The peak device memory a run is predicted to need (`training.admission.memory`): the estimate against the
peaks measured on one H200, its parts, and its calibration by a catalog envelope that records its conditions."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import load_catalog
from optimize.catalog.schema import Envelope
from optimize.schemas.plans import Hyperparams, RlHyperparams
from optimize.training.admission.memory import (
    calibration_for,
    estimate,
    lora_parameters,
    resolve_checkpointing,
    shape_of,
    with_generation,
    workload_of,
)
from optimize.training.methods import method_for

LLAMA = "meta-llama/llama-3.2-1b-instruct"
KERNELS = {"rms_norm": True, "swiglu": True, "rope": True}
# Measured on one H200, a random-init model of Llama-3.2-1B's shape, LoRA rank 16 on all linear layers, 16 rows x
# 1024 tokens an update, bf16 (torch.cuda.max_memory_allocated, bare TRL; its Liger variant ran the layer kernels,
# TRL's fused LM head computing the loss)
MEASURED_H200 = [(True, {}, 7.1), (False, {}, 38.2), (False, KERNELS, 32.3)]


def config(batch=16, length=1024, method="sft", precision="bf16", liger=None, rank=16, generations=None,
           adapter="lora"):
    """A run's workload as admission makes it (`workload_of`) from its method and the settings it trains with."""
    section = {"training": {"batchSize": batch}, "lora": {"rank": rank, "targets": "all-linear"}}
    trained_with = Hyperparams.model_validate(section) if generations is None else \
        RlHyperparams.model_validate({**section, "generations": generations})
    return workload_of(method_for(method), trained_with, length, precision, liger or {}, adapter)


@pytest.mark.parametrize("checkpointing, liger, measured", MEASURED_H200)
def test_the_estimate_is_within_a_tenth_of_the_peaks_measured_on_an_h200(checkpointing, liger, measured):
    shape = shape_of(load_catalog().find(LLAMA))
    predicted = estimate(shape, config(liger=liger), checkpointing)["peakGiB"]
    assert abs(predicted - measured) / measured < 0.10


def test_the_parts_follow_the_shape_the_batch_and_the_precision():
    shape = shape_of(load_catalog().find(LLAMA))
    assert shape.intermediate == 8192 and shape.kv == 512
    # rank 16 on q, k, v, o, gate, up, down of 16 layers
    assert lora_parameters(shape, 16, "all-linear") == 16 * 16 * (4096 + 2560 * 2 + 4096 + 10240 * 3)
    assert lora_parameters(shape, 16, ["q_proj", "v_proj"]) == 16 * 16 * (4096 + 2560)
    one = estimate(shape, config(batch=8), False)
    two = estimate(shape, config(batch=16), False)
    assert two["tokensPerPass"] == 2 * one["tokensPerPass"] == 16384
    assert two["activationsGiB"] == pytest.approx(2 * one["activationsGiB"], abs=0.02)
    assert two["weightsGiB"] == one["weightsGiB"] == pytest.approx(1235814400 * 2 / 2**30, abs=0.01)
    fp32 = estimate(shape, config(batch=8, precision="fp32"), False)
    assert fp32["weightsGiB"] == pytest.approx(2 * one["weightsGiB"], abs=0.01)
    assert fp32["activationsGiB"] == pytest.approx(2 * one["activationsGiB"], abs=0.02)
    pairs = estimate(shape, config(batch=8, method="dpo"), False)  # a chosen and a rejected answer per row
    assert pairs["tokensPerPass"] == 2 * one["tokensPerPass"]
    rollouts = config(batch=2, method="grpo", generations=8)  # 2 prompts, each rolled out 8 times
    assert estimate(shape, rollouts, False)["tokensPerPass"] == 16 * 1024
    assert estimate(shape, config(), True)["peakGiB"] < estimate(shape, config(), False)["peakGiB"]


def test_a_shape_the_catalog_does_not_give_is_not_estimated_and_an_untold_intermediate_size_is_derived():
    catalog = load_catalog()
    assert shape_of(catalog.find("google/gemma-4-e4b-it")) is None
    tiny = shape_of(catalog.find("optimize/tiny-llama-3.2"))  # no intermediateSize: from the parameter count
    assert tiny.intermediate == 128  # the stand-in's config (the llama family's tiny size)
    assert resolve_checkpointing(None, config(), 140, None)[0] is True


@pytest.mark.parametrize("device_gib, expected", [(140, False), (80, False), (40, True), (None, True)])
def test_checkpointing_is_on_only_where_the_run_would_not_fit_without_it(device_gib, expected):
    shape = shape_of(load_catalog().find(LLAMA))
    on, reason = resolve_checkpointing(shape, config(), device_gib, None)
    assert on is expected
    assert ("38.18 GiB" in reason) if device_gib else ("does not say its memory" in reason)


def test_an_envelope_that_records_its_conditions_calibrates_the_estimate_to_its_own_measurement():
    entry = load_catalog().find(LLAMA)
    shape = shape_of(entry)
    envelope = Envelope.model_validate({
        "method": "sft", "engine": "trl", "precision": "bf16", "deviceProfile": "h200", "gpus": 1,
        "longestSequence": 2048, "gpuMemoryPerDeviceGiB": 30.0, "hostMemoryGiB": 20,
        "measurement": {"by": "a test", "at": "2026-12-05", "hardware": "NVIDIA H200"},
        "conditions": {"batchSize": 4, "gradientCheckpointing": False, "loraRank": 16, "liger": {}}})
    assert calibration_for(entry, shape, config()) is None  # the catalog's entry records no GPU peak
    calibrated_entry = entry.model_copy(update={"envelopes": [envelope]})
    calibration = calibration_for(calibrated_entry, shape, config())
    assert "a test" in calibration.basis and calibration.factor != 1
    at_its_conditions = estimate(shape, config(batch=4, length=2048), False, calibration)
    assert at_its_conditions["peakGiB"] == pytest.approx(30.0, abs=0.02)
    assert calibration_for(calibrated_entry, shape, config(method="dpo")) is None  # another method's envelope


def test_a_full_fine_tune_keeps_every_weight_s_gradient_and_moments_and_qlora_a_4_bit_base():
    shape = shape_of(load_catalog().find(LLAMA))
    lora, full, qlora = (estimate(shape, config(adapter=adapter), True) for adapter in ("lora", "full", "qlora"))
    # every parameter's gradient and Adam's two moments at bf16 (2 bytes each), beside the weights themselves
    assert full["adapterStateGiB"] == pytest.approx(shape.parameters * 3 * 2 / 2**30, abs=0.001)
    assert full["weightsGiB"] == lora["weightsGiB"] and full["activationsGiB"] == lora["activationsGiB"]
    # the decoder's linear weights at 4 bits, the embeddings at bf16; the adapter's state as under lora
    embeddings = shape.vocab * shape.hidden
    assert qlora["weightsGiB"] == pytest.approx(((shape.parameters - embeddings) * 0.5625 + embeddings * 2) / 2**30,
                                                abs=0.01)
    assert qlora["adapterStateGiB"] == lora["adapterStateGiB"]
    assert qlora["peakGiB"] < lora["peakGiB"] < full["peakGiB"]


def test_an_envelope_covers_and_calibrates_only_runs_that_train_what_it_trained():
    from optimize.training.admission.envelopes import check_envelopes, covering

    entry = load_catalog().find(LLAMA)
    envelope = Envelope.model_validate({
        "method": "sft", "adapter": "full", "engine": "trl", "precision": "bf16", "deviceProfile": "h200", "gpus": 1,
        "longestSequence": 2048, "gpuMemoryPerDeviceGiB": 60.0, "hostMemoryGiB": 20,
        "measurement": {"by": "a test", "at": "2026-12-07", "hardware": "NVIDIA H200"},
        "conditions": {"batchSize": 4, "gradientCheckpointing": True, "loraRank": 16, "liger": {}}})
    measured = entry.model_copy(update={"envelopes": [envelope]})
    assert covering(measured, "sft", "bf16", "h200", 1, False, 1024, "full") is envelope
    assert covering(measured, "sft", "bf16", "h200", 1, False, 1024) is None
    warned = check_envelopes(measured, "sft", "bf16", "h200", 1, False, 1024, False, "qlora")
    assert "covers sft (qlora) at bf16" in warned[0] and "measured: sft (full) bf16 on h200 x1" in warned[0]
    assert calibration_for(measured, shape_of(entry), config(adapter="full")) is not None
    assert calibration_for(measured, shape_of(entry), config()) is None


def test_a_colocated_vllm_s_share_of_the_device_counts_while_it_generates(monkeypatch):
    """A reinforcement run whose rollouts vLLM generates beside the policy holds the policy's weights and adapter
    state and vLLM's share of the device while it generates: the peak is the larger of that and the update."""
    import importlib.util

    from optimize.training.methods.reinforcement import VLLM_MEMORY_SHARE

    shape = shape_of(load_catalog().find(LLAMA))
    transformers = config(batch=2, method="grpo", generations=8)
    assert transformers.generation_share == 0.0  # the cpu's default: Transformers generates, with the policy
    assert with_generation(estimate(shape, transformers, True), transformers, 141.0) == \
        estimate(shape, transformers, True)
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else found(name, *a))
    trained_with = RlHyperparams.model_validate({"training": {"batchSize": 2}, "generations": 8})
    vllm = workload_of(method_for("grpo"), trained_with, 1024, "bf16", {}, on_cpu=False)
    assert vllm.generation_share == VLLM_MEMORY_SHARE
    update = estimate(shape, vllm, True)
    predicted = with_generation(update, vllm, 141.0)
    generating = update["weightsGiB"] + update["adapterStateGiB"] + VLLM_MEMORY_SHARE * 141.0
    assert predicted["generationGiB"] == pytest.approx(generating, abs=0.01)
    assert predicted["peakGiB"] == pytest.approx(max(update["peakGiB"], generating), abs=0.01)
    assert predicted["peakGiB"] > update["peakGiB"]  # on a 141 GiB device its 30% outweighs one update of a 1B model
    assert with_generation(update, vllm, None) == update  # a profile that does not say its memory
