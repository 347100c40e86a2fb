"""An endpoint that serves a model by an alias (`NS/NAME:champion`) follows the alias when it moves: the version the
alias points at now is attached beside the one it served (`follows` moves to it, and the old entry says what
replaces it), requests for the alias keep going to the old version until its worker has loaded the new one, and
then the old one is detached — requests in flight on it finish, since a worker answers what it has begun. `latest`
and exact versions are served as they resolved: only an alias users move is followed.

The scheduler's housekeeping looks for moved aliases at every tick (`follow_moves`); a worker's heartbeat that
reports the new version loaded retires the old one (`retire_replaced`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound
from optimize.core.refs import parse_reference
from optimize.registry.models import resolve_model_reference
from optimize.serving.load import MAX_ADAPTERS
from optimize.serving.phases import ACTIVE, ENDPOINT
from optimize.store.events import record
from optimize.store.tables import Endpoint
from optimize.workloads.models import resolve_model, trained_instructions


def followed_alias(text: str) -> str | None:
    """The alias a model reference follows: one users move (not `latest`, not a version or digest), else None."""
    try:
        reference = parse_reference(text)
    except Invalid:
        return None
    return reference.alias if reference.alias and reference.alias != "latest" else None


def adapter_entry(deployment: Any, session: Any, reference: str, model: dict[str, Any], follows: str | None
                  ) -> dict[str, Any]:
    """An adapter as an endpoint keeps it: the exact version, its files, its trained instructions, and the alias it
    follows when it was asked for by one."""
    entry = {"name": reference, "manifestDigest": model["manifestDigest"], "weightsDigest": model.get("weightsDigest"),
             "instructions": trained_instructions(deployment, session, reference), "at": iso(utcnow()),
             "loaded": False}
    return {**entry, "follows": follows} if follows else entry


def follow_moves(deployment: Any) -> list[str]:
    """Attach the version each followed alias points at now to the endpoints that follow it; returns the ids of the
    endpoints that changed."""
    changed = []
    with deployment.store.transaction() as session:
        open_endpoints = session.scalars(select(Endpoint).where(
            Endpoint.phase.in_(ENDPOINT.values(ACTIVE)))).all()
        for endpoint in open_endpoints:
            if any(a.get("follows") for a in endpoint.adapters) and _follow(deployment, session, endpoint):
                changed.append(endpoint.id)
    return changed


def _follow(deployment: Any, session: Any, endpoint: Endpoint) -> bool:
    adapters, moved = list(endpoint.adapters), False
    for index, entry in enumerate(list(adapters)):
        alias = entry.get("follows")
        if not alias:
            continue
        artifact = entry["name"].rsplit(":", 1)[0]
        try:
            model, version = resolve_model_reference(session, f"{artifact}:{alias}")
        except (Invalid, NotFound):
            continue  # the alias is gone or names nothing now: keep serving what it named
        current = f"{model.namespace}/{model.name}:v{version.version}"
        if current == entry["name"]:
            continue
        held = next((a for a in adapters if a["name"] == current), None)
        if held is None:
            if len(adapters) >= MAX_ADAPTERS:
                continue  # no room beside it: it keeps the old version until one is detached
            reference, resolved, _owner = resolve_model(deployment, session, current)
            if resolved.get("kind") != "adapter" or resolved["baseCommit"] != endpoint.base["baseCommit"]:
                continue  # the alias moved to a model this endpoint's base cannot serve
            adapters.append(adapter_entry(deployment, session, reference, resolved, alias))
        else:
            adapters[adapters.index(held)] = {**held, "follows": alias}
        adapters[index] = {**{k: v for k, v in entry.items() if k != "follows"}, "replacedBy": current}
        record(session, ENDPOINT.subject(endpoint.id), "alias-followed", alias=f"{artifact}:{alias}",
               fromModel=entry["name"], toModel=current)
        moved = True
    if moved:
        endpoint.adapters = adapters
    return moved


def retire_replaced(session: Any, endpoint: Endpoint) -> bool:
    """Detach each version an alias moved away from once its replacement is loaded; returns whether any was."""
    loaded = {a["name"] for a in endpoint.adapters if a.get("loaded")}
    kept = [a for a in endpoint.adapters if a.get("replacedBy") not in loaded]
    if len(kept) == len(endpoint.adapters):
        return False
    for gone in (a for a in endpoint.adapters if a not in kept):
        record(session, ENDPOINT.subject(endpoint.id), "detached", model=gone["name"],
               reason=f"replaced by {gone['replacedBy']}")
    endpoint.adapters = kept
    return True


def answering_for(endpoint: Endpoint, name: str) -> str:
    """The version that answers a request resolved to `name` on this endpoint: `name` itself once loaded, else the
    version it replaces while that one is still loaded (an alias moved; its new version is loading)."""
    entries = {a["name"]: a for a in endpoint.adapters}
    if name in entries and not entries[name].get("loaded"):
        previous = next((a["name"] for a in endpoint.adapters if a.get("replacedBy") == name and a.get("loaded")),
                        None)
        if previous is not None:
            return previous
    return name
