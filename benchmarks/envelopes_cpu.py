"""Measure cpu training envelopes of the stand-ins: peak host memory of a LoRA SFT run (TRL) at a sequence length.

    .venv/bin/python benchmarks/envelopes_cpu.py FAMILY SIZE [--seq 512] [--steps 3]

Builds the stand-in in a temporary folder, trains `--steps` updates of TRL's SFTTrainer with a PEFT LoRA
adapter on rows of about `--seq` tokens in fp32 (TRL's config would otherwise autocast to bf16, on the cpu too),
and prints the peak RSS of this process (`RESULT {json}`). The
figures recorded in catalogs/default.yaml come from this script.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("family")
    parser.add_argument("size")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from optimize.catalog.standins import StandIn, build
    from optimize.chat.vision import auto_model
    from optimize.training.engines.harness import vision_modules

    work = Path(tempfile.mkdtemp(prefix="envelope-"))
    build(StandIn(args.family, args.size), work / "model")
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    words = "order shipped refund printer router status urgent thanks".split()
    text = " ".join(words[i % len(words)] for i in range(args.seq))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][: args.seq]
    half = len(ids) // 2
    rows = Dataset.from_list([{"input_ids": ids, "labels": [-100] * half + ids[half:]}] * 8)
    model = auto_model(work / "model").from_pretrained(work / "model")  # a model that takes images: text rows here
    config = SFTConfig(output_dir=str(work / "out"), max_steps=args.steps, per_device_train_batch_size=2,
                       report_to=[], use_cpu=True, bf16=False, fp16=False, logging_steps=1, save_strategy="no",
                       max_length=args.seq,
                       dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False)
    trainer = SFTTrainer(model=model, args=config, train_dataset=rows, processing_class=tokenizer,
                         peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                exclude_modules=vision_modules(str(work / "model"))))
    start = time.perf_counter()
    trainer.train()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print("RESULT " + json.dumps({"family": args.family, "size": args.size, "seq": len(ids), "steps": args.steps,
                                  "seconds": round(time.perf_counter() - start, 2), "peakHostGiB": round(peak_gib, 2),
                                  "tokensPerSecond": round(args.steps * 2 * len(ids) / (time.perf_counter() - start))}))


if __name__ == "__main__":
    main()
