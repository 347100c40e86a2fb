"""Issuing, listing, revoking and authenticating API tokens (the store keeps their sha256 only).

At its first start a server issues an admin token and writes it to `<data-dir>/admin-token` (mode 0600): the
operator's first credential, which the CLI on the same machine finds by itself. A file that names a token the
store does not know (a new database under an old data dir) is registered again, so the file always works.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update

from optimize.core.access import AccessLimits
from optimize.core.clock import as_utc, iso, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound
from optimize.core.ids import new_id
from optimize.core.names import check_name
from optimize.core.tokens import Role, new_token, token_digest, well_formed
from optimize.schemas import auth as answers
from optimize.store.db import Store, id_prefix_matches_nothing, shown_id
from optimize.store.tables import ApiToken

ADMIN_TOKEN_FILE = "admin-token"
FIRST_ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: the token's id, name and role, and what it is limited to (None: everything)."""

    token_id: str
    name: str
    role: Role
    projects: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] | None = None


def parse_role(text: str) -> Role:
    try:
        return Role(text)
    except ValueError:
        raise Invalid(f"role {text!r} is not known", hint="roles: reader, trainer, admin") from None


def issue(store: Store, name: str, role: Role, *, projects: list[str] | None = None,
          namespaces: list[str] | None = None, created_by: str | None = None,
          token: str | None = None) -> tuple[str, answers.Token]:
    """A new token (returned once, never stored) and its record."""
    check_name(name, "token name")
    projects = _names(projects, "project")
    namespaces = _names(namespaces, "namespace")
    if role == Role.ADMIN and (projects is not None or namespaces is not None):
        raise Invalid("an admin token cannot be limited to projects or namespaces (it manages the whole deployment)",
                      hint="limit a reader or trainer token instead")
    token = token or new_token()
    row = ApiToken(id=new_id(), name=name, role=role.value, digest=token_digest(token), created_at=utcnow(),
                   created_by=created_by, projects=projects, namespaces=namespaces)
    with store.transaction() as session:
        session.add(row)
        session.flush()
        return token, token_view(row)


def _names(names: list[str] | None, noun: str) -> list[str] | None:
    if not names:
        return None
    return sorted({check_name(name, noun) for name in names})


def access_limits(caller: Caller) -> AccessLimits:
    """What a caller's requests may see: a limited token sees the projects it names and the namespaces it names
    together with those projects' own namespaces (a project's models go under its name), and nothing else; an
    unlimited token's limits name it only (what counts per token needs it)."""
    if caller.projects is None and caller.namespaces is None:
        return AccessLimits(caller.name, token_id=caller.token_id)
    projects = frozenset(caller.projects or ())
    return AccessLimits(caller.name, projects, frozenset(caller.namespaces or ()) | projects, caller.token_id)


def ensure_admin_token(store: Store, data_dir: Path) -> str | None:
    """The token in `<data-dir>/admin-token`, issued (and returned, to be shown once) when there is none yet."""
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        token = path.read_text().strip()
        if well_formed(token):
            with store.transaction() as session:
                known = session.scalar(select(ApiToken).where(ApiToken.digest == token_digest(token)))
            if known is None:
                issue(store, FIRST_ADMIN, Role.ADMIN, token=token)
            return None
    token = new_token()
    partial = path.with_suffix(".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.replace(partial, path)
    issue(store, FIRST_ADMIN, Role.ADMIN, token=token)
    return token


# A valid token's caller is kept this long by the process that checked it: reading the token's row was half of what
# the server did for each chat completion under load. Revoking through this process forgets them all at once.
RECENT_SECONDS = 2.0
_recent: dict[tuple[int, str], tuple[float, Caller]] = {}


def authenticate(store: Store, token: str) -> Caller | None:
    """The caller a token names, or None when it names none (unknown, malformed or revoked)."""
    if not well_formed(token):
        return None
    key = (id(store), token_digest(token))
    hit = _recent.get(key)
    if hit is not None and time.monotonic() - hit[0] < RECENT_SECONDS:
        return hit[1]
    with store.transaction() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.digest == key[1]))
        if row is None or row.revoked_at is not None:
            return None
        now = utcnow()
        if row.last_used_at is None or (now - as_utc(row.last_used_at)).total_seconds() > 60:
            row.last_used_at = now  # at most a write a minute per token
        caller = Caller(row.id, row.name, Role(row.role), tuple(row.projects) if row.projects else None,
                        tuple(row.namespaces) if row.namespaces else None)
    if len(_recent) > 10_000:
        _recent.clear()
    _recent[key] = (time.monotonic(), caller)
    return caller


def list_tokens(store: Store, include_revoked: bool = False) -> list[answers.Token]:
    with store.transaction() as session:
        query = select(ApiToken).order_by(ApiToken.created_at)
        if not include_revoked:
            query = query.where(ApiToken.revoked_at.is_(None))
        return [token_view(row) for row in session.scalars(query)]


def revoke(store: Store, token_id: str, caller: Caller) -> answers.Token:
    if id_prefix_matches_nothing(token_id):
        raise NotFound(f"no token {shown_id(token_id)}", hint="list them with: akka auth tokens list")
    with store.transaction() as session:
        rows = list(session.scalars(select(ApiToken).where(ApiToken.id.startswith(token_id))))
        if not rows:
            raise NotFound(f"no token {token_id}", hint="list them with: akka auth tokens list")
        if len(rows) > 1:
            raise Invalid(f"{token_id} names {len(rows)} tokens", hint="give more of the id")
        row = rows[0]
        if row.id == caller.token_id:
            raise Conflict("a token cannot revoke itself", hint="revoke it with another admin token")
        if row.revoked_at is None:
            session.execute(update(ApiToken).where(ApiToken.id == row.id).values(revoked_at=utcnow()))
            session.refresh(row)
        _recent.clear()  # a revoked token stops at once
        return token_view(row)


def token_view(row: ApiToken) -> answers.Token:
    return answers.Token(token_id=row.id, name=row.name, role=row.role, projects=row.projects,
                         namespaces=row.namespaces, created_at=iso(row.created_at), created_by=row.created_by,
                         last_used_at=iso(row.last_used_at), revoked_at=iso(row.revoked_at))
