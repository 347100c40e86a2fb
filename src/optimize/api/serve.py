"""Run the control plane under uvicorn on a socket bound here, so `--port 0` works and the port is known.

Once the app has started, `<data-dir>/server.json` names the URL and pid; it is removed on a clean stop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import sys
from contextlib import asynccontextmanager

import uvicorn

from optimize.api.app import create_app, start_jobs, stop_jobs
from optimize.api.connection_timeouts import protocol_from_env
from optimize.api.stream_slots import stream_cap
from optimize.auth.tokens import ADMIN_TOKEN_FILE, list_tokens
from optimize.blobs import open_blob_store
from optimize.core import local_servers, user_code
from optimize.core.environment import setting
from optimize.core.errors import Invalid, Unavailable
from optimize.core.settings import ServerSettings


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are TCP,
    # and accepted connections inherit the listener's protocol. Without it every answer on a kept-alive
    # connection waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def check_blob_store(settings: ServerSettings) -> None:
    """Refuse, before a port is bound, a blob store whose bucket does not answer: one line, no traceback."""
    try:
        open_blob_store(settings.resolved_blob_store, settings.data_dir)
    except (Invalid, Unavailable) as error:
        print(f"error: {error.message} ({error.hint})", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def check_trackers(settings: ServerSettings) -> None:
    """Raise Invalid for a tracker forwarder's sweep interval (OPTIMIZE_*_SWEEP_SECONDS) that is no number of seconds
    above 0, for the trackers the settings turn on."""
    from optimize.trackers.sweeper import sweep_seconds

    if settings.resolved_mlflow:
        sweep_seconds("OPTIMIZE_MLFLOW_SWEEP_SECONDS")
    if settings.resolved_wandb:
        sweep_seconds("OPTIMIZE_WANDB_SWEEP_SECONDS")


def serve(settings: ServerSettings, sock: socket.socket) -> None:
    # `akka server start` refused a malformed setting before it bound the socket (core.environment.check_all); what
    # can still fail here is a cluster that does not answer, before anything is made
    try:
        http = protocol_from_env()
        stream_cap()
        user_code.limits()
        if settings.executor == "ray":
            from optimize.jobs.ray_executor import join_cluster

            join_cluster(settings.ray_address)
    except Invalid as error:
        print(f"error: {error.message} ({error.hint})", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    try:
        app = create_app(settings)
    except (Invalid, Unavailable) as error:  # a blob store's bucket that does not answer: one line, no traceback
        print(f"error: {error.message} ({error.hint})", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
    ready_file = settings.data_dir / "server.json"
    startup = app.router.lifespan_context
    if app.state.new_admin_token:
        print(f"Admin token (shown once; kept in {settings.data_dir / ADMIN_TOKEN_FILE}, mode 0600):\n"
              f"  {app.state.new_admin_token}", flush=True)
    if not ipaddress.ip_address(bound_host).is_loopback:
        _refuse_open_door_without_tokens(app, bound_host)

    @asynccontextmanager
    async def lifespan(app_):
        async with startup(app_):
            start_jobs(app, url)
            _write_atomically(ready_file, json.dumps({"url": url, "pid": os.getpid()}))
            announced = local_servers.announce(url, settings.data_dir)
            try:
                yield
            finally:
                announced.unlink(missing_ok=True)
                ready_file.unlink(missing_ok=True)
                stop_jobs(app)
                app.state.registry.store.dispose()

    app.router.lifespan_context = lifespan
    StoppingServer(uvicorn_config(app, http)).run(sockets=[sock])


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which first drops the user code still waiting when it stops: uvicorn waits for the
    requests in flight before the app's own shutdown, and a check waiting in the pool would keep it waiting for
    every check queued before it, where the waiting ones now answer 503 and only the running ones are waited for."""

    async def shutdown(self, sockets=None) -> None:
        user_code.shutdown()
        await super().shutdown(sockets)


def uvicorn_config(app, http: type[asyncio.Protocol] | None = None) -> uvicorn.Config:
    """How the server speaks HTTP: httptools with deadlines on half-sent requests and a ceiling on connections
    (`http`, default: `protocol_from_env()`; see optimize.api.connection_timeouts), 30 s of keep-alive between
    requests, no access log."""
    return uvicorn.Config(app, log_level=setting("OPTIMIZE_LOG_LEVEL"),
                          http=http or protocol_from_env(), timeout_keep_alive=30, access_log=False)


def _refuse_open_door_without_tokens(app, host: str) -> None:
    """Bound beyond this machine: say who can get in, and refuse to start when no token can."""
    holders = list_tokens(app.state.registry.store)
    if not holders:
        print(f"error: {host} is reachable from other machines and no API token works, so nobody could use the "
              "server; start it on 127.0.0.1 and issue a token (akka auth tokens create)", file=sys.stderr, flush=True)
        raise SystemExit(1)
    print(f"Listening beyond this machine ({host}); these tokens can get in:", flush=True)
    for token in holders:
        print(f"  {token.token_id[:12]}  {token.name}  {token.role}", flush=True)


def _write_atomically(path, text: str) -> None:
    """Workers read this file to find a restarted server: never let one read it half-written."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
