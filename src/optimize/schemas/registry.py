"""The registry's requests and answers: `/v1/registry/info`, namespaces, datasets (versions, aliases) and models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer, Number
from optimize.schemas.conversions import Conversion
from optimize.schemas.quotas import QuotaSettings

# --- requests ----------------------------------------------------------------------------------------------


class Annotation(BaseModel):
    """`PATCH /v1/registry/namespaces/{ns}`: a namespace's new description."""

    model_config = ConfigDict(extra="forbid")
    description: str | None = Field(description="New description; an empty string clears it")


class AliasMove(BaseModel):
    """`PUT /v1/registry/datasets/{ns}/{name}/aliases/{alias}`: where the alias points."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(description="The version the alias points at: vN, another alias or sha256:HEX")


# --- info ---------------------------------------------------------------------------------------------------


class DatasetLimitsInfo(Answer):
    """Limits on dataset versions this deployment enforces, and the formats it accepts."""

    max_shard_bytes: int = Field(description="Largest shard accepted, bytes")
    max_shards: int = Field(description="Most shards one version holds")
    upload_expiry_seconds: int = Field(description="How long an upload session stays open, seconds")
    max_line_bytes: int = Field(description="Longest JSONL line accepted, bytes")
    formats: list[str] = Field(description="Dataset formats accepted, e.g. chat-jsonl-v1, preference-jsonl-v1")


class RegistryInfo(Answer):
    """The deployment's registry limits and formats."""

    version: str = Field(description="The server's Optimize version")
    datasets: DatasetLimitsInfo = Field(description="Dataset limits and formats")
    quotas: QuotaSettings = Field(description="Per-project quotas: open runs, queued work, upload sessions, stored "
                                              "bytes (each project's use: training capacity)")
    blobs: str | None = Field(default=None, description="Where blobs live: the server's blobs folder, or "
                                                        "s3://BUCKET/PREFIX; null unless the caller is an "
                                                        "administrator")


# --- namespaces ---------------------------------------------------------------------------------------------


class Namespace(Answer):
    """A registry namespace: created by the first registration into it."""

    name: str = Field(description="Namespace name")
    description: str | None = Field(description="Free text; null when none was set")
    archived: bool = Field(description="Whether it is archived (left out of lists; takes no new versions)")
    archived_at: str | None = Field(description="When it was archived (ISO 8601, UTC); null unless archived")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    datasets: int = Field(description="Datasets in the namespace")
    models: int = Field(description="Models in the namespace")
    bundles: int = Field(description="Scoring bundles in the namespace")


class NamespaceChange(Namespace):
    """A namespace after archive or unarchive."""

    changed: bool = Field(description="Whether this request changed it (false when it already was so)")


class NamespaceList(Answer):
    namespaces: list[Namespace] = Field(description="Namespaces by name (archived ones only with archived=true)")


# --- datasets -----------------------------------------------------------------------------------------------


class DatasetObject(Answer):
    """One shard of a dataset version, as stored."""

    path: str = Field(description="examples.jsonl, or examples-NNNNN.jsonl for sharded versions")
    digest: str = Field(description="sha256:HEX of the shard's bytes")
    size_bytes: int = Field(alias="bytes", description="Size of the shard in bytes")
    rows: int = Field(description="Rows in the shard")
    location: str | None = Field(description="Where the blob store holds it; null when not known, or unless the "
                                             "caller is an administrator")


class DatasetVersion(Answer):
    """One version of a dataset."""

    reference: str = Field(description="The version's reference: NS/NAME:vN")
    dataset: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the dataset")
    name: str = Field(description="Name of the dataset in its namespace")
    version: int = Field(description="Version number, from 1")
    digest: str = Field(description="sha256:HEX over the format and the ordered shard digests")
    format: str = Field(description="chat-jsonl-v1, preference-jsonl-v1 or prepared-tokens-v1")
    examples: int | None = Field(default=None, description="Conversations in the version (chat datasets), or rows "
                                                            "(prepared token rows)")
    pairs: int | None = Field(default=None, description="Preference pairs in the version (preference datasets only)")
    tool_rows: int = Field(description="Rows that offer tools or call them")
    shards: int = Field(description="Shards the version is cut into")
    size_bytes: int = Field(alias="bytes", description="Total size in bytes")
    aliases: list[str] = Field(description="Aliases pointing at this version (latest on the newest)")
    archived: bool = Field(description="Whether the dataset's namespace is archived")
    created_at: str = Field(description="When the version was registered (ISO 8601, UTC)")
    conversion: Conversion | None = Field(default=None, description="How a file of another format became this "
                                                                   "version; null when it was registered as it is")
    lineage: dict[str, Any] | None = Field(
        default=None,
        description="What produced the version when a job did: producedBy {kind, id} (e.g. a distillation), "
                    "teacher {reference, commit}, source {reference, digest}; null for an uploaded version")
    images: int = Field(default=0, description="Images its rows name (each kept under the sha256 of its bytes)")
    prepared: dict[str, Any] | None = Field(
        default=None, description="Prepared token rows: the descriptor (tokenizer {repository, revision}, "
                                  "chatTemplateSha256, files) and longestRow, the longest row in tokens; null "
                                  "otherwise")


class DatasetVersionDetail(DatasetVersion):
    """A dataset version with its shards."""

    objects: list[DatasetObject] = Field(description="The version's shards, in order")
    kind: str = Field(description="What the dataset holds: chat or preference")
    version_count: int = Field(description="Versions the dataset has")


class HeldImagesRequest(BaseModel):
    """`POST /v1/registry/images/held`."""

    sha256: list[str] = Field(description="Image digests (64 lowercase hex digits each), at most 10,000")


class HeldImages(Answer):
    """Which images the registry holds, of those asked about."""

    held: list[str] = Field(description="The digests it holds (not sent again)")
    missing: list[str] = Field(description="The digests it lacks, in the order asked")


class ImageReceived(Answer):
    sha256: str = Field(description="The image's digest: the sha256 of its bytes")
    size_bytes: int = Field(alias="bytes", description="Its size")
    format: str = Field(description="PNG, JPEG, WEBP or GIF")
    width: int = Field(description="Pixels across")
    height: int = Field(description="Pixels down")
    already_held: bool = Field(description="Whether the registry held it already (nothing was read)")


class CommittedVersion(DatasetVersion):
    """The version an upload registered, or the version the same content already was."""

    objects: list[DatasetObject] = Field(description="The version's shards, in order")
    created: bool = Field(description="Whether this commit created the version (false: the content was registered)")


class DatasetSummary(Answer):
    """A dataset with its newest version."""

    dataset: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the dataset")
    name: str = Field(description="Name of the dataset in its namespace")
    kind: str = Field(description="What the dataset holds: chat or preference")
    versions: int = Field(description="Versions the dataset has")
    archived: bool = Field(description="Whether its namespace is archived")
    latest: DatasetVersion = Field(description="The newest version")


class DatasetList(Answer):
    datasets: list[DatasetSummary] = Field(description="Datasets by namespace and name")


class DatasetRow(Answer):
    line: int = Field(description="The row's line in the version (1-based)")
    row: dict[str, Any] = Field(description="The row as stored")
    images: dict[str, str] = Field(default_factory=dict, description="Each image path the row names, with the "
                                                                     "sha256 it is kept under (GET "
                                                                     "/v1/registry/images/{sha256})")


class DatasetRows(Answer):
    """A page of a version's rows: `GET …/versions/{selector}/rows?offset=&limit=`."""

    reference: str = Field(description="NS/NAME:vN")
    rows: int = Field(description="Rows in the version")
    offset: int = Field(description="Rows skipped before the page")
    items: list[DatasetRow] = Field(description="The page's rows, in order")


class DatasetVersionList(Answer):
    versions: list[DatasetVersion] = Field(description="The dataset's versions, newest first")


class AliasHistoryItem(Answer):
    version: int = Field(description="The version the alias pointed at")
    since: str | None = Field(description="From when (ISO 8601, UTC)")
    by: str | None = Field(default=None, description="Who moved it there: the name of the token that asked; null for "
                                                     "latest (the registry's own) and moves made before names were "
                                                     "kept")


class DatasetAlias(Answer):
    """Where an alias points, and where it pointed before."""

    alias: str = Field(description="Alias name")
    managed: bool = Field(description="Whether the registry moves it itself (latest) rather than users")
    reference: str = Field(description="The version it points at now: NS/NAME:vN")
    version: int = Field(description="The version number it points at now")
    history: list[AliasHistoryItem] = Field(description="Every version it pointed at, oldest first")


class AliasMoved(DatasetAlias):
    """An alias after it was set."""

    moved: bool = Field(description="Whether this request moved it (false when it already pointed there)")


# --- models -------------------------------------------------------------------------------------------------


class ModelAlias(DatasetAlias):
    """Where a model's alias points (`candidate`, `champion`, …), where it pointed before, and who moved it."""


class ModelAliasMoved(ModelAlias):
    """A model's alias after it was set."""

    moved: bool = Field(description="Whether this request moved it (false when it already pointed there)")


class Producer(Answer):
    kind: str = Field(description="What produced the version, e.g. run or selection")
    id: str | None = Field(description="Its id, e.g. the run's id or the catalog entry's")


class StandingScore(Answer):
    """A model version's score from its project's standing evaluation: on the held-out dataset the project names,
    never on what it was trained on."""

    dataset: str = Field(description="The dataset evaluated on: the version the evaluation resolved (NS/NAME:vN), "
                                     "or the reference as the project holds it before one started")
    grader: str = Field(description="The grader")
    mean_score: Number | None = Field(description="The mean score; null until the evaluation completed")
    evaluation_id: str | None = Field(description="The evaluation; null while starting, or when it was refused")
    phase: str | None = Field(description="The evaluation's phase; null while starting, or when it was refused")
    refusal: str | None = Field(description="Why the server could not start it (tried again at most once a minute "
                                            "for a while); null otherwise")


class ModelVersion(Answer):
    """One version of a registered model."""

    reference: str = Field(description="The version's reference: NS/NAME:vN")
    model: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the model (a training project's models are in its namespace)")
    name: str = Field(description="Name of the model in its namespace")
    version: int = Field(description="Version number, from 1")
    digest: str = Field(description="sha256:HEX over what a serving process loads (variant and descriptor)")
    variant: str = Field(description="BASE, ADAPTER or WEIGHTS")
    registered_at: str = Field(description="When the version was registered (ISO 8601, UTC)")
    lifecycle: str = Field(description="The version's lifecycle state, e.g. active")
    aliases: list[str] = Field(description="Aliases pointing at this version (latest on the newest)")
    archived: bool = Field(description="Whether the model's namespace is archived")
    serving_model: dict[str, Any] = Field(description="What a serving process loads: the variant's descriptor "
                                                      "(repository and revision, or the adapter's artifact and base)")
    lineage: dict[str, Any] = Field(description="Where it came from: base model, datasets, producing run")
    produced_by: Producer | None = Field(description="What produced it; null when not recorded")
    standing_score: StandingScore | None = Field(
        default=None, description="Its score from its project's standing evaluation (a held-out dataset); null when "
                                  "it has none (not in a project holding one, or registered before it was set)")


class ModelVersionDetail(ModelVersion):
    """A model version with how many versions its model has."""

    version_count: int = Field(description="Versions the model has")


class AliasMoveRecord(Answer):
    """One move of an alias: which, from and to which version, by whom, when."""

    alias: str = Field(description="The alias moved")
    from_: int | None = Field(alias="from", description="The version it pointed at before; null: it was set for the "
                                                         "first time")
    to: int = Field(description="The version it points at since")
    by: str | None = Field(description="The name of the token that moved it; null for moves made before names were "
                                       "kept")
    at: str = Field(description="When (ISO 8601, UTC)")


class ModelDetail(ModelVersionDetail):
    """A model's newest version, with every version and every move of its aliases."""

    versions: list[ModelVersion] = Field(description="The model's versions, newest first")
    alias_moves: list[AliasMoveRecord] = Field(description="Every move of the model's aliases (candidate, champion, "
                                                           "…), oldest first; latest moves with each registration")


class ModelSummary(Answer):
    """A model with its newest version."""

    model: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the model")
    name: str = Field(description="Name of the model in its namespace")
    versions: int = Field(description="Versions the model has")
    archived: bool = Field(description="Whether its namespace is archived")
    latest: ModelVersion = Field(description="The newest version")


class ModelList(Answer):
    models: list[ModelSummary] = Field(description="Models by namespace and name")


class ModelVersionList(Answer):
    versions: list[ModelVersion] = Field(description="The model's versions (filtered as asked), newest first")
