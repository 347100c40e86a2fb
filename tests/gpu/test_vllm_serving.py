"""The vLLM serving engine (`serving.vllm_serving`) answers as the endpoint's Transformers engine does: concurrent
greedy answers equal lone ones, mixed adapters each answer as their own, a closed stream is aborted and frees its
place, an echoed prompt is scored, and a repeated prompt reports cached tokens (GPU only: skipped where vLLM or a
GPU is missing)."""

from __future__ import annotations

import threading
import time

import pytest

from optimize.serving.vllm_serving import available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not available(), reason="needs vllm and an NVIDIA GPU")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from optimize.catalog.standins import StandIn, build
    from optimize.serving.engine import engine_for
    from optimize.serving.vllm_serving import VLLMServingModel

    root = tmp_path_factory.mktemp("vllm-serving")
    build(StandIn("smollm2", "small"), root / "model")
    for seed in (1, 2):
        torch.manual_seed(seed)
        peft = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "model"),
                              LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False))
        peft.save_pretrained(root / f"adapter{seed}")
    engine = engine_for(root / "model")
    assert isinstance(engine, VLLMServingModel)  # chosen where it is available
    engine.load_adapter("one", root / "adapter1")
    engine.load_adapter("two", root / "adapter2")
    yield engine
    engine.close()


PROMPTS = [[1] + [100 + (i * 37 + j) % 1900 for j in range(40 + 3 * i)] for i in range(8)]


def answer(engine, adapter, prompt, tokens=12):
    return [step.token for step in engine.stream(adapter, prompt, tokens)]


def test_concurrent_mixed_answers_equal_lone_answers(served):
    asks = [(("one", "two", None)[i % 3], prompt) for i, prompt in enumerate(PROMPTS)]
    lone = [answer(served, adapter, prompt) for adapter, prompt in asks]
    together: list = [None] * len(asks)
    threads = [threading.Thread(target=lambda i=i, a=a: together.__setitem__(i, answer(served, *a)))
               for i, a in enumerate(asks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert together == lone
    assert len({tuple(answer(served, adapter, PROMPTS[0])) for adapter in (None, "one", "two")}) == 3


def test_a_closed_stream_is_aborted_and_its_place_freed(served):
    steps = served.stream(None, PROMPTS[1], 4000)
    next(iter(steps.batches()))
    steps.close()
    deadline = time.monotonic() + 30
    while served.batcher.load != {"running": 0, "waiting": 0} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.batcher.load == {"running": 0, "waiting": 0} and steps.sequence.generated < 4000


def test_an_echoed_prompt_is_scored_and_a_repeated_prompt_is_cached(served):
    scored = served.score("one", PROMPTS[2], top=2)
    assert [s.token for s in scored] == PROMPTS[2][1:] and all(s.logprob <= 0 and len(s.top) == 2 for s in scored)
    long = [1] + list(range(200, 400))
    answer(served, None, long, 2)
    again = served.stream(None, long, 2)
    list(again.batches())
    assert again.sequence.cached >= 128


def test_a_constrained_answer_keeps_to_its_schema_beside_a_free_one(served):
    """Structured outputs on vLLM: its llguidance backend holds a sampled answer to a JSON schema's grammar (the
    grammar's Lark text, as the Transformers engine's batcher holds it), while a free row decodes beside it."""
    import json

    import jsonschema
    from transformers import AutoTokenizer

    from optimize.chat.grammars import json_constraint

    schema = {"type": "object", "properties": {"label": {"enum": ["billing", "bug"]}, "urgent": {"type": "boolean"}},
              "required": ["label", "urgent"], "additionalProperties": False}
    constraint = json_constraint(schema, "response_format")
    tokenizer = AutoTokenizer.from_pretrained(served.model_dir)
    free = served.stream(None, PROMPTS[1], 12, temperature=1.0, seed=2)
    for seed in range(4):
        ids = [step.token for step in served.stream(None, PROMPTS[0], 64, temperature=1.0, seed=seed,
                                                     constraint=constraint) if step.token not in served.stop_ids]
        jsonschema.validate(json.loads(tokenizer.decode(ids)), schema)
    assert len(list(free)) == 12
