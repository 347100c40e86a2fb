"""Models, the registry noun `nouns.MODELS` on the one base (`registry/artifacts.py`): registering versions (base
models on selection, trained models from runs), resolving references, reading and listing versions (filtered by
base model and producer). A model's files are `registry/model_files.py`.

A version's digest covers what a serving process loads (variant and descriptor), never when or by what it was
registered, so registering the same thing twice returns the version it already is.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.errors import Invalid
from optimize.core.names import check_name
from optimize.core.refs import Reference, parse_reference
from optimize.registry import aliases, artifact_views, artifacts
from optimize.registry.nouns import MODELS
from optimize.registry.views import standing_scores
from optimize.schemas import registry as answers
from optimize.store.db import Store
from optimize.store.tables import Model, ModelVersion

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
) -> artifacts.Registered:
    """Append a version to NS/NAME, or find the version holding the same digest (`created` says which); creates
    what is missing."""
    namespace, name = artifacts.checked_names(MODELS, namespace, name)
    if variant not in VARIANTS:
        raise Invalid(f"model variant {variant!r} is not one of {', '.join(VARIANTS)}")
    return artifacts.append_version(
        session, MODELS, namespace, name, model_digest(variant, descriptor),
        {"variant": variant, "descriptor": descriptor, "lineage": lineage, "produced_by_kind": produced_by_kind,
         "produced_by_id": produced_by_id},
        check_archived=check_archived)


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
                            produced_by_kind="selection", produced_by_id=entry_id, check_archived=False).version


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
    return artifacts.find(session, MODELS, namespace, name)


def _get_model(session: Session, namespace: str, name: str) -> Model:
    return artifacts.get(session, MODELS, namespace, name)


def _resolve_version(session: Session, model: Model, selector: str) -> ModelVersion:
    """The version a selector names: `latest`, `vN`, `sha256:HEX` or an alias."""
    return artifacts.resolve_version(session, MODELS, model, selector)


def resolve_model_reference(session: Session, reference: Reference | str) -> tuple[Model, ModelVersion]:
    """The model and version a reference names; `NS/NAME` and `:latest` name the newest version."""
    return artifacts.resolve_reference(session, MODELS, reference)


def _standing_score(session: Session, _model: Model, version: ModelVersion) -> dict[str, Any]:
    """What a version's get adds: its score from its project's standing evaluation."""
    return {"standingScore": standing_scores(session, [version.id]).get(version.id)}


def _scored(session: Session, model: Model, versions: list[ModelVersion]) -> list[answers.ModelVersion]:
    """The views of `versions`, each with its standing score (null when it has none)."""
    scores = standing_scores(session, [item.id for item in versions])
    return [view.extended(standing_score=scores.get(item.id))
            for item, view in zip(versions, artifact_views.version_list(session, MODELS, model, versions), strict=True)]


def get_model(store: Store, namespace: str, name: str, selector: str) -> answers.ModelVersionDetail:
    """A version with its model's version count and its standing score."""
    return artifact_views.read_version(store, MODELS, namespace, name, selector, _standing_score)


def read_model(store: Store, namespace: str, name: str) -> answers.ModelDetail:
    """The newest version, every version (each with its standing score), and every move of the model's aliases."""
    with store.transaction() as session:
        model = _get_model(session, namespace, name)
        newest = artifact_views.detail(session, MODELS, model, _resolve_version(session, model, "latest"),
                                       _standing_score)
        return newest.extended(answers.ModelDetail,
                               versions=_scored(session, model, artifacts.newest_first(session, MODELS, model)),
                               alias_moves=aliases.alias_moves(session, MODELS, model))




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
) -> list[answers.ModelVersion]:
    """Versions newest first, optionally only those over a base model and/or by one producer."""
    if (produced_by_kind is None) != (produced_by_id is None):
        raise Invalid(
            "filter by producer with both a kind and an id, or neither",
            hint="give --produced-by-kind and --produced-by-id together (e.g. run and the run's id)",
        )
    with store.transaction() as session:
        model = _get_model(session, namespace, name)
        producer = () if produced_by_kind is None else (ModelVersion.produced_by_kind == produced_by_kind,
                                                         ModelVersion.produced_by_id == produced_by_id)
        versions = artifacts.newest_first(session, MODELS, model, *producer)
        if base_model is not None:
            matches = _base_model_matcher(session, base_model)
            versions = [item for item in versions if matches(item.lineage)]
        return _scored(session, model, versions)


def list_models(store: Store, namespace: str | None, include_archived: bool) -> list[answers.ModelSummary]:
    """Models with their newest version; archived namespaces only with `include_archived` or by name."""
    return artifact_views.list_artifacts(store, MODELS, namespace, include_archived)
