"""A content-addressed blob store in an S3-compatible bucket, behind the local store's interface.

Objects live at `s3://BUCKET/PREFIX/sha256/ab/cd/<hex>`, keyed by their sha256 only, as in the local store. The
server keeps a verified cache of them in a local folder (`<data dir>/blob-cache`, a `LocalBlobStore`), so every
caller that reads a local path (`verified_path`, `path_for`) works unchanged:

- Reads go through the cache: an object not cached is downloaded into its staging folder, hashed as it arrives, and
  kept only when its bytes match its name. A bucket object whose bytes do not (or whose checksum, recorded by the
  bucket when it received them, is another digest's) is moved to `PREFIX/quarantine/`, logged and reported
  `Corrupt`, as the local store does: from then on it is not held, so the next upload of the right bytes heals it.
- Writes stage locally, are verified against the promised digest, are kept in the cache, then uploaded with a
  conditional write (`If-None-Match: *`) and the sha256 checksum (the bucket refuses other bytes): two writers of
  one digest never overwrite each other, and a refused conditional write means the object is there already (the
  same bytes, by its name). Objects of `multipart_threshold` bytes or more go up in parts (TransferConfig's sizes),
  the conditional write made by the completion.
- `holds` and `exists` ask the bucket (HEAD), the truth when several servers, or a cleared cache, share it.
- `remove` deletes the object and its cached copy; the collector's moves (`set_aside`, `put_back`, `discard`) copy
  objects under `PREFIX/collecting/` and back.
- `download_url` presigns a short-lived GET, so that a worker reads the object from the bucket itself.

Endpoint, region and credentials come from the usual AWS variables (`AWS_ENDPOINT_URL`, `AWS_REGION` or
`AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), which boto3 reads itself.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from optimize.blobs.local import RESTORE_HINT, Aside, BlobWriter, LocalBlobStore
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Corrupt, NotFound, Unavailable
from optimize.core.ids import new_id

log = logging.getLogger("optimize.blobs")
URL_SECONDS = 900  # a presigned GET's life: long enough to start the download, short enough to be useless later
CHUNK = 1024 * 1024
# An object's LastModified has whole seconds: it may have been written up to a second after it says
CLOCK_GRAIN = 1.0
MISSING = {"404", "NoSuchKey", "NotFound"}
REFUSED_WRITE = {"412", "PreconditionFailed"}  # If-None-Match: * met an object under the key already
RACED_WRITE = {"409", "ConditionalRequestConflict"}  # another conditional write of the key was under way: try again


class S3BlobWriter(BlobWriter):
    """A staged write: verified and cached as the local store's, then uploaded to the bucket."""

    def commit(self, expected_sha256: str) -> Path:
        target = super().commit(expected_sha256)
        try:
            self._store.upload(expected_sha256, target)
        except BaseException:
            # the cache holds only what the bucket holds: a failed upload leaves nothing that looks stored
            self._store.forget(expected_sha256)
            raise
        return target


class S3BlobStore(LocalBlobStore):
    def __init__(self, bucket: str, prefix: str, cache: Path, client: Any = None,
                 transfer: TransferConfig | None = None) -> None:
        super().__init__(cache)
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.client = client or s3_client()
        self.transfer = transfer or TransferConfig()

    @classmethod
    def open(cls, bucket: str, prefix: str, cache: Path) -> S3BlobStore:
        """The store, once the bucket answers: a missing or unreachable one refuses the server's start."""
        store = cls(bucket, prefix, cache)
        try:
            store.client.head_bucket(Bucket=bucket)
        except ClientError as error:
            reason = "does not exist" if _code(error) in MISSING else _reason(error)
            raise Unavailable(f"the blob store's bucket {bucket!r} {reason}", hint=ENDPOINT_HINT) from None
        except BotoCoreError as error:
            raise Unavailable(f"the blob store's bucket {bucket!r} cannot be reached: {error}",
                              hint=ENDPOINT_HINT) from None
        return store

    # Names

    def key_for(self, sha256: str) -> str:
        self.path_for(sha256)  # refuses what is not a sha256 hex digest
        return f"{self.prefix}sha256/{sha256[:2]}/{sha256[2:4]}/{sha256}"

    def location(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self.key_for(sha256)}"

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix.rstrip('/')}".rstrip("/")

    # Reads

    def exists(self, sha256: str) -> bool:
        return self._head(self.key_for(sha256)) is not None

    def holds(self, sha256: str) -> bool:
        try:
            return self._checked_head(sha256) is not None
        except Corrupt:
            return False

    def verified_path(self, sha256: str) -> Path:
        """The cached copy's path once its bytes are known to match its name, downloaded first when it is not
        cached (a cached copy that no longer matches is quarantined and downloaded again). An object the bucket
        does not hold keeps its path, as in the local store; one whose bytes do not match raises `Corrupt`."""
        try:
            path = super().verified_path(sha256)
        except Corrupt:
            path = self.path_for(sha256)  # only the cache's copy was bad: the bucket's is judged below
        if path.is_file():
            return path
        return self._fetch(sha256)

    def download_url(self, sha256: str) -> str:
        """A presigned GET of the object, checked first: NotFound when the bucket lacks it, Corrupt when its
        recorded checksum names other bytes (the worker hashes what it reads all the same)."""
        if self._checked_head(sha256) is None:
            raise NotFound(f"blob sha256:{sha256} is not held")
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self.key_for(sha256)}, ExpiresIn=URL_SECONDS)

    direct_writes = True  # workers write their blobs to the bucket, through presigned PUTs

    def upload_target(self, sha256: str, size: int) -> dict[str, Any] | None:
        """A short-lived presigned PUT of the object, for a worker to write it to the bucket itself: its sha256
        checksum is signed into it, so the bucket takes those bytes and no others (writing the same bytes again
        over a held object harms nothing). None for an object of `multipart_threshold` or more: the server writes
        it in parts."""
        if size >= self.transfer.multipart_threshold:
            return None
        checksum = _checksum(sha256)
        url = self.client.generate_presigned_url("put_object", Params={
            "Bucket": self.bucket, "Key": self.key_for(sha256), "ChecksumSHA256": checksum, "ContentLength": size},
            ExpiresIn=URL_SECONDS)
        return {"url": url, "headers": {"x-amz-checksum-sha256": checksum, "Content-Length": str(size)}}

    def accept_upload(self, sha256: str) -> int:
        """The size of an object a worker wrote through `upload_target`, once the bucket holds it under the
        checksum of its name (a store that records none: read back and hashed). NotFound when it is not there."""
        head = self._checked_head(sha256)  # Corrupt when its recorded checksum is another digest's
        if head is None:
            raise NotFound(f"blob sha256:{sha256} is not in the bucket", hint="upload it again")
        if head.get("ChecksumSHA256") != _checksum(sha256) and not self._remote_matches(sha256):
            raise Corrupt(f"the object written as sha256:{sha256} holds other bytes; it was quarantined",
                          hint="upload it again")
        return int(head["ContentLength"])

    def _fetch(self, sha256: str) -> Path:
        """Download the object into the cache through a staged write that keeps it only if it matches."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key_for(sha256))["Body"]
        except ClientError as error:
            if _code(error) in MISSING:
                return self.path_for(sha256)
            raise _unavailable(error, f"read blob sha256:{sha256}") from None
        writer = BlobWriter(self)  # the local writer: into the cache, never uploaded again
        try:
            for chunk in body.iter_chunks(CHUNK):
                writer.write(chunk)
            return writer.commit(sha256)
        except ChecksumMismatch:
            self.quarantine_remote(sha256, writer.sha256)
            raise Corrupt(f"stored object sha256:{sha256} is corrupt (its bytes hash to sha256:{writer.sha256}); it "
                          "was quarantined", hint=RESTORE_HINT) from None
        except (BotoCoreError, OSError) as error:
            writer.abort()
            raise Unavailable(f"blob sha256:{sha256} could not be read from the bucket: {error}") from None
        finally:
            body.close()

    def _remote_matches(self, sha256: str) -> bool:
        """Read the bucket's object and hash it (nothing kept); one that does not match is quarantined."""
        digest = hashlib.sha256()
        body = self.client.get_object(Bucket=self.bucket, Key=self.key_for(sha256))["Body"]
        try:
            for chunk in body.iter_chunks(CHUNK):
                digest.update(chunk)
        finally:
            body.close()
        if digest.hexdigest() != sha256:
            self.quarantine_remote(sha256, digest.hexdigest())
            return False
        return True

    def _checked_head(self, sha256: str) -> dict[str, Any] | None:
        """The object's HEAD (None when not held). The bucket recorded a checksum of the bytes it received: one
        that names other bytes quarantines the object (Corrupt)."""
        head = self._head(self.key_for(sha256), checksum=True)
        recorded = (head or {}).get("ChecksumSHA256")
        # a whole-object checksum only: a multipart upload's composite one ("…-N") is not the file's digest
        if recorded and "-" not in recorded and recorded != _checksum(sha256):
            actual = base64.b64decode(recorded).hex()
            self.quarantine_remote(sha256, actual)
            raise Corrupt(f"stored object sha256:{sha256} is corrupt (its bytes hash to sha256:{actual}); it was "
                          "quarantined", hint=RESTORE_HINT)
        return head

    def _head(self, key: str, checksum: bool = False) -> dict[str, Any] | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key,
                                           **({"ChecksumMode": "ENABLED"} if checksum else {}))
        except ClientError as error:
            if _code(error) in MISSING:
                return None
            raise _unavailable(error, f"ask the bucket for {key}") from None
        except BotoCoreError as error:
            raise Unavailable(f"the blob store could not be reached: {error}", hint="try again") from None

    # Writes

    def writer(self) -> S3BlobWriter:
        return S3BlobWriter(self)

    def upload(self, sha256: str, path: Path) -> None:
        """Put the verified file under its name, unless the bucket holds it already. A few tries: the object found
        there may be corrupt (then quarantined, and written again), or collected between the refusal and its
        refresh."""
        key = self.key_for(sha256)
        for _ in range(3):
            try:
                self._put(sha256, key, path)
                return
            except ClientError as error:
                code = _code(error)
                if code in RACED_WRITE:
                    continue
                if code not in REFUSED_WRITE:
                    raise _unavailable(error, f"store blob sha256:{sha256}") from None
            if self._refresh(sha256, key):
                return
        raise Unavailable(f"blob sha256:{sha256} could not be stored: the bucket kept refusing the write",
                          hint="try again")

    def _refresh(self, sha256: str, key: str) -> bool:
        """After a refused conditional write: make the object there fresh (its LastModified, as a local write of
        the same bytes makes the file's mtime: the collector keeps what was just written) once it is known to be
        the right bytes, by the checksum the bucket recorded or else by reading it. False: it is gone now (a
        corrupt one quarantined, or collected meanwhile), so the write is to be made again."""
        try:
            head = self._checked_head(sha256)
            if head is None:
                return False
            recorded = head.get("ChecksumSHA256")
            if (not recorded or "-" in recorded) and not self._remote_matches(sha256):
                return False  # no whole-object checksum to trust, and its bytes did not match: quarantined
            self._copy(key, key, {"MetadataDirective": "REPLACE", "Metadata": {"written": f"{time.time():.3f}"}})
            return True
        except Corrupt:
            return False
        except ClientError as error:
            if _code(error) in MISSING:
                return False
            raise _unavailable(error, f"store blob sha256:{sha256}") from None

    def _put(self, sha256: str, key: str, path: Path) -> None:
        size = path.stat().st_size
        if size >= self.transfer.multipart_threshold:
            self._put_parts(key, path, size)
            return
        with path.open("rb") as body:
            # the checksum is signed with the request: the bucket stores these bytes only if they hash to the name
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*",
                                   ChecksumSHA256=_checksum(sha256))

    def _put_parts(self, key: str, path: Path, size: int) -> None:
        """A multipart upload in TransferConfig's part size and concurrency. boto3's managed upload cannot make
        the conditional write, so the parts go here and the completion carries `If-None-Match: *`."""
        part = max(self.transfer.multipart_chunksize, 5 * 1024 * 1024)  # S3's smallest part but the last
        upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]

        def send(number: int) -> dict[str, Any]:
            with path.open("rb") as source:
                source.seek((number - 1) * part)
                data = source.read(part)
            answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                             Body=data)
            return {"ETag": answer["ETag"], "PartNumber": number}

        try:
            with ThreadPoolExecutor(max_workers=max(1, self.transfer.max_request_concurrency)) as pool:
                parts = list(pool.map(send, range(1, -(-size // part) + 1)))
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                                  MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except BaseException:
            _quietly(self.client.abort_multipart_upload, Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def _copy(self, source: str, target: str, extra: dict[str, Any] | None = None) -> None:
        """Copy within the bucket; boto3's managed copy goes in parts past 5 GB, where one CopyObject cannot."""
        self.client.copy({"Bucket": self.bucket, "Key": source}, self.bucket, target, ExtraArgs=extra or {},
                         Config=self.transfer)

    # Removal, quarantine, and the collector's moves

    def forget(self, sha256: str) -> None:
        """Drop the cached copy only."""
        super().remove(sha256)

    def remove(self, sha256: str) -> bool:
        """Delete the object and its cached copy (the collector, once nothing names it); False when the bucket did
        not hold it."""
        key = self.key_for(sha256)
        held = self._head(key) is not None
        self.client.delete_object(Bucket=self.bucket, Key=key)
        self.forget(sha256)
        return held

    def quarantine_remote(self, sha256: str, actual: str) -> str | None:
        """Move a bucket object whose bytes hash to `actual` under `PREFIX/quarantine/` (kept for inspection): from
        now on the object is not held, so the next upload of the right bytes stores it again."""
        key, target = self.key_for(sha256), f"{self.prefix}quarantine/{sha256}.{new_id()}"
        try:
            self._copy(key, target)
        except ClientError as error:
            if _code(error) in MISSING:
                return None  # another reader moved it first
            raise _unavailable(error, f"quarantine blob sha256:{sha256}") from None
        self.client.delete_object(Bucket=self.bucket, Key=key)  # a good cached copy stays: it is checked itself
        log.warning("blob sha256:%s is corrupt (its bytes hash to sha256:%s); quarantined as s3://%s/%s", sha256,
                    actual, self.bucket, target)
        return target

    def listed(self) -> list[tuple[str, int, float]]:
        held = []
        for item in self._list(f"{self.prefix}sha256/"):
            sha256 = item["Key"].rsplit("/", 1)[-1]
            if is_sha256_hex(sha256) and item["Key"] == self.key_for(sha256):
                held.append((sha256, item["Size"], _written(item["LastModified"])))
        return held

    def set_aside(self, sha256: str, cutoff: float) -> Aside | None:
        """Copy the object under `collecting/` (only if it was not written since `cutoff`, a condition the bucket
        checks with the copy), then delete it and its cached copy."""
        key, target = self.key_for(sha256), f"{self.prefix}collecting/{sha256}.{new_id()}"
        head = self._head(key)
        if head is None or _written(head["LastModified"]) >= cutoff:
            return None
        unmodified_since = datetime.fromtimestamp(cutoff - CLOCK_GRAIN, UTC)
        try:
            self._copy(key, target, {"CopySourceIfUnmodifiedSince": unmodified_since})
        except ClientError as error:
            if _code(error) in MISSING | REFUSED_WRITE:
                return None  # gone, or written again meanwhile
            raise
        self.client.delete_object(Bucket=self.bucket, Key=key)
        self.forget(sha256)
        return Aside(sha256, _written(head["LastModified"]), target)

    def put_back(self, aside: Aside) -> None:
        # a copy written under the name meanwhile holds the same bytes: copying over it changes nothing but its date
        self._copy(aside.place, self.key_for(aside.sha256))
        self.client.delete_object(Bucket=self.bucket, Key=aside.place)

    def discard(self, aside: Aside) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=aside.place)

    def left_aside(self) -> list[Aside]:
        left = []
        for item in self._list(f"{self.prefix}collecting/"):
            sha256 = item["Key"].rsplit("/", 1)[-1].split(".")[0]
            if is_sha256_hex(sha256):
                left.append(Aside(sha256, _written(item["LastModified"]), item["Key"]))
        return left

    def _list(self, prefix: str):
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            yield from page.get("Contents", [])


ENDPOINT_HINT = ("check AWS_ENDPOINT_URL (for a store other than AWS), AWS_REGION and the credentials "
                 "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), and that the bucket exists")


def s3_client() -> Any:
    """A client configured by the AWS variables boto3 reads itself; path-style addressing when an endpoint is named
    (S3-compatible servers rarely answer bucket subdomains), SigV4 (presigned URLs included), short connect
    timeouts so that an unreachable store refuses the start quickly, and checksums only where a call needs one or
    we pass it (some S3-compatible servers refuse the CRC32 trailers boto3 adds otherwise)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(signature_version="s3v4", connect_timeout=5, read_timeout=60,
                    retries={"max_attempts": 3, "mode": "standard"},
                    s3={"addressing_style": "path" if endpoint else "auto"},
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    return boto3.session.Session().client("s3", region_name=os.environ.get("AWS_REGION") or None, config=config)


def _checksum(sha256: str) -> str:
    """The digest as S3's `x-amz-checksum-sha256` writes it (base64 of the 32 bytes)."""
    return base64.b64encode(bytes.fromhex(sha256)).decode()


def _written(last_modified: datetime) -> float:
    return last_modified.timestamp() + CLOCK_GRAIN


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code") or error.response.get("ResponseMetadata", {})
               .get("HTTPStatusCode", ""))


def _reason(error: ClientError) -> str:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status == 403 or _code(error) in {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
        return "refuses these credentials"
    return f"cannot be used ({_code(error)})"


def _unavailable(error: ClientError, doing: str) -> Unavailable:
    return Unavailable(f"the blob store could not {doing}: {_code(error)} "
                       f"{error.response.get('Error', {}).get('Message', '')}".rstrip(), hint="try again")


def _quietly(call, **kwargs) -> None:
    try:
        call(**kwargs)
    except (ClientError, BotoCoreError):
        pass
