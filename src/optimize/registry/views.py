"""JSON shapes of registry objects (camelCase, as the API and `-o json` show them): what each noun's version view
adds to the shared head of `registry/artifact_views.py`, a dataset's objects, and a namespace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from optimize.chat.formats import DatasetFormat
from optimize.core.bundle_zip import BundleSummary, Member
from optimize.core.clock import iso
from optimize.core.server_paths import shows_server_paths
from optimize.schemas import registry as answers
from optimize.store.tables import BundleVersion, DatasetObject, DatasetVersion, ModelVersion, Namespace


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
