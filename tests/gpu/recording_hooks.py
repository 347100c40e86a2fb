"""The engine hooks the GPU tests train with: they record the start checks and each metric, and never stop."""

from __future__ import annotations


class RecordingHooks:
    def __init__(self) -> None:
        self.metrics: list[dict] = []
        self.checks = None

    def started(self, total_steps, checks, from_step):
        self.checks = checks

    def step(self, step, total_steps):
        pass

    def metric(self, kind, step, values):
        self.metrics.append(values)

    def saved(self, step, directory, epoch, final, epoch_end):
        pass

    def should_stop(self):
        return False

    def pause(self):
        return None
