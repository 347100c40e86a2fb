"""Namespaces through `akka registry namespaces`: created by registration, annotated, archived, unarchived."""

from __future__ import annotations

import pytest

from tests.conftest import chat_row, write_jsonl

pytestmark = pytest.mark.integration


@pytest.fixture
def registered(cli, ns, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [chat_row("one")])
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "a.jsonl"), "--alias", "prod")
    return tmp_path


def names(cli, *args):
    return [n["name"] for n in cli.json("registry", "namespaces", "list", *args)["namespaces"]]


def datasets(cli, *args):
    return [d["dataset"] for d in cli.json("registry", "datasets", "list", *args)["datasets"]]


def test_first_registration_creates_the_namespace(cli, ns, registered):
    item = cli.json("registry", "namespaces", "get", ns)
    assert item["name"] == ns and item["datasets"] == 1 and item["archived"] is False
    assert ns in names(cli)


def test_unknown_namespace(cli, ns):
    result = cli("registry", "namespaces", "get", ns)
    assert result.code == 1 and f"namespace '{ns}' does not exist" in result.err
    assert "created by the first registration" in result.err


def test_annotate_sets_and_clears_description(cli, ns, registered):
    annotated = cli.json("registry", "namespaces", "annotate", ns, "--description", "triage data")
    assert annotated["description"] == "triage data"
    assert "triage data" in cli.ok("registry", "namespaces", "get", ns).out
    assert cli.json("registry", "namespaces", "annotate", ns, "--description", "")["description"] is None


def test_archived_namespace_behaviour(cli, ns, registered):
    tmp_path = registered
    archived = cli.json("registry", "namespaces", "archive", ns)
    assert archived["archived"] is True and archived["changed"] is True
    # Left out of lists unless --archived; shown by --namespace and get, marked archived.
    assert ns not in names(cli)
    assert ns in names(cli, "--archived")
    assert f"{ns}/d" not in datasets(cli)
    assert f"{ns}/d" in datasets(cli, "--archived")
    by_namespace = cli.json("registry", "datasets", "list", "--namespace", ns)["datasets"]
    assert by_namespace[0]["archived"] is True
    assert cli.json("registry", "namespaces", "get", ns)["archived"] is True
    assert "(archived)" in cli.ok("registry", "namespaces", "list", "--archived").out
    # References still resolve; aliases still move.
    version = cli.json("registry", "datasets", "get", f"{ns}/d:prod")
    assert version["version"] == 1 and version["archived"] is True
    write_jsonl(tmp_path / "b.jsonl", [chat_row("two")])
    # New versions are refused, naming the namespace and the command that unarchives it.
    refused = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "b.jsonl"))
    assert refused.code == 1
    assert f"namespace '{ns}' is archived" in refused.err
    assert f"akka registry namespaces unarchive {ns}" in refused.err
    assert len(cli.json("registry", "datasets", "versions", f"{ns}/d")["versions"]) == 1
    moved = cli.json("registry", "datasets", "alias", "set", f"{ns}/d:candidate", "--version", "v1")
    assert moved["reference"] == f"{ns}/d:v1"
    # Archiving again changes nothing; unarchive restores registration.
    assert cli.json("registry", "namespaces", "archive", ns)["changed"] is False
    assert cli.json("registry", "namespaces", "unarchive", ns)["archived"] is False
    assert ns in names(cli)
    assert cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "b.jsonl"))["version"] == 2


def test_archive_text_output_names_unarchive(cli, ns, registered):
    out = cli.ok("registry", "namespaces", "archive", ns).out
    assert f"akka registry namespaces unarchive {ns}" in out
    cli.ok("registry", "namespaces", "unarchive", ns)
