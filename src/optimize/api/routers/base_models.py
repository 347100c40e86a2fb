"""Base models and capacity: `GET /v1/training/base-models[/{id}]`, `POST /v1/training/base-models` (add a hub
model; an administrator's route once tokens with roles exist), `POST …/{id}/select`, `POST …/{id}/render` (a row
as the model sees it), `GET /v1/training/capacity`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from optimize.analysis.row_view import render_row
from optimize.api.deps import DeploymentDep
from optimize.catalog import additions, downloads, selection
from optimize.catalog.views import entry_detail, entry_view
from optimize.schemas.catalog import (
    AddRequest,
    BaseModelDetail,
    BaseModelList,
    Capacity,
    RenderedRow,
    RenderRequest,
    SelectRequest,
)
from optimize.store.tables import BaseModelSelection
from optimize.training.server.capacity import capacity as capacity_view

router = APIRouter(prefix="/v1/training", tags=["training"])


@router.get("/base-models", response_model=BaseModelList)
def list_base_models(deployment: DeploymentDep) -> BaseModelList:
    with deployment.store.transaction() as session:
        selected = {s.entry_id: s for s in session.scalars(select(BaseModelSelection))}
    return BaseModelList(models=[entry_view(e, selected.get(e.id)) for e in deployment.catalog.entries],
                         envelopes="strict" if deployment.catalog.strict_envelopes else "advisory")


@router.post("/base-models", response_model=BaseModelDetail, status_code=201)
def add_base_model(body: AddRequest, deployment: DeploymentDep) -> BaseModelDetail:
    # an administrator's only (api/auth.py's ACCESS): it changes what this deployment may train
    entry = additions.add(deployment.store, deployment.catalog, body.repository, body.family)
    return entry_detail(entry, None)


@router.get("/base-models/{model_id:path}", response_model=BaseModelDetail)
def get_base_model(model_id: str, deployment: DeploymentDep) -> BaseModelDetail:
    entry = deployment.catalog.find(model_id)
    return entry_detail(entry, selection.selection_for(deployment.store, entry.id),
                        download=downloads.progress(entry.id))


@router.post("/base-models/{model_id:path}/select", response_model=BaseModelDetail)
def select_base_model(model_id: str, deployment: DeploymentDep, body: SelectRequest | None = None
                      ) -> BaseModelDetail:
    chosen = selection.select(deployment.store, deployment.catalog, deployment.data_dir, model_id,
                              body.from_dir if body else None, body.revision if body else None)
    return entry_detail(deployment.catalog.find(chosen.entry_id), chosen)


@router.post("/base-models/{model_id:path}/render", response_model=RenderedRow)
def render(model_id: str, body: RenderRequest, deployment: DeploymentDep) -> RenderedRow:
    """A chat row as the model's chat template renders it for a supervised run, each token marked trained or not
    (the dashboard's row viewer)."""
    return render_row(deployment, model_id, body.row, body.loss.model_dump(by_alias=True))


@router.get("/capacity", response_model=Capacity)
def capacity(deployment: DeploymentDep, project: Annotated[str | None, Query(
        max_length=64, description="Show this project's claims and quota only")] = None) -> Capacity:
    return capacity_view(deployment, project)
