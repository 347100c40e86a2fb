"""Model FLOPs utilisation, counted honestly for what a run trains: a token costs about 2N FLOPs forward and 4N
backward when every weight gets its gradient (full fine-tuning: 6N), but only the activations' gradients, about
2N, when the base is frozen (LoRA and QLoRA: 4N; the adapter's own FLOPs are a rounding error), N every base
parameter. The utilisation is those FLOPs a second over the device's dense bf16 peak, from its datasheet.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense bf16 tensor FLOP/s, from each card's datasheet (no sparsity), by a name `torch.cuda.get_device_name()` holds;
# the first that matches wins, so the more specific names come first
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("GH200", 989e12), ("B200", 2250e12),
    ("A100", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12), ("A10G", 70e12), ("A10", 125e12),
    ("RTX 4090", 165e12), ("RTX 6000 Ada", 364e12),
)
BASIS = {"lora": 4, "qlora": 4, "full": 6}  # FLOPs a token, in N, by what the run trains


@dataclass(frozen=True)
class Utilisation:
    value: float  # the share of the peak used, 0 to 1
    basis: str  # "4N" or "6N"
    peak_tflops: float  # the device's dense bf16 peak it is read against
    device: str

    def to_json(self) -> dict[str, float | str]:
        return {"value": self.value, "basis": self.basis, "peakTflops": self.peak_tflops, "device": self.device}


def peak_flops(device: str) -> float | None:
    """The datasheet's dense bf16 FLOP/s of a device by its name; None for one not in the table (a cpu)."""
    return next((peak for name, peak in PEAK_BF16 if name in device), None)


def utilisation(parameters: int, tokens_per_second: float, device: str, adapter: str = "lora"
                ) -> Utilisation | None:
    """MFU of a run training `parameters` base weights at `tokens_per_second` per device on `device`; None where
    the device's peak is unknown or nothing was measured."""
    peak = peak_flops(device)
    if peak is None or parameters <= 0 or tokens_per_second <= 0:
        return None
    factor = BASIS[adapter]
    return Utilisation(round(factor * parameters * tokens_per_second / peak, 4), f"{factor}N", peak / 1e12, device)
