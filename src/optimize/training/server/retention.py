"""Retention: which of a run's saves it keeps, and the save it resumes from.

Retention keeps a run's newest `execution.keepAdapters` weights and `execution.keepTrainingStates` training
states (all when unset). Older ones are swept — left out of the catalog, never restored or registered — unless
held: pinned by an operator, the run's final save, registered as a model version, or the save a paused run
resumes from. A sweep takes the kind off the catalog; its content-addressed blobs stay until the collector
(registry.collection) finds nothing else naming them, a grace after the sweep.
"""

from __future__ import annotations

from sqlalchemy import select

from optimize.schemas.resolved import resolved_execution
from optimize.store.events import record
from optimize.store.tables import Run, Snapshot

KINDS = ("weights", "trainingState")
KEEP_SETTINGS = {"weights": "keep_adapters", "trainingState": "keep_training_states"}  # fields of `Execution`


def held_kinds(snapshot: Snapshot) -> set[str]:
    """What a holder (operator pin, final save, registered model version) keeps of this snapshot."""
    held = set(snapshot.pinned or [])
    if snapshot.final:
        held.update(KINDS)
    if snapshot.registered:
        held.add("weights")
    return held


def live_kinds(snapshot: Snapshot) -> list[str]:
    swept = set(snapshot.swept or [])
    return [a["kind"] for a in snapshot.artifacts if a["kind"] not in swept]


def restore_point(session, run_id: str) -> Snapshot | None:
    """The newest committed save of the run, of any attempt, that still holds its training state."""
    found = session.scalars(select(Snapshot).where(Snapshot.run_id == run_id)
                            .order_by(Snapshot.step.desc(), Snapshot.attempt.desc())).all()
    return next((s for s in found if "trainingState" in live_kinds(s)), None)


def sweep(session, run: Run) -> list[tuple[str, str]]:
    """Apply the run's keep counts; returns the (snapshot id, kind) pairs swept now."""
    execution = resolved_execution(run.resolved)
    snapshots = session.scalars(select(Snapshot).where(Snapshot.run_id == run.id)
                                .order_by(Snapshot.step.desc(), Snapshot.attempt.desc())).all()
    resumes_from = restore_point(session, run.id)
    swept_now = []
    for kind, setting in KEEP_SETTINGS.items():
        keep = getattr(execution, setting)
        if not keep:
            continue
        holding = [s for s in snapshots if kind in live_kinds(s)]
        for snapshot in holding[keep:]:
            if kind in held_kinds(snapshot) or (kind == "trainingState" and snapshot is resumes_from):
                continue
            snapshot.swept = sorted({*(snapshot.swept or []), kind})
            swept_now.append((snapshot.id, kind))
    if swept_now:
        record(session, f"run:{run.id}", "swept", items=[f"{sid[:12]}:{kind}" for sid, kind in swept_now])
    return swept_now
