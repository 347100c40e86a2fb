"""Peak device memory of a training run, estimated from the model's shape before any device is claimed.

    peak = weights + adapter state + tokens of one micro-batch x (saved activations + logits)

- weights: every base parameter at the run's precision (bf16/fp16 2 bytes, fp32 4); under qlora the decoder's
  linear weights at 4 bits with their quantization constants (`QLORA_BYTES`), the embeddings at the precision;
- adapter state: each LoRA parameter in fp32 with its gradient and Adam's two moments (16 bytes); a full
  fine-tune's every parameter's gradient and Adam's two moments at the run's precision (the weights train at the
  precision they are loaded in);
- saved activations, per token: each decoder layer keeps `LAYER_BYTES` per element of its linear layers' inputs
  and outputs (6h + 2kv + 3I elements: the attention projections' and the MLP's), at bf16; with gradient
  checkpointing only each layer's input (h elements) is kept and one layer is recomputed at a time;
- logits, per token: `LOGIT_BYTES` per vocabulary entry at bf16 — TRL's supervised trainer computes the loss with
  its own fused LM head, in chunks, so the full logits are never held (hence less than the 2 bytes a bf16 logit
  takes); Liger's rms_norm and swiglu/geglu each cut what a layer keeps by `LIGER_LAYER_CUT` (rope's own saving
  is not told apart). fp32 doubles the activations, the logits and the layer inputs.

The coefficients were fitted to the peaks measured on one H200 for a model of Llama-3.2-1B's shape, LoRA rank 16
on all linear layers, 16 rows x 1024 tokens in one micro-batch, bf16 (the peaks: 7.1 GiB with
checkpointing, 38.2 GiB without, 32.3 GiB without and with Liger's rms_norm, swiglu and rope; allocated, not
reserved). A catalog
envelope that records its peak and the conditions it was measured under (`batchSize`, `gradientCheckpointing`,
`loraRank` and `longestSequence`) recalibrates the per-token part for its model: the estimate is scaled so that
it gives that envelope's own measurement.

A micro-batch holds `batchSize` sequences of `maxSeqLength` tokens (the longest a batch is padded to); a dpo pass
holds a chosen and a rejected answer per row; a reinforcement update trains on `batchSize x generations`
completions of at most `maxSeqLength` tokens. The estimate is what gradient checkpointing is resolved from.

On several devices a run trains data-parallel (`ddp`: a whole copy of the model on each device) unless a whole copy
would not fit one device, even with gradient checkpointing: then its base weights, its adapter and the adapter's
optimizer state are sharded across the devices (`fsdp`, FSDP2 through accelerate), each device holding its share
of them plus the full weights of the layers being gathered (the one computing and the one prefetched); the
activations are each device's own micro-batch's, as under ddp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

GIB = 2**30
LAYER_BYTES = 3.70  # bytes kept per linear input/output element of a layer, bf16 (fitted)
LOGIT_BYTES = 0.761  # bytes kept per vocabulary entry per token at the peak, bf16 (fitted)
LIGER_LAYER_CUT = 0.086  # the share of a layer's saved activations each of rms_norm and swiglu/geglu saves
ADAPTER_STATE_BYTES = 16  # fp32 weight, gradient, Adam's first and second moment
FULL_STATE_WIDTHS = 3  # a full fine-tune's gradient and Adam's two moments, each at the run's precision
QLORA_BYTES = 0.5625  # a 4-bit weight with its share of the blockwise constants (bitsandbytes nf4, double quant)
HEADROOM = 0.90  # the share of a device's memory a run may plan to use (the allocator's pool, the CUDA context)
BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    """What the estimate reads of a model: its decoder's sizes and parameter count."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    intermediate: int
    parameters: int

    @property
    def kv(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def linear_sizes(self) -> dict[str, tuple[int, int]]:
        """Each linear layer's (in, out) features."""
        h, kv, inner = self.hidden, self.kv, self.intermediate
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, inner), "up_proj": (h, inner), "down_proj": (inner, h)}


def shape_of(entry) -> Shape | None:
    """The catalog entry's shape, or None where the catalog does not give it. An entry without `intermediateSize`
    has it derived from the parameter count (tied embeddings, the common case at these sizes)."""
    a = entry.architecture
    needed = ("hiddenSize", "layers", "heads", "kvHeads", "vocab")
    if any(not isinstance(a.get(key), int) for key in needed) or not entry.parameters.total:
        return None
    h, layers, heads, kv_heads, vocab = (int(a[key]) for key in needed)
    kv = kv_heads * (h // heads)
    inner = a.get("intermediateSize")
    if not isinstance(inner, int):
        attention = 2 * h * h + 2 * h * kv + 2 * h  # projections and the two norms
        inner = round((entry.parameters.total - vocab * h - layers * attention) / (3 * h * layers))
        if inner <= 0:
            return None
    return Shape(h, layers, heads, kv_heads, vocab, inner, entry.parameters.total)


def lora_parameters(shape: Shape, rank: int, targets: Any) -> int:
    """The adapter's parameter count: rank x (in + out) for each targeted linear layer of each layer."""
    names = LINEAR if targets in ("all-linear", None) else [t for t in targets if t in LINEAR] \
        if isinstance(targets, list) else [t for t in LINEAR if t in str(targets)]
    sizes = shape.linear_sizes()
    return shape.layers * sum(rank * (sizes[n][0] + sizes[n][1]) for n in names)


@dataclass(frozen=True)
class Workload:
    """What the estimate reads of a run: its method (an envelope calibrates its own method's runs), one
    micro-batch's rows and the sequences each forwards, their length, the precision, the adapter and the kernels."""

    method: str
    batch_size: int  # rows (prompts for a reinforcement run) per device per pass
    sequences_per_row: int  # 2 for a preference pair, `generations` for a prompt's rollouts
    sequence_length: int  # maxSeqLength: the longest a batch is padded to
    precision: str
    lora_rank: int
    lora_targets: Any
    liger: dict[str, bool]
    adapter: str = "lora"  # what trains: lora, full or qlora
    generation_share: float = 0.0  # of the device, held by an engine generating beside the model (colocated vLLM)

    @property
    def sequences_per_pass(self) -> int:
        return self.batch_size * self.sequences_per_row


def workload_of(method, trained_with, sequence_length: int, precision: str, liger: dict[str, bool],
                adapter: str = "lora", on_cpu: bool = True) -> Workload:
    """A run's workload: `method` its recipe (`training.methods`), `trained_with` the adapter, optimizer and loop it
    trains with (`hyperparams`, or `rlHyperparams` for a reinforcement run), `adapter` what trains."""
    return Workload(method.name, trained_with.training.batch_size, method.sequences_per_row(trained_with),
                    sequence_length, precision, trained_with.lora.rank, trained_with.lora.targets, dict(liger),
                    adapter, method.generation_share(trained_with, on_cpu))


def with_generation(predicted: dict[str, Any], workload: Workload, device_gib: float | None) -> dict[str, Any]:
    """The prediction with the generating phase of a run whose rollouts an engine beside the model generates: the
    model's weights and adapter state stay while the engine holds its share of the device (its activations are
    gone by then), so the peak is the larger of the two phases."""
    if not workload.generation_share or not device_gib:
        return predicted
    generating = predicted["weightsGiB"] + predicted["adapterStateGiB"] + workload.generation_share * device_gib
    return {**predicted, "generationGiB": round(generating, 2),
            "peakGiB": round(max(predicted["peakGiB"], generating), 2)}


@dataclass(frozen=True)
class Calibration:
    factor: float  # measured / estimated per-token part at the envelope's own conditions
    basis: str


def estimate(shape: Shape, workload: Workload, checkpointing: bool,
             calibration: Calibration | None = None, shards: int = 1) -> dict[str, Any]:
    """The predicted peak (GiB per device) and its parts, for the run's workload with checkpointing on or off,
    with the weights and the adapter state sharded over `shards` devices (fsdp; 1: a whole copy on each)."""
    precision = workload.precision
    width = BYTES.get(precision, 2) / 2  # activations are fitted at bf16
    liger = workload.liger
    tokens = workload.sequences_per_pass * workload.sequence_length
    embeddings = shape.vocab * shape.hidden
    weights = (shape.parameters * BYTES.get(precision, 2) if workload.adapter != "qlora" else
               (shape.parameters - embeddings) * QLORA_BYTES + embeddings * BYTES.get(precision, 2)) / shards
    adapter = (shape.parameters * FULL_STATE_WIDTHS * BYTES.get(precision, 2) if workload.adapter == "full" else
               lora_parameters(shape, workload.lora_rank, workload.lora_targets) * ADAPTER_STATE_BYTES) / shards
    if shards > 1:  # a sharded layer's full weights while it computes, and the next one's, gathered ahead
        weights += 2 * (shape.parameters - embeddings) / shape.layers * BYTES.get(precision, 2)
    layer = LAYER_BYTES * width * (6 * shape.hidden + 2 * shape.kv + 3 * shape.intermediate)
    layer *= 1 - LIGER_LAYER_CUT * (bool(liger.get("rms_norm")) + bool(liger.get("swiglu") or liger.get("geglu")))
    logits = LOGIT_BYTES * width * shape.vocab
    kept = (shape.layers * 2 * width * shape.hidden + layer) if checkpointing else shape.layers * layer
    per_token = (kept + logits) * (calibration.factor if calibration else 1.0)
    activations = tokens * per_token
    peak = weights + adapter + activations
    return {"peakGiB": round(peak / GIB, 2), "weightsGiB": round(weights / GIB, 2),
            "adapterStateGiB": round(adapter / GIB, 3), "activationsGiB": round(activations / GIB, 2),
            "tokensPerPass": tokens, "gradientCheckpointing": checkpointing, "shards": shards}


def calibration_for(entry, shape: Shape, workload: Workload) -> Calibration | None:
    """The scale that makes the estimate give a measured envelope's own peak: the first envelope of the entry for
    the run's method, adapter and precision that records its peak and the conditions it was measured under."""
    for envelope in entry.envelopes:
        conditions = envelope.conditions
        if (envelope.gpu_memory_per_device_gib is None or conditions is None or envelope.method != workload.method
                or envelope.adapter != workload.adapter or envelope.precision.lower() != workload.precision):
            continue
        measured = replace(workload, batch_size=conditions.batch_size, lora_rank=conditions.lora_rank,
                           lora_targets="all-linear", sequence_length=envelope.longest_sequence,
                           liger=conditions.liger, precision=envelope.precision.lower())
        plain = estimate(shape, measured, conditions.gradient_checkpointing)
        static = plain["weightsGiB"] + plain["adapterStateGiB"]
        if plain["activationsGiB"] <= 0 or envelope.gpu_memory_per_device_gib <= static:
            continue
        factor = (envelope.gpu_memory_per_device_gib - static) / plain["activationsGiB"]
        return Calibration(round(factor, 4), f"calibrated by the envelope measured by {envelope.measurement.by} on "
                                             f"{envelope.measurement.hardware} ({envelope.measurement.at})")
    return None


def resolve_checkpointing(shape: Shape | None, workload: Workload, device_gib: float | None,
                          calibration: Calibration | None, shards: int = 1) -> tuple[bool, str]:
    """Gradient checkpointing for a GPU run that leaves it out: on only where the run would not fit without it.
    Returns the choice and why."""
    if shape is None:
        return True, "the catalog gives no shape for this model, so its memory is not estimated; on to be safe"
    if device_gib is None:
        return True, "the device profile does not say its memory; on to be safe"
    without = estimate(shape, workload, False, calibration, shards)["peakGiB"]
    budget = round(device_gib * HEADROOM, 1)
    if without > budget:
        return True, (f"without it the run would peak at about {without:g} GiB, past {budget:g} GiB "
                      f"({HEADROOM:.0%} of the device's {device_gib:g} GiB)")
    return False, (f"the run peaks at about {without:g} GiB without it, within {budget:g} GiB "
                   f"({HEADROOM:.0%} of the device's {device_gib:g} GiB)")


def resolve_sharding(shape: Shape | None, workload: Workload, checkpointing: bool, device_gib: float | None,
                     calibration: Calibration | None, devices: int) -> tuple[str, str]:
    """How a GPU run on several devices that leaves `execution.sharding` out splits its work: ddp where a whole copy
    of the model fits one device with gradient checkpointing as the plan has it (on where it leaves it out: the
    smallest the run can be), fsdp where it does not. Returns the choice and why."""
    if shape is None:
        return "ddp", "the catalog gives no shape for this model, so whether a whole copy fits one device is not known"
    if device_gib is None:
        return "ddp", "the device profile does not say its memory, so whether a whole copy fits one device is not known"
    whole = estimate(shape, workload, checkpointing, calibration)["peakGiB"]
    budget = round(device_gib * HEADROOM, 1)
    if whole <= budget:
        return "ddp", (f"a whole copy of the model on each device peaks at about {whole:g} GiB, within {budget:g} GiB "
                       f"({HEADROOM:.0%} of the device's {device_gib:g} GiB)")
    sharded = estimate(shape, workload, checkpointing, calibration, shards=devices)["peakGiB"]
    still = (f", still past {budget:g} GiB: what a device keeps of its micro-batch is not sharded; a smaller batchSize "
             "or maxSeqLength lowers it") if sharded > budget else ""
    return "fsdp", (f"a whole copy of the model on each device would peak at about {whole:g} GiB, past {budget:g} GiB "
                    f"({HEADROOM:.0%} of the device's {device_gib:g} GiB); sharded across the {devices} devices, "
                    f"about {sharded:g} GiB{still}")
