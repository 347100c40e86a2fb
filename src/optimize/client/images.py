"""Sending images to the registry (`akka registry datasets images push PATH...`, and a registration of rows whose
user messages hold image parts): each file checked here as the registry checks it (chat/images), named by the
sha256 of its bytes, and sent only when the registry lacks it — so a push run again after an interruption sends
only the rest, and a second version over the same pages sends no image."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.chat.images import image_error, image_paths, path_error
from optimize.core.digests import file_sha256
from optimize.core.errors import Invalid

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class LocalImage:
    path: str  # as the rows name it, or as given on the command line
    file: Path
    sha256: str
    size: int

    def entry(self) -> dict[str, Any]:
        """As an upload lists it."""
        return {"path": self.path, "sha256": self.sha256, "bytes": self.size}


def rows_images(rows: Path, folder: Path) -> list[LocalImage]:
    """Each image the rows' image parts name (once a path, in order of first use), found under `folder` (the
    rows' file's own) and checked; a row naming a missing or bad image is refused by its line and the path."""
    import orjson

    found: dict[str, LocalImage] = {}
    with rows.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            if b'"image"' not in raw:
                continue  # no image part on this line (the JSON is read only where one may be)
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # the registry's row check names it
            for name in image_paths(row) if isinstance(row, dict) else []:
                if name not in found and path_error(name) is None:
                    found[name] = checked_image(name, folder / name, f"line {line}")
    return list(found.values())


def checked_image(name: str, file: Path, where: str = "") -> LocalImage:
    """The image at `file`, or a refusal naming `where` (a row's line) and the path."""
    prefix = f"{where}: " if where else ""
    if not file.is_file():
        raise Invalid(f"{prefix}image {name} is not a file", hint="put the image beside the rows, at the path the "
                                                                  "row names")
    data = file.read_bytes()
    _, why = image_error(data)
    if why:
        raise Invalid(f"{prefix}image {name} {why}", hint="send a PNG, JPEG, WebP or GIF image")
    return LocalImage(name, file, file_sha256(file), len(data))


def send_images(api: Any, images: list[LocalImage], on_sent: Callable[[int], None] = lambda _n: None
                ) -> dict[str, int]:
    """Send each image the registry lacks; `{"images": N, "sent": S, "alreadyHeld": H}`."""
    unique = list({image.sha256: image for image in images}.values())
    missing = set(api.images.held([image.sha256 for image in unique])["missing"])
    for image in unique:
        if image.sha256 in missing:
            api.images.send(image.sha256, _chunks(image.file), image.size)
            on_sent(image.size)
    return {"images": len(unique), "sent": len(missing), "alreadyHeld": len(unique) - len(missing)}


def _chunks(file: Path) -> Iterator[bytes]:
    with file.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk
