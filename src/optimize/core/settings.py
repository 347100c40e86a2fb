"""Server settings: command-line flags first, then `OPTIMIZE_*` environment variables (read through the table of
`core.environment`), then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from optimize.core.blob_store_url import parse_blob_store
from optimize.core.environment import declared, setting
from optimize.core.errors import Invalid
from optimize.core.limits import DatasetLimits
from optimize.core.quotas import Quotas, quotas_from_env

__all__ = ["DEFAULT_URL", "ServerSettings", "default_home", "import_roots", "limits_from_env", "outbound_hosts",
           "parse_blob_store", "wandb_where"]

DEFAULT_PORT = 9001
EXECUTORS = ("local", "ray")
WANDB_MODES = ("offline", "online")
DEFAULT_URL: str = declared("OPTIMIZE_URL").default_value


def default_home() -> Path:
    return setting("OPTIMIZE_HOME")


def import_roots() -> list[Path]:
    """Folders under which `base-models select --from DIR` may import (OPTIMIZE_IMPORT_ROOTS, separated by
    the path separator); none configured: imports are off."""
    return list(setting("OPTIMIZE_IMPORT_ROOTS") or ())


def outbound_hosts() -> frozenset[str]:
    """Hosts (`host` or `host:port`) the server's jobs may call out to, e.g. an `http:` grader
    (OPTIMIZE_OUTBOUND_HOSTS, comma-separated); none configured: no outbound calls."""
    return frozenset(setting("OPTIMIZE_OUTBOUND_HOSTS") or ())


def limits_from_env() -> DatasetLimits:
    return DatasetLimits(
        max_shard_bytes=setting("OPTIMIZE_MAX_SHARD_BYTES"),
        max_shards=setting("OPTIMIZE_MAX_SHARDS"),
        upload_expiry_seconds=setting("OPTIMIZE_UPLOAD_EXPIRY_SECONDS"),
        max_line_bytes=setting("OPTIMIZE_MAX_LINE_BYTES"),
    )


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
    executor: str = field(default_factory=lambda: setting("OPTIMIZE_EXECUTOR"))
    ray_address: str | None = field(default_factory=lambda: setting("OPTIMIZE_RAY_ADDRESS"))
    # How long a worker's attempt stays held without a heartbeat before it is failed as lost.
    lease_seconds: float = field(default_factory=lambda: setting("OPTIMIZE_LEASE_SECONDS"))
    # How long a queued run waits for the analyses its length check reads before it goes on without the check.
    analysis_wait_seconds: float = field(default_factory=lambda: setting("OPTIMIZE_ANALYSIS_WAIT_SECONDS"))
    # an endpoint holds its device while idle; after this long without a request it is taken down
    endpoint_idle_seconds: float = field(default_factory=lambda: setting("OPTIMIZE_ENDPOINT_IDLE_SECONDS"))

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
        return self.blob_store or setting("OPTIMIZE_BLOB_STORE")

    @property
    def resolved_mlflow(self) -> str | None:
        return self.mlflow or setting("OPTIMIZE_MLFLOW_URI")

    @property
    def resolved_wandb(self) -> str | None:
        return self.wandb or setting("OPTIMIZE_WANDB")

    @property
    def resolved_wandb_dir(self) -> Path:
        """W&B's `dir`: its offline runs are folders in DIR/wandb."""
        chosen = self.wandb_dir or setting("OPTIMIZE_WANDB_DIR")
        return Path(chosen).expanduser().resolve() if chosen else self.data_dir

    @property
    def resolved_database_url(self) -> str:
        return (self.database_url or setting("OPTIMIZE_DATABASE_URL")
                or f"sqlite:///{self.data_dir / 'optimize.db'}")

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"
