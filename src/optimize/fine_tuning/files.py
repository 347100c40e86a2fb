"""OpenAI's files (purpose fine-tune) as dataset versions of the project's namespace.

An upload is a registration: the file's rows are read in any format a registration reads (the registry's own rows,
OpenAI's chat rows and its preference rows `input` / `preferred_output` / `non_preferred_output`; JSONL, a JSON
array or Parquet), converted and checked by the same rules, and registered as a version of the dataset named after
the file (`support_train.jsonl` → `NS/support_train`; the same rows are the same version). A file's id is its
version's digest (`file-<sha256>`), so a run's training rows name their file without a table of their own; every
dataset version of the namespace is a file, whichever way it was registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from optimize.chat.formats import DatasetFormat
from optimize.chat.source_files import Container, convert_file, inspect_source
from optimize.core.access import only_visible, visible_namespaces
from optimize.core.clock import unix_seconds
from optimize.core.errors import Invalid, NotFound
from optimize.core.names import is_valid_name
from optimize.registry.datasets import find_dataset
from optimize.registry.produced import register_file
from optimize.registry.uploads import Registry
from optimize.schemas.fine_tuning import FileList, FileObject
from optimize.store.tables import Dataset, DatasetVersion

PREFIX = "file-"
_LIST_HINT = "GET /v1/files lists the project's files"


@dataclass(frozen=True)
class UploadedRows:
    """An uploaded file's rows once they passed the registry's rules: the JSONL to register (the file itself when it
    holds the registry's own rows in JSONL, else its conversion), their format, count and conversion record."""

    path: Path
    data_format: DatasetFormat
    rows: int
    conversion: dict[str, Any] | None


def read_upload(path: Path, filename: str, purpose: str, folder: Path) -> UploadedRows:
    """The uploaded file's rows, converted into `folder` where they are not the registry's own JSONL; a file with
    a row the registry refuses is refused naming it, before anything is stored."""
    if purpose != "fine-tune":
        raise Invalid(f"purpose {purpose!r} is not taken here: files are uploaded for fine-tuning",
                      hint="send purpose=fine-tune", param="purpose")
    try:
        container, source = inspect_source(path)
    except Invalid as refusal:
        raise Invalid(f"{filename}: {_without_path(refusal.message, path)}", hint=refusal.hint, param="file") from None
    converted = folder / "examples.jsonl"
    with converted.open("wb") as out:
        conversion = convert_file(path, container, source, out)
    if conversion.error_count:
        first = conversion.errors[0]
        unit = container.unit
        raise Invalid(f"{conversion.error_count} {unit}(s) of {filename} break the registry's rules; nothing "
                      f"was registered ({unit} {first[unit]}: {first['reason']})",
                      hint="fix the rows named and upload the file again", param="file",
                      errors=conversion.errors, errorCount=conversion.error_count)
    # the registry's own rows in JSONL are registered byte for byte: the same file is the same version anywhere
    native = container is Container.JSONL and not conversion.changed
    return UploadedRows(path if native else converted, DatasetFormat(conversion.target), conversion.rows,
                        None if native else conversion.record())


def register(registry: Registry, project: str, filename: str, uploaded: UploadedRows) -> FileObject:
    """Register the rows as a version of `project`/<the file's name>."""
    reference = f"{project}/{_dataset_name(registry, project, filename, uploaded.data_format)}"
    produced = register_file(registry, reference, uploaded.path, uploaded.data_format, rows=uploaded.rows,
                             conversion=uploaded.conversion)
    with registry.store.transaction() as session:
        return file_view(*_version(session, project, produced.version.digest))


def list_files(registry: Registry, project: str, after: str | None, limit: int) -> FileList:
    """The project's files, newest first, `limit` of them after the file `after` names."""
    with registry.store.transaction() as session:
        query = _versions(project).order_by(DatasetVersion.created_at.desc(), DatasetVersion.id.desc())
        if after:
            _dataset, anchor = _version(session, project, digest_of(after, "after"))
            query = query.where((DatasetVersion.created_at < anchor.created_at) | (
                (DatasetVersion.created_at == anchor.created_at) & (DatasetVersion.id < anchor.id)))
        rows = session.execute(query.limit(limit + 1)).all()
        files = [file_view(dataset, version) for dataset, version in rows[:limit]]
    return FileList(object="list", data=files, has_more=len(rows) > limit,
                    first_id=files[0].id if files else None, last_id=files[-1].id if files else None)


def get_file(registry: Registry, project: str, file_id: str) -> FileObject:
    with registry.store.transaction() as session:
        return file_view(*_version(session, project, digest_of(file_id, "file_id")))


def training_rows(session, project: str, file_id: str, param: str) -> tuple[str, int]:
    """The exact dataset version (NS/NAME:vN) a job's file id names, and its rows."""
    dataset, version = _version(session, project, digest_of(file_id, param), param)
    return f"{dataset.namespace}/{dataset.name}:v{version.version}", version.rows


def file_id(digest: str) -> str:
    return PREFIX + digest.removeprefix("sha256:")


def digest_of(text: str, param: str) -> str:
    hexdigits = text.removeprefix(PREFIX)
    if not text.startswith(PREFIX) or not re.fullmatch(r"[0-9a-f]{64}", hexdigits):
        raise NotFound(f"no file {text!r}: a file id is file- and 64 hexadecimal digits", hint=_LIST_HINT,
                       param=param)
    return "sha256:" + hexdigits


def file_view(dataset: Dataset, version: DatasetVersion) -> FileObject:
    return FileObject(id=file_id(version.digest), object="file", bytes=version.size_bytes,
                      created_at=unix_seconds(version.created_at),
                      filename=f"{dataset.namespace}/{dataset.name}:v{version.version}", purpose="fine-tune",
                      status="processed", expires_at=None, status_details=None)


def _versions(project: str):
    return only_visible(select(Dataset, DatasetVersion).join(DatasetVersion, DatasetVersion.dataset_id == Dataset.id)
                        .where(Dataset.namespace == project), visible_namespaces(Dataset.namespace))


def _version(session, project: str, digest: str, param: str = "file_id") -> tuple[Dataset, DatasetVersion]:
    found = session.execute(
        _versions(project).where(DatasetVersion.digest == digest).order_by(DatasetVersion.id).limit(1)).first()
    if found is None:
        raise NotFound(f"no file {file_id(digest)} in project {project}", hint=_LIST_HINT, param=param)
    return found[0], found[1]


def _dataset_name(registry: Registry, project: str, filename: str, data_format: DatasetFormat) -> str:
    """The dataset a file registers into: its name without the extension, in the registry's spelling, with the
    rows' kind after it where a dataset of that name holds the other kind."""
    stem = Path(filename or "file").name.split(".")[0].lower()
    name = re.sub(r"[._-]{2,}", "-", re.sub(r"[^a-z0-9._-]+", "-", stem)).strip("._-")[:56].strip("._-") or "file"
    if not is_valid_name(name):
        name = "file"
    with registry.store.transaction() as session:
        held = find_dataset(session, project, name)
    kind = data_format.kind.value
    return name if held is None or held.kind == kind else f"{name}-{kind}"


def _without_path(message: str, path: Path) -> str:
    """A refusal about the received file, without where the server kept it."""
    return message.replace(f"{path}: ", "").replace(str(path), "the file")
