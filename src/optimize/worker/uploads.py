"""The save upload queue: saves written to local disk are uploaded to the blob store while training goes on.

Each artifact kind (adapter `weights`, `trainingState`) is uploaded file by file under its digest, then its
manifest, last; the snapshot is committed only after every manifest is held, so an interrupted upload is never
listed. A save's local folder is removed once it is committed.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.worker.channel import ApiError, Channel

WEIGHT_FILES = ("adapter_model.safetensors", "adapter_config.json")
STATE_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json")


@dataclass(frozen=True)
class Save:
    step: int
    directory: Path
    epoch: float | None = None
    final: bool = False


class SaveUploader:
    def __init__(self, channel: Channel, base: str) -> None:
        self.channel = channel
        self.base = base
        self.committed: list[dict[str, Any]] = []
        self.error: str | None = None
        self._queue: queue.Queue[Save | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="uploads", daemon=True)

    def start(self) -> SaveUploader:
        self._thread.start()
        return self

    def put(self, save: Save) -> None:
        self._queue.put(save)

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Upload what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        while (save := self._queue.get()) is not None:
            try:
                self.committed.append(self._upload(save))
            except (ApiError, OSError) as error:
                self.error = f"uploading the save at step {save.step} failed: {error}"
            finally:
                shutil.rmtree(save.directory, ignore_errors=True)

    def _upload(self, save: Save) -> dict[str, Any]:
        artifacts = []
        for kind, names in (("weights", WEIGHT_FILES), ("trainingState", STATE_FILES)):
            files = [save.directory / name for name in names if (save.directory / name).is_file()]
            if not files:
                continue
            listed = [{"path": f.name, "sha256": self.channel.put_blob(f), "bytes": f.stat().st_size} for f in files]
            manifest = {"kind": kind, "step": save.step, "files": listed}
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as sink:
                json.dump(manifest, sink, sort_keys=True)
            try:
                artifacts.append({"kind": kind, "manifestSha256": self.channel.put_blob(Path(sink.name))})
            finally:
                Path(sink.name).unlink(missing_ok=True)
        return self.channel.post_json(f"{self.base}/snapshots", {
            "step": save.step, "epoch": save.epoch, "final": save.final, "artifacts": artifacts})
