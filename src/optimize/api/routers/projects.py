"""Training projects: `POST /v1/training/projects`, `GET /v1/training/projects[/{name}]`,
`POST /v1/training/projects/{name}/archive|unarchive`, `PUT|DELETE /v1/training/projects/{name}/evaluation` (the
standing evaluation)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.evaluation import standing
from optimize.evaluation.scores import scores
from optimize.projects import service
from optimize.schemas.projects import (
    Project,
    ProjectChange,
    ProjectList,
    ProjectRequest,
    Scores,
    StandingEvaluationChange,
    StandingEvaluationRequest,
)

router = APIRouter(prefix="/v1/training/projects", tags=["training"])


@router.post("", response_model=Project, status_code=201, response_description="The project was created",
             responses={200: {"model": Project, "description": "The project existed already"}})
def create_project(body: ProjectRequest, deployment: DeploymentDep) -> JSONResponse:
    project, created = service.create_project(deployment.store, body.name, body.description)
    return JSONResponse(project.model_dump(mode="json", by_alias=True), status_code=201 if created else 200)


@router.get("", response_model=ProjectList)
def list_projects(deployment: DeploymentDep, archived: bool = False) -> ProjectList:
    return ProjectList(projects=service.list_projects(deployment.store, archived))


@router.get("/{name}", response_model=Project)
def get_project(name: str, deployment: DeploymentDep) -> Project:
    return service.get_project(deployment.store, name)


@router.post("/{name}/archive", response_model=ProjectChange)
def archive_project(name: str, deployment: DeploymentDep) -> ProjectChange:
    """Archive: left out of lists with its runs, no new work; refused while any of its work is in progress."""
    return service.archive_project(deployment.store, name)


@router.post("/{name}/unarchive", response_model=ProjectChange)
def unarchive_project(name: str, deployment: DeploymentDep) -> ProjectChange:
    return service.unarchive_project(deployment.store, name)


@router.get("/{name}/scores", response_model=Scores)
def project_scores(name: str, deployment: DeploymentDep, dataset: str | None = None, grader: str | None = None
                   ) -> Scores:
    """The baseline and one column per training configuration, for one dataset and grader."""
    return scores(deployment, name, dataset, grader)



@router.put("/{name}/evaluation", response_model=StandingEvaluationChange)
def set_standing_evaluation(name: str, deployment: DeploymentDep,
                            body: Annotated[Any, documented_as(StandingEvaluationRequest), Body()]
                            ) -> StandingEvaluationChange:
    """The project's standing evaluation: every model version it registers from now on is evaluated on this dataset
    with this grader, started by the server; refused for an unknown dataset or grader, or an archived project."""
    return standing.set_standing(deployment, name, StandingEvaluationRequest.parse(body))


@router.delete("/{name}/evaluation", response_model=StandingEvaluationChange)
def clear_standing_evaluation(name: str, deployment: DeploymentDep) -> StandingEvaluationChange:
    """No standing evaluation: new model versions are no longer evaluated by themselves (those started stay)."""
    return service.clear_standing(deployment.store, name)
