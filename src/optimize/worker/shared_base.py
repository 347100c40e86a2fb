"""Runs granted together on one device (`execution.shareBase`), trained by this one process on one loaded base: each
run's attempt goes on as a run's worker's does (`worker.run`: its own lease, spec, rows, reports, saves, pause and
last word), on a thread of its own, and the engine takes their updates in turn on the one model
(`training.engines.shared_base`). The process ends once every run's attempt has.
"""

from __future__ import annotations

import threading

from optimize.training.engines.shared_base import SharedBase
from optimize.worker.channel import Channel
from optimize.worker.run import run_training


def run_shared(served: list[tuple[Channel, str]]) -> int:
    """Each run's attempt on its own thread; the highest exit status among them (0 when each reported its end)."""
    from optimize.training.engines.harness import engine_imports

    engine_imports()  # once, here, before the runs' threads use them
    base = SharedBase([run_id for _, run_id in served])
    codes: dict[str, int] = {}

    def attempt(channel: Channel, run_id: str) -> None:
        codes[run_id] = run_training(channel, run_id, shared=base)

    threads = [threading.Thread(target=attempt, args=item, name=f"run-{item[1][:8]}") for item in served]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"trained {len(served)} runs on one base: {base.summary()}", flush=True)
    return max((codes.get(run_id, 1) for _, run_id in served), default=0)
