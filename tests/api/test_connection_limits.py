"""Connections that never finish and streams that never end: a request whose head or declared body stops
arriving is answered 408 and closed at its deadline, so hundreds of half-sent requests neither stay open nor keep
anyone else out; a ceiling on connections answers 503 rather than running out of files; a slow request that keeps
sending, and a status stream that stays quiet for longer than every deadline, are never cut; and one token holds at
most OPTIMIZE_STREAMS_PER_TOKEN status streams at once, the next one refused 429 naming the cap, a closed stream's
place given back.

The deadlines are checked on a real server process started with 1 s deadlines; the status streams on the real
`status_events` served by the server's own uvicorn configuration in this process, over an item that never settles
(no job of the real server stays unsettled without training something).
"""

from __future__ import annotations

import gc
import json
import select
import selectors
import socket
import threading
import time
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from pydantic import Field

from optimize.api import problems, status_stream, stream_slots
from optimize.api.connection_timeouts import deadline_protocol, protocol_from_env
from optimize.api.serve import bind, uvicorn_config
from optimize.api.status_stream import status_events
from optimize.api.stream_slots import Slot, StreamSlots
from optimize.auth.tokens import Caller
from optimize.core.errors import Invalid, NotFound
from optimize.core.tokens import Role
from optimize.schemas.common import Answer
from tests.conftest import migrated_store, start_server

DEADLINE = 1.0  # the real server's head deadline and body stall limit, in seconds
CEILING = 340  # its connection ceiling: room for the 300 half-sent requests below and one more


# --- helpers ----------------------------------------------------------------------------------------------------


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return sock


def until_closed(sock: socket.socket, limit: float = 10.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started, received = time.monotonic(), b""
    sock.settimeout(limit)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return received, time.monotonic() - started
        received += chunk


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def all_closed(socks: list[socket.socket], limit: float) -> list[bytes]:
    """What each connection got before the server closed it; fails if one is still open after `limit` seconds."""
    received = {sock: b"" for sock in socks}
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline, open_ = time.monotonic() + limit, set(socks)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            chunk = key.fileobj.recv(65536)
            if chunk:
                received[key.fileobj] += chunk
            else:
                selector.unregister(key.fileobj)
                open_.discard(key.fileobj)
    selector.close()
    assert not open_, f"{len(open_)} of {len(socks)} connections still open after {limit} s"
    return [received[sock] for sock in socks]


def problem_of(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def post_head(path: str, token: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


# --- the real server's deadlines ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def door(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("door"), env={
        "OPTIMIZE_HEADER_TIMEOUT_SECONDS": str(DEADLINE), "OPTIMIZE_IDLE_TIMEOUT_SECONDS": str(DEADLINE),
        "OPTIMIZE_MAX_CONNECTIONS": str(CEILING)})
    yield proc
    proc.stop()


@pytest.mark.integration
def test_a_half_sent_head_is_answered_408_and_closed_at_its_deadline(door):
    half = connect(door.url)
    half.sendall(b"GET /v1/health HTTP/1.1\r\nHost: test\r\n")  # the blank line that ends the head never comes
    received, took = until_closed(half)
    assert DEADLINE - 0.1 <= took < DEADLINE + 2
    status, body = problem_of(received)
    assert status == 408 and body["code"] == "request_timeout"
    assert f"did not all arrive within {DEADLINE:g} s" in body["detail"]
    assert "OPTIMIZE_HEADER_TIMEOUT_SECONDS" in body["hint"]

    silent = connect(door.url)  # a connection that never says anything is closed too, without an answer
    received, took = until_closed(silent)
    assert received == b"" and DEADLINE - 0.1 <= took < DEADLINE + 2

    # the deadline is for the whole head: trickling it a byte at a time does not keep it alive
    trickle = connect(door.url)
    started = time.monotonic()
    for byte in b"GET /v1/health HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"a" * 60:  # 0.1 s a byte: 9 s in all
        if select.select([trickle], [], [], 0)[0]:  # the server has answered (or closed): stop sending
            break
        trickle.sendall(bytes([byte]))
        time.sleep(0.1)
    received, _ = until_closed(trickle)
    assert time.monotonic() - started < DEADLINE + 2 and problem_of(received)[0] == 408

    # a request sent whole is answered, and its connection kept alive past the head deadline
    with httpx.Client(base_url=door.url) as client:
        assert client.get("/v1/health").status_code == 200
        time.sleep(DEADLINE + 0.5)
        assert client.get("/v1/health").status_code == 200
        assert client.get("/v1/health").status_code == 200


@pytest.mark.integration
def test_three_hundred_half_sent_requests_neither_stay_open_nor_keep_others_out(door):
    heads = [b"GET /v1/regis", b"POST /v1/auth/tokens HTTP/1.1\r\n", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: 1"]
    half = []
    for number in range(300):
        sock = connect(door.url)
        sock.sendall(heads[number % len(heads)])
        half.append(sock)
    started = time.monotonic()
    answer = httpx.get(f"{door.url}/v1/health", timeout=5)
    assert answer.status_code == 200
    assert time.monotonic() - started < DEADLINE / 2  # answered while all 300 are held, not after they were cut
    assert all(still_open(sock) for sock in half)
    received = all_closed(half, DEADLINE + 4)
    assert all(problem_of(got)[0] == 408 for got in received)
    for sock in half:
        sock.close()
    assert httpx.get(f"{door.url}/v1/health").status_code == 200


@pytest.mark.integration
def test_a_slow_upload_that_keeps_sending_is_not_cut_and_a_stalled_one_is(door):
    body = json.dumps({"name": "slow-but-steady", "role": "reader"}).encode()
    slow = connect(door.url)
    slow.sendall(post_head("/v1/auth/tokens", door.token, len(body)))
    started = time.monotonic()
    for start in range(0, len(body), 3):  # ~15 pieces, 0.25 s apart: longer than both deadlines, never idle 1 s
        slow.sendall(body[start:start + 3])
        time.sleep(0.25)
    assert time.monotonic() - started > 2 * DEADLINE
    slow.settimeout(10)
    answer = slow.recv(65536)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    slow.close()
    names = [t["name"] for t in httpx.get(f"{door.url}/v1/auth/tokens", headers=door.headers).json()["tokens"]]
    assert "slow-but-steady" in names

    stalled = connect(door.url)
    stalled.sendall(post_head("/v1/auth/tokens", door.token, len(body)) + body[:7])  # then nothing more
    received, took = until_closed(stalled)
    assert DEADLINE - 0.1 <= took < DEADLINE + 2
    status, problem = problem_of(received)
    assert status == 408 and "body stopped arriving" in problem["detail"]
    assert "OPTIMIZE_IDLE_TIMEOUT_SECONDS" in problem["hint"]


@pytest.mark.integration
def test_past_the_connection_ceiling_a_request_is_answered_503_until_places_free_up(door):
    held = [connect(door.url) for _ in range(CEILING)]  # silent ones: each holds a place until its deadline
    try:
        answer = httpx.get(f"{door.url}/v1/health", timeout=5)
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert body["code"] == "unavailable" and f"already holds {CEILING} connections" in body["detail"]
        assert "OPTIMIZE_MAX_CONNECTIONS" in body["hint"] and answer.headers["retry-after"] == "1"
        all_closed(held, DEADLINE + 4)
        assert httpx.get(f"{door.url}/v1/health", timeout=5).status_code == 200
    finally:
        for sock in held:
            sock.close()


@pytest.mark.integration
def test_a_bad_limit_stops_the_server_at_its_start_naming_the_variable(tmp_path):
    with pytest.raises(RuntimeError) as failed:
        start_server(tmp_path / "bad", env={"OPTIMIZE_HEADER_TIMEOUT_SECONDS": "soon"})
    assert "server exited with 2" in str(failed.value)  # a malformed setting: a usage error
    assert "OPTIMIZE_HEADER_TIMEOUT_SECONDS='soon' is not a number of seconds above 0" in str(failed.value)


# --- status streams ------------------------------------------------------------------------------------------------

CAP = 2


class FakeGate:
    """The token gate's part that status streams read: the caller, here named by an `X-Token` header."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            name = dict(scope["headers"]).get(b"x-token", b"anonymous").decode()
            scope.setdefault("state", {})["caller"] = Caller(token_id=f"id-{name}", name=name, role=Role.READER)
        await self.app(scope, receive, send)


class Item(Answer):
    item_id: str = Field(description="The item's id")
    settled: bool = Field(description="Whether it changes no more")


@pytest.fixture
def streams(tmp_path, monkeypatch):
    """The real `status_events` (items `live-*` never settle, `done-*` are settled, `missing` does not exist), served
    by the server's own uvicorn configuration with 0.5 s deadlines; the cap is 2 per token."""
    monkeypatch.setenv("OPTIMIZE_STREAMS_PER_TOKEN", str(CAP))
    deployment = SimpleNamespace(store=migrated_store("sqlite", tmp_path))

    def read(_deployment, item_id: str) -> Item:
        if item_id == "missing":
            raise NotFound("item 'missing' does not exist")
        return Item(item_id=item_id, settled=item_id.startswith("done"))

    app = FastAPI()
    problems.install(app)

    @app.get("/items/{item_id}/events")
    async def follow(item_id: str, request: Request):
        return await status_events(request, read, deployment, item_id, "itemId", "item")

    app.add_middleware(FakeGate)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app, deadline_protocol(0.5, 0.5, 100)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield SimpleNamespace(url=f"http://127.0.0.1:{sock.getsockname()[1]}", app=app)
    server.should_exit = True
    thread.join(15)
    deployment.store.dispose()


class Stream:
    """A status stream opened and read up to its first event; `close()` hangs up."""

    def __init__(self, url: str, item: str, token: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=10)
        self.response = self.client.send(self.client.build_request("GET", f"/items/{item}/events",
                                                                   headers={"X-Token": token}), stream=True)
        self.status = self.response.status_code
        if self.status == 200:
            self.lines = self.response.iter_lines()
            assert next(self.lines) == "event: status"
            assert json.loads(next(self.lines).removeprefix("data: "))["itemId"] == item
        else:
            self.problem = json.loads(self.response.read())

    def close(self) -> None:
        self.response.close()
        self.client.close()


def held(streams, token: str) -> int:
    slots = getattr(streams.app.state, "status_streams", None)
    return 0 if slots is None else slots.held(f"id-{token}")


def wait_for_held(streams, token: str, count: int, limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while held(streams, token) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(streams, token) == count


@pytest.mark.integration
def test_one_stream_more_than_the_cap_is_refused_429_and_a_closed_one_frees_its_place(streams):
    first, second = Stream(streams.url, "live-1", "ana"), Stream(streams.url, "live-2", "ana")
    assert first.status == second.status == 200 and held(streams, "ana") == CAP

    third = Stream(streams.url, "live-3", "ana")
    assert third.status == 429
    assert third.problem["code"] == "too_many"
    assert third.problem["detail"] == f"token ana already holds {CAP} status streams (the cap is {CAP} per token)"
    assert "OPTIMIZE_STREAMS_PER_TOKEN" in third.problem["hint"] and "akka --wait" in third.problem["hint"]
    assert third.problem["cap"] == CAP and third.problem["held"] == CAP
    third.close()
    assert held(streams, "ana") == CAP  # a refused stream holds nothing

    other = Stream(streams.url, "live-1", "bob")  # another token has places of its own
    assert other.status == 200 and held(streams, "bob") == 1

    first.close()  # the client hangs up: the server sees it gone and gives the place back
    wait_for_held(streams, "ana", CAP - 1)
    again = Stream(streams.url, "live-3", "ana")
    assert again.status == 200

    for stream in (second, other, again):
        stream.close()
    wait_for_held(streams, "ana", 0)
    wait_for_held(streams, "bob", 0)


@pytest.mark.integration
def test_streams_that_end_or_never_start_leave_no_place_taken(streams):
    holding = Stream(streams.url, "live-1", "cy")
    for _ in range(CAP + 2):
        ended = Stream(streams.url, "done-1", "cy")  # settled: one status, then the stream ends by itself
        assert ended.status == 200 and list(ended.lines) == [""]
        ended.close()
        missing = Stream(streams.url, "missing", "cy")  # refused before any stream starts
        assert missing.status == 404 and missing.problem["code"] == "not_found"
        missing.close()
    wait_for_held(streams, "cy", 1)
    second = Stream(streams.url, "live-2", "cy")
    assert second.status == 200
    holding.close()
    second.close()
    wait_for_held(streams, "cy", 0)


@pytest.mark.integration
def test_a_quiet_stream_outlives_every_deadline(streams, monkeypatch):
    monkeypatch.setattr(status_stream, "KEEPALIVE_SECONDS", 2.0)  # 2 s of silence both ways; the deadlines are 0.5 s
    stream = Stream(streams.url, "live-1", "dee")
    started = time.monotonic()
    lines = [next(stream.lines) for _ in range(4)]  # the blank line after the status, then the keep-alive comments
    assert lines == ["", ": keep-alive", "", ": keep-alive"]
    assert time.monotonic() - started > 3.5  # two keep-alives 2 s apart came through one connection
    stream.close()
    wait_for_held(streams, "dee", 0)


# --- the counting and the settings, without a server --------------------------------------------------------------


def test_slots_count_per_holder_against_the_cap_and_give_back_once():
    slots = StreamSlots(cap=2)
    first, second = slots.take("a"), slots.take("a")
    assert isinstance(first, Slot) and isinstance(second, Slot) and slots.held("a") == 2
    assert slots.take("a") is None and slots.held("a") == 2  # refused: nothing taken
    assert slots.take("b") is not None and slots.held("b") == 1
    first.release()
    first.release()  # once only, however often it is called
    assert slots.held("a") == 1
    assert slots.take("a") is not None and slots.held("a") == 2
    second.release()
    assert slots.held("a") == 1


def test_slots_stay_exact_under_many_threads():
    slots = StreamSlots(cap=5)
    peak, lock = [0], threading.Lock()

    def churn() -> None:
        for _ in range(2000):
            slot = slots.take("t")
            if slot is not None:
                with lock:
                    peak[0] = max(peak[0], slots.held("t"))
                slot.release()
                slot.release()

    workers = [threading.Thread(target=churn) for _ in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert slots.held("t") == 0 and peak[0] <= 5 and slots._held == {}


def test_a_stream_response_never_answered_gives_its_place_back_when_collected():
    slots = StreamSlots(cap=1)
    slot = slots.take("a")

    async def body():
        yield b""

    response = stream_slots.HeldStream(body(), slot, media_type="text/event-stream")
    assert slots.held("a") == 1
    del response
    gc.collect()
    assert slots.held("a") == 0

    # a finalizer may run while the slots' lock is held on the same thread: it must queue, not wait for the lock
    slot = slots.take("a")
    with slots._lock:
        slot.release_when_collected()
    slot.release()  # and the slot is still given back once only
    assert slots.held("a") == 0 and slots.take("a") is not None


def test_limits_from_the_environment(monkeypatch):
    monkeypatch.delenv("OPTIMIZE_STREAMS_PER_TOKEN", raising=False)
    assert stream_slots.stream_cap() == 16
    monkeypatch.setenv("OPTIMIZE_STREAMS_PER_TOKEN", "3")
    assert stream_slots.stream_cap() == 3
    for bad in ("0", "-1", "1.5", "many"):
        monkeypatch.setenv("OPTIMIZE_STREAMS_PER_TOKEN", bad)
        with pytest.raises(Invalid, match="OPTIMIZE_STREAMS_PER_TOKEN"):
            stream_slots.stream_cap()
    monkeypatch.setenv("OPTIMIZE_MAX_CONNECTIONS", "0")
    assert protocol_from_env().max_connections == 0  # no ceiling
    for bad in ("0", "nan", "inf", "-2", "soon"):
        monkeypatch.setenv("OPTIMIZE_IDLE_TIMEOUT_SECONDS", bad)
        with pytest.raises(Invalid, match="OPTIMIZE_IDLE_TIMEOUT_SECONDS"):
            protocol_from_env()
    monkeypatch.setenv("OPTIMIZE_IDLE_TIMEOUT_SECONDS", "0.25")
    assert protocol_from_env().idle_seconds == 0.25
