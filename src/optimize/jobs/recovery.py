"""Recovery: what a lost worker or a restarted server means for a job, as its kind declares it.

`worker_lost` is called when the executor reports a worker's exit or the reaper finds its lease expired: the
worker is killed and confirmed gone first (its devices are released only then), its lease ends, and the job is
requeued from its newest resumable point within its attempts budget, or fails with the reason.
`recover_at_start` runs once when a server starts, over the leases an earlier server process left open: a kind
that reattaches keeps a live worker (its lease renewed, its exit watched); every other lease ends, its worker is
killed if it still runs, and the kind's policy applies.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from optimize.jobs import leases, registry
from optimize.jobs.kinds import LOST, JobKind, Recovery
from optimize.store.tables import JobLease

log = logging.getLogger("optimize.jobs")
_deciding: set[str] = set()  # leases whose loss is being decided in this process
_deciding_lock = threading.Lock()


@contextmanager
def _deciding_on(token: str):
    """True for the first report of a lease's loss; a second one meanwhile (the exit the reaper's own kill caused)
    is dropped, so the loss is recorded with the reason that started it."""
    with _deciding_lock:
        first = token not in _deciding
        _deciding.add(token)
    try:
        yield first
    finally:
        if first:
            with _deciding_lock:
                _deciding.discard(token)


def worker_lost(deployment: Any, kind_name: str, job_id: str, token: str, reason: str) -> bool:
    """The worker holding `token` is gone (or no longer trusted): apply the kind's policy; False when the lease
    had already ended (the job finished, was cancelled, or another report came first)."""
    with _deciding_on(token) as first:
        return first and _worker_lost(deployment, kind_name, job_id, token, reason)


def _worker_lost(deployment: Any, kind_name: str, job_id: str, token: str, reason: str) -> bool:
    with deployment.store.transaction() as session:
        lease = session.get(JobLease, token)
        if lease is None or lease.ended_at is not None:
            return False
    executor = deployment.executor
    if executor is not None and not executor.kill(kind_name, job_id):
        return False  # it still runs on its devices: the reaper tries again next tick
    kind = registry.kind(kind_name)
    with deployment.store.transaction() as session:
        lease = session.get(JobLease, token)
        if lease is None or lease.ended_at is not None:
            return False
        return _apply(deployment, session, kind, lease, f"{LOST}: {reason}", kind.on_lost)


def recover_at_start(deployment: Any) -> dict[str, int]:
    """Decide every lease a previous server process left open; counts by what was done."""
    done = {"reattached": 0, "requeued": 0, "failed": 0, "ended": 0}
    with deployment.store.transaction() as session:
        held = [(lease.kind, lease.job_id, lease.token) for lease in leases.open_leases(session)]
    executor = deployment.executor
    for kind_name, job_id, token in held:
        kind = registry.kind(kind_name)
        alive = executor is not None and executor.alive(kind_name, job_id)
        if kind.on_restart is Recovery.REATTACH and alive:
            with deployment.store.transaction() as session:
                lease = session.get(JobLease, token)
                leases.extend(lease, deployment.lease_seconds)  # time to find the new server and report
            executor.reattach(kind_name, job_id, token)
            done["reattached"] += 1
            log.info("%s %s: its worker runs on; reattached", kind_name, job_id)
            continue
        if alive and not executor.kill(kind_name, job_id):
            continue  # not confirmed gone: its lease stays open and the reaper decides once it is
        with deployment.store.transaction() as session:
            lease = session.get(JobLease, token)
            if kind.on_restart is Recovery.REATTACH:  # its worker died with the server
                policy, reason = kind.on_lost, f"{LOST}: it ended with the previous server process"
            else:
                policy, reason = kind.on_restart, kind.restart_reason
            outcome = _apply(deployment, session, kind, lease, reason, policy)
        done["requeued" if outcome == "requeued" else "failed" if outcome else "ended"] += 1
    return done


def _apply(deployment: Any, session: Session, kind: JobKind, lease: JobLease, reason: str, policy: Recovery):
    """End the lease, then requeue or fail its job; the outcome ('requeued', 'failed') or False."""
    leases.end(session, lease, reason)
    row = session.get(kind.lifecycle.table, lease.job_id)
    if row is None or kind.lifecycle.phases(row.phase) not in kind.lifecycle.active:
        return False
    if policy is not Recovery.FAIL:
        lost = kind.lost_attempts(session, row)
        budget = kind.max_attempts(row)
        if not reason.startswith(LOST) or lost < budget:
            return "requeued" if kind.requeue(deployment, session, row, reason) else False
        reason = f"{reason} (attempt {lost} of {budget}; no attempts left)" if budget > 1 else reason
    return "failed" if kind.fail(deployment, session, row, reason) else False
