"""Converting the formats people hold (OpenAI's, TRL's; JSONL, JSON arrays, Parquet) into the registry's rows:
each rule, the record it leaves, and refusals that keep the file's own line or row number."""

from __future__ import annotations

import io
import json

import orjson
import pytest

from optimize.chat.rows import RowError, RowKind, check_row
from optimize.chat.source_files import Container, convert_file, detect_container, inspect_source
from optimize.chat.sources import SourceFormat, convert_row, detect_source
from optimize.core.errors import Invalid

U = {"role": "user", "content": "Weather in Paris?"}
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
LEGACY = {
    "messages": [U, {"role": "assistant", "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                 {"role": "function", "name": "get_weather", "content": "18C"},
                 {"role": "assistant", "content": "It is 18C.", "weight": 1}],
    "functions": [WEATHER],
    "parallel_tool_calls": False,
}


def test_openai_legacy_function_calling_becomes_tools_and_tool_calls():
    assert detect_source(LEGACY) is SourceFormat.OPENAI_CHAT
    row, rules = convert_row(LEGACY, SourceFormat.OPENAI_CHAT)
    check_row(row, RowKind.CHAT)
    assert row["tools"] == [{"type": "function", "function": WEATHER}]
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert row["messages"][2] == {"role": "tool", "tool_call_id": call["id"], "name": "get_weather", "content": "18C"}
    assert row["parallel_tool_calls"] is False and row["messages"][3]["weight"] == 1  # kept as written
    assert "functions" not in row and "function_call" not in row["messages"][1]
    assert rules == ["'functions' became 'tools'", "'function_call' became 'tool_calls'",
                     "'function' messages became 'tool' messages"]


def test_a_function_message_must_answer_a_call_of_its_name():
    row = {"messages": [U, {"role": "function", "name": "get_weather", "content": "18C"},
                        {"role": "assistant", "content": "ok"}]}
    with pytest.raises(RowError, match="message 1 \\(function\\) answers 'get_weather', which no earlier"):
        convert_row(row, SourceFormat.OPENAI_CHAT)


def test_registry_rows_pass_through_every_converter_of_their_kind_unchanged():
    chat = {"messages": [U, {"role": "assistant", "content": "18C", "weight": 1}]}
    pair = {"prompt": [U], "chosen": {"role": "assistant", "content": "a"},
            "rejected": {"role": "assistant", "content": "b"}}
    assert convert_row(chat, SourceFormat.TRL_PROMPT_COMPLETION) == (chat, [])
    assert convert_row(pair, SourceFormat.OPENAI_PREFERENCE) == (pair, [])


def test_openai_preference_rows_become_pairs_with_their_tools():
    row = {"input": {"messages": [U], "tools": [{"type": "function", "function": WEATHER}]},
           "preferred_output": [{"role": "assistant", "content": "18C and sunny"}],
           "non_preferred_output": [{"role": "assistant", "content": "No idea"}]}
    pair, rules = convert_row(row, SourceFormat.OPENAI_PREFERENCE)
    check_row(pair, RowKind.PREFERENCE)
    assert pair == {"prompt": [U], "chosen": row["preferred_output"][0], "rejected": row["non_preferred_output"][0],
                    "tools": row["input"]["tools"]}
    assert "'preferred_output' became 'chosen'" in rules
    two = {**row, "preferred_output": [row["preferred_output"][0]] * 2}
    with pytest.raises(RowError, match="'preferred_output' holds 2 messages"):
        convert_row(two, SourceFormat.OPENAI_PREFERENCE)


@pytest.mark.parametrize("row, rule", [
    ({"prompt": [U], "chosen": [{"role": "assistant", "content": "a"}],
      "rejected": [{"role": "assistant", "content": "b"}]}, "one-message answer lists became the message"),
    ({"prompt": "Weather in Paris?", "chosen": "a", "rejected": "b"}, "a text prompt became one user message"),
    ({"chosen": [U, {"role": "assistant", "content": "a"}], "rejected": [U, {"role": "assistant", "content": "b"}]},
     "the messages both conversations share became the prompt (implicit prompt)"),
])
def test_trl_preference_rows_become_pairs(row, rule):
    assert detect_source(row) is SourceFormat.TRL_PREFERENCE
    pair, rules = convert_row(row, SourceFormat.TRL_PREFERENCE)
    check_row(pair, RowKind.PREFERENCE)
    assert pair["prompt"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert (pair["chosen"]["content"], pair["rejected"]["content"]) == ("a", "b")
    assert rule in rules


def test_trl_prompt_completion_rows_are_conversations_not_pairs():
    text = {"prompt": "Weather in Paris?", "completion": "18C"}
    messages = {"prompt": [U], "completion": [{"role": "assistant", "content": "18C"}]}
    for row in (text, messages):
        assert detect_source(row) is SourceFormat.TRL_PROMPT_COMPLETION
        chat, rules = convert_row(row, SourceFormat.TRL_PROMPT_COMPLETION)
        check_row(chat, RowKind.CHAT)
        assert chat == {"messages": [U, {"role": "assistant", "content": "18C"}]}
        assert "'prompt' and 'completion' became one conversation" in rules


def test_a_file_keeps_its_line_numbers_in_refusals_and_records_the_rules(tmp_path):
    path = tmp_path / "openai.jsonl"
    bad = {"messages": [U, {"role": "function", "name": "nope", "content": "x"}, {"role": "assistant", "content": "a"}]}
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in (LEGACY, LEGACY, bad)) + b"\n")
    container, source = inspect_source(path)
    assert (container, source) == (Container.JSONL, SourceFormat.OPENAI_CHAT)
    conversion = convert_file(path, container, source, io.BytesIO())
    assert conversion.error_count == 1 and conversion.errors[0]["line"] == 3
    assert "'nope', which no earlier function_call made" in conversion.errors[0]["reason"]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in (LEGACY, LEGACY)) + b"\n")
    out = io.BytesIO()
    record = convert_file(path, container, source, out).record()
    assert record == {"sourceFormat": "openai-chat-jsonl", "container": "jsonl", "format": "chat-jsonl-v1", "rows": 2,
                      "rules": [{"rule": "'functions' became 'tools'", "rows": 2},
                                {"rule": "'function_call' became 'tool_calls'", "rows": 2},
                                {"rule": "'function' messages became 'tool' messages", "rows": 2}]}
    assert [json.loads(line)["tools"][0]["function"]["name"] for line in out.getvalue().splitlines()] == \
        ["get_weather"] * 2


def test_json_arrays_are_read_by_their_leading_byte_and_refusals_name_rows(tmp_path):
    path = tmp_path / "rows.txt"  # the name says nothing; the bytes do
    path.write_text(json.dumps([{"prompt": "hi", "completion": "hello"}, {"prompt": "x", "completion": 5}]))
    assert detect_container(path) is Container.JSON_ARRAY
    conversion = convert_file(path, *inspect_source(path), None)
    assert conversion.errors == [{"row": 2, "reason": "'completion' must be text or a non-empty list of messages"}]


def test_parquet_rows_convert_with_the_shared_columns_nulls_dropped(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    rows = [{"messages": [U, {"role": "assistant", "content": "18C"}]},
            {"messages": [U, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}]
    path = tmp_path / "train.parquet"
    parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    assert detect_container(path) is Container.PARQUET
    out = io.BytesIO()
    conversion = convert_file(path, *inspect_source(path), out)
    assert conversion.error_count == 0 and conversion.rows == 2
    written = [json.loads(line) for line in out.getvalue().splitlines()]
    assert written[0] == rows[0]  # the null tool_calls column of the first row is gone
    assert written[1]["messages"][1]["tool_calls"][0]["id"] == "c1" and "content" not in written[1]["messages"][1]
    assert {"rule": "null fields of Parquet's shared columns dropped", "rows": 2} in conversion.record()["rules"]


def test_text_rows_and_unknown_shapes_are_refused_naming_what_to_write(tmp_path):
    path = tmp_path / "text.jsonl"
    path.write_text('{"text": "Once upon a time"}\n')
    with pytest.raises(Invalid, match="line 1: the rows hold only 'text': plain text has no roles"):
        inspect_source(path)
    path.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(Invalid, match="its keys: answer, question.*chat rows have 'messages'"):
        inspect_source(path)


def test_a_byte_order_mark_opening_a_jsonl_file_or_an_array_is_not_part_of_the_rows(tmp_path):
    path = tmp_path / "marked.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(LEGACY) + b"\n" + orjson.dumps(LEGACY) + b"\n")
    container, source = inspect_source(path)
    assert (container, source) == (Container.JSONL, SourceFormat.OPENAI_CHAT)
    conversion = convert_file(path, container, source, io.BytesIO())
    assert (conversion.rows, conversion.error_count) == (2, 0)
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps([{"prompt": "hi", "completion": "hello"}]))
    assert detect_container(path) is Container.JSON_ARRAY
    assert convert_file(path, *inspect_source(path), None).rows == 1


@pytest.mark.parametrize("data", [b"", b"\xef\xbb\xbf"], ids=["empty", "only-a-byte-order-mark"])
def test_an_empty_file_is_refused_as_empty_not_as_a_row(tmp_path, data):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(data)
    with pytest.raises(Invalid, match="the file is empty") as refused:
        inspect_source(path, SourceFormat.CHAT)
    assert "line 1" not in refused.value.message
    with pytest.raises(Invalid, match="the file is empty"):
        inspect_source(path)
