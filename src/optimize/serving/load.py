"""What an endpoint's engine counts, whichever engine it is (the Transformers batcher, vLLM): its room — at most
`max_running` requests decoding and `max_waiting` more waiting, past which a request is refused at once
(`QueueFull`, HTTP 429), and `MAX_ADAPTERS` adapters loaded at once — and what its heartbeat reports: requests
served, in flight and queued, tokens generated, and over the last minute tokens/s and the 50th and 95th percentile
of a request's time from submission to its end.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

MINUTE = 60.0
MAX_ADAPTERS = 8  # adapters loaded at once on one endpoint (the server refuses a ninth; vLLM reserves as many slots)


class QueueFull(Exception):
    """Every slot of the batch and of the queue is taken."""


class EndpointLoad:
    def __init__(self, max_running: int, max_waiting: int) -> None:
        self.max_running, self.max_waiting = max_running, max_waiting
        self._count = threading.Lock()
        self._pending = 0  # waiting and running
        self.started = time.monotonic()
        self.served = 0  # requests finished (answered, stopped or cancelled)
        self.tokens = 0  # tokens generated
        self.recent: deque[tuple[float, float, int]] = deque()  # (finished at, seconds it took, tokens) of a minute

    def admit(self) -> None:
        """Count a new request in, or refuse it when the endpoint is full."""
        with self._count:
            if self._pending >= self.max_running + self.max_waiting:
                raise QueueFull(f"{self._pending} requests are running or waiting on this endpoint")
            self._pending += 1

    def finished(self, submitted: float, generated: int) -> None:
        finished = time.monotonic()
        with self._count:
            self._pending -= 1
            self.served += 1
            self.tokens += generated
            self.recent.append((finished, finished - submitted, generated))

    def running(self) -> int:
        """Requests decoding now."""
        return min(self._pending, self.max_running)

    @property
    def load(self) -> dict[str, int]:
        running = self.running()
        return {"running": running, "waiting": max(0, self._pending - running)}

    def statistics(self) -> dict[str, Any]:
        with self._count:
            cutoff = time.monotonic() - MINUTE
            while self.recent and self.recent[0][0] < cutoff:
                self.recent.popleft()
            recent = list(self.recent)
            load = self.load
        seconds = sorted(item[1] for item in recent)
        return {"served": self.served, "inFlight": load["running"], "queued": load["waiting"],
                "tokens": self.tokens, "tokensPerSecond": round(sum(item[2] for item in recent) / max(
                    1.0, min(MINUTE, time.monotonic() - self.started)), 2),
                "latencyP50Seconds": _percentile(seconds, 0.50), "latencyP95Seconds": _percentile(seconds, 0.95)}


def _percentile(ordered: list[float], share: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)
