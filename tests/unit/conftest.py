"""Unit fixtures: stand-in models for chat tests, built once per session (offline, deterministic); a store with a
project's datasets registered, for admission's tests; a deployment as the kernel's readers see it, with analyses as
plain jobs to read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture(scope="session")
def standin_dirs(tmp_path_factory):
    pytest.importorskip("transformers")
    from optimize.catalog.standins import FAMILIES, StandIn, build

    root = tmp_path_factory.mktemp("standins")
    return {family: (root / family, build(StandIn(family), root / family)) for family in FAMILIES}


@pytest.fixture(scope="session")
def renderers(standin_dirs):
    from optimize.chat.families import content_as_parts, template_kwargs
    from optimize.chat.render import ChatRenderer

    return {family: ChatRenderer.from_pretrained(str(path), template_kwargs(family), parts=content_as_parts(family))
            for family, (path, _commit) in standin_dirs.items()}


@pytest.fixture
def admission_session(tmp_path):
    """A transaction on a fresh SQLite store holding namespace `proj` with three registered datasets, one version
    each: `chat`, `pairs` (preference) and `tooled` (chat, three rows offering tools)."""
    from optimize.core.clock import utcnow
    from optimize.store.db import Store
    from optimize.store.tables import Dataset, DatasetVersion, Namespace
    from tests.conftest import migrated_sqlite

    migrated_sqlite(tmp_path / "store.db")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    with store.transaction() as session:
        session.add(Namespace(name="proj", archived=False, created_at=utcnow()))
        session.flush()
        for name, kind, fmt, tools in (("chat", "chat", "chat-jsonl-v1", 0),
                                       ("pairs", "preference", "preference-jsonl-v1", 0),
                                       ("tooled", "chat", "chat-jsonl-v1", 3)):
            dataset = Dataset(namespace="proj", name=name, kind=kind, created_at=utcnow())
            session.add(dataset)
            session.flush()
            session.add(DatasetVersion(dataset_id=dataset.id, version=1, digest=f"sha256:{name:0>64}", format=fmt,
                                       rows=10, tool_rows=tools, size_bytes=100, object_count=1, created_at=utcnow()))
        session.flush()
        yield session
    store.dispose()


@pytest.fixture
def deployment(tmp_path):
    """What the kernel's readers take of a deployment: a fresh SQLite store and its data folder."""
    from tests.conftest import migrated_store

    store = migrated_store("sqlite", tmp_path)
    yield SimpleNamespace(store=store, data_dir=tmp_path)
    store.dispose()


@pytest.fixture
def add_analysis(deployment):
    """Adds an analysis in a phase, a job of the kernel with nothing else to it: `add_analysis(job_id, phase)`."""
    from optimize.core.clock import utcnow
    from optimize.store.tables import Analysis

    def add(job_id: str, phase: str) -> None:
        with deployment.store.transaction() as session:
            session.add(Analysis(id=job_id, examples_digest=job_id, kind="chat", base_entry_id="b", base_commit="c",
                                 optimize_version="v", dataset_reference="r", phase=phase, attempt=1,
                                 created_at=utcnow()))

    return add
