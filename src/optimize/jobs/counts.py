"""How many jobs of each registered kind are in each of its phases, as the caller's token sees them (a token
limited to projects counts only their jobs; an analysis counts by the namespace of the dataset it measures)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.access import only_visible, visible_item
from optimize.jobs.registry import kinds


def phase_counts(session: Session) -> dict[str, dict[str, int]]:
    """kind -> phase -> jobs, every phase of each kind in the order its lifecycle declares them (0 where none), the
    kinds in the order registered."""
    counts = {}
    for kind in kinds():
        lifecycle = kind.lifecycle
        column = getattr(lifecycle.table, lifecycle.column)
        query = only_visible(select(column, func.count()).group_by(column), visible_item(lifecycle.table))
        counted = dict(session.execute(query).all())
        counts[kind.name] = {phase.value: counted.get(phase.value, 0) for phase in lifecycle.phases}
    return counts
