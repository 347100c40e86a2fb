"""A run over rows with images, refused at submission — before a device — where it could not train them as the
model reads them: on a model that reads no images, by a method that does not train images (a reinforcement run
rolls out text prompts), with tools in a dataset it reads (a run over images renders no row's tools, so it would
train unlike evaluation and serving), trimmed by turns (`data.truncation: oldest`, `oldest_or_drop`) or cut
(`right`: an image's tokens are whole or the row does not train), or answered by a smoke check (which answers text
prompts). Each refusal names the dataset.
"""

from __future__ import annotations

from typing import Any

from optimize.chat.families import reads_images
from optimize.core.errors import Refused
from optimize.workloads.datasets import DatasetPick

IMAGE_METHODS = ("sft", "dpo")  # the methods that train rows with images


def check_images(entry: Any, config: Any, engine: str, read: tuple[tuple[str, DatasetPick | None], ...]) -> None:
    """`read`: (field, dataset) of each dataset the run reads."""
    with_images = [(field, pick) for field, pick in read if pick is not None and pick.images]
    if not with_images:
        return
    field, first = with_images[0]
    holds = f"{field} {first.reference} holds rows with images ({first.images} image(s))"
    if not reads_images(entry.family):
        raise Refused(f"{holds}, and base model {entry.id} reads no images",
                      hint="train it on a model that takes images (the smolvlm family), or register the rows "
                           "without their image parts")
    if config.method not in IMAGE_METHODS:
        raise Refused(f"{holds}; a {config.method} run trains on text rows only",
                      hint="train rows with images with method " + " or ".join(IMAGE_METHODS))
    for tools_field, pick in read:
        if pick is not None and pick.tool_rows:
            raise Refused(f"{tools_field} {pick.reference} has {pick.tool_rows} row(s) that offer tools, and {holds}; "
                          f"the {engine} engine renders no row's tools in a run over rows with images, so the run "
                          "would train unlike evaluation and serving",
                          hint="remove tools from every row, or train the rows with images in a run of their own")
    if config.data.truncation in ("oldest", "oldest_or_drop", "right"):
        what = "removes whole turns" if config.data.truncation != "right" else "cuts a row's last tokens"
        raise Refused(f"data.truncation: {config.data.truncation} {what}, and {holds}: a row's images and their "
                      "tokens train whole or not at all", hint="set data.truncation to error or drop")
    if config.smoke is not None:
        raise Refused(f"a smoke check answers text prompts, and {holds}", hint="remove config.smoke")
