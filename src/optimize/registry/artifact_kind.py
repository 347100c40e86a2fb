"""A registry noun's declaration (`ArtifactKind`): what the one base (`registry/artifacts.py`, `aliases.py`,
`artifact_views.py`) needs to give it versions, aliases with their history, archival and the list/get views — its
tables, the words of its refusals where nouns differ, its events, how its digest is kept and what its views add.
The registry's own nouns are declared in `registry/nouns.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from optimize.core.clock import iso
from optimize.core.names import check_name
from optimize.schemas.common import Answer
from optimize.schemas.registry import AliasMoved, DatasetAlias


@dataclass(frozen=True)
class DigestRule:
    """Where a version keeps its digest, and how the kept value reads as the `sha256:HEX` a version is shown and
    selected by."""

    column: str = "digest"
    bare_hex: bool = False  # the column keeps the hex alone (a bundle's: its archive's blob is named by it)

    def shown(self, version: Any) -> str:
        value = getattr(version, self.column)
        return f"sha256:{value}" if self.bare_hex else value

    def kept(self, digest: str) -> str:
        return digest.removeprefix("sha256:") if self.bare_hex else digest

    def matches(self, table: Any, digest: str) -> Any:
        return getattr(table, self.column) == self.kept(digest)


def _no_hint(_label: str) -> str | None:
    return None


def _no_alias_hint(_label: str, _alias: str) -> str | None:
    return None


def _alias_name(alias: str) -> str:
    return check_name(alias, "alias")


@dataclass(frozen=True)
class Wording:
    """The words a noun's refusals use where the nouns differ; `label` is NS/NAME."""

    name: str  # how a bad name is called: "name", "model name"
    missing_hint: Callable[[str], str]  # the hint when NS/NAME does not exist
    empty_hint: Callable[[str], str | None] = _no_hint  # the hint when it has no versions
    alias_name: Callable[[str], str] = _alias_name  # an alias as `alias get` reads it
    no_alias_hint: Callable[[str, str], str | None] = _no_alias_hint  # the hint when the alias is not set


@dataclass(frozen=True)
class ViewModels:
    """The answer models a noun's views are built by (`registry/artifact_views.py`, `aliases.py`): a version, a
    version as a get shows it (the version, what the noun's get adds and `versionCount`), a list entry, an alias
    with its history and an alias just set."""

    version: type[Answer]
    detail: type[Answer]
    summary: type[Answer]
    alias: type[Answer] = DatasetAlias
    alias_moved: type[Answer] = AliasMoved


@dataclass(frozen=True)
class AliasTables:
    """Where a noun keeps its aliases: the pointer (owner id, alias) → version id, and every move of one (the
    version, when, and `moved_by`: the name of the token that moved it)."""

    pointer: Any
    move: Any


def _created_at(version: Any) -> dict[str, Any]:
    return {"createdAt": iso(version.created_at)}


def _nothing(_owner: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class ArtifactKind:
    """A registry noun, declared: everything the base needs to give it versions, aliases, archival and views."""

    noun: str  # dataset: its events' subject prefix (`dataset:NS/NAME`), the first word of its refusals, its key
    plural: str  # datasets: its API path and CLI group (`akka registry datasets …`)
    owner: Any  # the table of named artifacts: id, namespace, name, created_at
    version: Any  # the table of versions: id, the owner's column, version, the digest's column, created_at
    owner_column: str  # the versions' column naming their artifact: dataset_id
    wording: Wording
    answers: ViewModels  # the answer models its views are built by
    digest: DigestRule = field(default_factory=DigestRule)
    registered: str = "version-registered"  # the event recorded on the artifact when a version is appended
    fields: Callable[[Any], dict[str, Any]] = _created_at  # what a version's view adds to the shared head
    summary: Callable[[Any], dict[str, Any]] = _nothing  # what a list entry adds after the artifact's name
    lineage: str | None = None  # the versions' column saying what produced a version, shown as `lineage`
    aliases: AliasTables | None = None  # None: only `latest`, which the registry keeps on the newest version
    stored_bytes: str | None = None  # the versions' column counted against the namespace's storedBytes quota
