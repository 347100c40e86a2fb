"""Batches of rows with images: TRL's padding of the token columns, and each row's images as the model's processor
prepares them (`chat.vision.ImageTokens.pixels`), made as a batch is collated, so no pixels are kept on disk and
memory holds one batch's. A row's image files are its `image_files` column, beside its token ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGE_COLUMN = "image_files"


@dataclass
class ImageRowsCollator:
    tokens: Any  # TRL's DataCollatorForLanguageModeling: input_ids and labels padded
    images: Any  # chat.vision.ImageTokens of the model

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        files = [list(example.get(IMAGE_COLUMN) or []) for example in examples]
        batch = self.tokens([{k: v for k, v in example.items() if k != IMAGE_COLUMN} for example in examples])
        pixels = self.images.pixels(files)
        if pixels is not None:
            batch.update(pixels)
        return batch


def image_collator(model_dir: str, pad_token_id: int, *datasets: Any) -> ImageRowsCollator | None:
    """The collator for a run whose rows name images (a dataset with the image column), or None."""
    if not any(dataset is not None and IMAGE_COLUMN in dataset.column_names for dataset in datasets):
        return None
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from optimize.chat.vision import ImageTokens

    return ImageRowsCollator(DataCollatorForLanguageModeling(pad_token_id=pad_token_id),
                             ImageTokens.from_pretrained(model_dir))
