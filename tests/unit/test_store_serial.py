"""Transactions that count and then insert serialize when they hold the same key (`hold_key`: an advisory lock on
PostgreSQL, the write lock on SQLite), so a limit is never passed; on SQLite the write lock is taken only by the
transactions that ask for it, and readers do not wait for it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from optimize.core.clock import utcnow
from optimize.store.db import hold_key, hold_writes
from optimize.store.tables import Project
from tests.conftest import migrated_store

LIMIT, CLIENTS = 3, 8


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def count_then_insert(store, index: int, hold: bool) -> bool:
    with store.transaction() as session:
        if hold:
            hold_key(session, "limit")
        held = session.scalar(select(func.count()).select_from(Project).where(Project.name.startswith("p-")))
        time.sleep(0.05)  # what a request does between its check and its insert
        if held >= LIMIT:
            return False
        session.add(Project(name=f"p-{index}", archived=False, created_at=utcnow()))
        return True


def test_counted_inserts_under_one_key_never_pass_the_limit(store):
    start = threading.Barrier(CLIENTS)

    def one(index: int) -> bool:
        start.wait()
        return count_then_insert(store, index, hold=True)

    with ThreadPoolExecutor(CLIENTS) as pool:
        admitted = sum(pool.map(one, range(CLIENTS)))
    assert admitted == LIMIT
    with store.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Project)) == LIMIT


@pytest.fixture
def sqlite_store(tmp_path):
    store = migrated_store("sqlite", tmp_path)
    yield store
    store.dispose()


def test_a_transaction_that_has_written_keeps_its_write_lock(sqlite_store):
    with sqlite_store.transaction() as session:
        session.add(Project(name="first", archived=False, created_at=utcnow()))
        session.flush()  # pysqlite has begun the transaction: it holds the write lock already
        hold_writes(session)
        session.add(Project(name="second", archived=False, created_at=utcnow()))
    with sqlite_store.transaction() as session:
        assert set(session.scalars(select(Project.name))) == {"first", "second"}


def test_readers_do_not_wait_for_a_held_write_lock_and_writers_do(sqlite_store):
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with sqlite_store.transaction() as session:
            hold_writes(session)
            session.add(Project(name="held", archived=False, created_at=utcnow()))
            session.flush()
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        began = time.monotonic()
        with sqlite_store.transaction() as session:  # an ordinary transaction reads at once (WAL)
            assert session.scalar(select(func.count()).select_from(Project)) == 0
        assert time.monotonic() - began < 1

        def writer() -> float:
            began = time.monotonic()
            with sqlite_store.transaction() as session:
                hold_writes(session)
                assert session.get(Project, "held") is not None  # it sees what the holder committed
            return time.monotonic() - began

        with ThreadPoolExecutor(1) as pool:
            waited = pool.submit(writer)
            time.sleep(0.5)
            release.set()
            assert waited.result(10) >= 0.4  # it waited for the holder (busy timeout), then went on
    finally:
        release.set()
        thread.join(10)
