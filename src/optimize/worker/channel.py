"""The worker's line to the control plane: every call carries the lease token and goes to its job's routes
(`/v1/internal/jobs/{kind}/{id}`); blobs download verified.

A worker outlives a short outage of the server: a call that finds no server waits and tries again (re-reading
the server file, `OPTIMIZE_SERVER_FILE`, for a server restarted on another port) until it has gone without an
answer for as long as its lease holds; only then does it give up (`unreachable`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from optimize.client.http import ApiError, OptimizeClient
from optimize.core.digests import file_identity, file_sha256
from optimize.core.environment import setting
from optimize.core.sharding import UTF8_BOM
from optimize.schemas.jobs import Spec

RETRY_SECONDS = 1.0  # between tries while the server does not answer
DEFAULT_OUTAGE_SECONDS = 60.0  # until the job's spec says how long its lease holds


class Channel(OptimizeClient):
    def __init__(self, server_url: str, token: str, kind: str, job_id: str) -> None:
        super().__init__(server_url, timeout=300.0)
        self._http.headers["X-Lease-Token"] = token
        self.base = f"/v1/internal/jobs/{kind}/{job_id}"
        self.upload_rate = setting("OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND")  # 0: unlimited
        self.outage_seconds = DEFAULT_OUTAGE_SECONDS
        self._server_file = setting("OPTIMIZE_SERVER_FILE")
        self._last_answer = time.monotonic()
        self._direct_uploads: bool | None = None  # whether blobs go to a bucket directly; None: not asked yet

    def spec(self, model: type[Spec]) -> dict[str, Any]:
        """The job's spec, read through its kind's model (`schemas.jobs`, the one the server built it with); from
        then on the worker waits out an outage as long as its lease holds."""
        answer = model.model_validate(self.request("GET", self.base)).wire()
        self.outage_seconds = float(answer.get("leaseSeconds") or DEFAULT_OUTAGE_SECONDS)
        return answer

    def request_with_status(self, method: str, path: str, *, retries: int | None = None, **kwargs: Any
                            ) -> tuple[Any, int]:
        return self.outlasting(lambda: super(Channel, self).request_with_status(method, path, retries=1, **kwargs))

    def outlasting(self, call):
        """Run `call` (one try) until the server answers, or has not answered for `outage_seconds`."""
        while True:
            try:
                answer = call()
            except ApiError as error:
                if error.code != "unreachable" and error.status not in (502, 503, 504):
                    self._last_answer = time.monotonic()
                    raise
                if time.monotonic() - self._last_answer > self.outage_seconds:
                    raise ApiError(f"{error.message}; no answer for {self.outage_seconds:g}s",
                                   code="unreachable") from None
                time.sleep(RETRY_SECONDS)
                self._rediscover()
                continue
            self._last_answer = time.monotonic()
            return answer

    def _rediscover(self) -> None:
        """Follow a server restarted elsewhere: the server file names the URL the running one answers at."""
        if not self._server_file:
            return
        try:
            url = json.loads(open(self._server_file).read())["url"].rstrip("/")
        except (OSError, ValueError, KeyError, TypeError):
            return
        if url != self.base_url:
            print(f"the server answers at {url} now", flush=True)
            self.base_url = url
            self._http.base_url = url

    def example_lines(self, objects: list[dict[str, Any]]) -> Iterator[tuple[int, bytes]]:
        """(line number, raw line) of a dataset version's examples across its objects, in order, read from local
        files, so memory holds one line whatever the dataset's size. A UTF-8 byte order mark opening an object
        (the registry accepts one opening a file) is left out."""
        line = 0
        for item in objects:
            with self.fetch_blob(item["sha256"]).open("rb") as handle:
                for offset, raw in enumerate(handle):
                    line += 1
                    yield line, raw.removeprefix(UTF8_BOM) if offset == 0 else raw

    def fetch_blob(self, sha256: str, cache: Path | None = None) -> Path:
        """The blob as a local file, downloaded once and verified against its digest before every use: a cached
        copy is used only while it is the file last found to match (its verified marker records the file's size,
        mtime, ctime and inode; any change of the file invalidates it and the file is hashed again), and a copy
        that no longer matches is removed and downloaded again."""
        cache = cache or (setting("OPTIMIZE_WORKER_CACHE") or Path(tempfile.gettempdir())) / "blobs"
        target = cache / "sha256" / sha256[:2] / sha256
        if target.is_file():
            if _cached_copy_matches(target, sha256):
                return target
            print(f"the cached copy of blob sha256:{sha256} is corrupt; downloading it again", flush=True)
            _marker(target).unlink(missing_ok=True)
            target.unlink(missing_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        # a name of this thread's own: runs sharing one worker may fetch the same blob at once
        partial = target.with_suffix(f".{os.getpid()}-{threading.get_ident()}.part")
        digest = self.outlasting(lambda: self._download(sha256, partial))
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            raise ApiError(f"blob sha256:{sha256} arrived corrupted (its bytes hash to sha256:{digest.hexdigest()})")
        os.replace(partial, target)
        _mark_verified(target)
        return target

    def _download(self, sha256: str, partial: Path):
        """Stream the blob into `partial`, hashing it. A server whose blobs live in a bucket answers 307 with a
        short-lived presigned URL: the bytes then come from the bucket, asked without the lease token (the
        signature in the URL is the whole of its authority)."""
        digest = hashlib.sha256()
        try:
            with self._http.stream("GET", f"{self.base}/blobs/{sha256}") as response:
                if response.status_code == 307 and response.headers.get("location"):
                    response.read()
                    return self._download_from(response.headers["location"], sha256, partial)
                _refuse_unless_ok(response, f"the server could not provide blob sha256:{sha256}")
                _sink(response, partial, digest)
        except httpx.TransportError as error:
            raise ApiError(f"no Optimize server answers at {self.base_url} ({type(error).__name__})",
                           code="unreachable") from None
        return digest

    def _download_from(self, url: str, sha256: str, partial: Path):
        digest = hashlib.sha256()
        try:
            with httpx.stream("GET", url, timeout=httpx.Timeout(300.0, connect=5.0)) as response:
                _refuse_unless_ok(response, f"the blob store could not provide blob sha256:{sha256}")
                _sink(response, partial, digest)
        except httpx.TransportError as error:
            # not the server: waiting for it would not help, and the worker's attempt ends (tried again later)
            raise ApiError(f"the blob store does not answer at {httpx.URL(url).host} ({type(error).__name__}); "
                           "workers must reach the endpoint the server uses", code="blob_store_unreachable"
                           ) from None
        return digest

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
        `OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND`, where a shared link needs it): to the bucket itself where the
        server's blobs live in one (a presigned PUT the server issues under the lease), else to the server."""
        digest = hashlib.sha256()
        with path.open("rb") as source:
            while chunk := source.read(1024 * 1024):
                digest.update(chunk)
        if self._direct_uploads is not False:
            target = self.post_json(f"{self.base}/blobs/{digest.hexdigest()}/target", {"bytes": path.stat().st_size})
            self._direct_uploads = bool(target.get("direct"))  # a server on its own disk says so once
            if target.get("url"):
                self._upload_to(target, path, digest.hexdigest())
                self.post_json(f"{self.base}/blobs/{digest.hexdigest()}/written", {})
                return digest.hexdigest()

        def upload() -> None:
            with path.open("rb") as source:  # a fresh read each try: a body cut by an outage is sent again
                OptimizeClient.request_with_status(self, "PUT", f"{self.base}/blobs/{digest.hexdigest()}", retries=1,
                                                   content=_paced(source, self.upload_rate),
                                                   headers={"Content-Length": str(path.stat().st_size),
                                                            "Content-Type": "application/octet-stream"})

        self.outlasting(upload)
        return digest.hexdigest()

    def _upload_to(self, target: dict[str, Any], path: Path, sha256: str) -> None:
        """PUT the file to the presigned URL (not the server: its lease token is not sent)."""
        try:
            with path.open("rb") as source:
                response = httpx.put(target["url"], content=_paced(source, self.upload_rate), headers=target["headers"],
                                     timeout=httpx.Timeout(300.0, connect=5.0))
        except httpx.TransportError as error:
            raise ApiError(f"the blob store does not answer at {httpx.URL(target['url']).host} "
                           f"({type(error).__name__}); workers must reach the endpoint the server uses",
                           code="blob_store_unreachable") from None
        if response.status_code >= 300:
            raise ApiError(f"the blob store refused blob sha256:{sha256} ({response.status_code}: "
                           f"{response.text[:300]})", status=response.status_code, code="blob_store_refused")

    def post_json(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def act(self, action: str, body: Any) -> Any:
        """POST one of the job's actions (heartbeat, progress, metrics, snapshots, predictions, result)."""
        return self.post_json(f"{self.base}/{action}", body)

    def report_end(self, path: str, result: dict[str, Any]) -> int:
        """A job's last word; the worker's exit status: 0 once the server took it, 3 when it could not."""
        try:
            self.post_json(path, result)
        except ApiError as error:
            print(f"cannot report: {error.message}", flush=True)
            return 3
        return 0


def _refuse_unless_ok(response: httpx.Response, message: str) -> None:
    if response.status_code == 200:
        return
    response.read()
    problem = _problem(response)
    detail = f": {problem['detail']}" if problem.get("detail") else ""
    raise ApiError(f"{message} ({response.status_code}){detail}", status=response.status_code,
                   code=problem.get("code", "error"))


def _sink(response: httpx.Response, partial: Path, digest) -> None:
    with partial.open("wb") as sink:
        for chunk in response.iter_bytes(1024 * 1024):
            digest.update(chunk)
            sink.write(chunk)


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _marker(target: Path) -> Path:
    return target.with_name(f"{target.name}.verified")


def _cached_copy_matches(target: Path, sha256: str) -> bool:
    """Whether the cached file still hashes to its name: at once when its verified marker records the file as it
    is now, else by hashing it (and marking it again when it matches)."""
    identity = file_identity(target)
    try:
        marked = json.loads(_marker(target).read_text())
    except (OSError, ValueError):
        marked = None
    if identity is not None and marked == list(identity):
        return True
    if file_sha256(target) != sha256:
        return False
    if file_identity(target) == identity:  # unchanged while it was read
        _mark_verified(target)
    return True


def _mark_verified(target: Path) -> None:
    """Record the identity of a file just found to match its name, beside it (written whole, then renamed)."""
    identity = file_identity(target)
    if identity is None:
        return
    marker = _marker(target)
    partial = marker.with_name(f"{marker.name}.{os.getpid()}-{threading.get_ident()}.part")
    partial.write_text(json.dumps(list(identity)))
    os.replace(partial, marker)


def _paced(source, rate: float, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """The file's bytes in chunks, sleeping so that they leave no faster than `rate` bytes a second (0: at once)."""
    started, sent = time.monotonic(), 0
    while data := source.read(chunk):
        yield data
        sent += len(data)
        if rate > 0:
            time.sleep(max(0.0, started + sent / rate - time.monotonic()))


__all__ = ["ApiError", "Channel"]
