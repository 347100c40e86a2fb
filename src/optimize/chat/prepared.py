"""Prepared token rows: a dataset its owner tokenised themselves (their own packing, masks or tokenizer pipeline),
for supervised runs. Its files: `prepared.json`, the descriptor, and the Parquet files it lists.

The descriptor names the tokenizer the rows were made with — `tokenizer.repository` and `tokenizer.revision` (the
commit) — the sha256 of the chat template they were rendered under (`chatTemplateSha256`), and `files`, the Parquet
files' paths relative to the descriptor, in order. Other keys are kept and not read.

A Parquet file holds the columns `input_ids` and `loss_mask`, lists of integers of one length per row (other
columns are ignored): ids of 0 or more; a mask of 0s and 1s, 1 where the token trains, never the first token, and at
least one a row. A file breaking a rule is refused naming it and each bad row (numbered from 1 in the file).

Pure: bytes and files in, the descriptor, per-file reports and the digest entry out; the registry checks each file
as it arrives (`registry/uploads.py`) and the CLI the same way before sending (`client/registry.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from optimize.core.errors import Invalid

DESCRIPTOR = "prepared.json"
MOST_FILES = 1000  # Parquet files one version lists
MOST_REPORTED = 20  # bad rows a refusal names
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # a git commit, or a stand-in's (the digest of its files)
SHA256 = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
COLUMNS = ("input_ids", "loss_mask")


@dataclass(frozen=True)
class Descriptor:
    repository: str
    revision: str
    chat_template_sha256: str  # 64 hex digits
    files: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)  # keys not read, kept as given

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "tokenizer": {"repository": self.repository, "revision": self.revision},
                "chatTemplateSha256": self.chat_template_sha256, "files": list(self.files)}

    def canonical(self) -> bytes:
        """The descriptor's bytes as the version's digest counts them (keys sorted, no spaces)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def digest_entry(self) -> tuple[str, str, int]:
        """The descriptor as one more object of the version's digest listing: (path, sha256, bytes)."""
        data = self.canonical()
        return DESCRIPTOR, hashlib.sha256(data).hexdigest(), len(data)


def read_descriptor(document: Any) -> Descriptor:
    """The descriptor, or a refusal naming the field and what to write."""
    hint = ('prepared.json is {"tokenizer": {"repository": REPO, "revision": COMMIT}, "chatTemplateSha256": HEX, '
            '"files": ["data/part-00000.parquet", …]}; akka registry datasets describe-prepared writes it')
    if not isinstance(document, dict):
        raise Invalid(f"{DESCRIPTOR} must be a JSON object", hint=hint)
    tokenizer = document.get("tokenizer")
    if not isinstance(tokenizer, dict):
        raise Invalid(f"{DESCRIPTOR}: tokenizer must be an object with repository and revision", hint=hint)
    repository, revision = tokenizer.get("repository"), tokenizer.get("revision")
    if not isinstance(repository, str) or not repository.strip():
        raise Invalid(f"{DESCRIPTOR}: tokenizer.repository must name the tokenizer's repository", hint=hint)
    if not isinstance(revision, str) or not COMMIT.match(revision):
        raise Invalid(f"{DESCRIPTOR}: tokenizer.revision must be the tokenizer's commit (40 or 64 hex digits), "
                      f"not {revision!r}", hint=hint)
    template = document.get("chatTemplateSha256")
    if not isinstance(template, str) or not SHA256.match(template):
        raise Invalid(f"{DESCRIPTOR}: chatTemplateSha256 must be the sha256 of the chat template the rows were "
                      "rendered under (64 hex digits)", hint=hint)
    files = document.get("files")
    if not isinstance(files, list) or not 1 <= len(files) <= MOST_FILES:
        raise Invalid(f"{DESCRIPTOR}: files must list 1 to {MOST_FILES} Parquet files", hint=hint)
    for name in files:
        _check_path(name)
    if len(set(files)) != len(files):
        raise Invalid(f"{DESCRIPTOR}: files lists a file twice", hint="list each Parquet file once")
    extra = {key: value for key, value in document.items() if key not in ("tokenizer", "chatTemplateSha256", "files")}
    return Descriptor(repository.strip(), revision, template.removeprefix("sha256:"), tuple(files), extra)


def _check_path(name: Any) -> None:
    if not isinstance(name, str) or not name.endswith(".parquet"):
        raise Invalid(f"{DESCRIPTOR}: files lists {name!r}, which is no Parquet file path (NAME.parquet)",
                      hint="list the Parquet files' paths relative to prepared.json")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or name != str(path):
        raise Invalid(f"{DESCRIPTOR}: files lists {name!r}, which is not a plain path inside the dataset's folder",
                      hint="write each path relative to prepared.json, with / and no ..")


@dataclass
class FileReport:
    """One Parquet file checked: its rows, its longest row, and its bad rows (the first `MOST_REPORTED`)."""

    name: str
    rows: int = 0
    longest: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    error_count: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def refuse(self, row: int | None, reason: str) -> None:
        self.error_count += 1
        if len(self.errors) < MOST_REPORTED:
            self.errors.append({"file": self.name, "row": row, "reason": reason})


def check_file(path: Path, name: str) -> FileReport:
    """Every rule of a prepared Parquet file (`name`: its path in the dataset, as refusals name it)."""
    import pyarrow.parquet as pq

    report = FileReport(name)
    try:
        handle = pq.ParquetFile(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several kinds for a file that is no Parquet
        report.refuse(None, f"is not a Parquet file ({str(error)[:200]})")
        return report
    missing = [column for column in COLUMNS if column not in handle.schema_arrow.names]
    if missing:
        report.refuse(None, f"has no {' and no '.join(missing)} column (it has {', '.join(handle.schema_arrow.names)})")
        return report
    for column in COLUMNS:
        kind = handle.schema_arrow.field(column).type
        value = getattr(kind, "value_type", None)
        if value is None or not (str(value).startswith(("int", "uint")) or str(value) == "bool"):
            report.refuse(None, f"column {column} is {kind}, not a list of integers")
    if not report.ok:
        return report
    row = 0
    for batch in handle.iter_batches(columns=list(COLUMNS)):
        ids_column, masks_column = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        for ids, mask in zip(ids_column, masks_column, strict=True):
            row += 1
            reason = _row_error(ids, mask)
            if reason:
                report.refuse(row, reason)
            else:
                report.longest = max(report.longest, len(ids))
    report.rows = row
    if row == 0:
        report.refuse(None, "holds no row")
    return report


def _row_error(ids: Any, mask: Any) -> str | None:
    if ids is None or mask is None:
        return "input_ids and loss_mask must both hold a list"
    if len(ids) != len(mask):
        return f"input_ids holds {len(ids)} tokens and loss_mask {len(mask)}; they must be of one length"
    if any(token is None or token < 0 for token in ids):
        return "input_ids holds a missing or negative token id"
    if any(m not in (0, 1) for m in mask):
        return "loss_mask holds a value other than 0 and 1"
    if not mask or mask[0]:
        return "loss_mask marks the first token, which has nothing before it to be predicted from"
    if not any(mask):
        return "loss_mask marks no token: the row would train nothing"
    return None


def describe(folder: Path, repository: str, revision: str, chat_template_sha256: str) -> dict[str, Any]:
    """The descriptor of the Parquet files under `folder` (every `*.parquet`, sorted by path), checked as the
    registry reads it."""
    files = sorted(str(p.relative_to(folder).as_posix()) for p in folder.rglob("*.parquet") if p.is_file())
    if not files:
        raise Invalid(f"{folder} holds no Parquet file", hint="write the rows as NAME.parquet files under it")
    return read_descriptor({"tokenizer": {"repository": repository, "revision": revision},
                            "chatTemplateSha256": chat_template_sha256, "files": files}).to_json()
