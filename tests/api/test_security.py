"""The locked door, against a real server process: every public route needs a token, a reader cannot write, a
trainer cannot manage tokens or the deployment's models, a revoked token stops at once, tokens are stored as
digests only, and a server bound beyond loopback says who can get in (and refuses to start when nobody can).

Routes come from the server's own `/openapi.json`, so a route added later is covered without editing this file.
"""

from __future__ import annotations

import re
import sqlite3

import httpx
import pytest

from tests.conftest import Cli, start_server

pytestmark = pytest.mark.integration

OPEN = {"/v1/health"}
OPENAI_READS = re.compile(r"^/v1/(chat/completions|completions|responses|models(/.+)?)$|/(chat/)?completions$")


def operations(url: str) -> list[tuple[str, str]]:
    document = httpx.get(f"{url}/openapi.json").json()  # the API's schema is public, like its /docs page
    found = []
    for path, item in document["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "x", path)  # any value: the door is checked before the route runs
        found += [(method.upper(), concrete) for method in item if method in ("get", "post", "put", "patch", "delete")]
    return found


@pytest.fixture(scope="module")
def tokens(sqlite_server):
    """A reader's and a trainer's token on the session's server (issued by its admin)."""
    issued = {}
    for role in ("reader", "trainer"):
        answer = httpx.post(f"{sqlite_server.url}/v1/auth/tokens", headers=sqlite_server.headers,
                            json={"name": f"sec-{role}", "role": role})
        assert answer.status_code == 201, answer.text
        issued[role] = answer.json()
    return issued


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_public_route_needs_a_token(sqlite_server):
    checked = 0
    client = httpx.Client(base_url=sqlite_server.url)  # one connection kept open: the routes are many
    for method, path in operations(sqlite_server.url):
        if path in OPEN:
            continue
        for headers in ({}, bearer("opt_" + "0" * 40), {"Authorization": "Basic eDp5"}):
            answer = client.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (method, path, answer.status_code, answer.text)
            body = answer.json()
            assert body["code"] == "unauthenticated" and answer.headers["www-authenticate"].startswith("Bearer")
            if OPENAI_READS.search(path):
                # the shape and words OpenAI's clients read
                assert (body["error"]["type"], body["error"]["code"]) == ("invalid_request_error", "invalid_api_key")
        checked += 1
    assert checked > 40  # the schema lists the API, not a handful of routes
    assert httpx.get(f"{sqlite_server.url}/v1/health").status_code == 200


def test_a_reader_reads_and_every_write_is_forbidden_naming_the_role(sqlite_server, tokens):
    reader = bearer(tokens["reader"]["token"])
    client = httpx.Client(base_url=sqlite_server.url)
    for method, path in operations(sqlite_server.url):
        if path in OPEN or method == "GET" or OPENAI_READS.search(path):
            continue
        answer = client.request(method, path, headers=reader, json={})
        assert answer.status_code == 403, (method, path, answer.status_code, answer.text)
        assert "token sec-reader is a reader" in answer.json()["detail"]
    assert httpx.get(f"{sqlite_server.url}/v1/registry/datasets", headers=reader).status_code == 200
    assert httpx.get(f"{sqlite_server.url}/v1/auth/tokens", headers=reader).status_code == 403  # admins only


def test_a_trainer_works_but_cannot_manage_tokens_or_the_deployments_models(sqlite_server, tokens):
    trainer = bearer(tokens["trainer"]["token"])
    for method, path, body in (("POST", "/v1/auth/tokens", {"name": "x", "role": "admin"}),
                               ("GET", "/v1/auth/tokens", None), ("DELETE", "/v1/auth/tokens/x", None),
                               ("POST", "/v1/training/base-models", {"repository": "acme/x"}),
                               ("POST", "/v1/training/base-models/optimize/tiny-qwen2.5/select", {})):
        answer = httpx.request(method, f"{sqlite_server.url}{path}", headers=trainer, json=body)
        assert answer.status_code == 403 and "needs the admin role" in answer.json()["detail"], (path, answer.text)
    created = httpx.post(f"{sqlite_server.url}/v1/training/projects", headers=trainer, json={"name": "secproject"})
    assert created.status_code in (200, 201), created.text


def test_a_revoked_token_stops_at_once_and_tokens_are_stored_as_digests(sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    issued = cli.json("auth", "tokens", "create", "short-lived", "--role", "trainer")
    token = issued["token"]
    assert cli.json("auth", "whoami", "--token", token)["name"] == "short-lived"
    listed = cli.ok("auth", "tokens", "list").out
    assert "short-lived" in listed and token not in listed
    database = sqlite3.connect(sqlite_server.data_dir / "optimize.db")
    try:
        stored = "\n".join(str(row) for row in database.execute("SELECT * FROM api_tokens"))
    finally:
        database.close()
    assert token not in stored and issued["tokenId"] in stored
    revoked = cli.json("auth", "tokens", "revoke", issued["tokenId"][:12])
    assert revoked["revokedAt"] is not None
    refused = cli("auth", "whoami", "--token", token)
    assert refused.code == 1 and "the API token is not valid (unknown or revoked)" in refused.err
    itself = cli("auth", "tokens", "revoke", cli.json("auth", "whoami")["tokenId"])
    assert itself.code == 1 and "a token cannot revoke itself" in itself.err


def test_login_keeps_the_token_for_the_server_in_a_file_only_its_user_reads(sqlite_server, capsys, tmp_path,
                                                                          monkeypatch):
    credentials = tmp_path / "credentials.json"
    monkeypatch.setenv("OPTIMIZE_CREDENTIALS", str(credentials))
    cli = Cli(capsys, sqlite_server.url)
    reader = cli.json("auth", "tokens", "create", "logged-in", "--role", "reader")["token"]
    assert cli.ok("auth", "login", "--token", reader).out.startswith(f"Logged in to {sqlite_server.url} as logged-in")
    assert credentials.stat().st_mode & 0o777 == 0o600
    assert cli.json("auth", "whoami")["role"] == "reader"  # the stored token now wins over the local admin's
    assert cli("training", "projects", "create", "nope").code == 1
    cli.ok("auth", "logout")
    assert cli.json("auth", "whoami")["role"] == "admin"


def test_a_server_bound_beyond_loopback_says_who_can_get_in_and_refuses_when_nobody_can(tmp_path):
    proc = start_server(tmp_path / "open", extra_args=["--host", "0.0.0.0"])
    proc.stop()
    log = proc.log.read_text()
    assert "Listening beyond this machine (0.0.0.0); these tokens can get in:" in log
    assert re.search(r"\n  [0-9a-f]{12}  admin  admin\n", log), log
    # every token revoked (here in the store itself): nobody could use a server open to the network
    database = sqlite3.connect(tmp_path / "open" / "optimize.db")
    try:
        database.execute("UPDATE api_tokens SET revoked_at = CURRENT_TIMESTAMP")
        database.commit()
    finally:
        database.close()
    with pytest.raises(RuntimeError, match="no API token works, so nobody could use the server"):
        start_server(tmp_path / "open", extra_args=["--host", "0.0.0.0"])


def test_imports_come_only_from_plain_folders_under_the_import_roots(sqlite_server, capsys, tmp_path):
    """The session's servers may import from the temporary folder only (OPTIMIZE_IMPORT_ROOTS, tests/conftest.py)."""
    import os
    import shutil

    from tests.conftest import built_standin

    cli = Cli(capsys, sqlite_server.url)
    model = "optimize/tiny-qwen2.5"
    outside = cli("training", "base-models", "select", model, "--from", "/etc")  # not under the temporary folder
    assert outside.code == 1 and "is not under an import root of this server" in outside.err
    folder = tmp_path / "snapshot"
    shutil.copytree(built_standin(model), folder)
    (folder / "notes.txt").symlink_to("/etc/hostname")
    linked = cli("training", "base-models", "select", model, "--from", str(folder))
    assert linked.code == 1 and "notes.txt in" in linked.err and "is a symlink" in linked.err
    (folder / "notes.txt").unlink()
    os.mkfifo(folder / "pipe")
    special = cli("training", "base-models", "select", model, "--from", str(folder))
    assert special.code == 1 and "pipe in" in special.err and "is not a regular file" in special.err
    (folder / "pipe").unlink()
    imported = cli.json("training", "base-models", "select", model, "--from", str(folder))
    assert imported["selection"]["source"] == "import"
