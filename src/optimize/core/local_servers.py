"""The servers running on this machine for this user, so the CLI finds the admin token of the one it talks to.

A server writes `<runtime dir>/server-<pid>.json` (its URL and data dir; mode 0600) while it runs, as Jupyter
does for its servers' tokens; the CLI, given no token, looks up the URL it talks to there and reads that data
dir's `admin-token` — which only a user who may read the data dir can. The runtime dir is
`$XDG_RUNTIME_DIR/optimize`, else `~/.optimize/run`; files of servers that are gone are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    return Path(base) / "optimize" if base else Path.home() / ".optimize" / "run"


def announce(url: str, data_dir: Path) -> Path:
    """Record this process's server; returns the file, which the server removes when it stops."""
    folder = runtime_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"server-{os.getpid()}.json"
    partial = path.with_suffix(".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"url": url, "dataDir": str(data_dir), "pid": os.getpid()}, handle)
    os.replace(partial, path)
    return path


def data_dir_serving(url: str) -> Path | None:
    """The data dir of the running server at `url`, when it runs on this machine for this user."""
    folder = runtime_dir()
    if not folder.is_dir():
        return None
    wanted = url.rstrip("/")
    for path in sorted(folder.glob("server-*.json"), key=_age):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("url", "").rstrip("/") == wanted and _alive(int(record.get("pid", 0))):
            return Path(record["dataDir"])
    return None


def _age(path: Path) -> float:
    try:
        return -path.stat().st_mtime  # newest first: a port reused after a crash names the newer server
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
