"""The vLLM engine answers the prompts `optimize.chat` renders as Transformers `generate` does (GPU only: skipped
where vLLM or a GPU is missing)."""

from __future__ import annotations

import pytest

from optimize.workloads.engines import vllm_available as available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not available(), reason="needs vllm and an NVIDIA GPU")]


def test_vllm_answers_the_rendered_prompts_as_transformers_does(tmp_path):
    from optimize.catalog.standins import StandIn, build
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer
    from optimize.evaluation.generation import TransformersGenerator, generator_for
    from optimize.evaluation.vllm_engine import VLLMGenerator

    build(StandIn("smollm2", "small"), tmp_path / "model")
    renderer = ChatRenderer.from_pretrained(str(tmp_path / "model"), template_kwargs("smollm2"))
    prompts = [renderer.tokenizer(renderer.text([{"role": "user", "content": f"ticket {i}: my order is late"}], None,
                                                generation_prompt=True), add_special_tokens=False)["input_ids"]
               for i in range(16)]
    assert isinstance(generator_for(tmp_path / "model"), VLLMGenerator)  # chosen where it is available
    fast = VLLMGenerator(tmp_path / "model", precision="fp32").generate(prompts, 16)
    reference = TransformersGenerator(tmp_path / "model", precision="fp32").generate(prompts, 16)
    same = sum(a.text == b.text for a, b in zip(fast, reference, strict=True))
    assert same >= 14, [(a.text, b.text) for a, b in zip(fast, reference, strict=True)]
