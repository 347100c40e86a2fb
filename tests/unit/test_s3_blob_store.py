"""The S3 blob store against a real S3-compatible server: SeaweedFS (`weed mini`, tests/s3_server.py) on 127.0.0.1,
one process for the module and one bucket a test. Writes verified then conditional (two writers of one digest,
an object already there), reads through the verified cache, corrupt objects quarantined in the bucket, multipart
uploads, removal, presigned reads, the collector's moves, and the refusals of a bad URL or bucket."""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from optimize.blobs import open_blob_store
from optimize.blobs.local import LocalBlobStore
from optimize.blobs.s3 import S3BlobStore, _checksum
from optimize.core.errors import ChecksumMismatch, Corrupt, Invalid, NotFound, Unavailable
from optimize.core.settings import parse_blob_store

MiB = 1024 * 1024
_buckets = itertools.count()


@pytest.fixture
def aws_env(s3, monkeypatch):
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def bucket(s3):
    return s3.create_bucket(f"blobs-{next(_buckets)}")


@pytest.fixture
def store(s3, bucket, tmp_path) -> S3BlobStore:
    return S3BlobStore(bucket, "team/a", tmp_path / "cache", client=s3.client())


def put(store: LocalBlobStore, content: bytes) -> str:
    sha = hashlib.sha256(content).hexdigest()
    writer = store.writer()
    writer.write(content)
    writer.commit(sha)
    return sha


def remote(store: S3BlobStore, sha: str) -> bytes:
    return store.client.get_object(Bucket=store.bucket, Key=store.key_for(sha))["Body"].read()


def keys(store: S3BlobStore, under: str) -> list[str]:
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=f"{store.prefix}{under}")
    return [item["Key"] for item in listing.get("Contents", [])]


def test_a_write_lands_under_its_digest_and_reads_back_through_a_fresh_cache(s3, store, bucket, tmp_path):
    sha = put(store, b"hello blobs\n")
    assert store.key_for(sha) == f"team/a/sha256/{sha[:2]}/{sha[2:4]}/{sha}"
    assert store.location(sha) == f"s3://{bucket}/team/a/sha256/{sha[:2]}/{sha[2:4]}/{sha}"
    assert remote(store, sha) == b"hello blobs\n"
    assert store.holds(sha) and store.exists(sha)
    # another server (or this one with its cache cleared) reads it from the bucket, verified, into its cache
    other = S3BlobStore(bucket, "team/a", tmp_path / "other-cache", client=s3.client())
    assert not other.path_for(sha).exists() and other.holds(sha)
    assert other.verified_path(sha).read_bytes() == b"hello blobs\n"
    size, chunks = other.stream(sha)
    assert (size, b"".join(chunks)) == (12, b"hello blobs\n")
    assert not list(other.staging.iterdir())  # the download was staged, then moved into place


def test_bytes_that_do_not_match_the_promised_digest_never_reach_the_bucket(store):
    writer = store.writer()
    writer.write(b"these bytes")
    with pytest.raises(ChecksumMismatch):
        writer.commit(hashlib.sha256(b"other bytes").hexdigest())
    assert keys(store, "sha256/") == [] and not list(store.staging.iterdir())


def test_the_bucket_refuses_other_bytes_under_the_signed_checksum(store):
    """The checksum sent with each write is the digest: the store keeps the bytes only if they hash to it."""
    sha = hashlib.sha256(b"right").hexdigest()
    with pytest.raises(ClientError):
        store.client.put_object(Bucket=store.bucket, Key=store.key_for(sha), Body=b"wrong",
                                ChecksumSHA256=_checksum(sha))
    assert not store.exists(sha)


def test_two_writers_of_one_digest_both_succeed_and_one_object_stays(s3, store, bucket, tmp_path):
    other = S3BlobStore(bucket, "team/a", tmp_path / "other-cache", client=s3.client())
    sha = put(store, b"same bytes")
    before = store.client.head_object(Bucket=bucket, Key=store.key_for(sha))["LastModified"]
    # the conditional write is refused: the object is there already, and is made fresh for the collector
    with pytest.raises(ClientError) as refused:
        store.client.put_object(Bucket=bucket, Key=store.key_for(sha), Body=b"same bytes", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    time.sleep(1.1)  # LastModified has whole seconds
    assert put(other, b"same bytes") == sha
    after = store.client.head_object(Bucket=bucket, Key=store.key_for(sha))["LastModified"]
    assert after > before and remote(store, sha) == b"same bytes" and keys(store, "sha256/") == [store.key_for(sha)]


def test_a_corrupt_object_is_reported_quarantined_and_healed_by_the_next_upload(store, tmp_path):
    sha = hashlib.sha256(b"the real bytes").hexdigest()
    # bytes that are not the name's, as a faulty disk or a foreign writer would leave them
    store.client.put_object(Bucket=store.bucket, Key=store.key_for(sha), Body=b"rotten bytes")
    assert store.exists(sha)
    with pytest.raises(Corrupt, match="is corrupt"):
        store.verified_path(sha)
    assert not store.exists(sha) and not store.holds(sha)
    quarantined = keys(store, "quarantine/")
    assert len(quarantined) == 1 and quarantined[0].startswith(f"team/a/quarantine/{sha}.")
    assert put(store, b"the real bytes") == sha and remote(store, sha) == b"the real bytes"


def test_an_upload_over_a_corrupt_object_heals_it(store):
    """The conditional write is refused by the corrupt object there: the writer reads it, finds it wrong,
    quarantines it and writes again."""
    sha = hashlib.sha256(b"healed").hexdigest()
    store.client.put_object(Bucket=store.bucket, Key=store.key_for(sha), Body=b"not healed")
    assert put(store, b"healed") == sha
    assert remote(store, sha) == b"healed" and len(keys(store, "quarantine/")) == 1


def test_an_object_whose_recorded_checksum_names_other_bytes_is_not_held(store):
    sha = hashlib.sha256(b"wanted").hexdigest()
    store.client.put_object(Bucket=store.bucket, Key=store.key_for(sha), Body=b"unwanted",
                            ChecksumSHA256=_checksum(hashlib.sha256(b"unwanted").hexdigest()))
    assert not store.holds(sha)  # HEAD alone tells: no download
    assert keys(store, "quarantine/") and not store.exists(sha)


def test_a_corrupt_cached_copy_is_read_again_from_the_bucket(store):
    sha = put(store, b"cached bytes")
    cached = store.path_for(sha)
    cached.write_bytes(b"bit rot!!!!!")
    assert store.verified_path(sha).read_bytes() == b"cached bytes"
    assert keys(store, "quarantine/") == []  # the bucket's copy was fine


def test_large_objects_go_up_in_parts_and_read_back_verified(s3, bucket, tmp_path):
    parts = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    store = S3BlobStore(bucket, "", tmp_path / "cache", client=s3.client(), transfer=parts)
    content = os.urandom(11 * MiB)
    sha = put(store, content)
    head = store.client.head_object(Bucket=bucket, Key=store.key_for(sha))
    assert store.key_for(sha).startswith("sha256/") and head["ETag"].strip('"').endswith("-3")
    assert head["ContentLength"] == len(content)
    store.forget(sha)
    assert store.verified_path(sha).read_bytes() == content
    assert put(store, content) == sha  # a second multipart write is refused at completion: already there
    uploads = store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert uploads == []  # the refused one was aborted


def test_remove_deletes_the_object_and_its_cached_copy(store):
    sha = put(store, b"short-lived")
    assert store.path_for(sha).exists()
    assert store.remove(sha) is True
    assert not store.exists(sha) and not store.path_for(sha).exists() and not store.verified_path(sha).exists()
    assert store.remove(sha) is False


def test_a_worker_reads_through_a_short_lived_presigned_url(store):
    sha = put(store, b"for a worker")
    url = store.download_url(sha)
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=900" in url
    assert httpx.get(url).content == b"for a worker"
    assert httpx.get(url.replace(sha, "0" * 64)).status_code == 403  # the signature names the object
    with pytest.raises(NotFound):
        store.download_url(hashlib.sha256(b"never stored").hexdigest())
    assert LocalBlobStore(store.root / "local").download_url(sha) is None  # the local store serves its bytes


def test_the_collectors_moves(store):
    old, fresh = put(store, b"old orphan"), put(store, b"fresh")
    listed = {sha: size for sha, size, _ in store.listed()}
    assert listed == {old: 10, fresh: 5}
    written = {sha: when for sha, _, when in store.listed()}
    # written after the cutoff: not moved (the bucket checks the condition with the copy)
    assert store.set_aside(fresh, written[fresh] - 5) is None
    aside = store.set_aside(old, written[old] + 5)
    assert aside is not None and not store.exists(old) and not store.path_for(old).exists()
    # what a later pass finds set aside: the same object at the same place (the listing dates the copy, a second
    # later where the copy falls in the next one; a pass only puts what it finds back)
    assert [(a.sha256, a.place) for a in store.left_aside()] == [(aside.sha256, aside.place)]
    store.put_back(aside)
    assert store.holds(old) and store.left_aside() == []
    store.discard(store.set_aside(old, written[old] + 5))
    assert not store.exists(old) and store.left_aside() == [] and store.holds(fresh)


def test_collect_removes_an_orphan_from_the_bucket_and_keeps_a_referenced_blob(s3, bucket, tmp_path):
    """registry.collection's pass on an S3 store (its rules are tested on the local store in test_blob_collection)."""
    from optimize.core.clock import utcnow
    from optimize.core.limits import DatasetLimits
    from optimize.core.quotas import Quotas
    from optimize.registry.collection import collect
    from optimize.registry.uploads import Registry
    from optimize.store.db import Store
    from optimize.store.migrate import upgrade
    from optimize.store.tables import Analysis

    url = f"sqlite:///{tmp_path / 'optimize.db'}"
    upgrade(url)
    registry = Registry(Store(url), S3BlobStore(bucket, "gc", tmp_path / "cache", client=s3.client()),
                        DatasetLimits(), Quotas())
    orphan, named = put(registry.blobs, b"orphan"), put(registry.blobs, b"named")
    with registry.store.transaction() as session:
        session.add(Analysis(id="an1", examples_digest="e", kind="chat", base_entry_id="b", base_commit="c",
                             optimize_version="v", dataset_reference="r", phase="done", lengths_sha256=named,
                             created_at=utcnow()))
    assert collect(registry, grace=timedelta(minutes=1)).blobs == 0  # written within the grace
    time.sleep(2.1)  # LastModified has whole seconds: older than a zero grace once two have passed
    report = collect(registry, grace=timedelta(seconds=0))
    assert (report.blobs, report.blob_bytes) == (1, 6)
    assert not registry.blobs.exists(orphan) and registry.blobs.holds(named)
    assert registry.blobs.left_aside() == []


def test_open_refuses_a_missing_bucket_or_an_unreachable_store(aws_env, tmp_path, monkeypatch):
    with pytest.raises(Unavailable, match="'no-such-bucket' does not exist"):
        open_blob_store("s3://no-such-bucket/x", tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(Unavailable, match="cannot be reached"):
        open_blob_store("s3://any-bucket", tmp_path)


def test_open_picks_the_store_the_url_names(aws_env, bucket, tmp_path):
    assert type(open_blob_store(None, tmp_path)) is LocalBlobStore
    store = open_blob_store(f"s3://{bucket}/deep/prefix/", tmp_path)
    assert isinstance(store, S3BlobStore) and store.describe() == f"s3://{bucket}/deep/prefix"
    assert store.root == tmp_path / "blob-cache"


@pytest.mark.parametrize("url", ["s3:/bucket", "http://bucket/x", "s3://", "s3://Bad_Bucket/x", "s3://ab",
                                 "s3://bucket//x", "/a/local/folder"])
def test_a_bad_blob_store_url_is_refused(url):
    with pytest.raises(Invalid, match="is not an s3://BUCKET"):
        parse_blob_store(url)


def test_a_good_blob_store_url_is_read():
    assert parse_blob_store("s3://my-bucket") == ("my-bucket", "")
    assert parse_blob_store("s3://my.bucket/a/b/") == ("my.bucket", "a/b")
    assert parse_blob_store("") is None and parse_blob_store(None) is None


def test_a_path_for_a_key_is_never_made_of_anything_but_a_digest(store):
    with pytest.raises(Invalid):
        store.key_for("../../etc/passwd")
    assert Path(store.path_for("a" * 64)).is_relative_to(store.root)


def test_the_worker_route_redirects_to_a_presigned_get_that_the_channel_follows(store, tmp_path, monkeypatch):
    """GET …/blobs/{sha256} (its lease checks first) answers 307 to the bucket; the worker's channel follows it
    without its lease token and hashes what arrives: bytes that are not the name's are refused."""
    from types import SimpleNamespace

    from optimize.api.routers import internal
    from optimize.client.http import ApiError
    from optimize.worker.channel import Channel

    checked = []
    monkeypatch.setattr(internal, "_fenced_reader", lambda *args: checked.append(args[1:]))
    sha, other = put(store, b"a worker's input"), put(store, b"something else")
    answer = internal.get_blob("run", "j1", sha, SimpleNamespace(), SimpleNamespace(blobs=store), "lease-1")
    assert checked == [("run", "j1", "lease-1", sha)]
    assert answer.status_code == 307 and answer.headers["location"].startswith(f"{store.client.meta.endpoint_url}/")

    seen = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-lease-token"))
        wanted = request.url.path.rsplit("/", 1)[-1]
        target = other if wanted == "0" * 64 else wanted  # a server gone wrong: another object's URL
        return httpx.Response(307, headers={"location": store.download_url(target)})

    channel = Channel("http://server.test", "lease-1", "run", "j1")
    channel._http = httpx.Client(base_url="http://server.test", headers={"X-Lease-Token": "lease-1"},
                                 transport=httpx.MockTransport(server))
    fetched = channel.fetch_blob(sha, cache=tmp_path / "worker-cache")
    assert fetched.read_bytes() == b"a worker's input" and seen == ["lease-1"]
    with pytest.raises(ApiError, match="arrived corrupted"):
        channel.fetch_blob("0" * 64, cache=tmp_path / "worker-cache")


def test_a_worker_writes_through_a_presigned_put_that_takes_only_its_names_bytes(store):
    data = b"a worker's save"
    sha = hashlib.sha256(data).hexdigest()
    target = store.upload_target(sha, len(data))
    assert "X-Amz-Signature=" in target["url"]
    wrong = httpx.put(target["url"], content=b"A worker's save", headers=target["headers"])  # as long, not the same
    assert wrong.status_code >= 400  # the checksum signed into the URL refuses them
    with pytest.raises(NotFound):
        store.accept_upload(sha)  # nothing was written
    assert httpx.put(target["url"], content=data, headers=target["headers"]).status_code == 200
    assert store.accept_upload(sha) == len(data) and store.holds(sha)
    assert store.verified_path(sha).read_bytes() == data
    local = LocalBlobStore(store.root / "local")
    assert local.upload_target(sha, len(data)) is None and not local.direct_writes
    assert store.upload_target(sha, store.transfer.multipart_threshold) is None  # the server writes it in parts
