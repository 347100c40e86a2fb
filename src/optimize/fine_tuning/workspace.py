"""The project OpenAI's fine-tuning routes work in: the one an `OpenAI-Project` header names (it must exist), else
the deployment's own (`OPTIMIZE_FINE_TUNING_PROJECT`, created on the first upload or job). Its name is also the
registry namespace its files are registered in and its fine-tuned models are registered under."""

from __future__ import annotations

from optimize.core.environment import setting
from optimize.deployment import Deployment
from optimize.projects.service import create_project, find_project
from optimize.store.tables import Project


def project_for(deployment: Deployment, header: str | None, create: bool) -> str | None:
    """The project's name; with `create`, the default project is created when it does not exist yet, otherwise a
    default project that does not exist is None (nothing in it to read). A named project must exist."""
    if header:
        with deployment.store.transaction() as session:
            return find_project(session, header.strip()).name
    name = setting("OPTIMIZE_FINE_TUNING_PROJECT")
    if create:
        return create_project(deployment.store, name, "OpenAI's fine-tuning routes")[0].name
    with deployment.store.transaction() as session:
        return name.lower() if session.get(Project, name.lower()) is not None else None
