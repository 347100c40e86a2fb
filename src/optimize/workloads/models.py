"""A model as the kinds of work name it: a base model of the catalog (selected on this deployment) or a registered
version (a BASE version, or an ADAPTER over its base), resolved to the block a job's spec carries; and the
instructions a trained model was trained under, the system message of the first training row of the run that
produced it (an endpoint's `send` uses them when no instructions are given, and a trained judge grades under
them)."""

from __future__ import annotations

import json
from typing import Any

from optimize.catalog.selection import selection_for
from optimize.chat.formats import DatasetFormat
from optimize.core.errors import Forbidden, Gone, Invalid, NotFound, Refused
from optimize.core.refs import parse_reference
from optimize.deployment import Deployment
from optimize.registry.datasets import examples_objects, version_format
from optimize.registry.models import find_model, resolve_model_reference
from optimize.store.tables import Run


def resolve_model(deployment: Deployment, session, text: str) -> tuple[str, dict[str, Any], str | None]:
    """(reference, model block, the project the model belongs to) for a base model or a registered version."""
    version = None
    try:
        reference = parse_reference(text)
        if find_model(session, reference.namespace, reference.name) is not None:
            model, version = resolve_model_reference(session, reference)
    except Invalid:
        pass
    except Forbidden:
        # a selected base model is also a registry model in its catalog's namespace, which a token limited to other
        # namespaces may not read; the base model itself is every project's to evaluate and serve
        if not _names_base_model(deployment, text):
            raise
    if version is not None and version.variant == "ADAPTER":
        d = version.descriptor
        entry = deployment.catalog.find(d["baseRepository"])
        return (f"{model.namespace}/{model.name}:v{version.version}",
                {"kind": "adapter", "baseEntryId": entry.id, "baseCommit": d["baseCommit"],
                 "manifestDigest": d["artifact"]["manifestDigest"], "weightsDigest": d.get("weightsDigest")},
                model.namespace)
    if version is not None and version.variant == "WEIGHTS":
        raise Refused(f"{model.namespace}/{model.name}:v{version.version} holds every weight of a full fine-tune of "
                      f"{version.descriptor.get('baseRepository')}, which this deployment's evaluations and "
                      "endpoints do not load; they load base models and LoRA adapters",
                      hint="evaluate or serve a base model or an adapter version (akka registry models list)")
    # a base model, also one allowed for serving only: it can be evaluated
    entry = deployment.catalog.find(version.descriptor["catalogEntry"] if version is not None else text.split(":")[0])
    selection = selection_for(deployment.store, entry.id)
    if selection is None:
        raise NotFound(f"base model {entry.id} is not selected on this deployment",
                       hint=f"select it first: akka training base-models select {entry.id}")
    return entry.id, {"kind": "base", "baseEntryId": entry.id, "baseCommit": selection.commit}, None


def _names_base_model(deployment: Deployment, text: str) -> bool:
    wanted = text.split(":")[0].strip().lower()
    return any(wanted in (entry.id.lower(), entry.repository.lower()) for entry in deployment.catalog.entries)


def trained_instructions(deployment: Deployment, session, reference: str) -> str | None:
    """None for a model no run produced, one trained on prepared token rows, or whose run's first row has no system
    message."""
    _, version = resolve_model_reference(session, reference)
    run = session.get(Run, version.produced_by_id) if version.produced_by_kind == "run" else None
    if run is None or version_format(session, run.dataset_digest) == DatasetFormat.PREPARED:
        return None  # prepared token rows hold no messages: a model trained on them has no instructions
    try:
        first = examples_objects(session, run.dataset_digest)[0]
        with deployment.blobs.verified_path(first["sha256"]).open("rb") as handle:
            messages = json.loads(handle.readline()).get("messages") or []
    except (IndexError, OSError, ValueError, AttributeError, NotFound, Gone):  # Gone: a corrupt copy
        return None
    head = messages[0] if messages and isinstance(messages[0], dict) else {}
    return head.get("content") if head.get("role") == "system" and isinstance(head.get("content"), str) else None
