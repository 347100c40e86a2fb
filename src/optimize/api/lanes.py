"""Threads a handler runs on besides anyio's shared pool, which every synchronous route and dependency takes one of
(40 at most), so that what waits long cannot keep the rest waiting:

- the workers' routes (`/v1/internal/…`: heartbeats, progress, leases, blobs) run on a lane of their own
  (`WORKERS_LANE`, through `LaneRoute`), so a worker's heartbeat is never queued behind users' requests and its lease
  cannot lapse because the server was busy;
- a request that may run user code (a run's submission or dry run, a branch, an evaluation's start) runs its service
  on `SUBMISSIONS_LANE`: where the service calls user code it waits for the bounded pool (`core.user_code`), on a
  thread of this lane, never of the shared pool. The lane has room for every call the pool lets in flight and more,
  so a submission that runs none does not wait behind those that do;
- a bundle check, user code from end to end, awaits the pool itself (`in_user_code_pool`): no thread is held while
  it waits.

`/v1/health` and the dependencies that hand routes the deployment are coroutines: they take no thread at all.
Each lane passes the request's context (its token's limits) on to its thread, as anyio's pool does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi.dependencies.utils import get_typed_return_annotation, get_typed_signature
from fastapi.routing import APIRoute

from optimize.core import user_code

T = TypeVar("T")

WORKER_THREADS = 32
ROOM_BESIDE_USER_CODE = 16  # submission threads beyond those the user-code pool can keep waiting


class Lane:
    """A fixed set of threads, made on first use (its size may depend on settings read then)."""

    def __init__(self, name: str, threads: Callable[[], int]) -> None:
        self.name = name
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._threads(), thread_name_prefix=self.name)
            return self._executor

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on one of the lane's threads, under the caller's context."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.executor(), call)


def _submission_threads() -> int:
    limits = user_code.limits()
    return limits.workers + limits.waiting + ROOM_BESIDE_USER_CODE


WORKERS_LANE = Lane("worker-routes", lambda: WORKER_THREADS)
SUBMISSIONS_LANE = Lane("submissions", _submission_threads)


async def in_user_code_pool(work: str, fn: Callable[..., T], /, *args: Any, project: str | None = None,
                            **kwargs: Any) -> T:
    """Run `fn` in the user-code pool and await it (TooMany at once when a limit is used up; Unavailable when the
    server stops before it ran)."""
    future = user_code.pool().submit(work, fn, *args, project=project, **kwargs)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if future.cancelled() and task is not None and not task.cancelling():  # dropped by the pool's shutdown
            raise user_code.stopping(work) from None
        raise


def on_lane(lane: Lane, endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """A synchronous endpoint as a coroutine that runs it on `lane`, with the same parameters (annotations resolved
    where the endpoint was written, which FastAPI reads them from) and the same name and text."""

    async def endpoint_on_lane(*args: Any, **kwargs: Any) -> Any:
        return await lane.run(endpoint, *args, **kwargs)

    signature = get_typed_signature(endpoint)
    returned = get_typed_return_annotation(endpoint)
    endpoint_on_lane.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=inspect.Signature.empty if returned is None else returned)
    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(endpoint_on_lane, name, getattr(endpoint, name))
    return endpoint_on_lane


class LaneRoute(APIRoute):
    """A route whose synchronous endpoint runs on the workers' lane instead of anyio's shared pool."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = on_lane(WORKERS_LANE, endpoint)
        super().__init__(path, endpoint, **kwargs)
