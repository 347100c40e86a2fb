"""A dataset version's rows as stored, read from its shards in order, each line parsed as the JSON it is, numbered
from 1 as refusals and analyses name lines: a page at a time (the dashboard's row viewer; prepared token rows as
their input_ids and loss_mask), or streamed whole (a bundle's field check, a pipeline's mix of versions)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from optimize.blobs.local import LocalBlobStore
from optimize.chat.images import image_paths
from optimize.core.errors import Gone, Invalid
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
        prepared = version.prepared is not None
        kept = {item["path"]: item["sha256"] for item in version.images or []}
    read = _parquet_rows if prepared else _jsonl_rows
    rows: list[dict[str, Any]] = []
    skip = offset
    for sha256, count in shards:
        if len(rows) == limit:
            break
        if skip >= count:
            skip -= count
            continue
        with blobs.open_held(sha256, f"shard sha256:{sha256} of {reference}") as shard:
            for row in read(shard, skip):
                rows.append({"line": offset + len(rows) + 1, "row": row,
                             "images": {path: kept[path] for path in image_paths(row) if path in kept}})
                if len(rows) == limit:
                    break
        skip = 0
    return DatasetRows(reference=reference, rows=total, offset=offset, items=rows)


def _jsonl_rows(shard, skip: int) -> Iterator[dict[str, Any]]:
    for index, raw in enumerate(shard):
        if index >= skip:
            yield orjson.loads(raw.removeprefix(UTF8_BOM) if index == 0 else raw)


def _parquet_rows(shard, skip: int) -> Iterator[dict[str, Any]]:
    """A Parquet file of prepared token rows: each row's input_ids and loss_mask."""
    import pyarrow.parquet as pq

    index = 0
    for batch in pq.ParquetFile(shard).iter_batches(columns=["input_ids", "loss_mask"]):
        for ids, mask in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            if index >= skip:
                yield {"input_ids": ids, "loss_mask": mask}
            index += 1


def version_rows(blobs: LocalBlobStore, objects: list[dict[str, Any]], label: str) -> Iterator[tuple[int, dict]]:
    """(line, row) of a version's rows in order, lines numbered from 1 across its shards (`objects`, as
    `datasets.examples_objects` lists them), streamed."""
    line = 0
    for item in objects:
        if not blobs.holds(item["sha256"]):
            raise Gone(f"a shard of {label} (sha256:{item['sha256']}) is missing from the blob store",
                       hint="register the dataset again to restore it")
        with blobs.verified_path(item["sha256"]).open("rb") as handle:
            for offset, raw in enumerate(handle):
                line += 1
                yield line, orjson.loads(raw.removeprefix(UTF8_BOM) if offset == 0 else raw)
