"""Scoring bundles in the registry: `/v1/registry/bundles` (list, versions, a version, aliases, registering) and
the archive route that takes a version's ZIP bytes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer
from optimize.schemas.registry import DatasetAlias

# --- requests ----------------------------------------------------------------------------------------------------


class BundleRegister(BaseModel):
    """`POST /v1/registry/bundles/{ns}/{name}/versions`: register an archive the registry holds as a version."""

    model_config = ConfigDict(extra="forbid")
    digest: str = Field(description="The archive's digest, sha256:HEX of its bytes (sent first with PUT "
                                    "…/archives/{sha256} unless the registry holds them)")
    alias: str | None = Field(default=None, description="Alias to point at the version")


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
    location: str | None = Field(description="Where the blob store keeps the archive")
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
