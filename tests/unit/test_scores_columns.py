"""A project's scores table on a migrated SQLite store: a trained model's column is the config name of the run that
trained it, else its model name and the run's config hash; runs given the same config name share a column."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from optimize.core.clock import utcnow
from optimize.evaluation.scores import scores
from optimize.registry import models
from optimize.store.db import Store
from optimize.store.tables import Evaluation, Project, Run
from tests.conftest import migrated_sqlite

BASE = "optimize/tiny-llama-3.2"
COMMIT = "ab" * 32
DATASET = "proj/tickets:v1"


@pytest.fixture
def store(tmp_path):
    migrated_sqlite(tmp_path / "scores.db")
    url = f"sqlite:///{tmp_path / 'scores.db'}"
    store = Store(url)
    with store.transaction() as session:
        session.add(Project(name="proj", archived=False, created_at=utcnow()))
    yield store
    store.dispose()


def trained(store, run_id: str, config_hash: str, config_name: str | None, name: str = "triage") -> str:
    """A completed run of `proj` and the adapter it registered; returns the adapter's reference."""
    now = utcnow()
    with store.transaction() as session:
        session.add(Run(
            id=run_id, submission_id=f"sub-{run_id}", submission_digest="0" * 64, project="proj", method="sft",
            phase="COMPLETED", attempt=1, plan={}, resolved={}, sources={}, config_hash=config_hash,
            base_entry_id=BASE, base_commit=COMMIT, dataset_reference=DATASET, dataset_digest="sha256:" + "ef" * 32,
            dataset_rows=8, model_name=name, device_profile="cpu", device_count=1, config_name=config_name,
            created_at=now))
        version = models.register_version(
            session, "proj", name, variant="ADAPTER",
            descriptor={"variant": "ADAPTER", "baseModel": f"{BASE}:v1", "adapterRank": 8,
                        "artifact": {"manifestDigest": "sha256:" + config_hash}},
            lineage={"baseModel": f"{BASE}:v1", "producedBy": {"kind": "run", "id": run_id}},
            produced_by_kind="run", produced_by_id=run_id).version
        return f"proj/{name}:v{version.version}"


def evaluated(store, evaluation_id: str, reference: str, kind: str, score: float, minutes: int) -> None:
    """A completed greedy evaluation of `reference` on DATASET, `minutes` after the first."""
    with store.transaction() as session:
        session.add(Evaluation(
            id=evaluation_id, project="proj", model_reference=reference,
            model={"kind": kind, "baseEntryId": BASE, "baseCommit": COMMIT}, dataset_reference=DATASET,
            dataset_digest="sha256:" + "ef" * 32, dataset_rows=8, grader="exact-match", device_profile="cpu",
            phase="COMPLETED", attempt=1, report={"meanScore": score},
            created_at=utcnow() + timedelta(minutes=minutes)))


def columns(store) -> dict[str, str]:
    table = scores(SimpleNamespace(store=store), "proj").model_dump(by_alias=True)
    [group] = table["groups"]
    return {column["configuration"]: column["evaluationId"] for column in group["columns"]}


def test_a_runs_config_name_is_its_column_else_the_model_name_and_config_hash(store):
    evaluated(store, "e-base", BASE, "base", 0.1, 0)
    named = trained(store, "r1", "1" * 64, "triage lr 5e-3")
    unnamed = trained(store, "r2", "2" * 64, None)
    evaluated(store, "e-named", named, "adapter", 0.8, 1)
    evaluated(store, "e-unnamed", unnamed, "adapter", 0.7, 2)
    assert columns(store) == {"triage 22222222": "e-unnamed", "triage lr 5e-3": "e-named"}


def test_runs_with_the_same_config_name_share_a_column_its_newest_evaluation_shown(store):
    first = trained(store, "r1", "1" * 64, "shared")
    second = trained(store, "r2", "2" * 64, "shared")
    evaluated(store, "e-first", first, "adapter", 0.8, 1)
    evaluated(store, "e-second", second, "adapter", 0.6, 2)
    assert columns(store) == {"shared": "e-second"}
