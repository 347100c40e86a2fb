"""Rendering rows with a model's tokenizer and chat template, and the token-level loss mask.

One path for every job: normalize the row, render it with its own tools, tokenize once (the template writes
the beginning-of-sequence token itself, so exactly one is present), and mark the tokens the loss policy
trains. Assistant spans are found by rendering each trained message's prefix: the text between the prompt
(`messages[:i]` with the generation prompt) and `messages[:i+1]` is message i as the template writes it,
end-of-turn token included.

A model that takes images renders a row's image parts as its template writes them (a placeholder each), and the
placeholders are then expanded into the image tokens its processor writes (`chat.vision`): the row's tokens, its
trained spans and its length are those of the expanded text, and the rendered row names its image files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from optimize.chat.normalize import image_files, normalize_message, normalize_messages, row_tools

FINAL, ALL = "final", "all"


class RenderError(ValueError):
    """The row cannot be rendered or masked; the message says why and what to change."""


@dataclass(frozen=True, slots=True)
class LossPolicy:
    """Which tokens train: `assistantTurns`, `trainOnToolCalls` and `explicitLossMaskColumn`."""

    assistant_turns: str = FINAL
    train_on_tool_calls: bool = True
    explicit_mask_column: str | None = None


def trained_messages(messages: list[dict[str, Any]], assistant_turns: str) -> list[int]:
    """Indexes of the assistant messages that train: a message's own `weight` decides (1 trains, 0 does not);
    without one, `assistantTurns` does (the final answer, or every assistant message)."""
    last = len(messages) - 1
    chosen = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or message.get("weight") == 0:
            continue
        if message.get("weight") == 1 or assistant_turns == ALL or index == last:
            chosen.append(index)
    return chosen


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    input_ids: list[int]
    loss_mask: list[int]
    offsets: list[tuple[int, int]]
    spans: list[tuple[int, int]]  # character spans that train, in the text
    images: tuple[str, ...] = ()  # the image files its image tokens stand for, in order

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


class ChatRenderer:
    """Renders rows under one tokenizer and chat template."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None, parts: bool = False,
                 images: Any = None, placeholders: bool = False) -> None:
        """`parts`: the template renders only content written as parts (`chat.families.content_as_parts`);
        `images`: the model's `chat.vision.ImageTokens`, for a model that takes images; `placeholders`: leave each
        image as its template's placeholder (a light renderer, which loads no processor)."""
        if not tokenizer.chat_template:
            raise RenderError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs or {}
        self.parts, self.images, self.placeholders = parts, images, placeholders
        self.chat_template_sha256 = template_sha256(tokenizer.chat_template)
        # What apply_chat_template gives a template: the special tokens, then the family's own arguments.
        self._template_context = {**tokenizer.special_tokens_map, **self.template_kwargs}

    @classmethod
    def from_pretrained(cls, directory: str, template_kwargs: dict[str, Any] | None = None,
                        corrected_family: str | None = None, light: bool = False,
                        parts: bool = False) -> ChatRenderer:
        """Load the tokenizer at `directory` (and, for a model that takes images, its processor's image rule);
        with `corrected_family`, render under Optimize's corrected copy of its template (the catalog's
        `chatTemplate: corrected`). `light`: its fast tokenizer only, which imports no torch (for the server, which
        stays light, and renders no image)."""
        if light:
            from transformers import PreTrainedTokenizerFast as loader
        else:
            from transformers import AutoTokenizer as loader

        tokenizer = loader.from_pretrained(directory)
        if corrected_family:
            from optimize.chat.corrections import corrected_template

            tokenizer.chat_template = corrected_template(corrected_family, tokenizer.chat_template)
        images = None
        if not light:
            from optimize.chat.vision import ImageTokens, takes_images

            images = ImageTokens.from_pretrained(directory) if takes_images(directory) else None
        return cls(tokenizer, template_kwargs, parts, images, placeholders=light)

    def expanded(self, text: str, messages: list[dict[str, Any]]):
        """`text` (rendered from `messages`) with its image placeholders expanded as the model's processor expands
        them (`chat.vision.Expansion`), with the image files in order; (None, ()) for a row without images, and for
        a light renderer, which leaves each image as its placeholder (the row viewer: the row's images are shown
        beside its tokens)."""
        if self.placeholders:
            return None, ()
        files = image_files(messages)
        if files is None:
            raise RenderError("an image of the row was not fetched for the job")
        if not files:
            return None, ()
        if self.images is None:
            raise RenderError("the row has images and the model reads none; train, evaluate or serve it on a "
                              "model that takes images")
        from optimize.chat.vision import image_size

        return self.images.expand(text, [image_size(path) for path in files]), tuple(files)

    def texts(self, conversations: list[list[dict[str, Any]]], tools: list | None,
              generation_prompt: bool = False) -> list[str]:
        """Render several conversations sharing one tool list with the compiled template.

        This is what `apply_chat_template` does for plain JSON rows (same template, same special tokens and
        arguments), without converting every conversation again: analysis renders each row several times.
        """
        from jinja2 import TemplateError
        from transformers.utils.chat_template_utils import _compile_jinja_template

        template = _compile_jinja_template(self.tokenizer.chat_template)  # compiled once per template text
        if self.parts:  # a template that renders only parts would write a text content as an empty turn
            conversations = [[normalize_message(m, parts=True) for m in c] for c in conversations]
        try:
            return [template.render(messages=conversation, tools=tools, documents=None,
                                    add_generation_prompt=generation_prompt, **self._template_context)
                    for conversation in conversations]
        except TemplateError as error:
            raise RenderError(f"the chat template refuses the row: {error}") from None

    def text(self, messages: list[dict[str, Any]], tools: list | None, generation_prompt: bool = False) -> str:
        return self.texts([messages], tools, generation_prompt)[0]

    def locate(self, messages: list[dict[str, Any]], tools: list | None,
               indexes: list[int] | None = None) -> tuple[str, dict[int, tuple[int, int]]]:
        """The row's text and where each assistant message (or each of `indexes`) sits in it, in two calls."""
        if indexes is None:
            indexes = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        whole = self.texts([messages, *(messages[: i + 1] for i in indexes)], tools)
        text, uptos = whole[0], whole[1:]
        with_prompt = [i for i in indexes if i]
        prompts = dict(zip(with_prompt, self.texts([messages[:i] for i in with_prompt], tools, True), strict=True)) \
            if with_prompt else {}
        return text, {i: _span(prompts.get(i, ""), upto, text) for i, upto in zip(indexes, uptos, strict=True)}

    def render(self, row: dict[str, Any], policy: LossPolicy = LossPolicy()) -> Rendered:
        indexes = trained_messages(row["messages"], policy.assistant_turns)
        messages = normalize_messages(row["messages"])
        tools = row_tools(row)
        explicit = policy.explicit_mask_column and row.get(policy.explicit_mask_column) is not None
        if not indexes and not explicit:
            raise RenderError(f"no message trains: the answer has weight 0 and, under assistantTurns: "
                              f"{policy.assistant_turns}, no other assistant message trains; give a message "
                              "weight 1, set loss.assistantTurns: all, or leave the row out")
        text, located = self.locate(messages, tools, indexes or None)
        expansion, files = self.expanded(text, messages)
        final = expansion.text if expansion else text
        encoded = self.tokenizer(final, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], [tuple(pair) for pair in encoded["offset_mapping"]]
        if explicit:
            mask = check_explicit_mask(row[policy.explicit_mask_column], len(ids), policy.explicit_mask_column)
            return Rendered(final, ids, mask, offsets, [], files)
        spans = self._trained_spans(messages, tools, text, located, policy)
        if expansion:
            spans = expansion.spans(spans)
        mask = [1 if e > s and any(a <= s < b for a, b in spans) else 0 for s, e in offsets]
        if not any(mask):
            raise RenderError("no token of the answer is trained: the chat template renders it empty")
        return Rendered(final, ids, mask, offsets, spans, files)

    def _trained_spans(self, messages: list[dict[str, Any]], tools: list | None, text: str,
                       located: dict[int, tuple[int, int]], policy: LossPolicy) -> list[tuple[int, int]]:
        last = len(messages) - 1
        spans = []
        for index, (start, end) in sorted(located.items()):
            # An answer that carries tool calls trains whole, whatever trainOnToolCalls says.
            if index != last and messages[index].get("tool_calls") and not policy.train_on_tool_calls:
                end = start + self._text_part_length(messages, tools, index, start, end, text)
            if end > start:
                spans.append((start, end))
        return spans

    def _text_part_length(self, messages, tools, index, start, end, text) -> int:
        """Length of the text the template writes for message `index` before its calls."""
        message = messages[index]
        if not message.get("content"):
            return 0
        alone = self.text([*messages[:index], {"role": "assistant", "content": message["content"]}], tools)
        return min(end - start, _common_prefix_length(alone[start:], text[start:end]))


def _span(prompt: str, upto: str, text: str) -> tuple[int, int]:
    """A message's span: after the longest part of its prompt the text shares, up to the longest part of the
    conversation through it that the text shares. Templates that continue one model turn across tool results
    (Gemma 4) or close turns differently at the end still locate each message this way. Whitespace written after
    the end-of-turn token belongs to no answer, so it is not trained."""
    start = _common_prefix_length(prompt, text)
    end = _common_prefix_length(upto, text)
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, max(start, end)


def _common_prefix_length(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # binary search on prefix equality: C-speed comparisons of slices
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def check_explicit_mask(mask: Any, length: int, column: str) -> list[int]:
    """A mask is a non-empty list of 0/1 integers, one per token, selecting some token but not the first."""
    hint = "correct the masks, or remove loss.explicitLossMaskColumn to use the other loss settings"
    if not isinstance(mask, list) or not mask or any(type(v) is not int or v not in (0, 1) for v in mask):
        raise RenderError(f"'{column}' must be a non-empty list of integer 0 and 1 values; {hint}")
    if len(mask) != length:
        raise RenderError(f"'{column}' has {len(mask)} values but the row renders to {length} tokens; {hint}")
    if mask[0] == 1:
        raise RenderError(f"'{column}' selects the first token, which cannot be trained; {hint}")
    if not any(mask):
        raise RenderError(f"'{column}' selects no token; {hint}")
    return list(mask)


__all__ = ["ALL", "FINAL", "ChatRenderer", "LossPolicy", "RenderError", "Rendered", "check_explicit_mask",
           "normalize_message", "trained_messages"]
