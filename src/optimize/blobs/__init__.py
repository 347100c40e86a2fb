"""Content-addressed blob storage: objects are keyed by their sha256 only."""

from __future__ import annotations

from pathlib import Path

from optimize.blobs.local import LocalBlobStore
from optimize.core.settings import parse_blob_store


def open_blob_store(url: str | None, data_dir: Path) -> LocalBlobStore:
    """The deployment's store: the data dir's `blobs` folder, or an S3 bucket (`s3://BUCKET/PREFIX`) cached in its
    `blob-cache` folder. A bucket that does not answer raises Unavailable (the server does not start)."""
    location = parse_blob_store(url)
    if location is None:
        return LocalBlobStore(data_dir / "blobs")
    from optimize.blobs.s3 import S3BlobStore  # boto3 is imported only by a deployment on S3

    return S3BlobStore.open(*location, data_dir / "blob-cache")
