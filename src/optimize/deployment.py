"""What training-side services need of one deployment: store, applied catalog, device profiles, data dir,
blob store, the launcher that starts worker processes, and the scheduler that admits work onto devices."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.blobs.local import LocalBlobStore
from optimize.catalog.catalog import Catalog
from optimize.catalog.schema import DeviceProfile
from optimize.store.db import Store


@dataclass
class Training:
    store: Store
    catalog: Catalog
    profiles: list[DeviceProfile]
    data_dir: Path
    blobs: LocalBlobStore
    launcher: Any = None  # scheduler.local.LocalLauncher, set once the server knows its own URL
    scheduler: Any = None  # scheduler.loop.Scheduler, started with the server
    lease_seconds: float = 60.0  # how long a worker's attempt stays held without a heartbeat
    analysis_wait_seconds: float = 1800.0  # how long a queued run waits for its datasets' analyses
    endpoint_idle_seconds: float = 3600.0  # how long an endpoint holds its device without a request
