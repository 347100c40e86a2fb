"""The bounded pool user-supplied code runs in on the server: a scoring bundle's import check and its check against a
dataset, a reinforcement run's reward terms on its rows and sampled groups in a dry run (regular expressions
included), a rule term's or a bundle grader's import check when a run or an evaluation is submitted.

None of it runs on the event loop or on the threads the other routes share: a call runs on one of
OPTIMIZE_USER_CODE_WORKERS threads (default 4) or waits for one. One token has at most
OPTIMIZE_USER_CODE_PER_TOKEN calls in flight (running or waiting; default 4), one project at most
OPTIMIZE_USER_CODE_PER_PROJECT (default 8), and at most OPTIMIZE_USER_CODE_WAITING calls wait for a worker, all
tokens together (default 32). One more is refused at once (429 `too_many`), naming the limit, what holds it and the
setting that raises it; nothing queues without bound.

The caller's token comes from `core.access` (the token gate sets it for the request, and it follows the call onto
the worker, where the services check and filter by it as in the request). Work the server does on its own has no
token: it counts against the workers and the waiting only. A call made from inside a worker (a bundle check that
starts a sampling evaluation, whose grader is checked again) runs at once on that worker: it holds its caller's
place, so a full pool cannot deadlock on itself.

When the server stops (`shutdown`, at the start of uvicorn's shutdown and again in `stop_jobs`), the calls still
waiting for a worker are dropped and answered 503 `unavailable`, as is any call made after; the running ones end
within their own time limits (a bundle's process is killed at its limit), so a stopping server waits for no queue.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from optimize.core.access import check_project, current_token
from optimize.core.environment import declared, setting
from optimize.core.errors import TooMany, Unavailable

T = TypeVar("T")

SETTINGS = {"workers": "OPTIMIZE_USER_CODE_WORKERS", "per_token": "OPTIMIZE_USER_CODE_PER_TOKEN",
            "per_project": "OPTIMIZE_USER_CODE_PER_PROJECT", "waiting": "OPTIMIZE_USER_CODE_WAITING"}
DEFAULTS: dict[str, int] = {field: declared(name).default_value for field, name in SETTINGS.items()}
WORKERS, PER_TOKEN, PER_PROJECT, WAITING = (DEFAULTS[field] for field in SETTINGS)
NAMED = 5  # holders a refusal names

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("optimize_user_code_worker", default=False)


@dataclass(frozen=True, slots=True)
class UserCodeLimits:
    """How much user code the server runs at once and how much one token and one project may have in flight."""

    workers: int = WORKERS
    per_token: int = PER_TOKEN
    per_project: int = PER_PROJECT
    waiting: int = WAITING

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> UserCodeLimits:
        """The limits the OPTIMIZE_USER_CODE_* variables set; a value that is no whole number above 0 is refused
        (Invalid naming the variable), so a typo stops the server at its start."""
        return cls(**{field: setting(name, environ) for field, name in SETTINGS.items()})


@dataclass(frozen=True, slots=True, eq=False)
class _Place:
    """One call's place in flight: what it is, and the token and project it counts against."""

    work: str
    token: str | None
    token_name: str | None
    project: str | None


class UserCodePool:
    """A fixed number of worker threads for user code, and the places in flight each token and project holds."""

    def __init__(self, limits: UserCodeLimits) -> None:
        self.limits = limits
        self._executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="user-code")
        self._lock = threading.Lock()
        self._places: list[_Place] = []
        self._closed = False

    def submit(self, work: str, fn: Callable[..., T], /, *args: Any, project: str | None = None,
               **kwargs: Any) -> Future[T]:
        """Run `fn(*args, **kwargs)` on a worker, under the caller's context (its token's limits); `work` says what
        it is (a refusal names it: `bundle check acme/reward`). Refused at once with TooMany when a limit is used
        up; a call waiting for a worker is dropped, and its place given back, when its future is cancelled."""
        if _inside.get():  # already on a worker: run here, in the caller's place
            return _done(fn, args, kwargs)
        place = self._take(work, project)
        context = contextvars.copy_context()
        try:
            future = self._executor.submit(context.run, _on_worker, fn, args, kwargs)
        except RuntimeError:  # shut down between the place taken and the submission
            self._give_back(place)
            raise stopping(work) from None
        except BaseException:
            self._give_back(place)
            raise
        future.add_done_callback(lambda _: self._give_back(place))
        return future

    def call(self, work: str, fn: Callable[..., T], /, *args: Any, project: str | None = None, **kwargs: Any) -> T:
        """`submit`, waiting for the result on the caller's thread (which must not be one the other routes share)."""
        if _inside.get():
            return fn(*args, **kwargs)
        try:
            return self.submit(work, fn, *args, project=project, **kwargs).result()
        except CancelledError:  # dropped while it waited: the server stops
            raise stopping(work) from None

    def in_flight(self) -> int:
        with self._lock:
            return len(self._places)

    def _take(self, work: str, project: str | None) -> _Place:
        if project is not None:
            check_project(project)  # a limited token learns nothing of a project outside its limits
            project = project.lower()
        token = current_token()
        place = _Place(work, token[0] if token else None, token[1] if token else None, project)
        limits = self.limits
        with self._lock:
            if self._closed:
                raise stopping(work)
            if token is not None:
                held = [p for p in self._places if p.token == place.token]
                if len(held) >= limits.per_token:
                    _refuse(f"token {place.token_name}", held, f"its limit ({limits.per_token} per token)",
                            "per_token", limits.per_token)
            if project is not None:
                held = [p for p in self._places if p.project == project]
                if len(held) >= limits.per_project:
                    _refuse(f"project {project}", held, f"its limit ({limits.per_project} per project)",
                            "per_project", limits.per_project)
            bound = limits.workers + limits.waiting
            if len(self._places) >= bound:
                raise TooMany(f"the server already has {len(self._places)} checks of user code running or waiting, its "
                              f"bound ({limits.workers} running and {limits.waiting} waiting)",
                              hint=f"try again when some have ended; or ask the operator to raise "
                                   f"{SETTINGS['waiting']} or {SETTINGS['workers']}",
                              limit=bound, used=len(self._places), setting=SETTINGS["waiting"])
            self._places.append(place)
        return place

    def _give_back(self, place: _Place) -> None:
        with self._lock:
            self._places.remove(place)  # by identity (eq=False)

    def shutdown(self) -> None:
        """Drop the calls still waiting (their callers get `stopping`) and refuse new ones; the running ones end
        within their own time limits. Returns at once; calling it again does nothing more."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)


def stopping(work: str) -> Unavailable:
    """The refusal of a call the pool no longer runs because the server stops."""
    return Unavailable(f"the server is stopping, so {work} was not run", hint="try again once the server is back")


def _refuse(holder: str, held: list[_Place], limit_text: str, field: str, limit: int) -> None:
    works = [p.work + (f" (token {p.token_name})" if p.token_name and not holder.startswith("token") else "")
             for p in held]
    named = ", ".join(works[:NAMED]) + (f" and {len(works) - NAMED} more" if len(works) > NAMED else "")
    setting = SETTINGS[field]
    raise TooMany(f"{holder} already has {len(held)} checks of user code in flight, {limit_text}; held by {named}",
                  hint=f"wait for one to end; or ask the operator to raise {setting}",
                  limit=limit, used=len(held), setting=setting)


def _on_worker(fn: Callable[..., T], args: tuple, kwargs: dict[str, Any]) -> T:
    _inside.set(True)  # in this call's own copy of the caller's context
    return fn(*args, **kwargs)


def _done(fn: Callable[..., T], args: tuple, kwargs: dict[str, Any]) -> Future[T]:
    future: Future[T] = Future()
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the future, as the executor does
        future.set_exception(error)
    return future


_pool: UserCodePool | None = None
_pool_lock = threading.Lock()


def limits() -> UserCodeLimits:
    """The limits the environment sets (Invalid naming a malformed variable)."""
    return UserCodeLimits.from_env()


def pool() -> UserCodePool:
    """The server's pool, made on first use from the environment's limits."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = UserCodePool(limits())
        return _pool


def call(work: str, fn: Callable[..., T], /, *args: Any, project: str | None = None, **kwargs: Any) -> T:
    """Run user code in the server's pool and wait for it (see `UserCodePool.call`)."""
    return pool().call(work, fn, *args, project=project, **kwargs)


def shutdown() -> None:
    """The server stops: its pool (if one was made) drops the waiting calls and refuses new ones."""
    with _pool_lock:
        current = _pool
    if current is not None:
        current.shutdown()
