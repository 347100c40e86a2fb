"""Following an events stream reconnects when it drops, and gives up after 8 failures in a row."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from optimize.client import events
from optimize.client.http import ApiError, OptimizeClient


class Scripted(BaseHTTPRequestHandler):
    """Each connection plays the next scripted stream: a list of statuses, then the connection closes."""

    script: list[list[dict]] = []
    connections = 0

    def do_GET(self):  # noqa: N802 - the http.server API
        index = type(self).connections
        type(self).connections += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for status in self.script[min(index, len(self.script) - 1)]:
            self.wfile.write(f"event: status\ndata: {json.dumps(status)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scripted.connections = 0
    yield server
    server.shutdown()


def test_a_dropped_stream_is_followed_again_until_the_run_ends(scripted, monkeypatch):
    monkeypatch.setattr(events.time, "sleep", lambda _s: None)
    Scripted.script = [[{"runId": "r", "phase": "QUEUED", "terminal": False, "settled": False}],
                       [{"runId": "r", "phase": "TRAINING", "terminal": False, "settled": False}],
                       [{"runId": "r", "phase": "COMPLETED", "terminal": True, "settled": True}]]
    with OptimizeClient(f"http://127.0.0.1:{scripted.server_address[1]}") as client:
        phases = [s["phase"] for s in events.follow(client, "/v1/training/runs/r/events")]
    assert phases == ["QUEUED", "TRAINING", "COMPLETED"] and Scripted.connections == 3


def test_following_gives_up_after_eight_failures_in_a_row(monkeypatch):
    monkeypatch.setattr(events.time, "sleep", lambda _s: None)
    with OptimizeClient("http://127.0.0.1:9") as client, pytest.raises(ApiError, match="8 times in a row"):
        list(events.follow(client, "/v1/training/runs/r/events"))
