"""Which API token the CLI sends to a server, and where `akka auth login` keeps tokens.

In order: `--token` (or OPTIMIZE_TOKEN); the token `akka auth login` stored for that server's URL; the admin
token of a server this user runs on this machine (its data dir's `admin-token`, found through the servers'
runtime files, core/local_servers.py) — so a local server needs no setup, as the quickstart shows.
Stored tokens live in `~/.optimize/credentials.json` (OPTIMIZE_CREDENTIALS names another file), mode 0600.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from optimize.core import local_servers
from optimize.core.environment import setting


def credentials_file() -> Path:
    return setting("OPTIMIZE_CREDENTIALS")


def find_token(url: str, given: str | None = None) -> str | None:
    if given:
        return given.strip()
    stored = stored_tokens().get(_key(url))
    if stored:
        return stored
    data_dir = local_servers.data_dir_serving(url)
    if data_dir is not None:
        try:
            return (data_dir / "admin-token").read_text().strip() or None
        except OSError:  # not this user's to read
            return None
    return None


def stored_tokens() -> dict[str, str]:
    try:
        value = json.loads(credentials_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def store_token(url: str, token: str | None) -> Path:
    """Keep `token` for `url` (None forgets it), in a file only this user may read."""
    tokens = stored_tokens()
    if token is None:
        tokens.pop(_key(url), None)
    else:
        tokens[_key(url)] = token
    path = credentials_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_suffix(".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(tokens, handle, indent=2, sort_keys=True)
    os.replace(partial, path)
    return path


def _key(url: str) -> str:
    return url.rstrip("/")
