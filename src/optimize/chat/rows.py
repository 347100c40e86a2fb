"""Row rules for chat conversations and preference pairs (release notes 0.9.0; reference.md §3.9).

A chat row is `{"messages": [...], "tools"?: [...], "parallel_tool_calls"?: bool}` and ends with an assistant
message whose text and/or `tool_calls` are its answer. Every tool call before the answer is answered by a `tool`
message naming its `tool_call_id`; the answer's own calls may stay unanswered. An assistant message may carry
`weight: 0|1` (OpenAI's loss mask): 1 trains the message whatever `loss.assistantTurns` says, 0 never trains it,
and without a weight the policy decides. A preference pair is
`{"prompt": [...], "chosen": {...}, "rejected": {...}, "tools"?: [...]}`.

Files in other formats (OpenAI's legacy function calling and preference rows, TRL's rows, JSON arrays, Parquet)
are converted into these rows before registration: see `chat/sources.py`.

`check_*` functions return a `RowFacts` or raise `RowError` with a sentence that says what to change; the
caller adds the line number. They never modify the row: tools and arguments are kept exactly as written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from optimize.chat.images import path_error

ROLES = ("system", "user", "assistant", "tool")


class RowKind(StrEnum):
    CHAT = "chat"
    PREFERENCE = "preference"
    PREPARED = "prepared"  # token ids and loss masks in Parquet (chat/prepared): no JSON row of its own


class RowError(ValueError):
    """A row breaks a rule; the message names the message or field and what to change."""


@dataclass(frozen=True, slots=True)
class RowFacts:
    """What upload counts about a valid row."""

    offers_tools: bool


def detect_kind(row: Any) -> RowKind | None:
    """The kind a row looks like, by its keys; None when it looks like neither. Prompt/completion rows are
    conversations (a prompt and its answer), not pairs."""
    if isinstance(row, dict):
        if "messages" in row or ("completion" in row and "chosen" not in row):
            return RowKind.CHAT
        if "prompt" in row or "chosen" in row or "rejected" in row or "preferred_output" in row:
            return RowKind.PREFERENCE
    return None


def check_row(row: Any, kind: RowKind) -> RowFacts:
    if not isinstance(row, dict):
        raise RowError(f"a row must be a JSON object, not {_json_type(row)}")
    looks_like = detect_kind(row)
    if looks_like is not None and looks_like is not kind:
        raise RowError(
            f"this row is a {_kind_words(looks_like)}, but the version holds {_kind_words(kind)}s; "
            "a dataset holds chat conversations or preference pairs, never both"
        )
    nul = _nul_in(row, "")
    if nul is not None:  # PostgreSQL keeps no NUL in text: what is scored or stored from the row would fail later
        raise RowError(f"{nul} holds a NUL character (\\u0000); remove it: no text in a row can hold one")
    if kind is RowKind.CHAT:
        return check_chat_row(row)
    return check_preference_pair(row)


def _nul_in(value: Any, path: str) -> str | None:
    """`field messages[1].content` (or `a key of …`) where the first NUL character of the row is, or None."""
    if isinstance(value, str):
        return f"field {path}" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return f"a key of {f'field {path}' if path else 'the row'}"
            found = _nul_in(item, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_in(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _refuse_foreign_shapes(row: dict[str, Any]) -> None:
    """Name the format of a row written in another format, and the --format that converts it (a file whose
    first row is in that format is converted without one)."""
    if "messages" not in row and "prompt" not in row and isinstance(row.get("text"), str):
        raise RowError("the row holds only 'text': plain text has no roles, so there is no answer to train; "
                       "write chat rows {\"messages\": [...]} or prompt/completion rows")
    for keys, words, fmt in _FOREIGN:
        if any(key in row for key in keys):
            raise RowError(f"the row is {words}; register the file with --format {fmt}, which converts it")


_FOREIGN = (
    (("functions", "function_call"), "in OpenAI's legacy function calling ('functions'/'function_call')",
     "openai-chat-jsonl"),
    (("completion",), "a prompt/completion row (TRL)", "trl-prompt-completion"),
    (("input", "preferred_output", "non_preferred_output"), "an OpenAI preference row", "openai-preference-jsonl"),
)


def check_chat_row(row: dict[str, Any]) -> RowFacts:
    _refuse_foreign_shapes(row)
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RowError("'messages' must be a non-empty list of messages")
    offers_tools = _check_tools(row)
    parallel = row.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RowError(f"'parallel_tool_calls' must be true or false, not {_json_type(parallel)}")
    for position, message in enumerate(messages):
        _check_message(message, position)
        _check_weight(message, position)
    answer = messages[-1]
    if answer["role"] != "assistant":
        raise RowError(
            f"the last message must be an assistant message (the answer to train); it is a {answer['role']} message"
        )
    if not _has_text(answer) and not answer.get("tool_calls"):
        raise RowError(f"the answer (message {len(messages) - 1}) has neither text nor tool_calls")
    _check_calls_answered(messages[:-1])
    if all(m.get("weight") == 0 for m in messages if m["role"] == "assistant"):
        raise RowError("every assistant message has weight 0, so the row trains nothing; give the answer "
                       "weight 1 (or no weight), or leave the row out")
    return RowFacts(offers_tools)


def _check_weight(message: dict[str, Any], position: int) -> None:
    if "weight" not in message:
        return
    weight = message["weight"]
    if message["role"] != "assistant":
        raise RowError(f"message {position} ({message['role']}) has a weight; only assistant messages are "
                       "weighted (1 trains the message, 0 does not)")
    if type(weight) is not int or weight not in (0, 1):
        raise RowError(f"message {position} (assistant) has weight {weight!r}; a weight is 0 (not trained) or "
                       "1 (trained)")


def check_preference_pair(row: dict[str, Any]) -> RowFacts:
    _refuse_foreign_shapes(row)
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise RowError("'prompt' must be a non-empty list of messages")
    offers_tools = _check_tools(row)
    for position, message in enumerate(prompt):
        _check_message(message, position, where="prompt message")
        if isinstance(message, dict) and "weight" in message:
            raise RowError(f"prompt message {position} has a weight; weights mark the assistant messages of chat "
                           "rows that train, and a pair trains its answers")
    last = prompt[-1]["role"]
    if last not in ("user", "tool"):
        raise RowError(
            f"the prompt must end with a user message or with tool messages answering its last calls; "
            f"it ends with a {last} message"
        )
    _check_calls_answered(prompt)
    answers = []
    for field in ("chosen", "rejected"):
        answers.append(_check_answer(row.get(field), field))
    if _canonical(answers[0]) == _canonical(answers[1]):
        raise RowError("'chosen' and 'rejected' are the same answer; a pair needs two different answers")
    return RowFacts(offers_tools)


def _check_answer(answer: Any, field: str) -> dict[str, Any]:
    if isinstance(answer, (list, str)):
        raise RowError(f"'{field}' is {_json_type(answer)}, as TRL writes preference rows; register the file with "
                       "--format trl-preference, which converts it to one assistant message")
    if not isinstance(answer, dict):
        raise RowError(f"'{field}' must be one assistant message (an object), not {_json_type(answer)}")
    role = answer.get("role", "assistant")
    if role != "assistant":
        raise RowError(f"'{field}' must be an assistant message; its role is {role!r}")
    _check_message({**answer, "role": "assistant"}, 0, where=f"'{field}'", label=False)
    if not _has_text(answer) and not answer.get("tool_calls"):
        raise RowError(f"'{field}' is empty; an answer needs text or tool_calls")
    return answer


def _check_message(message: Any, position: int, where: str = "message", label: bool = True) -> None:
    name = f"{where} {position}" if label else where
    if not isinstance(message, dict):
        raise RowError(f"{name} must be an object, not {_json_type(message)}")
    role = message.get("role")
    if role == "function":
        raise RowError(f"{name} has role 'function' (OpenAI's legacy function calling); register the file "
                       "with --format openai-chat-jsonl, which converts it to a tool message")
    if role not in ROLES:
        raise RowError(f"{name} has role {role!r}; roles are system, user, assistant and tool")
    content = message.get("content")
    calls = message.get("tool_calls")
    if message.get("function_call") is not None:
        raise RowError(f"{name} carries 'function_call' (OpenAI's legacy function calling); register the file "
                       "with --format openai-chat-jsonl, which converts it to tool_calls")
    if role == "assistant":
        if content is not None:
            _check_content(content, name)
        if calls is not None:
            _check_tool_calls(calls, name)
        if content is None and not calls:
            raise RowError(f"{name} (assistant) has neither content nor tool_calls")
        return
    if calls is not None:
        raise RowError(f"{name} ({role}) carries tool_calls; only assistant messages call tools")
    if content is None:
        raise RowError(f"{name} ({role}) has no content")
    _check_content(content, name, images=role == "user")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RowError(f"{name} (tool) needs the tool_call_id of the call it answers")


def _check_content(content: Any, name: str, images: bool = False) -> None:
    """A message's content: text, or a list of parts — text, and in a user message images
    (`{"type": "image", "path": "images/x.png"}`, the path relative to the rows' file; chat/images)."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise RowError(f"{name} content must be a string or a list of parts, not {_json_type(content)}")
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise RowError(f"{name} content part {index} (text) needs a string 'text'")
        elif kind == "image" and images:
            why = path_error(part.get("path"))
            if why:
                raise RowError(f"{name} content part {index}: {why}")
        elif kind == "image":
            raise RowError(f"{name} content part {index} is an image; only a user message holds images")
        elif kind == "image_url":
            raise RowError(f"{name} content part {index} is an image_url; a row names an image by its file: "
                           '{"type": "image", "path": "images/x.png"}, the path relative to the rows\' file')
        else:
            raise RowError(f"{name} content part {index} must be an object of type 'text'" + (
                " or 'image'" if images else ""))


def _check_tool_calls(calls: Any, name: str) -> None:
    if not isinstance(calls, list):
        raise RowError(f"{name} tool_calls must be a list, not {_json_type(calls)}")
    seen: set[str] = set()
    for index, call in enumerate(calls):
        label = f"{name} tool call {index}"
        if not isinstance(call, dict):
            raise RowError(f"{label} must be an object, not {_json_type(call)}")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise RowError(f"{label} needs a string 'id'")
        if call_id in seen:
            raise RowError(f"{name} has two tool calls with id {call_id!r}; ids within one message must differ")
        seen.add(call_id)
        if call.get("type", "function") != "function":
            raise RowError(f"{label} has type {call.get('type')!r}; only 'function' calls are supported")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise RowError(f"{label} needs 'function' with a non-empty 'name'")
        _check_arguments(function.get("arguments"), label)


def _check_arguments(arguments: Any, label: str) -> None:
    if isinstance(arguments, dict):
        return
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            raise RowError(f"{label} arguments are a string that is not JSON; write an object") from None
        if isinstance(parsed, dict):
            return
        raise RowError(f"{label} arguments are a JSON string holding {_json_type(parsed)}; they must hold an object")
    raise RowError(f"{label} arguments must be an object or a JSON string holding one, not {_json_type(arguments)}")


def _check_calls_answered(messages: list[dict[str, Any]]) -> None:
    """Every call in `messages` is answered by a later tool message; every tool message answers a call."""
    pending: dict[str, int] = {}
    for position, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in pending:
                raise RowError(
                    f"message {position} (tool) answers tool_call_id {call_id!r}, which no earlier "
                    "unanswered assistant call has"
                )
            del pending[call_id]
            continue
        if pending and role in ("user", "assistant"):
            call_id, owner = next(iter(pending.items()))
            raise RowError(
                f"tool call {call_id!r} of message {owner} is not answered before message {position}; "
                "answer every call with a tool message naming its tool_call_id"
            )
        for call in message.get("tool_calls") or ():
            pending[call["id"]] = position
    if pending:
        call_id, owner = next(iter(pending.items()))
        raise RowError(
            f"tool call {call_id!r} of message {owner} is not answered; "
            "answer every call before the answer with a tool message naming its tool_call_id"
        )


def _check_tools(row: dict[str, Any]) -> bool:
    tools = row.get("tools")
    if tools is None:
        return False
    if not isinstance(tools, list):
        raise RowError(f"'tools' must be a list of function definitions, not {_json_type(tools)}")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(function, dict):
            raise RowError(f"tool {index} must be a function definition: "
                           "{\"type\": \"function\", \"function\": {...}}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RowError(f"tool {index} needs a non-empty function 'name'")
    return bool(tools)


def _has_text(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any((part.get("text") or "").strip() for part in content)
    return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _kind_words(kind: RowKind) -> str:
    return "chat conversation" if kind is RowKind.CHAT else "preference pair"
