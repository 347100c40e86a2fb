"""Following an events stream reconnects when it drops, and gives up after 8 failures in a row; what a follow
prints (`runs wait`, `--wait`) under `-o json` (one document) and `--events` (JSON lines), with its exit codes."""

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
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # 10 ms shutdown polls, not 0.5 s
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


# --- what a follow prints under -o json: one document, or with --events the stream as JSON lines ----------------

RUN = "ab" * 16
STATUSES = [{"runId": RUN, "phase": "QUEUED", "terminal": False, "settled": False},
            {"runId": RUN, "phase": "TRAINING", "progress": {"observedStep": 4, "totalSteps": 8},
             "count": {"done": 4, "total": 8, "unit": "steps"}, "terminal": False, "settled": False},
            {"runId": RUN, "phase": "COMPLETED", "progress": {"observedStep": 8, "totalSteps": 8},
             "count": {"done": 8, "total": 8, "unit": "steps"}, "terminal": True, "settled": True}]


class Followed(BaseHTTPRequestHandler):
    """A run's status stream (`…/events`) and the run as `GET …/runs/{id}` answers it (`item`)."""

    statuses: list[dict] = STATUSES
    item: dict = {}

    def do_GET(self):  # noqa: N802 - the http.server API
        if self.path.endswith("/events"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for status in self.statuses:
                self.wfile.write(f"event: status\ndata: {json.dumps(status)}\n\n".encode())
            self.close_connection = True
            return
        body = json.dumps(self.item).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def followed():
    """Runs `akka training runs …` against a server whose run ends as `item` says; returns (code, stdout, stderr)."""
    from optimize.cli.main import main

    server = ThreadingHTTPServer(("127.0.0.1", 0), Followed)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # 10 ms shutdown polls, not 0.5 s
    Followed.statuses = STATUSES
    Followed.item = {**STATUSES[-1], "results": {"model": "ns/m:v1"}, "failureReason": None}
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def akka(capsys, *args: str) -> tuple[int, str, str]:
        code = main(["training", "runs", *args, "--server", url, "--token", "t"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    yield akka
    server.shutdown()


@pytest.mark.parametrize("mode", ["json", "json-compact"])
def test_a_follow_under_json_prints_one_document_the_item_as_get_answers_it(followed, capsys, mode):
    code, out, _ = followed(capsys, "wait", RUN, "-o", mode)
    assert code == 0 and json.loads(out) == Followed.item  # one document: json.loads reads all of stdout
    assert "event" not in out


@pytest.mark.parametrize("mode", ["json", "json-compact"])
def test_events_stream_each_status_as_a_json_line_then_the_item_on_a_line(followed, capsys, mode):
    code, out, _ = followed(capsys, "wait", RUN, "-o", mode, "--events")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(STATUSES) + 1, out  # JSON lines, the final item too (even -o json)
    *events, final = [json.loads(line) for line in lines]
    assert [e["phase"] for e in events] == ["QUEUED", "TRAINING", "COMPLETED"]
    assert all(e["event"] == "status" and e["item"] == "run" and e["runId"] == RUN for e in events)
    assert events[1]["live"]["done"] == 4 and events[1]["live"]["total"] == 8
    assert final == Followed.item


def test_a_failed_run_under_json_is_one_document_and_exits_1_with_exit_status(followed, capsys):
    Followed.statuses = [{**STATUSES[0], "phase": "FAILED", "terminal": True, "settled": True}]
    Followed.item = {"runId": RUN, "phase": "FAILED", "failureReason": "it broke", "terminal": True, "settled": True}
    code, out, _ = followed(capsys, "wait", RUN, "--exit-status", "-o", "json")
    assert code == 1 and json.loads(out)["failureReason"] == "it broke"
    code, out, _ = followed(capsys, "wait", RUN, "-o", "json")  # without --exit-status a failed run is no failure
    assert code == 0 and json.loads(out)["phase"] == "FAILED"
    code, out, _ = followed(capsys, "wait", RUN, "--exit-status", "-o", "json", "--events")
    assert code == 1 and [json.loads(line)["phase"] for line in out.splitlines()] == ["FAILED", "FAILED"]


@pytest.mark.parametrize("events", [False, True])
def test_ctrl_c_under_json_ends_with_the_interruption_exit_130(followed, capsys, monkeypatch, events):
    from optimize.cli import follow

    def interrupted(*_args):
        yield STATUSES[0]
        raise KeyboardInterrupt

    monkeypatch.setattr(follow, "_statuses", interrupted)
    code, out, _ = followed(capsys, "wait", RUN, "-o", "json", *(["--events"] if events else []))
    lines = out.splitlines()
    assert code == 130
    if events:  # the status seen, then the interruption, each a JSON line
        assert len(lines) == 2 and json.loads(lines[0])["phase"] == "QUEUED"
        error = json.loads(lines[1])["error"]
    else:  # one document: the interruption
        error = json.loads(out)["error"]
    assert error["code"] == "interrupted"
    assert error["hint"] == f"follow it again with: akka training runs wait {RUN[:12]}"


def test_text_output_is_unchanged_plain_lines_then_the_run(followed, capsys, monkeypatch):
    from optimize.cli.commands import runs

    monkeypatch.setattr(runs, "_render_run", lambda con, r: con.print(f"the run {r['results']['model']}"))
    code, out, err = followed(capsys, "wait", RUN)
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"{RUN[:12]} Queued", out + err
    assert lines[1].startswith(f"{RUN[:12]} Training  steps 4/8") and lines[-1] == "the run ns/m:v1", out
    assert "event" not in out


@pytest.mark.parametrize("args, words", [
    (("wait", RUN, "--events"), "--events needs -o json or -o json-compact"),
    (("start", "-f", "plan.yaml", "--force", "--events", "-o", "json"), "--events needs --wait"),
    (("start", "-f", "plan.yaml", "--force", "--wait", "--events"), "--events needs -o json or -o json-compact"),
])
def test_events_without_a_json_mode_or_a_follow_is_a_usage_error(followed, capsys, args, words):
    code, out, err = followed(capsys, *args)
    assert code == 2 and words in out + err.replace("\n", " ")
