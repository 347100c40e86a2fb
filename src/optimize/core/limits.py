"""Registry limits a deployment enforces and reports under `registry info`."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DatasetLimits:
    """Upload and shard limits for dataset versions (the spec's defaults)."""

    max_shard_bytes: int = 256 * MIB
    max_shards: int = 1000
    upload_expiry_seconds: int = 7 * 24 * 3600
    max_line_bytes: int = 32 * MIB

    def to_json(self) -> dict[str, int]:
        return {
            "maxShardBytes": self.max_shard_bytes,
            "maxShards": self.max_shards,
            "uploadExpirySeconds": self.upload_expiry_seconds,
            "maxLineBytes": self.max_line_bytes,
        }

    @classmethod
    def from_json(cls, body: dict[str, int]) -> DatasetLimits:
        return cls(
            max_shard_bytes=int(body["maxShardBytes"]),
            max_shards=int(body["maxShards"]),
            upload_expiry_seconds=int(body["uploadExpirySeconds"]),
            max_line_bytes=int(body.get("maxLineBytes", cls.max_line_bytes)),
        )
