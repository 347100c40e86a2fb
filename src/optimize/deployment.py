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
    # the devices of each profile a cluster's live nodes offer now; None: every device of `profiles` is there
    online: dict[str, int] | None = None
    one_node: dict[str, int] | None = None  # the most of each profile one live node offers (a job needs one node)

    def __post_init__(self) -> None:
        from optimize.jobs.effects import Effects

        self.store.after_commit = Effects(self).apply
        self.declared = list(self.profiles)  # the catalog's and the detected profiles, as the server started

    def refresh_inventory(self) -> None:
        """Take in what the executor's nodes offer now: a profile grows to what the cluster offers (a profile found
        only on the cluster joins), and `online` says how many of its devices may be granted at this moment."""
        offered = self.executor.online() if self.executor is not None else None
        if offered is None:
            return
        found = {profile.name: profile for profile in offered}
        profiles = []
        for profile in self.declared:
            extra = found.pop(profile.name, None)
            grown = extra is not None and extra.devices > profile.devices
            profiles.append(profile.model_copy(update={"devices": extra.devices}) if grown else profile)
        self.profiles = sorted([*profiles, *found.values()], key=lambda p: (p.kind != "gpu", p.name))
        self.online = {profile.name: profile.devices for profile in offered}
        self.one_node = self.executor.most_on_one_node()

    def fits_one_node(self, profile: str, count: int) -> bool:
        """Whether one live node offers `count` devices of `profile` (always, on one machine)."""
        return self.one_node is None or self.one_node.get(profile, 0) >= count
