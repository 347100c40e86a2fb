"""`akka training distillations …` without a server: the text its renderers make of the JSON the API answers
(samples checked against the API's own schemas, optimize.schemas.distillations), the requests the typed client
builds (recorded by a transport that answers `{}`; nothing here stands in for the server's behaviour), what a
follower reads from a distillation's status (cli.progress), and the usage errors the CLI finds before it asks."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from optimize.cli import progress
from optimize.cli.commands import distillations as cli
from optimize.cli.output import CommandFailed
from optimize.client.api import OptimizeApi, distillation_body
from optimize.client.http import OptimizeClient
from optimize.schemas.distillations import (
    Distillation,
    DistillationList,
    DistillationRequest,
    Rejections,
)
from optimize.schemas.progress import count_of

ID = "1a2b3c4d5e6f" + "0" * 20


def stamp(minutes_ago: float) -> str:
    # from the time the sample is made (in the test), so the age rendered does not drift with the suite's run
    return (datetime.now(UTC) - timedelta(minutes=minutes_ago, seconds=5)).isoformat().replace("+00:00", "Z")


def sample(**changes) -> dict:
    """A distillation as `GET /v1/training/distillations/{id}` answers it (camelCase), RUNNING its answers."""
    item = {
        "distillationId": ID, "project": "support", "teacher": "qwen3-8b",
        "baseModel": {"id": "qwen3-8b", "commit": "c0ffee" * 7},
        "source": {"reference": "support/chat:v3", "digest": "sha256:" + "ab" * 32, "rows": 50},
        "target": "support/distilled",
        "settings": {"replicas": 2, "maxTokens": 4096, "maxModelLength": 65536, "temperature": 1.0, "topP": 0.95,
                     "seed": 0, "smoke": None, "thinking": False},
        "deviceProfile": "h100", "phase": "RUNNING", "stage": "answering", "attempt": 1,
        "devicesHeld": ["gpu:0", "gpu:1"],
        "progress": {"decisions": 100, "answered": 40, "accepted": 37, "rejected": 3,
                     "rejectedByReason": {"max_tokens": 1, "empty": 2}},
        "acceptance": {"rate": 0.925, "accepted": 37, "decided": 40, "floor": 0.2, "belowFloor": False},
        "warnings": [],
        "smoke": {"decisions": [f"{i}:1" for i in range(16)], "accepted": 15, "passed": True, "failed": []},
        "registered": None, "failureReason": None, "createdAt": stamp(5), "finishedAt": None,
        "terminal": False, "settled": False, "waitingFor": None,
    }
    item.update(changes)
    item.setdefault("count", count_of("distillation", item["phase"], item["progress"]))  # as the server counts it
    return Distillation.model_validate(item).model_dump(by_alias=True)  # it fits the API's answer


def completed() -> dict:
    return sample(phase="COMPLETED", stage=None, devicesHeld=[], terminal=True, settled=True,
                  progress={"decisions": 100, "answered": 100, "accepted": 97, "rejected": 3,
                            "rejectedByReason": {"empty": 2, "max_tokens": 1}},
                  registered={"reference": "support/distilled:v1", "digest": "sha256:" + "cd" * 32, "rows": 48},
                  finishedAt=stamp(1))


def text(renderer, data) -> str:
    buffer = io.StringIO()
    renderer(Console(file=buffer, width=200, color_system=None, highlight=False), data)
    return buffer.getvalue()


def lines_by_label(rendered: str) -> dict[str, str]:
    return {line[:14].strip(): line[14:] for line in rendered.splitlines()}


# --- get --------------------------------------------------------------------------------------------------------


def test_get_renders_each_fact_on_its_line():
    lines = lines_by_label(text(cli.render, sample()))
    assert lines["Distillation"] == ID
    assert lines["Project"] == "support"
    assert lines["Teacher"] == f"qwen3-8b (base qwen3-8b at {'c0ffee' * 2})"
    assert lines["Source"] == "support/chat:v3 — 50 row(s)"
    assert lines["Target"] == "support/distilled"
    assert lines["Settings"] == ("replicas 2, max tokens 4096, max model length 65536, temperature 1, top-p 0.95, "
                                 "seed 0, thinking off, smoke the first 16; device profile h100")
    assert lines["Phase"] == "Running (answering) (attempt 1), holding gpu:0, gpu:1"
    assert lines["Progress"] == "40/100 answered, 37 accepted, 3 rejected (empty 2, max_tokens 1)"
    assert lines["Acceptance"] == "92% (37 of 40 decided), floor 20%"
    assert lines["Smoke"] == "16 decisions, 15 accepted, passed"
    assert lines["Created"] == "5m ago"
    assert not {"Registered", "Failure", "Finished", "Waiting"} & set(lines)


def test_get_of_a_completed_distillation_names_the_version_registered():
    lines = lines_by_label(text(cli.render, completed()))
    assert lines["Registered"] == f"support/distilled:v1 (sha256:{'cd' * 32}, 48 rows)"
    assert lines["Phase"] == "Completed (attempt 1), no devices held"
    assert lines["Finished"] == "1m ago"


def test_a_failed_smoke_names_its_decisions_and_the_failure_its_first_line():
    failed = sample(phase="FAILED", stage=None, devicesHeld=[], terminal=True, settled=True,
                    smoke={"decisions": ["0:1", "3:1", "7:3"], "accepted": 1, "passed": False,
                           "failed": ["0:1", "3:1"]},
                    failureReason="the smoke failed on 0:1, 3:1\nsee: akka training distillations rejections",
                    settings={**sample()["settings"], "smoke": ["0:1", "3:1", "7:3"], "thinking": True},
                    finishedAt=stamp(0))
    lines = lines_by_label(text(cli.render, failed))
    assert lines["Smoke"] == "3 decisions, 1 accepted, failed on 0:1, 3:1"
    assert lines["Failure"] == "the smoke failed on 0:1, 3:1"
    assert "thinking on, smoke 0:1, 3:1, 7:3;" in lines["Settings"]
    # a follower's headline says the failure once: the reason where there is one, else the smoke's
    assert cli.follow_line(failed) == f"{ID[:12]} Failed  — the smoke failed on 0:1, 3:1"
    assert cli.follow_line({**failed, "failureReason": None}) == (
        f"{ID[:12]} Failed  — smoke 3 decisions, 1 accepted, failed on 0:1, 3:1")


def test_a_queued_distillation_says_what_it_waits_for_and_that_no_smoke_started():
    queued = sample(phase="QUEUED", stage=None, devicesHeld=[], smoke=None, waitingFor="2 h100 devices",
                    progress={"decisions": 0, "answered": 0, "accepted": 0, "rejected": 0, "rejectedByReason": {}})
    lines = lines_by_label(text(cli.render, queued))
    assert lines["Waiting"] == "2 h100 devices"
    assert lines["Smoke"] == "— (not started)"
    assert lines["Progress"] == "— (the source's decisions are not counted yet)"
    assert cli.follow_line(queued) == f"{ID[:12]} Queued  — 2 h100 devices"
    # nothing counted yet: a follower shows the headline alone
    assert progress.line(cli.follow_line(queued), progress.Tracker("distillations").read(queued, 0.0)) == (
        f"{ID[:12]} Queued  — 2 h100 devices")
    assert text(cli.render_resumed, queued).strip() == (
        f"Distillation {ID[:12]} Queued; follow it with: akka training distillations wait {ID[:12]}")
    counted = {"decisions": 100, "answered": 0, "accepted": 0, "rejected": 0, "rejectedByReason": {}}
    assert cli.progress_words(counted) == "0/100 answered, 0 accepted, 0 rejected"
    judging = {"decisions": ["0:1"], "accepted": 0, "passed": None, "failed": []}
    assert cli.smoke_words(judging) == "1 decisions, 0 accepted, not judged yet"


def test_text_from_users_is_never_read_as_markup():
    odd = sample(target="support/[bold]x[/bold]", failureReason="[red]boom")
    rendered = text(cli.render, odd)
    assert "support/[bold]x[/bold]" in rendered and "[red]boom" in rendered


# --- create, pause, resume, cancel ----------------------------------------------------------------------------


def test_create_pause_resume_and_cancel_say_what_happened_and_what_next():
    queued = sample(phase="QUEUED", stage=None, devicesHeld=[])
    assert text(cli.render_created, queued).strip() == (
        f"Distillation {ID[:12]} of teacher qwen3-8b over support/chat:v3 -> support/distilled Queued; "
        f"follow it with: akka training distillations wait {ID[:12]}")
    paused = sample(phase="PAUSED", stage=None, devicesHeld=[], settled=True)
    assert text(cli.render_paused, paused).strip() == (
        f"Distillation {ID[:12]} paused; resume it with: akka training distillations resume {ID[:12]}")
    assert text(cli.render_resumed, queued).strip() == (
        f"Distillation {ID[:12]} Queued; 40 of 100 decisions answered are kept; "
        f"follow it with: akka training distillations wait {ID[:12]}")
    cancelled = sample(phase="CANCELLED", stage=None, devicesHeld=[], terminal=True, settled=True)
    assert text(cli.render_cancelled, cancelled).strip() == f"Distillation {ID[:12]} Cancelled; nothing was registered."


# --- list -------------------------------------------------------------------------------------------------------


def test_list_shows_a_row_each_and_marks_an_archived_project():
    data = {"distillations": [{**completed(), "projectArchived": False},
                              {**sample(distillationId="ff" * 16, project="old"), "projectArchived": True}]}
    DistillationList.model_validate(data)
    rows = text(cli.render_list, data).splitlines()
    assert rows[0].split() == ["ID", "PROJECT", "TEACHER", "SOURCE", "TARGET", "PHASE", "PROGRESS", "ACCEPTED", "AGE"]
    assert rows[1].split() == [ID[:12], "support", "qwen3-8b", "support/chat:v3", "support/distilled", "Completed",
                               "100/100", "97", "5m", "ago"]
    assert rows[2].split()[:2] == ["ff" * 6, "old"] and "(archived)" in rows[2]
    assert "Running (answering)" in rows[2] and "40/100" in rows[2]
    assert rows[-1] == "2 distillations."


# --- rejections -------------------------------------------------------------------------------------------------


def test_rejections_are_counted_by_reason_and_trimmed():
    data = {"distillationId": ID, "rejectedByReason": {"empty": 2, "max_tokens": 1},
            "rejections": [{"decision": "3:1", "reason": "empty", "detail": None, "output": ""},
                           {"decision": "9:5", "reason": "max_tokens", "detail": "cut at 4096 tokens",
                            "output": "first line " + "x" * 100 + "\nsecond line"},
                           {"decision": "12:1", "reason": "empty", "detail": None, "output": "\n\n  \n"}]}
    Rejections.model_validate(data)
    rows = text(cli.render_rejections, data).splitlines()
    assert rows[0] == "Rejected 3 in all: empty 2, max_tokens 1"
    assert rows[1].split() == ["DECISION", "REASON", "DETAIL", "OUTPUT"]
    assert rows[2].split() == ["3:1", "empty", "—", "—"]
    output = rows[3].split("cut at 4096 tokens")[1].strip()
    assert output.startswith("first line x") and output.endswith("…") and len(output) == cli.OUTPUT_WIDTH
    assert rows[-1] == "3 rejections."
    assert cli.trim("one\ntwo", 60) == "one…" and cli.trim("short", 60) == "short" and cli.trim(None, 5) == "—"
    none = text(cli.render_rejections, {"distillationId": ID, "rejectedByReason": {}, "rejections": []})
    assert none.strip() == "No answer was rejected."


# --- following --------------------------------------------------------------------------------------------------


def test_a_follower_counts_decisions_answered_and_the_accepted():
    tracker = progress.Tracker("distillations")
    first = tracker.read(sample(), now=0.0)
    later = tracker.read(sample(progress={"decisions": 100, "answered": 60, "accepted": 55, "rejected": 5,
                                          "rejectedByReason": {"empty": 5}}), now=10.0)
    assert (first.item_id, first.done, first.total, first.accepted) == (ID, 40, 100, 37)
    # 20 answers in 10 s: 40 left take 20 s
    assert later.eta_seconds == 20.0 and later.eta_basis == "from the last 20 answers"
    assert progress.line(cli.follow_line(sample()), later) == (
        f"{ID[:12]} Running (answering)  decisions answered 60/100 (60%)  55 accepted  "
        "ETA 20s from the last 20 answers")
    assert progress.event(sample(), later)["item"] == "distillation"
    assert progress.event(sample(), later)["live"]["accepted"] == 55
    # other kinds' events are as they were: no `accepted`
    evaluation = {"phase": "RUNNING", "progress": {"answered": 1}}
    assert "accepted" not in progress.Tracker("evaluations").read(
        {**evaluation, "count": count_of("evaluation", "RUNNING", evaluation["progress"])}, 0.0).as_json()
    paused = progress.Tracker("distillations").read(sample(phase="PAUSED", stage=None), now=0.0)
    assert paused.eta_seconds is None


# --- the client's requests --------------------------------------------------------------------------------------


class Recorder(httpx.MockTransport):
    """Records each request (method, path, query, JSON body) and answers 200 `{}`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict, object]] = []
        super().__init__(self._answer)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.raw_path.decode().partition("?")[0]  # as sent: an id's "/" escaped
        self.requests.append((request.method, path, dict(request.url.params), body))
        return httpx.Response(200, json={})


@pytest.fixture
def recorded():
    transport = Recorder()
    api = OptimizeApi(OptimizeClient("http://recorded.invalid", transport=transport))
    yield api, transport.requests
    api.close()


def test_create_sends_only_the_settings_given_camel_case(recorded):
    api, requests = recorded
    api.distillations.create(teacher="qwen3-8b", source="support/chat:v3", target="support/distilled")
    assert requests[-1] == ("POST", "/v1/training/distillations", {},
                            {"teacher": "qwen3-8b", "source": "support/chat:v3", "target": "support/distilled"})
    api.distillations.create(teacher="t", source="s/d", target="s/o", project="p", replicas=2, max_tokens=512,
                             max_model_length=8192, temperature=0.0, top_p=0.9, seed=0, smoke="0:1,3:1",
                             thinking=False, device_profile="h100")
    body = requests[-1][3]
    assert body == {"project": "p", "teacher": "t", "source": "s/d", "target": "s/o", "replicas": 2,
                    "maxTokens": 512, "maxModelLength": 8192, "temperature": 0.0, "topP": 0.9, "seed": 0,
                    "smoke": "0:1,3:1", "thinking": False, "deviceProfile": "h100"}  # 0 and False are sent
    assert DistillationRequest.model_validate(body).model_dump(by_alias=True, exclude_unset=True) == body
    assert distillation_body(teacher="t", source="s/d", target="s/o", thinking=True) == {
        "teacher": "t", "source": "s/d", "target": "s/o", "thinking": True}


def test_the_other_calls_reach_their_routes(recorded):
    api, requests = recorded
    api.distillations.get("ab/c")
    api.distillations.list()
    api.distillations.list(project="p", phase="open", archived=True)
    for action in ("pause", "resume", "cancel"):
        getattr(api.distillations, action)("abc")
    api.distillations.rejections("abc")
    api.distillations.rejections("abc", reason="empty", limit=5)
    api.distillations.logs("abc", attempt=2, offset=10)
    assert [(method, path, query) for method, path, query, _ in requests] == [
        ("GET", "/v1/training/distillations/ab%2Fc", {}),
        ("GET", "/v1/training/distillations", {}),
        ("GET", "/v1/training/distillations", {"project": "p", "phase": "open", "archived": "true"}),
        ("POST", "/v1/training/distillations/abc/pause", {}),
        ("POST", "/v1/training/distillations/abc/resume", {}),
        ("POST", "/v1/training/distillations/abc/cancel", {}),
        ("GET", "/v1/training/distillations/abc/rejections", {}),
        ("GET", "/v1/training/distillations/abc/rejections", {"reason": "empty", "limit": "5"}),
        ("GET", "/v1/training/distillations/abc/logs", {"offset": "10", "attempt": "2"}),
    ]


# --- usage errors, found before any request -------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "words"), [
    (["--thinking", "maybe"], "is not on or off"),
    (["--exit-status"], "--exit-status needs --wait"),
    (["--events", "-o", "json"], "--events needs --wait"),
])
def test_usage_errors_exit_2_before_asking_the_server(extra, words):
    args = ["create", "--teacher", "t", "--from", "s/d", "--to", "s/o", "--server", "http://127.0.0.1:9", *extra]
    result = CliRunner().invoke(cli.app, args)
    # a JSON mode prints the usage error as JSON and ends with CommandFailed, which `main()` turns into the code
    code = result.exception.code if isinstance(result.exception, CommandFailed) else result.exit_code
    assert code == 2
    assert words in result.output


def test_thinking_on_or_off_is_a_bool_and_left_out_when_not_given():
    assert cli.parse_thinking("on") is True and cli.parse_thinking("OFF") is False
    assert cli.parse_thinking(None) is None
