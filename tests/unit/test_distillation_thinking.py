"""A Gemma 4 teacher distilling with `--thinking on` (`worker.distillation`, on the tiny Gemma 4 stand-in): its
prompts ask it to think (the template's `enable_thinking`), and the reasoning it writes before its answer is taken
out of the row, while the output kept to read holds all it wrote."""

from __future__ import annotations

import pytest

from optimize.distillation.decisions import decisions
from optimize.worker.distillation import _Asker
from tests.conftest import built_standin

MODEL = "optimize/tiny-gemma-4"
ROW = {"messages": [{"role": "user", "content": "What is the capital of France?"},
                    {"role": "assistant", "content": "Paris."}]}


def asker(thinking: bool, tmp_path) -> _Asker:
    spec = {"model": {"id": MODEL, "family": "gemma4", "path": str(built_standin(MODEL)), "chatTemplate": "corrected"},
            "settings": {"maxTokens": 16, "maxModelLength": 512, "temperature": 0.0, "topP": 1.0, "seed": 0,
                         "thinking": thinking},
            "adapterManifest": None, "toolCallParser": "gemma4"}
    return _Asker(None, spec, tmp_path)


@pytest.fixture(scope="module")
def thinking(tmp_path_factory):
    made = asker(True, tmp_path_factory.mktemp("thinking"))
    yield made
    made.engine.close()


def test_thinking_prompts_ask_the_teacher_to_think(thinking, tmp_path):
    [decision] = decisions(ROW, 0)
    think = thinking.renderer.tokenizer.convert_tokens_to_ids("<|think|>")
    assert think in thinking._prompt(decision)
    plain = asker(False, tmp_path)
    try:
        assert think not in plain._prompt(decision)
    finally:
        plain.engine.close()


def test_the_reasoning_is_stripped_from_the_row_and_kept_in_the_output(thinking):
    [decision] = decisions(ROW, 0)
    tokenizer = thinking.renderer.tokenizer
    written = tokenizer("<|channel>thought\nFrance's capital.<channel|>It is Paris.", add_special_tokens=False)[
        "input_ids"] + [tokenizer.convert_tokens_to_ids("<turn|>")]
    verdict, output = thinking._judge(decision, written)
    assert verdict.accepted, verdict
    assert verdict.row["messages"][-1] == {"role": "assistant", "content": "It is Paris."}
    assert "France's capital." in output and "It is Paris." in output


def test_an_answer_that_is_all_reasoning_is_empty(thinking):
    [decision] = decisions(ROW, 0)
    tokenizer = thinking.renderer.tokenizer
    written = tokenizer("<|channel>thought\nHmm.<channel|>", add_special_tokens=False)["input_ids"] + [
        tokenizer.convert_tokens_to_ids("<turn|>")]
    verdict, output = thinking._judge(decision, written)
    assert not verdict.accepted and verdict.reason == "empty" and "Hmm." in output
