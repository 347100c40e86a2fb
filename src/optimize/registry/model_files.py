"""A model version's files, as a download writes them: what `akka registry models download` (and `export`) fetch.

- An ADAPTER version is a PEFT adapter folder: `adapter_model.safetensors` and `adapter_config.json` from the blob
  store (the files its weights manifest lists; the config names the base model by its repository, not by the
  server's cache path PEFT recorded), plus the tokenizer files of the base model it trained on, from that model's
  selected folder, and the chat template the run rendered its rows with. Where the catalog has
  Optimize correct the shipped template (`chatTemplate: corrected`), the folder carries the corrected copy as
  `chat_template.jinja` (which Transformers prefers over a template in `tokenizer_config.json`), so the model
  loads and chats as it trained.
- A BASE version is the selected folder as it is (hidden files left out): a stand-in's files digest to its commit.

The base model's folder must be the one the version names: a deployment that has since selected another commit is
refused, never answered with other weights. The folder's sha256 listing is kept beside it (`.files-<folder>.json`,
re-hashed only for a file whose size or time changed), so listing a multi-gigabyte base model is hashed once.
A requested path is looked up in the listing, never joined onto a folder, so no path reaches outside it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from sqlalchemy.orm import Session

from optimize.blobs.local import LocalBlobStore
from optimize.core.digests import file_identity, file_sha256
from optimize.core.errors import Conflict, Corrupt, Gone, Invalid, NotFound, PlatformError
from optimize.registry.models import _get_model, _resolve_version, resolve_model_reference
from optimize.schemas import models as answers
from optimize.store.db import Store
from optimize.store.tables import BaseModelSelection, Model, ModelVersion, Run

CHAT_TEMPLATE_FILE = "chat_template.jinja"
ADAPTER_CONFIG = "adapter_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# Files of a base model's folder that belong with an adapter: the tokenizer and its chat templates.
_TOKENIZER_NAMES = {"special_tokens_map.json", "added_tokens.json", "merges.txt", "spiece.model"}
_TOKENIZER_PREFIXES = ("tokenizer", "vocab.", "chat_template")


class CatalogEntry(Protocol):
    family: str
    chat_template: str  # shipped, corrected or optimize


class Catalog(Protocol):
    def find(self, query: str) -> CatalogEntry: ...


@dataclass(frozen=True)
class ModelFile:
    """One file of a version: where the server reads it (a file on disk, or bytes it derived) and its digest."""

    path: str
    sha256: str
    size: int
    source: str  # adapter, base or chatTemplate
    location: Path | None = None
    content: bytes | None = None

    def answer(self) -> answers.ModelFile:
        return answers.ModelFile(path=self.path, sha256=self.sha256, size=self.size, source=self.source)


@dataclass(frozen=True)
class VersionFiles:
    reference: str
    digest: str
    variant: str
    base_model: str | None
    base_commit: str
    chat_template: dict[str, str] | None
    files: list[ModelFile]

    def answer(self) -> answers.ModelFiles:
        return answers.ModelFiles(
            reference=self.reference, digest=self.digest, variant=self.variant, base_model=self.base_model,
            base_commit=self.base_commit, chat_template=self.chat_template,
            files=[item.answer() for item in self.files], size=sum(item.size for item in self.files))


def version_files(store: Store, blobs: LocalBlobStore, catalog: Catalog, namespace: str, name: str,
                  selector: str) -> VersionFiles:
    """The files a download of NS/NAME at `selector` writes, sorted by path."""
    with store.transaction() as session:
        model = _get_model(session, namespace, name)  # the same refusals, in the same words, as GET …/{selector}
        version = _resolve_version(session, model, selector)
        reference = f"{model.namespace}/{model.name}:v{version.version}"
        descriptor = version.descriptor
        if version.variant == "BASE":
            entry_id, commit, base_reference = descriptor["catalogEntry"], descriptor["revision"], None
        else:  # an adapter, or a full fine-tune's every weight: its files with the base model's tokenizer
            commit, base_reference = descriptor["baseCommit"], descriptor.get("baseModel")
            entry_id = _adapter_entry(session, model, version)
        folder = _base_folder(session, entry_id, commit, reference)
        digest, variant = version.digest, version.variant
    entry = _entry(catalog, entry_id)
    listing = folder_listing(folder)
    if variant == "BASE":
        files = [ModelFile(path, sha, size, "base", folder / path) for path, (sha, size) in listing.items()]
        template = _template(folder, listing, "shipped" if entry is None or entry.chat_template == "corrected"
                             else entry.chat_template)
    else:
        files = _adapter_files(blobs, descriptor, reference)
        files += [ModelFile(path, sha, size, "base", folder / path) for path, (sha, size) in listing.items()
                  if _is_tokenizer_file(path)]
        mode = entry.chat_template if entry is not None else "shipped"
        template = _template(folder, listing, mode)
        if mode == "corrected":
            files, template = _corrected(files, template, entry, reference)
    return VersionFiles(reference, digest, variant, base_reference, commit, template,
                        sorted(files, key=lambda item: item.path))


def version_file(store: Store, blobs: LocalBlobStore, catalog: Catalog, namespace: str, name: str, selector: str,
                 path: str) -> ModelFile:
    """One file of the version, by its path in the listing (`..`, absolute paths and backslashes refused)."""
    wanted = check_file_path(path)
    listed = version_files(store, blobs, catalog, namespace, name, selector)
    for item in listed.files:
        if item.path == wanted:
            if item.location is not None and not item.location.is_file():
                raise Gone(f"{wanted} of {listed.reference} is no longer held by this server",
                           hint="select the base model again, or register the run's snapshot again")
            if item.location is not None and item.source != "adapter":  # adapter files: checked as blobs
                _check_folder_file(item, listed.reference)
            return item
    names = [item.path for item in listed.files]
    more = f" and {len(names) - 12} more" if len(names) > 12 else ""
    raise NotFound(f"model {listed.reference} has no file {wanted!r}",
                   hint=f"its files: {', '.join(names[:12])}{more} (akka registry models files {listed.reference})")


_MATCHED: dict[Path, tuple[str, tuple[int, ...]]] = {}  # a folder file -> (digest, identity) when they last matched


def _check_folder_file(item: ModelFile, reference: str) -> None:
    """Refuse to serve a selected folder's file whose bytes no longer hash to the digest its listing gives (the
    listing reuses a digest while size and mtime stand, which a write that puts the time back leaves). Hashed once
    per change of the file (its identity: size, mtime, ctime, inode); the bytes are hashed again as they are sent."""
    identity = file_identity(item.location)
    if identity is None or _MATCHED.get(item.location) == (item.sha256, identity):
        return
    actual = file_sha256(item.location)
    if actual != item.sha256:
        raise Corrupt(f"{item.path} of {reference} on this server no longer matches its digest sha256:{item.sha256} "
                      f"(its bytes hash to sha256:{actual})",
                      hint="select the base model again to restore its files (akka training base-models select)")
    _MATCHED[item.location] = (item.sha256, identity)


def check_file_path(path: str) -> str:
    """A relative POSIX path of plain parts; anything that could leave a folder is refused by name."""
    parts = path.split("/")
    if (not path or "\\" in path or "\x00" in path or path.startswith("/")
            or any(part in ("", ".", "..") for part in parts)):
        raise Invalid(f"file path {path!r} is not a relative path inside the model's folder",
                      hint="name a file as the version's file list spells it, e.g. adapter_config.json")
    return str(PurePosixPath(path))


def folder_listing(folder: Path) -> dict[str, tuple[str, int]]:
    """{relative path: (sha256 hex, size)} of the folder's files (no hidden ones, no symlinks), sorted by path.

    Digests are kept beside the folder and reused for a file whose size and modification time are unchanged."""
    cache = folder.parent / f".files-{folder.name}.json"
    try:
        known = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    root = folder.resolve()
    listing: dict[str, tuple[str, int]] = {}
    kept: dict[str, list] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if (path.is_symlink() or not path.is_file() or any(part.startswith(".") for part in relative.split("/"))
                or not path.resolve().is_relative_to(root)):
            continue
        stat = path.stat()
        seen = known.get(relative)
        if isinstance(seen, list) and len(seen) == 3 and seen[1:] == [stat.st_size, stat.st_mtime_ns]:
            sha = seen[0]
        else:
            sha = file_sha256(path)
        listing[relative] = (sha, stat.st_size)
        kept[relative] = [sha, stat.st_size, stat.st_mtime_ns]
    if kept != known:
        _write_atomically(cache, json.dumps(kept, sort_keys=True).encode())
    return listing


# --- where the files come from --------------------------------------------------------------------------------


def _adapter_entry(session: Session, model: Model, version: ModelVersion) -> str:
    """The catalog entry of the base model an adapter trained on: its BASE version's, else its run's."""
    base = version.descriptor.get("baseModel")
    if base:
        try:
            _, found = resolve_model_reference(session, base)
        except NotFound:
            found = None
        if found is not None and found.descriptor.get("catalogEntry"):
            return found.descriptor["catalogEntry"]
    producer = (version.lineage or {}).get("producedBy") or {}
    run = session.get(Run, producer["id"]) if producer.get("kind") == "run" and producer.get("id") else None
    if run is None:
        raise Conflict(f"{model.namespace}/{model.name}:v{version.version} names no base model this server knows",
                       hint="its base model must be registered (selected) here to download it")
    return run.base_entry_id


def _base_folder(session: Session, entry_id: str, commit: str, reference: str) -> Path:
    selection = session.get(BaseModelSelection, entry_id)
    hint = f"select it again at that commit (akka training base-models select {entry_id}), then download"
    if selection is None:
        raise Conflict(f"the base model of {reference}, {entry_id}, is not selected on this server", hint=hint)
    if selection.commit != commit:
        raise Conflict(f"the base model of {reference}, {entry_id}, is selected here at commit "
                       f"{selection.commit[:12]}, not at {commit[:12]} that {reference} belongs to", hint=hint)
    folder = Path(selection.path)
    if not folder.is_dir():
        raise Gone(f"the selected folder of {entry_id} is missing from this server's model cache", hint=hint)
    return folder


def _entry(catalog: Catalog, entry_id: str) -> CatalogEntry | None:
    try:
        return catalog.find(entry_id)
    except PlatformError:
        return None  # the catalog no longer lists it: its files are still what was selected


def _adapter_files(blobs: LocalBlobStore, descriptor: dict[str, Any], reference: str) -> list[ModelFile]:
    manifest_digest = descriptor["artifact"]["manifestDigest"]
    manifest_path = blobs.verified_path(manifest_digest.removeprefix("sha256:"))  # Corrupt when it does not match
    hint = "register a snapshot of the run that still holds its weights (akka training snapshots register)"
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except OSError:
        raise Gone(f"the weights of {reference} ({manifest_digest}) are no longer held by this server",
                   hint=hint) from None
    files = []
    for item in manifest["files"]:
        location = blobs.verified_path(item["sha256"])
        if not location.is_file():
            raise Gone(f"{item['path']} of {reference} (sha256:{item['sha256']}) is no longer held by this server",
                       hint=hint)
        name = PurePosixPath(item["path"]).name
        if name == ADAPTER_CONFIG:
            files.append(_adapter_config(location, descriptor["baseRepository"], reference))
        else:
            files.append(ModelFile(name, item["sha256"], item["bytes"], "adapter", location))
    return files


def _adapter_config(location: Path, repository: str, reference: str) -> ModelFile:
    """The run's adapter_config.json naming its base model by repository rather than by the server's cache path
    (what PEFT recorded while training), so no path of this server leaves it and AutoPeftModel finds the base."""
    try:
        config = json.loads(location.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise Gone(f"{ADAPTER_CONFIG} of {reference} cannot be read on this server") from None
    config["base_model_name_or_path"] = repository
    content = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return ModelFile(ADAPTER_CONFIG, hashlib.sha256(content).hexdigest(), len(content), "adapterConfig",
                     content=content)


def _is_tokenizer_file(path: str) -> bool:
    if path.startswith("additional_chat_templates/"):
        return True
    return "/" not in path and (path in _TOKENIZER_NAMES or path.startswith(_TOKENIZER_PREFIXES))


def _template(folder: Path, listing: dict[str, tuple[str, int]], source: str) -> dict[str, str] | None:
    """The default chat template the folder's tokenizer loads: chat_template.jinja first, else the config's."""
    text = shipped_template(folder, listing)
    if text is None:
        return None
    path = CHAT_TEMPLATE_FILE if CHAT_TEMPLATE_FILE in listing else TOKENIZER_CONFIG
    return {"path": path, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "source": source}


def shipped_template(folder: Path, listing: dict[str, tuple[str, int]]) -> str | None:
    if CHAT_TEMPLATE_FILE in listing:
        return (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    if TOKENIZER_CONFIG not in listing:
        return None
    try:
        template = json.loads((folder / TOKENIZER_CONFIG).read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else None


def _corrected(files: list[ModelFile], template: dict[str, str] | None, entry: CatalogEntry, reference: str
               ) -> tuple[list[ModelFile], dict[str, str]]:
    """The run rendered under Optimize's corrected copy of the shipped template: the folder carries that copy."""
    from optimize.chat.corrections import corrected_template
    from optimize.chat.render import RenderError

    shipped = next((item for item in files if item.path == CHAT_TEMPLATE_FILE), None)
    config = next((item for item in files if item.path == TOKENIZER_CONFIG), None)
    if template is None:
        raise Conflict(f"the base model of {reference} ships no chat template to correct")
    source = shipped if template["path"] == CHAT_TEMPLATE_FILE else config
    text = shipped_template(source.location.parent, {source.path: (source.sha256, source.size)})
    try:
        content = corrected_template(entry.family, text).encode("utf-8")
    except RenderError as error:
        raise Conflict(f"the chat template of {reference} cannot be corrected: {error}") from None
    sha = hashlib.sha256(content).hexdigest()
    kept = [item for item in files if item.path != CHAT_TEMPLATE_FILE]
    kept.append(ModelFile(CHAT_TEMPLATE_FILE, sha, len(content), "chatTemplate", content=content))
    return kept, {"path": CHAT_TEMPLATE_FILE, "sha256": sha, "source": "corrected"}


def _write_atomically(target: Path, data: bytes) -> None:
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        partial.write_bytes(data)
        os.replace(partial, target)
    except OSError:  # a read-only cache: the digests are worked out again next time
        partial.unlink(missing_ok=True)
