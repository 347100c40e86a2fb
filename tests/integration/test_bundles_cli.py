"""Scoring bundles through `akka registry bundles`, against real servers (SQLite, PostgreSQL): a directory packaged
and registered once, a ZIP kept byte for byte, aliases, lists, archived namespaces, refusals naming the member, and
a token limited to namespaces."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from optimize.core.bundle_zip import bundle_bytes
from tests.conftest import Cli

pytestmark = pytest.mark.integration


def make_bundle(root: Path, marker: str = "") -> Path:
    """A scoring bundle's directory: modules, a data file, a hidden file, a cache file and an empty directory."""
    (root / "tables").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "empty").mkdir()
    (root / "reward.py").write_text(f"from . import helpers\n\n\ndef compute_score(answer, item):  # {marker}\n"
                                    "    return helpers.score(answer, item)\n")
    (root / "helpers.py").write_text("def score(answer, item):\n    return float(answer == item['label'])\n")
    (root / "tables" / "schema.json").write_text('{"fields": ["label"]}\n')
    (root / ".settings").write_text("strict = true\n")
    (root / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\x00cache")
    return root


def zip_of(entries: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    """A ZIP (deflated, as ZIP tools write it) of `entries`; `modes` sets a member's Unix mode."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 5, 1, 12, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (modes or {}).get(name, 0o100644) << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def held_bytes(location: str) -> bytes:
    return Path(urlsplit(location).path).read_bytes()


def test_a_directory_is_registered_once_and_its_bytes_are_not_sent_again(cli, ns, tmp_path):
    folder = make_bundle(tmp_path / "scorer")
    first = cli.json("registry", "bundles", "register", f"{ns}/scorer", "-f", str(folder), "--alias", "prod")
    packaged = bundle_bytes(folder)
    assert first["reference"] == f"{ns}/scorer:v1" and first["created"] is True
    assert first["digest"] == f"sha256:{hashlib.sha256(packaged).hexdigest()}"
    assert first["upload"] == {"bytes": len(packaged), "packaged": True, "sent": True, "alreadyHeld": False}
    assert first["modules"] == ["helpers.py", "reward.py"] and first["files"] == 5 and first["directories"] == 1
    assert first["aliases"] == ["latest", "prod"]
    paths = [m["path"] for m in first["members"]]
    assert paths == sorted(paths) and {".settings", "__pycache__/helpers.cpython-311.pyc", "empty/"} <= set(paths)
    assert held_bytes(first["location"]) == packaged  # kept exactly, under its digest
    # the same files, touched and listed anew: the same bytes, the same version, nothing sent
    for path in folder.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    again = cli.json("registry", "bundles", "register", f"{ns}/scorer", "-f", str(folder))
    assert again["reference"] == first["reference"] and again["digest"] == first["digest"]
    assert again["created"] is False and again["upload"]["sent"] is False and again["upload"]["alreadyHeld"] is True
    assert [v["reference"] for v in cli.json("registry", "bundles", "versions", f"{ns}/scorer")["versions"]] == [
        f"{ns}/scorer:v1"]
    text = cli.ok("registry", "bundles", "register", f"{ns}/scorer", "-f", str(folder)).out
    assert f"Already registered: {ns}/scorer:v1" in text and "already held, not sent" in text
    # the same bytes under another name: a version of that name, still not sent
    other = cli.json("registry", "bundles", "register", f"{ns}/copy", "-f", str(folder))
    assert other["reference"] == f"{ns}/copy:v1" and other["created"] is True and other["upload"]["sent"] is False


def test_a_zip_is_kept_byte_for_byte_and_versions_resolve(cli, ns, tmp_path):
    data = zip_of({"reward.py": b"def compute_score(a, b):\n    return 1.0\n", "data/table.csv": b"a,b\n1,2\n"})
    path = tmp_path / "scorer.zip"
    path.write_bytes(data)
    first = cli.json("registry", "bundles", "register", f"{ns}/graders", "-f", str(path))
    assert first["digest"] == f"sha256:{hashlib.sha256(data).hexdigest()}" and first["bytes"] == len(data)
    assert first["upload"]["packaged"] is False and first["modules"] == ["reward.py"]
    assert held_bytes(first["location"]) == data
    second = cli.json("registry", "bundles", "register", f"{ns}/graders", "-f",
                      str(make_bundle(tmp_path / "dir")))
    assert second["reference"] == f"{ns}/graders:v2" and second["aliases"] == ["latest"]
    assert cli.json("registry", "bundles", "get", f"{ns}/graders")["version"] == 2
    assert cli.json("registry", "bundles", "get", f"{ns}/graders:latest")["version"] == 2
    assert cli.json("registry", "bundles", "get", f"{ns}/graders:v1")["digest"] == first["digest"]
    assert cli.json("registry", "bundles", "get", f"{ns}/graders@{first['digest']}")["version"] == 1
    assert cli.json("registry", "bundles", "get", f"{ns}/graders:{first['digest']}")["version"] == 1
    listed = cli.json("registry", "bundles", "versions", f"{ns}/graders")["versions"]
    assert [v["version"] for v in listed] == [2, 1]
    text = cli.ok("registry", "bundles", "get", f"{ns}/graders:v1").out
    assert f"Bundle    {ns}/graders:v1" in text and "Version   v1 of 2" in text and "data/table.csv" in text
    assert "2 versions." in cli.ok("registry", "bundles", "versions", f"{ns}/graders").out


def test_aliases_move_and_keep_their_history(cli, ns, tmp_path):
    one = cli.json("registry", "bundles", "register", f"{ns}/b", "-f", str(make_bundle(tmp_path / "one", "1")),
                   "--alias", "champion")
    two = cli.json("registry", "bundles", "register", f"{ns}/b", "-f", str(make_bundle(tmp_path / "two", "2")))
    assert (one["version"], two["version"]) == (1, 2)
    assert cli.json("registry", "bundles", "get", f"{ns}/b:champion")["version"] == 1
    moved = cli.json("registry", "bundles", "alias", "set", f"{ns}/b:champion", "--version", "v2")
    assert moved["moved"] is True and moved["reference"] == f"{ns}/b:v2"
    assert cli.json("registry", "bundles", "alias", "set", f"{ns}/b:champion", "--version", "v2")["moved"] is False
    history = cli.json("registry", "bundles", "alias", "get", f"{ns}/b:champion")["history"]
    assert [item["version"] for item in history] == [1, 2]
    assert cli.json("registry", "bundles", "get", f"{ns}/b:champion")["version"] == 2
    assert cli.json("registry", "bundles", "alias", "get", f"{ns}/b:latest")["managed"] is True
    assert "now points at" in cli.ok("registry", "bundles", "alias", "set", f"{ns}/b:prod", "--version", "v1").out
    for alias, words in (("latest", "managed by the registry"), ("v7", "looks like a version")):
        refused = cli("registry", "bundles", "alias", "set", f"{ns}/b:{alias}", "--version", "v1")
        assert refused.code == 1 and words in refused.err
    missing = cli("registry", "bundles", "alias", "set", f"{ns}/b:prod", "--version", "v9")
    assert missing.code == 1 and f"bundle {ns}/b has no version v9" in missing.err


def test_lists_namespaces_and_unknown_bundles(cli, ns, tmp_path):
    cli.ok("registry", "bundles", "register", f"{ns}/scorer", "-f", str(make_bundle(tmp_path / "s")))
    listed = cli.json("registry", "bundles", "list", "--namespace", ns)["bundles"]
    assert [(b["bundle"], b["versions"], b["latest"]["version"]) for b in listed] == [(f"{ns}/scorer", 1, 1)]
    assert f"{ns}/scorer" in {b["bundle"] for b in cli.json("registry", "bundles", "list")["bundles"]}
    assert f"{ns}/scorer" in cli.ok("registry", "bundles", "list").out
    namespace = cli.json("registry", "namespaces", "get", ns)
    assert namespace["bundles"] == 1 and namespace["datasets"] == 0
    assert {n["name"]: n["bundles"] for n in cli.json("registry", "namespaces", "list")["namespaces"]}[ns] == 1
    unknown = cli("registry", "bundles", "get", f"{ns}/nothing")
    assert unknown.code == 1 and f"bundle {ns}/nothing does not exist" in unknown.err
    assert f"akka registry bundles register {ns}/nothing" in unknown.err
    assert cli("registry", "bundles", "get", "not-a-reference").code == 2
    assert cli("registry", "bundles", "register", f"{ns}/x:v1", "-f", str(tmp_path / "s")).code == 2
    missing = cli("registry", "bundles", "register", f"{ns}/x", "-f", str(tmp_path / "absent"))
    assert missing.code == 1 and "is neither a directory nor a file" in missing.err
    error = cli("registry", "bundles", "get", f"{ns}/nothing", "-o", "json").json["error"]
    assert error["code"] == "not_found" and error["status"] == 404


def test_an_archived_namespace_keeps_its_bundles_out_of_lists_and_takes_no_new_version(cli, ns, tmp_path):
    cli.ok("registry", "bundles", "register", f"{ns}/b", "-f", str(make_bundle(tmp_path / "one", "1")),
           "--alias", "prod")
    cli.ok("registry", "namespaces", "archive", ns)
    assert f"{ns}/b" not in {b["bundle"] for b in cli.json("registry", "bundles", "list")["bundles"]}
    assert f"{ns}/b" in {b["bundle"] for b in cli.json("registry", "bundles", "list", "--archived")["bundles"]}
    narrowed = cli.json("registry", "bundles", "list", "--namespace", ns)["bundles"]
    assert narrowed[0]["archived"] is True and narrowed[0]["latest"]["archived"] is True
    assert "(archived)" in cli.ok("registry", "bundles", "list", "--archived").out
    version = cli.json("registry", "bundles", "get", f"{ns}/b:prod")  # references still resolve
    assert version["version"] == 1 and version["archived"] is True
    for folder in (tmp_path / "one", make_bundle(tmp_path / "two", "2")):  # the same bytes, and new ones
        refused = cli("registry", "bundles", "register", f"{ns}/b", "-f", str(folder))
        assert refused.code == 1 and f"namespace '{ns}' is archived" in refused.err
        assert f"akka registry namespaces unarchive {ns}" in refused.err
    assert cli.json("registry", "bundles", "alias", "set", f"{ns}/b:next", "--version", "v1")["moved"] is True
    assert len(cli.json("registry", "bundles", "versions", f"{ns}/b")["versions"]) == 1
    cli.ok("registry", "namespaces", "unarchive", ns)
    assert cli.json("registry", "bundles", "register", f"{ns}/b", "-f", str(tmp_path / "two"))["version"] == 2


def test_a_symlink_in_the_directory_is_refused_by_its_relative_path(cli, ns, tmp_path):
    folder = make_bundle(tmp_path / "s")
    (folder / "tables" / "link.json").symlink_to(folder / "tables" / "schema.json")
    refused = cli("registry", "bundles", "register", f"{ns}/s", "-f", str(folder))
    assert refused.code == 1 and "'tables/link.json' is a symbolic link" in refused.err
    assert "replace the link with the file it points at" in refused.err
    error = cli("registry", "bundles", "register", f"{ns}/s", "-f", str(folder), "-o", "json").json["error"]
    assert error["member"] == "tables/link.json"
    assert cli("registry", "bundles", "get", f"{ns}/s").code == 1  # nothing was registered
    os.mkfifo(folder / "pipe")
    (folder / "tables" / "link.json").unlink()
    refused = cli("registry", "bundles", "register", f"{ns}/s", "-f", str(folder))
    assert refused.code == 1 and "'pipe' is a FIFO" in refused.err


@pytest.mark.parametrize(("entries", "modes", "words"), [
    ({"../evil.py": b"x = 1\n"}, None, "member '../evil.py' climbs out of the bundle with '..'"),
    ({"/etc/reward.py": b"x = 1\n"}, None, "member '/etc/reward.py' is an absolute path"),
    ({"reward.py": b"x = 1\n", "link.py": b"reward.py"}, {"link.py": 0o120777},
     "member 'link.py' is a symbolic link"),
    ({"data/table.csv": b"a,b\n", "README.md": b"hi\n"}, None, "a scoring bundle holds Python modules"),
], ids=["dotdot", "absolute", "symlink", "no-module"])
def test_an_archive_breaking_a_rule_is_refused_naming_the_member(cli, ns, tmp_path, entries, modes, words):
    path = tmp_path / "bad.zip"
    path.write_bytes(zip_of(entries, modes))
    refused = cli("registry", "bundles", "register", f"{ns}/bad", "-f", str(path))
    assert refused.code == 1 and words in refused.err, refused.err
    assert cli("registry", "bundles", "get", f"{ns}/bad").code == 1


def test_a_file_that_is_not_a_zip_is_refused(cli, ns, tmp_path):
    path = tmp_path / "reward.py"
    path.write_text("def compute_score(a, b):\n    return 0.0\n")
    refused = cli("registry", "bundles", "register", f"{ns}/bad", "-f", str(path))
    assert refused.code == 1 and "the bundle is not a ZIP archive" in refused.err
    assert "register a ZIP archive of the bundle's files, or the bundle's directory" in refused.err
    error = cli("registry", "bundles", "register", f"{ns}/bad", "-f", str(path), "-o", "json").json["error"]
    assert error["status"] == 422


def test_the_archive_routes_refuse_wrong_bytes_and_unheld_digests(server, ns):
    data = zip_of({"reward.py": b"x = 1\n", "n.txt": uuid.uuid4().hex.encode()})
    sha = hashlib.sha256(data).hexdigest()
    base = f"{server.url}/v1/registry/bundles/{ns}/direct"
    headers = {**server.headers, "content-type": "application/zip"}
    assert httpx.get(f"{base}/archives/{sha}", headers=server.headers).json()["held"] is False
    unheld = httpx.post(f"{base}/versions", headers=server.headers, json={"digest": f"sha256:{sha}"})
    assert unheld.status_code == 409 and f"PUT /v1/registry/bundles/{ns}/direct/archives/{sha}" in unheld.json()["hint"]
    wrong = httpx.put(f"{base}/archives/{'0' * 64}", headers=headers, content=data)
    assert wrong.status_code == 422 and f"sha256:{sha}" in wrong.json()["detail"]
    assert httpx.put(f"{base}/archives/nothex", headers=headers, content=data).status_code == 422
    stored = httpx.put(f"{base}/archives/{sha}", headers=headers, content=data)
    assert stored.status_code == 201 and stored.json()["modules"] == ["reward.py"]
    registered = httpx.post(f"{base}/versions", headers=server.headers, json={"digest": f"sha256:{sha}"})
    assert registered.status_code == 200 and registered.json()["created"] is True
    again = httpx.put(f"{base}/archives/{sha}", headers=headers, content=data)
    assert again.status_code == 200 and again.json()["alreadyHeld"] is True
    for body in ({"digest": "sha256:zz"}, {"digest": f"sha256:{sha}", "alias": "v2"}, {"digest": 5}, {}):
        answer = httpx.post(f"{base}/versions", headers=server.headers, json=body)
        assert answer.status_code == 422, (body, answer.text)


def test_a_token_limited_to_namespaces_sees_only_their_bundles(server, capsys, tmp_path):
    tag = uuid.uuid4().hex[:6]
    mine, theirs = f"mine{tag}", f"theirs{tag}"
    admin = Cli(capsys, server.url)
    for namespace in (mine, theirs):
        admin.ok("registry", "bundles", "register", f"{namespace}/scorer", "-f",
                 str(make_bundle(tmp_path / namespace, namespace)))
    answer = httpx.post(f"{server.url}/v1/auth/tokens", headers=server.headers,
                        json={"name": f"bundles-{tag}", "role": "trainer", "namespaces": [mine]})
    assert answer.status_code == 201, answer.text
    token = answer.json()["token"]
    limited = Cli(capsys, server.url)
    listed = limited.json("registry", "bundles", "list", "--archived", "--token", token)["bundles"]
    assert {b["bundle"] for b in listed} == {f"{mine}/scorer"}
    assert limited.json("registry", "bundles", "get", f"{mine}/scorer", "--token", token)["version"] == 1
    for args in (("get", f"{theirs}/scorer"), ("versions", f"{theirs}/scorer"), ("list", "--namespace", theirs),
                 ("alias", "set", f"{theirs}/scorer:x", "--version", "v1"),
                 ("register", f"{theirs}/scorer", "-f", str(tmp_path / mine))):
        refused = limited("registry", "bundles", *args, "--token", token)
        assert refused.code == 1 and f"token bundles-{tag} is limited to" in refused.err, (args, refused.err)
        assert f"namespace '{theirs}' is outside them" in refused.err
    names = {n["name"] for n in limited.json("registry", "namespaces", "list", "--token", token)["namespaces"]}
    assert names == {mine}


def test_resolve_bundle_names_the_exact_version_and_its_archive(server, ns, tmp_path):
    """The function other services call, over the server's own store."""
    from optimize.cli.main import main
    from optimize.core.errors import NotFound
    from optimize.registry.bundles import resolve_bundle
    from optimize.store.db import Store

    folder = make_bundle(tmp_path / "s")
    assert main(["registry", "bundles", "register", f"{ns}/s", "-f", str(folder), "--alias", "prod",
                 "--server", server.url]) == 0
    arguments = list(server.process.args)
    url = (arguments[arguments.index("--database-url") + 1] if "--database-url" in arguments
           else f"sqlite:///{server.data_dir / 'optimize.db'}")
    store = Store(url)
    sha = hashlib.sha256(bundle_bytes(folder)).hexdigest()
    try:
        with store.transaction() as session:
            for text in (f"{ns}/s", f"{ns}/s:prod", f"{ns}/s:v1", f"{ns}/s@sha256:{sha}", f"{ns.upper()}/S:latest"):
                assert resolve_bundle(session, text) == (f"{ns}/s:v1", sha)
            with pytest.raises(NotFound) as missing:
                resolve_bundle(session, f"{ns}/other")
            assert f"akka registry bundles register {ns}/other" in missing.value.hint
            with pytest.raises(NotFound):
                resolve_bundle(session, f"{ns}/s:v2")
    finally:
        store.dispose()


def test_permissions_of_members_do_not_matter(cli, ns, tmp_path):
    folder = make_bundle(tmp_path / "s")
    first = cli.json("registry", "bundles", "register", f"{ns}/p", "-f", str(folder))
    (folder / "reward.py").chmod(stat.S_IRUSR)
    (folder / "tables").chmod(0o700)
    assert cli.json("registry", "bundles", "register", f"{ns}/p", "-f", str(folder))["created"] is False
    assert first["version"] == 1


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_collector_keeps_a_registered_archive_and_frees_one_no_version_names(backend, tmp_path):
    """In-process, over a store of each kind: the archive a version names is a referenced blob."""
    from datetime import timedelta

    from optimize.blobs.local import LocalBlobStore
    from optimize.core.limits import DatasetLimits
    from optimize.registry import bundles
    from optimize.registry.collection import collect
    from optimize.registry.uploads import Registry
    from tests.conftest import migrated_store

    store = migrated_store(backend, tmp_path)
    registry = Registry(store, LocalBlobStore(tmp_path / "blobs"), DatasetLimits())
    try:
        shas = []
        for marker in ("kept", "freed"):
            data = bundle_bytes(make_bundle(tmp_path / marker, marker))
            shas.append(hashlib.sha256(data).hexdigest())
            receiver = bundles.open_archive(registry, "team", "scorer", shas[-1], len(data))
            receiver.feed(data)
            assert receiver.finish().held is True
        version = bundles.register_version(registry, "team", "scorer", f"sha256:{shas[0]}", "prod")
        assert version.created is True and version.reference == "team/scorer:v1"
        assert bundles.open_archive(registry, "team", "scorer", shas[0], None).already_held is True
        for path in (registry.blobs.path_for(sha) for sha in shas):
            os.utime(path, (1_000_000_000, 1_000_000_000))  # written long ago
        collect(registry, grace=timedelta(0))
        assert registry.blobs.holds(shas[0]) and not registry.blobs.exists(shas[1])
        assert bundles.archive_state(registry, "team", "scorer", shas[1]).held is False
    finally:
        store.dispose()


# --- akka registry bundles check ----------------------------------------------------------------------------------

CHECKED_REWARD = '''FIELDS = ["answer"]


def compute_score(prompt_messages, completion_text, fields):
    if fields["answer"] == "skip":
        return None
    if fields["answer"] == "boom":
        raise ValueError("cannot score " + completion_text)
    return 1.0 if completion_text.strip() == fields["answer"] else 0.25
'''


def qa(question: str = "q", reply: str = "r", **fields) -> dict:
    """A chat row whose final assistant message is `reply`, with other top-level `fields` (e.g. answer)."""
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": reply}], **fields}


def checked_dataset(cli: Cli, ns: str, tmp_path: Path, name: str = "qa") -> None:
    """Six rows: four scored (1, 1, 0.25, 1), one the function skips (None), one it raises on (line 4)."""
    from tests.conftest import write_jsonl

    rows = [qa("2+2?", "4", answer="4"), qa("3+3?", "6", answer="6"), qa("capital?", "Paris", answer="Rome"),
            qa("x?", "y", answer="boom"), qa("z?", "w", answer="skip"), qa("1+1?", "2", answer="2")]
    cli.ok("registry", "datasets", "register", f"{ns}/{name}", "-f", str(write_jsonl(tmp_path / f"{name}.jsonl", rows)))


def check_bundle_dir(root: Path, reward: str = CHECKED_REWARD, **others: str) -> Path:
    root.mkdir(parents=True)
    (root / "reward.py").write_text(reward)
    for name, text in others.items():
        (root / f"{name}.py").write_text(text)
    return root


@pytest.fixture
def scli(capsys, sqlite_server) -> Cli:
    return Cli(capsys, sqlite_server.url)


def test_check_scores_each_rows_own_answer_and_reports_the_figures(scli, ns, tmp_path):
    scli.ok("registry", "bundles", "register", f"{ns}/scorer", "-f", str(check_bundle_dir(tmp_path / "b")),
            "--alias", "prod")
    checked_dataset(scli, ns, tmp_path)
    report = scli.json("registry", "bundles", "check", f"{ns}/scorer:prod", "--dataset", f"{ns}/qa")
    assert report["bundle"] == f"{ns}/scorer:v1" and report["function"] == "reward:compute_score"
    assert report["dataset"] == f"{ns}/qa:v1" and report["datasetRows"] == 6
    assert report["fields"] == ["answer"] and report["fieldRowsChecked"] == 6
    assert (report["rows"], report["scored"], report["unscored"], report["withoutAnswer"], report["notReached"]) == (
        6, 4, 1, 0, 0)
    assert report["errors"]["count"] == 1
    [error] = report["errors"]["first"]
    assert error["line"] == 4 and error["error"].startswith("ValueError: cannot score y (reward.py line 8")
    assert report["mean"] == pytest.approx(0.8125) and report["std"] == pytest.approx(0.32475952)
    assert (report["min"], report["max"]) == (0.25, 1.0)
    assert report["zeroVarianceShare"] is None and any("needs several answers" in n for n in report["notes"])
    # the first rows only, and the text report
    two = scli.json("registry", "bundles", "check", f"{ns}/scorer", "--dataset", f"{ns}/qa:v1", "--samples", "2")
    assert (two["rows"], two["scored"], two["mean"], two["std"]) == (2, 2, 1.0, 0.0)
    text = scli.ok("registry", "bundles", "check", f"{ns}/scorer", "--dataset", f"{ns}/qa").out
    assert f"Checked {ns}/scorer:v1 reward:compute_score on {ns}/qa:v1" in text
    assert "Rows      6 of the first 64: 4 scored, 1 unscored (None), 1 error" in text
    assert "mean 0.8125  std 0.3248  min 0.25  max 1" in text and "line 4: ValueError: cannot score y" in text


def test_check_times_out_a_hanging_function_row_by_row_and_names_rows_without_answers(scli, ns, tmp_path):
    from tests.conftest import write_jsonl

    hanging = "import time\n\n\ndef score(prompt_messages, completion_text, fields):\n    time.sleep(60)\n"
    scli.ok("registry", "bundles", "register", f"{ns}/slow", "-f",
            str(check_bundle_dir(tmp_path / "b", "def unused():\n    pass\n", slow=hanging)))
    calls = {"role": "assistant",  # a final answer that only calls a tool: no text to score
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}]}
    rows = [{"messages": [{"role": "user", "content": "q"}, calls]}, qa(reply="a0"), qa(reply="a1")]
    scli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", rows)))
    report = scli.json("registry", "bundles", "check", f"{ns}/slow", "--dataset", f"{ns}/d", "--function",
                       "slow:score", "--time-limit", "0.5")
    assert (report["rows"], report["scored"], report["withoutAnswer"], report["errors"]["count"]) == (3, 0, 1, 2)
    assert [e["line"] for e in report["errors"]["first"]] == [2, 3]
    assert all(e["error"] == "took longer than 0.5 s" for e in report["errors"]["first"])
    assert report["mean"] is None and report["fields"] is None
    assert any("declares no FIELDS" in n for n in report["notes"])
    assert any("1 of the rows read end without an assistant answer" in n for n in report["notes"])


def test_check_stops_after_the_scoring_process_is_lost_on_rows_in_a_row(scli, ns, tmp_path):
    """A function that kills its process on every row: each row is an error, and after 8 in a row the rest are not
    reached. A bundle of one module is checked by that module's compute_score when no function is named."""
    from tests.conftest import write_jsonl

    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "crash.py").write_text("import os\n\n\ndef compute_score(p, c, f):\n    os._exit(3)\n")
    scli.ok("registry", "bundles", "register", f"{ns}/crash", "-f", str(folder))
    scli.ok("registry", "datasets", "register", f"{ns}/d", "-f",
            str(write_jsonl(tmp_path / "d.jsonl", [qa(reply=f"a{i}") for i in range(12)])))
    report = scli.json("registry", "bundles", "check", f"{ns}/crash", "--dataset", f"{ns}/d", "--samples", "11")
    assert report["function"] == "crash:compute_score"
    assert (report["rows"], report["scored"], report["errors"]["count"], report["notReached"]) == (11, 0, 8, 3)
    assert report["errors"]["first"][0] == {"line": 1, "error": "the scoring process exited with code 3 while "
                                                                "scoring this sample"}
    assert any("lost on 8 rows in a row" in note and "3 of the 11 rows read were not reached" in note
               for note in report["notes"])


def test_check_refuses_a_bundle_that_cannot_import_naming_the_module(cli, ns, tmp_path):
    broken = "import numpy_that_is_not_there\n\n\ndef compute_score(p, c, f):\n    return 1\n"
    cli.ok("registry", "bundles", "register", f"{ns}/broken", "-f", str(check_bundle_dir(tmp_path / "b", broken)))
    checked_dataset(cli, ns, tmp_path)
    refused = cli("registry", "bundles", "check", f"{ns}/broken", "--dataset", f"{ns}/qa")
    assert refused.code == 1
    assert f"importing module reward of the scoring bundle {ns}/broken:v1 failed" in refused.err
    assert "No module named 'numpy_that_is_not_there' (reward.py line 1)" in refused.err
    error = cli("registry", "bundles", "check", f"{ns}/broken", "--dataset", f"{ns}/qa", "-o", "json").json["error"]
    assert error["status"] == 422 and error["module"] == "reward"
    no_function = cli("registry", "bundles", "check", f"{ns}/broken", "--dataset", f"{ns}/qa", "--function",
                      "reward:nothing")
    assert no_function.code == 1
    # unknown things and malformed input are refusals, never a server error
    for args, words in (((f"{ns}/nothing", "--dataset", f"{ns}/qa"), f"bundle {ns}/nothing does not exist"),
                        ((f"{ns}/broken", "--dataset", f"{ns}/none"), f"dataset {ns}/none does not exist"),
                        ((f"{ns}/broken", "--dataset", f"{ns}/qa", "--function", "reward.py"), "names a file"),
                        ((f"{ns}/broken", "--dataset", "not a reference"), "")):
        answer = cli("registry", "bundles", "check", *args)
        assert answer.code == 1 and words in answer.err, (args, answer.err)


def test_check_refuses_rows_lacking_a_declared_field_naming_the_lines(scli, ns, tmp_path):
    from tests.conftest import write_jsonl

    reward = 'FIELDS = ("answer", "expected")\n\n\ndef compute_score(p, c, f):\n    return 1\n'
    scli.ok("registry", "bundles", "register", f"{ns}/s", "-f", str(check_bundle_dir(tmp_path / "b", reward)))
    rows = [qa(answer="a"), qa(), qa(answer="b"), qa(answer=None), qa(),
            qa(answer="c", expected=None)]
    scli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", rows)))
    refused = scli("registry", "bundles", "check", f"{ns}/s", "--dataset", f"{ns}/d")
    assert refused.code == 1
    assert f"reward.py declares the row fields 'answer', 'expected', which rows of {ns}/d:v1 lack" in refused.err
    assert "line 2 and 2 more lack field 'answer'; line 6 lacks field 'expected'" in refused.err
    assert "line 4: lacks field 'answer'" in refused.err
    error = scli("registry", "bundles", "check", f"{ns}/s", "--dataset", f"{ns}/d", "-o", "json").json["error"]
    assert error["status"] == 422
    assert error["missing"] == [{"field": "answer", "count": 3, "lines": [2, 4, 5]},
                                {"field": "expected", "count": 1, "lines": [6]}]
    # FIELDS must be a literal list of names
    scli.ok("registry", "bundles", "register", f"{ns}/t", "-f", str(check_bundle_dir(
        tmp_path / "t", "FIELDS = list('ab')\n\n\ndef compute_score(p, c, f):\n    return 1\n")))
    bad = scli("registry", "bundles", "check", f"{ns}/t", "--dataset", f"{ns}/d")
    assert bad.code == 1 and "reward.py line 1: FIELDS is not a literal list of field names" in bad.err


def test_check_refuses_sampling_options_without_a_model_and_a_preference_dataset(scli, ns, tmp_path):
    from tests.conftest import pair_row, write_jsonl

    scli.ok("registry", "bundles", "register", f"{ns}/s", "-f", str(check_bundle_dir(tmp_path / "b")))
    checked_dataset(scli, ns, tmp_path)
    stray = scli("registry", "bundles", "check", f"{ns}/s", "--dataset", f"{ns}/qa", "--generations", "4")
    assert stray.code == 2 and "--generations go with --model" in stray.err, stray.err
    scli.ok("registry", "datasets", "register", f"{ns}/pairs", "-f",
            str(write_jsonl(tmp_path / "p.jsonl", [pair_row(), pair_row("q2")])))
    pairs = scli("registry", "bundles", "check", f"{ns}/s", "--dataset", f"{ns}/pairs")
    assert pairs.code == 1 and f"dataset {ns}/pairs:v1 holds preference pairs" in pairs.err
    # straight to the route: bad bodies are 422, never 500
    base = f"{scli.url}/v1/registry/bundles/{ns}/s/check"
    for body in ({}, {"dataset": f"{ns}/qa", "samples": 0}, {"dataset": f"{ns}/qa", "samples": 5000},
                 {"dataset": f"{ns}/qa", "timeLimitSeconds": 1e30}, {"dataset": f"{ns}/qa", "other": 1},
                 {"dataset": f"{ns}/qa", "function": "a b"}):
        answer = httpx.post(base, headers=scli.headers, json=body, timeout=60)
        assert answer.status_code == 422, (body, answer.text)
