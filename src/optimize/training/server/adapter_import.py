"""Adapters made elsewhere, imported as model versions: a PEFT LoRA adapter's two files are sent first (each kept as a
blob under its sha256, `open_file`), then `import_adapter` checks them against the selected base model's files
(`training.adapter_fit`: a LoRA adapter, the base and commit it names, every module's shapes), writes the weights
manifest a run's save would have, and registers an ADAPTER version of NS/NAME over the base — its weights digest
recorded, its lineage `imported` — which evaluations, distillations and endpoints use as they use a trained one.
A refusal registers nothing; files no version lists are the collector's after its grace.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from optimize.catalog.selection import selection_for
from optimize.core.access import check_namespace
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import Conflict, Invalid, NotFound, TooLarge
from optimize.deployment import Deployment
from optimize.registry import aliases, artifact_views, artifacts
from optimize.registry.archival import refuse_if_archived
from optimize.registry.models import base_model_reference, register_version
from optimize.registry.nouns import MODELS
from optimize.schemas import models as answers
from optimize.training.adapter_fit import base_shapes, check_fit, read_config, tensor_shapes
from optimize.training.adapters import weights_digest

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
MOST_FILE_BYTES = 8 * 1024**3  # an adapter file larger than this is not one an endpoint loads


def _target(deployment: Deployment, namespace: str, name: str) -> tuple[str, str]:
    namespace, name = artifacts.checked_names(MODELS, namespace, name)
    check_namespace(namespace)
    with deployment.store.transaction() as session:
        refuse_if_archived(session, namespace)
    return namespace, name


class FileReceiver:
    """One adapter file's bytes, counted against the limit as they stream into the blob store's staging, kept under
    the sha256 they were sent as once they hash to it."""

    def __init__(self, deployment: Deployment, sha256: str) -> None:
        self.sha256 = sha256
        self.writer = deployment.blobs.writer()

    def feed(self, chunk: bytes) -> None:
        self.writer.write(chunk)
        if self.writer.size > MOST_FILE_BYTES:
            self.abort()
            raise TooLarge(f"the file is larger than {MOST_FILE_BYTES:,} bytes, the most an adapter file holds")

    def finish(self) -> answers.HeldFile:
        self.writer.commit(self.sha256)  # refuses bytes that are not the ones named
        return answers.HeldFile(sha256=self.sha256, bytes=self.writer.size, already_held=False)

    def abort(self) -> None:
        self.writer.abort()


def open_file(deployment: Deployment, namespace: str, name: str, sha256: str, declared: int | None
              ) -> FileReceiver | answers.HeldFile:
    """A receiver for one adapter file, or its description when the registry holds it already (nothing is read).
    Refused before a byte is read: a namespace outside the token's limits or archived, a digest that is not one, a
    declared size over the limit."""
    _target(deployment, namespace, name)
    if not is_sha256_hex(sha256):
        raise Invalid(f"{sha256!r} is not a sha256 digest (64 hex digits)", hint="name the file by its sha256")
    if declared is not None and declared > MOST_FILE_BYTES:
        raise TooLarge(f"the file holds {declared:,} bytes; an adapter file holds at most {MOST_FILE_BYTES:,}")
    if deployment.blobs.holds(sha256):
        return answers.HeldFile(sha256=sha256, already_held=True)
    return FileReceiver(deployment, sha256)


def import_adapter(deployment: Deployment, namespace: str, name: str, request: answers.AdapterImport
                   ) -> answers.ImportedAdapter:
    namespace, name = _target(deployment, namespace, name)
    files = {item.path: item for item in request.files}
    if sorted(files) != sorted(ADAPTER_FILES):
        raise Invalid(f"an adapter import sends {' and '.join(ADAPTER_FILES)}, not {', '.join(sorted(files))}",
                      hint="send the two files PEFT's save_pretrained writes")
    for path, item in files.items():
        if not deployment.blobs.holds(item.sha256):
            raise Conflict(f"the registry does not hold {path} (sha256 {item.sha256[:12]}…)",
                           hint=f"send it first: PUT /v1/registry/adapters/{namespace}/{name}/files/{item.sha256}")
    entry = deployment.catalog.find(request.base)
    selection = selection_for(deployment.store, entry.id)
    if selection is None or not Path(selection.path).is_dir():
        raise NotFound(f"base model {entry.id} is not selected on this deployment, so its files cannot be compared",
                       hint=f"select it first: akka training base-models select {entry.id}")
    config_path = deployment.blobs.verified_path(files["adapter_config.json"].sha256)
    weights_path = deployment.blobs.verified_path(files["adapter_model.safetensors"].sha256)
    fit = check_fit(read_config(config_path.read_bytes()),
                    tensor_shapes(weights_path, "adapter_model.safetensors"),
                    base_shapes(Path(selection.path)), entry.id, entry.repository, selection.commit,
                    {e.repository.lower(): e.id for e in deployment.catalog.entries if e.id != entry.id})
    manifest = _store_manifest(deployment, [{"path": path, "sha256": item.sha256, "bytes": item.size_bytes}
                                            for path, item in sorted(files.items())])

    def register() -> answers.ImportedAdapter:
        with deployment.store.transaction() as session:
            base = base_model_reference(session, entry.repository, selection.commit)
            descriptor = {
                "variant": "ADAPTER", "baseModel": base, "baseRepository": entry.repository,
                "baseCommit": selection.commit, "adapterRank": fit.rank, "adapterAlpha": fit.alpha,
                "modules": fit.modules,
                "artifact": {"kind": "weights", "manifestDigest": f"sha256:{manifest}",
                             "location": f"blob://sha256/{manifest}"},
                "weightsDigest": weights_digest(weights_path),
            }
            lineage = {"baseModel": base, "producedBy": {"kind": "import"},
                       "imported": {"files": {path: f"sha256:{item.sha256}" for path, item in sorted(files.items())}}}
            registered = register_version(session, namespace, name, variant="ADAPTER", descriptor=descriptor,
                                          lineage=lineage, produced_by_kind="import")
            if request.alias:
                aliases.move_alias(session, MODELS, registered.owner, request.alias, registered.version)
            return artifact_views.detail(session, MODELS, registered.owner, registered.version).extended(
                answers.ImportedAdapter, created=registered.created)

    return artifacts.retried(register, lambda: Conflict(
        f"the adapter could not be registered as {namespace}/{name} under concurrent registrations", hint="retry"))


def _store_manifest(deployment: Deployment, listed: list[dict[str, Any]]) -> str:
    """The weights manifest a run's save writes (`kind`, `files`), kept as a blob; returns its sha256."""
    data = json.dumps({"kind": "weights", "files": listed}, sort_keys=True).encode()
    sha256 = hashlib.sha256(data).hexdigest()
    if not deployment.blobs.holds(sha256):
        writer = deployment.blobs.writer()
        try:
            writer.write(data)
            writer.commit(sha256)
        except BaseException:
            writer.abort()
            raise
    return sha256
