"""Normalization of a valid row before rendering, the same for every job.

- A tool call's `arguments` written as a JSON string is read as the object it holds.
- Text content written as a list of text parts becomes one string for text models. For a family whose template
  renders only content written as parts (SmolVLM's), every message's content is written as parts instead: text as
  one text part, a list of parts (text and images) as it is.
- Tool definitions and argument values are kept exactly as the row writes them, even when other rows of the
  dataset write them in other shapes (each row is rendered on its own, never through a shared schema).
- A row that offers no tools (`tools` absent or empty) renders without tools, whatever other rows offer.
- A message's `weight` (which messages train) is read by the loss policy, never shown to the template.
"""

from __future__ import annotations

import json
from typing import Any


def _text(content: Any) -> Any:
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(part["text"] for part in content)
    return content


def _call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    if isinstance(function.get("arguments"), str):
        function["arguments"] = json.loads(function["arguments"])
    return {**call, "type": call.get("type", "function"), "function": function}


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def normalize_message(message: dict[str, Any], parts: bool = False) -> dict[str, Any]:
    normalized = {key: value for key, value in message.items() if key != "weight"}
    if "content" in message:
        normalized["content"] = _parts(message["content"]) if parts else _text(message["content"])
    if message.get("tool_calls"):
        normalized["tool_calls"] = [_call(call) for call in message["tool_calls"]]
    elif "tool_calls" in normalized:
        del normalized["tool_calls"]
    return normalized


def normalize_messages(messages: list[dict[str, Any]], parts: bool = False) -> list[dict[str, Any]]:
    return [normalize_message(message, parts) for message in messages]


def image_files(messages: list[dict[str, Any]]) -> list[str] | None:
    """The local files of a normalized conversation's image parts, in order (a job puts each image's file beside
    its path, `file`); None where an image part has no file."""
    files = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image":
                if not part.get("file"):
                    return None
                files.append(part["file"])
    return files


def row_tools(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The row's own tools, exactly as written, or None when it offers none."""
    tools = row.get("tools")
    return tools if tools else None
