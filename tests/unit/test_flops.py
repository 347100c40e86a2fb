"""MFU counted for what a run trains: 4N FLOPs a token for LoRA (the frozen base gets no weight gradients), 6N for
full fine-tuning, over the card's dense bf16 peak from its datasheet; none where the card is unknown (the cpu)."""

from __future__ import annotations

import pytest

from optimize.core.flops import peak_flops, utilisation


def test_a_lora_token_counts_4n_and_a_full_one_6n():
    lora = utilisation(1_240_000_000, 45_400, "NVIDIA H200")
    assert (lora.value, lora.basis, lora.peak_tflops) == (round(4 * 1.24e9 * 45_400 / 989e12, 4), "4N", 989)
    full = utilisation(1_240_000_000, 45_400, "NVIDIA H200", adapter="full")
    assert full.basis == "6N" and full.value == pytest.approx(lora.value * 1.5, rel=1e-3)
    assert lora.to_json() == {"value": lora.value, "basis": "4N", "peakTflops": 989.0, "device": "NVIDIA H200"}


@pytest.mark.parametrize(("device", "tflops"), [("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756),
                                                ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA L40S", 362),
                                                ("NVIDIA L4", 121), ("NVIDIA GH200 480GB", 989)])
def test_a_card_is_read_against_its_own_datasheet_peak(device, tflops):
    assert peak_flops(device) == tflops * 1e12


def test_nothing_is_claimed_without_a_known_peak_or_a_measured_rate():
    assert utilisation(1_000_000, 1000.0, "cpu") is None
    assert utilisation(1_000_000, 1000.0, "Some Future Accelerator") is None
    assert utilisation(1_000_000, 0.0, "NVIDIA H200") is None


def test_a_dry_run_s_expected_mfu_reads_its_estimate_against_the_profile_s_card():
    from optimize.catalog.catalog import load_catalog
    from optimize.training.server.prediction import expected_mfu

    entry = load_catalog().find("meta-llama/llama-3.2-1b-instruct")
    estimate = {"seconds": 100.0, "tokens": 4_000_000, "steps": 50}
    found = expected_mfu(estimate, entry, "NVIDIA H200", devices=2)  # 20,000 tokens/s a device
    assert found == utilisation(entry.parameters.total, 20_000, "NVIDIA H200").to_json() and found["basis"] == "4N"
    assert expected_mfu(estimate, entry, None, 1) is None  # the cpu
    assert expected_mfu({"seconds": None, "tokens": None}, entry, "NVIDIA H200", 1) is None  # no analysis yet
