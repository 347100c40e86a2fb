"""How many status streams each token holds open: a stream holds a connection and a poll for as long as it is
open, so one token holds at most OPTIMIZE_STREAMS_PER_TOKEN (default 16) at once; one more is refused 429 naming
the cap and how many it holds. A stream's place is given back however it ends: settled, the client gone, or the
response never sent (then when it is garbage-collected)."""

from __future__ import annotations

import threading
import weakref
from collections import deque

from fastapi import Request
from fastapi.responses import StreamingResponse

from optimize.core.environment import setting
from optimize.core.errors import TooMany


def stream_cap() -> int:
    """How many status streams one token may hold open at once (OPTIMIZE_STREAMS_PER_TOKEN)."""
    return setting("OPTIMIZE_STREAMS_PER_TOKEN")


class StreamSlots:
    """How many status streams each holder (a token id) has open, against one cap. Taking and giving back are
    guarded by a lock; a slot given back by the garbage collector (whose finalizers may run while that lock is held,
    on the same thread) is queued instead, and counted at the next look."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()
        self._returned: deque[str] = deque()  # appended to without the lock (atomic)

    def held(self, holder: str) -> int:
        with self._lock:
            self._count_returned()
            return self._held.get(holder, 0)

    def take(self, holder: str) -> Slot | None:
        """A slot for one more stream of `holder`, or None when it already holds the cap."""
        with self._lock:
            self._count_returned()
            held = self._held.get(holder, 0)
            if held >= self.cap:
                return None
            self._held[holder] = held + 1
        return Slot(self, holder)

    def _give_back(self, holder: str) -> None:
        with self._lock:
            self._count_returned()
            self._drop(holder)

    def _count_returned(self) -> None:
        while self._returned:
            self._drop(self._returned.popleft())

    def _drop(self, holder: str) -> None:
        left = self._held.get(holder, 0) - 1
        if left > 0:
            self._held[holder] = left
        else:
            self._held.pop(holder, None)


class Slot:
    """One stream's place, given back once however many of its ends call `release()`."""

    def __init__(self, slots: StreamSlots, holder: str) -> None:
        self._slots, self._holder = slots, holder
        self._unreleased = [True]  # popped once: list.pop is atomic, so no lock a finalizer could wait on

    def _first_release(self) -> bool:
        try:
            return self._unreleased.pop()
        except IndexError:
            return False

    def release(self) -> None:
        if self._first_release():
            self._slots._give_back(self._holder)

    def release_when_collected(self) -> None:
        """For a finalizer: it may run inside the slots' lock, so the slot is queued rather than counted now."""
        if self._first_release():
            self._slots._returned.append(self._holder)


class HeldStream(StreamingResponse):
    """A stream that gives its slot back when it has been answered, however that ended (settled, the client gone,
    cancelled); if it is never answered at all, when it is garbage-collected."""

    def __init__(self, content, slot: Slot, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self._slot = slot
        weakref.finalize(self, slot.release_when_collected)

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


def _slots(request: Request) -> StreamSlots:
    slots = getattr(request.app.state, "status_streams", None)
    if slots is None:  # the app's first stream: no await between the look and the set
        slots = request.app.state.status_streams = StreamSlots(stream_cap())
    return slots


def take_slot(request: Request) -> Slot | None:
    """The caller's slot (None without a caller: routes outside the token gate hold no token to count)."""
    caller = request.scope.get("state", {}).get("caller")
    if caller is None:
        return None
    slots = _slots(request)
    slot = slots.take(caller.token_id)
    if slot is None:  # refused only when it holds exactly the cap (never more)
        raise TooMany(f"token {caller.name} already holds {slots.cap} status streams (the cap is {slots.cap} per "
                      f"token)", hint="close one (stop an akka --wait or a follow) or raise OPTIMIZE_STREAMS_PER_TOKEN "
                                  "on the server", cap=slots.cap, held=slots.cap)
    return slot
