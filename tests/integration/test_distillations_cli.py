"""Distillations through the CLI against a real server, a real worker and real generation on the cpu: an adapter
trained to answer capitals distils a source of questions (some rows with two decisions) into a registered chat
dataset whose lineage names the teacher and the source, its rejections counted by reason and listed; the same
distillation again registers the same digest; a teacher that cannot finish its answers fails the smoke, naming the
decisions; a supervised run then trains on the distilled dataset. An acceptance grader keeps only the answers it
scores at least min-score, the others rejected as below_min_score (and counted by the smoke); instructions are the
teacher's system prompt, in place of the row's own, while the registered rows keep theirs. Its server's cpu
profile has two slots, so two replicas split a distillation's decisions."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Cli, catalog_with_devices, start_server, write_jsonl
from tests.run_fixtures import CAPITALS, capitals_project, followed, plan, teacher_plan, write_plan

pytestmark = pytest.mark.integration


def refused(cli: Cli, *args: str) -> str:
    result = cli(*args)
    assert result.code != 0, result.out
    return result.err + result.out


def question_rows() -> list[dict]:
    """Eight single questions and four conversations of two (two decisions each): 16 decisions."""
    rows = [{"messages": [{"role": "user", "content": f"What is the capital of {country}?"},
                          {"role": "assistant", "content": f"It is {city}."}]} for country, city in CAPITALS]
    for (first, city), (second, other) in zip(CAPITALS[:4], CAPITALS[4:], strict=True):
        rows.append({"messages": [
            {"role": "user", "content": f"What is the capital of {first}?"},
            {"role": "assistant", "content": f"It is {city}."},
            {"role": "user", "content": f"What is the capital of {second}?"},
            {"role": "assistant", "content": f"It is {other}."}]})
    return rows


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory):
    """This module's server: the shipped catalog with a cpu profile of two slots (a replica each)."""
    tmp = tmp_path_factory.mktemp("two-slots")
    catalog = catalog_with_devices(tmp, [{"name": "cpu", "kind": "cpu", "devices": 2}])
    # the acceptance grader's test evaluator listens on this machine
    proc = start_server(tmp / "data", env={"OPTIMIZE_OUTBOUND_HOSTS": "127.0.0.1"},
                        extra_args=["--catalog", str(catalog)])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def teacher(sqlite_server, tmp_path_factory):
    """A project, an adapter trained on capitals (it ends its answers), and a source of questions."""
    tmp = tmp_path_factory.mktemp("distillations")
    project = capitals_project(sqlite_server.url, tmp, "di", copies=4)
    from optimize.cli.main import main

    document = teacher_plan(project["name"])
    assert main(["training", "runs", "start", "-f", write_plan(tmp, document), "--force", "--wait",
                 "--exit-status", "--server", sqlite_server.url]) == 0
    client = project["client"]
    model = client.get("/v1/training/runs", params={"project": project["name"]}).json()["runs"][0]["results"]["model"]
    assert main(["registry", "datasets", "register", f"{project['name']}/questions", "-f",
                 str(write_jsonl(tmp / "q.jsonl", question_rows())), "--server", sqlite_server.url]) == 0
    assert main(["registry", "datasets", "register", f"{project['name']}/many", "-f",
                 str(write_jsonl(tmp / "m.jsonl", question_rows() * 30)), "--server", sqlite_server.url]) == 0
    return {**project, "model": model}


def test_a_teacher_distils_a_source_into_a_registered_dataset_that_names_teacher_and_source(teacher, sqlite_server,
                                                                                             capsys):
    cli, name = Cli(capsys, sqlite_server.url), teacher["name"]
    args = ["training", "distillations", "create", "--teacher", teacher["model"], "--from", f"{name}/questions",
            "--to", f"{name}/distilled", "--temperature", "0", "--max-tokens", "24", "--wait"]
    done = followed(cli, *args)
    assert done["phase"] == "COMPLETED", done["failureReason"]
    progress = done["progress"]
    assert progress["decisions"] == 16 and progress["answered"] == 16
    assert progress["accepted"] + progress["rejected"] == 16 and progress["accepted"] >= 15
    assert done["smoke"]["passed"] is True and len(done["smoke"]["decisions"]) == 16
    registered = done["registered"]
    assert registered["reference"] == f"{name}/distilled:v1" and registered["rows"] == progress["accepted"]

    version = teacher["client"].get(f"/v1/registry/datasets/{name}/distilled/versions/v1").json()
    assert version["lineage"]["producedBy"] == {"kind": "distillation", "id": done["distillationId"]}
    assert version["lineage"]["teacher"]["reference"] == teacher["model"]
    assert len(version["lineage"]["teacher"]["chatTemplateSha256"]) == 64  # the template the prompts rendered with
    assert version["lineage"]["source"]["reference"] == f"{name}/questions:v1"
    shown = cli.ok("registry", "datasets", "get", f"{name}/distilled:v1").out
    assert "Lineage" in shown and done["distillationId"][:12] in shown

    text = cli.ok("training", "distillations", "get", done["distillationId"][:12]).out
    assert f"{name}/distilled:v1" in text and "16/16" in text
    rejected = cli.json("training", "distillations", "rejections", done["distillationId"])
    assert len(rejected["rejections"]) == progress["rejected"]
    listed = cli.json("training", "distillations", "list", "--project", name)["distillations"]
    assert done["distillationId"] in {d["distillationId"] for d in listed}

    again = followed(cli, *args)  # seeded and greedy: the same rows, the same digest, the same version
    assert again["phase"] == "COMPLETED" and again["registered"] == registered

    # a supervised run trains on what was distilled
    from optimize.cli.main import main

    trained = plan(name, f"{name}/distilled:v1", modelName="distilled-student")
    trained["config"]["hyperparams"]["training"] = {"maxSteps": 2, "batchSize": 4}
    assert main(["training", "runs", "start", "-f", write_plan(teacher["tmp"], trained), "--force", "--wait",
                 "--exit-status", "--server", sqlite_server.url]) == 0


def test_a_teacher_that_cannot_finish_its_answers_fails_the_smoke_naming_the_decisions(teacher, sqlite_server,
                                                                                        capsys):
    cli, name = Cli(capsys, sqlite_server.url), teacher["name"]
    done = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                    f"{name}/questions", "--to", f"{name}/cut", "--temperature", "0", "--max-tokens", "2",
                    "--smoke", "0:1,8:3", "--wait")
    assert done["phase"] == "FAILED" and done["registered"] is None
    assert "the smoke failed: 0 of 2" in done["failureReason"] and "0:1 (max_tokens)" in done["failureReason"]
    assert "8:3 (max_tokens)" in done["failureReason"]
    assert done["smoke"] == {"decisions": ["0:1", "8:3"], "accepted": 0, "passed": False, "failed": ["0:1", "8:3"]}
    rejected = cli.json("training", "distillations", "rejections", done["distillationId"], "--reason", "max_tokens")
    assert [r["decision"] for r in rejected["rejections"]] == ["0:1", "8:3"]
    assert all(r["output"] for r in rejected["rejections"])  # the cut answers are kept to read
    assert teacher["client"].get(f"/v1/registry/datasets/{name}/cut").status_code == 404  # nothing registered


def test_an_acceptance_rate_below_the_floor_is_warned_in_get_and_recorded_as_an_event(teacher, sqlite_server,
                                                                                      capsys):
    """One question the teacher answers and nine whose prompts leave no room within max-model-length (rejected
    unasked, so no generation is spent on them): 1 of 10 accepted, below the default floor of 20%."""
    cli, name = Cli(capsys, sqlite_server.url), teacher["name"]
    country, _city = CAPITALS[0]
    long_rows = [{"messages": [{"role": "user", "content": f"Question {n}: " + "tell me more " * 100},
                               {"role": "assistant", "content": "No."}]} for n in range(9)]
    rows = [{"messages": [{"role": "user", "content": f"What is the capital of {country}?"},
                          {"role": "assistant", "content": "It is."}]}, *long_rows]
    cli.ok("registry", "datasets", "register", f"{name}/mostly-long", "-f",
           str(write_jsonl(teacher["tmp"] / "long.jsonl", rows)))
    done = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                    f"{name}/mostly-long", "--to", f"{name}/few", "--temperature", "0", "--max-tokens", "24",
                    "--max-model-length", "128", "--smoke", "0:1", "--wait")
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["progress"]["rejectedByReason"] == {"prompt_too_long": 9}
    assert done["acceptance"] == {"rate": 0.1, "accepted": 1, "decided": 10, "floor": 0.2, "belowFloor": True}
    assert done["settings"]["acceptanceFloor"] == 0.2
    short = done["distillationId"][:12]
    assert done["warnings"] == [f"1 of 10 answers decided were accepted (10%), below the acceptance floor of 20%; "
                                f"read why with: akka training distillations rejections {short}"]
    text = cli.ok("training", "distillations", "get", short).out
    assert "Acceptance    10% (1 of 10 decided), floor 20% — below it" in text, text
    assert "Warning       1 of 10 answers decided were accepted (10%)" in text, text
    database = sqlite_server.data_dir / "optimize.db"
    if database.exists():  # the moment it fell below, recorded once as an event of the distillation
        import sqlite3

        with sqlite3.connect(database) as db:
            found = db.execute("SELECT data FROM events WHERE subject = ? AND kind = 'warning'",
                               (f"distillation:{done['distillationId']}",)).fetchall()
        assert [json.loads(data)["code"] for (data,) in found] == ["acceptanceBelowFloor"]


MANY = {"temperature": 0, "maxTokens": 24}  # the many-decision source's settings, greedy


def _until(client, ident: str, done, seconds: float = 300) -> dict:
    deadline = time.monotonic() + seconds
    while not done(item := client.get(f"/v1/training/distillations/{ident}").json()):
        assert time.monotonic() < deadline, item
        time.sleep(0.1)
    return item


@pytest.fixture(scope="module")
def whole(teacher) -> dict:
    """The many-decision source distilled without interruption: what a paused or interrupted one must match."""
    client, name = teacher["client"], teacher["name"]
    started = client.post("/v1/training/distillations", json={
        "teacher": teacher["model"], "source": f"{name}/many", "target": f"{name}/whole", **MANY}).json()
    done = _until(client, started["distillationId"], lambda d: d["terminal"])
    assert done["phase"] == "COMPLETED" and done["progress"]["decisions"] == 480, done["failureReason"]
    return done


def _started_and_answering(teacher, target: str, replicas: int = 1) -> str:
    """A distillation of the many-decision source that has saved its first chunks (and has more to answer)."""
    client, name = teacher["client"], teacher["name"]
    ident = client.post("/v1/training/distillations", json={
        "teacher": teacher["model"], "source": f"{name}/many", "target": f"{name}/{target}", "replicas": replicas,
        **MANY}).json()[
        "distillationId"]
    _until(client, ident, lambda d: d["progress"]["answered"] >= 32)
    return ident


def test_a_paused_distillation_resumes_from_its_saved_chunks_and_registers_what_an_unpaused_one_does(
        teacher, whole, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    ident = _started_and_answering(teacher, "paused")
    paused = cli.json("training", "distillations", "pause", ident)
    assert paused["phase"] == "PAUSED" and paused["devicesHeld"] == []
    assert 32 <= paused["progress"]["answered"] < 480  # saved chunks, not the whole
    waited = cli.ok("training", "distillations", "wait", ident)  # a paused one has settled
    assert f"resume it with: akka training distillations resume {ident[:12]}" in waited.err + waited.out
    cli.ok("training", "distillations", "resume", ident)
    done = followed(cli, "training", "distillations", "wait", ident)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["progress"]["answered"] == 480  # every decision once: none twice, none lost
    assert done["registered"]["digest"] == whole["registered"]["digest"]  # the rows an unpaused one registered


def test_a_killed_worker_s_distillation_goes_on_from_its_saved_chunks(teacher, whole, sqlite_server):
    import psutil

    client = teacher["client"]
    ident = _started_and_answering(teacher, "killed")
    [worker] = [p for p in psutil.process_iter(["cmdline"]) if ident in (p.info.get("cmdline") or [])]
    worker.kill()  # a lost worker: queued again, it goes on as its next attempt from the chunks saved
    done = _until(client, ident, lambda d: d["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["progress"]["answered"] == 480
    assert done["registered"]["digest"] == whole["registered"]["digest"]


def test_two_replicas_on_the_cpu_pool_split_the_work_and_register_what_one_does(teacher, whole, sqlite_server,
                                                                                 capsys):
    cli, client, name = Cli(capsys, sqlite_server.url), teacher["client"], teacher["name"]
    ident = client.post("/v1/training/distillations", json={
        "teacher": teacher["model"], "source": f"{name}/many", "target": f"{name}/split", "replicas": 2,
        **MANY}).json()["distillationId"]
    running = _until(client, ident, lambda d: d["progress"]["answered"] > 16 or d["terminal"])
    assert sorted(running["devicesHeld"]) == ["cpu:0", "cpu:1"]  # both slots, one replica on each
    done = _until(client, ident, lambda d: d["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 1, done["failureReason"]
    assert done["progress"]["answered"] == 480 and done["smoke"]["passed"]
    assert done["registered"]["digest"] == whole["registered"]["digest"]  # a replica answers as one device does
    log = cli.ok("training", "distillations", "logs", ident).out
    assert "replica 0 answered 232 decisions" in log and "replica 1 answered 232 decisions" in log, log[-2000:]


def test_a_killed_replica_abandons_the_attempt_and_the_next_goes_on_from_the_saved_chunks(teacher, whole):
    import psutil

    client, name = teacher["client"], teacher["name"]
    ident = client.post("/v1/training/distillations", json={
        "teacher": teacher["model"], "source": f"{name}/many", "target": f"{name}/replica-killed", "replicas": 2,
        **MANY}).json()["distillationId"]
    _until(client, ident, lambda d: d["progress"]["answered"] >= 48 or d["terminal"])
    [replica] = [p for p in psutil.process_iter(["cmdline"])
                 if ident in (p.info.get("cmdline") or []) and "--replica" in p.info["cmdline"]]
    replica.kill()
    done = _until(client, ident, lambda d: d["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["progress"]["answered"] == 480  # nothing answered twice, nothing lost
    assert done["registered"]["digest"] == whole["registered"]["digest"]
    first = client.get(f"/v1/training/distillations/{ident}/logs", params={"attempt": 1}).json()
    assert "replica 1 exited with status -9" in str(first), str(first)[-2000:]


KEEPER = '''def compute_score(prompt_messages, completion_text, fields):
    # what the grader is given: the prompt's messages, the teacher's answer, the row's fields and, as the expected
    # answer, the decision's own assistant message
    assert prompt_messages[-1]["role"] == "user" and isinstance(completion_text, str), prompt_messages
    assert fields["expected"] == fields["own"], fields
    if "keep" not in fields:
        return None
    return 1.0 if fields["keep"] else 0.0
'''


def graded_rows(system: str | None = None) -> list[dict]:
    """The eight questions, each answered as the teacher was trained to answer it; `keep` marks the rows the
    keeper bundle scores 1 (0 for the others; the seventh has none: unscored)."""
    rows = []
    for index, (country, city) in enumerate(CAPITALS):
        answer = f"The capital of {country} is {city}."
        messages = [{"role": "user", "content": f"What is the capital of {country}?"},
                    {"role": "assistant", "content": answer}]
        row = {"messages": ([{"role": "system", "content": system}] if system else []) + messages, "own": answer}
        if index != 6:
            row["keep"] = index % 2 == 0 or index == 7
        rows.append(row)
    return rows


def test_an_acceptance_grader_keeps_only_the_answers_scored_at_least_min_score(teacher, sqlite_server, capsys):
    cli, name, client = Cli(capsys, sqlite_server.url), teacher["name"], teacher["client"]
    rows = graded_rows()
    cli.ok("registry", "datasets", "register", f"{name}/graded", "-f",
           str(write_jsonl(teacher["tmp"] / "graded.jsonl", rows)))
    keeper = teacher["tmp"] / "keeper"
    keeper.mkdir()
    (keeper / "keep.py").write_text(KEEPER)
    cli.ok("registry", "bundles", "register", f"{name}/keeper", "-f", str(keeper))
    done = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                    f"{name}/graded", "--to", f"{name}/kept", "--temperature", "0", "--max-tokens", "24",
                    "--accept-grader", f"bundle:{name}/keeper#keep", "--min-score", "1", "--smoke", "0:1", "--wait")
    assert done["phase"] == "COMPLETED", done["failureReason"]
    settings = done["settings"]
    assert settings["acceptGrader"] == f"bundle:{name}/keeper:v1#keep:compute_score" and settings["minScore"] == 1
    progress = done["progress"]
    assert progress["decisions"] == 8 and progress["accepted"] + progress["rejected"] == 8
    # scored 0, or unscored: rejected by the grader, with the score or why it could not score
    rejected = cli.json("training", "distillations", "rejections", done["distillationId"],
                        "--reason", "below_min_score")["rejections"]
    below = {r["decision"]: r["detail"] for r in rejected}
    assert {d: below.get(d) for d in ("1:1", "3:1", "5:1")} == dict.fromkeys(("1:1", "3:1", "5:1"),
                                                                              "score 0 below min-score 1"), below
    assert below["6:1"].startswith("unscored: ") and "returned None" in below["6:1"], below
    assert set(below) == {"1:1", "3:1", "5:1", "6:1"}, below  # each row marked to keep passed the grader
    assert progress["rejectedByReason"]["below_min_score"] == 4
    # what was registered is what the grader kept, and the rows are the rows' own history with the answer
    assert done["registered"]["rows"] == progress["accepted"] >= 1  # the smoke's 0:1 was kept
    kept = [i["row"] for i in client.get(f"/v1/registry/datasets/{name}/kept/versions/v1/rows").json()["items"]]
    kept_questions = {row["messages"][0]["content"] for row in kept}
    assert len(kept) == progress["accepted"]
    assert kept_questions <= {row["messages"][0]["content"] for row in rows if row.get("keep")}
    text = cli.ok("training", "distillations", "rejections", done["distillationId"]).out
    assert "below_min_score" in text and "score 0 below min-score 1" in text, text
    shown = cli.ok("training", "distillations", "get", done["distillationId"][:12]).out
    assert f"Accepting     scored by bundle:{name}/keeper:v1#keep:compute_score, kept at 1 or more" in shown, shown

    # the smoke counts the grader's rejections like any other (the first decisions, all but one accepted): the
    # teacher never says a row's own answer word for word
    smoked = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                      f"{name}/graded", "--to", f"{name}/exact", "--temperature", "0", "--max-tokens", "24",
                      "--accept-grader", "exact", "--min-score", "1", "--wait")
    assert smoked["phase"] == "FAILED" and "the smoke failed" in smoked["failureReason"], smoked["failureReason"]
    assert "1:1 (below_min_score)" in smoked["failureReason"], smoked["failureReason"]
    exact = cli.json("training", "distillations", "rejections", smoked["distillationId"],
                     "--reason", "below_min_score")["rejections"]
    assert exact and all(r["detail"] == "score 0 below min-score 1; exact: does not match" for r in exact), exact


@pytest.fixture
def evaluator():
    """An evaluator on this machine for the `http:` grader: it records what it is sent and scores every answer 1."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the standard library's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            answer = json.dumps({"score": 1, "explanation": "fine"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/score", received
    server.shutdown()
    server.server_close()


def test_instructions_are_the_teacher_s_system_prompt_and_the_rows_keep_their_own(teacher, sqlite_server, capsys,
                                                                                  evaluator):
    """The evaluator is sent the prompt the teacher was asked: the instructions stand in it in place of the row's
    system message; the registered rows keep the row's own."""
    cli, name, client = Cli(capsys, sqlite_server.url), teacher["name"], teacher["client"]
    url, received = evaluator
    rows = graded_rows(system="You are a pirate.")
    cli.ok("registry", "datasets", "register", f"{name}/briefed", "-f",
           str(write_jsonl(teacher["tmp"] / "briefed.jsonl", rows)))
    instructions = "Answer in one short sentence, naming the city."
    done = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                    f"{name}/briefed", "--to", f"{name}/briefed-out", "--temperature", "0", "--max-tokens", "24",
                    "--instructions", instructions, "--accept-grader", url, "--min-score", "0.5",
                    "--smoke", "0:2", "--wait")
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["settings"]["instructions"] == instructions and done["settings"]["acceptGrader"] == f"http:{url}"
    assert received and len(received) == done["progress"]["accepted"]  # every accepted answer was scored
    for sent in received:
        assert instructions in sent["input"] and "pirate" not in sent["input"], sent["input"]
    assert {sent["expected"] for sent in received} <= {row["own"] for row in rows}
    kept = [i["row"] for i in client.get(f"/v1/registry/datasets/{name}/briefed-out/versions/v1/rows").json()[
        "items"]]
    assert kept and all(row["messages"][0] == {"role": "system", "content": "You are a pirate."} for row in kept)
    shown = cli.ok("training", "distillations", "get", done["distillationId"][:12]).out
    assert f"Instructions  {instructions} (46 characters)" in shown, shown


def test_bad_requests_are_refused_naming_the_field(teacher, sqlite_server, capsys):
    cli, name = Cli(capsys, sqlite_server.url), teacher["name"]
    base = ["training", "distillations", "create", "--teacher", teacher["model"], "--from", f"{name}/questions"]
    assert "'0-1' is not ROW:MESSAGE" in refused(cli, *base, "--to", f"{name}/x", "--smoke", "0-1")
    assert "must be NS/NAME" in refused(cli, *base, "--to", f"{name}/x:v2")
    assert "replicas 3 need 3 devices of profile cpu; this deployment has 2" in refused(
        cli, *base, "--to", f"{name}/x", "--replicas", "3")
    assert "--thinking on is for Gemma 4 teachers" in refused(cli, *base, "--to", f"{name}/x", "--thinking", "on")
    assert "leaves no room for a prompt" in refused(cli, *base, "--to", f"{name}/x", "--max-tokens", "600",
                                                    "--max-model-length", "512")
    floor = teacher["client"].post("/v1/training/distillations", json={
        "teacher": teacher["model"], "source": f"{name}/questions", "target": f"{name}/x", "acceptanceFloor": 2})
    assert floor.status_code in (400, 422) and "acceptanceFloor must be a number from 0 to 1" in floor.text
    assert "--min-score needs --accept-grader" in refused(cli, *base, "--to", f"{name}/x", "--min-score", "0.5")
    assert "--accept-grader needs --min-score" in refused(cli, *base, "--to", f"{name}/x", "--accept-grader", "exact")
    assert "acceptGrader: grader 'often' is not one of" in refused(
        cli, *base, "--to", f"{name}/x", "--accept-grader", "often", "--min-score", "0.5")
    assert "a judge model cannot be a distillation's acceptance grader" in refused(
        cli, *base, "--to", f"{name}/x", "--accept-grader", f"model:{teacher['model']}", "--min-score", "0.5")
    listed = cli.json("training", "distillations", "list", "--project", name)["distillations"]
    assert not [d for d in listed if d["target"] == f"{name}/x"]  # nothing was created by a refusal


def test_the_same_request_under_its_submission_id_reaches_the_same_distillation(teacher, sqlite_server, capsys):
    cli, name = Cli(capsys, sqlite_server.url), teacher["name"]
    args = ["training", "distillations", "create", "--teacher", teacher["model"], "--from", f"{name}/questions",
            "--to", f"{name}/keyed", "--submission-id", f"keyed-{name}"]
    first = cli.json(*args)
    assert cli.json(*args)["distillationId"] == first["distillationId"]
    other = refused(cli, *args[:-2], "--max-tokens", "9", *args[-2:])
    assert f"submissionId 'keyed-{name}' was used for another distillation ({first['distillationId'][:12]})" in other
    listed = cli.json("training", "distillations", "list", "--project", name)["distillations"]
    assert sum(d["target"] == f"{name}/keyed" for d in listed) == 1
    cli.ok("training", "distillations", "cancel", first["distillationId"])


def test_a_response_schema_holds_every_answer_of_the_teacher_to_its_json(teacher, sqlite_server, capsys):
    """--response-schema: the capitals teacher, which answers in prose, answers every decision with JSON of the
    schema; each registered row's answer parses; a schema that cannot be compiled is refused at creation."""
    cli, name, client = Cli(capsys, sqlite_server.url), teacher["name"], teacher["client"]
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    (teacher["tmp"] / "city.json").write_text(json.dumps(schema))
    done = followed(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                    f"{name}/questions", "--to", f"{name}/cities", "--temperature", "0", "--max-tokens", "48",
                    "--response-schema", str(teacher["tmp"] / "city.json"), "--wait")
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["settings"]["responseSchema"] == schema and done["registered"]["rows"] >= 1
    rows = [i["row"] for i in client.get(f"/v1/registry/datasets/{name}/cities/versions/v1/rows").json()["items"]]
    for row in rows:
        assert set(json.loads(row["messages"][-1]["content"])) == {"city"}, row
    (teacher["tmp"] / "bad.json").write_text(json.dumps({"type": "string", "format": "postcode"}))
    said = refused(cli, "training", "distillations", "create", "--teacher", teacher["model"], "--from",
                   f"{name}/questions", "--to", f"{name}/never", "--response-schema", str(teacher["tmp"] / "bad.json"))
    assert "responseSchema cannot be used for constrained decoding" in said, said


def test_a_distillation_goes_on_with_the_next_server_from_its_saved_chunks(teacher, whole, sqlite_server, capsys):
    """The module's last test: its server dies (kill -9) mid-distillation and the next server process on the same
    data dir queues it again; its replicas' workers are stopped and the next attempt answers only what is left."""
    import httpx

    ident = _started_and_answering(teacher, "restarted", replicas=2)
    sqlite_server.kill9()
    catalog = sqlite_server.data_dir.parent / "catalog.yaml"
    proc = start_server(sqlite_server.data_dir, extra_args=["--catalog", str(catalog)])
    try:
        client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
        done = _until(client, ident, lambda d: d["terminal"])
        assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
        assert done["progress"]["answered"] == 480
        assert done["registered"]["digest"] == whole["registered"]["digest"]
    finally:
        proc.stop()
