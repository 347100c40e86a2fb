"""The job kinds of this deployment: one entry each — the module declaring the kind (`KIND`), the worker entry
`python -m optimize.worker KIND JOB_ID` runs, the API routers that serve it and the `akka training` command
groups that drive it. The server mounts the routers, the CLI mounts the groups and projects count the kind's
unfinished work from these entries, so adding a kind touches this table and the kind's own modules only.

Everything is named by dotted path and imported on first use, so neither the CLI nor a worker imports the
services of kinds it does not touch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Command:
    """One command group under `akka training`: its name and the module whose `app` (a Typer) it mounts."""

    name: str
    module: str
    hidden: bool = False  # an alias the reference names, left out of the help


@dataclass(frozen=True)
class Entry:
    declaration: str  # the module holding the kind's `KIND`
    worker: str  # module:function a worker process runs
    routers: tuple[str, ...] = ()  # API modules, each with a `router`
    commands: tuple[Command, ...] = ()


KINDS: dict[str, Entry] = {
    "run": Entry(
        "optimize.training.server.job", "optimize.worker.run:run_training",
        routers=("optimize.api.routers.runs", "optimize.api.routers.branches", "optimize.api.routers.snapshots"),
        # the branches module adds its commands (branch, continue, sweep, …) to the runs group
        commands=(Command("runs", "optimize.cli.commands.branches"),
                  Command("run", "optimize.cli.commands.branches", hidden=True),
                  Command("snapshots", "optimize.cli.commands.snapshots"))),
    "analysis": Entry(
        "optimize.analysis.job", "optimize.worker.analysis:run_analysis",
        routers=("optimize.api.routers.analyses",),
        commands=(Command("datasets", "optimize.cli.commands.analyses"),)),
    "evaluation": Entry(
        "optimize.evaluation.job", "optimize.worker.evaluation:run_evaluation",
        routers=("optimize.api.routers.evaluations",),
        commands=(Command("evaluations", "optimize.cli.commands.evaluations"),)),
    "distillation": Entry(
        "optimize.distillation.job", "optimize.worker.distillation:run_distillation",
        routers=("optimize.api.routers.distillations",),
        commands=(Command("distillations", "optimize.cli.commands.distillations"),)),
    "endpoint": Entry(
        "optimize.serving.job", "optimize.worker.endpoint:run_endpoint",
        routers=("optimize.api.routers.endpoints",),
        commands=(Command("endpoints", "optimize.cli.commands.endpoints"),)),
}


@cache
def kind(name: str) -> Any:
    """The declared `JobKind` of that name (KeyError for a name that is no kind)."""
    return importlib.import_module(KINDS[name].declaration).KIND


def kinds() -> list[Any]:
    return [kind(name) for name in KINDS]


def worker_entry(name: str):
    """The function a worker process of that kind runs, given its channel and job id."""
    module, _, function = KINDS[name].worker.partition(":")
    return getattr(importlib.import_module(module), function)


def routers() -> list[Any]:
    """Every kind's API routers, in the order of the table."""
    return [importlib.import_module(module).router for entry in KINDS.values() for module in entry.routers]


def commands() -> list[tuple[Command, Any]]:
    """Every kind's `akka training` command groups with their Typer apps, in the order of the table."""
    return [(command, importlib.import_module(command.module).app)
            for entry in KINDS.values() for command in entry.commands]
