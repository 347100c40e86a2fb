"""Comparisons as a job kind of the kernel, one with no worker: a comparison waits in EVALUATING on the edges to
its evaluations (each lets it go on when the evaluation fails), the scheduler moves it to SCORING once they have
all ended, and its server step (`jobs.server_steps`) scores it there — again after a restart, with the same
result. It holds no device; its evaluations claim theirs."""

from __future__ import annotations

from typing import Any

from optimize.comparisons import service
from optimize.comparisons.phases import COMPARISON
from optimize.jobs.kinds import JobKind, Recovery
from optimize.jobs.server_steps import ServerStep
from optimize.schemas.phases import ComparisonPhase
from optimize.store.tables import Comparison


class ComparisonKind(JobKind):
    name = "comparison"
    project_work = True
    lifecycle = COMPARISON
    waiting = ComparisonPhase.EVALUATING
    granted = ComparisonPhase.SCORING
    pool = None
    worker = False
    on_restart = Recovery.FAIL  # never asked: a comparison holds no lease
    server_step = ServerStep(ComparisonPhase.SCORING, service.score, "score")

    def outputs(self, row: Comparison) -> dict[str, Any]:
        """Its `winner` (the model version, or None for a Partial result or a tie), for a job that takes it."""
        return {"winner": ((row.result or {}).get("winner") or {}).get("model")}


KIND = ComparisonKind()
