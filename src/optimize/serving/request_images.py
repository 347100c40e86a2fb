"""Images in a chat request, as OpenAI's chat route takes them: a user message's content part
`{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}`. Each is decoded, checked as the registry
checks an image (`chat.images`: a PNG, JPEG, WebP or GIF within the size limit), kept on local disk under the
sha256 of its bytes, and the part becomes the row form the renderer reads: `{"type": "image", "path", "file"}`.
An endpoint fetches no URL: an image arrives in the request or not at all."""

from __future__ import annotations

import base64
import binascii
import hashlib
import tempfile
from pathlib import Path
from typing import Any

from optimize.chat.images import image_error


class ImageRequestError(ValueError):
    """An image part the endpoint cannot read; the message names the message and part."""


def _folder() -> Path:
    folder = Path(tempfile.gettempdir()) / "optimize-request-images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def with_image_files(messages: list[Any]) -> list[Any]:
    """The messages with each `image_url` part of a user message read into an image part with its local file."""
    return [_message(message, index) for index, message in enumerate(messages)]


def _message(message: Any, index: int) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    if not any(isinstance(p, dict) and p.get("type") == "image_url" for p in message["content"]):
        return message
    if message.get("role") != "user":
        raise ImageRequestError(f"messages[{index}] ({message.get('role')}) holds an image_url part; only a user "
                                "message holds images")
    return {**message, "content": [_part(part, f"messages[{index}] content part {at}")
                                   if isinstance(part, dict) and part.get("type") == "image_url" else part
                                   for at, part in enumerate(message["content"])]}


def _part(part: dict[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image if isinstance(image, str) else None
    if not isinstance(url, str):
        raise ImageRequestError(f"{where} (image_url) needs image_url.url, a data URL of the image")
    header, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma or not header.endswith(";base64"):
        raise ImageRequestError(f"{where}: an endpoint reads an image sent in the request as a data URL "
                                "(data:image/png;base64,…); it fetches no URL")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRequestError(f"{where}: the data URL's image is not valid base64") from None
    _info, why = image_error(data)
    if why:
        raise ImageRequestError(f"{where}: the image {why}")
    digest = hashlib.sha256(data).hexdigest()
    path = _folder() / digest
    if not path.is_file():
        partial = path.with_suffix(".part")
        partial.write_bytes(data)
        partial.replace(path)
    return {"type": "image", "path": f"request/{digest}", "file": str(path)}
