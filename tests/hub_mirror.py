"""A model hub the tests serve on 127.0.0.1: a real HTTP server answering the routes the real `huggingface_hub`
client calls for `model_info`, `snapshot_download`, `hf_hub_download` and `parse_safetensors_file_metadata`.

Servers under test reach it through huggingface_hub's own setting, HF_ENDPOINT (with HF_HUB_OFFLINE=0), exactly
as a deployment reaches a hub mirror. Routes (as huggingface_hub 2.x builds them):
- GET  /api/models/{owner}/{name}[/revision/{rev}]  → {id, sha, siblings}; 404 with X-Error-Code RepoNotFound or
  RevisionNotFound, which the client turns into its typed errors;
- GET  /api/models/{owner}/{name}/tree/{rev}[/{path}] → the file listing (git blob ids; LFS sha256 for weights);
- HEAD/GET /{owner}/{name}/resolve/{rev}/{file} → the bytes, with X-Repo-Commit, ETag / X-Linked-Etag and
  X-Linked-Size, and Range requests answered 206 (the client reads safetensors headers with them).
A repository is a set of commits (each a {path: bytes} tree) and refs (branches, tags) naming them.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin")  # stored in LFS on the real hub: their ETag is the content's sha256
API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+)|/tree/(?P<tree>[^/]+)(?P<sub>/.*)?)?$")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def commit_id(files: dict[str, bytes]) -> str:
    """A 40-hex commit id derived from the tree, so the same files make the same commit."""
    listing = "".join(f"{path} {git_blob_id(data)}\n" for path, data in sorted(files.items()))
    return hashlib.sha1(listing.encode()).hexdigest()


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Repository:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def push(self, files: dict[str, bytes], *, branch: str = "main", tag: str | None = None) -> str:
        sha = commit_id(files)
        self.commits[sha] = dict(files)
        self.refs[branch] = sha
        if tag:
            self.refs[tag] = sha
        return sha

    def commit(self, revision: str) -> str | None:
        revision = unquote(revision)
        return revision if revision in self.commits else self.refs.get(revision)


class HubMirror:
    """The loopback hub: `push` files into repositories, read `url`, `requests` (method, path) as they came."""

    def __init__(self) -> None:
        self.repositories: dict[str, Repository] = {}
        self.requests: list[tuple[str, str]] = []
        self.slow: dict[str, float] = {}  # repository → seconds each file download waits (a slow link)
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server naming
                mirror._answer(self, head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                mirror._answer(self, head=True)

            def log_message(self, *args) -> None:  # quiet: the tests read `requests` instead
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def push(self, repository: str, files: dict[str, bytes], **refs) -> str:
        return self.repositories.setdefault(repository, Repository()).push(files, **refs)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- answering ----------------------------------------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        path = urlsplit(handler.path).path
        self.requests.append((handler.command, path))
        if match := API.match(path):
            self._api(handler, match)
        elif match := RESOLVE.match(path):
            self._resolve(handler, match, head)
        else:
            self._error(handler, 404, "EntryNotFound", f"no route {path}")

    def _lookup(self, handler, repo: str, revision: str):
        repository = self.repositories.get(repo)
        if repository is None:
            self._error(handler, 404, "RepoNotFound", f"Repository {repo} not found")
            return None, None
        sha = repository.commit(revision)
        if sha is None:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {unquote(revision)}")
            return None, None
        return sha, repository.commits[sha]

    def _api(self, handler, match) -> None:
        repo = match["repo"]
        sha, files = self._lookup(handler, repo, match["tree"] or match["rev"] or "main")
        if sha is None:
            return
        if match["tree"] is not None:
            prefix = unquote(match["sub"] or "").strip("/")
            listing = [self._tree_entry(name, data) for name, data in sorted(files.items())
                       if not prefix or name.startswith(prefix + "/")]
            self._json(handler, listing, sha)
            return
        self._json(handler, {"id": repo, "modelId": repo, "sha": sha, "private": False, "disabled": False,
                             "gated": False, "siblings": [{"rfilename": name} for name in sorted(files)]}, sha)

    @staticmethod
    def _tree_entry(name: str, data: bytes) -> dict:
        entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": name}
        if name.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _resolve(self, handler, match, head: bool) -> None:
        sha, files = self._lookup(handler, match["repo"], match["rev"])
        if sha is None:
            return
        name = unquote(match["file"])
        if name not in files:
            self._error(handler, 404, "EntryNotFound", f"{name} does not exist at {sha}", sha)
            return
        data = files[name]
        status, body, extra = 200, data, {}
        wanted = handler.headers.get("Range")
        if wanted and (ranged := re.match(r"bytes=(\d+)-(\d*)", wanted)):
            start = int(ranged[1])
            end = min(int(ranged[2]) if ranged[2] else len(data) - 1, len(data) - 1)
            status, body = 206, data[start:end + 1]
            extra["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Repo-Commit", sha)
        handler.send_header("Accept-Ranges", "bytes")
        if name.endswith(LFS_SUFFIXES):
            digest = hashlib.sha256(data).hexdigest()
            handler.send_header("ETag", f'"{digest}"')
            handler.send_header("X-Linked-Etag", f'"{digest}"')
            handler.send_header("X-Linked-Size", str(len(data)))
        else:
            handler.send_header("ETag", f'"{git_blob_id(data)}"')
        for key, value in extra.items():
            handler.send_header(key, value)
        handler.end_headers()
        if not head:
            if delay := self.slow.get(match["repo"]):
                handler.wfile.write(body[: len(body) // 2])
                handler.wfile.flush()
                time.sleep(delay)
                body = body[len(body) // 2:]
            handler.wfile.write(body)

    @staticmethod
    def _json(handler, value, sha: str) -> None:
        body = json.dumps(value).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Repo-Commit", sha)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    @staticmethod
    def _error(handler, status: int, code: str, message: str, sha: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", message)
        if sha:
            handler.send_header("X-Repo-Commit", sha)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)
