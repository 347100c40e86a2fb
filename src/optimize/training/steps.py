"""How many optimizer updates a run makes: the one rule the engine trains by and the estimates predict with.

An epoch is ceil(rows / (batch size x gradient accumulation x devices)) updates; `maxSteps`, where set, is the
run's length whatever the epochs (the data is cycled), as in the Transformers trainer.
"""

from __future__ import annotations

from math import ceil


def steps_per_epoch(rows: int, batch_size: int, accumulation: int, devices: int = 1) -> int:
    return max(1, ceil(rows / (batch_size * accumulation * devices)))


def total_steps(rows: int, training: dict, devices: int = 1) -> int:
    """`training` is the resolved `config.hyperparams.training` block."""
    if training.get("maxSteps"):
        return int(training["maxSteps"])
    per_epoch = steps_per_epoch(rows, training["batchSize"], training["gradientAccumulation"], devices)
    return per_epoch * int(training["epochs"])
