"""JSON shapes of registry objects (camelCase, as the API and `-o json` show them): what each noun's version view
adds to the shared head of `registry/artifact_views.py`, a dataset's objects, a model version's standing score, and
a namespace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.chat.formats import DatasetFormat
from optimize.core.bundle_zip import BundleSummary, Member
from optimize.core.clock import iso
from optimize.core.server_paths import shows_server_paths
from optimize.schemas import registry as answers
from optimize.store.tables import (
    BundleVersion,
    DatasetObject,
    DatasetVersion,
    Evaluation,
    ModelVersion,
    Namespace,
    StandingEvaluation,
)


def dataset_fields(version: DatasetVersion) -> dict[str, Any]:
    count_key = "pairs" if DatasetFormat(version.format).kind == "preference" else "examples"
    return {
        "format": version.format,
        count_key: version.rows,
        "toolRows": version.tool_rows,
        "shards": version.object_count,
        "bytes": version.size_bytes,
        "createdAt": iso(version.created_at),
        "conversion": version.conversion,
        "prepared": version.prepared,
        "images": len(version.images or []),
    }


def dataset_objects(objects: list[DatasetObject], location: Callable[[str], str] | None) -> list[dict[str, Any]]:
    """A version's shards in order; where each is kept only for an administrator's token."""
    return [
        {
            "path": item.path,
            "digest": f"sha256:{item.sha256}",
            "bytes": item.size_bytes,
            "rows": item.rows,
            "location": location(item.sha256) if location and shows_server_paths() else None,
        }
        for item in objects
    ]


def model_fields(version: ModelVersion) -> dict[str, Any]:
    produced_by = None
    if version.produced_by_kind is not None:
        produced_by = {"kind": version.produced_by_kind, "id": version.produced_by_id}
    return {
        "variant": version.variant,
        "registeredAt": iso(version.created_at),
        "lifecycle": "active",
        "servingModel": version.descriptor,
        "producedBy": produced_by,
    }


def standing_scores(session: Session, version_ids: list[int]) -> dict[int, answers.StandingScore]:
    """Each version's score from its project's standing evaluation (the newest one it had, where the project's
    changed since), by version id; a version without one is left out. Read from the rows the evaluation kind keeps
    (`evaluation/standing.py`), so the registry knows no evaluation code."""
    if not version_ids:
        return {}
    rows = session.execute(
        select(StandingEvaluation, Evaluation)
        .outerjoin(Evaluation, Evaluation.id == StandingEvaluation.evaluation_id)
        .where(StandingEvaluation.model_version_id.in_(version_ids))
        .order_by(StandingEvaluation.id)).all()
    scores = {}
    for held, evaluation in rows:  # oldest first: the newest row of a version is the one kept
        scores[held.model_version_id] = answers.StandingScore(
            dataset=evaluation.dataset_reference if evaluation else held.dataset,
            grader=evaluation.grader if evaluation else held.grader,
            mean_score=(evaluation.report or {}).get("meanScore") if evaluation else None,
            evaluation_id=evaluation.id if evaluation else None,
            phase=evaluation.phase if evaluation else None,
            refusal=None if evaluation else held.refusal)
    return scores


def bundle_fields(version: BundleVersion) -> dict[str, Any]:
    summary = BundleSummary([Member(item["path"], item["bytes"]) for item in version.members])
    return {
        "bytes": version.size_bytes,
        "uncompressedBytes": version.uncompressed_bytes,
        "files": len(summary.files),
        "directories": len(summary.directories),
        "modules": summary.modules,
        "createdAt": iso(version.created_at),
    }


def namespace_view(namespace: Namespace, counts: dict[str, int]) -> answers.Namespace:
    """A namespace with how many artifacts of each noun it holds, by the noun's plural (datasets, models, …)."""
    return answers.Namespace(name=namespace.name, description=namespace.description, archived=namespace.archived,
                             archived_at=iso(namespace.archived_at), created_at=iso(namespace.created_at), **counts)
