"""Hostile scoring bundles through a real server on both stores (SQLite, PostgreSQL), registered by a trainer token
limited to one project; every attempt is contained, and answered by name without the secret it was after.

- `akka registry bundles check` runs the whole list of attacks, one function each of one module (`--function
  hostile:NAME`, one row, `--time-limit 2`): read the admin token; read the database (the SQLite file; PostgreSQL's
  port); read another project's blob (the path where the server keeps a shard of that project's dataset); write into
  the data dir; open a socket to the server's own port (below the runner's guard on `socket.socket`); leave a
  double-forked daemon behind; allocate 4 GiB; loop forever; print 100 MB. Each answer names what happened to its
  row (a FileNotFoundError naming the path, the refused connection, the memory limit, the time limit) and carries
  neither the admin token nor the other project's rows; the daemon ran in the sandbox and no process of it outlives
  the check; nothing was written; the server's log did not take the printed output.
- Meanwhile `GET /v1/health` is polled every 0.1 s from a thread of its own: every answer is 200 within 1 s.
- On SQLite, another project's supervised run trains while the attacks run and completes with its expected weights
  digest. The expected digest is the one `completed_run` computes (tests/conftest.py): the victim's project holds
  the same rows and runs the same plan (tests/run_fixtures.py `train_capitals`: seed 0, 16 updates on CPU), and
  training on CPU reproduces a run's weights exactly (tests/integration/test_run_lifecycle.py relies on it too), so
  the session's shared run, trained once and read by several modules, is the reference: no second run is trained
  for it. On PostgreSQL the run is left out: it would double the test's time (a training run of about 20 s) and
  test nothing more of the sandbox, which is the same on either store.
- An evaluation's `bundle:` grader and a GRPO dry run's `rule` term: the same theft done when the module is imported
  is refused by name at submission; done when the function scores, each row's error is named (the dry run's reward
  check on both stores; the evaluation's answers, on SQLite only: its worker, about 15 s of a model's loading, scores
  the same way on either store).
- `akka server start` refuses in one line where no sandbox starts, and starts under the unsafe opt-out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.conftest import POSTGRES_ADMIN_URL, Cli, chat_row, from_standin, write_jsonl
from tests.health_watch import HealthWatch
from tests.run_fixtures import MODEL, capital_rows, plan, wait_for, write_plan

pytestmark = pytest.mark.integration

THIEF = '''import _socket
import sqlite3

DATA = {data!r}
DATABASE = {database!r}


def compute_score(prompt_messages, completion_text, fields):
    if fields["attack"] == "token":
        with open(DATA + "/admin-token") as handle:
            raise ValueError("stolen " + handle.read())
    if fields["attack"] == "database" and DATABASE.startswith("postgresql"):
        raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        raw.settimeout(1)
        raw.connect(("127.0.0.1", 5432))
        raise ValueError("reached the database")
    if fields["attack"] == "database":
        raise ValueError("stolen " + repr(sqlite3.connect(DATABASE).execute("select * from api_tokens").fetchall()))
    return 1.0
'''
# the same theft when the module is imported: refused where a grader or a reward term is checked at submission
GRABBER = '''DATA = {data!r}

with open(DATA + "/admin-token") as handle:
    raise ValueError("stolen " + handle.read())


def compute_score(prompt_messages, completion_text, fields):
    return 1.0
'''
# every attack of the list, one function each, checked as hostile:NAME: what its row's answer must name
ATTACKS = '''import _socket
import os
import sqlite3
import sys
import time

DATA = {data!r}
DATABASE = {database!r}
BLOB = {blob!r}
PORT = {port!r}
MARKER = {marker!r}


def token(prompt_messages, completion_text, fields):
    with open(DATA + "/admin-token") as handle:
        raise ValueError("stolen " + handle.read())


def database(prompt_messages, completion_text, fields):
    if DATABASE.startswith("postgresql"):
        raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        raw.settimeout(1)
        raw.connect((DATABASE.split("//")[1].split(":")[0], int(DATABASE.rsplit(":", 1)[1])))
        raise ValueError("reached the database")
    raise ValueError("stolen " + repr(sqlite3.connect(DATABASE).execute("select * from api_tokens").fetchall()))


def blob(prompt_messages, completion_text, fields):
    with open(BLOB) as handle:
        raise ValueError("stolen " + handle.read())


def write(prompt_messages, completion_text, fields):
    with open(DATA + "/planted", "w") as handle:
        handle.write("planted")
    return 1.0


def connect(prompt_messages, completion_text, fields):
    raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)  # below the runner's guard on socket.socket
    raw.settimeout(1)
    raw.connect(("127.0.0.1", PORT))
    raise ValueError("reached the server")


def daemon(prompt_messages, completion_text, fields):
    """Leave a double-forked daemon behind; 1.0 once it is seen running (in the sandbox)."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", MARKER])
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{{pid}}/cmdline", "rb") as handle:
                    if MARKER.encode() in handle.read():
                        return 1.0
            except OSError:
                pass
        time.sleep(0.05)
    return 0.0


def memory(prompt_messages, completion_text, fields):
    return float(len(bytearray(4 * 1024 * 1024 * 1024)))


def loop(prompt_messages, completion_text, fields):
    while True:
        pass


def flood(prompt_messages, completion_text, fields):
    chunk = "x" * (1024 * 1024)
    for _ in range(100):
        print(chunk)
    return 1.0
'''
EXPECTED = {
    "token": ["FileNotFoundError", "admin-token"],
    # no such file in the sandbox (SQLite), no network to reach it (PostgreSQL)
    "database": [("unable to open database file", "ConnectionRefusedError")],
    "blob": ["FileNotFoundError", "/blobs/"],
    "write": ["FileNotFoundError", "planted"],
    "connect": [("ConnectionRefusedError", "Network is unreachable")],
    "memory": ["MemoryError: ran out of memory (the limit is 1024 MiB)"],
    "loop": ["took longer than 2 s"],
}
# they run and score 1.0 (the daemon once it is seen running in the sandbox): what they leave is checked after
SCORED = ("daemon", "flood")
HEALTH_BOUND_S = 1.0


@pytest.fixture
def hostile(server, capsys, tmp_path):
    """A project with the stand-in selected, a dataset, the two bundles, and a trainer token limited to it; the
    administrator's CLI and client, and where the database is."""
    name = f"h{uuid.uuid4().hex[:8]}"
    admin = Cli(capsys, server.url)
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    rows = [chat_row("Say ok", "ok", attack="token"), chat_row("Say ok", "ok", attack="database"),
            chat_row("Say ok", "ok", attack="none")]
    admin.ok("registry", "datasets", "register", f"{name}/prompts", "-f", str(write_jsonl(tmp_path / "p.jsonl", rows)))
    answer = client.post("/v1/auth/tokens", json={"name": f"hostile-{name}", "role": "trainer", "projects": [name],
                                                  "namespaces": [name]})
    assert answer.status_code == 201, answer.text
    sqlite = server.data_dir / "optimize.db"
    where = urlsplit(POSTGRES_ADMIN_URL)
    database = str(sqlite) if sqlite.exists() else f"postgresql://{where.hostname}:{where.port or 5432}"
    for bundle, text in (("thief", THIEF), ("grabber", GRABBER)):
        folder = tmp_path / bundle
        folder.mkdir()
        (folder / "reward.py").write_text(text.format(data=str(server.data_dir), database=database))
    limited = Cli(capsys, server.url)
    token = answer.json()["token"]
    for bundle in ("thief", "grabber"):
        limited.ok("registry", "bundles", "register", f"{name}/{bundle}", "-f", str(tmp_path / bundle),
                   "--token", token)
    yield {"name": name, "cli": limited, "token": token, "secret": server.token, "tmp": tmp_path, "admin": admin,
           "client": client, "database": database}
    client.close()


class Health(HealthWatch):
    """`GET /v1/health` polled every 0.1 s by a process of its own while a test attacks: how long each answer took."""

    def check(self) -> None:
        """Every answer came, 200, within the bound (the slowest is named either way)."""
        self.stop()
        slowest = max(self.took, default=float("inf"))
        assert self.took and not self.failed and slowest < HEALTH_BOUND_S, (
            f"health answered {len(self.took)} times, the slowest in {slowest:.3f} s (the bound is "
            f"{HEALTH_BOUND_S:g} s); not 200: {self.failed[:3]}")


@pytest.fixture
def health(server):
    watch = Health(server.url)
    yield watch
    watch.stop()


def test_bundles_check_answers_without_the_admin_token_and_names_the_failure(hostile):
    cli, name, token, secret = hostile["cli"], hostile["name"], hostile["token"], hostile["secret"]
    assert secret
    result = cli("registry", "bundles", "check", f"{name}/thief", "--dataset", f"{name}/prompts", "--token", token,
                 "-o", "json")
    assert secret not in result.out + result.err
    report = result.json
    assert report["isolation"] == "bubblewrap sandbox"
    assert report["scored"] == 1 and report["errors"]["count"] == 2
    errors = " | ".join(e["error"] for e in report["errors"]["first"])
    assert "FileNotFoundError" in errors and "admin-token" in errors, errors
    # the database: no such file in the sandbox (SQLite), no network to reach it (PostgreSQL)
    assert "unable to open database file" in errors or "ConnectionRefusedError" in errors, errors
    refused = cli("registry", "bundles", "check", f"{name}/grabber", "--dataset", f"{name}/prompts", "--token", token)
    assert refused.code == 1 and secret not in refused.out + refused.err
    assert "importing module reward of the scoring bundle" in refused.err and "FileNotFoundError" in refused.err


def victim_project(admin: Cli, tmp) -> dict:
    """Another project holding `completed_run`'s rows as its does (tests/run_fixtures.py `train_capitals`: the chat
    set aliased `train`, a validation set), its plan, and the path where the server keeps the training set's shard."""
    name = f"v{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    rows = capital_rows(4)
    admin.ok("registry", "datasets", "register", f"{name}/chat", "-f", str(write_jsonl(tmp / "train.jsonl", rows)),
             "--alias", "train")
    admin.ok("registry", "datasets", "register", f"{name}/valid", "-f", str(write_jsonl(tmp / "valid.jsonl", rows[:8])))
    admin.ok("training", "projects", "create", name)
    document = plan(name, "chat:train")
    document["config"]["validation"] = {"dataset": f"{name}/valid"}
    [shard] = admin.json("registry", "datasets", "get", f"{name}/chat:train")["objects"]
    blob = shard["location"].removeprefix("file://")  # the administrator sees where the server keeps it
    assert os.path.isfile(blob), shard
    return {"name": name, "plan": document, "blob": blob}


def _daemons(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in (process.info["cmdline"] or []):
            found.append(process)
    return found


def test_every_attack_is_contained_and_named_while_health_answers_and_another_projects_run_trains(
        hostile, server, health, request):
    cli, name, token, secret, admin = (hostile[k] for k in ("cli", "name", "token", "secret", "admin"))
    client, tmp = hostile["client"], hostile["tmp"]
    trains = request.node.callspec.params["server"] == "sqlite"
    expected = request.getfixturevalue("completed_run")["run"]["results"]["weightsDigest"] if trains else None
    victim = victim_project(admin, tmp / "victim")
    marker = f"optimize-daemon-{uuid.uuid4().hex}"
    folder = tmp / "attacks"
    folder.mkdir()
    (folder / "hostile.py").write_text(ATTACKS.format(
        data=str(server.data_dir), database=hostile["database"], blob=victim["blob"],
        port=urlsplit(server.url).port, marker=marker))
    cli.ok("registry", "bundles", "register", f"{name}/attacks", "-f", str(folder), "--token", token)
    admin.ok("registry", "datasets", "register", f"{name}/one", "-f",
             str(write_jsonl(tmp / "one.jsonl", [chat_row("Say ok", "ok")])))
    log_before = server.log.stat().st_size

    run_id = None
    if trains:  # another project's run: the attacks start once it trains
        run_id = client.post("/v1/training/runs", json=victim["plan"]).json()["runId"]
        wait_for(client, f"/v1/training/runs/{run_id}", lambda r: r["phase"] == "TRAINING", 300,
                 fail_if=lambda r: r["terminal"])
    answers = {}
    for attack in [*EXPECTED, *SCORED]:
        result = cli("registry", "bundles", "check", f"{name}/attacks", "--dataset", f"{name}/one", "--function",
                     f"hostile:{attack}", "--time-limit", "2", "--samples", "1", "--token", token, "-o", "json")
        assert result.code == 0, (attack, result.err)
        assert secret not in result.out + result.err and "capital of" not in result.out + result.err, attack
        answers[attack] = result.json

    for attack, words in EXPECTED.items():
        report = answers[attack]
        assert report["function"] == f"hostile:{attack}" and report["isolation"] == "bubblewrap sandbox"
        assert report["scored"] == 0 and report["errors"]["count"] == 1, (attack, report)
        [error] = report["errors"]["first"]
        assert error["line"] == 1
        for word in words:
            alternatives = word if isinstance(word, tuple) else (word,)
            assert any(w in error["error"] for w in alternatives), (attack, error["error"])
    for attack in SCORED:
        report = answers[attack]
        assert report["errors"]["count"] == 0 and report["scored"] == 1 and report["mean"] == 1.0, (attack, report)
    # nothing was written, no daemon lives on, the 100 MB printed reached no log
    assert not (server.data_dir / "planted").exists()
    deadline = time.monotonic() + 5
    while _daemons(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _daemons(marker) == []
    assert server.log.stat().st_size - log_before < 1024 * 1024

    if run_id is not None:
        done = wait_for(client, f"/v1/training/runs/{run_id}", lambda r: r["terminal"], 600)
        assert done["phase"] == "COMPLETED", done["failureReason"]
        assert done["results"]["weightsDigest"] == expected
    health.check()


def test_an_evaluation_grader_and_a_grpo_reward_term_name_each_theft_without_the_token(hostile, health, request):
    """Imported at submission, the theft is refused by name; done as the function scores, each row's error is named
    (the dry run's reward check; on SQLite, the evaluation's answers, and the evaluation completes)."""
    cli, name, token, secret = hostile["cli"], hostile["name"], hostile["token"], hostile["secret"]
    graded = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/prompts", "--project",
                 name, "--grader", f"bundle:{name}/grabber#reward", "--token", token)
    assert graded.code == 1 and secret not in graded.out + graded.err
    assert f"importing module reward of the scoring bundle {name}/grabber:v1" in graded.err, graded.err
    assert "FileNotFoundError" in graded.err
    document = {"kind": "run", "project": name, "baseModel": MODEL,
                "config": {"dataset": "prompts", "method": "grpo", "maxSeqLength": 256, "seed": 3,
                           "rlHyperparams": {"optimizer": {"learningRate": 0.02}, "maxCompletionLength": 4,
                                             "generations": 4, "training": {"maxSteps": 2, "batchSize": 4}},
                           "reward": {"terms": [{"kind": "rule", "bundle": f"{name}/grabber", "function": "reward",
                                                 "name": "stolen"}]}},
                "execution": {"deviceProfile": "cpu"}}
    dry = cli("training", "runs", "start", "-f", write_plan(hostile["tmp"], document), "--force", "--dry-run",
              "--token", token)
    assert dry.code == 1 and secret not in dry.out + dry.err
    assert f"{name}/grabber" in dry.err and "FileNotFoundError" in dry.err, dry.err

    # the thief's rows: 1 reads the admin token, 2 the database, 3 scores 1.0
    document["config"]["reward"]["terms"][0] |= {"bundle": f"{name}/thief", "name": "thief"}
    dry = cli("training", "runs", "start", "-f", write_plan(hostile["tmp"], document), "--force", "--dry-run",
              "--token", token, "-o", "json")
    assert dry.code == 0 and secret not in dry.out + dry.err, dry.err
    [check] = dry.json["rewardCheck"]
    assert check["term"] == "thief" and check["scored"] == 1 and check["errors"] == 2, check
    stolen = {error["line"]: error["error"] for error in check["firstErrors"]}
    assert "FileNotFoundError" in stolen[1] and "admin-token" in stolen[1], stolen
    assert "unable to open database file" in stolen[2] or "ConnectionRefusedError" in stolen[2], stolen
    if request.node.callspec.params["server"] == "sqlite":  # the worker's grader scores the same on either store
        # started by the token limited to the project: the base model is its to evaluate, although the model's
        # registry entry is in the catalog's namespace, outside its limits
        started = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/prompts",
                      "--project", name, "--grader", f"bundle:{name}/thief#reward", "--max-new-tokens", "4", "--wait",
                      "--exit-status", "-o", "json-compact", "--token", token)
        assert started.code == 0 and secret not in started.out + started.err, started.out[-3000:]
        done = json.loads(started.out.splitlines()[-1])
        assert done["phase"] == "COMPLETED", done["failureReason"]
        assert done["report"]["scored"] == 1 and done["report"]["unscored"] == 2, done["report"]
        answers = cli("training", "evaluations", "predictions", done["evaluationId"], "--token", token, "-o", "json")
        assert answers.code == 0 and secret not in answers.out
        explained = [p["explanation"] for p in answers.json["predictions"]]
        assert [p["score"] for p in answers.json["predictions"]] == [None, None, 1.0], explained
        assert explained[0].startswith("unscored: FileNotFoundError") and "admin-token" in explained[0], explained
        assert "unable to open database file" in explained[1] or "ConnectionRefusedError" in explained[1], explained
    health.check()


def _start(data_dir, **env: str) -> subprocess.Popen:
    data_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir",
                             str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


def test_server_start_refuses_without_a_sandbox_and_starts_under_the_unsafe_opt_out(tmp_path, server_factory):
    missing = str(tmp_path / "no-bwrap")
    refused = _start(tmp_path / "refused", OPTIMIZE_BWRAP=missing)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 1 and not (tmp_path / "refused" / "server.json").exists()
    first = err.strip().splitlines()[0]
    assert first == (f"error: scoring bundles run only in a bubblewrap sandbox, and OPTIMIZE_BWRAP names "
                     f"'{missing}', which is no executable file"), err
    assert "OPTIMIZE_UNSANDBOXED_BUNDLES=1" in err and "unsafe" in err
    started = server_factory("unsafe", env={"OPTIMIZE_BWRAP": missing, "OPTIMIZE_UNSANDBOXED_BUNDLES": "1"})
    assert httpx.get(f"{started.url}/v1/health", timeout=5).status_code == 200
    assert "warning: scoring bundles run without a sandbox (OPTIMIZE_UNSANDBOXED_BUNDLES is set)" in \
        started.log.read_text()
    json.loads((started.data_dir / "server.json").read_text())
