"""What a selection is downloading from the hub, so `select` can show it while it waits: the bytes on disk so
far against the files' total, per catalog entry, in this server process (a selection runs inside its request).

The download folder is measured, not the client's internals hooked: huggingface_hub writes each file as it arrives
(`.incomplete` until it is whole, then moved into place), so the folder's size is the bytes received.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from optimize.core.clock import iso, utcnow

MEASURE_EVERY = 0.5  # seconds

_active: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


@contextmanager
def watching(entry_id: str, repository: str, commit: str, folder: Path, total_bytes: int | None,
             files: int | None) -> Iterator[None]:
    state = {"repository": repository, "commit": commit, "bytes": 0, "totalBytes": total_bytes, "files": files,
             "startedAt": iso(utcnow())}
    stop = threading.Event()

    def measure() -> None:
        while not stop.wait(MEASURE_EVERY):
            state["bytes"] = folder_bytes(folder)

    with _lock:
        _active[entry_id] = state
    thread = threading.Thread(target=measure, name=f"download-{entry_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with _lock:
            _active.pop(entry_id, None)


def progress(entry_id: str) -> dict[str, Any] | None:
    """The download under way for the entry, or None."""
    with _lock:
        state = _active.get(entry_id)
        return dict(state) if state is not None else None


def folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except FileNotFoundError:  # moved into place between the listing and the stat
            continue
    return total
