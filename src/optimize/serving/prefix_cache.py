"""Prompt prefixes kept between requests: a request whose prompt begins as an earlier one's did, for the same model
(the same system prompt, a conversation's earlier turns, a harness' shared few-shot examples), starts from the keys
and values computed then, and only the rest of its prompt is prefilled. On an endpoint under load the prefills of
joining requests are most of the work (a prompt is often longer than its answer), and each one holds up every row
of the batch; vLLM and SGLang keep prefixes the same way.

Prefixes are found by blocks of `BLOCK` tokens, then token by token within the entry found, and always leave a
prompt's last token to compute (its logits give the first answer token): a prompt kept whole and asked again
takes all but that token — the batcher then lets it join the batch with no prefill at all. Each kept prompt is
one entry holding its keys and values per layer; every block boundary of it is indexed by the model (adapter) and
a hash of the tokens up to there, checked against the entry's tokens on a hit. At most `budget` tokens are kept
in all, the least recently used entry dropped first; the engine clears it when an adapter loads or unloads.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from itertools import count
from typing import Any

BLOCK = 16


@dataclass(eq=False)
class Prefix:
    tokens: tuple[int, ...]
    layers: list[tuple[Any, Any]]  # per layer (keys, values), each (1, heads, tokens, head size)


class PrefixCache:
    def __init__(self, budget: int) -> None:
        self.budget = budget  # tokens kept in all
        self.entries: OrderedDict[int, Prefix] = OrderedDict()  # least recently used first
        self.index: dict[tuple[str | None, int], int] = {}  # (model, hash of the first k blocks) -> entry
        self.size = 0
        self._ids = count()
        self.reused = 0  # prompt tokens not computed again, since the endpoint started

    def find(self, model: str | None, prompt: list[int]) -> tuple[Prefix | None, int]:
        """The longest kept prefix of `prompt` for `model` that leaves at least its last token to compute, and its
        length in tokens (0: none)."""
        found, length, chain = None, 0, 0
        for block in range((len(prompt) - 1) // BLOCK):
            chain = hash((chain, tuple(prompt[block * BLOCK:(block + 1) * BLOCK])))
            entry = self.index.get((model, chain))
            if entry is None:
                break
            found, length = entry, (block + 1) * BLOCK
        if found is None or list(self.entries[found].tokens[:length]) != prompt[:length]:  # a hash's collision
            return None, 0
        entry = self.entries[found]
        most = min(len(entry.tokens), len(prompt) - 1)
        while length < most and entry.tokens[length] == prompt[length]:  # on within the entry, token by token
            length += 1
        self.entries.move_to_end(found)
        return entry, length

    @staticmethod
    def holds(entry: Prefix | None, prompt: list[int]) -> bool:
        """Whether `entry` already holds all of `prompt` (keeping it again would add nothing)."""
        return entry is not None and len(entry.tokens) >= len(prompt) and entry.tokens[:len(prompt)] == tuple(prompt)

    def keep(self, model: str | None, prompt: list[int], layers: list[tuple[Any, Any]]) -> None:
        """Keep `prompt` with its keys and values (`layers`: each (1, heads, its length, head size)), unless it is
        shorter than a block or longer than the whole budget."""
        length = len(prompt)
        if length < BLOCK or length > self.budget:
            return
        entry_id = next(self._ids)
        self.entries[entry_id] = Prefix(tuple(prompt), [(keys[:, :, :length].clone(), values[:, :, :length].clone())
                                                        for keys, values in layers])
        self.size += length
        chain = 0
        for block in range(length // BLOCK):
            chain = hash((chain, tuple(prompt[block * BLOCK:(block + 1) * BLOCK])))
            self.index[(model, chain)] = entry_id  # the newest entry answers for a shared start
        while self.size > self.budget:
            self._drop(next(iter(self.entries)))

    def clear(self) -> None:
        self.entries.clear()
        self.index.clear()
        self.size = 0

    def _drop(self, entry_id: int) -> None:
        entry = self.entries.pop(entry_id)
        self.size -= len(entry.tokens)
        for key in [key for key, value in self.index.items() if value == entry_id]:
            del self.index[key]
