"""The row formats people already hold, and the rules that convert each into the registry's rows.

A source format is a row shape; a file's container (JSONL, a JSON array, Parquet) is read by
`chat/source_files.py`. Each converter takes one row and returns it in the registry's shape with the names of
the rules it applied, or raises `RowError` naming what cannot be converted. A row already in the registry's
shape passes through a converter unchanged, so a file mixing both converts row by row.

- `openai-chat-jsonl`: OpenAI's chat fine-tuning rows. `weight` and `parallel_tool_calls` are the registry's own
  fields; the legacy `functions` become `tools`, an assistant's `function_call` a `tool_calls` entry and a
  `function` message the `tool` message answering it.
- `openai-preference-jsonl`: `input` (messages, tools), `preferred_output`, `non_preferred_output`.
- `trl-preference`: TRL's `prompt`/`chosen`/`rejected`, as message lists or as text, with the prompt explicit or
  implicit (the messages both conversations share).
- `trl-prompt-completion`: TRL's `prompt`/`completion`, as message lists or as text: one conversation.
A `text` column is refused: plain text has no roles, so there is no answer to train.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from optimize.chat.formats import parse_named
from optimize.chat.rows import RowError, RowKind, detect_kind


class SourceFormat(StrEnum):
    CHAT = "chat-jsonl-v1"
    PREFERENCE = "preference-jsonl-v1"
    OPENAI_CHAT = "openai-chat-jsonl"
    OPENAI_PREFERENCE = "openai-preference-jsonl"
    TRL_PREFERENCE = "trl-preference"
    TRL_PROMPT_COMPLETION = "trl-prompt-completion"

    @property
    def kind(self) -> RowKind:
        chat = (SourceFormat.CHAT, SourceFormat.OPENAI_CHAT, SourceFormat.TRL_PROMPT_COMPLETION)
        return RowKind.CHAT if self in chat else RowKind.PREFERENCE

    @property
    def native(self) -> bool:
        return self in (SourceFormat.CHAT, SourceFormat.PREFERENCE)


Converted = tuple[dict[str, Any], list[str]]


def parse_source_format(text: str) -> SourceFormat:
    return parse_named(SourceFormat, text)


def detect_source(row: Any) -> SourceFormat | None:
    """The format a row is written in, by its keys; None when it is in none of them."""
    if not isinstance(row, dict):
        return None
    if "messages" in row:
        return SourceFormat.OPENAI_CHAT if _legacy_functions(row) else SourceFormat.CHAT
    if "input" in row or "preferred_output" in row or "non_preferred_output" in row:
        return SourceFormat.OPENAI_PREFERENCE
    if "completion" in row and "chosen" not in row:
        return SourceFormat.TRL_PROMPT_COMPLETION
    if "chosen" in row or "rejected" in row:
        answers = (row.get("chosen"), row.get("rejected"))
        native = isinstance(row.get("prompt"), list) and all(isinstance(a, dict) for a in answers)
        return SourceFormat.PREFERENCE if native else SourceFormat.TRL_PREFERENCE
    kind = detect_kind(row)
    return SourceFormat.PREFERENCE if kind is RowKind.PREFERENCE else None


def undetected_reason(row: Any) -> str:
    """Why a row shows no known format, and what to write instead."""
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        return ("the rows hold only 'text': plain text has no roles, so there is no answer to train; write chat "
                "rows {\"messages\": [...]} or prompt/completion rows")
    keys = ", ".join(sorted(row)[:8]) if isinstance(row, dict) else "no keys (it is not a JSON object)"
    return (f"the row is in no format Optimize reads (its keys: {keys}); chat rows have 'messages', preference "
            "pairs 'prompt', 'chosen' and 'rejected', prompt/completion rows 'prompt' and 'completion', OpenAI "
            "preference rows 'input', 'preferred_output' and 'non_preferred_output'")


def _legacy_functions(row: dict[str, Any]) -> bool:
    messages = row.get("messages")
    return "functions" in row or "function_call" in row or (isinstance(messages, list) and any(
        isinstance(m, dict) and (m.get("role") == "function" or "function_call" in m) for m in messages))


# --- OpenAI chat ---------------------------------------------------------------------------------------------


def convert_openai_chat(row: dict[str, Any]) -> Converted:
    rules: list[str] = []
    converted = {key: value for key, value in row.items() if key not in ("functions", "function_call")}
    if "function_call" in row:
        rules.append("the request-level 'function_call' setting dropped (it does not train)")
    functions = row.get("functions")
    if functions is not None:
        if not isinstance(functions, list):
            raise RowError("'functions' must be a list of function definitions")
        converted["tools"] = [*(row.get("tools") or []), *({"type": "function", "function": f} for f in functions)]
        rules.append("'functions' became 'tools'")
    messages = row.get("messages")
    if isinstance(messages, list):
        converted["messages"] = _convert_function_messages(messages, rules)
    return converted, rules


def _convert_function_messages(messages: list[Any], rules: list[str]) -> list[Any]:
    """`function_call` → one `tool_calls` entry with a made-up id; a `function` message → the `tool` message
    answering the newest unanswered call of that name."""
    out: list[Any] = []
    pending: list[tuple[str, str]] = []  # (call id, function name), oldest first
    for position, message in enumerate(messages):
        if not isinstance(message, dict):
            out.append(message)
            continue
        call = message.get("function_call")
        if call is not None:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise RowError(f"message {position} has a 'function_call' without a 'name'")
            call_id = f"call_{position}"
            message = {key: value for key, value in message.items() if key != "function_call"}
            message["tool_calls"] = [{"id": call_id, "type": "function",
                                      "function": {"name": call["name"], "arguments": call.get("arguments", "{}")}}]
            pending.append((call_id, call["name"]))
            _note(rules, "'function_call' became 'tool_calls'")
        elif message.get("role") == "function":
            name = message.get("name")
            match = next((i for i in range(len(pending) - 1, -1, -1) if pending[i][1] == name), None)
            if match is None:
                raise RowError(f"message {position} (function) answers {name!r}, which no earlier function_call "
                               "made")
            call_id, _ = pending.pop(match)
            message = {key: value for key, value in message.items() if key != "role"}
            message = {"role": "tool", "tool_call_id": call_id, **message}
            _note(rules, "'function' messages became 'tool' messages")
        out.append(message)
    return out


# --- preference rows -----------------------------------------------------------------------------------------


def convert_openai_preference(row: dict[str, Any]) -> Converted:
    given = row.get("input")
    if not isinstance(given, dict) or not isinstance(given.get("messages"), list):
        raise RowError("'input' must be an object holding 'messages' (the prompt)")
    pair: dict[str, Any] = {"prompt": given["messages"]}
    for source, target in (("preferred_output", "chosen"), ("non_preferred_output", "rejected")):
        pair[target] = _one_answer(row.get(source), source)
    if given.get("tools"):
        pair["tools"] = given["tools"]
    return pair, ["'input.messages' became 'prompt'", "'preferred_output' became 'chosen'",
                  "'non_preferred_output' became 'rejected'"]


def convert_trl_preference(row: dict[str, Any]) -> Converted:
    rules: list[str] = []
    if "prompt" not in row:
        prompt, chosen, rejected = _implicit_prompt(row.get("chosen"), row.get("rejected"))
        rules.append("the messages both conversations share became the prompt (implicit prompt)")
    else:
        prompt = _prompt(row["prompt"], rules)
        chosen, rejected = row.get("chosen"), row.get("rejected")
    pair: dict[str, Any] = {"prompt": prompt}
    for field, answer in (("chosen", chosen), ("rejected", rejected)):
        if isinstance(answer, str):
            _note(rules, "text answers became assistant messages")
            pair[field] = {"role": "assistant", "content": answer}
        else:
            pair[field] = _one_answer(answer, field)
            if isinstance(answer, list):
                _note(rules, "one-message answer lists became the message")
    if row.get("tools"):
        pair["tools"] = row["tools"]
    return pair, rules


def convert_trl_prompt_completion(row: dict[str, Any]) -> Converted:
    rules: list[str] = []
    prompt = _prompt(row.get("prompt"), rules)
    completion = row.get("completion")
    if isinstance(completion, str):
        answer = [{"role": "assistant", "content": completion}]
        _note(rules, "a text completion became the assistant's answer")
    elif isinstance(completion, list) and completion:
        answer = completion
    else:
        raise RowError("'completion' must be text or a non-empty list of messages")
    converted: dict[str, Any] = {"messages": [*prompt, *answer]}
    if row.get("tools"):
        converted["tools"] = row["tools"]
    rules.append("'prompt' and 'completion' became one conversation")
    return converted, rules


def _prompt(prompt: Any, rules: list[str]) -> list[Any]:
    if isinstance(prompt, str):
        _note(rules, "a text prompt became one user message")
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt:
        return prompt
    raise RowError("'prompt' must be text or a non-empty list of messages")


def _one_answer(answer: Any, field: str) -> Any:
    if isinstance(answer, list):
        if len(answer) != 1:
            raise RowError(f"'{field}' holds {len(answer)} messages; an answer is one assistant message")
        return answer[0]
    if isinstance(answer, dict):
        return answer
    raise RowError(f"'{field}' must be one assistant message (or a list holding one)")


def _implicit_prompt(chosen: Any, rejected: Any) -> tuple[list[Any], Any, Any]:
    """The messages two whole conversations share are the prompt; what each adds is its answer."""
    if not isinstance(chosen, list) or not isinstance(rejected, list):
        raise RowError("without a 'prompt', 'chosen' and 'rejected' must be whole conversations (message lists) "
                       "that share their opening messages")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if not shared:
        raise RowError("'chosen' and 'rejected' share no opening message, so there is no prompt; add 'prompt'")
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _identity(row: dict[str, Any]) -> Converted:
    return row, []


def _note(rules: list[str], rule: str) -> None:
    if rule not in rules:
        rules.append(rule)


CONVERTERS: dict[SourceFormat, Callable[[dict[str, Any]], Converted]] = {
    SourceFormat.CHAT: _identity,
    SourceFormat.PREFERENCE: _identity,
    SourceFormat.OPENAI_CHAT: convert_openai_chat,
    SourceFormat.OPENAI_PREFERENCE: convert_openai_preference,
    SourceFormat.TRL_PREFERENCE: convert_trl_preference,
    SourceFormat.TRL_PROMPT_COMPLETION: convert_trl_prompt_completion,
}


def convert_row(row: Any, source: SourceFormat) -> Converted:
    """One row of a `source` file in the registry's shape, with the rules applied. Each row converts by its own
    shape when that holds the file's kind of rows (a file may mix the registry's rows with OpenAI's legacy
    ones); a row already in the registry's shape is returned as it is."""
    if not isinstance(row, dict):
        raise RowError("a row must be a JSON object")
    shape = detect_source(row)
    return CONVERTERS[shape if shape is not None and shape.kind is source.kind else source](row)
