"""Stand-ins are built offline and deterministically: same files, same commit, reloadable with no hub."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources

import pytest

from optimize.catalog.standins import FAMILIES, StandIn, build, files_digest


@pytest.mark.parametrize("family", list(FAMILIES))
def test_building_twice_gives_the_same_commit(standin_dirs, tmp_path, family):
    path, commit = standin_dirs[family]
    assert build(StandIn(family), tmp_path / "again") == commit == files_digest(path)


def test_a_build_in_another_process_gives_the_same_commit(standin_dirs, tmp_path):
    done = subprocess.run([sys.executable, "-m", "optimize.catalog.standins", "smollm2", "tiny", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == standin_dirs["smollm2"][1]


@pytest.mark.parametrize("family", ["llama3.2", "qwen2.5", "gemma4"])
def test_template_is_the_one_shipped_inside_trl(standin_dirs, family):
    name = FAMILIES[family].template.split(":")[1]
    shipped = resources.files("trl").joinpath("chat_templates", name).read_text(encoding="utf-8")
    assert (standin_dirs[family][0] / "chat_template.jinja").read_text(encoding="utf-8") == shipped


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reloads_offline_with_its_family_class(standin_dirs, family, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from optimize.chat.vision import auto_model

    path = standin_dirs[family][0]
    model = auto_model(path).from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    expected = {"llama3.2": "LlamaForCausalLM", "smollm2": "LlamaForCausalLM", "qwen2.5": "Qwen2ForCausalLM",
                "gemma4": "Gemma4ForCausalLM", "smolvlm": "Idefics3ForConditionalGeneration"}
    assert type(model).__name__ == expected[family]
    for token in FAMILIES[family].special_tokens:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids[0]) == token


def test_the_smolvlm_stand_in_carries_its_processor_with_its_template(standin_dirs):
    from transformers import AutoProcessor

    path = standin_dirs["smolvlm"][0]
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    assert type(processor).__name__ == "Idefics3Processor" and processor.image_seq_len == 4
    shipped = resources.files("optimize.catalog").joinpath("smolvlm_template.jinja").read_text(encoding="utf-8")
    assert processor.chat_template == shipped
