"""The application factory: store migrated and opened, blob store ready, routers mounted."""

from __future__ import annotations

from fastapi import FastAPI

from optimize import __version__
from optimize.api import problems
from optimize.deployment import Training
from optimize.api.routers import (analyses, base_models, branches, chat, datasets, endpoints as endpoint_routes,
                                  evaluations as evaluation_routes, health, info, internal, models, namespaces,
                                  projects, runs, snapshots, uploads)
from optimize.analysis.service import fail_if_unfinished, fail_orphans
from optimize.evaluation import service as evaluations
from optimize.serving import endpoints
from optimize.blobs.local import LocalBlobStore
from optimize.catalog.catalog import load_catalog
from optimize.core.settings import ServerSettings
from optimize.registry.uploads import Registry
from optimize.store.db import Store
from optimize.scheduler.devices import inventory
from optimize.scheduler.local import LocalLauncher
from optimize.scheduler.loop import Scheduler
from optimize.training.attempts import lose_attempt
from optimize.store.migrate import upgrade


def create_app(settings: ServerSettings) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    app = FastAPI(title="Optimize", version=__version__, redirect_slashes=False)
    app.state.settings = settings
    blobs = LocalBlobStore(settings.blob_dir)
    blobs.clear_staging()
    store = Store(url)
    catalog = load_catalog(settings.catalog_path)
    app.state.registry = Registry(store, blobs, settings.limits)
    app.state.training = Training(store, catalog, inventory(catalog.document.devices, settings.detect_gpus),
                                  settings.data_dir, blobs, lease_seconds=settings.lease_seconds,
                                  analysis_wait_seconds=settings.analysis_wait_seconds,
                                  endpoint_idle_seconds=settings.endpoint_idle_seconds)
    fail_orphans(app.state.training)
    endpoints.restart(app.state.training)
    evaluations.requeue_after_restart(app.state.training)
    problems.install(app)
    for module in (health, info, namespaces, datasets, models, uploads, base_models, analyses, projects, runs,
                   branches, snapshots, evaluation_routes, endpoint_routes, chat, internal):
        app.include_router(module.router)
    return app


def attach_launcher(app: FastAPI, server_url: str) -> None:
    """Give the app a launcher for worker processes once its own URL is known (workers call it back), and start
    the scheduler that launches them."""
    training = app.state.training

    def worker_exited(kind: str, job_id: str, token: str, reason: str) -> None:
        if kind == "analysis":
            fail_if_unfinished(training, job_id, token, reason)
        elif kind == "evaluation":
            if training.launcher.stopping:
                return  # stopped with the server: the next one queues it again (evaluations.requeue_after_restart)
            evaluations.lose(training, job_id, token, reason)
            training.scheduler.wake()
        elif kind == "endpoint":
            if training.launcher.stopping:
                return  # stopped with the server: it starts again with the next one (endpoints.restart)
            endpoints.lose(training, job_id, token, reason)
            training.scheduler.wake()
        else:
            lose_attempt(training, job_id, token, reason)
            training.scheduler.wake()  # its devices may be free now

    training.launcher = LocalLauncher(server_url, training.data_dir / "logs", on_exit=worker_exited)
    training.scheduler = Scheduler(training)
    training.scheduler.start()
