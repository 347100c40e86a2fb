"""Continuous batching for an endpoint: requests join and leave one running batch between decoding steps, over one
resident base model, each row with its own adapter (the engine's `forward`: stacked LoRA weights, or PEFT's
mixed-adapter batches).

Requests join by a prefill (those waiting together, in one forward pass, left-padded to the longest prompt), whose
key/value cache is then merged into the batch's: every layer's keys and values left-padded to a common length, the
padding masked out of attention and each row's positions counted from its own first token. A row leaves when it
stops, reaches its token limit, or is cancelled (a client that disconnects, a stop string found): its row is cut
out of the cache, and the columns no row uses any more with it. Sampling is per row — greedy, or temperature and
top-p with the row's own seeded generator — so an answer does not depend on what else is in the batch.

Models whose cache is not made of plain dynamic layers (sliding-window attention) cannot be merged that way: they
answer one request at a time through the same loop. At most `max_running` rows decode together; at most
`max_waiting` more wait their turn; past that a request is refused (`QueueFull`, HTTP 429).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from optimize.chat.grammars import allowed
from optimize.serving.load import EndpointLoad, QueueFull
from optimize.serving.sampling import Shaping, filtered, shaped

__all__ = ["Batcher", "QueueFull", "RequestTimedOut", "Sequence", "Step", "Steps"]


class RequestTimedOut(Exception):
    """A request ran past the endpoint's time limit; what it generated so far was handed over."""


@dataclass(frozen=True)
class Step:
    """One generated token, with its log-probability and the likeliest alternatives when asked for."""

    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] | None = None


@dataclass(eq=False)
class Sequence:
    """One request in the batch: what it asks, and the queue its steps are handed over on."""

    adapter: str | None
    prompt: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int | None = None  # None: no log-probabilities; 0: the chosen token's only
    steps: queue.Queue = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    generated: int = 0
    generator: Any = None
    cached: int = 0  # prompt tokens taken from a kept prefix, not computed
    last: int = 0  # the token the next decoding step feeds
    # the image files its prompt's image tokens stand for: their pixels join its prefill, and its prompt is never
    # kept or found as a prefix (an image's tokens are the same ids whatever the image)
    images: tuple[str, ...] = ()
    shaping: Shaping | None = None  # biases, penalties, top_k and min_p (`serving.sampling`)
    matcher: Any = None  # its grammar's place (`serving.structured.RowMatcher`): the tokens allowed next
    answer: list[int] = field(default_factory=list)  # its tokens so far, for the penalties
    submitted: float = 0.0

    def cancel(self) -> None:
        self.cancelled.set()


class Steps:
    """The steps of one submitted sequence, as an iterator; `close` (a client gone, a stop string found, a request
    refused after its first prompts were submitted) cancels the sequence, whether it was read from or not."""

    def __init__(self, batcher: Batcher, sequence: Sequence) -> None:
        self.batcher, self.sequence, self._ended = batcher, sequence, False

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> Step:
        if self._ended:
            raise StopIteration
        step = self.sequence.steps.get()
        if step is None or isinstance(step, BaseException):
            self._ended = True
            if step is not None:
                raise step
            raise StopIteration
        return step

    def batches(self) -> Iterator[list[Step]]:
        """The steps as they come, each time all of those generated so far: a reader slower than the batch (an
        endpoint under load) takes several at once, and a stream sends them as one chunk, instead of waking and
        writing for each token."""
        while not self._ended:
            item, batch = self.sequence.steps.get(), []
            while item is not None and not isinstance(item, BaseException):
                batch.append(item)
                try:
                    item = self.sequence.steps.get_nowait()
                except queue.Empty:
                    break
            else:
                self._ended = True
                if batch:
                    yield batch
                if item is not None:
                    raise item
                return
            yield batch

    def close(self) -> None:
        if not self.sequence.cancelled.is_set():
            self.sequence.cancel()
            self.batcher._wake.set()


class Batcher(EndpointLoad):
    def __init__(self, engine, max_running: int = 16, max_waiting: int = 64, request_seconds: float = 600.0) -> None:
        super().__init__(max_running, max_waiting)
        self.engine = engine
        self.request_seconds = request_seconds
        self.waiting: queue.Queue[Sequence] = queue.Queue()
        self.rows: list[Sequence] = []
        self.cache = None
        self.mask = None  # (rows, columns): 1 where a row has a token in that cache column
        self.mergeable: bool | None = None  # known after the first prefill
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop (rows still running are told the endpoint stopped) and wait for it: a process must not
        exit with the loop inside torch."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=30)

    # --- the request side

    def submit(self, sequence: Sequence) -> Sequence:
        self.admit()
        sequence.submitted = time.monotonic()
        self.waiting.put(sequence)
        self._wake.set()
        return sequence

    def steps(self, sequence: Sequence) -> Steps:
        """A submitted sequence's steps as they are generated; closing them early (read or not) cancels it."""
        return Steps(self, sequence)

    def running(self) -> int:
        return len(self.rows)

    # --- the loop

    def _loop(self) -> None:
        while not self._closed:
            if not self.rows and self.waiting.empty():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                with self.engine.lock:  # an adapter loads between steps, never under one
                    self._admit()
                    if self.rows:
                        self._decode()
            except Exception as error:  # noqa: BLE001 - every row in the batch is told, then the batch restarts
                for sequence in self.rows:
                    self._finish(sequence, error)
                self.rows, self.cache, self.mask = [], None, None
        stopped = RuntimeError("the endpoint stopped")
        for sequence in self.rows:
            self._finish(sequence, stopped)
        while not self.waiting.empty():
            self._finish(self.waiting.get_nowait(), stopped)

    def _admit(self) -> None:
        """Prefill the waiting sequences that fit into free rows, together in one forward pass (one at a time where
        the cache cannot be merged, and for the first, which tells whether it can)."""
        joining: list[Sequence] = []
        room = self.max_running if self.mergeable else 1
        while len(self.rows) + len(joining) < room:
            if (self.rows or joining) and not self.mergeable:
                break
            try:
                sequence = self.waiting.get_nowait()
            except queue.Empty:
                break
            if sequence.cancelled.is_set():
                self._finish(sequence, None)
            elif self._late(sequence):
                self._finish(sequence, self._timed_out())
            else:
                joining.append(sequence)
        if not joining:
            return
        try:
            self._seed(joining)
            prefixes = self.engine.prefixes if self.mergeable else None
            found = {id(s): prefixes.find(s.adapter, s.prompt) if prefixes is not None and not s.images else (None, 0)
                     for s in joining}
            for sequence in joining:
                sequence.cached = found[id(sequence)][1]
            # a prompt kept but for its last token joins the batch as it is: the next step computes that token (a
            # one-token prompt has nothing kept, so it is prefilled like any other)
            ready = [s for s in joining if 0 < s.cached == len(s.prompt) - 1]
            if ready:
                self._join(ready, [found[id(s)] for s in ready])
            rest = [s for s in joining if s not in ready]
            if rest:
                self._prefill(rest, [found[id(s)] for s in rest])
        except Exception as error:  # noqa: BLE001 - these requests fail; the batch goes on
            for sequence in joining:
                if sequence not in self.rows:
                    self._finish(sequence, error)

    def _seed(self, joining: list[Sequence]) -> None:
        torch = self.engine.torch
        for sequence in joining:
            if sequence.seed is not None or sequence.temperature > 0:
                sequence.generator = torch.Generator(device=self.engine.device)
                sequence.generator.manual_seed(sequence.seed if sequence.seed is not None else secrets.randbits(63))

    def _new_cache(self):
        """An empty cache for joiners: layers with room to grow where the model's are plain dynamic layers."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        from optimize.serving.kv_room import RoomyLayer

        cache = DynamicCache(config=self.engine.base.config)
        if self.mergeable is not False and all(type(layer) is DynamicLayer for layer in cache.layers):
            cache.layers = [RoomyLayer() for _ in cache.layers]
        return cache

    def _join(self, ready: list[Sequence], found: list[tuple[Any, int]]) -> None:
        """Rows whose prompts are kept but for their last token: their kept keys and values join the batch's cache,
        and the last token is what the next decoding step feeds (no forward pass of their own)."""
        torch = self.engine.torch
        kept = max(length for _, length in found)
        cache = self._new_cache()
        for layer, (keys, values) in enumerate(_stacked_prefixes(found, kept)):
            cache.update(keys, values, layer)
        mask = torch.tensor([[0] * (kept - length) + [1] * length for _, length in found], device=self.engine.device)
        for sequence in ready:
            sequence.last = sequence.prompt[-1]
        self._merge(cache, mask)
        self.rows.extend(ready)

    def _prefill(self, joining: list[Sequence], found: list[tuple[Any, int]]) -> None:
        """One forward pass over the joining prompts, left-padded to the longest, then their caches join the
        batch's. A prompt whose start is a kept prefix (`serving.prefix_cache`) computes only the rest: its row's
        cache starts as that prefix's keys and values, left-padded to the longest prefix among the joiners. Joiners
        asking the same (a request's several choices) share one prompt's computation: its row is copied for each."""
        torch = self.engine.torch
        firsts: dict[tuple, int] = {}
        copies = [firsts.setdefault((s.adapter, tuple(s.prompt), s.images, length), index)
                  for index, (s, (_, length)) in enumerate(zip(joining, found, strict=True))]
        if len(firsts) == len(joining):
            self._joined(joining, found, *self._computed(joining, found))
            return
        unique = sorted(firsts.values())
        cache, mask, logits = self._computed([joining[i] for i in unique], [found[i] for i in unique])
        rows = torch.tensor([unique.index(first) for first in copies], device=self.engine.device)
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)
        self._joined(joining, found, cache, mask.index_select(0, rows), logits.index_select(0, rows))

    def _joined(self, joining: list[Sequence], found, cache, mask, logits) -> None:
        """The prefilled rows join the batch, and each takes its first token."""
        from optimize.serving.kv_room import RoomyLayer

        if self.mergeable is None:
            self.mergeable = all(type(layer) is RoomyLayer for layer in cache.layers)
        if self.mergeable and self.engine.prefixes is not None:
            self._keep_prefixes(joining, found, cache, mask)
        self._merge(cache, mask)
        self.rows.extend(joining)
        self._emit(joining, logits[:, -1])

    def _computed(self, joining: list[Sequence], found: list[tuple[Any, int]]):
        """(cache, mask, logits) of one forward pass over the joiners' prompts."""
        torch = self.engine.torch
        device = self.engine.device
        rests = [s.prompt[length:] for s, (_, length) in zip(joining, found, strict=True)]
        kept, longest = max(length for _, length in found), max(len(rest) for rest in rests)
        pad = self.engine.pad_id if self.engine.pad_id is not None else 0
        ids = torch.tensor([[pad] * (longest - len(rest)) + rest for rest in rests], device=device)
        mask = torch.tensor([[0] * (kept - length) + [1] * length + [0] * (longest - len(rest)) + [1] * len(rest)
                             for (_, length), rest in zip(found, rests, strict=True)], device=device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)[:, kept:]
        cache = self._new_cache()
        if kept:
            for layer, (keys, values) in enumerate(_stacked_prefixes(found, kept)):
                cache.update(keys, values, layer)
        pixels = self._pixels(joining)
        with torch.inference_mode():
            logits = self._forward(ids, mask, positions, cache, [s.adapter for s in joining], last_only=True,
                                   **pixels)
        return cache, mask, logits

    def _keep_prefixes(self, joining: list[Sequence], found, cache, mask) -> None:
        """Keep each joining prompt for the requests after it, unless a kept one already holds it."""
        kept = set()
        for row, (sequence, (prefix, _)) in enumerate(zip(joining, found, strict=True)):
            asked = (sequence.adapter, tuple(sequence.prompt))
            if sequence.images or asked in kept or self.engine.prefixes.holds(prefix, sequence.prompt):
                continue
            kept.add(asked)
            columns = mask[row].nonzero()[:, 0]  # the row's own tokens, in order
            self.engine.prefixes.keep(sequence.adapter, sequence.prompt, [
                (layer.keys[row:row + 1].index_select(2, columns), layer.values[row:row + 1].index_select(2, columns))
                for layer in cache.layers])

    def _decode(self) -> None:
        torch = self.engine.torch
        device = self.engine.device
        detached = {id(s) for s in self.rows if s.adapter is not None and s.adapter not in self.engine.adapters}
        if detached:  # its adapter was detached while it was answered
            for sequence in self.rows:
                if id(sequence) in detached:
                    self._finish(sequence, RuntimeError(f"adapter {sequence.adapter} was detached from the endpoint"))
            self._leave(detached)
            if not self.rows:
                return
        ids = torch.tensor([[s.last] for s in self.rows], device=device)
        positions = self.mask.sum(dim=1, keepdim=True)
        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=self.mask.dtype, device=device)],
                              dim=1)
        with torch.inference_mode():
            logits = self._forward(ids, self.mask, positions, self.cache, [s.adapter for s in self.rows])
        self._emit(list(self.rows), logits[:, -1])

    def _pixels(self, joining: list[Sequence]) -> dict[str, Any]:
        """The pixel values of the joiners' images, on the engine's device and in its precision (none without)."""
        images = getattr(self.engine, "images", None)
        if images is None or not any(s.images for s in joining):
            return {}
        pixels = images.pixels([list(s.images) for s in joining])
        dtype = next(self.engine.base.parameters()).dtype
        return {"pixel_values": pixels["pixel_values"].to(self.engine.device, dtype),
                "pixel_attention_mask": pixels["pixel_attention_mask"].to(self.engine.device)}

    def _forward(self, ids, mask, positions, cache, adapters: list[str | None], last_only: bool = False,
                 **pixels):
        arguments = dict(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True, **pixels)
        if last_only:  # a prefill needs the last position's logits only (the vocabulary's product is no small part)
            arguments["logits_to_keep"] = 1
        return self.engine.forward(adapters, **arguments)

    def _emit(self, sequences: list[Sequence], logits) -> None:
        """Sample each row's next token, hand it over, and let finished or cancelled rows leave."""
        torch = self.engine.torch
        logits = logits.float()
        constrained = [row for row, s in enumerate(sequences) if s.matcher is not None]
        if constrained:  # each constrained row only what its grammar allows next, all such rows at once
            index = torch.tensor(constrained, device=logits.device)
            permitted = allowed(torch, [sequences[row].matcher for row in constrained]).to(logits.device)
            logits = logits.clone()
            logits[index] = logits[index].masked_fill(~permitted, float("-inf"))
        greedy = logits.argmax(dim=-1).tolist() if any(s.temperature <= 0 for s in sequences) else None
        leaving = []
        for row, sequence in enumerate(sequences):
            if sequence.shaping is not None:
                row_logits = shaped(torch, logits[row], sequence.shaping, sequence.prompt, sequence.answer)
                token = int(row_logits.argmax()) if sequence.temperature <= 0 else self._sample(sequence, row_logits)
            else:
                token = greedy[row] if sequence.temperature <= 0 else self._sample(sequence, logits[row])
            if sequence.matcher is not None:
                sequence.matcher.advance(token)
            sequence.answer.append(token)
            step = Step(token)
            if sequence.top_logprobs is not None:
                logprobs = torch.log_softmax(logits[row], dim=-1)
                top = ()
                if sequence.top_logprobs:
                    values, indices = logprobs.topk(sequence.top_logprobs)
                    top = tuple(zip(indices.tolist(), values.tolist(), strict=True))
                step = Step(token, float(logprobs[token]), top)
            sequence.generated += 1
            sequence.last = token
            sequence.steps.put(step)
            if (token in self.engine.stop_ids or sequence.generated >= sequence.max_new_tokens
                    or sequence.cancelled.is_set() or self._late(sequence)):
                leaving.append(sequence)
        cancelled = [s for s in self.rows if s.cancelled.is_set() and s not in leaving]
        for sequence in leaving + cancelled:
            done = (sequence.cancelled.is_set() or sequence.last in self.engine.stop_ids
                    or sequence.generated >= sequence.max_new_tokens)
            self._finish(sequence, None if done else self._timed_out())
        if leaving or cancelled:
            self._leave({id(s) for s in leaving + cancelled})

    def _sample(self, sequence: Sequence, logits) -> int:
        torch = self.engine.torch
        scaled = logits / sequence.temperature
        if sequence.shaping is not None and sequence.shaping.filters:
            scaled = filtered(torch, scaled, sequence.shaping)
        probabilities = torch.softmax(scaled, dim=-1)
        if sequence.top_p < 1.0:
            ordered, order = probabilities.sort(descending=True)
            kept = ordered.cumsum(0) - ordered < sequence.top_p  # the smallest set whose mass reaches top_p
            probabilities = torch.zeros_like(probabilities).scatter(0, order[kept], ordered[kept])
        return int(torch.multinomial(probabilities, 1, generator=sequence.generator))

    def _late(self, sequence: Sequence) -> bool:
        return time.monotonic() - sequence.submitted > self.request_seconds

    def _timed_out(self) -> RequestTimedOut:
        return RequestTimedOut(f"the request ran past this endpoint's limit of {self.request_seconds:g} s "
                               "(OPTIMIZE_ENDPOINT_REQUEST_SECONDS); ask for fewer tokens")

    def _finish(self, sequence: Sequence, error: BaseException | None) -> None:
        if error is not None:
            sequence.steps.put(error)
        sequence.steps.put(None)
        self.finished(sequence.submitted, sequence.generated)

    # --- the cache

    def _merge(self, cache, mask) -> None:
        """Add prefilled rows (their cache, and their mask: 0 over their own left padding) to the batch's,
        left-padding the narrower of the two."""
        torch = self.engine.torch
        if self.cache is None or not self.rows:
            self.cache, self.mask = cache, mask
            return
        width = max(self.mask.shape[1], mask.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)], dim=0)
            mine.values = torch.cat([_left_pad(mine.values, width), _left_pad(theirs.values, width)], dim=0)
        self.mask = torch.cat([_left_pad(self.mask, width, dim=1), _left_pad(mask, width, dim=1)], dim=0)

    def _leave(self, gone: set[int]) -> None:
        """Cut the rows that left out of the batch, and the leading columns no remaining row uses."""
        torch = self.engine.torch
        keep = [i for i, s in enumerate(self.rows) if id(s) not in gone]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.cache, self.mask = None, None
            return
        index = torch.tensor(keep, device=self.engine.device)
        self.mask = self.mask.index_select(0, index)
        unused = int((self.mask.sum(dim=0) == 0).long().cumprod(0).sum())  # leading all-padding columns
        self.mask = self.mask[:, unused:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, unused:]
            layer.values = layer.values.index_select(0, index)[:, :, unused:]


def _stacked_prefixes(found: list[tuple[Any, int]], width: int):
    """Per layer, the joiners' kept prefixes (keys, values) stacked as rows, each left-padded to `width` tokens
    (zeros where a joiner has none)."""
    import torch

    like = next(prefix for prefix, _ in found if prefix is not None).layers
    for layer, pair in enumerate(like):
        stacked = []
        for which, tensor in enumerate(pair):
            empty = torch.zeros((1, tensor.shape[1], width, tensor.shape[3]), dtype=tensor.dtype, device=tensor.device)
            stacked.append(torch.cat([
                _left_pad(prefix.layers[layer][which][:, :, :length], width) if prefix is not None else empty
                for prefix, length in found], dim=0))
        yield tuple(stacked)


def _left_pad(tensor, width: int, dim: int = 2):
    """`tensor` with zeros prepended along `dim` (the cache's sequence axis, or the mask's columns) up to `width`."""
    import torch

    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype, device=tensor.device), tensor], dim=dim)

