"""Upload sessions: a dataset version's shards arrive one at a time, verified and validated as they stream.

A session is keyed by its content (dataset name and version digest), so running the same `register` again
reaches the same session and sends only the shards the registry does not hold. A shard is stored under its
sha256 only once every row passed the row rules; `commit` turns held shards into a version.

The same functions serve rows a job produced (`registry/produced.py`): it opens a session, hands each shard's bytes
to `receive_shard` and commits with the version's `lineage`, so those rows pass every check an upload passes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from optimize.blobs.local import BlobWriter, LocalBlobStore
from optimize.chat.formats import DatasetFormat, dataset_version_digest, parse_format
from optimize.chat.images import path_error
from optimize.chat.jsonl import JsonlValidator
from optimize.chat.prepared import DESCRIPTOR, Descriptor, check_file, read_descriptor
from optimize.core.access import check_namespace, sees_namespace
from optimize.core.clock import as_utc, iso, utcnow
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Conflict, Gone, Invalid, NotFound, Refused, TooLarge
from optimize.core.ids import new_id
from optimize.core.limits import DatasetLimits
from optimize.core.quotas import Quotas
from optimize.core.refs import parse_reference
from optimize.core.sharding import SINGLE_OBJECT, shard_path
from optimize.jobs.lifecycle import transition
from optimize.registry import artifacts
from optimize.registry.archival import ensure_open, refuse_if_archived
from optimize.registry.datasets import describe_committed, find_dataset, move_alias
from optimize.registry.nouns import DATASETS
from optimize.registry.quotas import check_new_upload, lock_namespace
from optimize.registry.upload_phases import UPLOAD, UploadPhase
from optimize.schemas import uploads as answers
from optimize.schemas.registry import CommittedVersion
from optimize.store.db import Store, insert_ignoring_conflict
from optimize.store.tables import DatasetObject, DatasetVersion, RegistryImage, Shard, UploadSession

MOST_IMAGES = 100_000  # images one version's rows may name
OPEN, COMMITTED, REFUSED = UploadPhase.OPEN.value, UploadPhase.COMMITTED.value, UploadPhase.REFUSED.value


@dataclass(frozen=True, slots=True)
class Registry:
    """What the dataset services need of a deployment."""

    store: Store
    blobs: LocalBlobStore
    limits: DatasetLimits
    quotas: Quotas = field(default_factory=Quotas)


def _check_manifest(shards: Any, limits: DatasetLimits, descriptor: Descriptor | None = None
                    ) -> list[dict[str, Any]]:
    """The shards as the session keeps them; a prepared version's are its descriptor's files, in its order."""
    if not isinstance(shards, list) or not shards:
        raise Invalid("'shards' must list at least one shard")
    if len(shards) > limits.max_shards:
        raise Invalid(f"a version holds at most {limits.max_shards} shards; this upload lists {len(shards)}")
    if descriptor is not None and len(shards) != len(descriptor.files):
        raise Invalid(f"{DESCRIPTOR} lists {len(descriptor.files)} file(s) and the upload {len(shards)}",
                      hint="send each file the descriptor lists, in its order")
    manifest = []
    for index, shard in enumerate(shards):
        if descriptor is not None:
            expected_path = descriptor.files[index]
        else:
            expected_path = (SINGLE_OBJECT if len(shards) == 1 and shard.get("path") == SINGLE_OBJECT
                             else shard_path(index))
        sha, size, lines = shard.get("sha256"), shard.get("bytes"), shard.get("lines")
        if shard.get("index") != index or shard.get("path") != expected_path:
            raise Invalid(f"shard {index} must have index {index} and path {expected_path}")
        if not isinstance(sha, str) or not is_sha256_hex(sha):
            raise Invalid(f"shard {index} needs 'sha256' as 64 lowercase hex digits")
        if not isinstance(size, int) or not 0 < size <= limits.max_shard_bytes:
            raise Invalid(f"shard {index} must hold between 1 and {limits.max_shard_bytes} bytes")
        if not isinstance(lines, int) or lines < 1:
            raise Invalid(f"shard {index} must hold at least one line")
        manifest.append({"index": index, "path": expected_path, "sha256": sha, "bytes": size, "lines": lines})
    return manifest


def _held(session: Session, blobs: LocalBlobStore, sha256: str, kind: str) -> bool:
    """Whether the registry holds the shard: its row, and bytes that still hash to its name (a corrupt copy is
    quarantined here, so the register that asks sends the shard again and heals it)."""
    shard = session.get(Shard, sha256)
    return shard is not None and shard.kind == kind and blobs.holds(sha256)


def _format_and_descriptor(body: dict[str, Any]) -> tuple[DatasetFormat, Descriptor | None]:
    """The upload's format, and a prepared version's descriptor (required for it, refused for the others)."""
    data_format = parse_format(str(body.get("format", "")))
    given = body.get("prepared")
    if data_format is DatasetFormat.PREPARED:
        if given is None:
            raise Invalid(f"an upload of {data_format.value} needs prepared: its descriptor ({DESCRIPTOR})",
                          hint="akka registry datasets register sends it from the folder or ZIP")
        return data_format, read_descriptor(given)
    if given is not None:
        raise Invalid(f"prepared is the descriptor of prepared token rows; an upload of {data_format.value} has "
                      "none", hint="leave prepared out")
    return data_format, None


def _digest(data_format: DatasetFormat, manifest: list[dict[str, Any]], descriptor: Descriptor | None,
            images: list[dict[str, Any]] | None = None) -> str:
    return dataset_version_digest(data_format, [(s["path"], s["sha256"], s["bytes"]) for s in manifest], images,
                                  descriptor)


def _check_images(images: Any, data_format: DatasetFormat) -> list[dict[str, Any]] | None:
    """The images the rows name, each {path, sha256, bytes} (paths plain and unique); only chat and preference
    rows name images."""
    if not images:
        return None
    if not data_format.jsonl:
        raise Invalid("prepared token rows name no images", hint="leave images out")
    if not isinstance(images, list) or len(images) > MOST_IMAGES:
        raise Invalid(f"images must list at most {MOST_IMAGES:,} images")
    checked, seen = [], set()
    for item in images:
        path, sha, size = (item.get(key) for key in ("path", "sha256", "bytes")) if isinstance(item, dict) else \
            (None, None, None)
        why = path_error(path)
        if why:
            raise Invalid(f"images: {why}")
        if not isinstance(sha, str) or not is_sha256_hex(sha) or not isinstance(size, int) or size < 1:
            raise Invalid(f"images: {path} needs sha256 (64 lowercase hex digits) and bytes")
        if path in seen:
            raise Invalid(f"images: {path} is listed twice", hint="list each image path once")
        seen.add(path)
        checked.append({"path": path, "sha256": sha, "bytes": size})
    return checked


def _session_view(registry: Registry, session: Session, upload: UploadSession) -> answers.UploadSession:
    kind = DatasetFormat(upload.format).kind
    shards = [
        {**item, "held": _held(session, registry.blobs, item["sha256"], kind)} for item in upload.manifest
    ]
    return answers.UploadSession(
        upload_id=upload.id, dataset=f"{upload.namespace}/{upload.name}", format=upload.format, digest=upload.digest,
        phase=upload.phase, expires_at=iso(upload.expires_at), shards=shards)


def create_upload(registry: Registry, body: dict[str, Any]) -> answers.UploadSession:
    """Open (or reach again) the session for this content; refuse what can never be registered first."""
    reference = parse_reference(str(body.get("dataset", "")))
    if reference.selector != "latest":
        raise Invalid(f"register into {reference.artifact}, without a version or alias")
    data_format, descriptor = _format_and_descriptor(body)
    manifest = _check_manifest(body.get("shards"), registry.limits, descriptor)
    images = _check_images(body.get("images"), data_format)
    conversion = body.get("conversion")
    if conversion is not None and conversion["format"] != data_format.value:
        raise Invalid(f"the conversion record says the rows were converted to {conversion['format']}, but the "
                      f"upload is of {data_format.value}", hint="send the record of this upload's conversion")
    digest = _digest(data_format, manifest, descriptor, images)
    key = hashlib.sha256(f"{reference.artifact}\n{digest}".encode()).hexdigest()
    now = utcnow()
    expires = now + timedelta(seconds=registry.limits.upload_expiry_seconds)
    check_namespace(reference.namespace)
    with registry.store.transaction() as session:
        lock_namespace(session, reference.namespace)  # first: the quota check and the insert below, one at a time
        refuse_if_archived(session, reference.namespace)
        _refuse_other_kind(session, reference.namespace, reference.name, data_format)
        if session.scalar(select(UploadSession.id).where(UploadSession.content_key == key)) is None:
            check_new_upload(session, reference.namespace, registry.quotas.of(reference.namespace), manifest)
        insert_ignoring_conflict(
            session,
            UploadSession,
            {
                "id": new_id(), "content_key": key, "namespace": reference.namespace, "name": reference.name,
                "format": data_format.value, "digest": digest, "manifest": manifest, "phase": OPEN,
                "created_at": now, "expires_at": expires, "conversion": conversion,
                "prepared": descriptor.to_json() if descriptor else None, "images": images,
            },
            ["content_key"],
        )
        upload = session.scalar(select(UploadSession).where(UploadSession.content_key == key))
        if upload.phase == REFUSED:  # the same command again: its rows are checked again (the rules may differ)
            if not transition(session, UPLOAD, upload, UploadPhase.OPEN, note="registered again"):
                session.refresh(upload)  # another registration of the same rows reopened it first
            upload.expires_at = expires
        if upload.phase == OPEN and _expired(upload):
            # A session past its expiry starts over; shards already held stay held.
            upload.expires_at = expires
        return _session_view(registry, session, upload)


def preview_upload(registry: Registry, request: answers.UploadPreviewRequest) -> answers.UploadPreview:
    """What `create_upload` would find for this content, opening, storing and registering nothing: the same
    refusals of what can never be registered (the manifest, the token's namespaces, an archived namespace, a dataset
    of the other kind), then the version's digest, the dataset's version of that digest if it holds one, and which
    shards the registry holds (those an upload would not send). A namespace that does not exist yet is no refusal:
    the registration creates it. Quotas are not counted: they are checked when an upload opens."""
    reference = parse_reference(request.dataset)
    if reference.selector != "latest":
        raise Invalid(f"register into {reference.artifact}, without a version or alias")
    data_format, descriptor = _format_and_descriptor({"format": request.format, "prepared": request.prepared})
    manifest = _check_manifest([shard.model_dump(by_alias=True) for shard in request.shards], registry.limits,
                               descriptor)
    images = _check_images([i.model_dump() for i in request.images or []], data_format)
    digest = _digest(data_format, manifest, descriptor, images)
    check_namespace(reference.namespace)
    with registry.store.transaction() as session:
        refuse_if_archived(session, reference.namespace)
        _refuse_other_kind(session, reference.namespace, reference.name, data_format)
        dataset = find_dataset(session, reference.namespace, reference.name)
        existing = None if dataset is None else session.scalar(
            select(DatasetVersion.version).where(DatasetVersion.dataset_id == dataset.id,
                                                 DatasetVersion.digest == digest))
        shards = [{**item, "held": _held(session, registry.blobs, item["sha256"], data_format.kind)}
                  for item in manifest]
    return answers.UploadPreview(dataset=reference.artifact, format=data_format.value, digest=digest,
                                 existing_version=None if existing is None else f"v{existing}", shards=shards)


def _refuse_other_kind(session: Session, namespace: str, name: str, data_format: DatasetFormat) -> None:
    dataset = find_dataset(session, namespace, name)
    if dataset is not None and dataset.kind != data_format.kind:
        words = {"chat": "chat conversations", "preference": "preference pairs", "prepared": "prepared token rows"}
        raise Refused(
            f"dataset {namespace}/{name} holds {words[dataset.kind]}; a version of {words[data_format.kind]} "
            "cannot be added to it",
            hint="register the file under another dataset name",
        )


def _expired(upload: UploadSession) -> bool:
    return as_utc(upload.expires_at) <= utcnow()


def _open_upload(session: Session, upload_id: str) -> UploadSession:
    upload = session.get(UploadSession, upload_id)
    if upload is None or not sees_namespace(upload.namespace):
        raise NotFound(f"upload {upload_id} does not exist", hint="run the same register command again")
    if upload.phase == OPEN and _expired(upload):
        raise Gone(
            f"upload {upload_id} expired at {iso(upload.expires_at)}",
            hint="run the same register command again; it sends only the shards the registry does not hold",
        )
    return upload


class ShardReceiver:
    """Receives one shard's bytes: hashes, stores to staging and validates every row as they stream."""

    def __init__(self, registry: Registry, upload: UploadSession, index: int) -> None:
        item = upload.manifest[index]
        self.registry = registry
        self.upload_id = upload.id
        self.index = index
        self.sha256 = item["sha256"]
        self.expected_bytes = item["bytes"]
        self.expected_lines = item["lines"]
        self.kind = DatasetFormat(upload.format).kind
        self.path = item["path"]
        first_line = 1 + sum(s["lines"] for s in upload.manifest[:index])
        # a JSONL shard's rows are checked as they stream; a Parquet file of prepared rows once it is whole
        self.validator = JsonlValidator(self.kind, first_line=first_line, max_line_bytes=registry.limits.max_line_bytes,
                                        images=frozenset(i["path"] for i in upload.images or [])
                                        ) if DatasetFormat(upload.format).jsonl else None
        self.writer: BlobWriter = registry.blobs.writer()

    def feed(self, chunk: bytes) -> None:
        if self.writer.size + len(chunk) > self.expected_bytes:
            self.abort()
            raise TooLarge(
                f"shard {self.index} is longer than the {self.expected_bytes} bytes the upload promised",
                hint="run the same register command again",
            )
        self.writer.write(chunk)
        if self.validator is not None:
            self.validator.feed(chunk)

    def finish(self) -> answers.ShardReceived:
        if self.writer.size != self.expected_bytes:
            self.abort()
            raise Invalid(
                f"shard {self.index} ended after {self.writer.size} of its {self.expected_bytes} bytes",
                hint="run the same register command again",
            )
        if self.validator is None:
            return self._finish_prepared()
        report = self.validator.finish()
        if not report.ok:
            self.abort()
            self._close_refused()
            raise Invalid(
                f"shard {self.index} has {report.error_count} bad line(s); the version is not registered",
                hint="fix the lines named and register the file again",
                errors=[error.to_json() for error in report.errors],
                errorCount=report.error_count,
            )
        self.writer.commit(self.sha256)
        with self.registry.store.transaction() as session:
            insert_ignoring_conflict(
                session,
                Shard,
                {
                    "sha256": self.sha256, "kind": self.kind.value, "size_bytes": self.expected_bytes,
                    "rows": report.rows, "lines": report.lines, "tool_rows": report.tool_rows,
                    "created_at": utcnow(),
                },
                ["sha256"],
            )
        return answers.ShardReceived(index=self.index, sha256=self.sha256, bytes=self.expected_bytes,
                                     rows=report.rows, tool_rows=report.tool_rows, held=True)

    def _finish_prepared(self) -> answers.ShardReceived:
        """A Parquet file of prepared rows, checked whole against every rule (chat/prepared), then stored."""
        self.writer.flush()
        if self.writer.sha256 != self.sha256:  # what arrived is not the file promised: nothing to read
            self.abort()
            raise ChecksumMismatch(f"the bytes received hash to sha256:{self.writer.sha256}, not the promised "
                                   f"sha256:{self.sha256}", hint="send the file again")
        report = check_file(self.writer.staging_path, self.path)
        if not report.ok:
            self.abort()
            self._close_refused()
            first = report.errors[0]
            where = f" row {first['row']}" if first["row"] else ""
            raise Invalid(f"{self.path} breaks the rules of prepared token rows in {report.error_count} place(s) "
                          f"({self.path}{where}: {first['reason']}); the version is not registered",
                          hint="fix the rows named and register the folder again", errors=report.errors,
                          errorCount=report.error_count)
        if report.rows != self.expected_lines:
            self.abort()
            raise Invalid(f"{self.path} holds {report.rows} rows; the upload promised {self.expected_lines}",
                          hint="run the same register command again")
        self.writer.commit(self.sha256)
        with self.registry.store.transaction() as session:
            insert_ignoring_conflict(session, Shard, {
                "sha256": self.sha256, "kind": self.kind.value, "size_bytes": self.expected_bytes,
                "rows": report.rows, "lines": report.rows, "tool_rows": 0, "longest": report.longest,
                "created_at": utcnow()}, ["sha256"])
        return answers.ShardReceived(index=self.index, sha256=self.sha256, bytes=self.expected_bytes,
                                     rows=report.rows, tool_rows=0, held=True)

    def abort(self) -> None:
        self.writer.abort()

    def _close_refused(self) -> None:
        """Rows were refused: the session can never be committed as it is, so it is closed (not left open)."""
        with self.registry.store.transaction() as session:
            upload = session.get(UploadSession, self.upload_id)
            if upload is not None and upload.phase == OPEN:
                if not transition(session, UPLOAD, upload, UploadPhase.REFUSED, note=f"shard {self.index} refused"):
                    return  # committed, refused or expired by another request meanwhile: no longer open either way


def open_shard(registry: Registry, upload_id: str, index: int) -> ShardReceiver | answers.ShardReceived:
    """A receiver for the shard, or its description when the registry already holds it."""
    with registry.store.transaction() as session:
        upload = _open_upload(session, upload_id)
        if not 0 <= index < len(upload.manifest):
            raise NotFound(f"upload {upload_id} has no shard {index}; it has {len(upload.manifest)}")
        item = upload.manifest[index]
        if _held(session, registry.blobs, item["sha256"], DatasetFormat(upload.format).kind):
            return answers.ShardReceived(index=index, sha256=item["sha256"], bytes=item["bytes"], held=True,
                                         already_held=True)
        if upload.phase == COMMITTED and session.get(Shard, item["sha256"]) is None:
            raise Conflict(f"upload {upload_id} is already committed")
        # an open session's shard, or a committed version's shard whose stored copy was lost: received again
        return ShardReceiver(registry, upload, index)


def receive_shard(registry: Registry, upload_id: str, index: int, chunks: Iterable[bytes]) -> answers.ShardReceived:
    """Receive one shard's bytes in process, as `PUT .../shards/{index}` does over HTTP: the shard's description
    when the registry holds it already (the chunks are not read), else the received shard, or the refusal naming
    its bad lines (the session is then closed as refused)."""
    receiver = open_shard(registry, upload_id, index)
    if isinstance(receiver, answers.ShardReceived):
        return receiver
    try:
        for chunk in chunks:
            receiver.feed(chunk)
        return receiver.finish()
    except BaseException:
        receiver.abort()
        raise


def commit_upload(
    registry: Registry, upload_id: str, alias: str | None, *, lineage: dict[str, Any] | None = None
) -> CommittedVersion:
    """Register the held shards as a version, or return the version the same content already is. `lineage`
    (what produced the rows, when a job did) is recorded on a version this commit creates; a version that
    already was keeps its own."""
    return artifacts.retried(
        lambda: _commit_once(registry, upload_id, alias, lineage),  # again when another commit took the same row
        lambda: Conflict(f"upload {upload_id} could not be committed under concurrent registrations", hint="retry"))


def _commit_once(
    registry: Registry, upload_id: str, alias: str | None, lineage: dict[str, Any] | None
) -> CommittedVersion:
    with registry.store.transaction() as session:
        upload = _open_upload(session, upload_id)
        if upload.phase == REFUSED:
            raise Conflict(f"upload {upload_id} was refused: rows of its shards break the rules",
                           hint="fix the lines named and register the file again")
        data_format = DatasetFormat(upload.format)
        shards = []
        missing = []
        for item in upload.manifest:
            shard = session.get(Shard, item["sha256"])
            if shard is None or shard.kind != data_format.kind or not registry.blobs.holds(item["sha256"]):
                missing.append(item["index"])
            shards.append(shard)
        if missing:
            raise Conflict(
                f"upload {upload_id} is missing shard(s) {', '.join(map(str, missing[:20]))}",
                hint="send every shard before committing; running the same register command again does",
            )
        lacking = [i["path"] for i in upload.images or [] if session.get(RegistryImage, i["sha256"]) is None
                   or not registry.blobs.holds(i["sha256"])]
        if lacking:
            raise Conflict(f"upload {upload_id} names {len(lacking)} image(s) the registry lacks: "
                           f"{', '.join(lacking[:10])}", hint="send them first (akka registry datasets images push); "
                                                              "running the same register command again does")
        ensure_open(session, upload.namespace)
        _refuse_other_kind(session, upload.namespace, upload.name, data_format)
        registered = artifacts.append_version(
            session, DATASETS, upload.namespace, upload.name, upload.digest,
            {"format": upload.format, "rows": sum(s.rows for s in shards),
             "tool_rows": sum(s.tool_rows for s in shards), "size_bytes": sum(s.size_bytes for s in shards),
             "object_count": len(shards), "conversion": upload.conversion, "lineage": lineage,
             "prepared": {**upload.prepared, "longestRow": max(s.longest or 0 for s in shards)}
             if upload.prepared else None, "images": upload.images},
            owner_columns={"kind": data_format.kind.value})
        dataset, version = registered.owner, registered.version
        if registered.created:
            for item, shard in zip(upload.manifest, shards, strict=True):
                session.add(DatasetObject(version_id=version.id, position=item["index"], path=item["path"],
                                          sha256=shard.sha256, size_bytes=shard.size_bytes, rows=shard.rows))
            session.flush()
        if alias:
            move_alias(session, dataset, alias, version)
        if upload.phase == OPEN and not transition(session, UPLOAD, upload, UploadPhase.COMMITTED,
                                                   version_id=version.id):
            raise IntegrityError("commit upload", None, Exception("committed concurrently"))  # read again
        return describe_committed(session, dataset, version, registry.blobs.location, registered.created)
