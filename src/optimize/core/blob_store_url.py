"""The form of a blob store's URL (`--blob-store`, `OPTIMIZE_BLOB_STORE`): `s3://BUCKET[/PREFIX]`, or nothing for
the data dir's own `blobs` folder."""

from __future__ import annotations

import re

from optimize.core.errors import Invalid

# S3's rules for a bucket's name: 3 to 63 lowercase letters, digits, dots and hyphens, a letter or digit at each end
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def parse_blob_store(url: str | None) -> tuple[str, str] | None:
    """(bucket, prefix) of `s3://BUCKET[/PREFIX]`, the prefix without slashes at its ends; None (unset or empty):
    the data dir's own `blobs` folder. Anything else is refused (Invalid), before the server binds a port."""
    if not url:
        return None
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not _BUCKET.fullmatch(bucket) or "//" in f"/{prefix}":
        raise Invalid(f"the blob store {url!r} is not an s3://BUCKET[/PREFIX] URL",
                      hint="pass --blob-store s3://BUCKET/PREFIX (or OPTIMIZE_BLOB_STORE), or leave it unset to keep "
                           "blobs in the data dir")
    return bucket, prefix.strip("/")
