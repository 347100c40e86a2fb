"""Rows with images on the SmolVLM stand-in: the renderer expands each image placeholder into exactly the tokens
the model's own processor writes (for images of several sizes, tiled and not), trains only the answer, and names
the row's image files; text rows render every message's text (SmolVLM's template renders only parts); a batch's
pixels are padded to its most tiles; a LoRA adapter leaves the vision tower and the connector alone."""

from __future__ import annotations

import pytest
from PIL import Image

from optimize.chat.normalize import normalize_messages
from optimize.chat.render import LossPolicy, RenderError


@pytest.fixture(scope="module")
def smolvlm(renderers):
    return renderers["smolvlm"]


def page(tmp_path, size, colour=(200, 30, 30)):
    path = tmp_path / f"page-{size[0]}x{size[1]}.png"
    Image.new("RGB", size, colour).save(path)
    return str(path)


def image_row(files: list[str], answer: str = "It is red.") -> dict:
    parts = [{"type": "image", "path": f"images/{i}.png", "file": f} for i, f in enumerate(files)]
    return {"messages": [{"role": "user", "content": [*parts[:1], {"type": "text", "text": "What colour?"},
                                                       *parts[1:]]},
                         {"role": "assistant", "content": answer}]}


@pytest.mark.parametrize("sizes", [[(80, 50)], [(20, 10)], [(300, 120), (33, 70)], [(64, 64), (10, 90)]])
def test_images_expand_into_the_tokens_the_processor_writes(smolvlm, tmp_path, sizes):
    files = [page(tmp_path, size) for size in sizes]
    row = image_row(files)
    rendered = smolvlm.render(row, LossPolicy())
    unexpanded = smolvlm.text(normalize_messages(row["messages"]), None)
    images = [Image.open(f).convert("RGB") for f in files]
    assert smolvlm.images.processor(text=[unexpanded], images=[images])["input_ids"][0] == rendered.input_ids
    assert rendered.images == tuple(files)
    trained = smolvlm.tokenizer.decode([t for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True) if m])
    assert trained == " It is red.<end_of_utterance>"


def test_a_text_row_renders_every_message_s_text_on_smolvlm(smolvlm):
    row = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                        {"role": "assistant", "content": "Hello."}]}
    rendered = smolvlm.render(row, LossPolicy())
    assert rendered.text == ("<|im_start|>System: Be brief.<end_of_utterance>\nUser: Hi there<end_of_utterance>\n"
                             "Assistant: Hello.<end_of_utterance>\n")
    assert smolvlm.text(row["messages"][:2], None, generation_prompt=True).endswith("Hi there<end_of_utterance>\n"
                                                                                  "Assistant:")


def test_an_image_the_job_did_not_fetch_or_a_model_without_images_is_refused(smolvlm, renderers, tmp_path):
    row = image_row([page(tmp_path, (20, 20))])
    unfetched = {"messages": [{**row["messages"][0], "content": [{"type": "image", "path": "images/0.png"}]},
                              row["messages"][1]]}
    with pytest.raises(RenderError, match="was not fetched"):
        smolvlm.render(unfetched, LossPolicy())
    with pytest.raises(RenderError, match="the model reads none"):
        renderers["llama3.2"].render(row, LossPolicy())


def test_a_batch_s_pixels_are_padded_to_its_most_tiles(smolvlm, tmp_path):
    many, one = page(tmp_path, (300, 120)), page(tmp_path, (10, 10))
    pixels = smolvlm.images.pixels([[many, one], [], [one]])
    assert pixels["pixel_values"].shape[:2] == pixels["pixel_attention_mask"].shape[:2]
    assert pixels["pixel_values"][1].abs().sum() == 0 and not pixels["pixel_attention_mask"][1].any()
    assert smolvlm.images.pixels([[], []]) is None


def test_lora_adapts_the_language_model_and_leaves_the_vision_tower_alone(standin_dirs):
    from peft import LoraConfig, get_peft_model

    from optimize.chat.vision import auto_model
    from optimize.training.engines.harness import vision_modules

    path = str(standin_dirs["smolvlm"][0])
    model = auto_model(path).from_pretrained(path)
    adapted = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", exclude_modules=vision_modules(path),
                                               task_type="CAUSAL_LM"))
    names = {name for name, _ in adapted.named_parameters() if "lora_A" in name}
    assert names and all(".text_model." in name for name in names)
    assert vision_modules(str(standin_dirs["llama3.2"][0])) is None


def test_a_pair_batch_carries_each_prompt_s_pixels_for_its_chosen_and_its_rejected_answer(smolvlm, tmp_path):
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    from optimize.training.prep.image_batches import IMAGE_COLUMN, ImageRowsCollator

    collate = ImageRowsCollator(DataCollatorForPreference(pad_token_id=0), smolvlm.images, sequences_per_row=2)
    red, blue = page(tmp_path, (20, 20)), page(tmp_path, (30, 30), (0, 0, 200))
    batch = collate([{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4], IMAGE_COLUMN: [red]},
                     {"prompt_ids": [5], "chosen_ids": [6], "rejected_ids": [7, 8], IMAGE_COLUMN: [blue]}])
    assert batch["input_ids"].shape[0] == batch["pixel_values"].shape[0] == 4
    assert (batch["pixel_values"][0] == batch["pixel_values"][2]).all()
    assert not (batch["pixel_values"][0] == batch["pixel_values"][1]).all()
