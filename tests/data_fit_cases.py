"""Rows and independent figures for the data-fit tests (`data.truncation`, explicit loss masks), shared by the
preparation-step tests (tests/unit/test_data_fit_prep.py) and the end-to-end ones (tests/integration/
test_data_fit_cli.py).

Every expected figure is an independent count: the stand-in's own tokenizer and chat template applied directly
(`apply_chat_template(tokenize=True)` with the family's template arguments), and turns removed by the rule the
release notes state, not by Optimize's rendering or trimming code.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import chat_row

FAMILY = "llama3.2"  # the family of optimize/tiny-llama-3.2

_TOKENIZERS: dict[str, Independent] = {}


class Independent:
    """Lengths and trimming by the stand-in's tokenizer and chat template, applied directly."""

    def __init__(self, path: Path) -> None:
        from transformers import AutoTokenizer

        from optimize.chat.families import template_kwargs

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.kwargs = template_kwargs(FAMILY)

    @classmethod
    def of(cls, path: Path | str) -> Independent:
        """One per model folder (loading a tokenizer takes a moment)."""
        if str(path) not in _TOKENIZERS:
            _TOKENIZERS[str(path)] = cls(Path(path))
        return _TOKENIZERS[str(path)]

    def length(self, messages: list[dict]) -> int:
        encoded = self.tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **self.kwargs)
        return len(encoded["input_ids"])

    def trim(self, messages: list[dict], limit: int) -> tuple[int | None, int]:
        """(turns removed until the row fits, or None when it never does; its shortest length). A turn is a user
        message and the messages after it up to the next user message; anything before the first user message is
        a turn of its own; the system prompt and the final turn stay."""
        system = messages[:1] if messages[0]["role"] == "system" else []
        body = messages[len(system):]
        turns: list[list[dict]] = []
        for message in body:
            if not turns or message["role"] == "user":
                turns.append([])
            turns[-1].append(message)
        length = self.length(messages)
        if length <= limit:
            return 0, length
        for removed in range(1, len(turns)):
            length = self.length(system + [m for turn in turns[removed:] for m in turn])
            if length <= limit:
                return removed, length
        return None, length


def conversation(turns: int, words: int = 60, last_words: int | None = None, system: bool = True) -> dict:
    messages = [{"role": "system", "content": "You answer support tickets."}] if system else []
    for i in range(turns):
        size = last_words if last_words is not None and i == turns - 1 else words
        messages += [{"role": "user", "content": f"Question {i}: " + "order refund " * size},
                     {"role": "assistant", "content": f"Answer {i}: shipped."}]
    return {"messages": messages}


def short_rows(count: int) -> list[dict]:
    return [chat_row(f"What is {i} plus {i}?", f"It is {2 * i}.") for i in range(count)]


def masked(independent: Independent, row: dict, select: range | None = None, column: str = "mask") -> dict:
    """The row with a mask of one entry per rendered token: `select` (default: the last 3 tokens) trains."""
    length = independent.length(row["messages"])
    select = select if select is not None else range(length - 3, length)
    return {**row, column: [1 if i in select else 0 for i in range(length)]}


def trim_figures(independent: Independent, rows: list[dict], limit: int) -> tuple[int, int, list[int | None]]:
    """(rows trimmed, turns removed in all, turns removed per row or None where the row cannot fit)."""
    removed = [independent.trim(row["messages"], limit)[0] for row in rows]
    fits = [r for r in removed if r is not None]
    return sum(1 for r in fits if r), sum(fits), removed


# The rows of each rule, as both the preparation-step and the end-to-end tests use them ---------------------------

def oldest_rows() -> list[dict]:
    """Rows that fit maxSeqLength 512 once their oldest turns are removed (and one that fits as it is)."""
    return [conversation(1, 10), conversation(3, 60), conversation(4, 60), conversation(6, 40), conversation(8, 30),
            conversation(5, 60), conversation(5, 60, system=False),
            {"messages": [{"role": "assistant", "content": "Hello, how can I help? " * 20}]
             + conversation(4, 50, system=False)["messages"]}]  # a greeting before the first user message


def below_trim_threshold_rows() -> list[dict]:
    """Under maxSeqLength 256: rows of 257 to 512 tokens (shorter than the analysis trim threshold) that fit once
    their oldest turns are removed."""
    return [conversation(1, 10), conversation(2, 60), conversation(3, 60), conversation(3, 40)]


def unfit_rows() -> list[dict]:
    """Under maxSeqLength 512: line 3 cannot fit however many turns are removed; others fit, some trimmed."""
    return [conversation(1, 10), conversation(4, 60), conversation(3, 60, last_words=250), conversation(6, 40)]
