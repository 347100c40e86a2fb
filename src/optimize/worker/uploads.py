"""The save upload queue: saves written to local disk are uploaded to the blob store while training goes on,
in the order and to the extent `upload_policy` decides (weights only while newer saves wait, training state at
bounded intervals, the newest in full when the run stops).

Each artifact kind (adapter `weights`, `trainingState`) is uploaded file by file under its digest, then its
manifest, last; the snapshot is committed only after every manifest is held, so an interrupted upload is never
listed. A save's local folder is removed once it is committed or skipped.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optimize.training.adapters import weights_files
from optimize.worker.channel import ApiError, Channel
from optimize.worker.upload_policy import FULL, Save, UploadPolicy

# optimizer.bin and pytorch_model_fsdp.bin: the optimizer and the adapter as a sharded (fsdp) run saves them
STATE_FILES = ("optimizer.pt", "optimizer.bin", "pytorch_model_fsdp.bin", "scheduler.pt", "rng_state.pth",
               "trainer_state.json")

__all__ = ["Save", "SaveUploader"]


class SaveUploader:
    def __init__(self, channel: Channel, base: str, policy: UploadPolicy,
                 before_commit: Callable[[], None] = lambda: None) -> None:
        self.channel = channel
        self.base = base
        self.policy = policy
        # called before a snapshot is committed: the metrics of the updates it holds are sent first, so a run
        # tried again from this save has every metric up to it
        self.before_commit = before_commit
        self.committed: list[dict[str, Any]] = []
        self.skipped = 0
        self.error: str | None = None
        self._queue: queue.Queue[Save | None] = queue.Queue()
        self._pending: list[Save] = []  # taken off the queue, not yet uploaded or skipped
        self._pausing = False
        self._thread = threading.Thread(target=self._loop, name="uploads", daemon=True)

    def start(self) -> SaveUploader:
        self._thread.start()
        return self

    def put(self, save: Save) -> None:
        self._queue.put(save)

    @property
    def waiting(self) -> int:
        """Saves written and not yet uploaded or skipped (the one uploading included)."""
        return self._queue.qsize() + len(self._pending)

    def counts(self) -> dict[str, int]:
        return {"savesWaiting": self.waiting, "savesSkipped": self.skipped}

    def close(self, pausing: bool = False, timeout: float | None = None) -> None:
        """Training has ended. A pausing run uploads its newest save in full (and epoch saves) and skips the others
        waiting; a completed run works through the saves still waiting by the usual rules. Then it stops."""
        self._pausing = pausing
        self._queue.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        closing = False
        while not (closing and not self._pending):
            closing = self._take(block=not self._pending) or closing
            if not self._pending:
                continue
            decision = self.policy.choose(self._pending, stopping=closing and self._pausing)
            for save in decision.skipped:
                self._drop(save)
            self.skipped += len(decision.skipped)
            self.policy.skipped(len(decision.skipped))
            for save, mode in decision.uploads:
                try:
                    self.committed.append(self._upload(save, mode))
                    self.policy.uploaded(save, mode)
                except (ApiError, OSError) as error:
                    self.error = f"uploading the save at step {save.step} failed: {error}"
                finally:
                    self._drop(save)

    def _take(self, block: bool) -> bool:
        """Move what is queued now into pending; True once the run has stopped (close was called)."""
        try:
            item = self._queue.get(block=block)
            while True:
                if item is None:
                    return True
                self._pending.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            return False

    def _drop(self, save: Save) -> None:
        self._pending.remove(save)
        shutil.rmtree(save.directory, ignore_errors=True)

    def _upload(self, save: Save, mode: str) -> dict[str, Any]:
        artifacts = []
        kinds = ("weights", "trainingState")
        for kind in kinds if mode == FULL else kinds[:1]:
            # an adapter's files, or a full fine-tune's every weight
            files = weights_files(save.directory) if kind == "weights" else \
                [save.directory / name for name in STATE_FILES if (save.directory / name).is_file()]
            if kind == "trainingState":  # on several devices each rank's random state is a file of its own
                files += sorted(save.directory.glob("rng_state_*.pth"))
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
        self.before_commit()
        return self.channel.post_json(f"{self.base}/snapshots", {
            "step": save.step, "epoch": save.epoch, "final": save.final, "artifacts": artifacts})
