"""What the services of one deployment share: store, applied catalog, device profiles, data dir, blob store, the
executor that starts worker processes, the scheduler that grants devices, and the kernel's timing settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.blobs.local import LocalBlobStore
from optimize.catalog.catalog import Catalog
from optimize.core.limits import DatasetLimits
from optimize.core.quotas import Quotas
from optimize.jobs.devices import DeviceProfile
from optimize.store.db import Store


@dataclass
class Deployment:
    store: Store
    catalog: Catalog
    profiles: list[DeviceProfile]
    data_dir: Path
    blobs: LocalBlobStore
    executor: Any = None  # jobs.executor.Executor, set once the server knows its own URL
    scheduler: Any = None  # jobs.scheduler.Scheduler, started with the server
    lease_seconds: float = 60.0  # how long a worker's lease holds without a heartbeat
    analysis_wait_seconds: float = 1800.0  # how long a queued run waits for its datasets' analyses
    endpoint_idle_seconds: float = 3600.0  # how long an endpoint holds its device without a request
    quotas: Quotas = field(default_factory=Quotas)  # what each project may hold at once
    routes: dict = field(default_factory=dict)  # serving.endpoints.route's answers, kept a moment
    dataset_limits: DatasetLimits = field(default_factory=DatasetLimits)  # what a version a job registers may hold

    def __post_init__(self) -> None:
        from optimize.jobs.effects import Effects

        self.store.after_commit = Effects(self).apply
