"""Scoring bundles in the registry: `/v1/registry/bundles` (list, versions, a version, aliases, registering) and
the archive route that takes a version's ZIP bytes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from optimize.schemas.common import Answer, Number
from optimize.schemas.registry import DatasetAlias

# --- requests ----------------------------------------------------------------------------------------------------


class BundleRegister(BaseModel):
    """`POST /v1/registry/bundles/{ns}/{name}/versions`: register an archive the registry holds as a version."""

    model_config = ConfigDict(extra="forbid")
    digest: str = Field(description="The archive's digest, sha256:HEX of its bytes (sent first with PUT "
                                    "…/archives/{sha256} unless the registry holds them)")
    alias: str | None = Field(default=None, description="Alias to point at the version")


class BundleCheckRequest(BaseModel):
    """`POST /v1/registry/bundles/{ns}/{name}/check`: check a bundle version's function against a dataset version."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel)
    selector: str | None = Field(default=None, max_length=200,
                                 description="The bundle's version: vN, an alias, latest or sha256:HEX (default: "
                                             "latest)")
    dataset: str = Field(max_length=300, description="The chat dataset to check on: NS/NAME[:vN|:ALIAS|@sha256:HEX]")
    function: str | None = Field(default=None, max_length=300,
                                 description="MODULE[:FUNCTION] to check (FUNCTION by default compute_score); default: "
                                             "reward:compute_score, or the compute_score of a bundle's only module")
    samples: int = Field(default=64, ge=1, le=1000, description="How many of the dataset's first rows to score")
    model: str | None = Field(default=None, max_length=300,
                              description="A model whose sampled answers to the same rows are scored too: a base "
                                          "model or a registered model NS/NAME[:vN]; starts a sampling evaluation")
    project: str | None = Field(default=None, max_length=200,
                                description="With model: the project the sampling evaluation counts for (needed for a "
                                            "base model; a registered model's own by default)")
    generations: int = Field(default=4, ge=2, le=16, description="With model: answers sampled per prompt (a group)")
    temperature: float = Field(default=0.7, gt=0, le=2, description="With model: their sampling temperature")
    max_new_tokens: int = Field(default=128, ge=1, le=32768,
                                description="With model: most tokens per sampled answer (a reinforcement run's "
                                            "maxCompletionLength)")
    time_limit_seconds: float = Field(default=10.0, gt=0, le=60,
                                      description="Seconds each row's scoring may take (as a reward term's "
                                                  "timeLimitSeconds)")


# --- answers -----------------------------------------------------------------------------------------------------


class BundleMember(Answer):
    path: str = Field(description="The member's path in the archive; a directory's ends with /")
    size_bytes: int = Field(alias="bytes", description="Its size once unpacked, bytes (0 for a directory)")


class BundleVersion(Answer):
    """One version of a bundle: an immutable ZIP archive."""

    reference: str = Field(description="The version's reference: NS/NAME:vN")
    bundle: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the bundle")
    name: str = Field(description="Name of the bundle in its namespace")
    version: int = Field(description="Version number, from 1")
    digest: str = Field(description="sha256:HEX of the archive's bytes, kept exactly as registered")
    size_bytes: int = Field(alias="bytes", description="Size of the archive, bytes")
    uncompressed_bytes: int = Field(description="Size of its members once unpacked, bytes")
    files: int = Field(description="Files in the archive")
    directories: int = Field(description="Directory entries in the archive (empty directories)")
    modules: list[str] = Field(description="The Python modules (.py files) it holds, by path")
    aliases: list[str] = Field(description="Aliases pointing at this version (latest on the newest)")
    archived: bool = Field(description="Whether the bundle's namespace is archived")
    created_at: str = Field(description="When the version was registered (ISO 8601, UTC)")


class BundleVersionDetail(BundleVersion):
    """A bundle version with its members."""

    version_count: int = Field(description="Versions the bundle has")
    location: str | None = Field(description="Where the blob store keeps the archive; null unless the caller is an "
                                             "administrator")
    members: list[BundleMember] = Field(description="The archive's members, in its order")


class RegisteredBundle(BundleVersionDetail):
    """The version a registration appended, or the version the same bytes already were."""

    created: bool = Field(description="Whether this request created the version (false: the bytes were registered)")


class BundleSummary(Answer):
    """A bundle with its newest version."""

    bundle: str = Field(description="NS/NAME")
    namespace: str = Field(description="Namespace of the bundle")
    name: str = Field(description="Name of the bundle in its namespace")
    versions: int = Field(description="Versions the bundle has")
    archived: bool = Field(description="Whether its namespace is archived")
    latest: BundleVersion = Field(description="The newest version")


class BundleList(Answer):
    bundles: list[BundleSummary] = Field(description="Bundles by namespace and name")


class BundleVersionList(Answer):
    versions: list[BundleVersion] = Field(description="The bundle's versions, newest first")


class BundleAlias(DatasetAlias):
    """Where a bundle's alias points, and where it pointed before."""


class BundleAliasMoved(BundleAlias):
    """A bundle's alias after it was set."""

    moved: bool = Field(description="Whether this request moved it (false when it already pointed there)")


class BundleArchive(Answer):
    """Whether the registry holds an archive's bytes (a version holds them), so registering it sends none."""

    digest: str = Field(description="sha256:HEX of the archive's bytes")
    held: bool = Field(description="Whether the registry holds them")
    size_bytes: int | None = Field(alias="bytes", description="Size of the archive, bytes; null when not held")
    already_held: bool | None = Field(default=None, description="On a PUT: whether they were held before it, so "
                                                                "its body was not read")
    files: int | None = Field(default=None, description="On a PUT that stored them: files in the archive")
    modules: list[str] | None = Field(default=None, description="On a PUT that stored them: its Python modules")


class BundleCheckError(Answer):
    line: int = Field(description="The row's line in the dataset version (1-based)")
    error: str = Field(description="What the function raised or returned instead of a number")


class BundleCheckErrors(Answer):
    count: int = Field(description="Rows whose scoring failed (raised, returned a non-number, hit a limit)")
    first: list[BundleCheckError] = Field(description="The first of them (at most 3), with their lines")


class BundleCheckSampling(Answer):
    evaluation_id: str = Field(description="The sampling evaluation: GET /v1/training/evaluations/{id}")
    model: str = Field(description="The model sampled, as resolved")
    generations: int = Field(description="Answers sampled per prompt")
    temperature: Number = Field(description="Their temperature")
    rows: int = Field(description="The first rows asked")


class BundleCheck(Answer):
    """A bundle's function checked against a dataset version: imported, the fields it declares found in every row,
    and each of the first rows' own final answer scored."""

    bundle: str = Field(description="The bundle version checked: NS/NAME:vN")
    digest: str = Field(description="sha256:HEX of its archive")
    function: str = Field(description="MODULE:FUNCTION checked")
    dataset: str = Field(description="The dataset version checked on: NS/NAME:vN")
    dataset_rows: int = Field(description="Rows the dataset version holds")
    fields: list[str] | None = Field(description="The row fields the module declares it reads (its FIELDS); null "
                                                 "when it declares none")
    field_rows_checked: int | None = Field(description="Rows read for the declared fields (all of them unless the "
                                                       "check's time bound ran out); null when none are declared")
    samples: int = Field(description="Rows asked to be scored (the first ones)")
    rows: int = Field(description="Rows read for scoring: scored + unscored + errors + withoutAnswer + notReached")
    scored: int = Field(description="Rows the function gave a number")
    unscored: int = Field(description="Rows the function returned None for (it does not apply)")
    without_answer: int = Field(description="Rows without a final assistant answer: nothing to score without a model")
    not_reached: int = Field(description="Rows left when scoring stopped (the check's time bound, or the scoring "
                                         "process lost on several rows in a row)")
    errors: BundleCheckErrors = Field(description="Rows whose scoring failed")
    mean: Number | None = Field(description="Mean of the values scored; null when none")
    std: Number | None = Field(description="Standard deviation (population) of the values scored; null when none")
    min: Number | None = Field(description="Smallest value scored; null when none")
    max: Number | None = Field(description="Largest value scored; null when none")
    zero_variance_share: Number | None = Field(description="Share of prompt groups whose rewards do not vary; null: "
                                                           "it needs a model's sampled answers (not available yet)")
    isolation: str | None = Field(description="How the scoring process was kept from the server: `bubblewrap "
                                              "sandbox`, or `no sandbox (...)` under the unsafe opt-out")
    sampling: BundleCheckSampling | None = Field(
        default=None, description="With model: the sampling evaluation started (its report holds the sampled "
                                  "answers' mean, spread and zeroVarianceShare once it completes); null without")
    notes: list[str] = Field(description="What the check could not do or did not read, in words")
