"""The model registry's service functions on a migrated SQLite store: digests, numbering, resolution, filters."""

from __future__ import annotations

import pytest

from optimize.core.access import AccessLimits, limited_to
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.registry import aliases, models
from optimize.registry.namespaces import set_archived
from optimize.registry.nouns import MODELS
from optimize.store.db import Store
from optimize.store.tables import Event
from tests.conftest import migrated_sqlite, shown

COMMIT = "ab" * 32
BASE = "optimize/tiny-llama-3.2:v1"


@pytest.fixture
def store(tmp_path):
    migrated_sqlite(tmp_path / "registry.db")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    store = Store(url)
    yield store
    store.dispose()


def adapter(store, run_id: str, rank: int = 8, name: str = "triage"):
    """Register an adapter produced by `run_id` over the stand-in base; returns its reference."""
    descriptor = {"variant": "ADAPTER", "baseModel": BASE, "adapterRank": rank,
                  "artifact": {"manifestDigest": "sha256:" + "cd" * 32}, "modules": ["q_proj", "v_proj"]}
    lineage = {"baseModel": BASE, "datasets": [{"reference": "proj/train:v1", "digest": "sha256:" + "ef" * 32,
                                                "role": "training"}], "producedBy": {"kind": "run", "id": run_id}}
    with store.transaction() as session:
        version = models.register_version(session, "proj", name, variant="ADAPTER", descriptor=descriptor,
                                          lineage=lineage, produced_by_kind="run", produced_by_id=run_id).version
        return f"proj/{name}:v{version.version}", version.digest


def select_base(store, commit: str = COMMIT) -> str:
    with store.transaction() as session:
        models.register_base_model(session, "Optimize/Tiny-Llama-3.2", commit, "optimize/tiny-llama-3.2")
        return models.base_model_reference(session, "Optimize/Tiny-Llama-3.2", commit)


def test_base_model_registers_under_lowercased_repository_once_per_commit(store):
    assert select_base(store) == BASE
    assert select_base(store) == BASE
    assert select_base(store, "cd" * 32) == "optimize/tiny-llama-3.2:v2"
    with store.transaction() as session:
        assert models.base_model_reference(session, "optimize/tiny-llama-3.2", "ef" * 32) is None
        assert models.base_model_reference(session, "nobody/none", COMMIT) is None
        events = session.query(Event).filter(Event.subject == "model:optimize/tiny-llama-3.2").all()
    assert [(e.kind, e.data["version"]) for e in events] == [("registered", 1), ("registered", 2)]
    first = shown(models.get_model(store, "optimize", "tiny-llama-3.2", "v1"))
    assert first["servingModel"] == {"variant": "BASE", "repository": "Optimize/Tiny-Llama-3.2", "revision": COMMIT,
                                     "catalogEntry": "optimize/tiny-llama-3.2"}
    assert first["lineage"] == {} and first["producedBy"] == {"kind": "selection", "id": "optimize/tiny-llama-3.2"}
    assert first["lifecycle"] == "active" and first["aliases"] == [] and first["versionCount"] == 2


def test_digest_covers_what_is_served_not_lineage(store):
    select_base(store)
    first, digest = adapter(store, "run1")
    again, same = adapter(store, "run2")  # same descriptor, other producer: the version it already is
    assert (again, same) == (first, digest) == ("proj/triage:v1", digest)
    assert digest == models.model_digest("ADAPTER", models.get_model(store, "proj", "triage", "v1").serving_model)
    assert adapter(store, "run3", rank=16)[0] == "proj/triage:v2"
    assert [v["version"] for v in shown(models.list_versions(store, "proj", "triage"))] == [2, 1]


def test_reference_resolution(store):
    select_base(store)
    reference, digest = adapter(store, "run1")
    adapter(store, "run2", rank=16)
    with store.transaction() as session:
        for text, number in (("proj/triage", 2), ("proj/triage:latest", 2), ("PROJ/Triage:v1", 1),
                             (f"proj/triage@{digest}", 1)):
            model, version = models.resolve_model_reference(session, text)
            assert (model.namespace, model.name, version.version) == ("proj", "triage", number), text
        with pytest.raises(NotFound, match="model proj/triage has no version v7"):
            models.resolve_model_reference(session, "proj/triage:v7")
        with pytest.raises(NotFound, match="has no version with digest sha256:0000"):
            models.resolve_model_reference(session, "proj/triage@sha256:" + "00" * 32)
        with pytest.raises(NotFound, match="model proj/other does not exist"):
            models.resolve_model_reference(session, "proj/other:v1")
        with pytest.raises(Invalid, match="not of the form"):
            models.resolve_model_reference(session, "triage")
    body = shown(models.get_model(store, "proj", "triage", "latest"))
    assert body["reference"] == "proj/triage:v2" and body["aliases"] == ["latest"]
    assert body["lineage"]["datasets"][0]["reference"] == "proj/train:v1"


def test_version_filters(store):
    select_base(store)
    adapter(store, "run1")
    adapter(store, "run2", rank=16)
    with pytest.raises(Invalid, match="both a kind and an id"):
        shown(models.list_versions(store, "proj", "triage", produced_by_kind="run"))
    with pytest.raises(Invalid, match="both a kind and an id"):
        shown(models.list_versions(store, "proj", "triage", produced_by_id="run1"))
    by_run = shown(models.list_versions(store, "proj", "triage", produced_by_kind="run", produced_by_id="run2"))
    assert [v["reference"] for v in by_run] == ["proj/triage:v2"]
    assert len(shown(models.list_versions(store, "proj", "triage", base_model="optimize/tiny-llama-3.2"))) == 2
    assert len(shown(models.list_versions(store, "proj", "triage", base_model=BASE))) == 2
    select_base(store, "cd" * 32)
    assert shown(models.list_versions(store, "proj", "triage", base_model="optimize/tiny-llama-3.2:latest")) == []
    with pytest.raises(NotFound, match="model optimize/tiny-llama-3.2 has no version v9"):
        shown(models.list_versions(store, "proj", "triage", base_model="optimize/tiny-llama-3.2:v9"))
    with store.transaction() as session:  # a run over a base selected before it was registered
        models.register_version(session, "proj", "triage", variant="ADAPTER", descriptor={"adapterRank": 4},
                                lineage={"baseModel": None}, produced_by_kind="run", produced_by_id="run0")
    assert len(shown(models.list_versions(store, "proj", "triage", base_model="optimize/tiny-llama-3.2"))) == 2


def test_archived_namespace_resolves_and_refuses_new_versions(store):
    select_base(store)
    adapter(store, "run1")
    set_archived(store, "proj", True)
    assert shown(models.get_model(store, "proj", "triage", "v1"))["archived"] is True
    with pytest.raises(Refused, match="namespace 'proj' is archived"):
        adapter(store, "run2", rank=32)
    assert [m.model for m in models.list_models(store, None, False)] == ["optimize/tiny-llama-3.2"]
    assert [m.model for m in models.list_models(store, None, True)] == ["optimize/tiny-llama-3.2", "proj/triage"]
    listed = shown(models.list_models(store, "proj", False))
    assert listed[0]["versions"] == 1 and listed[0]["archived"] is True
    assert listed[0]["latest"]["reference"] == "proj/triage:v1"
    set_archived(store, "optimize", True)
    assert select_base(store) == BASE  # selection registers into an archived namespace


def test_bad_names_and_variants_are_refused(store):
    with store.transaction() as session:
        with pytest.raises(Invalid, match="model variant 'LORA'"):
            models.register_version(session, "proj", "m", variant="LORA", descriptor={}, lineage={})
        with pytest.raises(Invalid, match="model name 'bad name' is not a valid name"):
            models.register_version(session, "proj", "bad name", variant="BASE", descriptor={}, lineage={})
        with pytest.raises(Invalid, match="is not of the form OWNER/NAME"):
            models.register_base_model(session, "no-owner", COMMIT, "x")


def test_model_aliases_move_with_who_moved_them_and_name_a_version_everywhere(store):
    select_base(store)
    adapter(store, "run1")
    adapter(store, "run2", rank=16)
    with limited_to(AccessLimits(token_name="alice", token_id="t1")):
        moved = shown(aliases.set_alias(store, MODELS, "proj", "triage", "champion", "v1"))
    assert (moved["moved"], moved["reference"], moved["history"][0]["by"]) == (True, "proj/triage:v1", "alice")
    with limited_to(AccessLimits(token_name="bob", token_id="t2")):
        aliases.set_alias(store, MODELS, "proj", "triage", "candidate", "latest")
        aliases.set_alias(store, MODELS, "proj", "triage", "champion", "candidate")
    champion = shown(aliases.get_alias(store, MODELS, "proj", "triage", "champion"))
    assert [(h["version"], h["by"]) for h in champion["history"]] == [(1, "alice"), (2, "bob")]
    assert models.get_model(store, "proj", "triage", "champion").reference == "proj/triage:v2"
    with store.transaction() as session:
        _model, version = models.resolve_model_reference(session, "proj/triage:champion")
        assert version.version == 2  # what a job resolves at submission and records as proj/triage:v2
    detail = shown(models.read_model(store, "proj", "triage"))
    assert set(detail["aliases"]) == {"latest", "candidate", "champion"}
    assert [(m["alias"], m["from"], m["to"], m["by"]) for m in detail["aliasMoves"]] == [
        ("champion", None, 1, "alice"), ("candidate", None, 2, "bob"), ("champion", 1, 2, "bob")]
    assert [v["aliases"] for v in detail["versions"]][1] == []
    with pytest.raises(NotFound, match="model proj/triage has no alias 'canary'") as missing:
        aliases.get_alias(store, MODELS, "proj", "triage", "canary")
    assert missing.value.hint == "point it at a version with: akka registry models alias set proj/triage:canary " \
                                 "--version vN"
    with pytest.raises(Invalid, match="alias 'latest' is managed by the registry"):
        aliases.set_alias(store, MODELS, "proj", "triage", "latest", "v1")
