"""Added catalog entries and selection facts in the store (migration 0014), on SQLite and PostgreSQL alike: an
added entry survives as the catalog entry it was, one repository is added once (the constraint decides), and a
restarted server's catalog applies what was added, after the file's own entries."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from optimize.catalog.additions import load_additions
from optimize.catalog.catalog import load_catalog
from optimize.catalog.schema import Entry
from optimize.core.clock import utcnow
from optimize.store.tables import BaseModelAddition, BaseModelSelection
from tests.conftest import migrated_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def _entry(repository: str) -> Entry:
    return Entry.model_validate({
        "id": repository.lower(), "repository": repository, "commit": "a" * 40, "family": "qwen2.5",
        "architecture": {"class": "Qwen2ForCausalLM", "hiddenSize": 64}, "parameters": {"total": 5, "active": None},
        "contextLength": 4096, "allowedFor": ["training", "serving"], "chatTemplateSha256": "b" * 64,
        "addedAt": "2026-01-01T00:00:00Z"})


def test_added_entries_are_kept_once_and_applied_after_the_files(store):
    entry = _entry("acme/Tiny-Chat")
    with store.transaction() as session:
        session.add(BaseModelAddition(entry_id=entry.id, repository=entry.repository,
                                      entry=entry.model_dump(mode="json", by_alias=True), added_at=utcnow()))
    with pytest.raises(IntegrityError), store.transaction() as session:
        session.add(BaseModelAddition(entry_id="acme/other", repository=entry.repository,
                                      entry=entry.model_dump(mode="json", by_alias=True), added_at=utcnow()))
    shipped = load_catalog()
    clash = shipped.entries[0]
    with store.transaction() as session:  # an entry the catalog file has already: the file wins
        session.add(BaseModelAddition(entry_id=clash.id, repository=clash.repository,
                                      entry=_entry(clash.repository).model_dump(mode="json", by_alias=True),
                                      added_at=utcnow()))
    load_additions(store, shipped)
    assert [e.id for e in shipped.added] == ["acme/tiny-chat"]
    assert shipped.find("acme/tiny-chat") == entry and shipped.find(clash.id) is clash


def test_a_selection_records_the_revision_asked_and_the_parameters_counted(store):
    with store.transaction() as session:
        session.add(BaseModelSelection(entry_id="acme/tiny-chat", repository="acme/Tiny-Chat", commit="c" * 40,
                                       content_digest="d" * 64, source="hub", path="/x", selected_at=utcnow(),
                                       revision="v1", parameters=8_019_808_256))
    with store.transaction() as session:
        kept = session.get(BaseModelSelection, "acme/tiny-chat")
        assert (kept.revision, kept.parameters) == ("v1", 8_019_808_256)  # beyond 32 bits: a BIGINT
