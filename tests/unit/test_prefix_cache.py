"""Kept prompt prefixes (`serving.prefix_cache`) and the cache layer with room to grow (`serving.kv_room`): the
longest kept prefix is found (always leaving the prompt's last token to compute), per model; the budget drops the
least recently used; an engine answers a repeated prompt from its kept prefix with the same greedy answer as
without one, and forgets its prefixes when an adapter loads."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from optimize.serving.prefix_cache import BLOCK, PrefixCache  # noqa: E402


def layers(tokens: int, fill: float = 1.0):
    return [(torch.full((1, 2, tokens, 4), fill), torch.full((1, 2, tokens, 4), -fill)) for _ in range(3)]


def test_the_longest_kept_prefix_is_found_leaving_the_last_token_to_compute():
    cache = PrefixCache(budget=1000)
    prompt = list(range(3 * BLOCK + 5))
    cache.keep("m", prompt, layers(len(prompt)))
    assert cache.size == len(prompt)
    found, length = cache.find("m", prompt)
    assert length == len(prompt) - 1 and found.layers[0][0].shape[2] == len(prompt)  # all but the last token
    assert cache.find("m", prompt[:3 * BLOCK])[1] == 3 * BLOCK - 1
    assert cache.find("m", prompt[:BLOCK + 3] + [999] * 40)[1] == BLOCK + 3  # on, token by token, to where it parts
    assert cache.find("m", prompt + [7, 8, 9])[1] == len(prompt)  # a conversation that goes on: the whole kept one
    assert cache.find("m", prompt[:BLOCK])[1] == 0  # less than a block before its last token: nothing to find
    assert cache.find("other", prompt) == (None, 0)  # another model's prefix is not this one's
    assert cache.find("m", [7] + prompt) == (None, 0)
    assert PrefixCache.holds(found, prompt[:20]) and not PrefixCache.holds(found, prompt + [1])


def test_the_budget_drops_the_least_recently_used_prefix():
    cache = PrefixCache(budget=4 * BLOCK + 2)
    first, second, third = ([n] * (2 * BLOCK + 1) for n in (1, 2, 3))
    cache.keep(None, first, layers(len(first)))
    cache.keep(None, second, layers(len(second)))
    assert cache.find(None, first)[1] == 2 * BLOCK  # used: now the second is the least recent
    cache.keep(None, third, layers(len(third)))
    assert cache.size == 4 * BLOCK + 2
    assert cache.find(None, second) == (None, 0)
    assert cache.find(None, first)[1] == cache.find(None, third)[1] == 2 * BLOCK
    assert all(entry in cache.entries for entry in cache.index.values())  # no index key points at a dropped one
    cache.keep(None, [5] * (5 * BLOCK), layers(5 * BLOCK))  # longer than the whole budget: not kept
    assert cache.size == 4 * BLOCK + 2


def test_a_room_layer_appends_in_place_and_moves_when_replaced():
    from optimize.serving.kv_room import RoomyLayer

    layer, plain = RoomyLayer(), []
    steps = [torch.randn(2, 3, n, 4) for n in (5, 1, 1, 1)]
    for step in steps:
        keys, values = layer.update(step, -step)
        plain.append(step)
        assert torch.equal(keys, torch.cat(plain, dim=2)) and torch.equal(values, -torch.cat(plain, dim=2))
    room = layer._key_room.data_ptr()
    layer.update(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4))
    assert layer._key_room.data_ptr() == room  # written into the room: no copy
    layer.keys, layer.values = layer.keys[:1], layer.values[:1]  # a row left (the batcher's cut)
    keys, _ = layer.update(torch.ones(1, 3, 1, 4), torch.ones(1, 3, 1, 4))
    assert keys.shape == (1, 3, 10, 4) and layer._key_room.shape[0] == 1
    assert torch.equal(keys[:, :, -1], torch.ones(1, 3, 4))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from optimize.catalog.standins import StandIn, build

    root = tmp_path_factory.mktemp("prefixes")
    build(StandIn("llama3.2"), root / "model")
    torch.manual_seed(1)
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "model"),
                          LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False))
    peft.save_pretrained(root / "adapter")
    return root


def test_a_repeated_prompt_is_answered_from_its_kept_prefix_with_the_same_answer(model_dir, monkeypatch):
    from optimize.serving import engine as serving_engine

    prompt = [1] + [100 + (j * 37) % 900 for j in range(3 * BLOCK + 2)]
    monkeypatch.setattr(serving_engine, "PREFIX_TOKENS", 0)
    bare = serving_engine.ServingModel(model_dir / "model")
    try:
        bare.load_adapter("one", model_dir / "adapter")
        expected = {adapter: [s.token for s in bare.stream(adapter, prompt, 12)] for adapter in (None, "one")}
    finally:
        bare.close()
    monkeypatch.setattr(serving_engine, "PREFIX_TOKENS", 4096)
    engine = serving_engine.ServingModel(model_dir / "model")
    try:
        engine.load_adapter("one", model_dir / "adapter")
        for adapter in (None, "one"):
            first = engine.stream(adapter, prompt, 12)
            assert [s.token for s in first] == expected[adapter] and first.sequence.cached == 0
            again = engine.stream(adapter, prompt, 12)  # kept but for its last token: joins with no prefill
            assert [s.token for s in again] == expected[adapter]
            assert again.sequence.cached == len(prompt) - 1
        longer = engine.stream(None, prompt + [321, 654], 4)  # a conversation that goes on: its start is kept
        assert len(list(longer)) == 4 and longer.sequence.cached == len(prompt)
        engine.load_adapter("two", model_dir / "adapter")  # kept prefixes were computed with other adapters
        assert engine.prefixes.size == 0
    finally:
        engine.close()
