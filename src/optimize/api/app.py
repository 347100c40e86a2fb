"""The application factory: store migrated and opened, blob store ready, the job kinds of `api.kinds` registered
with the kernel, the jobs an earlier server process left recovered, routers mounted."""

from __future__ import annotations

from fastapi import FastAPI

from optimize import __version__
from optimize.api import docs_page, problems
from optimize.api.auth import TokenGate
from optimize.api.body_limits import BodyLimits
from optimize.api.kinds import kind_routers, register_kinds
from optimize.api.routers import (
    adapters,
    admin,
    base_models,
    bundles,
    chat,
    datasets,
    fine_tuning,
    health,
    images,
    info,
    internal,
    metrics,
    models,
    namespaces,
    projects,
    sessions,
    status,
    tokens,
    uploads,
)
from optimize.api.text_guard import TextGuard
from optimize.auth.tokens import ensure_admin_token
from optimize.blobs import open_blob_store
from optimize.catalog.additions import load_additions
from optimize.catalog.catalog import load_catalog
from optimize.core import user_code
from optimize.core.environment import setting
from optimize.core.settings import ServerSettings
from optimize.dashboard import routes as dashboard_routes
from optimize.deployment import Deployment
from optimize.jobs import registry as job_kinds
from optimize.jobs.devices import inventory
from optimize.jobs.kinds import Recovery
from optimize.jobs.local_executor import LocalExecutor
from optimize.jobs.recovery import recover_at_start, worker_lost
from optimize.jobs.scheduler import Scheduler
from optimize.registry.collection import Collector
from optimize.registry.uploads import Registry
from optimize.store.db import Store
from optimize.store.migrate import upgrade


def create_app(settings: ServerSettings) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    blobs = open_blob_store(settings.resolved_blob_store, settings.data_dir)  # a bucket that does not answer: no start
    blobs.clear_staging()
    url = settings.resolved_database_url
    upgrade(url)
    register_kinds()  # before anything asks the kernel about a kind
    app = FastAPI(title="Optimize", version=__version__, redirect_slashes=False, docs_url=None, redoc_url=None)
    app.state.settings = settings
    store = Store(url)
    catalog = load_catalog(settings.catalog_path)
    load_additions(store, catalog)  # the models `base-models add` put in this deployment's catalog
    app.state.registry = Registry(store, blobs, settings.limits, settings.quotas)
    app.state.deployment = Deployment(store, catalog, inventory(catalog.document.devices, settings.detect_gpus),
                                    settings.data_dir, blobs, lease_seconds=settings.lease_seconds,
                                    analysis_wait_seconds=settings.analysis_wait_seconds,
                                    endpoint_idle_seconds=settings.endpoint_idle_seconds, quotas=settings.quotas,
                                    dataset_limits=settings.limits)
    problems.install(app)
    docs_page.install(app)
    # the operator's first credential: issued at the first start, shown once by `server start`
    app.state.new_admin_token = ensure_admin_token(store, settings.data_dir)
    # outermost last: the gate (who), then the body's size, then its text
    app.add_middleware(TextGuard)
    app.add_middleware(BodyLimits)
    app.add_middleware(TokenGate, store=store)
    shared = [module.router for module in (health, info, tokens, admin, namespaces, datasets, models, adapters,
                                           uploads, images, bundles, base_models, projects, sessions, status)]
    # each job kind's routes come from this server's table of kinds; the internal family serves every kind's workers
    for router in (*shared, *kind_routers(), chat.router, fine_tuning.router, metrics.router, internal.router,
                   dashboard_routes.router):
        app.include_router(router)
    return app


def start_jobs(app: FastAPI, server_url: str) -> None:
    """Once the server's own URL is known (workers call it back): the executor that starts worker processes, the
    recovery of the leases an earlier server process left open, and the scheduler that grants waiting jobs."""
    deployment = app.state.deployment

    def worker_exited(kind: str, job_id: str, token: str, reason: str) -> None:
        if deployment.executor.stopping and job_kinds.kind(kind).on_restart is not Recovery.FAIL:
            return  # stopped with the server: the next server process recovers it
        worker_lost(deployment, kind, job_id, token, reason)

    settings = app.state.settings
    if settings.executor == "ray":
        from optimize.jobs.ray_executor import RayExecutor

        deployment.executor = RayExecutor(server_url, deployment.data_dir, worker_exited, settings.ray_address)
    else:
        deployment.executor = LocalExecutor(server_url, deployment.data_dir, on_exit=worker_exited)
    deployment.refresh_inventory()
    recover_at_start(deployment)
    deployment.scheduler = Scheduler(deployment)
    deployment.scheduler.start()
    app.state.collector = Collector(app.state.registry, setting("OPTIMIZE_GC_SECONDS"))
    app.state.collector.start()
    app.state.mlflow = None
    if settings.resolved_mlflow:  # every run's metrics forwarded to MLflow, on a thread training never waits on
        from optimize.trackers.mlflow_forwarder import MlflowForwarder

        app.state.mlflow = MlflowForwarder(deployment.store, settings.resolved_mlflow)
        app.state.mlflow.start()
    app.state.wandb = None
    if settings.resolved_wandb:  # and to W&B, on a thread of its own (wandb is imported there)
        from optimize.trackers.wandb_forwarder import WandbForwarder

        app.state.wandb = WandbForwarder(deployment.store, settings.resolved_wandb, settings.resolved_wandb_dir)
        app.state.wandb.start()


def stop_jobs(app: FastAPI) -> None:
    """The server stops: workers whose jobs outlive it (a kind that reattaches) go on; the others are stopped,
    and the next server process recovers them as their kinds declare."""
    deployment = app.state.deployment
    user_code.shutdown()  # checks still waiting are dropped; no user code starts while the rest stops
    app.state.collector.stop()
    if getattr(app.state, "mlflow", None) is not None:
        app.state.mlflow.stop()
    if getattr(app.state, "wandb", None) is not None:
        app.state.wandb.stop()  # its open runs finished, W&B's service process stopped
    deployment.scheduler.stop()
    deployment.executor.shutdown(keep={k.name for k in job_kinds.kinds() if k.on_restart is Recovery.REATTACH})
