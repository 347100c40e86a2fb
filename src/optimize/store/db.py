"""Engine and sessions: SQLite (WAL, foreign keys, full sync) by default, PostgreSQL when asked.

`postgresql://` URLs are taken as psycopg 3 URLs. Migrations are applied by `store.migrate.upgrade`.

Transactions that check a limit and then insert what it limits (the quotas) serialize with `hold_writes` (SQLite)
and `hold_key` or a row lock (PostgreSQL); every other transaction keeps pysqlite's default, deferred one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from optimize.core.errors import Conflict, NotFound


def normalize_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Store:
    """The database of one deployment: hands out transactions."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.after_commit: Callable[[list[Any]], None] | None = None  # carries out the effects transactions queued

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One unit of work: committed on success, rolled back on any error. Effects queued on the session
        (`jobs.effects`) are carried out once it has committed, never before."""
        with self._sessions() as session:
            with session.begin():
                yield session
            pending = session.info.pop("effects", None)
        if pending and self.after_commit is not None:
            self.after_commit(pending)

    def dispose(self) -> None:
        self.engine.dispose()


def hold_writes(session: Session) -> None:
    """On SQLite, make the session's transaction the database's one writer now (BEGIN IMMEDIATE, waiting on the
    busy timeout for the writer before it), so nothing it reads from here on changes before it commits.

    pysqlite runs reads outside any transaction and begins a deferred one only at the first write, so two
    transactions that count and then insert may both count the same rows. A transaction that has written already
    holds the write lock and is left as it is. Nothing on PostgreSQL, where a row lock (or `hold_key`) does this."""
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return
    if not connection.connection.driver_connection.in_transaction:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def hold_key(session: Session, key: str) -> None:
    """Serialize the transactions that hold the same `key` until each ends: a transaction-level advisory lock on
    PostgreSQL, for what has no row to lock (a namespace before its first registration); the write lock on
    SQLite (`hold_writes`). Taken first in a transaction, before any row lock, so no two wait on each other."""
    if session.get_bind().dialect.name == "sqlite":
        hold_writes(session)
        return
    number = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": number})


def insert_ignoring_conflict(session: Session, table: Any, values: dict[str, Any], keys: list[str]) -> int:
    """INSERT that does nothing when a row with the same `keys` exists; returns the rows inserted (0 or 1).

    The count comes from RETURNING, not the cursor's rowcount, which psycopg reports as -1 for this statement."""
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        statement = sqlite.insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
    elif dialect == "postgresql":
        statement = postgresql.insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
    else:  # pragma: no cover - other dialects are not supported
        statement = insert(table).values(values)
    primary_key = list(table.__table__.primary_key.columns)
    return len(session.execute(statement.returning(*primary_key)).all())


ID_PREFIX_MIN = 4
ID_LENGTH = 32  # core.ids.new_id: 32 hex digits
HEX = frozenset("0123456789abcdef")
SHOWN_ID = 40  # characters of a text that names no id a refusal quotes


def id_prefix_matches_nothing(prefix: str) -> bool:
    """Whether no id can start with `prefix` (lowercased): longer than an id, or holding a character no id has. Such
    a text is answered not found without asking the store, which would read `%` and `_` as LIKE's wildcards and,
    on SQLite, fail a pattern past 50,000 bytes."""
    return len(prefix) > ID_LENGTH or not set(prefix) <= HEX


def shown_id(text: str) -> str:
    """`text` as a refusal quotes it: cut where it is far longer than any id."""
    return repr(text) if len(text) <= SHOWN_ID else repr(text[:SHOWN_ID]) + "…"


def find_by_id_prefix(session: Session, table: Any, text: str, noun: str, list_hint: str,
                      visible: Any | None = None) -> Any:
    """The one row whose id starts with `text` (at least 4 characters, any case): runs, snapshots, evaluations.
    `visible`: a condition the caller may see rows under (a limited token's projects); others do not exist."""
    prefix = text.strip().lower()
    if len(prefix) < ID_PREFIX_MIN:
        raise NotFound(f"{noun} {text!r} does not exist", hint=f"give at least {ID_PREFIX_MIN} characters of its id")
    if id_prefix_matches_nothing(prefix):
        raise NotFound(f"{noun} {shown_id(text)} does not exist", hint=list_hint)
    query = select(table).where(table.id.startswith(prefix))
    found = session.scalars((query if visible is None else query.where(visible)).limit(2)).all()
    if len(found) > 1:
        raise Conflict(f"{text!r} names more than one {noun}", hint="give more of the id")
    if not found:
        raise NotFound(f"{noun} {text!r} does not exist", hint=list_hint)
    return found[0]

