"""What a transition does after its transaction commits: stop a job's worker, wake the scheduler.

Effects are queued on the session (`queue`) and handed to the store's commit hook, which the deployment points
at `Effects.apply`; a rolled-back transaction does nothing. Nothing here touches the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

log = logging.getLogger("optimize.jobs")


@dataclass(frozen=True)
class StopWorker:
    kind: str
    job_id: str
    others_go_on: bool = False  # its worker serves other jobs holding its devices on: only this job's work stops


@dataclass(frozen=True)
class Wake:
    """Devices were freed or work was queued: the scheduler looks again now rather than at its next tick."""


WAKE = Wake()


def queue(session: Session, effect: Any) -> None:
    pending = session.info.setdefault("effects", [])
    if effect not in pending:
        pending.append(effect)


def queue_wake(session: Session) -> None:
    """New waiting work: the scheduler looks at it right after the commit."""
    queue(session, WAKE)


class Effects:
    """Carries out committed effects against the deployment's executor and scheduler (absent in a process that
    launches nothing, such as a migration or a test of the services)."""

    def __init__(self, deployment: Any) -> None:
        self.deployment = deployment

    def apply(self, pending: list[Any]) -> None:
        for effect in pending:
            try:
                if isinstance(effect, StopWorker) and self.deployment.executor is not None:
                    self.deployment.executor.kill(effect.kind, effect.job_id, others_go_on=effect.others_go_on)
                elif isinstance(effect, Wake) and self.deployment.scheduler is not None:
                    self.deployment.scheduler.wake()
            except Exception:  # noqa: BLE001 - the commit stands; a failed effect is retried by the reaper
                log.exception("effect %s failed", effect)
