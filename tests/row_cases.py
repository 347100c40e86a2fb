"""Rows that break each row rule, with words the refusal must contain; shared by unit and CLI tests."""

from __future__ import annotations

U = {"role": "user", "content": "q"}
A = {"role": "assistant", "content": "a"}


def call(call_id: str = "c1", arguments=None) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": "lookup", "arguments": {"q": 1} if arguments is None else arguments}}


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

BAD_CHAT_ROWS = [
    ("not-an-object", [1, 2], "must be a JSON object"),
    ("no-messages", {"conversation": []}, "'messages' must be a non-empty list"),
    ("empty-messages", {"messages": []}, "'messages' must be a non-empty list"),
    ("unknown-role", {"messages": [{"role": "bot", "content": "x"}, A]}, "has role 'bot'"),
    ("ends-with-user", {"messages": [U, A, U]}, "the last message must be an assistant message"),
    ("empty-answer", {"messages": [U, {"role": "assistant", "content": "  "}]}, "has neither text nor tool_calls"),
    ("user-without-content", {"messages": [{"role": "user"}, A]}, "(user) has no content"),
    ("content-number", {"messages": [{"role": "user", "content": 5}, A]},
     "content must be a string or a list of parts"),
    ("bad-part", {"messages": [{"role": "user", "content": [{"type": "audio"}]}, A]}, "of type 'text'"),
    ("image-path-outside", {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                                                      {"type": "image", "path": "../x.png"}]}, A]},
     "message 0 content part 1: image path '../x.png' is not a plain path inside the rows' folder"),
    ("image-url-part", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}, A]},
     "is an image_url; a row names an image by its file"),
    ("image-in-answer", {"messages": [U, {"role": "assistant", "content": [
        {"type": "image", "path": "images/x.png"}]}]}, "is an image; only a user message holds images"),
    ("unanswered-call", {"messages": [U, {"role": "assistant", "content": "x", "tool_calls": [call()]}, U, A]},
     "tool call 'c1' of message 1 is not answered"),
    ("unanswered-before-answer", {"messages": [U, {"role": "assistant", "tool_calls": [call()]}, A]},
     "tool call 'c1' of message 1 is not answered"),
    ("tool-answers-nothing", {"messages": [U, {"role": "tool", "tool_call_id": "zz", "content": "r"}, A]},
     "answers tool_call_id 'zz', which no earlier unanswered assistant call has"),
    ("tool-without-id", {"messages": [U, {"role": "assistant", "tool_calls": [call()]},
                                      {"role": "tool", "content": "r"}, A]}, "needs the tool_call_id"),
    ("duplicate-call-ids", {"messages": [U, {"role": "assistant", "tool_calls": [call("c1"), call("c1")]}]},
     "two tool calls with id 'c1'"),
    ("call-without-name", {"messages": [U, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"arguments": {}}}]}]}, "non-empty 'name'"),
    ("arguments-list", {"messages": [U, {"role": "assistant", "tool_calls": [call(arguments=[1])]}]},
     "arguments must be an object or a JSON string holding one"),
    ("arguments-bad-json", {"messages": [U, {"role": "assistant", "tool_calls": [call(arguments="{nope")]}]},
     "arguments are a string that is not JSON"),
    ("arguments-json-list", {"messages": [U, {"role": "assistant", "tool_calls": [call(arguments="[1]")]}]},
     "JSON string holding a list"),
    ("user-with-calls", {"messages": [{"role": "user", "content": "q", "tool_calls": [call()]}, A]},
     "only assistant messages call tools"),
    ("tools-not-list", {"messages": [U, A], "tools": {"name": "x"}}, "'tools' must be a list"),
    ("tool-not-function", {"messages": [U, A], "tools": [{"type": "retrieval"}]}, "must be a function definition"),
    ("preference-in-chat", {"prompt": [U], "chosen": A, "rejected": {"role": "assistant", "content": "b"}},
     "this row is a preference pair"),
    ("weight-on-user", {"messages": [{**U, "weight": 1}, A]}, "only assistant messages are weighted"),
    ("weight-not-0-or-1", {"messages": [U, {**A, "weight": 0.5}]}, "a weight is 0 (not trained) or 1"),
    ("weight-true", {"messages": [U, {**A, "weight": True}]}, "a weight is 0 (not trained) or 1"),
    ("every-weight-0", {"messages": [U, {**A, "weight": 0}]}, "every assistant message has weight 0"),
    ("parallel-not-bool", {"messages": [U, A], "parallel_tool_calls": "yes"}, "'parallel_tool_calls' must be true"),
    ("text-only", {"text": "hello"}, "plain text has no roles"),
    ("legacy-functions", {"messages": [U, A], "functions": []}, "--format openai-chat-jsonl"),
    ("function-role", {"messages": [U, {"role": "function", "name": "f", "content": "r"}, A]},
     "--format openai-chat-jsonl"),
    ("prompt-completion", {"prompt": [U], "completion": [A]}, "--format trl-prompt-completion"),
    ("nul-in-answer", {"messages": [U, {"role": "assistant", "content": "a\x00b"}]},
     "field messages[1].content holds a NUL character (\\u0000); remove it"),
]

GOOD_CHAT_ROWS = [
    ("plain", {"messages": [U, A]}),
    ("system", {"messages": [{"role": "system", "content": "s"}, U, A]}),
    ("answer-calls-unanswered", {"messages": [U, {"role": "assistant", "content": "let me", "tool_calls": [call()]}],
                                 "tools": TOOLS}),
    ("answered-call-with-text", {"messages": [U, {"role": "assistant", "content": "checking", "tool_calls": [call()]},
                                              {"role": "tool", "tool_call_id": "c1", "content": "r"}, A],
                                 "tools": TOOLS}),
    ("arguments-as-json-string", {"messages": [U, {"role": "assistant", "tool_calls": [call(arguments='{"q": 1}')]}]}),
    ("text-parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}, A]}),
    ("empty-tools", {"messages": [U, A], "tools": []}),
    ("weights-and-parallel-calls", {"messages": [U, {**A, "weight": 0}, U, {**A, "weight": 1}],
                                    "parallel_tool_calls": False}),
]

BAD_PAIRS = [
    ("no-prompt", {"chosen": A, "rejected": {"role": "assistant", "content": "b"}},
     "'prompt' must be a non-empty list"),
    ("prompt-ends-with-assistant", {"prompt": [U, A], "chosen": A, "rejected": {"role": "assistant", "content": "b"}},
     "the prompt must end with a user message or with tool messages"),
    ("same-answers", {"prompt": [U], "chosen": A, "rejected": dict(A)}, "are the same answer"),
    ("empty-chosen", {"prompt": [U], "chosen": {"role": "assistant", "content": ""}, "rejected": A},
     "'chosen' is empty"),
    ("rejected-missing", {"prompt": [U], "chosen": A}, "'rejected' must be one assistant message"),
    ("rejected-user-role", {"prompt": [U], "chosen": A, "rejected": {"role": "user", "content": "b"}},
     "'rejected' must be an assistant message"),
    ("prompt-unanswered-call", {"prompt": [U, {"role": "assistant", "tool_calls": [call()]}, U], "chosen": A,
                                "rejected": {"role": "assistant", "content": "b"}}, "tool call 'c1' of message 1"),
    ("chat-in-preference", {"messages": [U, A]}, "this row is a chat conversation"),
    ("trl-message-lists", {"prompt": [U], "chosen": [A], "rejected": [{"role": "assistant", "content": "b"}]},
     "--format trl-preference"),
    ("openai-preference", {"input": {"messages": [U]}, "preferred_output": [A], "non_preferred_output": [A]},
     "--format openai-preference-jsonl"),
    ("image-in-system-prompt", {"prompt": [{"role": "system", "content": [{"type": "image", "path": "x.png"}]}, U],
                                "chosen": A, "rejected": {"role": "assistant", "content": "b"}},
     "prompt message 0 content part 0 is an image; only a user message holds images"),
    ("weighted-prompt",
     {"prompt": [{**U, "weight": 1}], "chosen": A, "rejected": {"role": "assistant", "content": "b"}},
     "weights mark the assistant messages of chat rows"),
    ("nul-in-rejected", {"prompt": [U], "chosen": A, "rejected": {"role": "assistant", "content": "\x00"}},
     "field rejected.content holds a NUL character"),
]

GOOD_PAIRS = [
    ("plain", {"prompt": [U], "chosen": A, "rejected": {"role": "assistant", "content": "b"}}),
    ("ends-with-tool-answers", {"prompt": [U, {"role": "assistant", "content": "x", "tool_calls": [call()]},
                                           {"role": "tool", "tool_call_id": "c1", "content": "r"}],
                                "chosen": A, "rejected": {"role": "assistant", "tool_calls": [call("c2")]},
                                "tools": TOOLS}),
]
