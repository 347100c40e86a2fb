"""Following a server-sent events stream (`GET …/events`), reconnecting when it drops.

The server sends the current status first, so a reconnect never misses the state a follower needs; a gateway
with nothing behind it is retried 8 times in a row with backoff (about 2 minutes), then given up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from optimize.client.http import ApiError, OptimizeClient, _decode

RETRIES = 8


def follow(client: OptimizeClient, path: str, deadline: float | None = None) -> Iterator[dict[str, Any]]:
    """Each status the stream sends, until one is terminal or settled (paused), or the deadline passes (then
    TimeoutError)."""
    failures = 0
    while True:
        try:
            with client._http.stream("GET", path, timeout=httpx.Timeout(30.0, connect=5.0, read=30.0)) as response:
                if response.status_code != 200:
                    response.read()
                    _decode(response)  # raises the server's refusal (e.g. an unknown run)
                failures = 0
                for status in _statuses(response.iter_lines(), deadline):
                    yield status
                    if status.get("settled"):
                        return
        except (httpx.TransportError, httpx.StreamError) as error:
            failures += 1
            if failures > RETRIES:
                raise ApiError(f"lost the stream from {client.base_url} {RETRIES} times in a row "
                               f"({type(error).__name__})",
                               code="unreachable", hint="the run goes on; follow it again later") from None
            time.sleep(min(30.0, 0.5 * 2 ** failures))
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError


def _statuses(lines: Iterator[str], deadline: float | None) -> Iterator[dict[str, Any]]:
    data: list[str] = []
    for line in lines:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []
