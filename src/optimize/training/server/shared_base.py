"""Which queued runs train together on one loaded base (`execution.shareBase`): the runs of one project over the
same base model at the same commit, on one device of the same profile, that load the base the same way (precision,
attention, gradient checkpointing, Liger's kernels) and each train a LoRA adapter. The scheduler grants them the
same device under leases of their own and one worker trains them, each its own adapter, optimizer and saves
(`training.engines.shared_base`). A run that shares is granted GATHER_SECONDS after it was queued at the earliest,
so that the runs submitted with it are queued by then.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.clock import as_utc, from_iso, utcnow
from optimize.schemas.resolved import resolved_config, resolved_execution
from optimize.store.tables import Run
from optimize.training.server.phases import RunPhase

MOST_SHARING = 8  # runs one worker trains on one base at most: each adds its adapter, optimizer and batches
# a run that shares waits this long after it was queued before it is granted, so that runs submitted with it (a
# sweep's points, each admitted in turn) are queued by then and join it
GATHER_SECONDS = 3.0


def companions(session: Session, row: Run) -> list[Run] | None:
    """The queued runs that may train beside `row` on its base, oldest first, at most MOST_SHARING with it; None
    while `row` was queued less than GATHER_SECONDS ago (others may be on their way)."""
    if not _shares(row):
        return []
    if (utcnow() - queued_since(row)).total_seconds() < GATHER_SECONDS:
        return None
    queued = session.scalars(select(Run).where(
        Run.phase == RunPhase.QUEUED.value, Run.id != row.id, Run.project == row.project,
        Run.base_entry_id == row.base_entry_id, Run.base_commit == row.base_commit,
        Run.device_profile == row.device_profile, Run.device_count == 1).order_by(Run.created_at)).all()
    return [other for other in queued if _shares(other) and loaded_alike(other) == loaded_alike(row)
            ][:MOST_SHARING - 1]


def queued_since(row: Run):
    """When the run's current wait in QUEUED began (its submission, or its latest requeue or resume)."""
    spans = (row.phase_times or {}).get(RunPhase.QUEUED.value) or []
    return from_iso(spans[-1][0]) if spans else as_utc(row.created_at)


def _shares(row: Run) -> bool:
    return row.device_count == 1 and resolved_execution(row.resolved).share_base


def loaded_alike(row: Run) -> tuple[Any, ...]:
    """What the base's one loaded copy must be for the run: precision, attention, checkpointing, kernels."""
    config = resolved_config(row.resolved["config"])
    model = config.model
    return (model.precision, model.attention_implementation, model.gradient_checkpointing, model.trains,
            sorted(config.liger.items()))
