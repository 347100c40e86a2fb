"""Importing an adapter made elsewhere (`akka registry adapters import`): its two files — `adapter_config.json` and
`adapter_model.safetensors`, from the folder PEFT's `save_pretrained` wrote or a ZIP of it — sent by their sha256
(a file the registry holds is not sent again), then imported over a base model (its calls are api.py's)."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optimize.client.api import OptimizeApi
from optimize.client.http import OptimizeClient
from optimize.core.errors import Invalid
from optimize.core.refs import Reference

FILES = ("adapter_config.json", "adapter_model.safetensors")
_CHUNK = 1024 * 1024


def import_adapter(client: OptimizeApi | OptimizeClient, reference: Reference, path: Path, *, base: str,
                   alias: str | None = None) -> dict[str, Any]:
    """The version the import registered (or the one the same adapter already was)."""
    api = OptimizeApi.over(client)
    contents = _files(path)
    listed = []
    for name in FILES:
        data = contents[name]
        sha256 = hashlib.sha256(data).hexdigest()
        api.adapters.send_file(reference, sha256, _chunks(data), len(data))
        listed.append({"path": name, "sha256": sha256, "bytes": len(data)})
    return api.adapters.import_adapter(reference, base=base, files=listed, alias=alias)


def _files(path: Path) -> dict[str, bytes]:
    """The two files' bytes, from a folder or a ZIP (at its top, or in one folder inside it); a missing one is
    refused by name before anything is sent."""
    if path.is_dir():
        found = {name: (path / name).read_bytes() for name in FILES if (path / name).is_file()}
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = {Path(info.filename).name: info for info in archive.infolist()
                       if not info.is_dir() and Path(info.filename).name in FILES}
            found = {name: archive.read(info) for name, info in members.items()}
    elif path.exists():
        raise Invalid(f"{path} is neither a folder nor a ZIP file", hint="give the folder PEFT's save_pretrained "
                                                                         "wrote, or a ZIP of it")
    else:
        raise Invalid(f"{path} does not exist", hint="give the adapter's folder or a ZIP of it")
    missing = [name for name in FILES if name not in found]
    if missing:
        raise Invalid(f"{path} holds no {' and no '.join(missing)}",
                      hint="give the folder PEFT's save_pretrained wrote: adapter_config.json and "
                           "adapter_model.safetensors")
    return found


def _chunks(data: bytes) -> Iterator[bytes]:
    view = io.BytesIO(data)
    while chunk := view.read(_CHUNK):
        yield chunk
