"""Server settings: command-line flags first, then `OPTIMIZE_*` environment variables, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from optimize.core.limits import DatasetLimits
from optimize.core.quotas import Quotas, quotas_from_env

DEFAULT_PORT = 9001
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


def default_home() -> Path:
    return Path(os.environ.get("OPTIMIZE_HOME") or Path.home() / ".optimize")


def import_roots() -> list[Path]:
    """Folders under which `base-models select --from DIR` may import (OPTIMIZE_IMPORT_ROOTS, separated by
    the path separator); none configured: imports are off."""
    text = os.environ.get("OPTIMIZE_IMPORT_ROOTS", "")
    return [Path(part).expanduser().resolve() for part in text.split(os.pathsep) if part.strip()]


def outbound_hosts() -> frozenset[str]:
    """Hosts (`host` or `host:port`) the server's jobs may call out to, e.g. an `http:` grader
    (OPTIMIZE_OUTBOUND_HOSTS, comma-separated); none configured: no outbound calls."""
    return frozenset(part.strip().lower() for part in os.environ.get("OPTIMIZE_OUTBOUND_HOSTS", "").split(",")
                     if part.strip())


def limits_from_env() -> DatasetLimits:
    base = DatasetLimits()
    return DatasetLimits(
        max_shard_bytes=int(os.environ.get("OPTIMIZE_MAX_SHARD_BYTES", base.max_shard_bytes)),
        max_shards=int(os.environ.get("OPTIMIZE_MAX_SHARDS", base.max_shards)),
        upload_expiry_seconds=int(os.environ.get("OPTIMIZE_UPLOAD_EXPIRY_SECONDS", base.upload_expiry_seconds)),
        max_line_bytes=int(os.environ.get("OPTIMIZE_MAX_LINE_BYTES", base.max_line_bytes)),
    )


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Everything one control-plane process is started with."""

    data_dir: Path
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    limits: DatasetLimits = field(default_factory=limits_from_env)
    quotas: Quotas = field(default_factory=quotas_from_env)
    catalog_path: Path | None = None
    detect_gpus: bool = True
    # How long a worker's attempt stays held without a heartbeat before it is failed as lost.
    lease_seconds: float = field(default_factory=lambda: float(os.environ.get("OPTIMIZE_LEASE_SECONDS", "60")))
    # How long a queued run waits for the analyses its length check reads before it goes on without the check.
    analysis_wait_seconds: float = field(
        default_factory=lambda: float(os.environ.get("OPTIMIZE_ANALYSIS_WAIT_SECONDS", "1800")))
    # an endpoint holds its device while idle; after this long without a request it is taken down
    endpoint_idle_seconds: float = field(
        default_factory=lambda: float(os.environ.get("OPTIMIZE_ENDPOINT_IDLE_SECONDS", "3600")))

    @property
    def resolved_database_url(self) -> str:
        return (self.database_url or os.environ.get("OPTIMIZE_DATABASE_URL")
                or f"sqlite:///{self.data_dir / 'optimize.db'}")

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"
