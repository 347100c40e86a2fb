"""Offline stand-ins: tiny models of each real family, built here, deterministically, with no download.

Each stand-in uses its family's own Transformers architecture class with random weights from a fixed seed, a
byte-level BPE tokenizer trained on the corpus shipped with this package (with the family's special tokens),
and the family's real chat template as shipped inside the installed TRL package (read at build time, never
copied into this repository). TRL ships no SmolLM2 template, so the SmolLM2 stand-ins use Optimize's own
ChatML template with tools (`standin_template.jinja`) and say so in the catalog. TRL ships no SmolVLM template
either: `smolvlm_template.jinja` is the one SmolVLM's repository ships, which renders only content written as
parts (the renderer writes text content as parts for this family, `chat.families.content_as_parts`).

A family that takes images (SmolVLM) is built as its architecture is: a tiny vision tower and a tiny language
model, with the family's processor (image tiles, image tokens) saved beside the tokenizer.

The "commit" of a stand-in is the sha256 over its files, so the same build on two machines (same pinned
library versions) is the same commit. torch/transformers/tokenizers are imported only inside the builder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from optimize.core.digests import file_sha256

SEED = 0
CORPUS = "standin_corpus.txt"


@dataclass(frozen=True, slots=True)
class Family:
    """How to build one family's stand-in: architecture, tokens and template."""

    name: str
    model_type: str
    template: str  # "trl:<file>" or "optimize:<file>"
    special_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str
    stop_tokens: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)
    # a family that takes images: its vision tower, its scale factor and its image processor's sizes
    vision: dict[str, Any] | None = None


_LLAMA_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 4096, "tie_word_embeddings": True}

FAMILIES: dict[str, Family] = {
    "llama3.2": Family(
        "llama3.2", "llama", "trl:llama3_2.jinja",
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"),
        bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>",
        stop_tokens=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), config=_LLAMA_SMALL,
    ),
    "qwen2.5": Family(
        "qwen2.5", "qwen2", "trl:qwen2_5.jinja",
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"),
        bos=None, eos="<|im_end|>", pad="<|endoftext|>", stop_tokens=("<|im_end|>", "<|endoftext|>"),
        config={**_LLAMA_SMALL, "use_sliding_window": False},
    ),
    "gemma4": Family(
        "gemma4", "gemma4_text", "trl:gemma4_v5.jinja",
        ("<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
         "<|tool_response>", "<tool_response|>", "<|channel>", "<channel|>", "<|think|>", '<|"|>', "<|image|>",
         "<|audio|>", "<|video|>"),
        bos="<bos>", eos="<turn|>", pad="<pad>", stop_tokens=("<turn|>", "<|tool_response>", "<eos>"),
        config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096, "sliding_window": 64,
                "hidden_size_per_layer_input": 8, "layer_types": ["sliding_attention", "full_attention"],
                "tie_word_embeddings": True},
    ),
    "smollm2": Family(
        "smollm2", "llama", "optimize:standin_template.jinja",
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"),
        bos=None, eos="<|im_end|>", pad="<|endoftext|>", stop_tokens=("<|im_end|>", "<|endoftext|>"),
        config=_LLAMA_SMALL,
    ),
    "smolvlm": Family(
        "smolvlm", "llama", "optimize:smolvlm_template.jinja",
        ("<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
         "<global-img>", *(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))),
        bos="<|im_start|>", eos="<end_of_utterance>", pad="<|endoftext|>",
        stop_tokens=("<end_of_utterance>", "<|endoftext|>"), config=_LLAMA_SMALL,
        # 32-pixel tiles of 8-pixel patches, merged 2x2: 4 image tokens a tile; an image's longest side is
        # resized to 64, so a picture is at most 2x2 tiles and a global one
        vision={"tower": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
                "scale_factor": 2, "longest_edge": 64, "tile": 32},
    ),
}

# Sizes: "tiny" for tests (about 0.2M parameters), "small" for the quickstart (a few million). The small one starts
# its weights wider than Transformers' 0.02: a LoRA run freezes the tied embeddings and the final norm, and at 0.02
# a random model's logits cannot rise past about 5 (|embedding| x |normed state| = 0.32 x 16 here), too little to
# pick one answer out of 2048 tokens with confidence (training loss stalls near 2.8); at 0.05 its adapters learn
# the quickstart's triage task and answer held-out tickets.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"vocab_size": 1024},
    "small": {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.05},
}


@dataclass(frozen=True, slots=True)
class StandIn:
    """A stand-in named by a catalog entry: which family, which size."""

    family: str
    size: str = "tiny"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown stand-in family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.size not in SIZES:
            raise ValueError(f"unknown stand-in size {self.size!r}; known: {', '.join(SIZES)}")


def template_text(family: Family) -> str:
    source, _, name = family.template.partition(":")
    package = "trl" if source == "trl" else "optimize.catalog"
    folder = resources.files(package).joinpath("chat_templates") if source == "trl" else resources.files(package)
    return folder.joinpath(name).read_text(encoding="utf-8")


def files_digest(directory: Path) -> str:
    """The commit of a model folder: sha256 over the sorted (relative path, file sha256) listing."""
    listing = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        listing.append(f"{path.relative_to(directory).as_posix()} {file_sha256(path)}\n")
    return hashlib.sha256("".join(listing).encode()).hexdigest()


def _train_tokenizer(family: Family, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(family.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    corpus = resources.files("optimize.catalog").joinpath(CORPUS).read_text(encoding="utf-8").splitlines()
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=family.bos, eos_token=family.eos, pad_token=family.pad,
        model_max_length=4096, clean_up_tokenization_spaces=False,
    )
    wrapped.chat_template = template_text(family)
    return wrapped


def _config(family: Family, size: str, tokenizer) -> Any:
    from transformers import AutoConfig

    settings = {**family.config, **SIZES[size]}
    if family.name == "gemma4":
        settings["vocab_size_per_layer_input"] = settings["vocab_size"]
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in
           (("pad_token_id", family.pad), ("eos_token_id", family.eos))}
    if family.bos:
        ids["bos_token_id"] = tokenizer.convert_tokens_to_ids(family.bos)
    return AutoConfig.for_model(family.model_type, **settings, **ids)


def _vision_config(family: Family, text_config: Any, tokenizer) -> Any:
    """The whole model's config of a family that takes images: its tower, and `text_config` as its language model."""
    from transformers import Idefics3Config

    vision = family.vision or {}
    return Idefics3Config(text_config=text_config.to_dict(), vision_config=vision["tower"],
                          scale_factor=vision["scale_factor"],
                          image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
                          pad_token_id=text_config.pad_token_id, tie_word_embeddings=text_config.tie_word_embeddings)


def _save_processor(family: Family, tokenizer, directory: Path) -> None:
    """A family that takes images: its processor (the image processor's tiles, the image tokens a tile takes, the
    chat template) saved beside the tokenizer, as the family's repositories hold it."""
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    vision = family.vision or {}
    tower = vision["tower"]
    image_tokens = (tower["image_size"] // tower["patch_size"]) ** 2 // vision["scale_factor"] ** 2
    images = Idefics3ImageProcessorPil(size={"longest_edge": vision["longest_edge"]},
                                       max_image_size={"longest_edge": vision["tile"]})
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=image_tokens,
                      chat_template=tokenizer.chat_template).save_pretrained(directory)


def build(stand_in: StandIn, target: Path) -> str:
    """Build the stand-in into `target` (replacing it) and return its commit."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    family = FAMILIES[stand_in.family]
    staging = target.with_name(target.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tokenizer = _train_tokenizer(family, SIZES[stand_in.size]["vocab_size"])
    config = _config(family, stand_in.size, tokenizer)
    if family.vision:
        config = _vision_config(family, config, tokenizer)
    torch.manual_seed(SEED)
    loader = AutoModelForImageTextToText if family.vision else AutoModelForCausalLM
    model = loader.from_config(config, dtype=torch.float32)
    text_config = config.get_text_config()
    model.generation_config = GenerationConfig(
        bos_token_id=text_config.bos_token_id if family.bos else None,
        eos_token_id=[tokenizer.convert_tokens_to_ids(token) for token in family.stop_tokens],
        pad_token_id=text_config.pad_token_id,
    )
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if family.vision:
        _save_processor(family, tokenizer, staging)
    (staging / "optimize-standin.json").write_text(
        json.dumps({"family": stand_in.family, "size": stand_in.size, "seed": SEED,
                    "template": family.template}, indent=2, sort_keys=True) + "\n"
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return files_digest(target)


def main(argv: list[str] | None = None) -> None:
    """`python -m optimize.catalog.standins FAMILY SIZE DIR`: build one stand-in (used by the server)."""
    import sys

    family, size, directory = (argv or sys.argv[1:])[:3]
    print(build(StandIn(family, size), Path(directory)))


if __name__ == "__main__":
    main()
