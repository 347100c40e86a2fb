"""Lifecycles as data: a kind declares its phase enum, its transition table and which phases are active
(a worker holds a lease), terminal and settled (where `wait` stops); one `transition()` moves any job.

`transition` compare-and-sets on the phase it read (and on the lease when the caller is a worker), records the
phase event, keeps the phase spans of tables that have them, and queues the transition's effects: leaving an
active phase ends the job's lease and releases its devices in the same transaction, and after the commit stops
its worker (unless the worker itself reported) and wakes the scheduler. It returns whether it won, and every
caller checks (`tests/unit/test_transition_results.py` fails on a dropped result): a worker's report that lost is
refused (`leases.reported`), a decision is made again (`moved` inside `decided`), or a comment says why losing is fine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import exists, inspect, update
from sqlalchemy.orm import Session

from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid
from optimize.jobs import effects
from optimize.store.events import record
from optimize.store.tables import JobLease

P = TypeVar("P", bound=StrEnum)
T = TypeVar("T")


class IllegalTransition(ValueError):
    """A move the kind's table does not allow: a bug in the caller, never the user's input."""


class MovedOn(Conflict):
    """The job moved on between the read a decision was made on and the move: decide again on a fresh read."""


def moved(won: bool, what: str) -> None:
    """Raise MovedOn unless the transition won (use inside `decided`)."""
    if not won:
        raise MovedOn(f"{what} moved on meanwhile; try again", hint="it changed phase while the request was decided")


def decided(store: Any, decide: Callable[[Session], T], tries: int = 5) -> T:
    """Run `decide` in a transaction; when a move in it lost its compare-and-set (`moved`), the transaction is
    rolled back and the decision made again on a fresh read (a user's cancel racing the scheduler's grant)."""
    for _ in range(tries - 1):
        try:
            with store.transaction() as session:
                return decide(session)
        except MovedOn:
            continue
    with store.transaction() as session:
        return decide(session)


@dataclass(frozen=True)
class Lifecycle(Generic[P]):
    kind: str  # the subject prefix of its events and device holds: run, analysis, evaluation, …
    phases: type[P]
    transitions: dict[P, frozenset[P]]
    table: Any  # the ORM class whose `phase` column holds it
    active: frozenset[P] = frozenset()  # a worker holds the job's lease (and its devices)
    terminal: frozenset[P] = frozenset()  # ended; a user may queue some again (a retry), as the table says
    settled: frozenset[P] = field(default=frozenset())  # where `wait` stops; terminal ones included
    column: str = "phase"  # the column holding the phase
    subject_key: str = "id"  # the attribute naming the job in events and holds (an attempt names its run)
    event: str = "phase"  # the kind of event a move records

    def __post_init__(self) -> None:
        missing = set(self.phases) - set(self.transitions)
        if missing:
            raise TypeError(f"{self.kind}: no transitions declared from {sorted(missing)}")
        if any(self.transitions[p] & self.active for p in self.terminal):
            raise TypeError(f"{self.kind}: an ended job goes back to waiting, never straight to a worker")
        object.__setattr__(self, "settled", frozenset(self.settled) | self.terminal)

    def allows(self, source: P, target: P) -> bool:
        return target in self.transitions[source]

    def subject(self, job_id: str) -> str:
        return f"{self.kind}:{job_id}"

    def phase_of(self, row: Any) -> P:
        return self.phases(getattr(row, self.column))

    def values(self, phases: frozenset[P]) -> list[str]:
        return [p.value for p in phases]


def phases_asked(lifecycle: Lifecycle, asked: str, groups: dict[str, frozenset]) -> list[str]:
    """The stored phases a list's `phase=` names: a group (`open`, `active`) or one phase, in any case; anything
    else is refused, listing what it may be."""
    wanted = asked.upper()
    for name, members in groups.items():
        if wanted == name.upper():
            return lifecycle.values(members)
    if wanted in lifecycle.phases.__members__:
        return [lifecycle.phases[wanted].value]
    article = "an" if lifecycle.kind[0] in "aeiou" else "a"
    raise Invalid(f"phase {asked!r} is not {article} {lifecycle.kind} phase",
                  hint=f"use {' or '.join(groups)} or one of {', '.join(p.value for p in lifecycle.phases)}")


def transition(session: Session, lifecycle: Lifecycle, row: Any, to: StrEnum, *, lease: str | None = None,
               by_worker: bool = False, note: str | None = None, **values: Any) -> bool:
    """Move `row` from the phase it was read in to `to`; False (nothing changed) when it moved on meanwhile or the
    lease it was read under is no longer its holder's. `by_worker`: the job's own worker reported this move, so it
    is not stopped after the commit. `note`: the event's reason (else a failure reason among the values)."""
    source = lifecycle.phase_of(row)
    target = lifecycle.phases(to)
    if not lifecycle.allows(source, target):
        raise IllegalTransition(f"a {lifecycle.kind} cannot go from {source.value} to {target.value}")
    table = lifecycle.table
    now = utcnow()
    if hasattr(table, "phase_times"):
        values["phase_times"] = _spans(row.phase_times, target, target in lifecycle.terminal, now)
    if target in lifecycle.terminal and hasattr(table, "finished_at"):
        values.setdefault("finished_at", now)
    keys = [column == getattr(row, column.key) for column in inspect(table).primary_key]
    statement = update(table).where(*keys, getattr(table, lifecycle.column) == source.value)
    if lease is not None:  # the caller read the job under this lease: it must still be the open one
        statement = statement.where(exists().where(JobLease.token == lease, JobLease.ended_at.is_(None)))
    if session.execute(statement.values({lifecycle.column: target.value, **values})).rowcount != 1:
        return False
    job_id = getattr(row, lifecycle.subject_key)
    reason = note or values.get("failure_reason") or values.get("reason")
    record(session, lifecycle.subject(job_id), lifecycle.event, phase=target.value, reason=reason)
    if source in lifecycle.active and target not in lifecycle.active:
        from optimize.jobs import leases

        others_go_on = leases.end_all(session, lifecycle.kind, job_id, reason or target.value.lower())
        if not by_worker:
            effects.queue(session, effects.StopWorker(lifecycle.kind, job_id, others_go_on))
    effects.queue(session, effects.WAKE)
    session.refresh(row)
    return True


def _spans(times: dict | None, target: StrEnum, terminal: bool, now) -> dict[str, list]:
    """Close the open span and open the target's (closed at once when terminal)."""
    spans = {k: [list(s) for s in v] for k, v in (times or {}).items()}
    for phase_spans in spans.values():
        for span in phase_spans:
            if span[1] is None:
                span[1] = iso(now)
    spans.setdefault(target.value, []).append([iso(now), iso(now) if terminal else None])
    return spans
