"""Training runs: submit, read, annotate, list, metrics, compare, rollouts, snapshots, pause, resume, cancel, and the
events stream (server-sent events)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.bodies import documented_as, required_body
from optimize.api.deps import DeploymentDep
from optimize.api.job_logs import add_log_route
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.api.params import Limit
from optimize.api.status_stream import status_events
from optimize.schemas.common import Answer, event_stream
from optimize.schemas.plans import RunPlan
from optimize.schemas.runs import (
    DryRun,
    LossComparison,
    PauseRequest,
    Run,
    RunAnnotation,
    RunHparams,
    RunList,
    RunMetrics,
    RunRollouts,
    RunSnapshots,
)
from optimize.training.server import lifecycle, runs

router = APIRouter(prefix="/v1/training/runs", tags=["training"])
add_log_route(router, "run")  # GET …/{id}/logs: the worker's log, per attempt


def _answer(answer: Answer, status_code: int = 200) -> JSONResponse:
    """An answer whose status depends on what happened (the route's response_model is one of its answers)."""
    return JSONResponse(answer.model_dump(mode="json", by_alias=True), status_code=status_code)


@router.post("", response_model=Run, status_code=202, response_description="The run was admitted and queued",
             responses={200: {"model": Run | DryRun, "description": "The run its submissionId already names; with "
                                                                    "dryRun=true, what a submission checks"}})
async def start_run(deployment: DeploymentDep,
                    plan: Annotated[Any, documented_as(RunPlan), Body(description="A run plan (kind: run)")],
                    dryRun: bool = False) -> JSONResponse:  # noqa: N803 - the API's camelCase query name
    # on the submissions' lane: a plan's reward terms and bundles are user code, which the service waits for
    if dryRun:
        return _answer(await SUBMISSIONS_LANE.run(runs.dry_run, deployment, plan))
    run, created = await SUBMISSIONS_LANE.run(runs.submit, deployment, plan)
    return _answer(run, status_code=202 if created else 200)


@router.get("", response_model=RunList)
def list_runs(deployment: DeploymentDep, project: str | None = None, phase: str | None = None,
              archived: bool = False) -> RunList:
    """Runs of archived projects are left out unless `archived=true` or their project is named."""
    return RunList(runs=runs.list_runs(deployment, project, phase, archived))


@router.get("/{run_id}", response_model=Run)
def get_run(run_id: str, deployment: DeploymentDep, settings: bool = False) -> Run:
    return runs.get_run(deployment, run_id, settings)


@router.patch("/{run_id}", response_model=Run, openapi_extra=required_body())
def annotate_run(run_id: str, deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(RunAnnotation), Body()] = None) -> Run:
    """Set the run's notes: its description and its column in the scores tables (configName). A field left out
    stays as it is; an empty string clears it. 400 when the body names neither field."""
    notes = RunAnnotation.parse(body)
    return runs.annotate_run(deployment, run_id, notes.description, notes.config_name)


@router.get("/{run_id}/metrics", response_model=RunMetrics)
def get_metrics(run_id: str, deployment: DeploymentDep, limit: Limit = None) -> RunMetrics:
    """The run's metrics; with `limit`, only the last `limit` training steps."""
    return runs.run_metrics(deployment, run_id, limit)


@router.get("/{run_id}/hparams", response_model=RunHparams)
def hparams(run_id: str, deployment: DeploymentDep,
            against: Annotated[str | None, Query(min_length=1, max_length=200, description="Another run (id or "
                                                 "unambiguous prefix): the paths whose values differ")] = None
            ) -> RunHparams:
    """The run's hyperparameters flattened by path, with their sha256; beside another run's, where they differ."""
    return runs.run_hparams(deployment, run_id, against)


@router.get("/{run_id}/compare", response_model=LossComparison)
def compare_runs(
    run_id: str, deployment: DeploymentDep,
    baseline: Annotated[str, Query(min_length=1, max_length=200,
                                   description="The run to compare against (id or unambiguous prefix)")],
    window: Annotated[int, Query(ge=1, le=1000, description="Updates per window")] = 10,
    spike_factor: Annotated[float, Query(alias="spikeFactor", gt=1, le=100, description="A gradient spike is a "
                                         "pre-clip norm at least this many times the run's median")] = 3.0,
    margin: Annotated[float, Query(ge=0, le=100, description="The absolute loss difference a window must pass")
                      ] = 0.05,
    across_plans: Annotated[bool, Query(alias="acrossPlans", description="Compare runs whose plans differ in more "
                                        "than hyperparams and execution")] = False,
    align: Annotated[Literal["step", "tokens"], Query(description="Line the windows up by update or by tokens "
                                                                  "seen")] = "step",
) -> LossComparison:
    """Two sft runs' training losses, window by window, on what each has logged so far: both means and the
    difference per window, the gradient spikes, the first window beyond the margin and a verdict. 400 for a run of
    another method, runs of different plans without acrossPlans, a run with no logged loss yet, or align=tokens
    where a run logged no token count."""
    return runs.compare_runs(deployment, run_id, baseline, window, spike_factor, margin, across_plans, align)


@router.get("/{run_id}/rollouts", response_model=RunRollouts)
def get_rollouts(run_id: str, deployment: DeploymentDep,
                 step: Annotated[int | None, Query(ge=0, le=2**31 - 1, description="The update to show (default: the "
                                                   "newest with recorded rollouts)")] = None) -> RunRollouts:
    """A grpo or gspo run's sampled rollouts at one update: prompts, completions, each reward term's score and the
    weighted total, with the updates that have recorded rollouts. 400 for a run of another method; 404 for a step
    without recorded rollouts, naming the steps with some."""
    return runs.run_rollouts(deployment, run_id, step)


@router.get("/{run_id}/snapshots", response_model=RunSnapshots)
def get_snapshots(run_id: str, deployment: DeploymentDep) -> RunSnapshots:
    return runs.run_snapshots(deployment, run_id)


@router.post("/{run_id}/pause", response_model=Run, status_code=202, response_description="The pause was accepted",
             responses={200: {"model": Run, "description": "The same pause is already in progress"}},
             openapi_extra=required_body())
def pause_run(run_id: str, deployment: DeploymentDep,
              body: Annotated[Any, documented_as(PauseRequest), Body()] = None) -> JSONResponse:
    """202 when the pause is accepted; 200 when the same pause is already in progress."""
    run, accepted = lifecycle.pause(deployment, run_id, PauseRequest.parse(body).checkpoint)
    return _answer(run, status_code=202 if accepted else 200)


@router.post("/{run_id}/resume", response_model=Run, status_code=202,
             response_description="The run is queued for a new attempt")
def resume_run(run_id: str, deployment: DeploymentDep) -> Run:
    return lifecycle.resume(deployment, run_id)


@router.post("/{run_id}/cancel", response_model=Run, status_code=202, response_description="The run was cancelled",
             responses={200: {"model": Run, "description": "The run was already cancelled"}})
def cancel_run(run_id: str, deployment: DeploymentDep) -> JSONResponse:
    """202 when cancelled now; 200 when the run was already cancelled."""
    run, cancelled = lifecycle.cancel(deployment, run_id)
    return _answer(run, status_code=202 if cancelled else 200)


@router.get("/{run_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the run's status (as GET /v1/training/runs/{id} answers "
                                   "it) now and after each change, until it has ended or paused"))
async def follow(run_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The run's current status first, then a status after each change, until the run has ended or paused."""
    return await status_events(request, runs.get_run, deployment, run_id, "runId", "run")
