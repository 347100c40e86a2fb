"""The worker's line to the control plane: every call carries the lease token; blobs download verified."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optimize.client.http import ApiError, OptimizeClient


class Channel(OptimizeClient):
    def __init__(self, server_url: str, token: str) -> None:
        super().__init__(server_url, timeout=300.0)
        self._http.headers["X-Lease-Token"] = token
        self.upload_rate = float(os.environ.get("OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND") or 0)  # 0: unlimited

    def example_lines(self, objects: list[dict[str, Any]]) -> Iterator[tuple[int, bytes]]:
        """(line number, raw line) of a dataset version's examples across its objects, in order, read from local
        files, so memory holds one line whatever the dataset's size."""
        line = 0
        for item in objects:
            with self.fetch_blob(item["sha256"]).open("rb") as handle:
                for raw in handle:
                    line += 1
                    yield line, raw

    def fetch_blob(self, sha256: str, cache: Path | None = None) -> Path:
        """The blob as a local file, downloaded once, verified against its digest before it is used."""
        cache = cache or Path(os.environ.get("OPTIMIZE_WORKER_CACHE") or tempfile.gettempdir()) / "blobs"
        target = cache / "sha256" / sha256[:2] / sha256
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        digest = hashlib.sha256()
        with self._http.stream("GET", f"/v1/internal/blobs/{sha256}") as response:
            if response.status_code != 200:
                raise ApiError(f"the server could not provide blob sha256:{sha256} ({response.status_code})")
            with partial.open("wb") as sink:
                for chunk in response.iter_bytes(1024 * 1024):
                    digest.update(chunk)
                    sink.write(chunk)
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            raise ApiError(f"blob sha256:{sha256} arrived corrupted (its bytes hash to sha256:{digest.hexdigest()})")
        os.replace(partial, target)
        return target

    def fetch_artifact(self, manifest_sha256: str, folder: Path) -> Path:
        """The files a snapshot artifact's manifest lists, copied into `folder` under their names."""
        import json
        import shutil

        folder.mkdir(parents=True, exist_ok=True)
        manifest = json.loads(self.fetch_blob(manifest_sha256).read_bytes())
        for item in manifest["files"]:
            shutil.copyfile(self.fetch_blob(item["sha256"]), folder / Path(item["path"]).name)
        return folder

    def put_blob(self, path: Path) -> str:
        """Upload a file of this worker's output under its sha256, streaming it (no faster than the operator's
        `OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND`, where a shared link needs it)."""
        digest = hashlib.sha256()
        with path.open("rb") as source:
            while chunk := source.read(1024 * 1024):
                digest.update(chunk)
        with path.open("rb") as source:
            self.put_stream(f"/v1/internal/blobs/{digest.hexdigest()}", _paced(source, self.upload_rate),
                            path.stat().st_size)
        return digest.hexdigest()

    def post_json(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body, retries=3)

    def report_end(self, path: str, result: dict[str, Any]) -> int:
        """A job's last word; the worker's exit status: 0 once the server took it, 3 when it could not."""
        try:
            self.post_json(path, result)
        except ApiError as error:
            print(f"cannot report: {error.message}", flush=True)
            return 3
        return 0


def _paced(source, rate: float, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """The file's bytes in chunks, sleeping so that they leave no faster than `rate` bytes a second (0: at once)."""
    started, sent = time.monotonic(), 0
    while data := source.read(chunk):
        yield data
        sent += len(data)
        if rate > 0:
            time.sleep(max(0.0, started + sent / rate - time.monotonic()))


__all__ = ["ApiError", "Channel"]
