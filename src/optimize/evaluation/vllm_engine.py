"""The vLLM generation engine (GPU, the optional `vllm` extra): the same `generate` call as
`TransformersGenerator` — prompts as token ids rendered by `optimize.chat`, greedy answers in the prompts' order —
with vLLM's continuous batching, and a LoRA adapter applied per request.

Prompts go in as token ids, so vLLM never tokenizes or templates them itself: an evaluation on vLLM asks exactly
the prompt a supervised run trains on (one beginning-of-sequence token, the row's tools, the base model's
corrected template where the catalog says so). Used when `vllm` imports and a GPU is visible
(`generation.generator_for`).
"""

from __future__ import annotations

import json
from pathlib import Path

from optimize.evaluation.generation import Answer, answer_text


class VLLMGenerator:
    def __init__(self, model_dir: str | Path, adapter_dir: str | Path | None = None, precision: str = "bf16",
                 memory_fraction: float = 0.85) -> None:
        from transformers import AutoTokenizer
        from vllm import LLM

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.adapter = None
        options = {}
        if adapter_dir is not None:
            from vllm.lora.request import LoRARequest

            rank = json.loads((Path(adapter_dir) / "adapter_config.json").read_text()).get("r", 16)
            options = {"enable_lora": True, "max_lora_rank": max(8, rank), "max_loras": 1}
            self.adapter = LoRARequest("adapter", 1, str(adapter_dir))
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[precision]
        self.llm = LLM(model=str(model_dir), dtype=dtype,
                       gpu_memory_utilization=memory_fraction, seed=0, **options)
        stops = self.llm.get_tokenizer().eos_token_id
        generation = Path(model_dir) / "generation_config.json"
        if generation.is_file():
            configured = json.loads(generation.read_text()).get("eos_token_id")
            stops = configured if configured is not None else stops
        self.stop_ids = [stops] if isinstance(stops, int) else list(stops or [])

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 256, batch_size: int | None = None
                 ) -> list[Answer]:
        """Greedy answers, in the prompts' order; vLLM batches them itself (`batch_size` is not used)."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=self.stop_ids,
                                skip_special_tokens=True)
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompts], params,
                                    lora_request=self.adapter, use_tqdm=False)
        return [Answer(answer_text(out.outputs[0].text), len(out.outputs[0].token_ids)) for out in outputs]

    def sample(self, prompts: list[list[int]], max_new_tokens: int, n: int, temperature: float, seed: int,
               batch_size: int | None = None) -> list[list[Answer]]:
        """`n` answers per prompt sampled at `temperature` (seeded), in the prompts' order."""
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, seed=seed, max_tokens=max_new_tokens,
                                stop_token_ids=self.stop_ids, skip_special_tokens=True)
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompts], params,
                                    lora_request=self.adapter, use_tqdm=False)
        return [[Answer(answer_text(o.text), len(o.token_ids)) for o in out.outputs] for out in outputs]
