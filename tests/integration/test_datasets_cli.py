"""Registering and reading datasets through `akka registry datasets`, against real servers (SQLite, PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import chat_row, pair_row, write_jsonl
from tests.row_cases import BAD_CHAT_ROWS, BAD_PAIRS, TOOLS

pytestmark = pytest.mark.integration


def test_register_chat_dataset_reports_version_fields(cli, ns, tmp_path):
    rows = [chat_row("a", "b"), chat_row("c", "d", tools=TOOLS), chat_row("e", "f")]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    version = cli.json("registry", "datasets", "register", f"{ns}/train", "-f", str(path))
    assert version["reference"] == f"{ns}/train:v1"
    assert version["version"] == 1
    assert version["format"] == "chat-jsonl-v1"
    assert version["examples"] == 3
    assert version["toolRows"] == 1
    assert version["shards"] == 1
    assert version["bytes"] == path.stat().st_size
    assert version["digest"].startswith("sha256:") and len(version["digest"]) == 71
    assert version["upload"] == {"uploadId": version["upload"]["uploadId"], "shards": 1, "sent": 1, "alreadyHeld": 0}
    assert version["objects"][0]["path"] == "examples.jsonl"


def test_an_object_is_written_byte_for_byte(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [chat_row("ä", "ö"), chat_row("c", "d")])
    cli.ok("registry", "datasets", "register", f"{ns}/bytes", "-f", str(path), "--alias", "kept")
    assert cli.ok("registry", "datasets", "object", f"{ns}/bytes:kept", "examples.jsonl").out == path.read_text()
    missing = cli("registry", "datasets", "object", f"{ns}/bytes", "nothing.jsonl")
    assert missing.code == 1
    assert f"dataset {ns}/bytes:v1 holds no object 'nothing.jsonl' (it holds: examples.jsonl)" in missing.err


def test_register_preference_dataset_counts_pairs(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair_row("q1"), pair_row("q2", tools=TOOLS)])
    version = cli.json("registry", "datasets", "register", f"{ns}/prefs", "-f", str(path))
    assert version["format"] == "preference-jsonl-v1"
    assert version["pairs"] == 2 and "examples" not in version
    assert version["toolRows"] == 1
    text = cli.ok("registry", "datasets", "get", f"{ns}/prefs").out
    assert "2 pairs" in text and "Tools" in text and "1 row offers tools" in text


def test_identical_content_returns_existing_version(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [chat_row()])
    first = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    again = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    assert again["reference"] == first["reference"] and again["digest"] == first["digest"]
    assert again["created"] is False and again["upload"]["sent"] == 0 and again["upload"]["alreadyHeld"] == 1
    versions = cli.json("registry", "datasets", "versions", f"{ns}/d")["versions"]
    assert [v["reference"] for v in versions] == [f"{ns}/d:v1"]


def test_changed_content_appends_a_version_and_latest_follows(cli, ns, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [chat_row("one")])
    write_jsonl(tmp_path / "b.jsonl", [chat_row("two")])
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "a.jsonl"))
    second = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "b.jsonl"))
    assert second["reference"] == f"{ns}/d:v2" and second["aliases"] == ["latest"]
    versions = cli.json("registry", "datasets", "versions", f"{ns}/d")["versions"]
    assert [v["version"] for v in versions] == [2, 1]
    assert cli.json("registry", "datasets", "get", f"{ns}/d")["version"] == 2
    assert cli.json("registry", "datasets", "get", f"{ns}/d:v1")["digest"] == versions[1]["digest"]
    assert cli.json("registry", "datasets", "get", f"{ns}/d@{versions[1]['digest']}")["version"] == 1


def test_format_is_detected_and_stated_format_is_enforced(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [chat_row()])
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--format", "preference-jsonl-v1")
    assert result.code == 1
    assert "line 1: this row is a chat conversation, but the version holds preference pairs" in result.err


def test_undetectable_format_names_the_flag(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "hello"}])
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    assert result.code == 1
    assert "line 1: the rows hold only 'text': plain text has no roles" in result.err
    path = write_jsonl(tmp_path / "y.jsonl", [{"question": "q", "answer": "a"}])
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    assert result.code == 1 and "its keys: answer, question" in result.err and "--format" in result.err


def test_a_dataset_holds_one_kind(cli, ns, tmp_path):
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "c.jsonl", [chat_row()])))
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f",
                 str(write_jsonl(tmp_path / "p.jsonl", [pair_row()])))
    assert result.code == 1
    assert f"dataset {ns}/d holds chat conversations; a version of preference pairs cannot be added" in result.err
    assert len(cli.json("registry", "datasets", "versions", f"{ns}/d")["versions"]) == 1


@pytest.mark.parametrize(("case", "row", "words"), BAD_CHAT_ROWS, ids=[c[0] for c in BAD_CHAT_ROWS])
def test_each_chat_rule_is_refused_naming_its_line(cli, ns, tmp_path, case, row, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [chat_row(), chat_row("x"), row])
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--format", "chat-jsonl-v1")
    assert result.code == 1
    assert "nothing was registered" in result.err
    flat = " ".join(result.err.split())
    assert "line 3:" in flat and words in flat
    assert cli("registry", "datasets", "get", f"{ns}/d").code == 1


@pytest.mark.parametrize(("case", "row", "words"), BAD_PAIRS, ids=[c[0] for c in BAD_PAIRS])
def test_each_pair_rule_is_refused_naming_its_line(cli, ns, tmp_path, case, row, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [pair_row(), row])
    result = cli("registry", "datasets", "register", f"{ns}/p", "-f", str(path), "--format", "preference-jsonl-v1")
    assert result.code == 1
    flat = " ".join(result.err.split())
    assert "line 2:" in flat and words in flat


def test_refusal_names_first_twenty_lines_and_counts_the_rest(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [chat_row()] + ["{not json"] * 25)
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--format", "chat-jsonl-v1")
    assert result.code == 1
    assert "the file has 25 bad line(s)" in result.err
    assert "line 2: not valid JSON" in result.err and "line 21:" in result.err and "line 22:" not in result.err
    assert "and 5 more bad line(s)" in result.err


@pytest.mark.parametrize("mode", [["-o", "json"], ["-o", "json-compact"], ["--jq", ".reference"]])
def test_a_refusal_in_json_modes_is_an_error_object_on_stdout(cli, ns, tmp_path, mode):
    path = write_jsonl(tmp_path / "bad.jsonl", [chat_row()] + ["{not json"] * 25)
    text = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--format", "chat-jsonl-v1")
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--format", "chat-jsonl-v1", *mode)
    assert result.code == text.code == 1 and result.err == ""
    error = result.json["error"]
    assert error["message"] == "the file has 25 bad line(s); nothing was registered"
    assert (error["code"], error["status"]) == ("invalid", 422)
    assert error["hint"] == "fix the lines named and try again"
    assert [item["line"] for item in error["errors"]] == list(range(2, 22)) and error["errorCount"] == 25
    assert error["errors"][0]["reason"].startswith("not valid JSON")
    # a refusal the server words (problem+json): its code, status, hint and extra fields are carried
    missing = cli("registry", "datasets", "get", f"{ns}/nothing", *mode)
    assert missing.code == 1 and missing.err == ""
    assert missing.json["error"]["message"] == f"dataset {ns}/nothing does not exist"
    assert (missing.json["error"]["code"], missing.json["error"]["status"]) == ("not_found", 404)
    assert set(missing.json["error"]) >= {"message", "code", "status", "hint"}
    absent = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "absent.jsonl"), *mode)
    assert absent.code == 1 and absent.err == "" and "is not a file" in absent.json["error"]["message"]


def test_alias_on_register_and_alias_set_keep_history(cli, ns, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [chat_row("one")])
    write_jsonl(tmp_path / "b.jsonl", [chat_row("two")])
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "a.jsonl"), "--alias", "prod")
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "b.jsonl"))
    assert cli.json("registry", "datasets", "get", f"{ns}/d:prod")["version"] == 1
    moved = cli.json("registry", "datasets", "alias", "set", f"{ns}/d:prod", "--version", "v2")
    assert moved["reference"] == f"{ns}/d:v2" and moved["moved"] is True
    history = cli.json("registry", "datasets", "alias", "get", f"{ns}/d:prod")["history"]
    assert [h["version"] for h in history] == [1, 2]
    assert cli.json("registry", "datasets", "get", f"{ns}/d:prod")["version"] == 2
    latest = cli.json("registry", "datasets", "alias", "get", f"{ns}/d:latest")
    assert latest["managed"] is True and [h["version"] for h in latest["history"]] == [1, 2]


@pytest.mark.parametrize(("alias", "words"), [("latest", "managed by the registry"), ("v7", "looks like a version")])
def test_alias_set_refusals(cli, ns, tmp_path, alias, words):
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "a.jsonl", [chat_row()])))
    result = cli("registry", "datasets", "alias", "set", f"{ns}/d:{alias}", "--version", "v1")
    assert result.code == 1 and words in result.err


def test_alias_to_missing_version_is_refused(cli, ns, tmp_path):
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "a.jsonl", [chat_row()])))
    result = cli("registry", "datasets", "alias", "set", f"{ns}/d:prod", "--version", "v9")
    assert result.code == 1 and f"dataset {ns}/d has no version v9" in result.err


def test_list_and_namespace_filter(cli, ns, tmp_path):
    cli.ok("registry", "datasets", "register", f"{ns}/a", "-f", str(write_jsonl(tmp_path / "a.jsonl", [chat_row()])))
    cli.ok("registry", "datasets", "register", f"{ns}/b", "-f", str(write_jsonl(tmp_path / "b.jsonl", [pair_row()])))
    listed = cli.json("registry", "datasets", "list", "--namespace", ns)["datasets"]
    assert [(d["dataset"], d["kind"]) for d in listed] == [(f"{ns}/a", "chat"), (f"{ns}/b", "preference")]
    assert f"{ns}/a" in cli.ok("registry", "datasets", "list").out


def test_json_modes_and_jq(cli, ns, tmp_path):
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "a.jsonl", [chat_row()])))
    compact = cli.ok("registry", "datasets", "get", f"{ns}/d", "-o", "json-compact").out
    assert compact.count("\n") == 1 and json.loads(compact)["version"] == 1
    assert cli.ok("registry", "datasets", "get", f"{ns}/d", "--jq", ".examples").out.strip() == "1"


def test_unknown_dataset_and_bad_reference(cli, ns):
    missing = cli("registry", "datasets", "get", f"{ns}/nothing")
    assert missing.code == 1 and f"dataset {ns}/nothing does not exist" in missing.err
    malformed = cli("registry", "datasets", "get", "no-slash")
    assert malformed.code == 2 and "Traceback" not in malformed.err


def test_missing_file_is_refused(cli, ns, tmp_path):
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(tmp_path / "absent.jsonl"))
    assert result.code == 1 and "is not a file" in result.err


def test_a_file_with_a_byte_order_mark_registers_as_its_twin_without_one(cli, ns, tmp_path):
    plain = write_jsonl(tmp_path / "plain.jsonl", [chat_row("a", "b"), chat_row("c", "d")])
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())  # as some editors save it
    first = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(marked))
    assert first["examples"] == 2 and first["bytes"] == plain.stat().st_size
    again = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(plain))
    assert again["digest"] == first["digest"] and again["created"] is False


def test_an_empty_file_and_a_malformed_shard_size_are_refused_as_such(cli, ns, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for extra in ((), ("--format", "chat-jsonl-v1")):
        result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(empty), *extra)
        assert result.code == 1 and "the file is empty" in result.err and "line 1" not in result.err
    path = write_jsonl(tmp_path / "d.jsonl", [chat_row()])
    malformed = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "abc")
    assert malformed.code == 2, malformed.err  # a usage error
    flat = " ".join(malformed.err.split())
    assert "size 'abc' is not a byte size" in flat and "--shard-size" in flat and "Traceback" not in flat
    assert cli("registry", "datasets", "get", f"{ns}/d").code == 1  # nothing was registered
