"""Hostile scoring bundles through a real server (SQLite and PostgreSQL stores): a trainer token limited to one
project registers a bundle whose code reads the server's admin token and its database; `akka registry bundles check`
answers without the token's text and names what failed, and the same bundle is refused by name where an evaluation
takes it as its grader and where a GRPO plan's dry run takes it as a `rule` term. `akka server start` refuses in
one line where no sandbox starts, and starts under the unsafe opt-out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL, write_plan

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


@pytest.fixture
def hostile(server, capsys, tmp_path):
    """A project with the stand-in selected, a dataset, the two bundles, and a trainer token limited to it."""
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
    database = str(sqlite) if sqlite.exists() else "postgresql://127.0.0.1:5432"
    for bundle, text in (("thief", THIEF), ("grabber", GRABBER)):
        folder = tmp_path / bundle
        folder.mkdir()
        (folder / "reward.py").write_text(text.format(data=str(server.data_dir), database=database))
    limited = Cli(capsys, server.url)
    token = answer.json()["token"]
    for bundle in ("thief", "grabber"):
        limited.ok("registry", "bundles", "register", f"{name}/{bundle}", "-f", str(tmp_path / bundle),
                   "--token", token)
    yield {"name": name, "cli": limited, "token": token, "secret": server.token, "tmp": tmp_path}
    client.close()


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


def test_an_evaluation_grader_and_a_grpo_reward_term_are_refused_naming_the_failure(hostile):
    cli, name, token, secret = hostile["cli"], hostile["name"], hostile["token"], hostile["secret"]
    graded = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/prompts", "--project",
                 name, "--grader", f"bundle:{name}/grabber#reward", "--token", token)
    assert graded.code == 1 and secret not in graded.out + graded.err
    assert f"importing module reward of the scoring bundle {name}/grabber:v1" in graded.err, graded.err
    assert "FileNotFoundError" in graded.err
    plan = {"kind": "run", "project": name, "baseModel": MODEL,
            "config": {"dataset": "prompts", "method": "grpo", "maxSeqLength": 256, "seed": 3,
                       "rlHyperparams": {"optimizer": {"learningRate": 0.02}, "maxCompletionLength": 4,
                                         "generations": 4, "training": {"maxSteps": 2, "batchSize": 4}},
                       "reward": {"terms": [{"kind": "rule", "bundle": f"{name}/grabber", "function": "reward",
                                             "name": "stolen"}]}},
            "execution": {"deviceProfile": "cpu"}}
    dry = cli("training", "runs", "start", "-f", write_plan(hostile["tmp"], plan), "--force", "--dry-run",
              "--token", token)
    assert dry.code == 1 and secret not in dry.out + dry.err
    assert f"{name}/grabber" in dry.err and "FileNotFoundError" in dry.err, dry.err


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
