"""JSON shapes of registry objects (camelCase, as the API and `-o json` show them)."""

from __future__ import annotations

from typing import Any

from optimize.chat.formats import DatasetFormat
from optimize.core.clock import iso
from optimize.core.server_paths import shows_server_paths
from optimize.store.tables import Dataset, DatasetObject, DatasetVersion, Namespace


def version_json(
    dataset: Dataset,
    version: DatasetVersion,
    *,
    archived: bool,
    aliases: list[str],
    objects: list[DatasetObject] | None = None,
    location=None,
) -> dict[str, Any]:
    count_key = "pairs" if DatasetFormat(version.format).kind == "preference" else "examples"
    body: dict[str, Any] = {
        "reference": f"{dataset.namespace}/{dataset.name}:v{version.version}",
        "dataset": f"{dataset.namespace}/{dataset.name}",
        "namespace": dataset.namespace,
        "name": dataset.name,
        "version": version.version,
        "digest": version.digest,
        "format": version.format,
        count_key: version.rows,
        "toolRows": version.tool_rows,
        "shards": version.object_count,
        "bytes": version.size_bytes,
        "aliases": aliases,
        "archived": archived,
        "createdAt": iso(version.created_at),
        "conversion": version.conversion,
    }
    if objects is not None:
        body["objects"] = [
            {
                "path": item.path,
                "digest": f"sha256:{item.sha256}",
                "bytes": item.size_bytes,
                "rows": item.rows,
                "location": location(item.sha256) if location and shows_server_paths() else None,
            }
            for item in objects
        ]
    return body


def namespace_json(namespace: Namespace, datasets: int, models: int) -> dict[str, Any]:
    return {
        "name": namespace.name,
        "description": namespace.description,
        "archived": namespace.archived,
        "archivedAt": iso(namespace.archived_at),
        "createdAt": iso(namespace.created_at),
        "datasets": datasets,
        "models": models,
    }
