"""Generation behind one interface: prompts as token ids in, answers out, greedy and batched, or several sampled
answers per prompt (`sample`: the groups a reinforcement run would roll out, seeded).

Prompts arrive rendered and tokenized by `optimize.chat` (the row's tools, the base model's template, one
beginning-of-sequence token), exactly as a supervised run trains them, so the engine never applies a template
of its own. `TransformersGenerator` (`optimize.chat.generation`) runs Transformers `generate` on CPU or GPU, with a
LoRA adapter over the base when one is given. `vllm_engine.VLLMGenerator` sits behind the same calls on GPUs;
`generator_for` picks it where vLLM is installed.
"""

from __future__ import annotations

from pathlib import Path

from optimize.chat.generation import Answer, TransformersGenerator, answer_text, stop_and_pad_ids

__all__ = ["Answer", "TransformersGenerator", "answer_text", "generator_for", "stop_and_pad_ids"]


def generator_for(model_dir: str | Path, adapter_dir: str | Path | None = None):
    """vLLM where it is installed and a GPU is visible, else Transformers `generate`."""
    from optimize.workloads.engines import vllm_available

    if vllm_available():
        from optimize.evaluation.vllm_engine import VLLMGenerator

        return VLLMGenerator(model_dir, adapter_dir)
    return TransformersGenerator(model_dir, adapter_dir)
