"""Which queued save uploads next, and how much of it: the save upload queue's policy, kept apart from the
uploading so it can be reasoned about (and tested) on its own.

A run that saves faster than it uploads must neither fall ever further behind nor lose the ability to resume:
- a save with a newer one queued behind it uploads only its adapter weights (a candidate or a branch point);
- a save with its training state uploads at least every `resumable_every` saves, or once `resumable_seconds`
  passed since the last such upload finished, whichever first; it is then the newest save queued, and the saves
  waiting before it are skipped;
- when the run pauses, the saves between the upload in progress and the newest are skipped (a completed run
  works through the saves still waiting by the rules above);
- the newest save, and each epoch's save, upload in full.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FULL, WEIGHTS = "full", "weights"


@dataclass(frozen=True)
class Save:
    step: int
    directory: Path
    epoch: float | None = None
    final: bool = False
    epoch_end: bool = False  # the last save of an epoch: always uploaded in full


@dataclass
class Decision:
    uploads: list[tuple[Save, str]] = field(default_factory=list)  # in order, each FULL or WEIGHTS
    skipped: list[Save] = field(default_factory=list)


class UploadPolicy:
    def __init__(self, resumable_every: int, resumable_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.resumable_every = resumable_every
        self.resumable_seconds = resumable_seconds
        self.clock = clock
        self.saves_since_full = 0
        self.last_full = clock()  # the run's start counts as the last resumable point for the time bound

    def choose(self, queued: list[Save], stopping: bool) -> Decision:
        """What to do with the saves queued now (oldest first; not empty)."""
        newest = queued[-1]
        if stopping or (len(queued) > 1 and self._resumable_due()):
            earlier = queued[:-1]
            return Decision([(s, FULL) for s in earlier if s.epoch_end] + [(newest, FULL)],
                            [s for s in earlier if not s.epoch_end])
        head = queued[0]
        return Decision([(head, FULL if len(queued) == 1 or head.epoch_end else WEIGHTS)])

    def uploaded(self, save: Save, mode: str) -> None:
        if mode == FULL:
            self.saves_since_full, self.last_full = 0, self.clock()
        else:
            self.saves_since_full += 1

    def skipped(self, count: int) -> None:
        self.saves_since_full += count

    def _resumable_due(self) -> bool:
        return (self.saves_since_full + 1 >= self.resumable_every
                or self.clock() - self.last_full >= self.resumable_seconds)
