"""The bounded pool for user code (`core.user_code`): its limits from the environment, the places each token and
project holds (refused at once past a limit, naming it, what holds it and the setting), the places given back
however a call ends, a call from inside a worker run in place; and the lanes (`api.lanes`) a route's thread comes
from: the workers' routes off anyio's shared pool, under the request's token."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from optimize.api.lanes import LaneRoute
from optimize.core.access import AccessLimits, current_token, limited_to
from optimize.core.errors import Forbidden, Invalid, TooMany
from optimize.core.user_code import UserCodeLimits, UserCodePool


def as_token(name: str, token_id: str | None = None, projects: set[str] | None = None):
    return limited_to(AccessLimits(name, frozenset(projects) if projects else None,
                                   frozenset(projects) if projects else None, token_id or f"id-{name}"))


class Gate:
    """Work that waits until it is let go: holds its place for as long as a test needs."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self, value=None):
        self.entered.release()
        assert self.go.wait(10)
        return value


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_limits_come_from_the_environment_and_a_malformed_one_is_refused_naming_it():
    assert UserCodeLimits.from_env({}) == UserCodeLimits(4, 4, 8, 32)
    assert UserCodeLimits.from_env({"OPTIMIZE_USER_CODE_WORKERS": " 2 ", "OPTIMIZE_USER_CODE_PER_TOKEN": "1",
                                    "OPTIMIZE_USER_CODE_PER_PROJECT": "3", "OPTIMIZE_USER_CODE_WAITING": "5"}) == \
        UserCodeLimits(2, 1, 3, 5)
    for text in ("0", "-1", "two", "1.5"):
        with pytest.raises(Invalid) as refused:
            UserCodeLimits.from_env({"OPTIMIZE_USER_CODE_PER_TOKEN": text})
        assert refused.value.message == f"OPTIMIZE_USER_CODE_PER_TOKEN={text!r} is not a whole number above 0"
        assert refused.value.hint == ("set OPTIMIZE_USER_CODE_PER_TOKEN to a whole number above 0, or unset it for "
                                      "the default (4)")


def test_a_token_past_its_limit_is_refused_at_once_naming_the_limit_the_holders_and_the_setting():
    pool = UserCodePool(UserCodeLimits(workers=1, per_token=2, per_project=8, waiting=8))
    gate = Gate()
    with as_token("ci"):
        held = [pool.submit(f"bundle check acme/r{i}", gate, i) for i in range(2)]
        started = time.monotonic()
        with pytest.raises(TooMany) as refused:
            pool.submit("bundle check acme/r2", gate)
        assert time.monotonic() - started < 1
    assert refused.value.status == 429
    assert refused.value.message == ("token ci already has 2 checks of user code in flight, its limit (2 per token); "
                                     "held by bundle check acme/r0, bundle check acme/r1")
    assert refused.value.hint == "wait for one to end; or ask the operator to raise OPTIMIZE_USER_CODE_PER_TOKEN"
    assert refused.value.details == {"limit": 2, "used": 2, "setting": "OPTIMIZE_USER_CODE_PER_TOKEN"}
    # another token (even one of the same name) has places of its own; a call with no token counts for none
    with as_token("ci", token_id="another"):
        theirs = pool.submit("bundle check acme/r3", gate, 3)
    untokened = pool.submit("server's own", gate, 4)
    assert pool.in_flight() == 4
    gate.go.set()
    assert [f.result(5) for f in (*held, theirs, untokened)] == [0, 1, 3, 4]
    wait_until(lambda: pool.in_flight() == 0)
    with as_token("ci"):  # the places are given back
        assert pool.submit("again", lambda: "ok").result(5) == "ok"
    pool.shutdown()


def test_a_project_past_its_limit_is_refused_whichever_token_asks():
    pool = UserCodePool(UserCodeLimits(workers=2, per_token=4, per_project=2, waiting=8))
    gate = Gate()
    with as_token("alice"):
        first = pool.submit("reward check of a grpo dry run", gate, project="Shop")
    with as_token("bob"):
        second = pool.submit("bundle import check of a grpo plan", gate, project="shop")
        with pytest.raises(TooMany) as refused:
            pool.submit("bundle check acme/r", gate, project="SHOP")
        other_project = pool.submit("bundle check acme/r", lambda: "fine", project="garden")
    assert refused.value.message == (
        "project shop already has 2 checks of user code in flight, its limit (2 per project); held by reward check "
        "of a grpo dry run (token alice), bundle import check of a grpo plan (token bob)")
    assert "OPTIMIZE_USER_CODE_PER_PROJECT" in refused.value.hint
    gate.go.set()
    assert other_project.result(5) == "fine" and first.result(5) is None and second.result(5) is None
    pool.shutdown()


def test_a_project_outside_a_limited_tokens_limits_is_refused_before_it_is_counted():
    pool = UserCodePool(UserCodeLimits())
    with as_token("shop-only", projects={"shop"}), pytest.raises(Forbidden):
        pool.submit("bundle check acme/r", lambda: None, project="garden")
    assert pool.in_flight() == 0
    pool.shutdown()


def test_the_server_wide_bound_refuses_past_the_workers_and_the_waiting():
    pool = UserCodePool(UserCodeLimits(workers=1, per_token=8, per_project=8, waiting=1))
    gate = Gate()
    running = pool.submit("a", gate)
    assert gate.entered.acquire(timeout=5)
    waiting = pool.submit("b", gate)
    with as_token("ci"), pytest.raises(TooMany) as refused:
        pool.submit("c", gate)
    assert refused.value.message == ("the server already has 2 checks of user code running or waiting, its bound "
                                     "(1 running and 1 waiting)")
    assert "OPTIMIZE_USER_CODE_WAITING" in refused.value.hint and "OPTIMIZE_USER_CODE_WORKERS" in refused.value.hint
    # a waiting call whose caller went away is dropped, and its place given back at once
    assert waiting.cancel()
    assert pool.in_flight() == 1
    gate.go.set()
    running.result(5)
    wait_until(lambda: pool.in_flight() == 0)
    pool.shutdown()


def test_a_failing_call_gives_its_place_back_and_raises_to_its_caller():
    pool = UserCodePool(UserCodeLimits(workers=1, per_token=1))

    def fails():
        raise ValueError("bad bundle")

    with as_token("ci"):
        with pytest.raises(ValueError, match="bad bundle"):
            pool.call("check", fails)
        wait_until(lambda: pool.in_flight() == 0)
        assert pool.call("check", lambda: 7) == 7
    pool.shutdown()


def test_the_callers_token_follows_the_call_and_a_call_from_a_worker_runs_in_its_place():
    """One worker and one place per token: a check that calls the pool again (a bundle check starting a sampling
    evaluation, whose grader is checked too) neither waits for a second worker nor takes a second place."""
    pool = UserCodePool(UserCodeLimits(workers=1, per_token=1))

    def outer():
        inner = pool.call("grader check", lambda: (current_token(), threading.current_thread().name))
        return current_token(), inner

    with as_token("ci"):
        token, (inner_token, thread) = pool.call("bundle check acme/r", outer)
    assert token == inner_token == ("id-ci", "ci") and thread.startswith("user-code")
    pool.shutdown()


def test_an_async_caller_awaits_without_holding_a_thread():
    pool = UserCodePool(UserCodeLimits(workers=1, per_token=4))
    gate = Gate()

    async def main():
        waiting = asyncio.wrap_future(pool.submit("check", gate, "done"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the loop runs on while the check is held
        gate.go.set()
        return await waiting

    assert asyncio.run(main()) == "done"
    pool.shutdown()


def test_a_lane_route_runs_its_sync_endpoint_on_the_lane_under_the_requests_token():
    router = APIRouter(route_class=LaneRoute)

    @router.get("/where/{item}")
    def where(item: str, flag: bool = False) -> dict:
        """Where the endpoint ran."""
        return {"item": item, "flag": flag, "thread": threading.current_thread().name, "token": current_token()}

    app = FastAPI()

    @app.middleware("http")
    async def gate(request, call_next):
        with as_token("ci"):
            return await call_next(request)

    app.include_router(router)
    [route] = router.routes
    assert asyncio.iscoroutinefunction(route.endpoint) and route.endpoint.__doc__ == "Where the endpoint ran."
    with TestClient(app) as client:
        answer = client.get("/where/x", params={"flag": "true"}).json()
    assert answer["item"] == "x" and answer["flag"] is True
    assert answer["thread"].startswith("worker-routes") and answer["token"] == ["id-ci", "ci"]


def test_on_shutdown_waiting_calls_are_refused_new_ones_too_and_the_running_one_ends_on_its_own(monkeypatch):
    from optimize.api.lanes import in_user_code_pool
    from optimize.core import user_code
    from optimize.core.errors import Unavailable

    pool = UserCodePool(UserCodeLimits(workers=1, per_token=8, per_project=8, waiting=4))
    monkeypatch.setattr(user_code, "_pool", pool)
    gate = Gate()
    running = pool.submit("bundle check acme/slow", gate, "ran")
    assert gate.entered.acquire(timeout=5)
    outcomes: dict[str, object] = {}

    def wait_in_call():
        try:
            outcomes["call"] = pool.call("bundle check acme/queued", lambda: "ran")
        except Unavailable as error:
            outcomes["call"] = error

    async def wait_on_the_loop():
        try:
            return await in_user_code_pool("bundle check acme/awaited", lambda: "ran")
        except Unavailable as error:
            return error

    caller = threading.Thread(target=wait_in_call)
    caller.start()
    loop = asyncio.new_event_loop()
    awaited = loop.create_task(wait_on_the_loop())
    loop.run_until_complete(asyncio.sleep(0.05))
    wait_until(lambda: pool.in_flight() == 3)

    user_code.shutdown()  # returns at once: the running call is not waited for
    caller.join(5)
    assert isinstance(outcomes["call"], Unavailable)
    assert outcomes["call"].message == "the server is stopping, so bundle check acme/queued was not run"
    assert outcomes["call"].hint == "try again once the server is back"
    refused = loop.run_until_complete(awaited)
    loop.close()
    assert isinstance(refused, Unavailable) and "acme/awaited was not run" in refused.message
    with pytest.raises(Unavailable, match="so bundle check acme/late was not run"):
        pool.submit("bundle check acme/late", lambda: "ran")
    assert not running.done()
    gate.go.set()
    assert running.result(5) == "ran"
    wait_until(lambda: pool.in_flight() == 0)
    user_code.shutdown()  # again: nothing more


def test_a_stopping_server_drops_the_waiting_user_code_before_it_waits_for_requests(monkeypatch):
    from optimize.api.serve import StoppingServer, uvicorn_config
    from optimize.core import user_code

    order: list[str] = []
    monkeypatch.setattr(user_code, "shutdown", lambda: order.append("user code"))

    async def uvicorn_shutdown(self, sockets=None):
        order.append("uvicorn")

    monkeypatch.setattr("uvicorn.Server.shutdown", uvicorn_shutdown)
    asyncio.run(StoppingServer(uvicorn_config(FastAPI())).shutdown())
    assert order == ["user code", "uvicorn"]
