"""Run the control plane under uvicorn on a socket bound here, so `--port 0` works and the port is known.

Once the app has started, `<data-dir>/server.json` names the URL and pid; it is removed on a clean stop.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import asynccontextmanager

import uvicorn

from optimize.api.app import create_app, start_jobs, stop_jobs
from optimize.core.settings import ServerSettings


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def serve(settings: ServerSettings, sock: socket.socket) -> None:
    app = create_app(settings)
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
    ready_file = settings.data_dir / "server.json"
    startup = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_):
        async with startup(app_):
            start_jobs(app, url)
            _write_atomically(ready_file, json.dumps({"url": url, "pid": os.getpid()}))
            try:
                yield
            finally:
                ready_file.unlink(missing_ok=True)
                stop_jobs(app)
                app.state.registry.store.dispose()

    app.router.lifespan_context = lifespan
    config = uvicorn.Config(app, log_level=os.environ.get("OPTIMIZE_LOG_LEVEL", "warning"), http="httptools",
                            timeout_keep_alive=30, access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _write_atomically(path, text: str) -> None:
    """Workers read this file to find a restarted server: never let one read it half-written."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
