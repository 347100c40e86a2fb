"""Models through `akka registry models`: a selected base model is registered, read, listed and filtered."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration

MODEL = "optimize/tiny-llama-3.2"


@pytest.fixture(scope="module")
def selected(server) -> dict:
    """The stand-in selected once per server (building it takes seconds)."""
    response = httpx.post(f"{server.url}/v1/training/base-models/{MODEL}/select",
                          headers=server.headers, json={}, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


def test_selecting_a_base_model_registers_it(cli, selected):
    text = cli.ok("registry", "models", "get", MODEL).out
    assert f"{MODEL}:v1" in text and "Variant      BASE" in text and "Lifecycle    active" in text
    assert f"base weights at {selected['commit'][:12]} ({MODEL})" in text
    assert "Produced by  selection optimize/tiny-llama-3.2" in text and "1 version." in text
    version = cli.json("registry", "models", "get", f"{MODEL}:v1")
    assert version["reference"] == f"{MODEL}:v1" and version["variant"] == "BASE"
    assert version["servingModel"] == {"variant": "BASE", "repository": MODEL, "revision": selected["commit"],
                                       "catalogEntry": MODEL}
    assert version["lineage"] == {} and version["archived"] is False and version["aliases"] == ["latest"]
    by_digest = cli.json("registry", "models", "get", f"{MODEL}@{version['digest']}")
    assert by_digest["reference"] == f"{MODEL}:v1"


def test_selecting_again_adds_no_version(cli, selected):
    again = cli.json("training", "base-models", "select", MODEL)
    assert again["commit"] == selected["commit"]
    versions = cli.json("registry", "models", "versions", MODEL)["versions"]
    assert [v["reference"] for v in versions] == [f"{MODEL}:v1"]
    assert cli.json("registry", "models", "get", MODEL)["versionCount"] == 1


def test_versions_filters(cli, selected):
    by_producer = cli.json("registry", "models", "versions", MODEL, "--produced-by-kind", "selection",
                           "--produced-by-id", MODEL)["versions"]
    assert [v["version"] for v in by_producer] == [1]
    assert cli.json("registry", "models", "versions", MODEL, "--base-model", MODEL)["versions"] == []
    half = cli("registry", "models", "versions", MODEL, "--produced-by-kind", "run")
    assert half.code == 1 and "filter by producer with both a kind and an id, or neither" in half.err
    assert "--produced-by-id" in half.err
    unknown_base = cli("registry", "models", "versions", MODEL, "--base-model", "nobody/nothing")
    assert unknown_base.code == 1 and "model nobody/nothing does not exist" in unknown_base.err
    assert "1 version." in cli.ok("registry", "models", "versions", MODEL).out


def test_list_and_namespace_counts(cli, selected):
    listed = {m["model"]: m for m in cli.json("registry", "models", "list", "--namespace", "optimize")["models"]}
    assert listed[MODEL]["versions"] == 1 and listed[MODEL]["latest"]["reference"] == f"{MODEL}:v1"
    assert MODEL in cli.ok("registry", "models", "list").out
    assert cli.json("registry", "models", "list", "--project", "optimize")["models"] == list(listed.values())
    assert cli.json("registry", "namespaces", "get", "optimize")["models"] >= 1
    clash = cli("registry", "models", "list", "--namespace", "optimize", "--project", "other")
    assert clash.code == 1 and "disagree" in clash.err


def test_unknown_models_and_versions_are_refused(cli, ns, selected):
    missing = cli("registry", "models", "get", f"{ns}/nothing")
    assert missing.code == 1 and f"model {ns}/nothing does not exist" in missing.err
    no_version = cli("registry", "models", "get", f"{MODEL}:v9")
    assert no_version.code == 1 and f"model {MODEL} has no version v9" in no_version.err
    assert f"akka registry models versions {MODEL}" in no_version.err
    malformed = cli("registry", "models", "get", "no-slash")
    assert malformed.code == 2


def test_archived_namespace_still_resolves(cli, selected):
    cli.ok("registry", "namespaces", "archive", "optimize")
    try:
        assert cli.json("registry", "models", "get", f"{MODEL}:v1")["archived"] is True
        assert MODEL not in [m["model"] for m in cli.json("registry", "models", "list")["models"]]
        assert MODEL in [m["model"] for m in cli.json("registry", "models", "list", "--archived")["models"]]
        assert MODEL in cli.ok("registry", "models", "list", "--namespace", "optimize").out
        # Selecting into an archived namespace still works and still adds nothing.
        cli.ok("training", "base-models", "select", MODEL)
        assert cli.json("registry", "models", "get", MODEL)["versionCount"] == 1
    finally:
        cli.ok("registry", "namespaces", "unarchive", "optimize")


def test_an_alias_names_a_version_and_keeps_who_moved_it(cli, selected):
    """Last in this file: the alias stays on the session's server."""
    moved = cli.json("registry", "models", "alias", "set", f"{MODEL}:champion", "--version", "v1")
    assert (moved["moved"], moved["reference"], moved["managed"]) == (True, f"{MODEL}:v1", False)
    assert "already points at optimize/tiny-llama-3.2:v1" in cli.ok(
        "registry", "models", "alias", "set", f"{MODEL}:Champion", "--version", "latest").out
    got = cli.json("registry", "models", "alias", "get", f"{MODEL}:champion")
    assert [(h["version"], h["by"]) for h in got["history"]] == [(1, "admin")]
    assert "v1  since" in cli.ok("registry", "models", "alias", "get", f"{MODEL}:champion").out
    assert cli.json("registry", "models", "get", f"{MODEL}:champion")["reference"] == f"{MODEL}:v1"
    detail = cli.json("registry", "models", "get", MODEL)
    assert [(m["alias"], m["from"], m["to"], m["by"]) for m in detail["aliasMoves"]] == [
        ("champion", None, 1, "admin")]
    assert "ALIAS" in cli.ok("registry", "models", "get", MODEL).out
    assert "champion" in cli.json("registry", "models", "versions", MODEL)["versions"][0]["aliases"]
    missing = cli("registry", "models", "alias", "get", f"{MODEL}:canary")
    assert missing.code == 1 and f"model {MODEL} has no alias 'canary'" in missing.err
    assert f"akka registry models alias set {MODEL}:canary --version vN" in missing.err
    managed = cli("registry", "models", "alias", "set", f"{MODEL}:latest", "--version", "v1")
    assert managed.code == 1 and "alias 'latest' is managed by the registry" in managed.err
    nowhere = cli("registry", "models", "alias", "set", f"{MODEL}:champion", "--version", "v7")
    assert nowhere.code == 1 and f"model {MODEL} has no version v7" in nowhere.err
