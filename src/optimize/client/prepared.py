"""Registering prepared token rows (`registry datasets register NS/NAME -f FOLDER|ZIP`): a folder, or a ZIP of one,
holding `prepared.json` and the Parquet files it lists. Each file is checked here by the rules the registry applies
(`chat/prepared.py`), so bad rows are named before anything is sent, then sent as one shard of the version, only
when the registry lacks it (a second version over the same files sends none of them); an interrupted registration
run again resumes.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from optimize.chat.prepared import DESCRIPTOR, Descriptor, check_file, read_descriptor
from optimize.core.digests import file_sha256
from optimize.core.errors import Invalid


@dataclass(frozen=True)
class PreparedFiles:
    folder: Path
    descriptor: Descriptor
    shards: list[dict[str, Any]]  # as the upload lists them: index, path, sha256, bytes, lines (rows)
    longest: int


def is_prepared(path: Path) -> bool:
    """Whether `path` is a folder holding prepared.json, or a ZIP holding it at its top."""
    if path.is_dir():
        return (path / DESCRIPTOR).is_file()
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return DESCRIPTOR in archive.namelist()
    return False


@contextlib.contextmanager
def prepared_files(path: Path, refused: type[Exception], outcome: str | None = None) -> Iterator[PreparedFiles]:
    """The descriptor and its files, each checked (a bad row refused as `refused(errors, count, "row", ...)`)."""
    with _folder(path) as folder:
        try:
            descriptor = read_descriptor(json.loads((folder / DESCRIPTOR).read_text(encoding="utf-8")))
        except ValueError as error:
            raise Invalid(f"{DESCRIPTOR} is not JSON: {error}", hint="akka registry datasets describe-prepared "
                                                                      "writes it") from None
        shards, errors, count, longest = [], [], 0, 0
        for index, name in enumerate(descriptor.files):
            file = folder / name
            if not file.is_file():
                raise Invalid(f"{DESCRIPTOR} lists {name}, which is not in {path}",
                              hint="list only the Parquet files beside it, or add the file")
            report = check_file(file, name)
            errors.extend(report.errors)
            count += report.error_count
            longest = max(longest, report.longest)
            shards.append({"index": index, "path": name, "sha256": file_sha256(file), "bytes": file.stat().st_size,
                           "lines": report.rows})
        if count:
            raise refused(errors[:20], count, "row", **({"outcome": outcome} if outcome else {}))
        yield PreparedFiles(folder, descriptor, shards, longest)


@contextlib.contextmanager
def _folder(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="optimize-prepared-") as folder, zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            name = PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts:
                raise Invalid(f"{path} holds {member.filename!r}, which would land outside its folder",
                              hint="zip the dataset's folder with paths relative to it")
        archive.extractall(folder)
        yield Path(folder)
