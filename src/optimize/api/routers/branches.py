"""Branches of runs: `POST /v1/training/runs/{id}/branch|continue|sweep` (each with `?dryRun=true`; run on the
submissions' lane, `api.lanes`, as a run's submission is), and `GET …/{id}/branches` (`?recursive=true`: the whole
tree) and `GET …/{id}/ancestry`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from optimize.api.bodies import documented_as, required_body
from optimize.api.deps import DeploymentDep
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.schemas.common import Answer
from optimize.schemas.runs import (
    Ancestry,
    BranchDryRun,
    Branches,
    BranchRequest,
    ContinueRequest,
    Run,
    Sweep,
    SweepDryRun,
    SweepRequest,
)
from optimize.training.server import branching

router = APIRouter(prefix="/v1/training/runs", tags=["training"])


def _answer(result: Answer, dry: bool) -> JSONResponse:
    return JSONResponse(result.model_dump(mode="json", by_alias=True), status_code=200 if dry else 202)


@router.post("/{run_id}/branch", response_model=Run, status_code=202,
             response_description="The branch was admitted as a queued run",
             responses={200: {"model": BranchDryRun, "description": "With dryRun=true: what the branch would be"}})
async def branch(run_id: str, deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(BranchRequest), Body()] = None,
                 dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = BranchRequest.parse(body)
    return _answer(await SUBMISSIONS_LANE.run(
        branching.branch, deployment, run_id, b.snapshot_id, b.restore_mode, b.overrides, b.max_steps, b.epochs,
        dryRun), dryRun)


@router.post("/{run_id}/continue", response_model=Run, status_code=202,
             response_description="The continuation was admitted as a queued run",
             responses={200: {"model": BranchDryRun, "description": "With dryRun=true: what the continuation would "
                                                                   "be"}},
             openapi_extra=required_body())
async def continue_run(run_id: str, deployment: DeploymentDep,
                       body: Annotated[Any, documented_as(ContinueRequest), Body()] = None,
                       dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = ContinueRequest.parse(body)
    return _answer(await SUBMISSIONS_LANE.run(branching.continue_run, deployment, run_id, b.steps, b.snapshot_id,
                                              b.overrides, dryRun), dryRun)


@router.post("/{run_id}/sweep", response_model=Sweep, status_code=202,
             response_description="One branch was admitted for each grid point",
             responses={200: {"model": SweepDryRun, "description": "With dryRun=true: every grid point, checked"}},
             openapi_extra=required_body())
async def sweep(run_id: str, deployment: DeploymentDep,
                body: Annotated[Any, documented_as(SweepRequest), Body()] = None,
                dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = SweepRequest.parse(body)
    return _answer(await SUBMISSIONS_LANE.run(branching.sweep, deployment, run_id, b.grid, b.snapshot_id,
                                              b.restore_mode, dryRun), dryRun)


@router.get("/{run_id}/branches", response_model=Branches)
def branches(run_id: str, deployment: DeploymentDep, recursive: bool = False) -> Branches:
    return branching.children(deployment, run_id, recursive)


@router.get("/{run_id}/ancestry", response_model=Ancestry)
def ancestry(run_id: str, deployment: DeploymentDep) -> Ancestry:
    return branching.ancestry(deployment, run_id)
