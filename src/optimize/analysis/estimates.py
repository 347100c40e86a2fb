"""Estimates of a run file's steps and time from a finished analysis.

Steps follow from the rows and the plan's batch size, gradient accumulation, devices, epochs and maxSteps, by
the rule the engine trains by (`schemas.plans.total_steps`).
Tokens per epoch are the rows' lengths, each capped at maxSeqLength. Time follows from the throughput measured
in the catalog envelope that matches the run's method and device profile; with no such measurement there is
no time estimate, and the answer says why. Every input is named with whether the file stated it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimize.catalog.schema import Entry
from optimize.schemas.plans import RunPlan, stated_and_resolved, steps_per_epoch, total_steps

INPUTS = (
    "config.method", "config.maxSeqLength", "config.hyperparams.training.epochs",
    "config.hyperparams.training.maxSteps", "config.hyperparams.training.batchSize",
    "config.hyperparams.training.gradientAccumulation", "execution.deviceProfile", "execution.gpus",
)


def _capped_tokens(lengths_file: Path, cap: int) -> int:
    total = 0
    with lengths_file.open() as handle:
        for line in handle:
            total += min(json.loads(line)[0], cap)
    return total


def estimate(report: dict[str, Any], lengths_file: Path, plan: RunPlan, entry: Entry) -> dict[str, Any]:
    fields = stated_and_resolved(plan)
    rows = report.get("rows", report.get("pairs", 0))
    loop = plan.config.hyperparams.training
    cpu = plan.execution.device_profile == "cpu"
    devices = 1 if cpu else max(plan.execution.gpus, 1)
    per_update = loop.batch_size * loop.gradient_accumulation * devices
    per_epoch = steps_per_epoch(rows, loop.batch_size, loop.gradient_accumulation, devices)
    steps = total_steps(rows, loop.model_dump(by_alias=True), devices)
    tokens = round(_capped_tokens(lengths_file, plan.config.max_seq_length) * steps / per_epoch)
    envelope = next((e for e in entry.envelopes if e.method == plan.config.method
                     and e.device_profile == plan.execution.device_profile
                     and (cpu or e.gpus == plan.execution.gpus) and e.tokens_per_second), None)
    if envelope is None:
        seconds, basis = None, (f"no throughput is measured for {plan.config.method} on "
                                f"{plan.execution.device_profile} for {entry.id}, so there is no time estimate")
    else:
        seconds = round(tokens / (envelope.tokens_per_second * devices), 1)
        basis = (f"{envelope.tokens_per_second:g} tokens/s per device measured by {envelope.measurement.by} on "
                 f"{envelope.measurement.hardware} ({envelope.measurement.at})")
    return {
        "stepsPerEpoch": per_epoch, "steps": steps, "sequencesPerUpdate": per_update, "tokens": tokens,
        "seconds": seconds, "basis": basis,
        "inputs": [{"field": name, **fields[name]} for name in INPUTS],
    }
