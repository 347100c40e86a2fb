"""A trained model's instructions: the system message of the first training row of the run that produced it.

An endpoint's `send` uses them when no instructions are given, and a trained judge grades under them.
"""

from __future__ import annotations

import json

from optimize.core.errors import Gone, NotFound
from optimize.deployment import Deployment
from optimize.registry.datasets import examples_objects
from optimize.registry.models import resolve_model_reference
from optimize.store.tables import Run


def trained_instructions(deployment: Deployment, session, reference: str) -> str | None:
    """None for a model no run produced, or whose run's first row has no system message."""
    _, version = resolve_model_reference(session, reference)
    run = session.get(Run, version.produced_by_id) if version.produced_by_kind == "run" else None
    if run is None:
        return None
    try:
        first = examples_objects(session, run.dataset_digest)[0]
        with deployment.blobs.verified_path(first["sha256"]).open("rb") as handle:
            messages = json.loads(handle.readline()).get("messages") or []
    except (IndexError, OSError, ValueError, AttributeError, NotFound, Gone):  # Gone: a corrupt copy
        return None
    head = messages[0] if messages and isinstance(messages[0], dict) else {}
    return head.get("content") if head.get("role") == "system" and isinstance(head.get("content"), str) else None
