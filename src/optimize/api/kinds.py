"""The job kinds this server serves, one entry each: the kind's declaration (its `JobKind`, which the kernel
schedules, recovers and answers the workers of) and the API routers that serve it to users.

`create_app` registers the declarations with the kernel (`jobs.registry`) and mounts the routers. Adding a kind
is its own package with its declaration, one entry here, one in the CLI's table (`cli.kinds`) and one in the
worker's (`worker.kinds`); `tests/unit/test_kind_tables.py` holds the three to the same kinds.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter

from optimize.analysis.job import KIND as ANALYSIS
from optimize.api.routers import (
    analyses,
    branches,
    comparisons,
    curations,
    distillations,
    endpoints,
    evaluations,
    pipelines,
    runs,
    snapshots,
)
from optimize.comparisons.job import KIND as COMPARISON
from optimize.curation.job import KIND as CURATION
from optimize.distillation.job import KIND as DISTILLATION
from optimize.evaluation.job import KIND as EVALUATION
from optimize.jobs import registry
from optimize.jobs.kinds import JobKind
from optimize.pipelines.job import KIND as PIPELINE
from optimize.serving.asking import EndpointAsker
from optimize.serving.job import KIND as ENDPOINT
from optimize.training.server.job import KIND as RUN
from optimize.workloads import served as served_models


@dataclass(frozen=True)
class ServedKind:
    declaration: JobKind
    routers: tuple[APIRouter, ...]


# In this order the kernel lists them: projects name an archive's unfinished work kind by kind in it
SERVED: tuple[ServedKind, ...] = (
    ServedKind(RUN, (runs.router, branches.router, snapshots.router)),
    ServedKind(ANALYSIS, (analyses.router,)),
    ServedKind(EVALUATION, (evaluations.router,)),
    ServedKind(DISTILLATION, (distillations.router,)),
    ServedKind(CURATION, (curations.router,)),
    ServedKind(ENDPOINT, (endpoints.router,)),
    ServedKind(COMPARISON, (comparisons.router,)),
    ServedKind(PIPELINE, (pipelines.router,)),
)


def register_kinds() -> None:
    """Make every kind this server serves known to the kernel (again, harmlessly, for each app created), and hand
    the kinds that ask a served model the serving kind's asking."""
    registry.register(*(served.declaration for served in SERVED))
    served_models.provide(EndpointAsker())


def kind_routers() -> list[APIRouter]:
    """Every kind's routers, in the order of the table."""
    return [router for served in SERVED for router in served.routers]
