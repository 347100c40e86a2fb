"""The registry's one base (`registry/artifacts.py`, `aliases.py`, `artifact_views.py`) gives a noun declared
nowhere but here — its tables in this module, created on the store, its answer models and one `ArtifactKind` —
versions (numbering, digest dedup, events), aliases with their history, archival and the list/get views built by its
answer models, on SQLite and PostgreSQL; and the registry's own declarations name columns their tables have."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from pydantic import Field
from sqlalchemy import JSON, Integer, MetaData, String, UniqueConstraint, inspect, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from optimize.core.errors import Invalid, NotFound, Refused
from optimize.registry import aliases, artifact_views, artifacts
from optimize.registry.artifact_kind import AliasTables, ArtifactKind, ViewModels, Wording
from optimize.registry.namespaces import set_archived
from optimize.registry.nouns import NOUNS
from optimize.schemas.common import Answer
from optimize.store.tables import Event, UtcDateTime
from tests.conftest import migrated_store


class Base(DeclarativeBase):
    metadata = MetaData()


class Widget(Base):
    __tablename__ = "test_widgets"
    __table_args__ = (UniqueConstraint("namespace", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class WidgetVersion(Base):
    __tablename__ = "test_widget_versions"
    __table_args__ = (UniqueConstraint("widget_id", "version"), UniqueConstraint("widget_id", "digest"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    widget_id: Mapped[int] = mapped_column(Integer, index=True)
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    colour: Mapped[str] = mapped_column(String(16))
    lineage: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class WidgetAlias(Base):
    __tablename__ = "test_widget_aliases"

    widget_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class WidgetAliasMove(Base):
    __tablename__ = "test_widget_alias_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    widget_id: Mapped[int] = mapped_column(Integer, index=True)
    alias: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(Integer)
    moved_at: Mapped[datetime] = mapped_column(UtcDateTime)
    moved_by: Mapped[str | None] = mapped_column(String(64))


class WidgetVersionView(Answer):
    reference: str = Field(description="NS/NAME:vN")
    widget: str = Field(description="NS/NAME")
    namespace: str = Field(description="Its namespace")
    name: str = Field(description="Its name")
    version: int = Field(description="Its number")
    digest: str = Field(description="sha256:HEX")
    colour: str = Field(description="What the noun adds")
    aliases: list[str] = Field(description="Aliases on it")
    archived: bool = Field(description="Whether its namespace is archived")
    lineage: dict | None = Field(description="What produced it")


class WidgetDetail(WidgetVersionView):
    version_count: int = Field(description="Versions the widget has")


class WidgetSummary(Answer):
    widget: str = Field(description="NS/NAME")
    namespace: str = Field(description="Its namespace")
    name: str = Field(description="Its name")
    versions: int = Field(description="Versions it has")
    archived: bool = Field(description="Whether its namespace is archived")
    latest: WidgetVersionView = Field(description="The newest version")


WIDGETS = ArtifactKind(
    noun="widget", plural="widgets", owner=Widget, version=WidgetVersion, owner_column="widget_id",
    wording=Wording(name="widget name", missing_hint=lambda label: f"make it first: {label}"),
    answers=ViewModels(WidgetVersionView, WidgetDetail, WidgetSummary),
    fields=lambda version: {"colour": version.colour}, lineage="lineage",
    aliases=AliasTables(WidgetAlias, WidgetAliasMove),
)
RED, BLUE, GREEN = ("sha256:" + c * 64 for c in "abc")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    Base.metadata.create_all(store.engine)
    yield store
    store.dispose()


def shown(answer: Answer | list[Answer]):
    """An answer as the API writes it."""
    if isinstance(answer, list):
        return [shown(item) for item in answer]
    return answer.model_dump(mode="json", by_alias=True)


def register(store, digest: str, colour: str, name: str = "gear", lineage: dict | None = None
             ) -> artifacts.Registered:
    with store.transaction() as session:
        return artifacts.append_version(session, WIDGETS, "Shop", name, digest,
                                        {"colour": colour, "lineage": lineage})


def events(store, name: str = "gear") -> list[tuple[str, dict]]:
    with store.transaction() as session:
        rows = session.scalars(select(Event).where(Event.subject == f"widget:shop/{name}").order_by(Event.id))
        return [(row.kind, row.data) for row in rows]


def test_versions_are_numbered_in_order_and_the_same_digest_is_the_version_it_already_is(store):
    first = register(store, RED, "red", lineage={"producedBy": {"kind": "test", "id": "1"}})
    again = register(store, RED, "crimson")
    second = register(store, BLUE, "blue")
    assert (first.created, first.version.version) == (True, 1)
    assert (again.created, again.version.id, again.version.colour) == (False, first.version.id, "red")
    assert (second.created, second.version.version) == (True, 2)
    assert register(store, RED, "red", name="cog").version.version == 1  # numbers are per artifact
    assert events(store) == [("version-registered", {"version": 1, "digest": RED}),
                             ("version-registered", {"version": 2, "digest": BLUE})]
    with store.transaction() as session:
        gear = artifacts.get(session, WIDGETS, "shop", "GEAR")
        assert artifacts.resolve_version(session, WIDGETS, gear, "latest").version == 2
        assert artifacts.resolve_version(session, WIDGETS, gear, "v1").digest == RED
        assert artifacts.resolve_version(session, WIDGETS, gear, BLUE).version == 2
        with pytest.raises(NotFound, match="widget shop/gear has no version v3") as missing:
            artifacts.resolve_version(session, WIDGETS, gear, "v3")
        assert missing.value.hint == "list its versions with: akka registry widgets versions shop/gear"
        with pytest.raises(NotFound, match=f"widget shop/gear has no version with digest {GREEN}"):
            artifacts.resolve_reference(session, WIDGETS, f"shop/gear@{GREEN}")
        with pytest.raises(NotFound, match="widget shop/none does not exist") as absent:
            artifacts.get(session, WIDGETS, "shop", "none")
        assert absent.value.hint == "make it first: shop/none"
        with pytest.raises(Invalid, match="widget name 'bad name' is not a valid name"):
            artifacts.get(session, WIDGETS, "shop", "bad name")


def test_aliases_move_with_their_history_and_latest_is_the_registrys(store):
    register(store, RED, "red")
    register(store, BLUE, "blue")
    moved = shown(aliases.set_alias(store, WIDGETS, "shop", "gear", "Stable", "v1"))
    assert (moved["moved"], moved["reference"], [h["version"] for h in moved["history"]]) == (True, "shop/gear:v1", [1])
    assert aliases.set_alias(store, WIDGETS, "shop", "gear", "stable", "v1").moved is False
    assert aliases.set_alias(store, WIDGETS, "shop", "gear", "stable", "latest").moved is True
    stable = shown(aliases.get_alias(store, WIDGETS, "shop", "gear", "stable"))
    assert (stable["managed"], stable["version"], [h["version"] for h in stable["history"]]) == (False, 2, [1, 2])
    latest = shown(aliases.get_alias(store, WIDGETS, "shop", "gear", "latest"))
    assert (latest["managed"], latest["reference"], [h["version"] for h in latest["history"]]) == (
        True, "shop/gear:v2", [1, 2])
    with store.transaction() as session:
        gear = artifacts.get(session, WIDGETS, "shop", "gear")
        assert artifacts.resolve_version(session, WIDGETS, gear, "stable").version == 2
        assert artifacts.aliases_by_version(session, WIDGETS, gear) == {
            artifacts.newest_id(session, WIDGETS, gear): ["latest", "stable"]}
    assert [kind for kind, _ in events(store)].count("alias-moved") == 2
    with pytest.raises(NotFound, match="widget shop/gear has no alias 'canary'"):
        aliases.get_alias(store, WIDGETS, "shop", "gear", "canary")
    with pytest.raises(Invalid, match="alias 'latest' is managed by the registry"):
        aliases.set_alias(store, WIDGETS, "shop", "gear", "latest", "v1")


def test_list_and_get_views_and_archival(store):
    register(store, RED, "red", lineage={"producedBy": {"kind": "test", "id": "1"}})
    register(store, BLUE, "blue")
    aliases.set_alias(store, WIDGETS, "shop", "gear", "stable", "v1")
    got = shown(artifact_views.read_version(store, WIDGETS, "shop", "gear", "stable"))
    assert {key: got[key] for key in ("reference", "widget", "namespace", "name", "version", "digest", "colour",
                                      "aliases", "archived", "lineage", "versionCount")} == {
        "reference": "shop/gear:v1", "widget": "shop/gear", "namespace": "shop", "name": "gear", "version": 1,
        "digest": RED, "colour": "red", "aliases": ["stable"], "archived": False,
        "lineage": {"producedBy": {"kind": "test", "id": "1"}}, "versionCount": 2}
    listed = shown(artifact_views.list_versions(store, WIDGETS, "shop", "gear"))
    assert [(v["version"], v["aliases"]) for v in listed] == [(2, ["latest"]), (1, ["stable"])]
    [entry] = shown(artifact_views.list_artifacts(store, WIDGETS, None, include_archived=False))
    assert (entry["widget"], entry["versions"], entry["archived"], entry["latest"]["reference"]) == (
        "shop/gear", 2, False, "shop/gear:v2")

    set_archived(store, "shop", True)
    with pytest.raises(Refused, match="namespace 'shop' is archived; it takes no new versions"):
        register(store, GREEN, "green")
    assert artifact_views.list_artifacts(store, WIDGETS, None, include_archived=False) == []
    assert [e.archived for e in artifact_views.list_artifacts(store, WIDGETS, None, include_archived=True)] == [True]
    assert [e.widget for e in artifact_views.list_artifacts(store, WIDGETS, "shop", include_archived=False)] == [
        "shop/gear"]
    assert artifact_views.read_version(store, WIDGETS, "shop", "gear", "latest").archived is True
    set_archived(store, "shop", False)
    assert register(store, GREEN, "green").version.version == 3


@pytest.mark.parametrize("kind", NOUNS, ids=lambda kind: kind.noun)
def test_the_registrys_declarations_name_columns_their_tables_have(kind):
    def columns(table) -> set[str]:
        return {column.key for column in inspect(table).columns}

    assert {"id", "namespace", "name", "created_at"} <= columns(kind.owner)
    declared = {kind.owner_column, "id", "version", "created_at", kind.digest.column}
    declared |= {name for name in (kind.lineage, kind.stored_bytes) if name is not None}
    assert declared <= columns(kind.version)
    if kind.aliases is not None:
        assert {kind.owner_column, "alias", "version_id"} <= columns(kind.aliases.pointer)
        assert {kind.owner_column, "alias", "version_id", "moved_at", "moved_by"} <= columns(kind.aliases.move)


def test_registrations_at_once_take_numbers_one_at_a_time(store):
    """Twelve registrations into one new artifact at once: eight digests get eight numbers, the same digest
    registered four times more is one version, and no registration is refused."""
    digests = ["sha256:" + f"{index:064x}" for index in range(8)]
    wanted = digests + [digests[0]] * 4
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        registered = list(pool.map(lambda digest: register(store, digest, "grey", name="race"), wanted))
    assert sorted(item.version.version for item in registered if item.created) == list(range(1, 9))
    assert {item.version.id for item in registered if item.version.digest == digests[0]} == {
        next(item.version.id for item in registered if item.version.digest == digests[0] and item.created)}
    assert sorted(data["version"] for _, data in events(store, "race")) == list(range(1, 9))
