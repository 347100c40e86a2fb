"""The worker's reporter: heartbeats, progress and metrics sent from one background thread, so training never
waits on the network. Progress keeps only its newest value; metrics (and rollouts) are sent in batches.

If the server answers `lease_lost`, or cannot be reached for longer than the lease, the attempt is no longer
this worker's: `lost` is set and the training loop stops without writing more. Every answer also says whether a
pause was asked for (`pause`: latest or save), which the training loop carries out at its next update boundary, and
whether the run's guards asked it to stop (`stop`: why, `execution.stopWhen`): it then saves at its next update and
completes there.

A reinforcement run's sample of rollouts per update is sent like metrics, several updates a call; at most
`ROLLOUTS_HELD` updates wait between sends, the oldest dropped first (a sample is never worth the memory).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from optimize.worker.channel import ApiError, Channel

ROLLOUTS_HELD = 64  # updates' rollout samples held while unsent
ROLLOUTS_PER_CALL = 16  # updates' rollout samples sent in one call

class Reporter:
    def __init__(self, channel: Channel, base: str, lease_seconds: float) -> None:
        self.channel = channel
        self.base = base
        self.lease_seconds = lease_seconds
        self.interval = max(0.5, min(5.0, lease_seconds / 4))
        self.lost = threading.Event()
        self.lost_reason = ""
        self.pause: str | None = None  # the checkpoint of a pause the server asked for
        self.stop_asked: str | None = None  # why the server asked the run to stop and complete (its guards)
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._progress: dict[str, Any] | None = None
        self._metrics: list[dict[str, Any]] = []
        self._rollouts: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_contact = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="reporter", daemon=True)

    def start(self) -> Reporter:
        self._thread.start()
        return self

    def progress(self, urgent: bool = False, **body: Any) -> None:
        """Queue a progress report; the newest replaces an unsent one (their progress fields merged)."""
        with self._lock:
            if self._progress is None:
                self._progress = body
            else:
                merged = {**self._progress, **body}
                merged["progress"] = {**self._progress.get("progress", {}), **body.get("progress", {})}
                self._progress = merged
        if urgent:
            self._wake.set()

    def metric(self, kind: str, step: int, values: dict[str, Any]) -> None:
        with self._lock:
            self._metrics.append({"kind": kind, "step": step, "values": values})

    def rollouts(self, step: int, items: list[dict[str, Any]]) -> None:
        """Queue one update's sample of rollouts."""
        with self._lock:
            self._rollouts.append({"step": step, "items": items})
            del self._rollouts[:-ROLLOUTS_HELD]

    def flush(self) -> None:
        """Send whatever is queued now, from the caller's thread (before a snapshot is committed and before the
        final report)."""
        self._send()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self._send()

    def end(self, path: str, result: dict[str, Any]) -> int:
        """Stop reporting and send the job's last word; the worker's exit status (3 when the job is no longer
        this worker's, or the server could not take it)."""
        self.stop()
        if self.lost.is_set():
            print(f"stopped: {self.lost_reason}", flush=True)
            return 3
        return self.channel.report_end(path, result)

    def _loop(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set():
            self._send()
            if time.monotonic() >= next_beat:
                self._call(f"{self.base}/heartbeat", {})
                next_beat = time.monotonic() + self.interval
            self._wake.wait(min(1.0, self.interval))
            self._wake.clear()

    def _send(self) -> None:
        with self._sending:  # one send at a time: a flush returns only once what was queued before it is sent
            with self._lock:
                progress, self._progress = self._progress, None
                metrics, self._metrics = self._metrics, []
                rollouts, self._rollouts = self._rollouts, []
            if metrics:
                self._call(f"{self.base}/metrics", {"items": metrics})
            for start in range(0, len(rollouts), ROLLOUTS_PER_CALL):
                self._call(f"{self.base}/rollouts", {"records": rollouts[start:start + ROLLOUTS_PER_CALL]})
            if progress is not None:
                self._call(f"{self.base}/progress", progress)

    def _call(self, path: str, body: dict[str, Any]) -> None:
        if self.lost.is_set():
            return
        try:
            answer = self.channel.post_json(path, body)
            self._last_contact = time.monotonic()
            if isinstance(answer, dict) and answer.get("pause"):
                self.pause = answer["pause"]
            if isinstance(answer, dict) and answer.get("stop"):
                self.stop_asked = answer["stop"]
        except ApiError as error:
            if error.code == "lease_lost":
                self._lose(error.message)
            elif time.monotonic() - self._last_contact > self.lease_seconds:
                self._lose(f"the server could not be reached for {self.lease_seconds:g}s: {error.message}")

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()
