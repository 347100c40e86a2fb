"""The endpoint job: load the base model and the attached adapters, answer OpenAI chat completions on a
127.0.0.1 port, and tell the server where (it proxies `/v1/chat/completions` there).

A heartbeat thread keeps the lease, reports the address and the adapters loaded, and carries out what the
server answers: an adapter attached since is fetched and loaded, a detached one is unloaded. When the endpoint
is deleted (the lease is gone) the worker stops serving and exits.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import socket
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.core.errors import ParamError
from optimize.schemas.jobs import EndpointSpec
from optimize.schemas.outcomes import LastWord
from optimize.serving.completions import read_request
from optimize.worker.channel import ApiError, Channel
from optimize.worker.rendering import renderer_for


def run_endpoint(channel: Channel, endpoint_id: str) -> int:
    base = channel.base
    try:
        spec = channel.spec(EndpointSpec)
    except ApiError as error:
        print(f"cannot start: {error.message}", flush=True)
        return 3
    workdir = Path(tempfile.mkdtemp(prefix=f"endpoint-{endpoint_id[:12]}-"))
    beat = _Heartbeat(channel, base, spec["leaseSeconds"], workdir)
    beat.start()
    try:
        return _serve(spec, beat)
    except Exception as error:  # noqa: BLE001 - the process edge: the reason goes on the endpoint
        traceback.print_exc()
        beat.stop()
        if beat.lost.is_set():
            return 3
        return channel.report_end(f"{base}/result",
                                  LastWord.failure(f"the endpoint failed: {type(error).__name__}: {error}").wire())
    finally:
        beat.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _serve(spec: dict[str, Any], beat: _Heartbeat) -> int:
    import uvicorn

    from optimize.serving.completions import Completer
    from optimize.serving.engine import engine_for
    from optimize.serving.text_completions import TextCompleter

    renderer = renderer_for(spec["model"])
    engine = engine_for(spec["model"]["path"])
    beat.engine = engine
    beat.sync(spec["adapters"])  # the adapters attached at creation answer from the first request
    completer = Completer(engine, renderer, spec.get("toolCallParser"), spec.get("contextLength"),
                          beat.instructions)
    gc.collect()
    gc.freeze()  # what is loaded stays: the collector's full passes no longer walk it (pauses in the decoding loop)
    texts = TextCompleter(engine, renderer.tokenizer, spec.get("contextLength"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections queue from now on, so the address can be reported before uvicorn runs
    server = uvicorn.Server(uvicorn.Config(_app(completer, texts, spec["model"]["id"], engine),
                                           log_level="warning"))
    beat.on_lost = lambda: setattr(server, "should_exit", True)
    beat.address = "127.0.0.1:%d" % sock.getsockname()[1]
    beat.wake()
    print(f"serving {spec['model']['id']} on {beat.address}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        engine.close()  # the batch's loop ends before the process does
    if beat.lost.is_set():
        print(f"stopped: {beat.lost_reason}", flush=True)
    return 3 if beat.lost.is_set() else 0


RETRY_AFTER_SECONDS = 1


def _app(completer, texts, base_name: str, engine) -> FastAPI:
    """The worker's OpenAI routes; every error in OpenAI's shape (`error`: message, type, param, code)."""
    from optimize.serving.batcher import QueueFull, RequestTimedOut
    from optimize.serving.responses import NotKept, Responder
    from optimize.serving.text_completions import read_text_request

    responder = Responder(completer)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        # a request waits for the engine on a thread of the pool: room for every row and every queued request
        anyio.to_thread.current_default_thread_limiter().total_tokens = \
            engine.batcher.max_running + engine.batcher.max_waiting + 8
        yield

    app = FastAPI(lifespan=lifespan)

    def refuse(message: str, status: int = 400, param: str | None = None, code: str | None = None,
               headers: dict[str, str] | None = None) -> JSONResponse:
        kind = {404: "not_found_error", 429: "rate_limit_error", 504: "timeout"}.get(status, "invalid_request_error")
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                            status_code=status, headers=headers)

    async def answer(request: Request, read, answerer):
        try:
            body = await request.json()
        except ValueError:
            return refuse("the request body is not JSON")
        try:
            asked = read(body)
            if asked.model != base_name and asked.model not in engine.adapters:
                return refuse(f"model {asked.model!r} is not loaded on this endpoint", 404, "model",
                              "model_not_found")
            adapter = None if asked.model == base_name else asked.model
            if asked.stream:
                events = await run_in_threadpool(answerer.chunks, adapter, asked)
                return StreamingResponse(events, media_type="text/event-stream")
            return JSONResponse(await run_in_threadpool(answerer.complete, adapter, asked))
        except ParamError as error:  # the request's own fields, its grammar or its sampling
            return refuse(str(error), param=error.param)
        except RequestTimedOut as late:
            return refuse(str(late), 504, code="request_timeout")
        except QueueFull as full:
            return refuse(f"the endpoint is at capacity ({full}); try again shortly", 429, code="queue_full",
                          headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await answer(request, read_request, completer)

    @app.post("/v1/completions")
    async def text(request: Request):
        return await answer(request, read_text_request, texts)

    @app.post("/v1/responses")
    async def responses(request: Request):
        try:
            return await answer(request, responder.read, responder)
        except NotKept as gone:
            return refuse(str(gone), 404, "previous_response_id", "previous_response_not_found")

    return app


class _Heartbeat:
    def __init__(self, channel: Channel, base: str, lease_seconds: float, workdir: Path) -> None:
        self.channel = channel
        self.base = base
        self.lease_seconds = lease_seconds
        self.interval = max(0.5, min(2.0, lease_seconds / 4))  # an attached adapter loads within about this
        self.workdir = workdir
        self.engine = None
        self.instructions: dict[str, str | None] = {}  # each served adapter's, by name (the completer reads them)
        self.address: str | None = None
        self.on_lost = lambda: None
        self.lost = threading.Event()
        self.lost_reason = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_contact = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def sync(self, wanted: list[dict[str, Any]]) -> bool:
        """Load the adapters the server lists and unload the others, and keep each one's trained instructions;
        True when anything changed."""
        if self.engine is None:
            return False
        self.instructions.clear()
        self.instructions.update({a["name"]: a.get("instructions") for a in wanted})
        names = {a["name"] for a in wanted}
        changed = False
        for name in [n for n in self.engine.adapters if n not in names]:
            self.engine.unload_adapter(name)
            changed = True
        for adapter in wanted:
            if adapter["name"] not in self.engine.adapters:
                folder = self.workdir / adapter["manifest"][:16]
                self.engine.load_adapter(adapter["name"], self.channel.fetch_artifact(adapter["manifest"], folder))
                changed = True
        return changed

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                answer = self.channel.post_json(f"{self.base}/heartbeat", {
                    "address": self.address, "loaded": sorted(self.engine.adapters) if self.engine else [],
                    "load": self.engine.batcher.statistics() if self.engine else None})
                self._last_contact = time.monotonic()
                if self.address and self.sync(answer.get("adapters") or []):
                    continue  # say at once that the adapters are loaded
            except ApiError as error:
                if error.code == "lease_lost" or time.monotonic() - self._last_contact > self.lease_seconds:
                    self.lost_reason = error.message
                    self.lost.set()
                    self.on_lost()
                    return
            except Exception:  # noqa: BLE001 - an adapter that fails to load is retried at the next beat
                traceback.print_exc()
            self._wake.wait(self.interval)
            self._wake.clear()
