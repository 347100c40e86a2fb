"""The project OpenAI's fine-tuning routes work in: the one an `OpenAI-Project` header names (it must exist), else
the deployment's own (`OPTIMIZE_FINE_TUNING_PROJECT`), created by the first upload it registers. Its name is also the
registry namespace its files are registered in and its fine-tuned models are registered under."""

from __future__ import annotations

from optimize.core.environment import setting
from optimize.deployment import Deployment
from optimize.projects.service import create_project, find_project


def project_named(deployment: Deployment, header: str | None) -> str:
    """The project's name: a named one must exist; the deployment's own may not yet (nothing is in it then)."""
    if header:
        with deployment.store.transaction() as session:
            return find_project(session, header.strip()).name
    return setting("OPTIMIZE_FINE_TUNING_PROJECT").lower()


def ensure_project(deployment: Deployment, name: str) -> None:
    """The project, created where it does not exist yet (the deployment's own, before its first file)."""
    create_project(deployment.store, name, "OpenAI's fine-tuning routes")
