"""Batched evaluation generation against a bare Transformers `generate` loop over the same prompts.

Builds a stand-in model, renders chat prompts through `optimize.chat` (as an evaluation does), then answers them
twice, greedily and with the same token budget: once through `optimize.evaluation.generation` (prompts grouped
by length, left-padded, a batch at a time) and once a prompt at a time with `model.generate`. Prints answers/s and
generated tokens/s for both and their ratio.

    .venv/bin/python benchmarks/generate.py [--prompts 64] [--batch-size 16] [--max-new-tokens 32]
                                            [--model-family smollm2] [--size small]

Target: ratio ≥ 1.0 through batching.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

WORDS = "order refund status shipped printer router urgent thanks please today broken missing label".split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--model-family", default="smollm2")
    parser.add_argument("--size", default="small")
    args = parser.parse_args()
    import torch

    from optimize.catalog.standins import StandIn, build
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer
    from optimize.evaluation.generation import TransformersGenerator

    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="generate-bench-"))
    build(StandIn(args.model_family, args.size), work / "model")
    renderer = ChatRenderer.from_pretrained(str(work / "model"), template_kwargs(args.model_family))
    rnd = random.Random(0)
    prompts = []
    for _ in range(args.prompts):
        question = " ".join(rnd.choices(WORDS, k=rnd.randint(5, 60)))
        text = renderer.text([{"role": "user", "content": question}], None, generation_prompt=True)
        prompts.append(renderer.tokenizer(text, add_special_tokens=False)["input_ids"])

    generator = TransformersGenerator(work / "model")
    generator.generate(prompts[:2], args.max_new_tokens, args.batch_size)  # warm-up
    start = time.perf_counter()
    batched = generator.generate(prompts, args.max_new_tokens, args.batch_size)
    batched_seconds = time.perf_counter() - start

    model = generator.model
    start = time.perf_counter()
    bare_tokens = 0
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=args.max_new_tokens, pad_token_id=generator.pad_id,
                                 eos_token_id=generator.stop_ids)
            bare_tokens += out.shape[1] - ids.shape[1]
    bare_seconds = time.perf_counter() - start

    batched_tokens = sum(a.tokens for a in batched)
    print(f"prompts {len(prompts)}, batch size {args.batch_size}, max new tokens {args.max_new_tokens}, "
          f"stand-in {args.model_family} ({args.size}) on {generator.device}")
    print(f"batched (optimize.evaluation): {len(prompts) / batched_seconds:.1f} answers/s, "
          f"{batched_tokens / batched_seconds:.0f} tokens/s ({batched_seconds:.2f} s)")
    print(f"bare generate loop:            {len(prompts) / bare_seconds:.1f} answers/s, "
          f"{bare_tokens / bare_seconds:.0f} tokens/s ({bare_seconds:.2f} s)")
    print(f"ratio (answers/s, batched / bare): {bare_seconds / batched_seconds:.2f} (target ≥ 1.0)")


if __name__ == "__main__":
    main()
