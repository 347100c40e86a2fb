"""The application factory: store migrated and opened, blob store ready, routers mounted."""

from __future__ import annotations

from fastapi import FastAPI

from optimize import __version__
from optimize.api import problems
from optimize.api.deps import Training
from optimize.api.routers import base_models, datasets, health, info, namespaces, uploads
from optimize.blobs.local import LocalBlobStore
from optimize.catalog.catalog import load_catalog
from optimize.core.settings import ServerSettings
from optimize.registry.uploads import Registry
from optimize.store.db import Store
from optimize.scheduler.devices import inventory
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
                                  settings.data_dir)
    problems.install(app)
    for module in (health, info, namespaces, datasets, uploads, base_models):
        app.include_router(module.router)
    return app
