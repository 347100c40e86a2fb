"""Registry limits a deployment enforces and reports under `registry info`."""

from __future__ import annotations

from dataclasses import dataclass

from optimize.core.environment import declared


@dataclass(frozen=True, slots=True)
class DatasetLimits:
    """Upload and shard limits for dataset versions (the spec's defaults, declared with their settings)."""

    max_shard_bytes: int = declared("OPTIMIZE_MAX_SHARD_BYTES").default_value
    max_shards: int = declared("OPTIMIZE_MAX_SHARDS").default_value
    upload_expiry_seconds: int = declared("OPTIMIZE_UPLOAD_EXPIRY_SECONDS").default_value
    max_line_bytes: int = declared("OPTIMIZE_MAX_LINE_BYTES").default_value

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
            max_line_bytes=int(body.get("maxLineBytes", declared("OPTIMIZE_MAX_LINE_BYTES").default_value)),
        )
