"""Models: registering versions (base models on selection, trained models from runs), resolving references,
reading and listing versions.

A version's digest covers what a serving process loads (variant and descriptor), never when or by what it was
registered, so registering the same thing twice returns the version it already is.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound
from optimize.core.names import check_name
from optimize.core.refs import Reference, parse_reference, parse_selector
from optimize.registry.namespaces import ensure_exists, ensure_open, is_archived
from optimize.store.db import Store, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Model, ModelVersion, Namespace

VARIANTS = ("BASE", "ADAPTER", "WEIGHTS")


def model_digest(variant: str, descriptor: dict[str, Any]) -> str:
    """`sha256:` over the canonical JSON of what a serving process loads."""
    canonical = json.dumps({"variant": variant, "descriptor": descriptor}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def register_version(
    session: Session,
    namespace: str,
    name: str,
    *,
    variant: str,
    descriptor: dict[str, Any],
    lineage: dict[str, Any],
    produced_by_kind: str | None = None,
    produced_by_id: str | None = None,
    check_archived: bool = True,
) -> ModelVersion:
    """Append a version to NS/NAME, or return the version holding the same digest; creates what is missing."""
    namespace, name = check_name(namespace, "namespace"), check_name(name, "model name")
    if variant not in VARIANTS:
        raise Invalid(f"model variant {variant!r} is not one of {', '.join(VARIANTS)}")
    now = utcnow()
    (ensure_open if check_archived else ensure_exists)(session, namespace)
    insert_ignoring_conflict(session, Model, {"namespace": namespace, "name": name, "created_at": now},
                             ["namespace", "name"])
    # Lock the model row (PostgreSQL; SQLite serializes writers) so numbers are taken one registration at a
    # time; the unique constraints remain the guarantee.
    model = session.scalar(
        select(Model).where(Model.namespace == namespace, Model.name == name).with_for_update()
    )
    digest = model_digest(variant, descriptor)
    existing = session.scalar(
        select(ModelVersion).where(ModelVersion.model_id == model.id, ModelVersion.digest == digest)
    )
    if existing is not None:
        return existing
    number = (session.scalar(
        select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model.id)
    ) or 0) + 1
    version = ModelVersion(
        model_id=model.id, version=number, digest=digest, variant=variant, descriptor=descriptor, lineage=lineage,
        produced_by_kind=produced_by_kind, produced_by_id=produced_by_id, created_at=now,
    )
    session.add(version)
    session.flush()
    record(session, f"model:{namespace}/{name}", "registered", version=number, digest=digest)
    return version


def _base_location(repository: str) -> tuple[str, str]:
    """`Qwen/Qwen3-0.6B` → (`qwen`, `qwen3-0.6b`): where a base model is registered."""
    owner, separator, name = repository.partition("/")
    if not separator:
        raise Invalid(f"base model repository {repository!r} is not of the form OWNER/NAME")
    return check_name(owner, "repository owner"), check_name(name, "repository name")


def register_base_model(session: Session, repository: str, commit: str, entry_id: str) -> ModelVersion:
    """Register a selected base model as a BASE version under its lowercased repository (same commit, same version)."""
    namespace, name = _base_location(repository)
    descriptor = {"variant": "BASE", "repository": repository, "revision": commit, "catalogEntry": entry_id}
    return register_version(session, namespace, name, variant="BASE", descriptor=descriptor, lineage={},
                            produced_by_kind="selection", produced_by_id=entry_id, check_archived=False)


def base_model_reference(session: Session, repository: str, commit: str) -> str | None:
    """`ns/name:vN` of the BASE version registered for `repository` at `commit`, if any."""
    namespace, name = _base_location(repository)
    model = find_model(session, namespace, name)
    if model is None:
        return None
    versions = session.scalars(
        select(ModelVersion)
        .where(ModelVersion.model_id == model.id, ModelVersion.variant == "BASE")
        .order_by(ModelVersion.version.desc())
    )
    for version in versions:
        if version.descriptor.get("revision") == commit:
            return f"{namespace}/{name}:v{version.version}"
    return None


def find_model(session: Session, namespace: str, name: str) -> Model | None:
    return session.scalar(select(Model).where(Model.namespace == namespace, Model.name == name))


def _get_model(session: Session, namespace: str, name: str) -> Model:
    namespace, name = check_name(namespace, "namespace"), check_name(name, "model name")
    check_namespace(namespace)
    model = find_model(session, namespace, name)
    if model is None:
        raise NotFound(
            f"model {namespace}/{name} does not exist",
            hint="a model is registered by selecting a base model (akka training base-models select) "
                 "or by a completed training run",
        )
    return model


def _resolve_version(session: Session, model: Model, selector: str) -> ModelVersion:
    """The version a selector names: `latest`, `vN` or `sha256:HEX` (models have no movable aliases yet)."""
    label = f"{model.namespace}/{model.name}"
    query = select(ModelVersion).where(ModelVersion.model_id == model.id)
    if selector.lower() == "latest":
        found = session.scalar(query.order_by(ModelVersion.version.desc()).limit(1))
        what = "versions"
    else:
        number, alias, digest = parse_selector(selector)
        if number is not None:
            found = session.scalar(query.where(ModelVersion.version == number))
            what = f"version v{number}"
        elif digest is not None:
            found = session.scalar(query.where(ModelVersion.digest == digest))
            what = f"version with digest {digest}"
        else:
            found, what = None, f"alias {alias!r}"
    if found is None:
        raise NotFound(f"model {label} has no {what}",
                       hint=f"list its versions with: akka registry models versions {label}")
    return found


def resolve_model_reference(session: Session, reference: Reference | str) -> tuple[Model, ModelVersion]:
    """The model and version a reference names; `NS/NAME` and `:latest` name the newest version."""
    if isinstance(reference, str):
        reference = parse_reference(reference)
    model = _get_model(session, reference.namespace, reference.name)
    return model, _resolve_version(session, model, reference.selector)


def model_version_json(model: Model, version: ModelVersion, *, archived: bool, aliases: list[str]) -> dict[str, Any]:
    produced_by = None
    if version.produced_by_kind is not None:
        produced_by = {"kind": version.produced_by_kind, "id": version.produced_by_id}
    return {
        "reference": f"{model.namespace}/{model.name}:v{version.version}",
        "model": f"{model.namespace}/{model.name}",
        "namespace": model.namespace,
        "name": model.name,
        "version": version.version,
        "digest": version.digest,
        "variant": version.variant,
        "registeredAt": iso(version.created_at),
        "lifecycle": "active",
        "aliases": aliases,
        "archived": archived,
        "servingModel": version.descriptor,
        "lineage": version.lineage,
        "producedBy": produced_by,
    }


def _newest_id(session: Session, model: Model) -> int | None:
    return session.scalar(
        select(ModelVersion.id).where(ModelVersion.model_id == model.id).order_by(ModelVersion.version.desc()).limit(1)
    )


def describe_version(session: Session, model: Model, version: ModelVersion) -> dict[str, Any]:
    """A version's JSON, with `latest` among its aliases when it is the newest."""
    return model_version_json(model, version, archived=is_archived(session, model.namespace),
                              aliases=["latest"] if _newest_id(session, model) == version.id else [])


def _version_count(session: Session, model: Model) -> int:
    return session.scalar(select(func.count()).select_from(ModelVersion).where(ModelVersion.model_id == model.id))


def get_model(store: Store, namespace: str, name: str, selector: str) -> dict[str, Any]:
    with store.transaction() as session:
        model = _get_model(session, namespace, name)
        body = describe_version(session, model, _resolve_version(session, model, selector))
        body["versionCount"] = _version_count(session, model)
        return body


def _base_model_matcher(session: Session, base_model: str):
    """A test on a version's lineage: over any version of NS/NAME, or over exactly the version a reference names."""
    reference = parse_reference(base_model)
    if reference.version is None and reference.alias is None and reference.digest is None:
        wanted = _get_model(session, reference.namespace, reference.name)
        artifact = f"{wanted.namespace}/{wanted.name}"
        return lambda lineage: (bool(lineage.get("baseModel"))
                                and parse_reference(lineage["baseModel"]).artifact == artifact)
    base, version = resolve_model_reference(session, reference)
    exact = f"{base.namespace}/{base.name}:v{version.version}"
    return lambda lineage: lineage.get("baseModel") == exact


def list_versions(
    store: Store,
    namespace: str,
    name: str,
    base_model: str | None = None,
    produced_by_kind: str | None = None,
    produced_by_id: str | None = None,
) -> list[dict[str, Any]]:
    """Versions newest first, optionally only those over a base model and/or by one producer."""
    if (produced_by_kind is None) != (produced_by_id is None):
        raise Invalid(
            "filter by producer with both a kind and an id, or neither",
            hint="give --produced-by-kind and --produced-by-id together (e.g. run and the run's id)",
        )
    with store.transaction() as session:
        model = _get_model(session, namespace, name)
        query = select(ModelVersion).where(ModelVersion.model_id == model.id)
        if produced_by_kind is not None:
            query = query.where(ModelVersion.produced_by_kind == produced_by_kind,
                                ModelVersion.produced_by_id == produced_by_id)
        versions = list(session.scalars(query.order_by(ModelVersion.version.desc())))
        if base_model is not None:
            matches = _base_model_matcher(session, base_model)
            versions = [item for item in versions if matches(item.lineage)]
        archived = is_archived(session, model.namespace)
        newest = _newest_id(session, model)
        return [model_version_json(model, item, archived=archived,
                                   aliases=["latest"] if item.id == newest else []) for item in versions]


def list_models(store: Store, namespace: str | None, include_archived: bool) -> list[dict[str, Any]]:
    """Models with their newest version; archived namespaces only with `include_archived` or by name."""
    with store.transaction() as session:
        query = select(Model, Namespace).join(Namespace, Namespace.name == Model.namespace)
        if namespace is not None:
            query = query.where(Model.namespace == check_name(namespace, "namespace"))
            check_namespace(namespace)
        elif not include_archived:
            query = query.where(Namespace.archived.is_(False))
        query = only_visible(query, visible_namespaces(Model.namespace))
        items = []
        for model, space in session.execute(query.order_by(Model.namespace, Model.name)):
            latest = _resolve_version(session, model, "latest")
            items.append({
                "model": f"{model.namespace}/{model.name}",
                "namespace": model.namespace,
                "name": model.name,
                "versions": _version_count(session, model),
                "archived": space.archived,
                "latest": model_version_json(model, latest, archived=space.archived, aliases=["latest"]),
            })
        return items
