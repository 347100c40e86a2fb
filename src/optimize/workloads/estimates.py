"""Estimates of a run file's steps and time from a finished analysis.

Steps follow from the rows and the plan's batch size, gradient accumulation, devices, epochs and maxSteps, by
the rule the engine trains by (`TrainingLoop.updates`).
Tokens per epoch are the rows' lengths, each capped at maxSeqLength. Time follows from the throughput measured
in the catalog envelope that matches the run's method and device profile; with no such measurement there is
no time estimate, and the answer says why. Every input is named with whether the file stated it.

A reinforcement run (grpo, gspo) reads its loop from `rlHyperparams`: an update rolls out `batchSize` prompts per
device, `generations` completions each, so its tokens are the rows' lengths (a prompt and an answer of the row's
own length) times the generations, and `rollouts` gives the completions and the most tokens they may generate.
Without an analysis (`lengths_file` None) the steps and rollouts are still estimated, the tokens and time not.

A supervised run that packs its rows (`workloads.packing`) makes its updates over bins, not rows: with an analysis
the steps follow from the bins its lengths fill (`packing` says how many and how full); without one the steps
are those of the unpacked rows, the most the run can make.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimize.catalog.schema import Entry
from optimize.schemas.plans import (
    REINFORCEMENT,
    RlHyperparams,
    RunPlan,
    stated_and_resolved,
    steps_per_epoch,
)
from optimize.workloads.lengths import row_lengths
from optimize.workloads.packing import Packed, bins, packs_by_default

LOOP = ("training.epochs", "training.maxSteps", "training.batchSize", "training.gradientAccumulation")
INPUTS = ("config.method", "config.maxSeqLength", *(f"config.hyperparams.{name}" for name in LOOP),
          "execution.deviceProfile", "execution.gpus")
RL_INPUTS = ("config.method", "config.maxSeqLength", *(f"config.rlHyperparams.{name}" for name in LOOP),
             "config.rlHyperparams.generations", "config.rlHyperparams.maxCompletionLength", "execution.deviceProfile",
             "execution.gpus")
NO_ANALYSIS = "no analysis of the training dataset is done, so there is no token or time estimate"


def estimate(report: dict[str, Any], lengths_file: Path | None, plan: RunPlan, entry: Entry,
             packing: bool | None = None) -> dict[str, Any]:
    """The estimate; `packing` is whether the run packs its rows as admission resolved it (None: as the plan
    states it, or its default on the plan's device profile)."""
    fields = stated_and_resolved(plan)
    rows = report.get("rows", report.get("pairs", 0))
    reinforcement = plan.config.method in REINFORCEMENT
    rl = plan.config.rl_hyperparams or RlHyperparams()
    loop = rl.training if reinforcement else plan.config.hyperparams.training
    generations = rl.generations if reinforcement else 1
    cpu = plan.execution.device_profile == "cpu"
    devices = 1 if cpu else max(plan.execution.gpus, 1)
    if packing is None:
        packing = plan.config.packing if plan.config.packing is not None else packs_by_default(
            plan.config.method, cpu, plan.config.model.attention_implementation or "sdpa", images=False)
    cap = plan.config.max_seq_length
    capped = None if lengths_file is None else [min(length, cap) for length in row_lengths(lengths_file)]
    packed = None
    if packing and capped is None:
        packed = {"rows": rows, "bins": None, "binTokens": cap, "tokens": None, "efficiency": None}
    elif packing:
        filled = Packed(len(capped), bins(capped, cap), sum(capped), cap)
        packed, rows = filled.to_json(), filled.bins
    per_update = loop.batch_size * loop.gradient_accumulation * devices
    per_epoch = steps_per_epoch(rows, loop.batch_size, loop.gradient_accumulation, devices)
    steps = loop.updates(rows, devices)
    tokens = None if capped is None else round(sum(capped) * generations * steps / per_epoch)
    envelope = next((e for e in entry.envelopes if e.method == plan.config.method
                     and e.device_profile == plan.execution.device_profile
                     and (cpu or e.gpus == plan.execution.gpus) and e.tokens_per_second), None)
    if tokens is None:
        seconds, basis = None, NO_ANALYSIS
    elif envelope is None:
        seconds, basis = None, (f"no throughput is measured for {plan.config.method} on "
                                f"{plan.execution.device_profile} for {entry.id}, so there is no time estimate")
    else:
        seconds = round(tokens / (envelope.tokens_per_second * devices), 1)
        basis = (f"{envelope.tokens_per_second:g} tokens/s per device measured by {envelope.measurement.by} on "
                 f"{envelope.measurement.hardware} ({envelope.measurement.at})")
    answer = {
        "stepsPerEpoch": per_epoch, "steps": steps, "sequencesPerUpdate": per_update * generations, "tokens": tokens,
        "seconds": seconds, "basis": basis, "packing": packed,
        "inputs": [{"field": name, **(fields[name] if name in fields else
                                      {"value": _default(rl, name), "source": "default"})}
                   for name in (RL_INPUTS if reinforcement else INPUTS)],
    }
    if reinforcement:
        answer["rollouts"] = {"promptsPerUpdate": per_update, "completionsPerUpdate": per_update * generations,
                              "completions": per_update * generations * steps,
                              "mostCompletionTokens": per_update * generations * steps * rl.max_completion_length}
    return answer


def _default(rl: RlHyperparams, name: str) -> Any:
    """An rlHyperparams input a plan leaves out entirely, at its default."""
    return stated_and_resolved(rl, "config.rlHyperparams.")[name]["value"]
