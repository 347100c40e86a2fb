"""Supervised LoRA throughput on one GPU: the platform's default run against bare TRL variants.

A random-init model of a catalog entry's architecture (`--model`, default meta-llama/llama-3.2-1b-instruct:
hidden 2048, 16 layers, 32/8 heads, vocabulary 128256, intermediate 8192, tied embeddings) is built offline in a
child process (the entry family's stand-in tokenizer and chat template, `optimize.catalog.standins`; weights
from `from_config`, bf16, saved as safetensors), then trained, all in one process run:

(a) through the platform: a real server on the embedded defaults in a temporary data dir (imports allowed from
    the work dir: OPTIMIZE_IMPORT_ROOTS); the model selected with `akka training base-models select ENTRY --from
    DIR`, chat rows registered and analyzed and the project created with the CLI, then a run plan POSTed that
    states only the workload — LoRA rank 16 (alpha 32) on all linear layers, 16 rows x 1024 tokens per update,
    rows filling 88-97% of maxSeqLength under the model's own template, `--steps` updates,
    execution.deviceProfile the GPU profile Optimize detects (e.g. h200) — and leaves precision, gradient
    checkpointing, attention, packing and Liger's kernels to the platform (its default run).
(b) bare TRL, each variant in a subprocess of its own (this file with `--bare SPEC`, so its peak memory counters
    are its own): the rows rendered and masked with `optimize.chat.render.ChatRenderer` as the run worker does
    (Parquet, memory-mapped), SFTTrainer with a PEFT LoRA adapter under the engine's SFTConfig, one save at the
    end with optimizer state, the same updates:
      same     the platform run's resolved settings (`GET /v1/training/runs/{id}?settings=true`): precision,
               attention, gradient checkpointing, Liger's kernels (TRL 1.16 refuses fused_linear_cross_entropy
               in liger_kernel_config; its own fused LM head stands in, so that one is passed false), packing
               (where the run packed, the rows packed as the `packed` variant has them), LoRA, optimizer and loop
      nogc     gradient checkpointing off, no Liger, no packing
      liger    gradient checkpointing off, use_liger_kernel (Liger's layer kernels); skipped without
               liger_kernel or on the cpu
      padfree  gradient checkpointing off, padding_free=True, max_length=None (rows flattened into one
               sequence; with sdpa they attend across row boundaries: a throughput figure only)
      packed   the rendered rows packed by TRL's own `pack_dataset` (strategy bfd, best fit decreasing, bins of
               maxSeqLength tokens, each row whole), SFTConfig packing=True, packing_strategy="bfd",
               padding_free=True (TRL's collator restarts the positions at each row, from the bins' seq_lengths,
               so each row attends only to itself), gradient checkpointing off, the platform run's attention,
               Liger's layer kernels where the `liger` variant has them (a GPU with liger_kernel)

With `--packing` the rows vary in length (15-95% of maxSeqLength, uniformly, so several share a bin) and are as
many as fill `--steps` updates of the batch in bins; the platform's plan states config.packing: true and, on a GPU,
config.model.attentionImplementation: flex_attention (on the cpu attention is left to the platform: sdpa); the
`packed` variant joins the default list. An update then takes the batch in bins on both sides (batchSize counts
bins in a packed run), over the same number of updates. The output adds how full the bins are: the platform's
(`results.dataFit.packing`: rows, bins, efficiency, the share of the bins' tokens that are the rows' own) and the
bare packed dataset's.

Figures, per run:
  tokens/s         trained tokens (TRL's num_tokens: every non-pad token) over the engine clock, from
                   on_train_begin to the end of train() (the final save included): the platform's
                   cost.tokensPerSecondPerDevice, the bare script's own clock measured the same way
  steady tok/s     updates after the first `--skip` (warm-up left out). Bare: a callback's clock at each
                   update's end (after a device synchronize). Platform: the slope of the server's arrival time
                   of each train metric (`GET /v1/training/runs/{id}/metrics`, `at`) against its cumulative
                   `tokens`, least squares: the worker sends metrics in batches at most a second apart, so
                   this figure is a few percent noisier than the bare one
  MFU 4N           4 x N x steady tokens/s / 989 TFLOP/s (H200 dense bf16, datasheet), N every base parameter: a
                   LoRA token costs about 4N FLOPs (the frozen base gets no weight gradients; 6N is full
                   fine-tuning's), as the platform reports it (`core.flops`);
                   "vs matmul": the same over a bf16 8192x8192 matmul rate measured first in this run
  peak GiB         the training peak, allocated (reserved beside it): the platform's runs.memory.measuredGiB
                   (after its start checks), the bare script's from just before train()
  predicted        the platform's admission estimate (runs.memory.predicted.peakGiB) and measured/predicted

Targets on one H200, printed as ratios against them: the platform's default run at least 42,000 tokens/s,
MFU(4N) at least 0.27 (the earlier 0.40 on the 6N count, the same work counted honestly), platform/best bare
tokens/s at least 0.95 (the best of the variants that ran, the `packed` one included), the predicted peak within
10% of the measured; with `--packing`, also at least 60,000 tokens/s for the packed run at 1024 tokens.

On a machine without CUDA (or with `--cpu`) it rehearses the same steps on the cpu with a tiny shape of the
entry's family (2 layers, hidden 128; 8 rows x 512 tokens, 24 updates; fp32, the platform's cpu profile; a
catalog copy adds the shape as an entry, since a selection must match its entry's architecture): the same
table, with MFU and memory shown as "—". On the cpu the platform packs by default (every attention implementation
reads packed rows there), so its default run and the `same` variant pack even without `--packing`; rows that fill
88-97% of maxSeqLength take a bin each.

    .venv/bin/python benchmarks/gpu_sft.py [--model meta-llama/llama-3.2-1b-instruct] [--steps 40] [--skip 5]
        [--packing] [--variants same,nogc,liger,padfree,packed] [--liger default|off] [--gc default|on|off]
        [--json PATH]
    .venv/bin/python benchmarks/gpu_sft.py --cpu          # the rehearsal, a few minutes on 2 cores
    .venv/bin/python benchmarks/gpu_sft.py --cpu --packing

On a device machine that has torch but not the project's other packages, install the wheels that
../shared/tools/gpu-check/prepare.sh lays out in gpu/whl first and put them and src/ on PYTHONPATH:

    pip install -q --no-index --no-deps --target /tmp/site gpu/whl/*.whl
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_sft.py --json $OUT/gpu_sft.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from local_server import start_server, stop_server  # a module beside this file

from optimize.core.flops import BASIS, peak_flops

AKKA = [sys.executable, "-m", "optimize"]
PEAK_FLOPS = peak_flops("H200")  # H200 (and H100 SXM) dense bf16, datasheet
TARGETS = {"tokensPerSecond": 42_000, "packedTokensPerSecond": 60_000, "mfu4N": 0.27, "ratioToBestBare": 0.95,
           "memoryWithin": 0.10}  # packedTokensPerSecond: with --packing only
DEFAULT_MODEL = "meta-llama/llama-3.2-1b-instruct"
GPU_WORKLOAD = {"batch": 16, "seq": 1024, "steps": 40, "skip": 5}
CPU_WORKLOAD = {"batch": 8, "seq": 512, "steps": 24, "skip": 4}
CPU_SHAPE = {"hidden": 128, "heads": 4, "layers": 2, "vocab": 2048}  # kv heads and intermediate keep the ratios
LORA = {"rank": 16, "alpha": 32, "dropout": 0.05, "targets": "all-linear"}
LEARNING_RATE = 2e-4
SEED = 0
VARIANTS = ("same", "nogc", "liger", "padfree", "packed")
UNPACKED_VARIANTS = ("same", "nogc", "liger", "padfree")  # the default list without --packing
FILL = {"full": (0.88, 0.97), "packed": (0.15, 0.95)}  # a row's rendered length, a share of maxSeqLength
PACKED_ATTENTION = "flex_attention"  # a packed run's attention on a GPU (it reads the rows' boundaries)
LIGER_LAYERS = {"rms_norm": True, "swiglu": True, "rope": True}  # Liger's layer kernels, as TRL takes them
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error", "PYTHONUNBUFFERED": "1"}
DASH = "—"


def say(text: str = "") -> None:
    print(text, flush=True)


# --- the model: a catalog entry's architecture, random init, offline ------------------------------------------


def model_shape(entry, cpu: bool) -> dict:
    """The decoder's sizes to build: the entry's own, or on the cpu a tiny one keeping its family and ratios."""
    from optimize.training.admission.memory import shape_of

    shape = shape_of(entry)
    if shape is None:
        sys.exit(f"the catalog gives no shape (hiddenSize, layers, heads, kvHeads, vocab, parameters) for "
                 f"{entry.id}; pick an entry that does")
    if not cpu:
        return {"hidden_size": shape.hidden, "intermediate_size": shape.intermediate,
                "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
                "num_key_value_heads": shape.kv_heads, "head_dim": shape.hidden // shape.heads,
                "vocab_size": shape.vocab, "catalogParameters": shape.parameters}
    hidden, heads = CPU_SHAPE["hidden"], CPU_SHAPE["heads"]
    return {"hidden_size": hidden, "intermediate_size": hidden * shape.intermediate // shape.hidden,
            "num_hidden_layers": CPU_SHAPE["layers"], "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads * shape.kv_heads // shape.heads), "head_dim": hidden // heads,
            "vocab_size": CPU_SHAPE["vocab"], "catalogParameters": None}


def build_child(spec_file: str) -> None:
    """(A subprocess.) The bf16 matmul rate on the GPU, then the model: the family stand-in's tokenizer, chat
    template and generation config, and random weights at the requested shape, tied or not as the entry's
    parameter count says."""
    spec = json.loads(Path(spec_file).read_text())
    started = time.monotonic()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from optimize.catalog.standins import FAMILIES, StandIn, build

    cuda = torch.cuda.is_available() and not spec["cpu"]
    info: dict = {"cuda": cuda}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, memoryGiB=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", matmulTFLOPs=matmul_rate(torch))
    out = Path(spec["out"])
    family = FAMILIES[spec["family"]]
    build(StandIn(spec["family"], "tiny"), out)  # tokenizer, template, generation config of the family's stand-in
    generation = (out / "generation_config.json").read_text()
    for stale in ("model.safetensors", "config.json", "optimize-standin.json"):
        (out / stale).unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    ids = {"pad_token_id": tokenizer.convert_tokens_to_ids(family.pad),
           "eos_token_id": tokenizer.convert_tokens_to_ids(family.eos)}
    if family.bos:
        ids["bos_token_id"] = tokenizer.convert_tokens_to_ids(family.bos)
    shape = {k: v for k, v in spec["shape"].items() if k != "catalogParameters"}
    if shape["vocab_size"] < len(tokenizer):
        sys.exit(f"the vocabulary {shape['vocab_size']} is smaller than the stand-in tokenizer's {len(tokenizer)}")
    settings = {**family.config, **shape, "max_position_embeddings": max(4096, spec["seq"])}

    def config_for(tied: bool):
        return AutoConfig.for_model(family.model_type, **{**settings, "tie_word_embeddings": tied}, **ids)

    def count(tied: bool) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in AutoModelForCausalLM.from_config(config_for(tied)).parameters())

    wanted = spec["shape"].get("catalogParameters")
    tied = True if wanted is None or count(True) == wanted else count(False) != wanted
    torch.manual_seed(SEED)
    dtype = torch.bfloat16 if cuda else torch.float32
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(config_for(tied), dtype=dtype)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(out))
    (out / "generation_config.json").write_text(generation)
    info.update(parameters=parameters, catalogParameters=wanted, tied=tied, dtype=str(dtype).split(".")[-1],
                architecture=model.config.architectures[0], seconds=round(time.monotonic() - started, 1),
                versions=versions())
    print("RESULT " + json.dumps(info), flush=True)


def matmul_rate(torch) -> float:
    """TFLOP/s of a bf16 8192x8192 matmul loop (the ceiling MFU is also read against)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000 / 50
    del a, b
    torch.cuda.empty_cache()
    return round(2 * 8192**3 / seconds / 1e12, 1)


def versions() -> dict:
    import importlib.metadata as md

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "liger-kernel"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def run_child(mode: str, spec: dict, work: Path, name: str, env: dict, timeout: float) -> tuple[dict | None, str]:
    """Run this file with `--MODE SPEC` in a subprocess; its RESULT line, or None and the tail of its output."""
    spec_file = work / f"{name}.json"
    spec_file.write_text(json.dumps(spec))
    try:
        done = subprocess.run([sys.executable, __file__, f"--{mode}", str(spec_file)], capture_output=True,
                              text=True, env={**os.environ, **env}, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        return None, f"timed out after {timeout:.0f} s: {str(error.stdout or '')[-1500:]}"
    (work / f"{name}.log").write_text(done.stdout + done.stderr)
    line = next((line for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stdout + done.stderr).strip().splitlines()
        return None, " | ".join(tail[-6:])[-1500:]
    return json.loads(line[len("RESULT "):]), ""


# --- the catalog and the server -----------------------------------------------------------------------------


def gpu_profile(device: str | None, memory_gib: float | None) -> tuple[str, dict | None]:
    """The GPU profile Optimize detects with nvidia-smi; else one declared from torch's view (returned to be
    added to a catalog copy)."""
    from optimize.jobs.devices import detect_gpus

    detected = [p for p in detect_gpus() if p.kind == "gpu"]
    if detected:
        return detected[0].name, None
    words = (device or "gpu").replace("NVIDIA", "").split()
    name = next((w.lower() for w in words if any(ch.isdigit() for ch in w)), (words[0] if words else "gpu").lower())
    return name, {"name": name, "kind": "gpu", "devices": 1, "pool": "training", "accelerator": device,
                  "memoryGiB": memory_gib}


def catalog_copy(work: Path, entry, built: dict, shape: dict, declared: dict | None, cpu: bool) -> tuple[Path, str]:
    """A copy of the shipped catalog with the GPU profile declared (where nvidia-smi did not find it) or, for the
    cpu rehearsal, the tiny shape added as an entry of its own; the path and the entry id to select."""
    import yaml

    from optimize.catalog.catalog import shipped_catalog_path

    document = yaml.safe_load(shipped_catalog_path().read_text(encoding="utf-8"))
    entry_id = entry.id
    if declared:
        document["devices"] = [d for d in document.get("devices") or [] if d.get("name") != declared["name"]]
        document["devices"].insert(0, declared)
    if cpu:
        entry_id = f"optimize/rehearsal-{entry.id.split('/')[-1]}"
        document["models"].append({
            "id": entry_id, "repository": entry_id, "commit": None,
            "commitNote": "gpu_sft.py's cpu rehearsal: the digest of the built files",
            "family": entry.family,
            "architecture": {"class": built["architecture"], "hiddenSize": shape["hidden_size"],
                             "layers": shape["num_hidden_layers"], "heads": shape["num_attention_heads"],
                             "kvHeads": shape["num_key_value_heads"], "vocab": shape["vocab_size"],
                             "intermediateSize": shape["intermediate_size"]},
            "parameters": {"total": built["parameters"], "active": built["parameters"]},
            "contextLength": 4096, "allowedFor": ["training"], "servedOn": ["cpu"],
            "chatTemplate": entry.chat_template,
            "notes": f"a tiny random-init model of {entry.id}'s family, for gpu_sft.py's cpu rehearsal"})
    path = work / "catalog.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path, entry_id


def akka(url: str, *args: str) -> str:
    done = subprocess.run([*AKKA, *args], env={**os.environ, "OPTIMIZE_URL": url}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"akka {' '.join(args)} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    return done.stdout


# --- rows that fill 88-97% of maxSeqLength (15-95% to be packed) under the model's own tokenizer and template ---


def make_rows(model: dict, count: int, seq: int, fill: tuple[float, float] = FILL["full"],
              bins_wanted: int | None = None) -> tuple[list[dict], list[int]]:
    """Chat rows (system, user, assistant) whose rendered length lies between the `fill` shares of `seq` (about
    half of it in the answer, which trains), measured with the renderer the run worker uses: `count` of them, or
    with `bins_wanted` as many as fill that many bins of `seq` tokens packed best fit decreasing (counted by the
    rule TRL's pack_dataset packs with, `optimize.workloads.packing.bins`)."""
    from importlib import resources

    from optimize.chat.render import LossPolicy
    from optimize.worker.rendering import renderer_for

    renderer = renderer_for(model)
    policy = LossPolicy("final", True, None)
    text = resources.files("optimize.catalog").joinpath("standin_corpus.txt").read_text(encoding="utf-8")
    vocab = [w for w in text.split() if w.isascii() and len(w) < 20] or ["ticket", "order", "router", "late"]
    system = 'You triage support tickets. Answer with a short analysis, then JSON: {"category": ..., "urgent": ...}.'

    def row(n_words: int, salt: int) -> dict:
        pick = random.Random(salt)
        user = " ".join(pick.choice(vocab) for _ in range(n_words))
        answer = " ".join(pick.choice(vocab) for _ in range(n_words)) + ' {"category": "hardware", "urgent": false}'
        return {"messages": [{"role": "system", "content": system},
                             {"role": "user", "content": f"Ticket {salt}: {user}"},
                             {"role": "assistant", "content": answer}]}

    def length(candidate: dict) -> int:
        return len(renderer.render(candidate, policy).input_ids)

    base = length(row(0, 1))
    per_word = max(0.5, (length(row(50, 1)) - base) / 50)
    rnd = random.Random(SEED)
    rows, lengths = [], []

    def enough() -> bool:
        if bins_wanted is None:
            return len(rows) >= count
        from optimize.workloads.packing import bins

        return len(rows) >= bins_wanted and bins(lengths, seq) >= bins_wanted  # a bin holds a row or more

    while not enough():
        index = len(rows)
        goal = int(seq * rnd.uniform(*fill))
        n = max(0, int((goal - base) / per_word))
        candidate = row(n, index)
        size = length(candidate)
        for _ in range(12):  # shrink until it fits under the goal (rarely more than two tries)
            if size <= goal:
                break
            n = max(0, int(n * goal / size) - 1)
            candidate = row(n, index)
            size = length(candidate)
        rows.append(candidate)
        lengths.append(size)
    return rows, lengths


def render_rows(model: dict, rows_file: Path, loss: dict, seq: int, target: Path) -> None:
    """The rows as the run worker prepares them: the registry's row rule, the run's loss policy, labels -100
    where no token trains, Parquet of int32 lists."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from optimize.chat.render import LossPolicy
    from optimize.chat.rows import RowKind, check_row
    from optimize.worker.rendering import renderer_for

    renderer = renderer_for(model)
    policy = LossPolicy(loss.get("assistantTurns") or "final", loss.get("trainOnToolCalls", True),
                        loss.get("explicitLossMaskColumn"))
    columns: dict[str, list] = {"input_ids": [], "labels": []}
    with open(rows_file, "rb") as handle:
        for raw in handle:
            row = json.loads(raw)
            check_row(row, RowKind.CHAT)
            rendered = renderer.render(row, policy)
            if len(rendered.input_ids) > seq:
                sys.exit(f"a row is {len(rendered.input_ids)} tokens long, over {seq}")
            columns["input_ids"].append(rendered.input_ids)
            columns["labels"].append([t if m else -100
                                      for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True)])
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32()))])
    pq.write_table(pa.table(columns, schema=schema), target)


def pack_rendered(rows: Path, seq: int, target: Path) -> dict:
    """The rendered rows packed as bare TRL packs them: `trl.pack_dataset`, strategy bfd (best fit decreasing,
    each row whole), bins of `seq` tokens with the rows' `seq_lengths`; how many bins, and how full."""
    import datasets
    from datasets import Dataset
    from trl import pack_dataset

    datasets.disable_progress_bars()
    dataset = Dataset.from_parquet(str(rows), cache_dir=str(target.parent / "arrow-pack"))
    tokens = sum(len(ids) for ids in dataset["input_ids"])
    packed = pack_dataset(dataset, seq, strategy="bfd")
    packed.to_parquet(str(target))
    return {"rows": len(dataset), "bins": len(packed), "binTokens": seq, "tokens": tokens,
            "efficiency": round(tokens / (len(packed) * seq), 4) if len(packed) else 0.0}


# --- (a) the platform ---------------------------------------------------------------------------------------


def platform_run(url: str, label: str, plan: dict, skip: int, timeout: float) -> dict:
    """POST the plan, follow the run to its end; the run (with its resolved settings), its steady rate."""
    from optimize.client.credentials import find_token
    from optimize.client.events import follow
    from optimize.client.http import ApiError, OptimizeClient

    say(f"platform: {label} …")
    with OptimizeClient(url, token=find_token(url)) as client:
        posted = time.monotonic()
        try:
            run_id = client.post("/v1/training/runs", json=plan)["runId"]
        except ApiError as error:
            return {"label": label, "phase": "REFUSED", "failureReason": error.message, "plan": plan}
        try:
            for _ in follow(client, f"/v1/training/runs/{run_id}/events", deadline=time.monotonic() + timeout):
                pass
        except TimeoutError:
            client.post(f"/v1/training/runs/{run_id}/cancel")
        followed = time.monotonic() - posted
        run = client.get(f"/v1/training/runs/{run_id}", params={"settings": "true"})
        metrics = [item for item in client.get(f"/v1/training/runs/{run_id}/metrics")["steps"]
                   if item["kind"] == "train" and item.get("tokens") is not None]
    settings = {path: item.get("value") for path, item in (run.get("settings") or {}).items()}
    cost, memory = run.get("cost") or {}, run.get("memory") or {}
    result = {"label": label, "runId": run["runId"], "phase": run["phase"], "failureReason": run.get("failureReason"),
              "plan": plan, "settings": settings,
              "sources": {path: item.get("source") for path, item in (run.get("settings") or {}).items()},
              "followedSeconds": round(followed, 1), "phaseMillis": run["timing"]["phaseMillis"],
              "updates": (run.get("results") or {}).get("steps"), "tokens": (run.get("results") or {}).get("tokens"),
              "tokensPerSecond": cost.get("tokensPerSecondPerDevice"), "trainingSeconds": cost.get("trainingSeconds"),
              "steadyTokensPerSecond": steady_from_metrics(metrics, skip),
              "lossFirst": metrics[0].get("loss") if metrics else None,
              "lossLast": metrics[-1].get("loss") if metrics else None,
              "tokensByUpdate": [item["tokens"] for item in sorted(metrics, key=lambda m: m["step"])],
              "peakGiB": memory.get("measuredGiB", cost.get("peakDeviceMemoryGiB")),
              "reservedGiB": memory.get("reservedGiB", cost.get("peakDeviceReservedGiB")),
              "startCheckGiB": memory.get("startCheckGiB"),
              "predicted": (memory.get("predicted") or {}), "memoryRatio": memory.get("ratio"),
              "checkpointingReason": memory.get("checkpointingReason"),
              "startCheckSeconds": (run.get("checks") or {}).get("seconds"), "warnings": run.get("warnings"),
              "packing": ((run.get("results") or {}).get("dataFit") or {}).get("packing")}
    say(f"platform: {label}: {result['phase']}" + (f" ({result['failureReason']})" if result["failureReason"] else "")
        + f", followed {followed:.1f} s")
    if result["packing"]:
        say(f"platform: {label}: packed {packing_line(result['packing'])}")
    return result


def packing_line(packed: dict) -> str:
    """A packing's figures (`results.dataFit.packing`, or the bare packed dataset's) in words."""
    return (f"{packed['rows']} rows into {packed['bins']} bins of {packed['binTokens']} tokens: {packed['tokens']:,} "
            f"tokens, efficiency {packed['efficiency']:.3f}")


def steady_from_metrics(metrics: list[dict], skip: int) -> float | None:
    """Tokens/s over the updates after `skip`: the least-squares slope of the server's arrival time of each train
    metric against its cumulative tokens (the arrival batches average out); None where the updates arrived in
    fewer than three batches or within a second."""
    points = [(float(item["tokens"]), datetime.fromisoformat(item["at"].replace("Z", "+00:00")).timestamp())
              for item in sorted(metrics, key=lambda m: m["step"]) if item["step"] > skip]
    if len({a for _, a in points}) < 3 or points[-1][1] - points[0][1] < 1.0:
        return None  # fewer than three batches arrived over the steady updates: no slope to read
    mean_tokens = sum(t for t, _ in points) / len(points)
    mean_at = sum(a for _, a in points) / len(points)
    spread = sum((t - mean_tokens) ** 2 for t, _ in points)
    slope = sum((t - mean_tokens) * (a - mean_at) for t, a in points) / spread if spread else 0.0
    return round(1 / slope, 1) if slope > 0 else None


def plan_for(entry_id: str, profile: str, workload: dict, steps: int, liger: str, gc: str, packing: bool,
             cpu: bool) -> dict:
    model: dict = {}
    if gc != "default":
        model["gradientCheckpointing"] = gc == "on"
    if packing and not cpu:  # an attention that reads the packed rows' boundaries (the cpu's default sdpa does)
        model["attentionImplementation"] = PACKED_ATTENTION
    config = {"dataset": "bench/rows:train", "method": "sft", "seed": SEED, "maxSeqLength": workload["seq"],
              "hyperparams": {"lora": LORA, "optimizer": {"learningRate": LEARNING_RATE},
                              "training": {"maxSteps": steps, "batchSize": workload["batch"]}},
              "model": model}
    if liger == "off":
        config["liger"] = {"rms_norm": False, "swiglu": False, "rope": False}
    if packing:
        config["packing"] = True
    return {"kind": "run", "project": "bench", "baseModel": entry_id, "modelName": "gpu-sft",
            "config": config, "execution": {"deviceProfile": profile}, "description": "benchmarks/gpu_sft.py"}


# --- (b) bare TRL -----------------------------------------------------------------------------------------------


def mirrored(settings: dict) -> dict:
    """What a bare script takes of a platform run's resolved settings."""
    def get(path: str, default=None):
        value = settings.get(path)
        return default if value is None else value

    return {"precision": get("config.model.precision", "bf16"),
            "attention": get("config.model.attentionImplementation", "sdpa"),
            "gradientCheckpointing": bool(get("config.model.gradientCheckpointing", False)),
            "packing": bool(get("config.packing", False)),
            "liger": {p[len("config.liger."):]: bool(v) for p, v in settings.items() if p.startswith("config.liger.")},
            "rank": get("config.hyperparams.lora.rank", LORA["rank"]),
            "alpha": get("config.hyperparams.lora.alpha", LORA["alpha"]),
            "dropout": get("config.hyperparams.lora.dropout", LORA["dropout"]),
            "targets": get("config.hyperparams.lora.targets", LORA["targets"]),
            "learningRate": get("config.hyperparams.optimizer.learningRate", LEARNING_RATE),
            "weightDecay": get("config.hyperparams.optimizer.weightDecay", 0.0),
            "warmupSteps": get("config.hyperparams.training.warmupSteps", 0),
            "gradientAccumulation": get("config.hyperparams.training.gradientAccumulation", 1),
            "seed": get("config.seed", SEED),
            "loss": {"assistantTurns": get("config.loss.assistantTurns", "final"),
                     "trainOnToolCalls": get("config.loss.trainOnToolCalls", True),
                     "explicitLossMaskColumn": get("config.loss.explicitLossMaskColumn")}}


def variant_settings(variant: str, same: dict, liger_layers: bool) -> dict:
    """A bare variant's settings; `liger_layers`: whether Liger's layer kernels can run here (a GPU with
    liger_kernel)."""
    if variant == "same":  # a packed run's bins go through TRL's padding-free collator, as the platform's do
        return {**same, "paddingFree": same["packing"]}
    if variant == "packed":
        return {**same, "gradientCheckpointing": False, "packing": True, "paddingFree": True,
                "liger": dict(LIGER_LAYERS) if liger_layers else {}}
    return {**same, "gradientCheckpointing": False, "packing": False, "paddingFree": variant == "padfree",
            "liger": dict(LIGER_LAYERS) if variant == "liger" else {}}


def bare_child(spec_file: str) -> None:
    """(A subprocess.) One bare TRL variant: SFTTrainer with a PEFT LoRA adapter under the engine's SFTConfig."""
    spec = json.loads(Path(spec_file).read_text())
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    s, work = spec["settings"], Path(spec["workdir"])
    cuda = torch.cuda.is_available() and not spec["cpu"]
    steps, precision = spec["steps"], s["precision"]
    liger = {}
    if cuda and any(s["liger"].values()):
        # the layer kernels, as the platform passes them (its own fused LM head computes TRL's loss)
        liger = {"use_liger_kernel": True, "liger_kernel_config": dict(s["liger"])}
    # bins packed by trl.pack_dataset (the parent did it): TRL's padding-free collator restarts the positions at
    # each row of a bin, from its seq_lengths
    packing = {"packing": True, "packing_strategy": "bfd"} if s["packing"] else {}
    args = SFTConfig(
        output_dir=str(work / "out"), max_steps=steps, per_device_train_batch_size=spec["batch"],
        gradient_accumulation_steps=s["gradientAccumulation"], learning_rate=s["learningRate"],
        weight_decay=s["weightDecay"], warmup_steps=s["warmupSteps"], lr_scheduler_type="linear", seed=s["seed"],
        data_seed=s["seed"], logging_steps=1, save_strategy="steps", save_steps=steps, save_only_model=False,
        eval_strategy="no", bf16=cuda and precision == "bf16", fp16=cuda and precision == "fp16", use_cpu=not cuda,
        gradient_checkpointing=s["gradientCheckpointing"], report_to="none", remove_unused_columns=False,
        disable_tqdm=True, dataloader_num_workers=0,
        max_length=None if s["paddingFree"] and not s["packing"] else spec["seq"],
        dataset_kwargs={"skip_prepare_dataset": True}, padding_free=s["paddingFree"], **packing, **liger,
    )
    marks: dict[int, float] = {}
    logged: dict[int, float] = {}
    losses: list[float] = []
    clock = {"begin": 0.0}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            clock["begin"] = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            marks[state.global_step] = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "num_tokens" in logs:
                logged[state.global_step] = float(logs["num_tokens"])
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision if cuda else "fp32"]
    model = AutoModelForCausalLM.from_pretrained(spec["modelPath"], dtype=dtype, attn_implementation=s["attention"])
    model = model.to("cuda") if cuda else model
    parameters = sum(p.numel() for p in model.parameters())
    trainer = SFTTrainer(
        model=model, args=args, processing_class=AutoTokenizer.from_pretrained(spec["modelPath"]),
        peft_config=LoraConfig(r=s["rank"], lora_alpha=s["alpha"], lora_dropout=s["dropout"],
                               target_modules=s["targets"], task_type="CAUSAL_LM"),
        train_dataset=Dataset.from_parquet(spec["rows"], cache_dir=str(work / "arrow")), callbacks=[Record()],
    )
    if cuda:  # the training peak, as the platform measures it: from just before train()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    ended = time.monotonic()
    tokens = logged[max(logged)] if logged else 0.0
    result = {"updates": max(marks) if marks else 0, "tokens": int(tokens), "parameters": parameters,
              "tokensByUpdate": [int(logged[step]) for step in sorted(logged)],
              "trainingSeconds": round(ended - clock["begin"], 2),
              "tokensPerSecond": round(tokens / (ended - clock["begin"]), 1) if tokens else None,
              "steadyTokensPerSecond": None, "lossFirst": losses[0] if losses else None,
              "lossLast": losses[-1] if losses else None, "ligerKernelConfig": liger.get("liger_kernel_config")}
    first, last = spec["skip"], max(marks) if marks else 0
    if last > first and first in marks and first in logged and last in logged:
        result["steadyTokensPerSecond"] = round((logged[last] - logged[first]) / (marks[last] - marks[first]), 1)
        result["steadySecondsPerUpdate"] = round((marks[last] - marks[first]) / (last - first), 4)
    if cuda:
        result["peakGiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["reservedGiB"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)
    print("RESULT " + json.dumps(result), flush=True)


# --- the table ----------------------------------------------------------------------------------------------


def fmt(value, pattern: str = "{:,.0f}") -> str:
    return DASH if value is None else pattern.format(value)


def mfu(parameters: int, rate: float | None, peak: float | None) -> float | None:
    """On the LoRA run's own basis, 4N FLOPs a token (`optimize.core.flops`)."""
    return round(BASIS["lora"] * parameters * rate / peak, 3) if rate and peak else None


def liger_label(liger: dict) -> str:
    on = [k for k, v in liger.items() if v]
    if not on:
        return "off"
    short = {"rms_norm": "norm", "swiglu": "swiglu", "rope": "rope", "fused_linear_cross_entropy": "flce"}
    return "+".join(short.get(k, k) for k in sorted(on))


def table(rows: list[dict], parameters: int, matmul: float | None, cpu: bool) -> None:
    say()
    say(f"{'run':28s} {'gc':>3s} {'liger':>22s} {'tokens/s':>9s} {'steady':>9s} {'MFU 4N':>7s} {'vs mm':>6s} "
        f"{'peak GiB':>8s} {'reserved':>8s} {'predicted':>9s} {'meas/pred':>9s}")
    for row in rows:
        rate = row.get("steadyTokensPerSecond") or row.get("tokensPerSecond")
        if row.get("skipped") or row.get("failed"):
            say(f"{row['name']:28s} {'skipped' if row.get('skipped') else 'FAILED'}: "
                f"{row.get('skipped') or row.get('failed')}")
            continue
        predicted = row.get("predictedGiB")
        say(f"{row['name']:28s} {('on' if row['gc'] else 'off'):>3s} {row['liger']:>22s} "
            f"{fmt(row.get('tokensPerSecond')):>9s} {fmt(row.get('steadyTokensPerSecond')):>9s} "
            f"{fmt(None if cpu else mfu(parameters, rate, PEAK_FLOPS), '{:.3f}'):>7s} "
            f"{fmt(None if cpu else mfu(parameters, rate, matmul and matmul * 1e12), '{:.3f}'):>6s} "
            f"{fmt(row.get('peakGiB'), '{:.2f}'):>8s} {fmt(row.get('reservedGiB'), '{:.2f}'):>8s} "
            f"{fmt(predicted, '{:.2f}'):>9s} {fmt(row.get('memoryRatio'), '{:.3f}'):>9s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="catalog entry whose architecture is built")
    parser.add_argument("--cpu", action="store_true", help="the cpu rehearsal (the default where CUDA is absent)")
    parser.add_argument("--steps", type=int, help="updates in every run (gpu 40, cpu 24)")
    parser.add_argument("--skip", type=int, help="updates left out of the steady rate (gpu 5, cpu 4)")
    parser.add_argument("--packing", action="store_true",
                        help="rows of 15-95%% of maxSeqLength, packed: config.packing true in the plan (flex_attention "
                             "on a GPU), the bare variant packed in the default list")
    parser.add_argument("--variants", help=f"bare variants, comma-separated, of {','.join(VARIANTS)} (default: "
                                           f"{','.join(UNPACKED_VARIANTS)}; with --packing all of them)")
    parser.add_argument("--liger", choices=["default", "off"], default="default",
                        help="the platform plan's config.liger: left out (default), or all off")
    parser.add_argument("--gc", choices=["default", "on", "off"], default="default",
                        help="the platform plan's config.model.gradientCheckpointing: left out, or stated")
    parser.add_argument("--run-timeout", type=float, default=900, help="seconds a platform run is followed")
    parser.add_argument("--json", metavar="PATH", help="write every figure here")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (model, rows, logs)")
    parser.add_argument("--build", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--bare", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.update(OFFLINE)
    if args.build:
        build_child(args.build)
        return
    if args.bare:
        bare_child(args.bare)
        return

    import torch

    cpu = args.cpu or not torch.cuda.is_available()
    workload = dict(CPU_WORKLOAD if cpu else GPU_WORKLOAD)
    workload["steps"] = args.steps or workload["steps"]
    workload["skip"] = args.skip if args.skip is not None else workload["skip"]
    child_env = {"CUDA_VISIBLE_DEVICES": ""} if cpu else {}
    from optimize.catalog.catalog import load_catalog

    entry = load_catalog().find(args.model)
    from optimize.catalog.standins import FAMILIES

    if entry.family not in FAMILIES:
        sys.exit(f"{entry.id} is of family {entry.family}, which has no stand-in tokenizer to build with")
    shape = model_shape(entry, cpu)
    work = Path(tempfile.mkdtemp(prefix="gpu-sft-")).resolve()
    report: dict = {"mode": "cpu rehearsal" if cpu else "gpu", "model": entry.id, "workload": workload,
                    "packing": args.packing, "targets": TARGETS, "peakFlops": PEAK_FLOPS}
    variants = [v.strip() for v in (args.variants or ",".join(VARIANTS if args.packing else UNPACKED_VARIANTS))
                .split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    server = None
    started = time.monotonic()
    try:
        say(f"building a random-init model of {entry.id}'s architecture"
            + (" (a tiny shape of it: the cpu rehearsal)" if cpu else "") + " …")
        built, why = run_child("build", {"out": str(work / "model"), "family": entry.family, "shape": shape,
                                         "cpu": cpu, "seq": workload["seq"]}, work, "build", child_env, 900)
        if built is None:
            sys.exit(f"building the model failed: {why}")
        parameters, matmul = built["parameters"], built.get("matmulTFLOPs")
        report["build"] = built
        tied = "tied" if built["tied"] else "untied"
        catalog_note = (f" (catalog {built['catalogParameters']:,})" if built.get("catalogParameters")
                        and built["catalogParameters"] != parameters else "")
        say(f"  {built['architecture']}: hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, "
            f"{shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, intermediate "
            f"{shape['intermediate_size']}, vocabulary {shape['vocab_size']}, {tied} embeddings: N = "
            f"{parameters:,} parameters{catalog_note}, {built['dtype']}, built in {built['seconds']} s")
        say(f"  {'; '.join(f'{k} {v}' for k, v in built['versions'].items())}")
        if cpu:
            profile, declared = "cpu", None
            say(f"  device: cpu ({os.cpu_count()} cores); MFU and device memory are not measured")
        else:
            profile, declared = gpu_profile(built["device"], built["memoryGiB"])
            say(f"  device: {built['device']} ({built['memoryGiB']} GiB, sm {built['capability']}), profile "
                f"{profile}{' (declared in a catalog copy: nvidia-smi did not find it)' if declared else ''}; "
                f"bf16 8192x8192 matmul {matmul} TFLOP/s")
            if "H200" not in (built["device"] or ""):
                say("  NOTE: the targets are for one H200; this is another device")
        report["device"] = {"profile": profile, **{k: built.get(k) for k in ("device", "memoryGiB", "capability")},
                            "matmulTFLOPs": matmul, "cpus": os.cpu_count()}
        catalog, entry_id = (catalog_copy(work, entry, built, shape, declared, cpu) if cpu or declared
                             else (None, entry.id))

        (work / "data").mkdir()
        server, url = start_server(work / "data", ("--catalog", str(catalog)) if catalog is not None else (),
                                   {"OPTIMIZE_IMPORT_ROOTS": str(work)})
        clock = time.monotonic()
        akka(url, "training", "base-models", "select", entry_id, "--from", str(work / "model"))
        selected = json.loads(akka(url, "training", "base-models", "get", entry_id, "-o", "json"))
        model = {"id": selected["id"], "family": selected["family"], "path": selected["selection"]["path"],
                 "chatTemplate": selected["chatTemplate"]}
        say(f"selected {entry_id} --from the built folder in {time.monotonic() - clock:.1f} s")
        count = workload["batch"] * workload["steps"]
        if args.packing:  # as many rows as fill the updates' bins
            rows, lengths = make_rows(model, count, workload["seq"], FILL["packed"], bins_wanted=count)
        else:
            rows, lengths = make_rows(model, count, workload["seq"], FILL["full"])
        rows_file = work / "rows.jsonl"
        rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
        lengths.sort()
        report["rows"] = {"count": len(rows), "min": lengths[0], "median": lengths[len(lengths) // 2],
                          "max": lengths[-1], "meanFill": round(sum(lengths) / len(lengths) / workload["seq"], 3)}
        unit = "bins (packed rows)" if args.packing else "rows"
        say(f"{len(rows)} chat rows, rendered {lengths[0]}–{lengths[-1]} tokens (median {lengths[len(lengths) // 2]}) "
            f"of maxSeqLength {workload['seq']}; {workload['steps']} updates of {workload['batch']} {unit}, LoRA "
            f"rank {LORA['rank']} all-linear, steady rate after update {workload['skip']}")
        clock = time.monotonic()
        akka(url, "registry", "datasets", "register", "bench/rows", "-f", str(rows_file), "--alias", "train")
        akka(url, "training", "projects", "create", "bench")
        akka(url, "training", "datasets", "analyze", "bench/rows:train", "--model", entry_id, "--wait")
        say(f"registered, project created, analyzed in {time.monotonic() - clock:.1f} s")

        # (a) the platform's default run
        label = "packed run" if args.packing else "default run"
        runs = [platform_run(url, label, plan_for(entry_id, profile, workload, workload["steps"], args.liger,
                                                  args.gc, args.packing, cpu), workload["skip"], args.run_timeout)]
        first = runs[0]
        report["platform"] = runs
        measured = next((r for r in runs if r["phase"] == "COMPLETED"), None)
        basis = measured or (first if first.get("settings") else None)
        if basis is None:
            sys.exit(f"the platform refused the run: {first.get('failureReason')}")
        same = mirrored(basis["settings"])
        steps = basis["settings"].get("config.hyperparams.training.maxSteps") or workload["steps"]

        # (b) bare TRL, a subprocess per variant
        render_rows(model, rows_file, same["loss"], workload["seq"], work / "train.parquet")
        liger_layers = not cpu and importlib.util.find_spec("liger_kernel") is not None
        settings_of = {variant: variant_settings(variant, same, liger_layers) for variant in variants}
        if any(settings["packing"] for settings in settings_of.values()):
            report["barePacking"] = pack_rendered(work / "train.parquet", workload["seq"],
                                                  work / "train-packed.parquet")
            say(f"bare packed dataset (trl.pack_dataset, bfd): {packing_line(report['barePacking'])}")
        bare = []
        for variant in variants:
            settings = settings_of[variant]
            item = {"variant": variant, "settings": settings}
            if variant == "liger" and cpu:
                item["skipped"] = "Liger's kernels need a GPU (Triton)"
            elif variant == "liger" and importlib.util.find_spec("liger_kernel") is None:
                item["skipped"] = "liger_kernel is not installed"
            if item.get("skipped"):
                say(f"bare {variant}: skipped ({item['skipped']})")
                bare.append(item)
                continue
            (work / f"bare-{variant}").mkdir()
            say(f"bare {variant} …")
            clock = time.monotonic()
            result, why = run_child("bare", {"settings": settings, "workdir": str(work / f"bare-{variant}"),
                                             "modelPath": model["path"],
                                             "rows": str(work / ("train-packed.parquet" if settings["packing"]
                                                                 else "train.parquet")),
                                             "steps": steps, "batch": workload["batch"], "seq": workload["seq"],
                                             "skip": workload["skip"], "cpu": cpu},
                                    work, f"bare-{variant}", child_env, 900)
            if result is None:
                item["failed"] = why
                say(f"bare {variant}: FAILED: {why}")
            else:
                item.update(result)
                say(f"bare {variant}: {result['tokensPerSecond']} tokens/s in {time.monotonic() - clock:.1f} s "
                    "(process)")
            if cpu and variant == "padfree":
                item["note"] = "on the cpu only to rehearse the code path"
            bare.append(item)
        report["bare"] = bare
    finally:
        if server is not None:
            stop_server(server)
        if args.keep:
            say(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = round(time.monotonic() - started, 1)
    summarize(report, runs, bare, parameters, matmul, cpu)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
        say(f"\nwrote {args.json}")


def summarize(report: dict, runs: list[dict], bare: list[dict], parameters: int, matmul: float | None,
              cpu: bool) -> None:
    rows = []
    for run in runs:
        s = run.get("settings") or {}
        row = {"name": f"platform {run['label']}", "gc": bool(s.get("config.model.gradientCheckpointing")),
               "liger": liger_label({p[len("config.liger."):]: v for p, v in s.items()
                                     if p.startswith("config.liger.")}),
               "predictedGiB": (run.get("predicted") or {}).get("peakGiB"), **run}
        if run["phase"] != "COMPLETED":
            row["failed"] = f"{run['phase']}: {run.get('failureReason')}"
        rows.append(row)
    for item in bare:
        s = item["settings"]
        liger = {k: v for k, v in s["liger"].items() if k != "fused_linear_cross_entropy"} if not cpu else {}
        kind = " (packed)" if s.get("packing") else " (padding-free)" if s["paddingFree"] else ""
        rows.append({"name": f"bare {item['variant']}{kind}",
                     "gc": s["gradientCheckpointing"], "liger": liger_label(liger), **item})
    table(rows, parameters, matmul, cpu)
    for run in runs:
        if run.get("checkpointingReason"):
            say(f"  {run['label']}: gradient checkpointing from the memory estimate: {run['checkpointingReason']}")
        if run.get("startCheckGiB") is not None:
            say(f"  {run['label']}: start checks' own peak {run['startCheckGiB']} GiB (apart from the training peak)")
    for item in bare:
        if item.get("note"):
            say(f"  bare {item['variant']}: {item['note']}")
    for name in ("same", "packed"):
        other = next((b for b in bare if b["variant"] == name and b.get("tokensByUpdate")), None)
        for run in runs:
            if run["phase"] == "COMPLETED" and other and run.get("lossFirst") is not None:
                rows_match = run.get("tokensByUpdate") == other["tokensByUpdate"]
                say(f"  loss first → last: platform {run['label']} {run['lossFirst']:.4f} → {run['lossLast']:.4f}, "
                    f"bare {name} {other['lossFirst']:.4f} → {other['lossLast']:.4f}; the same rows in the same "
                    f"order (tokens per update): {'yes' if rows_match else 'no'}")
    for run in runs:
        if run.get("packing"):
            say(f"  packing, platform {run['label']} (results.dataFit.packing): {packing_line(run['packing'])}")
    if report.get("barePacking"):
        say(f"  packing, bare (trl.pack_dataset, bfd): {packing_line(report['barePacking'])}")
    say(f"  steady: tokens/s after update {report['workload']['skip']}; MFU on the steady rate, N = {parameters:,}; "
        f"'vs mm' against the measured matmul rate ({fmt(matmul, '{}')} TFLOP/s)")

    platform = next((r for r in runs if r["phase"] == "COMPLETED"), None)
    done = [b for b in bare if b.get("tokensPerSecond")]
    best = max(done, key=lambda b: b["tokensPerSecond"]) if done else None
    best_steady = max((b for b in done if b.get("steadyTokensPerSecond")),
                      key=lambda b: b["steadyTokensPerSecond"], default=None)
    figures: dict = {"platformRun": platform["label"] if platform else None,
                     "bestBare": best["variant"] if best else None}
    say("\ntargets (one H200)" + (": not applicable on the cpu rehearsal; the ratios are shown for the "
                                   "mechanics only" if cpu else ""))
    if platform is None:
        say("  no platform run completed")
    else:
        tps, steady = platform.get("tokensPerSecond"), platform.get("steadyTokensPerSecond")
        figures["platformTokensPerSecond"] = tps
        say(f"  platform tokens/s ({platform['label']}) {fmt(tps)} / {TARGETS['tokensPerSecond']:,} = "
            f"{fmt(tps and tps / TARGETS['tokensPerSecond'], '{:.3f}')}")
        if report.get("packing"):
            packed_target = TARGETS["packedTokensPerSecond"]
            figures["packedTokensPerSecondRatio"] = round(tps / packed_target, 3) if tps else None
            say(f"  platform tokens/s with packing at {report['workload']['seq']} tokens {fmt(tps)} / "
                f"{packed_target:,} = {fmt(tps and tps / packed_target, '{:.3f}')}"
                + ("" if report["workload"]["seq"] == 1024 else " (the target is at 1024 tokens)"))
        rate_mfu = None if cpu else mfu(parameters, steady or tps, PEAK_FLOPS)
        figures["platformMfu4N"] = rate_mfu
        figures["platformMfuVsMatmul"] = None if cpu else mfu(parameters, steady or tps, matmul and matmul * 1e12)
        say(f"  MFU(4N) {fmt(rate_mfu, '{:.3f}')} / {TARGETS['mfu4N']} = "
            f"{fmt(rate_mfu and rate_mfu / TARGETS['mfu4N'], '{:.3f}')} (against the measured matmul rate: "
            f"{fmt(figures['platformMfuVsMatmul'], '{:.3f}')})")
        if best:
            ratio = tps / best["tokensPerSecond"] if tps else None
            figures["ratioToBestBare"] = round(ratio, 3) if ratio else None
            say(f"  platform/best bare ({best['variant']}) tokens/s {fmt(ratio, '{:.3f}')} / "
                f"{TARGETS['ratioToBestBare']} = {fmt(ratio and ratio / TARGETS['ratioToBestBare'], '{:.3f}')}")
            if best_steady and steady:
                figures["steadyRatioToBestBare"] = round(steady / best_steady["steadyTokensPerSecond"], 3)
                say(f"  (steady: platform/best bare ({best_steady['variant']}) "
                    f"{figures['steadyRatioToBestBare']:.3f})")
            same = next((b for b in done if b["variant"] == "same"), None)
            if same and tps:
                figures["ratioToSame"] = round(tps / same["tokensPerSecond"], 3)
                say(f"  (platform/bare same settings: {figures['ratioToSame']:.3f})")
        else:
            say("  platform/best bare: no bare variant finished")
        predicted, measured = (platform.get("predicted") or {}).get("peakGiB"), platform.get("peakGiB")
        off = abs(measured / predicted - 1) if measured and predicted else None
        figures["memoryOff"] = round(off, 3) if off is not None else None
        say(f"  predicted peak {fmt(predicted, '{:.2f}')} GiB, measured {fmt(measured, '{:.2f}')} GiB: off by "
            f"{fmt(off and off * 100, '{:.1f}')}% / {TARGETS['memoryWithin']:.0%} = "
            f"{fmt(off and off / TARGETS['memoryWithin'], '{:.2f}')} (at most 1 meets it)")
    report["figures"] = figures
    say(f"\n{report['mode']}: {report['seconds']:.0f} s in all")


if __name__ == "__main__":
    main()
