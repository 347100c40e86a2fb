"""Facts read from a model's own files (no torch), the shape check, and `base-models add` references."""

from __future__ import annotations

import json
import struct

import pytest

from optimize.catalog.additions import parse_reference
from optimize.catalog.facts import architecture_of, check_shape, read_folder_facts, shape_mismatches
from optimize.core.errors import Invalid


def _safetensors(path, tensors: dict[str, list[int]]) -> None:
    header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in tensors.items()}
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_folder_facts_count_parameters_in_the_safetensors_headers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "max_position_embeddings": 128}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    _safetensors(tmp_path / "model-00001-of-00002.safetensors", {"embed": [16, 8]})
    _safetensors(tmp_path / "model-00002-of-00002.safetensors", {"a": [8, 8], "b": [8]})
    facts = read_folder_facts(tmp_path, "the folder")
    assert facts.parameters == 16 * 8 + 64 + 8 and facts.context_length == 128
    assert facts.architecture == {"class": "LlamaForCausalLM", "modelType": "llama", "hiddenSize": 8, "layers": 2,
                                  "heads": 2, "kvHeads": 1, "vocab": 16}
    assert facts.chat_template_sha256 and not facts.mixture_of_experts
    # the template file wins over the tokenizer config's, as in Transformers
    (tmp_path / "chat_template.jinja").write_text("other")
    assert read_folder_facts(tmp_path, "x").chat_template_sha256 != facts.chat_template_sha256


def test_multimodal_configs_are_read_from_text_config():
    found = architecture_of({"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                             "text_config": {"hidden_size": 1536, "num_hidden_layers": 35, "vocab_size": 262144}})
    assert found["hiddenSize"] == 1536 and found["layers"] == 35 and found["class"] == "Gemma4ForConditionalGeneration"


def test_shape_check_names_each_field_and_skips_what_the_entry_leaves_out():
    expected = {"class": "LlamaForCausalLM", "hiddenSize": 576, "layers": 30, "vocab": 49152, "mixtureOfExperts": None}
    found = {"class": "LlamaForCausalLM", "hiddenSize": 256, "layers": 30, "vocab": 2048, "heads": 4}
    assert shape_mismatches(expected, found) == [("hiddenSize", 576, 256), ("vocab", 49152, 2048)]
    assert shape_mismatches({}, found) == []

    class Facts:
        architecture = found

    with pytest.raises(Invalid) as refused:
        check_shape("a/b", expected, Facts(), "the folder /x")
    assert "architecture.hiddenSize: a/b has 576, the files have 256" in refused.value.message


def test_add_references():
    assert parse_reference("Qwen/Qwen2.5-0.5B-Instruct") == ("Qwen/Qwen2.5-0.5B-Instruct", None)
    assert parse_reference("acme/model@v1.0") == ("acme/model", "v1.0")
    for bad in ("model", "a/b/c", "acme/model@", "/model"):
        with pytest.raises(Invalid):
            parse_reference(bad)
