"""The registry's nouns, each a declaration on the one base (`registry/artifacts.py`): its tables, the words of its
refusals, its events, its digest rule and what its views add. A new noun is one more declaration here (with its
tables in `store/tables.py`, a migration, and its answers' schema, which its views are built by)."""

from __future__ import annotations

from optimize.registry.artifact_kind import AliasTables, ArtifactKind, DigestRule, ViewModels, Wording
from optimize.registry.views import bundle_fields, dataset_fields, model_fields
from optimize.schemas import bundles as bundle_answers
from optimize.schemas import registry as answers
from optimize.store.tables import (
    Bundle,
    BundleAlias,
    BundleAliasMove,
    BundleVersion,
    Dataset,
    DatasetAlias,
    DatasetAliasMove,
    DatasetVersion,
    Model,
    ModelAlias,
    ModelAliasMove,
    ModelVersion,
)


def _list_hint(plural: str):
    return lambda label: f"list its versions with: akka registry {plural} versions {label}"


# Chat conversations or preference pairs; versions are appended by an upload's commit (`registry/uploads.py`).
# `alias get` lowers the alias it is asked for without checking its name (an odd name is simply not found).
DATASETS = ArtifactKind(
    noun="dataset", plural="datasets", owner=Dataset, version=DatasetVersion, owner_column="dataset_id",
    wording=Wording(name="name", missing_hint=lambda label: f"register it with: akka registry datasets register "
                                                             f"{label} -f FILE",
                    alias_name=str.lower),
    answers=ViewModels(answers.DatasetVersion, answers.DatasetVersionDetail, answers.DatasetSummary),
    fields=dataset_fields, summary=lambda dataset: {"kind": dataset.kind}, lineage="lineage",
    aliases=AliasTables(DatasetAlias, DatasetAliasMove), stored_bytes="size_bytes",
)


def _bundle_register_hint(label: str) -> str:
    return f"register it with: akka registry bundles register {label} -f DIR_OR_ZIP"


# Scoring bundles: a version is its archive's bytes, kept as the blob its bare sha256 names.
BUNDLES = ArtifactKind(
    noun="bundle", plural="bundles", owner=Bundle, version=BundleVersion, owner_column="bundle_id",
    wording=Wording(name="bundle name", missing_hint=_bundle_register_hint, empty_hint=_bundle_register_hint,
                    no_alias_hint=lambda label, alias: f"point it at a version with: akka registry bundles alias set "
                                                       f"{label}:{alias} --version vN"),
    answers=ViewModels(bundle_answers.BundleVersion, bundle_answers.BundleVersionDetail, bundle_answers.BundleSummary,
                       bundle_answers.BundleAlias, bundle_answers.BundleAliasMoved),
    digest=DigestRule(column="sha256", bare_hex=True), fields=bundle_fields,
    aliases=AliasTables(BundleAlias, BundleAliasMove), stored_bytes="size_bytes",
)

# Models: a version is named by vN, sha256:HEX, latest or an alias users move (`candidate`, `champion`, …).
MODELS = ArtifactKind(
    noun="model", plural="models", owner=Model, version=ModelVersion, owner_column="model_id",
    wording=Wording(name="model name",
                    missing_hint=lambda _label: "a model is registered by selecting a base model (akka training "
                                                "base-models select) or by a completed training run",
                    empty_hint=_list_hint("models"),
                    no_alias_hint=lambda label, alias: f"point it at a version with: akka registry models alias set "
                                                       f"{label}:{alias} --version vN"),
    answers=ViewModels(answers.ModelVersion, answers.ModelVersionDetail, answers.ModelSummary, answers.ModelAlias,
                       answers.ModelAliasMoved),
    registered="registered", fields=model_fields, lineage="lineage",
    aliases=AliasTables(ModelAlias, ModelAliasMove),
)

NOUNS = (DATASETS, MODELS, BUNDLES)
