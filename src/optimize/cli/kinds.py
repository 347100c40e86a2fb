"""The `akka training` command groups of each job kind, by the kind's name (the CLI reaches the server only over
HTTP, so it knows a kind by name, never by its declaration). `akka training` mounts them in this order; the API's
table of the same kinds is `api.kinds`, the worker's `worker.kinds`."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from optimize.cli.commands import (
    analyses,
    branches,
    comparisons,
    curations,
    distillations,
    endpoints,
    evaluations,
    pipelines,
    snapshots,
)


@dataclass(frozen=True)
class Group:
    """One command group under `akka training`: its name and its commands."""

    name: str
    commands: typer.Typer
    hidden: bool = False  # an alias the reference names, left out of the help


GROUPS: dict[str, tuple[Group, ...]] = {
    # the branches module adds its commands (branch, continue, sweep, …) to the runs group
    "run": (Group("runs", branches.app), Group("run", branches.app, hidden=True), Group("snapshots", snapshots.app)),
    "analysis": (Group("datasets", analyses.app),),
    "evaluation": (Group("evaluations", evaluations.app),),
    "distillation": (Group("distillations", distillations.app),),
    "curation": (Group("curations", curations.app),),
    "endpoint": (Group("endpoints", endpoints.app),),
    "comparison": (Group("comparisons", comparisons.app),),
    "pipeline": (Group("pipelines", pipelines.app), Group("pipeline", pipelines.app, hidden=True)),
}


def groups() -> list[Group]:
    """Every kind's groups, in the order of the table."""
    return [group for kind_groups in GROUPS.values() for group in kind_groups]
