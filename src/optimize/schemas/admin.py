"""Deployment upkeep: what `POST /v1/admin/gc` (`akka server gc`) freed, or would free."""

from __future__ import annotations

from pydantic import Field

from optimize.schemas.common import Answer


class Collected(Answer):
    dry_run: bool = Field(description="True: nothing was removed; the figures are what would be")
    upload_sessions: int = Field(description="Upload sessions removed: expired, or refused a while ago")
    shards: int = Field(description="Dataset shards no version holds and no live upload names, with their blobs")
    size_bytes: int = Field(alias="bytes", description="Bytes of the shards removed")
    blobs: int = Field(description="Blobs no version, snapshot, model, analysis or job references, written before "
                                   "the grace and before the oldest live job began")
    blob_bytes: int = Field(description="Bytes of those blobs")
    unreadable_manifests: list[str] = Field(
        description="Manifests rows reference that could not be read (missing or corrupt): while any is, no blob is "
                    "removed, since the files it lists are unknown")
