"""Models that take images (SmolVLM, an Idefics3 architecture): the Transformers class that loads one, and a row's
rendered text with each image placeholder expanded into the image tokens the model's processor writes for that
image.

The expansion is the processor's own rule, asked of the processor: how many tiles an image of that size is cut
into (`get_number_of_image_patches`) and the text written for them (`replace_image_token`). So a row's length is
what the processor counts, image tokens included, without reading an image's pixels — its size is enough. Pixel
values are the processor's too, made for a batch when it is collated (`ImageTokens.pixels`).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the model types (config.json `model_type`) whose models read images beside the text
VISION_MODEL_TYPES = frozenset({"idefics3"})


def model_type(model_dir: str | Path) -> str | None:
    try:
        return json.loads((Path(model_dir) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None


def takes_images(model_dir: str | Path) -> bool:
    """Whether the model in `model_dir` reads images (its architecture has a vision tower)."""
    return model_type(model_dir) in VISION_MODEL_TYPES


def auto_model(model_dir: str | Path):
    """The Transformers auto class that loads the model in `model_dir` with its language-model head."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if takes_images(model_dir) else AutoModelForCausalLM


def image_size(path: str | Path) -> tuple[int, int]:
    """(height, width) of an image file, from its header."""
    from PIL import Image

    with Image.open(path) as image:
        return int(image.height), int(image.width)


@dataclass(frozen=True, slots=True)
class Expansion:
    """A text with its image placeholders expanded: where each was, and how long its expansion is."""

    text: str
    starts: tuple[int, ...]  # each placeholder's start in the unexpanded text
    growth: tuple[int, ...]  # the characters each expansion adds, cumulative

    def position(self, at: int) -> int:
        """Where a position of the unexpanded text is in the expanded one."""
        index = bisect_right(self.starts, at - 1)  # placeholders that start before `at`
        return at + (self.growth[index - 1] if index else 0)

    def spans(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(self.position(a), self.position(b)) for a, b in spans]


class ImageTokens:
    """A model's processor: its image placeholder, the tokens it writes for an image of a size, and the pixels."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.placeholder: str = processor.image_token

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> ImageTokens:
        from transformers import AutoProcessor

        return cls(AutoProcessor.from_pretrained(str(model_dir)))

    def replacement(self, size: tuple[int, int]) -> str:
        """The text the processor writes for an image of (height, width): its tiles' tokens and the global one."""
        _, rows, cols = self.processor.image_processor.get_number_of_image_patches(*size, {})
        return self.processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)

    def expand(self, text: str, sizes: list[tuple[int, int]]) -> Expansion:
        """`text` with its placeholders, in order, expanded for images of `sizes`; a count that differs from the
        placeholders the template wrote is a RenderError (the chat template left out an image part)."""
        from optimize.chat.render import RenderError

        pieces = text.split(self.placeholder)
        if len(pieces) - 1 != len(sizes):
            raise RenderError(f"the chat template writes {len(pieces) - 1} image placeholder(s) for a row with "
                              f"{len(sizes)} image(s)")
        out, starts, growth, at, grown = [pieces[0]], [], [], len(pieces[0]), 0
        for size, piece in zip(sizes, pieces[1:], strict=True):
            replacement = self.replacement(size)
            starts.append(at)
            grown += len(replacement) - len(self.placeholder)
            growth.append(grown)
            out += [replacement, piece]
            at += len(self.placeholder) + len(piece)
        return Expansion("".join(out), tuple(starts), tuple(growth))

    def pixels(self, images: list[list[str]]) -> dict[str, Any] | None:
        """Pixel values and the mask of real pixels for a batch, each row's image files in order, prepared by the
        processor one row at a time and padded with zeros to the batch's most tiles and largest tile (the model
        leaves out an all-zero tile); None for a batch without images."""
        import torch
        from PIL import Image

        if not any(images):
            return None
        prepared = []
        for row in images:
            if not row:
                prepared.append(None)
                continue
            opened = [Image.open(path).convert("RGB") for path in row]
            features = self.processor.image_processor(images=[opened], return_tensors="pt")
            prepared.append((features["pixel_values"][0], features["pixel_attention_mask"][0]))
        tiles = max(p[0].shape[0] for p in prepared if p is not None)
        channels, height, width = (max(p[0].shape[i] for p in prepared if p is not None) for i in (1, 2, 3))
        values = torch.zeros(len(images), tiles, channels, height, width)
        mask = torch.zeros(len(images), tiles, height, width, dtype=torch.bool)
        for index, item in enumerate(prepared):
            if item is not None:
                pixels, real = item
                values[index, : pixels.shape[0], :, : pixels.shape[2], : pixels.shape[3]] = pixels
                mask[index, : real.shape[0], : real.shape[1], : real.shape[2]] = real.bool()
        return {"pixel_values": values, "pixel_attention_mask": mask}
