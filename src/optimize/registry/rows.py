"""A dataset version's rows as stored, a page at a time (the dashboard's row viewer): read from its shards in order,
each line parsed as the JSON it is, numbered from 1 as refusals and analyses name lines."""

from __future__ import annotations

from typing import Any

import orjson

from optimize.blobs.local import LocalBlobStore
from optimize.core.errors import Invalid
from optimize.core.sharding import UTF8_BOM
from optimize.registry.datasets import get_dataset, resolve_version, version_objects
from optimize.schemas.registry import DatasetRows
from optimize.store.db import Store

MOST_ROWS = 100  # rows a page holds at most
PAGE_ROWS = 20  # rows a page holds when the caller does not say


def read_rows(store: Store, blobs: LocalBlobStore, namespace: str, name: str, selector: str, offset: int,
              limit: int) -> DatasetRows:
    """Rows `offset + 1` to `offset + limit` of the version (fewer at its end)."""
    if offset < 0:
        raise Invalid("offset must be 0 or more")
    if not 1 <= limit <= MOST_ROWS:
        raise Invalid(f"limit must be from 1 to {MOST_ROWS}")
    with store.transaction() as session:
        dataset = get_dataset(session, namespace, name)  # a token limited to other namespaces is refused here
        version = resolve_version(session, dataset, selector)
        shards = [(item.sha256, item.rows) for item in version_objects(session, version)]
        reference, total = f"{dataset.namespace}/{dataset.name}:v{version.version}", version.rows
    rows: list[dict[str, Any]] = []
    skip = offset
    for sha256, count in shards:
        if len(rows) == limit:
            break
        if skip >= count:
            skip -= count
            continue
        with blobs.open_held(sha256, f"shard sha256:{sha256} of {reference}") as shard:
            for index, raw in enumerate(shard):
                if index < skip:
                    continue
                rows.append({"line": offset + len(rows) + 1,
                             "row": orjson.loads(raw.removeprefix(UTF8_BOM) if index == 0 else raw)})
                if len(rows) == limit:
                    break
        skip = 0
    return DatasetRows(reference=reference, rows=total, offset=offset, items=rows)
