"""Whether the current request may be shown where this server keeps things on its disks or in its bucket — a dataset
shard's or a bundle archive's blob, a base model's folder, the blob store itself: an administrator's may, no other.

A path names the server's data dir, its layout and its user: nothing a reader or a trainer needs (every byte they may
read has a route of its own), and a map for whoever would reach the machine another way. The token gate says which
for each request (a context variable, which follows the request into its handler threads); the views that carry a
path leave it out (null) where it may not be shown. A request the gate does not see (the open routes) shows none;
work the server does on its own, outside any request, answers nobody and sees them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_shown: ContextVar[bool] = ContextVar("optimize_server_paths_shown", default=True)


@contextmanager
def showing_server_paths(shown: bool) -> Iterator[None]:
    """Everything inside shows server paths, or leaves them out."""
    mark = _shown.set(shown)
    try:
        yield
    finally:
        _shown.reset(mark)


def shows_server_paths() -> bool:
    """Whether an answer to the current request may carry a server path."""
    return _shown.get()
