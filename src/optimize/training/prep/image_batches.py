"""Batches of rows with images: TRL's padding of the token columns, and each row's images as the model's processor
prepares them (`chat.vision.ImageTokens.pixels`), made as a batch is collated, so no pixels are kept on disk and
memory holds one batch's. A row's image files are its `image_files` column, beside its token ids. A batch of
preference pairs holds each pair twice (its chosen answers, then its rejected ones), and so its pixels too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGE_COLUMN = "image_files"


@dataclass
class ImageRowsCollator:
    tokens: Any  # TRL's collator of the method: its token columns padded
    images: Any  # chat.vision.ImageTokens of the model
    sequences_per_row: int = 1  # a preference pair's batch holds its chosen and its rejected answers

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        files = [list(example.get(IMAGE_COLUMN) or []) for example in examples] * self.sequences_per_row
        batch = self.tokens([{k: v for k, v in example.items() if k != IMAGE_COLUMN} for example in examples])
        pixels = self.images.pixels(files)
        if pixels is not None:
            batch.update(pixels)
        return batch


def image_collator(model_dir: str, pad_token_id: int, *datasets: Any, pairs: bool = False
                   ) -> ImageRowsCollator | None:
    """The collator for a run whose rows name images (a dataset with the image column), or None; `pairs`: the
    run trains preference pairs."""
    if not any(dataset is not None and IMAGE_COLUMN in dataset.column_names for dataset in datasets):
        return None
    from optimize.chat.vision import ImageTokens

    if pairs:
        from trl.trainer.dpo_trainer import DataCollatorForPreference

        tokens = DataCollatorForPreference(pad_token_id=pad_token_id)
    else:
        from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

        tokens = DataCollatorForLanguageModeling(pad_token_id=pad_token_id)
    return ImageRowsCollator(tokens, ImageTokens.from_pretrained(model_dir), 2 if pairs else 1)
