"""Branches of runs: `POST /v1/training/runs/{id}/branch|continue|sweep` (each with `?dryRun=true`; run on the
submissions' lane, `api.lanes`, as a run's submission is), and `GET …/{id}/branches` (`?recursive=true`: the whole
tree) and `GET …/{id}/ancestry`."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from optimize.api.bodies import documented_as, required_body
from optimize.api.deps import DeploymentDep
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.core.errors import Invalid
from optimize.schemas.plans import MOST_STEPS
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


def _body(body: Any, allowed: set[str]) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise Invalid("the request body must be one JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Invalid(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(allowed))}")
    return body


def _integer(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (type(value) is not int or not 1 <= value <= MOST_STEPS):
        raise Invalid(f"{name} must be a positive integer of at most {MOST_STEPS:,}")
    return value


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise Invalid(f"{name} must be a non-empty string, not {json.dumps(value)[:40]}")
    return value


def _answer(result: dict[str, Any], dry: bool) -> JSONResponse:
    return JSONResponse(result, status_code=200 if dry else 202)


@router.post("/{run_id}/branch", response_model=Run, status_code=202,
             response_description="The branch was admitted as a queued run",
             responses={200: {"model": BranchDryRun, "description": "With dryRun=true: what the branch would be"}})
async def branch(run_id: str, deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(BranchRequest), Body()] = None,
                 dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = _body(body, {"snapshotId", "restoreMode", "overrides", "maxSteps", "epochs"})
    return _answer(await SUBMISSIONS_LANE.run(
        branching.branch, deployment, run_id, _text(b, "snapshotId"), _text(b, "restoreMode") or "auto",
        b.get("overrides"), _integer(b, "maxSteps"), _integer(b, "epochs"), dryRun), dryRun)


@router.post("/{run_id}/continue", response_model=Run, status_code=202,
             response_description="The continuation was admitted as a queued run",
             responses={200: {"model": BranchDryRun, "description": "With dryRun=true: what the continuation would "
                                                                   "be"}},
             openapi_extra=required_body())
async def continue_run(run_id: str, deployment: DeploymentDep,
                       body: Annotated[Any, documented_as(ContinueRequest), Body()] = None,
                       dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = _body(body, {"snapshotId", "steps", "overrides"})
    steps = _integer(b, "steps")
    if steps is None:
        raise Invalid("a continuation needs steps: how many more updates it trains")
    return _answer(await SUBMISSIONS_LANE.run(branching.continue_run, deployment, run_id, steps, _text(b, "snapshotId"),
                                              b.get("overrides"), dryRun), dryRun)


@router.post("/{run_id}/sweep", response_model=Sweep, status_code=202,
             response_description="One branch was admitted for each grid point",
             responses={200: {"model": SweepDryRun, "description": "With dryRun=true: every grid point, checked"}},
             openapi_extra=required_body())
async def sweep(run_id: str, deployment: DeploymentDep,
                body: Annotated[Any, documented_as(SweepRequest), Body()] = None,
                dryRun: bool = False) -> JSONResponse:  # noqa: N803
    b = _body(body, {"grid", "snapshotId", "restoreMode"})
    return _answer(await SUBMISSIONS_LANE.run(branching.sweep, deployment, run_id, b.get("grid"),
                                              _text(b, "snapshotId"), _text(b, "restoreMode") or "auto", dryRun),
                   dryRun)


@router.get("/{run_id}/branches", response_model=Branches)
def branches(run_id: str, deployment: DeploymentDep, recursive: bool = False) -> dict:
    return branching.children(deployment, run_id, recursive)


@router.get("/{run_id}/ancestry", response_model=Ancestry)
def ancestry(run_id: str, deployment: DeploymentDep) -> dict:
    return branching.ancestry(deployment, run_id)
