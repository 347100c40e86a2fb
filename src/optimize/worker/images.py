"""The images a job's rows name, as local files: each image part's `path` looked up in the dataset version's list
of images (path, sha256), its blob fetched through the job's lease (verified, cached) and put beside the path as
`file`, which the renderer reads (`chat.render`, `chat.vision`)."""

from __future__ import annotations

from typing import Any

from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import Channel


class ImageFiles:
    def __init__(self, channel: Channel, listed: list[dict[str, Any]]) -> None:
        self.channel = channel
        self.digests = {item["path"]: item["sha256"] for item in listed}

    def resolved(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        """The row with a `file` beside each image part's path (a row without images as it is)."""
        if not self.digests:
            return row
        field = "messages" if "messages" in row else "prompt"
        return {**row, field: [self._message(message, where) for message in row[field]]}

    def _message(self, message: dict[str, Any], where: str) -> dict[str, Any]:
        content = message.get("content")
        if not isinstance(content, list):
            return message
        return {**message, "content": [self._part(part, where) for part in content]}

    def _part(self, part: dict[str, Any], where: str) -> dict[str, Any]:
        if part.get("type") != "image":
            return part
        digest = self.digests.get(part["path"])
        if digest is None:  # the registry refuses such a version; a job never reads one
            raise RowRefused(f"{where}: image {part['path']} is not among the version's images")
        return {**part, "file": str(self.channel.fetch_blob(digest))}
