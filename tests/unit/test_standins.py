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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = standin_dirs[family][0]
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    expected = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gemma4_text": "Gemma4ForCausalLM"}
    assert type(model).__name__ == expected[FAMILIES[family].model_type]
    for token in FAMILIES[family].special_tokens:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids[0]) == token
