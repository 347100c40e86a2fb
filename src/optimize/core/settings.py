"""Server settings: command-line flags first, then `OPTIMIZE_*` environment variables, then defaults."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from optimize.core.errors import Invalid
from optimize.core.limits import DatasetLimits
from optimize.core.quotas import Quotas, quotas_from_env

DEFAULT_PORT = 9001
EXECUTORS = ("local", "ray")
WANDB_MODES = ("offline", "online")
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


# S3's rules for a bucket's name: 3 to 63 lowercase letters, digits, dots and hyphens, a letter or digit at each end
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def parse_blob_store(url: str | None) -> tuple[str, str] | None:
    """(bucket, prefix) of `s3://BUCKET[/PREFIX]`, the prefix without slashes at its ends; None (unset or empty):
    the data dir's own `blobs` folder. Anything else is refused (Invalid), before the server binds a port."""
    if not url:
        return None
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not _BUCKET.fullmatch(bucket) or "//" in f"/{prefix}":
        raise Invalid(f"the blob store {url!r} is not an s3://BUCKET[/PREFIX] URL",
                      hint="pass --blob-store s3://BUCKET/PREFIX (or OPTIMIZE_BLOB_STORE), or leave it unset to keep "
                           "blobs in the data dir")
    return bucket, prefix.strip("/")


def wandb_where(mode: str, root: Path) -> str:
    """Where `--wandb` sends run metrics, as the start line and the forwarder's log lines say it."""
    if mode == "offline":
        return f"W&B (offline, in {root / 'wandb'})"
    return f"W&B (online, {os.environ.get('WANDB_BASE_URL') or 'its default server'})"


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Everything one control-plane process is started with."""

    data_dir: Path
    database_url: str | None = None
    blob_store: str | None = None  # s3://BUCKET/PREFIX; unset: the data dir's blobs folder
    mlflow: str | None = None  # an MLflow tracking URI every run's metrics are forwarded to; unset: none
    wandb: str | None = None  # offline | online: every run's metrics forwarded to W&B; unset: none
    wandb_dir: Path | None = None  # W&B's dir (it writes in DIR/wandb); unset: OPTIMIZE_WANDB_DIR, else the data dir
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    limits: DatasetLimits = field(default_factory=limits_from_env)
    quotas: Quotas = field(default_factory=quotas_from_env)
    catalog_path: Path | None = None
    detect_gpus: bool = True
    # where workers run: `local` (processes on this host) or `ray` (a Ray cluster's nodes, at `ray_address`)
    executor: str = field(default_factory=lambda: os.environ.get("OPTIMIZE_EXECUTOR", "local"))
    ray_address: str | None = field(default_factory=lambda: os.environ.get("OPTIMIZE_RAY_ADDRESS") or None)
    # How long a worker's attempt stays held without a heartbeat before it is failed as lost.
    lease_seconds: float = field(default_factory=lambda: float(os.environ.get("OPTIMIZE_LEASE_SECONDS", "60")))
    # How long a queued run waits for the analyses its length check reads before it goes on without the check.
    analysis_wait_seconds: float = field(
        default_factory=lambda: float(os.environ.get("OPTIMIZE_ANALYSIS_WAIT_SECONDS", "1800")))
    # an endpoint holds its device while idle; after this long without a request it is taken down
    endpoint_idle_seconds: float = field(
        default_factory=lambda: float(os.environ.get("OPTIMIZE_ENDPOINT_IDLE_SECONDS", "3600")))

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise Invalid(f"executor {self.executor!r} is not one of {', '.join(EXECUTORS)}",
                          hint="--executor local (this host) or --executor ray [--ray-address ADDR]")
        if self.resolved_wandb is not None and self.resolved_wandb not in WANDB_MODES:
            raise Invalid(f"--wandb {self.resolved_wandb!r} is not offline or online",
                          hint="--wandb offline (folders to send with `wandb sync`) or --wandb online (WANDB_API_KEY); "
                               "leave it unset (and OPTIMIZE_WANDB) to forward nothing to W&B")

    @property
    def resolved_blob_store(self) -> str | None:
        return self.blob_store or os.environ.get("OPTIMIZE_BLOB_STORE") or None

    @property
    def resolved_mlflow(self) -> str | None:
        return self.mlflow or os.environ.get("OPTIMIZE_MLFLOW_URI") or None

    @property
    def resolved_wandb(self) -> str | None:
        return self.wandb or os.environ.get("OPTIMIZE_WANDB") or None

    @property
    def resolved_wandb_dir(self) -> Path:
        """W&B's `dir`: its offline runs are folders in DIR/wandb."""
        chosen = self.wandb_dir or os.environ.get("OPTIMIZE_WANDB_DIR")
        return Path(chosen).expanduser().resolve() if chosen else self.data_dir

    @property
    def resolved_database_url(self) -> str:
        return (self.database_url or os.environ.get("OPTIMIZE_DATABASE_URL")
                or f"sqlite:///{self.data_dir / 'optimize.db'}")

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"
