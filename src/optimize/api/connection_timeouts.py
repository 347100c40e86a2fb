"""Deadlines on the way in, and a ceiling on connections: uvicorn's HTTP protocol with timers it lacks.

Uvicorn hands a request to the app once its head (request line and headers) has arrived, and until then waits as
long as the client likes; it also waits forever for the rest of a body the client declared and stopped sending.
Each such half-sent request holds a connection (a file descriptor, a place under any connection limit), so a few
hundred clients trickling a header a minute lock everyone else out ("slowloris"). Uvicorn's own keep-alive timeout
covers only the quiet between two requests. `DeadlineProtocol` adds two timers:

- **Head deadline** (`OPTIMIZE_HEADER_TIMEOUT_SECONDS`, default 10): a request's line and headers must all arrive
  within this long of its first byte; for a new connection, of the connection itself, so one that sends nothing
  goes too. A partly sent head is answered 408 and the connection closed; a silent connection is just closed.
- **Body stall** (`OPTIMIZE_IDLE_TIMEOUT_SECONDS`, default 60): while a request's declared body is still arriving,
  this long without a byte ends it (408 while nothing has been answered, else just closed). Every byte that arrives
  restarts the count, so a long upload that keeps sending is never cut; time the server itself is not reading (its
  buffer is full, it has not yet said 100 Continue, or it is still answering the request) does not count.

Responses are never timed: a status stream that stays open for hours, quiet between keep-alive comments, is left
alone, and a late head pipelined behind a response in progress only makes the connection close once that response
is done. On top, `OPTIMIZE_MAX_CONNECTIONS` (default 1000; 0: no ceiling) answers a request 503 while the server
already holds that many connections, rather than running into the process's file limit; with the head deadline,
half-sent connections cannot hold those places for long.
"""

from __future__ import annotations

import json
from asyncio import TimerHandle

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from optimize.api.problems import send_problem
from optimize.core.environment import declared, setting

HEADER_TIMEOUT_SECONDS: float = declared("OPTIMIZE_HEADER_TIMEOUT_SECONDS").default_value
IDLE_TIMEOUT_SECONDS: float = declared("OPTIMIZE_IDLE_TIMEOUT_SECONDS").default_value
MAX_CONNECTIONS: int = declared("OPTIMIZE_MAX_CONNECTIONS").default_value


class DeadlineProtocol(HttpToolsProtocol):
    """Uvicorn's httptools protocol with a head deadline, a body stall limit and a connection ceiling (see the
    module). The limits are class attributes: `deadline_protocol()` makes a subclass carrying a server's own."""

    header_seconds: float = HEADER_TIMEOUT_SECONDS
    idle_seconds: float = IDLE_TIMEOUT_SECONDS
    max_connections: int = MAX_CONNECTIONS  # 0: no ceiling

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None
        self._awaiting_head = True  # the next bytes begin a request's head (none is being read, nor its body)
        self._head_started = False  # some of that head has arrived
        self._last_body_progress = 0.0

    # connection and bytes

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head()  # the first request's head is due within the deadline of the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            if data:
                self._head_started = True
                if self._head_timer is None:
                    self._arm_head()
        elif self._body_timer is not None:
            self._last_body_progress = self.loop.time()
        super().data_received(data)

    def handle_websocket_upgrade(self) -> None:
        self._cancel_timers()  # another protocol owns the connection from here
        super().handle_websocket_upgrade()

    # the parser's callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head, self._head_started = True, True
        if self._head_timer is None:
            self._arm_head()

    def on_headers_complete(self) -> None:
        self._cancel_head()
        self._awaiting_head, self._head_started = False, False
        if self.max_connections and (len(self.connections) > self.max_connections
                                     or len(self.tasks) >= self.max_connections):
            app, self.app = self.app, self._too_busy  # uvicorn starts `self.app` for this request: refuse it instead
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        else:
            super().on_headers_complete()
        self._last_body_progress = self.loop.time()
        self._body_timer = self.loop.call_later(self.idle_seconds, self._body_check)

    def on_message_complete(self) -> None:
        self._cancel_body()
        self._awaiting_head = True
        super().on_message_complete()

    # the timers

    def _arm_head(self) -> None:
        self._head_timer = self.loop.call_later(self.header_seconds, self._head_expired)

    def _cancel_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head()
        self._cancel_body()

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # a late head pipelined behind a response still going out (a status stream, say): never cut that
            # response; the connection ends once it is done
            cycle.keep_alive = False
            return
        if self._head_started:
            self._answer_408(f"the request's headers did not all arrive within {self.header_seconds:g} s",
                             "OPTIMIZE_HEADER_TIMEOUT_SECONDS")
        self.transport.close()

    def _body_check(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        now, cycle = self.loop.time(), self.cycle
        waiting_on_us = (self.flow.read_paused or cycle is None or cycle.waiting_for_100_continue
                         or (cycle.response_started and not cycle.response_complete))
        if waiting_on_us:
            self._last_body_progress = now  # the client could not send meanwhile: count from when it can
        quiet = now - self._last_body_progress
        if quiet < self.idle_seconds:
            self._body_timer = self.loop.call_later(self.idle_seconds - quiet, self._body_check)
            return
        if not cycle.response_started:
            self._answer_408(f"the request's body stopped arriving ({self.idle_seconds:g} s without a byte)",
                             "OPTIMIZE_IDLE_TIMEOUT_SECONDS")
        self.transport.close()  # the app waiting on the body sees the client gone

    def _answer_408(self, detail: str, setting: str) -> None:
        """Written straight to the connection, as uvicorn answers a request it cannot parse: no app has it."""
        body = json.dumps({"type": "https://optimize.dev/problems/request_timeout", "title": "Request timeout",
                           "status": 408, "code": "request_timeout", "detail": detail,
                           "hint": f"send the request without pausing; over a link this slow an operator may raise "
                                   f"{setting}"}).encode()
        content = [STATUS_LINE[408]]
        for name, value in self.server_state.default_headers:
            content += [name, b": ", value, b"\r\n"]
        content += [b"content-type: application/problem+json\r\n", b"content-length: %d\r\n" % len(body),
                    b"connection: close\r\n", b"\r\n", body]
        self.transport.write(b"".join(content))

    async def _too_busy(self, scope, receive, send) -> None:
        await send_problem(scope, receive, send, 503, "unavailable",
                           f"the server already holds {self.max_connections} connections, its ceiling",
                           headers={"connection": "close", "retry-after": "1"},
                           hint="try again in a moment; an operator may raise OPTIMIZE_MAX_CONNECTIONS")


def deadline_protocol(header_seconds: float, idle_seconds: float, max_connections: int) -> type[DeadlineProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, carrying these limits."""
    return type("DeadlineProtocol", (DeadlineProtocol,), {"header_seconds": header_seconds,
                                                           "idle_seconds": idle_seconds,
                                                           "max_connections": max_connections})


def protocol_from_env() -> type[DeadlineProtocol]:
    """The protocol with the limits this process is configured with (OPTIMIZE_HEADER_TIMEOUT_SECONDS,
    OPTIMIZE_IDLE_TIMEOUT_SECONDS, OPTIMIZE_MAX_CONNECTIONS); a bad value is refused naming its variable."""
    return deadline_protocol(setting("OPTIMIZE_HEADER_TIMEOUT_SECONDS"), setting("OPTIMIZE_IDLE_TIMEOUT_SECONDS"),
                             setting("OPTIMIZE_MAX_CONNECTIONS"))
