"""Continuous batching in the serving engine (`serving.batcher`), on a real stand-in with real PEFT adapters:
concurrent answers equal lone ones under greedy decoding, mixed adapters in one batch each answer as their own,
a cancelled request frees its row, a full endpoint refuses at once, seeded sampling is reproducible, and a model
whose cache cannot be merged answers one request at a time, the same answers."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

PROMPTS = [[1] + [100 + (i * 37 + j) % 900 for j in range(4 + 3 * i)] for i in range(8)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from optimize.catalog.standins import StandIn, build

    root = tmp_path_factory.mktemp("batcher")
    build(StandIn("llama3.2"), root / "model")
    for seed in (1, 2):  # two adapters that answer differently from the base and from each other
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(root / "model")
        peft = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False))
        peft.save_pretrained(root / f"adapter{seed}")
    return root


@pytest.fixture(scope="module")
def engine(model_dir):
    from optimize.serving.engine import ServingModel

    engine = ServingModel(model_dir / "model")
    engine.load_adapter("one", model_dir / "adapter1")
    engine.load_adapter("two", model_dir / "adapter2")
    yield engine
    engine.close()


def answer(engine, adapter, prompt, tokens=12, **sampling) -> list[int]:
    return [step.token for step in engine.stream(adapter, prompt, tokens, **sampling)]


def concurrently(engine, asks, tokens=12) -> list[list[int]]:
    """Each (adapter, prompt) asked from its own thread, all at once."""
    answers: list = [None] * len(asks)
    start = threading.Barrier(len(asks))

    def ask(index, adapter, prompt):
        start.wait()
        answers[index] = answer(engine, adapter, prompt, tokens)

    threads = [threading.Thread(target=ask, args=(i, *a)) for i, a in enumerate(asks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def test_concurrent_answers_equal_lone_answers_under_greedy_decoding(engine):
    lone = [answer(engine, None, prompt) for prompt in PROMPTS]
    seen = []
    watching = threading.Event()

    def watch():  # the batch really held several rows at once
        while not watching.is_set():
            seen.append(len(engine.batcher.rows))
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    together = concurrently(engine, [(None, prompt) for prompt in PROMPTS])
    watching.set()
    watcher.join()
    assert together == lone
    assert max(seen) > 1


def test_mixed_adapters_in_one_batch_each_answer_as_their_own(engine):
    asks = [(("one", "two", None)[i % 3], prompt) for i, prompt in enumerate(PROMPTS)]
    lone = [answer(engine, adapter, prompt) for adapter, prompt in asks]
    assert concurrently(engine, asks) == lone
    first = PROMPTS[0]
    assert len({tuple(answer(engine, adapter, first)) for adapter in (None, "one", "two")}) == 3


def test_stacked_adapters_compute_what_peft_computes_for_each_row(engine, model_dir):
    """The engine's stacked LoRA (one product over every adapter, rows masked to their own) against PEFT itself:
    a PEFT model of each adapter alone, on the same rows."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    assert engine.stacked is not None  # plain LoRA on linear layers: stacked
    ids = torch.tensor([PROMPTS[3][:10]] * 3)
    with torch.inference_mode():
        mixed = engine.forward(["one", None, "two"], input_ids=ids, attention_mask=torch.ones_like(ids))
        for row, adapter in enumerate(("adapter1", None, "adapter2")):
            alone = AutoModelForCausalLM.from_pretrained(model_dir / "model")
            if adapter is not None:
                alone = PeftModel.from_pretrained(alone, model_dir / adapter)
            expected = alone.eval()(input_ids=ids[row:row + 1]).logits[0]
            assert torch.allclose(mixed[row], expected, atol=1e-4), adapter


def test_adapters_that_do_not_stack_answer_through_peft_mixed_batches(model_dir, tmp_path):
    """An adapter with a LoRA bias cannot be stacked: the engine keeps PEFT's mixed batches, same answers as each
    adapter alone."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from optimize.serving.engine import ServingModel

    torch.manual_seed(3)
    biased = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir / "model"),
                            LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, lora_bias=True))
    biased.save_pretrained(tmp_path / "biased")
    engine = ServingModel(model_dir / "model")
    try:
        engine.load_adapter("one", model_dir / "adapter1")
        assert engine.stacked is not None
        engine.load_adapter("biased", tmp_path / "biased")
        assert engine.stacked is None
        asks = [("one", PROMPTS[1]), ("biased", PROMPTS[2]), (None, PROMPTS[3])]
        lone = [answer(engine, adapter, prompt) for adapter, prompt in asks]
        assert concurrently(engine, asks) == lone
        engine.unload_adapter("biased")
        assert engine.stacked is not None  # stacks again once the odd one is gone
        assert answer(engine, "one", PROMPTS[1]) == lone[0]
    finally:
        engine.close()


def test_a_request_that_goes_away_frees_its_row(engine):
    steps = engine.stream(None, PROMPTS[1], 4000)
    next(steps)
    next(steps)
    steps.close()  # what a client that disconnects does to its stream
    deadline = time.monotonic() + 10
    while engine.batcher.load != {"running": 0, "waiting": 0} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.batcher.load == {"running": 0, "waiting": 0}
    assert answer(engine, None, PROMPTS[0]) == answer(engine, None, PROMPTS[0])  # and the engine goes on


def test_a_full_endpoint_refuses_at_once(engine):
    from optimize.serving.batcher import QueueFull

    before = engine.batcher.max_running, engine.batcher.max_waiting
    engine.batcher.max_running, engine.batcher.max_waiting = 1, 1
    try:
        held = [engine.stream(None, PROMPTS[0], 4000), engine.stream(None, PROMPTS[1], 4000)]
        with pytest.raises(QueueFull, match="2 requests are running or waiting"):
            engine.stream(None, PROMPTS[2], 8)
        for steps in held:
            steps.close()
    finally:
        engine.batcher.max_running, engine.batcher.max_waiting = before


def test_seeded_sampling_is_reproducible_and_log_probabilities_come_with_each_token(engine):
    sampled = answer(engine, "one", PROMPTS[2], 16, temperature=1.0, seed=7)
    assert answer(engine, "one", PROMPTS[2], 16, temperature=1.0, seed=7) == sampled
    assert answer(engine, "one", PROMPTS[2], 16, temperature=1.0, seed=8) != sampled
    steps = list(engine.stream(None, PROMPTS[0], 3, top_logprobs=2))
    for step in steps:
        assert step.logprob <= 0 and len(step.top) == 2 and step.top[0][1] >= step.top[1][1]
        assert step.top[0][0] == step.token  # greedy: the likeliest
    scored = engine.score(None, PROMPTS[0] + [steps[0].token], top=1)
    assert scored[-1].token == steps[0].token and scored[-1].logprob == pytest.approx(steps[0].logprob, abs=1e-4)


def test_a_model_whose_cache_cannot_be_merged_answers_one_request_at_a_time(tmp_path):
    from optimize.catalog.standins import StandIn, build
    from optimize.serving.engine import ServingModel

    build(StandIn("gemma4"), tmp_path / "gemma")  # sliding-window layers
    engine = ServingModel(tmp_path / "gemma")
    try:
        lone = [answer(engine, None, prompt, 8) for prompt in PROMPTS[:4]]
        assert engine.batcher.mergeable is False
        assert concurrently(engine, [(None, prompt) for prompt in PROMPTS[:4]], 8) == lone
    finally:
        engine.close()


def test_a_request_past_the_time_limit_is_cut_and_told_so(engine):
    from optimize.serving.batcher import RequestTimedOut

    before = engine.batcher.request_seconds
    engine.batcher.request_seconds = 0.2
    try:
        got = []
        with pytest.raises(RequestTimedOut, match="ran past this endpoint's limit of 0.2 s"):
            for step in engine.stream(None, PROMPTS[3], 4000):
                got.append(step)
        assert 0 < len(got) < 4000  # what was generated in time was handed over
    finally:
        engine.batcher.request_seconds = before
    assert engine.batcher.load == {"running": 0, "waiting": 0}


def test_biases_penalties_and_filters_shape_each_row_of_one_batch(engine):
    from optimize.serving.sampling import Shaping

    prompt = PROMPTS[2]
    greedy = answer(engine, None, prompt, 6)
    forced = answer(engine, None, prompt, 6, shaping=Shaping(logit_bias={77: 100.0}))
    assert forced == [77] * 6  # a +100 bias wins every step
    avoided = answer(engine, None, prompt, 6, shaping=Shaping(logit_bias={greedy[0]: -100.0}))
    assert avoided[0] != greedy[0]
    # the likeliest token alone left to sample from: sampling at temperature 1 answers greedily
    for only_top in (Shaping(top_k=1), Shaping(min_p=1.0)):
        assert answer(engine, None, prompt, 6, temperature=1.0, seed=5, shaping=only_top) == greedy
    no_repeats = answer(engine, None, prompt, 12, shaping=Shaping(presence_penalty=2.0, frequency_penalty=2.0,
                                                                   repetition_penalty=2.0))
    assert len(set(no_repeats)) > len(set(answer(engine, None, prompt, 12)))  # the penalties spread the answer
    asks = [(None, prompt, Shaping(logit_bias={77: 100.0})), (None, prompt, None)]
    together = [None, None]

    def ask(index, shaping):
        together[index] = answer(engine, None, prompt, 6, shaping=shaping)

    threads = [threading.Thread(target=ask, args=(i, shaping)) for i, (_, _, shaping) in enumerate(asks)]
    with engine.lock:  # both wait, then join one prefill: a shaped row beside a plain one
        for thread in threads:
            thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(60)
    assert together == [[77] * 6, greedy]


def test_the_same_prompt_asked_together_is_prefilled_once_and_answers_alike(engine, monkeypatch):
    prompt = [1, 5, 9, 13]  # asked nowhere else: no kept prefix of it
    prefilled = []
    forward = engine.forward

    def counting(adapters, **arguments):
        if "logits_to_keep" in arguments:  # a prefill
            prefilled.append(arguments["input_ids"].shape[0])
        return forward(adapters, **arguments)

    monkeypatch.setattr(engine, "forward", counting)
    answers = [None] * 3

    def ask(index):
        answers[index] = answer(engine, None, prompt, 8)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    with engine.lock:  # the three wait together, then join one prefill
        for thread in threads:
            thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(60)
    assert prefilled == [1]  # one row computed, copied for each
    assert answers == [answer(engine, None, prompt, 8)] * 3
