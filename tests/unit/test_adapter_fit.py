"""Whether a PEFT LoRA adapter made elsewhere fits a base model (`training.adapter_fit`), read from the files'
headers alone: each refusal names the base, the module and both shapes, or what in the config is not servable."""

from __future__ import annotations

import json
import struct

import pytest

from optimize.core.errors import Invalid, Refused
from optimize.training.adapter_fit import base_shapes, check_fit, read_config, tensor_shapes

BASE = {"model.layers.0.self_attn.q_proj.weight": [64, 64], "model.layers.0.self_attn.v_proj.weight": [32, 64],
        "model.embed_tokens.weight": [1024, 64]}
CONFIG = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
          "base_model_name_or_path": "/somewhere/optimize--tiny-llama-3.2"}
OTHERS = {"optimize/tiny-qwen2.5": "optimize/tiny-qwen2.5"}


def adapter(rank: int = 4, v_out: int = 32) -> dict[str, list[int]]:
    return {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": [rank, 64],
            "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": [64, rank],
            "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight": [rank, 64],
            "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight": [v_out, rank]}


def fit(config=CONFIG, tensors=None):
    return check_fit(config, adapter() if tensors is None else tensors, BASE, "optimize/tiny-llama-3.2",
                     "optimize/tiny-llama-3.2", "c" * 40, OTHERS)


def test_an_adapter_that_fits_says_its_rank_alpha_and_modules():
    found = fit()
    assert (found.rank, found.alpha, found.modules) == (4, 8.0, ["q_proj", "v_proj"])


def test_a_module_whose_shapes_do_not_fit_is_named_with_both_shapes():
    with pytest.raises(Refused) as refused:
        fit(tensors=adapter(v_out=64))
    assert refused.value.message == (
        "the adapter does not fit base model optimize/tiny-llama-3.2: module model.layers.0.self_attn.v_proj is "
        "[32, 64] in the base, and the adapter's lora_A is [4, 64] and lora_B [64, 4] (rank 4 expects lora_A "
        "[4, 64] and lora_B [32, 4])")
    with pytest.raises(Refused, match="rank 4 expects"):
        fit(tensors=adapter(rank=8))  # the files say rank 8, the config 4
    with pytest.raises(Refused, match="adapts module model.layers.9.mlp.up_proj, which base model "
                                      "optimize/tiny-llama-3.2 does not have"):
        fit(tensors={**adapter(), "base_model.model.model.layers.9.mlp.up_proj.lora_A.weight": [4, 64],
                     "base_model.model.model.layers.9.mlp.up_proj.lora_B.weight": [64, 4]})


@pytest.mark.parametrize(("change", "words"), [
    ({"peft_type": "IA3"}, "not a LoRA adapter (adapter_config.json says peft_type 'IA3')"),
    ({"use_dora": True}, "is a DoRA adapter (use_dora: true)"),
    ({"modules_to_save": ["lm_head"]}, "saves whole modules beside its LoRA weights (modules_to_save: ['lm_head'])"),
    ({"r": 0}, "the adapter's rank r is 0; an imported adapter has a rank from 1 to 1024"),
    ({"base_model_name_or_path": "Optimize/Tiny-Qwen2.5"},
     "the adapter was made for Optimize/Tiny-Qwen2.5, not for base model optimize/tiny-llama-3.2"),
    ({"revision": "d" * 40}, f"made at commit {'d' * 40} of optimize/tiny-llama-3.2"),
])
def test_what_an_endpoint_cannot_serve_is_refused_by_name(change, words):
    with pytest.raises(Refused) as refused:
        fit({**CONFIG, **change})
    assert words in refused.value.message


def test_tensors_that_are_not_lora_weights_are_refused():
    with pytest.raises(Refused, match="holds a tensor that is not a LoRA weight: base_model.model.lm_head.weight"):
        fit(tensors={**adapter(), "base_model.model.lm_head.weight": [1024, 64]})
    with pytest.raises(Refused, match="holds DoRA magnitudes"):
        fit(tensors={**adapter(), "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector": [64]})
    with pytest.raises(Refused, match="holds no LoRA weights"):
        fit(tensors={})


def test_the_files_are_read_from_their_headers(tmp_path):
    def safetensors(path, shapes):
        header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in shapes.items()}
        data = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(data)) + data)
        return path

    assert tensor_shapes(safetensors(tmp_path / "a.safetensors", adapter()), "adapter") == adapter()
    safetensors(tmp_path / "model.safetensors", BASE)
    assert base_shapes(tmp_path) == BASE
    (tmp_path / "junk.safetensors").write_bytes(b"not one")
    with pytest.raises(Invalid, match="adapter_model.safetensors is not a safetensors file"):
        tensor_shapes(tmp_path / "junk.safetensors", "adapter_model.safetensors")
    with pytest.raises(Invalid, match="adapter_config.json is not JSON"):
        read_config(b"{")
    with pytest.raises(Invalid, match="is not a JSON object"):
        read_config(b"[1]")
