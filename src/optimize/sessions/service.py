"""Sessions stored and read: a file's bytes streamed through its source's parser (`SessionReceiver`), the
candidates written as they come into the blob store's staging, and — once the whole file parsed — kept as one blob
under their sha256 (the session hash) with a `sessions` row in the project. A refusal (a line, the size limit, a
file that gives no candidate) stores nothing. The same content in the same project answers the session it is
(`created: false`).

A session belongs to a project: the one named, or, when none is named, the one project the token is limited to.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from optimize.core import access
from optimize.core.clock import iso, utcnow
from optimize.core.digests import is_sha256_hex
from optimize.core.environment import setting
from optimize.core.errors import Conflict, Invalid, NotFound, Refused, TooLarge
from optimize.deployment import Deployment
from optimize.projects.service import find_project, open_project
from optimize.sessions.answers import Session, SessionCreated, SessionDetail
from optimize.sessions.candidates import Candidate, LineError, Lines, Parser
from optimize.sessions.canonical import CanonicalParser
from optimize.sessions.oasst1 import Oasst1Parser
from optimize.sessions.otel import OtelParser
from optimize.store.db import insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import ConversationSession

PARSERS: dict[str, type[Parser]] = {"oasst1": Oasst1Parser, "otel": OtelParser, "canonical": CanonicalParser}
SHOWN = 5  # candidates a get shows unless asked for another number
MOST_SHOWN = 100
PROJECT_HINT = "pass --project NAME (in the API, ?project=NAME)"


def max_bytes() -> int:
    return setting("OPTIMIZE_SESSION_MAX_BYTES")


def _project_name(asked: str | None) -> str:
    if asked:
        return asked.strip().lower()
    limits = access.current()
    if limits is not None and limits.projects is not None and len(limits.projects) == 1:
        return next(iter(limits.projects))  # the token's one project: no other could be meant
    raise Invalid("a session belongs to a training project: say which", hint=PROJECT_HINT)


def open_session(deployment: Deployment, source: str | None, project: str | None, declared: int | None
                 ) -> SessionReceiver:
    """A receiver for the file's bytes, once what can be checked before reading them holds: the source, the
    project (it exists, the token may use it, it is not archived) and the declared size."""
    if source not in PARSERS:
        raise Invalid(f"source {source!r} is not one of {', '.join(PARSERS)}" if source else
                      f"say which format the file is in: source is one of {', '.join(PARSERS)}",
                      hint="pass --source oasst1|otel|canonical (in the API, ?source=…)")
    name = _project_name(project)
    with deployment.store.transaction() as session:
        if find_project(session, name).archived:
            raise Refused(f"training project {name!r} is archived and takes no new work",
                          hint=f"akka training projects unarchive {name}")
    limit = max_bytes()
    if declared is not None and declared > limit:
        raise TooLarge(_too_large(declared, limit), hint=_LIMIT_HINT)
    return SessionReceiver(deployment, PARSERS[source](), name, limit)


_LIMIT_HINT = "split the file and create a session of each part (an operator may raise OPTIMIZE_SESSION_MAX_BYTES)"


def _too_large(size: int | None, limit: int) -> str:
    held = f"the file holds {size:,} bytes" if size is not None else "the file is larger than that"
    return f"{held}; a session's file holds at most {limit:,} bytes"


class SessionReceiver:
    """A file's bytes as they arrive: cut into lines, parsed, each candidate written to staging. A refused line
    stops the parsing, but the rest of the body is still read (counted against the limit, not kept), so the client
    hears the refusal rather than a connection cut short."""

    def __init__(self, deployment: Deployment, parser: Parser, project: str, limit: int) -> None:
        self.deployment = deployment
        self.parser = parser
        self.project = project
        self.limit = limit
        self.lines = Lines()
        self.writer = deployment.blobs.writer()
        self.received = 0
        self.count = 0
        self.refusal: LineError | None = None

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.limit:
            self.abort()
            raise TooLarge(_too_large(None, self.limit), hint=_LIMIT_HINT)
        if self.refusal is None:
            try:
                for number, text in self.lines.feed(chunk):
                    self._keep(self.parser.line(number, text))
            except LineError as error:
                self.refusal = error

    def _keep(self, candidates: list[Candidate]) -> None:
        for candidate in candidates:
            self.writer.write(candidate.normalized(self.parser.source))
            self.count += 1

    def finish(self) -> SessionCreated:
        if self.refusal is None:
            try:
                for number, text in self.lines.end():
                    self._keep(self.parser.line(number, text))
                self._keep(self.parser.end())
            except LineError as error:
                self.refusal = error
        if self.refusal is not None:
            self.abort()
            error = self.refusal
            raise Invalid(f"line {error.line}: {error.message}", hint=error.hint, line=error.line)
        if self.count == 0:
            self.abort()
            skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.parser.skipped.items()))
            raise Invalid(f"the file gives no candidate: {self.parser.records} {self.parser.records_are} read"
                          + (f", skipped: {skipped}" if skipped else ""),
                          hint="send a file holding at least one conversation that ends in an assistant answer")
        sha256 = self.writer.sha256
        if self.deployment.blobs.holds(sha256):
            self.writer.abort()  # the same candidates are kept already (another project's session)
        else:
            self.writer.commit(sha256)
        return self._register(sha256)

    def _register(self, sha256: str) -> SessionCreated:
        token = access.current_token()
        with self.deployment.store.transaction() as session:
            open_project(session, self.project)  # still there and open, under its lock
            created = insert_ignoring_conflict(session, ConversationSession, {
                "sha256": sha256, "project": self.project, "source": self.parser.source,
                "records": self.parser.records, "candidates": self.count,
                "skipped": dict(sorted(self.parser.skipped.items())), "bytes": self.writer.size,
                "created_by": token[1][:200] if token else None, "created_at": utcnow()}, ["project", "sha256"]) == 1
            row = session.scalars(select(ConversationSession).where(
                ConversationSession.project == self.project, ConversationSession.sha256 == sha256)).one()
            if created:
                record(session, f"project:{self.project}", "session-created", sessionHash=sha256,
                       source=row.source, candidates=row.candidates)
            return view(row).extended(SessionCreated, created=created)

    def abort(self) -> None:
        self.writer.abort()


def view(row: ConversationSession) -> Session:
    return Session(session_hash=row.sha256, source=row.source, project=row.project, records=row.records,
                   candidates=row.candidates, skipped=row.skipped, bytes=row.bytes, created_at=iso(row.created_at),
                   created_by=row.created_by)


def get_session(deployment: Deployment, session_hash: str, project: str | None, limit: int | None
                ) -> SessionDetail:
    """A session by its hash, with its first `limit` candidates; in the project named, or the one project holding
    it that the token sees (two such projects: say which)."""
    shown = SHOWN if limit is None else limit
    if not 0 <= shown <= MOST_SHOWN:
        raise Invalid(f"first must be from 0 to {MOST_SHOWN}, not {shown}", hint=f"ask for at most {MOST_SHOWN}")
    wanted = session_hash.strip().lower().removeprefix("sha256:")
    if not is_sha256_hex(wanted):
        raise Invalid(f"{session_hash[:80]!r} is not a session hash (64 hex digits)",
                      hint="use the hash sessions create printed")
    with deployment.store.transaction() as session:
        query = select(ConversationSession).where(ConversationSession.sha256 == wanted)
        if project:
            find_project(session, project)  # refuses a project outside the token's limits, or none such
            query = query.where(ConversationSession.project == project.strip().lower())
        condition = access.visible_projects(ConversationSession.project)
        rows = session.scalars(query if condition is None else query.where(condition)).all()
        if not rows:
            where = f" in project {project.strip().lower()!r}" if project else ""
            raise NotFound(f"no session {wanted[:12]}…{where}",
                           hint="sessions create prints a session's hash; create it again from the same file to "
                                "see it")
        if len(rows) > 1:
            raise Conflict(f"session {wanted[:12]}… is in projects {', '.join(sorted(r.project for r in rows))}: "
                           "say which", hint=PROJECT_HINT)
        row = rows[0]
    return view(row).extended(SessionDetail, first_candidates=_first(deployment, row, shown))


def _first(deployment: Deployment, row: ConversationSession, count: int) -> list[dict[str, Any]]:
    if count == 0:
        return []
    found = []
    with deployment.blobs.open_held(row.sha256, what=f"the candidates of session {row.sha256[:12]}…") as held:
        for line in held:
            found.append(json.loads(line))
            if len(found) == count:
                break
    return found
