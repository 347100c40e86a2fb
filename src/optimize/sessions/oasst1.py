"""OpenAssistant OASST1 message trees (the trees export, JSONL): one tree per line,
`{"message_tree_id", "tree_state", "prompt": MESSAGE}`, where a message holds `message_id`, `text`, `role`
(`prompter` or `assistant`), `lang`, `review_result`, `deleted`, `synthetic`, `rank`, `labels`, `emojis`, … and
`replies`, a list of messages of the same shape.

Every assistant reply becomes a candidate: the conversation from the tree's prompt down to it, prompter messages as
user messages and assistant ones as assistant messages, with no system prompt. A deleted message is left out with
everything below it; `skipped["deleted"]` counts the messages left out so. The reply's `lang`, `rank` and
`review_result` go in the candidate's `meta`. Pure: lines in, candidates out.
"""

from __future__ import annotations

from typing import Any

from optimize.sessions.candidates import Candidate, LineError, Parser, checked, json_line, json_type

ROLES = {"prompter": "user", "assistant": "assistant"}
HOLDS = 'one OASST1 message tree {"message_tree_id", "tree_state", "prompt": {...}}'
TREE_HINT = ("each line is one tree of the OASST1 trees export (…trees.jsonl): a message tree whose 'prompt' holds "
             "the root message and its 'replies'; the flat messages export (…messages.jsonl) is not taken")


class Oasst1Parser(Parser):
    source = "oasst1"
    records_are = "message trees"

    def line(self, number: int, text: str) -> list[Candidate]:
        tree = json_line(number, text, HOLDS)
        if not isinstance(tree, dict):
            raise LineError(number, f"holds {json_type(tree)}, not a message tree", hint=TREE_HINT)
        prompt = tree.get("prompt")
        if prompt is None:
            hint = TREE_HINT if "message_id" not in tree else (
                "this line is a single message (the messages export); send the trees export, where each line "
                "holds a whole tree under 'prompt'")
            raise LineError(number, "the tree has no 'prompt' (its root message)", hint=hint)
        self.records += 1
        tree_id = tree.get("message_tree_id")
        found: list[Candidate] = []
        # (message, where it is, the conversation above it); an explicit stack, so a deep tree needs no recursion
        stack: list[tuple[Any, str, list[dict[str, Any]], str | None]] = [(prompt, "prompt", [], None)]
        while stack:
            message, where, above, parent_role = stack.pop()
            if not isinstance(message, dict):
                raise LineError(number, f"{where} is {json_type(message)}, not a message", hint=TREE_HINT)
            name = _name(message, where)
            role = message.get("role")
            if role not in ROLES:
                raise LineError(number, f"{name} has role {role!r}; OASST1 roles are prompter and assistant",
                                hint="give each message the role 'prompter' or 'assistant'")
            if parent_role is None and role != "prompter":
                raise LineError(number, f"{name}, the tree's prompt, is an assistant message",
                                hint="a tree starts with the prompter's message")
            if role == parent_role:
                raise LineError(number, f"{name} is a {role} message replying to a {role} message",
                                hint="prompter and assistant messages take turns down a tree")
            replies = message.get("replies") or []
            if not isinstance(replies, list):
                raise LineError(number, f"{name} has 'replies' that are {json_type(replies)}, not a list",
                                hint="'replies' lists the messages answering this one")
            if message.get("deleted") is True:
                self.skipped["deleted"] += _size(message)
                continue
            content = message.get("text")
            if not isinstance(content, str):
                raise LineError(number, f"{name} has 'text' that is {json_type(content)}, not a string",
                                hint="each message's 'text' holds what was written")
            conversation = [*above, {"role": ROLES[role], "content": content}]
            if role == "assistant":
                candidate = Candidate(
                    id=str(message.get("message_id") or f"{tree_id}:{where}"), messages=conversation,
                    meta={"messageTreeId": tree_id, "lang": message.get("lang"), "rank": message.get("rank"),
                          "reviewResult": message.get("review_result")})
                found.append(checked(candidate, number, name))
            for index in reversed(range(len(replies))):  # popped in the file's order
                stack.append((replies[index], f"{where}.replies[{index}]", conversation, role))
        return found


def _name(message: dict[str, Any], where: str) -> str:
    ident = message.get("message_id")
    return f"message {ident} ({where})" if isinstance(ident, str) and ident else f"message {where}"


def _size(message: Any) -> int:
    """The messages of a subtree (the message itself included)."""
    count, stack = 0, [message]
    while stack:
        item = stack.pop()
        count += 1
        replies = item.get("replies") if isinstance(item, dict) else None
        if isinstance(replies, list):
            stack.extend(replies)
    return count
