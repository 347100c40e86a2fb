"""Images in chat rows: a user message's content part `{"type": "image", "path": "images/x.png"}`, the path
relative to the rows' file, the image uploaded to the registry under the sha256 of its bytes. Which images a row
names, whether a path is a plain relative one, and whether bytes are an image the registry keeps (a PNG, JPEG,
WebP or GIF Pillow can read, within `MAX_IMAGE_BYTES`). Pure: rows, paths and bytes in."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # one image's bytes at most
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


def image_paths(row: dict[str, Any]) -> list[str]:
    """The paths of the image parts of a row's user messages (a chat row's, or a preference pair's prompt), in
    order; an image part elsewhere is the row rule's to refuse."""
    found = []
    messages = row.get("messages") if isinstance(row.get("messages"), list) else row.get("prompt")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image" and isinstance(part.get("path"), str):
                found.append(part["path"])
    return found


def path_error(path: Any) -> str | None:
    """Why `path` cannot name an image beside the rows' file, or None."""
    if not isinstance(path, str) or not path.strip():
        return "an image part needs 'path', the image's path relative to the rows' file"
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\\" in path or path != str(pure):
        return f"image path {path!r} is not a plain path inside the rows' folder (relative, with / and no ..)"
    return None


@dataclass(frozen=True)
class ImageInfo:
    format: str
    width: int
    height: int


def image_error(data: bytes) -> tuple[ImageInfo | None, str | None]:
    """What the bytes are as an image, or why they are not one the registry keeps."""
    if len(data) > MAX_IMAGE_BYTES:
        return None, f"is {len(data):,} bytes; an image holds at most {MAX_IMAGE_BYTES:,}"
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
            found = ImageInfo(str(image.format), int(image.width), int(image.height))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        return None, f"is not an image ({str(error)[:120]})"
    if found.format not in FORMATS:
        return None, f"is a {found.format} image; images are {', '.join(FORMATS)}"
    return found, None
