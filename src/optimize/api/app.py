"""The application factory: store migrated and opened, blob store ready, routers mounted."""

from __future__ import annotations

from fastapi import FastAPI

from optimize import __version__
from optimize.api import problems
from optimize.api.routers import datasets, health, info, namespaces, uploads
from optimize.blobs.local import LocalBlobStore
from optimize.core.settings import ServerSettings
from optimize.registry.uploads import Registry
from optimize.store.db import Store
from optimize.store.migrate import upgrade


def create_app(settings: ServerSettings) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    app = FastAPI(title="Optimize", version=__version__, redirect_slashes=False)
    app.state.settings = settings
    blobs = LocalBlobStore(settings.blob_dir)
    blobs.clear_staging()
    app.state.registry = Registry(Store(url), blobs, settings.limits)
    problems.install(app)
    for module in (health, info, namespaces, datasets, uploads):
        app.include_router(module.router)
    return app
