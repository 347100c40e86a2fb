"""The job graph: a job may wait for other jobs and take their outputs (a run waits for its datasets' analyses and
reads their reports; a job may take a distillation's registered dataset version). Each edge is a row of
`job_edges`, written with the job it holds back; the scheduler grants nothing to a job while an edge into it holds
(`readiness`), and an upstream that ended without completing acts on the job by one rule (`upstream_ended`).

Edges are checked when added: the upstream must exist and no edge may close a cycle (`validate`, which also checks
a set of edges declared together, as a pipeline's stages will be).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.clock import as_utc, utcnow
from optimize.core.errors import Invalid
from optimize.jobs import registry
from optimize.store.db import insert_ignoring_conflict
from optimize.store.tables import JobEdge

Node = tuple[str, str]  # (kind, job id)


class IfUpstreamFails(StrEnum):
    """What an upstream that ended without completing (failed, cancelled) does to the job waiting for it."""

    FAIL = "fail"  # the job ends too, naming the upstream and the phase it ended in
    PROCEED = "proceed"  # the job goes on without that upstream's output (a run whose analysis failed: unchecked)


@dataclass(frozen=True)
class Edge:
    """What a job declares it waits for: the upstream job, the output it takes from it (None: it only waits for it
    to complete), what the upstream's failure does to it, and until when at most it waits (None: until it ends)."""

    upstream_kind: str
    upstream_id: str
    output: str | None = None
    if_upstream_fails: IfUpstreamFails = IfUpstreamFails.FAIL
    waits_until: datetime | None = None

    @property
    def upstream(self) -> Node:
        return self.upstream_kind, self.upstream_id


@dataclass(frozen=True)
class Readiness:
    """Whether a job's edges let it be granted: `ready`; else `waiting` says for what, or `failed` says why the job
    must end (an upstream it cannot go on without ended without completing)."""

    ready: bool
    waiting: str | None = None
    failed: str | None = None


READY = Readiness(True)


class GraphError(Invalid):
    """An edge the graph refuses: to a job that does not exist or of a kind that never completes, or one that would
    close a cycle."""


# --- the rules ---------------------------------------------------------------------------------------------


def upstream_ended(edge: JobEdge | Edge, phase: StrEnum, reason: str | None) -> Readiness:
    """The rule for an upstream that ended without completing (any terminal phase but its completed one: FAILED,
    CANCELLED, an analysis's `failed`), applied wherever a job's edges are read (`readiness`):

    - `fail` edges end the waiting job with a message naming the upstream and the phase it ended in, and its reason
      when it has one: "analysis 3f2a1b2c3d4e, which it waits for, ended FAILED: the rows could not be read";
    - `proceed` edges stop holding the job, which goes on without that upstream's output.
    """
    if IfUpstreamFails(edge.if_upstream_fails) is IfUpstreamFails.PROCEED:
        return READY
    said = f": {reason}" if reason else ""
    return Readiness(False, failed=f"{edge.upstream_kind} {edge.upstream_id[:12]}, which it waits for, ended "
                                   f"{phase.value}{said}")


def edge_readiness(session: Session, edge: JobEdge, now: datetime | None = None) -> Readiness:
    """What one edge says now: ready when its upstream completed (or past `waits_until`), the rule's verdict when it
    ended otherwise, waiting while it runs."""
    kind = registry.kind(edge.upstream_kind)
    upstream = session.get(kind.lifecycle.table, edge.upstream_id)
    if upstream is None:  # removed since the edge was written: it can neither complete nor fail any more
        return (READY if IfUpstreamFails(edge.if_upstream_fails) is IfUpstreamFails.PROCEED else
                Readiness(False, failed=f"{edge.upstream_kind} {edge.upstream_id[:12]}, which it waits for, no longer "
                                        "exists"))
    phase = kind.lifecycle.phase_of(upstream)
    if phase == kind.completed_phase():
        return READY
    if phase in kind.lifecycle.terminal:
        return upstream_ended(edge, phase, getattr(upstream, kind.reason_column, None))
    if edge.waits_until is not None and as_utc(edge.waits_until) <= (now or utcnow()):
        return READY  # waited as long as it may: it goes on without this output
    return Readiness(False, waiting=f"waiting for {edge.upstream_kind} {edge.upstream_id[:12]} "
                                    f"({phase.value.replace('_', ' ').lower()})")


def readiness(session: Session, kind: str, job_id: str) -> Readiness:
    """Whether every edge into the job lets it be granted; the first failure decides over any wait."""
    verdicts = [edge_readiness(session, edge) for edge in edges_into(session, kind, job_id)]
    failed = next((v for v in verdicts if v.failed), None)
    if failed is not None:
        return failed
    waiting = [v.waiting for v in verdicts if v.waiting]
    return Readiness(False, waiting="; ".join(waiting)) if waiting else READY


def taken(session: Session, kind: str, job_id: str) -> dict[str, Any]:
    """The outputs the job takes from its completed upstreams, by the name its edges give them (an upstream that did
    not complete gives nothing)."""
    outputs: dict[str, Any] = {}
    for edge in edges_into(session, kind, job_id):
        if edge.output is None:
            continue
        upstream_kind = registry.kind(edge.upstream_kind)
        upstream = session.get(upstream_kind.lifecycle.table, edge.upstream_id)
        if upstream is not None and upstream_kind.lifecycle.phase_of(upstream) == upstream_kind.completed_phase():
            outputs.setdefault(edge.output, []).append(upstream_kind.outputs(upstream).get(edge.output))
    return outputs


# --- the edges ---------------------------------------------------------------------------------------------


def edges_into(session: Session, kind: str, job_id: str) -> list[JobEdge]:
    return list(session.scalars(select(JobEdge).where(JobEdge.kind == kind, JobEdge.job_id == job_id)
                                .order_by(JobEdge.id)))


def add_edges(session: Session, kind: str, job_id: str, edges: Iterable[Edge]) -> None:
    """Record what the job waits for, in the caller's transaction (with the job itself, so neither is kept without
    the other); an edge already recorded is kept as it is. Refused (GraphError) for an unknown upstream or a
    cycle."""
    edges = list(edges)
    validate(session, {(kind, job_id): [edge.upstream for edge in edges]})
    now = utcnow()
    for edge in edges:
        insert_ignoring_conflict(session, JobEdge, {
            "kind": kind, "job_id": job_id, "upstream_kind": edge.upstream_kind, "upstream_id": edge.upstream_id,
            "output": edge.output, "if_upstream_fails": IfUpstreamFails(edge.if_upstream_fails).value,
            "waits_until": edge.waits_until, "created_at": now,
        }, ["kind", "job_id", "upstream_kind", "upstream_id"])


def validate(session: Session | None, declared: dict[Node, list[Node]]) -> None:
    """Refuse edges to a job that does not exist (neither stored nor declared here) and edges that close a cycle,
    among those declared and those stored (`session` None: the declared ones alone, as a pipeline checks its stages
    before any exists)."""
    for node, upstreams in declared.items():
        for upstream in upstreams:
            if upstream == node:
                raise GraphError(f"{_named(node)} cannot wait for itself")
            if upstream not in declared and not _exists(session, upstream):
                raise GraphError(f"{_named(node)} cannot wait for {_named(upstream)}: no such job exists")
            if upstream[0] in registry.KINDS and registry.kind(upstream[0]).completed_phase() is None:
                raise GraphError(f"{_named(node)} cannot wait for {_named(upstream)}: {upstream[0]}s never complete")
    cycle = find_cycle(lambda node: declared.get(node, []) + _stored_upstreams(session, node), declared)
    if cycle:
        raise GraphError("the jobs would wait for one another in a cycle: " + " → ".join(map(_named, cycle)))


def find_cycle(upstreams_of, starts: Iterable[Node]) -> list[Node] | None:
    """A cycle reachable from `starts` along `upstreams_of` (first node repeated at its end), or None."""
    state: dict[Node, int] = {}  # 1: on the current path, 2: explored
    path: list[Node] = []

    def visit(node: Node) -> list[Node] | None:
        state[node] = 1
        path.append(node)
        for upstream in upstreams_of(node):
            if state.get(upstream) == 1:
                return path[path.index(upstream):] + [upstream]
            if upstream not in state:
                found = visit(upstream)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in starts:
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _stored_upstreams(session: Session | None, node: Node) -> list[Node]:
    if session is None:
        return []
    return [tuple(pair) for pair in session.execute(select(JobEdge.upstream_kind, JobEdge.upstream_id).where(
        JobEdge.kind == node[0], JobEdge.job_id == node[1]))]


def _exists(session: Session | None, node: Node) -> bool:
    if session is None:
        return False
    try:
        kind = registry.kind(node[0])
    except KeyError:
        return False
    return session.get(kind.lifecycle.table, node[1]) is not None


def _named(node: Node) -> str:
    return f"{node[0]} {node[1][:12]}"
