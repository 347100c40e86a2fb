"""Registering the files people hold through `akka registry datasets register|convert`, against real servers
(SQLite, PostgreSQL): OpenAI's and TRL's rows, JSON arrays and Parquet become the registry's rows, the version
records the conversion, and refusals keep the file's own line or row numbers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest

from tests.conftest import chat_row, write_jsonl

pytestmark = pytest.mark.integration

U = {"role": "user", "content": "Weather in Paris?"}
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
OPENAI_LEGACY = {
    "messages": [U, {"role": "assistant", "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                 {"role": "function", "name": "get_weather", "content": "18C"},
                 {"role": "assistant", "content": "It is 18C.", "weight": 1}],
    "functions": [WEATHER], "parallel_tool_calls": False,
}


def stored_rows(cli, reference: str) -> list[dict]:
    """The version's rows as the registry holds them (its object, read where `get` says the blob store keeps it)."""
    location = cli.json("registry", "datasets", "get", reference)["objects"][0]["location"]
    return [json.loads(line) for line in Path(url2pathname(urlparse(location).path)).read_text().splitlines()]


def test_openai_chat_rows_register_as_chat_rows_with_the_conversion_recorded(cli, ns, tmp_path):
    path = write_jsonl(tmp_path / "openai.jsonl", [OPENAI_LEGACY, chat_row("hi", "hello")])
    version = cli.json("registry", "datasets", "register", f"{ns}/weather", "-f", str(path))
    assert (version["format"], version["examples"], version["toolRows"]) == ("chat-jsonl-v1", 2, 1)
    conversion = version["conversion"]
    assert (conversion["sourceFormat"], conversion["container"], conversion["rows"]) == \
        ("openai-chat-jsonl", "jsonl", 2)
    assert {"rule": "'functions' became 'tools'", "rows": 1} in conversion["rules"]
    assert cli.json("registry", "datasets", "get", f"{ns}/weather:v1")["conversion"] == conversion
    text = cli.ok("registry", "datasets", "get", f"{ns}/weather").out
    assert "Converted openai-chat-jsonl rows in a jsonl file (2 rows)" in text
    stored = stored_rows(cli, f"{ns}/weather:v1")[0]
    assert stored["tools"] == [{"type": "function", "function": WEATHER}]
    assert stored["messages"][2]["tool_call_id"] == stored["messages"][1]["tool_calls"][0]["id"]
    assert stored["parallel_tool_calls"] is False and stored["messages"][3]["weight"] == 1
    # the conversion is deterministic: the same file is the same version
    again = cli.json("registry", "datasets", "register", f"{ns}/weather", "-f", str(path))
    assert again["reference"] == f"{ns}/weather:v1" and again["created"] is False


def test_registry_rows_with_weights_are_sent_byte_for_byte(cli, ns, tmp_path):
    row = {"messages": [U, {"role": "assistant", "content": "18C", "weight": 0}, U,
                        {"role": "assistant", "content": "Still 18C."}], "parallel_tool_calls": True}
    path = write_jsonl(tmp_path / "weighted.jsonl", [row])
    version = cli.json("registry", "datasets", "register", f"{ns}/w", "-f", str(path))
    assert version["conversion"] is None
    assert version["objects"][0]["digest"] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_preference_rows_of_openai_and_trl_register_as_pairs(cli, ns, tmp_path):
    openai = write_jsonl(tmp_path / "openai-prefs.jsonl", [
        {"input": {"messages": [U]}, "preferred_output": [{"role": "assistant", "content": "18C and sunny"}],
         "non_preferred_output": [{"role": "assistant", "content": "No idea"}]}])
    version = cli.json("registry", "datasets", "register", f"{ns}/oa", "-f", str(openai))
    assert (version["format"], version["pairs"], version["conversion"]["sourceFormat"]) == \
        ("preference-jsonl-v1", 1, "openai-preference-jsonl")
    assert stored_rows(cli, f"{ns}/oa:v1") == [{"prompt": [U],
                                                "chosen": {"role": "assistant", "content": "18C and sunny"},
                                                "rejected": {"role": "assistant", "content": "No idea"}}]
    trl = tmp_path / "trl.json"  # a JSON array, with an implicit prompt in one row
    trl.write_text(json.dumps([
        {"prompt": [U], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant",
                                                                                         "content": "b"}]},
        {"chosen": [U, {"role": "assistant", "content": "c"}], "rejected": [U, {"role": "assistant", "content": "d"}]},
    ]))
    version = cli.json("registry", "datasets", "register", f"{ns}/trl", "-f", str(trl))
    assert (version["pairs"], version["conversion"]["container"]) == (2, "json-array")
    assert [row["chosen"]["content"] for row in stored_rows(cli, f"{ns}/trl:v1")] == ["a", "c"]


def test_prompt_completion_parquet_registers_as_conversations(cli, ns, tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "sft.parquet"
    parquet.write_table(pyarrow.Table.from_pylist([{"prompt": "Say hi", "completion": "Hi!"},
                                                    {"prompt": "Say bye", "completion": "Bye!"}]), path)
    version = cli.json("registry", "datasets", "register", f"{ns}/pc", "-f", str(path))
    assert (version["format"], version["examples"]) == ("chat-jsonl-v1", 2)
    assert version["conversion"]["sourceFormat"] == "trl-prompt-completion"
    assert stored_rows(cli, f"{ns}/pc:v1")[1] == {"messages": [{"role": "user", "content": "Say bye"},
                                                              {"role": "assistant", "content": "Bye!"}]}


def test_a_refused_conversion_names_rows_and_registers_nothing(cli, ns, tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"prompt": "ok", "completion": "fine"}, {"prompt": "x", "completion": 5},
                                {"prompt": [], "completion": "y"}]))
    result = cli("registry", "datasets", "register", f"{ns}/bad", "-f", str(path), "-o", "json")
    assert result.code == 1
    error = result.json["error"]
    assert error["message"] == "the file has 2 bad row(s); nothing was registered"
    assert [item["row"] for item in error["errors"]] == [2, 3]
    text = cli("registry", "datasets", "register", f"{ns}/bad", "-f", str(path))
    assert "row 2: 'completion' must be text" in text.err and "row 3: 'prompt' must be text" in text.err
    assert cli("registry", "datasets", "get", f"{ns}/bad").code == 1
    legacy_later = write_jsonl(tmp_path / "mixed.jsonl", [chat_row(), OPENAI_LEGACY])
    result = cli("registry", "datasets", "register", f"{ns}/mixed", "-f", str(legacy_later))
    assert result.code == 1 and "line 2:" in result.err and "--format openai-chat-jsonl" in result.err
    stated = cli.json("registry", "datasets", "register", f"{ns}/mixed", "-f", str(legacy_later),
                      "--format", "openai-chat-jsonl")
    assert stated["examples"] == 2 and stated["conversion"]["rows"] == 2


def test_convert_shows_and_writes_the_conversion_without_a_server(cli, tmp_path):
    path = write_jsonl(tmp_path / "openai.jsonl", [OPENAI_LEGACY])
    shown = cli.json("registry", "datasets", "convert", str(path), "--to", "chat-jsonl-v1")
    assert shown["conversion"]["format"] == "chat-jsonl-v1" and shown["written"] is None
    assert shown["preview"][0]["tools"][0]["function"]["name"] == "get_weather"
    target = tmp_path / "out.jsonl"
    cli.ok("registry", "datasets", "convert", str(path), "--out", str(target))
    assert [json.loads(line) for line in target.read_text().splitlines()] == shown["preview"]
    again = cli("registry", "datasets", "convert", str(path), "--out", str(target))
    assert again.code == 1 and "exists" in again.err
    wrong = cli("registry", "datasets", "convert", str(path), "--to", "preference-jsonl-v1")
    assert wrong.code == 1 and "convert to chat-jsonl-v1, not preference-jsonl-v1" in wrong.err
