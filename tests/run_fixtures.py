"""Supervised runs shared across test modules: the plan they start from, a project of capitals on a shared server,
and the training of the completed run that tests only read (`completed_run` in tests/conftest.py, once per session;
test_runs_cli.py trains the same run once more on PostgreSQL)."""

from __future__ import annotations

import contextlib
import io
import json
import uuid

import httpx
import yaml

from tests.conftest import chat_row, from_standin, headers_for, write_jsonl

MODEL = "optimize/tiny-llama-3.2"
CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
            ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago")]


def plan(project: str, dataset: str, **overrides) -> dict:
    """A supervised run of 16 updates of 4 rows; unpacked, so each update takes the 4 rows it always took (packed,
    two capitals rows fill a bin: twice the tokens an update; packed runs have tests of their own)."""
    document = {
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": dataset, "maxSeqLength": 256, "packing": False,
                   "hyperparams": {"optimizer": {"learningRate": 0.01},
                                   "training": {"maxSteps": 16, "batchSize": 4}}},
        "execution": {"deviceProfile": "cpu", "saveEvery": 6},
    }
    for key, value in overrides.items():
        document[key] = value
    return document


def teacher_plan(project: str, dataset: str = "chat") -> dict:
    """A run training an adapter that answers capitals and ends its answers (a distillation's teacher), on rows of
    `capital_rows(4)`. Unpacked: the answers distillation tests count on were settled with batches of 8 rows, which
    packed bins (two rows a bin, always the same two) would change."""
    document = plan(project, dataset, modelName="capitals")
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": 0.02},
                                         "training": {"maxSteps": 60, "batchSize": 8}}
    document["config"]["packing"] = False
    return document


def capital_rows(copies: int) -> list[dict]:
    return [chat_row(f"What is the capital of {country}?", f"The capital of {country} is {city}.")
            for country, city in CAPITALS] * copies


def capitals_project(url: str, tmp, prefix: str, copies: int = 2) -> dict:
    """A project of its own on a shared server (its name starts with `prefix`), the stand-in model selected and a
    chat dataset of capitals registered in its namespace as NAME/chat."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/chat", "-f",
                 str(write_jsonl(tmp / "t.jsonl", capital_rows(copies))), "--server", url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    return {"name": name, "project": name, "client": client, "tmp": tmp}


YES_NO = ["Is the sky blue?", "Is water wet?", "Is fire cold?", "Is ice hot?", "Do fish swim?", "Do birds fly?",
          "Is grass green?", "Is snow black?"]


def prompts_project(url: str, tmp, prefix: str, questions: list[str] = YES_NO) -> dict:
    """A project of its own for reinforcement runs (its name starts with `prefix`): the stand-in selected and a chat
    dataset of yes/no questions registered as NAME/prompts. Returns url, name, tmp and the rows."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    from optimize.cli.main import main

    rows = [chat_row(q, "yes" if i % 2 == 0 else "no") for i, q in enumerate(questions)]
    assert main(["registry", "datasets", "register", f"{name}/prompts", "-f", str(write_jsonl(tmp / "p.jsonl", rows)),
                 "--server", url]) == 0
    return {"url": url, "name": name, "tmp": tmp, "rows": rows}


def wait_for(client: httpx.Client, path: str, test, timeout: float = 300, fail_if=None) -> dict:
    """GET `path` (a run, an evaluation, …) until `test` holds for what it answers; fails at once where `fail_if`
    holds first (e.g. the run ended another way)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        item = client.get(path).json()
        if test(item):
            return item
        assert fail_if is None or not fail_if(item), {k: item.get(k) for k in ("phase", "failureReason")}
        time.sleep(0.1)
    raise AssertionError(f"{path} did not get there: {item.get('phase')} {item.get('failureReason')}")


def followed(cli, *args: str) -> dict:
    """What a following command (`runs start --wait`, `runs wait`) leaves of the run: its last JSON line."""
    return json.loads(cli.ok(*args, "-o", "json-compact").out.splitlines()[-1])


def write_plan(tmp_path, document: dict) -> str:
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def train_capitals(url: str, tmp) -> dict:
    """One project with a chat dataset (aliased `train`) and a validation set, trained to completion through
    `akka training runs start --wait`: 16 updates, saves at 6, 12 and 16, a submission id. Returns the project, the
    exit code, the lines the command printed (the last one is the run), the plan and the server's URL."""
    project = f"p{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = capital_rows(4)
    train_file = write_jsonl(tmp / "train.jsonl", rows)
    valid_file = write_jsonl(tmp / "valid.jsonl", rows[:8])
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{project}/chat", "-f", str(train_file), "--alias", "train",
                 "--server", url]) == 0
    assert main(["registry", "datasets", "register", f"{project}/valid", "-f", str(valid_file), "--server", url]) == 0
    assert main(["training", "projects", "create", project, "--server", url]) == 0
    document = plan(project, "chat:train")  # no namespace: resolves inside the project's namespace
    document["config"]["validation"] = {"dataset": f"{project}/valid"}
    document["submissionId"] = f"sub-{project}"
    path = write_plan(tmp, document)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # a fixture wider than a test has no capsys
        code = main(["training", "runs", "start", "-f", path, "--force", "--wait", "--exit-status", "-o",
                     "json-compact", "--server", url])
    lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]
    return {"project": project, "code": code, "lines": lines, "run": lines[-1], "plan": document, "path": path,
            "client": client, "url": url}
