"""Reinforcement runs through the CLI, on the built-in stand-in on CPU: a GRPO run on a verifiable reward (an answer
that starts with a vowel scores 1; sampled at temperature 0.1, where the random stand-in's small logit changes move
its choices) raises its mean reward from 0.45 over its first five updates to 0.99 over its last five; a GSPO run
trains with sequence-level importance sampling (a jsonSchema term among its terms); the omitted klBeta and
temperature resolve to 0.04 and 0.7 and are shown; a run whose execution.stopWhen is met stops itself and completes
with the adapter trained to there; rows that offer tools are refused at submission and in the dry run; plans without
reward terms or with supervised settings are refused by field.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Cli, headers_for, write_jsonl
from tests.run_fixtures import MODEL, YES_NO, prompts_project, write_plan

pytestmark = pytest.mark.integration

QUESTIONS = YES_NO


def rl_plan(project: str, method: str = "grpo", steps: int = 8, learning_rate: float = 0.02, generations: int = 4,
            **rl) -> dict:
    return {
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": "prompts", "method": method, "maxSeqLength": 256, "seed": 3,
                   "rlHyperparams": {"optimizer": {"learningRate": learning_rate}, "maxCompletionLength": 4,
                                     "generations": generations,
                                     "training": {"maxSteps": steps, "batchSize": 4}, **rl},
                   # verifiable: an answer that starts with a vowel (a quarter of the stand-in's tokens do)
                   "reward": {"terms": [{"kind": "regex", "pattern": r"^\W*[aeiouAEIOU]", "name": "vowel"},
                                        {"kind": "length", "target": 200, "max": 400, "weight": 0.1}]}},
        "execution": {"deviceProfile": "cpu"},
    }


@pytest.fixture(scope="module")
def rl_project(sqlite_server, tmp_path_factory):
    project = prompts_project(sqlite_server.url, tmp_path_factory.mktemp("rl"), "rl", QUESTIONS)
    url, name, tmp, rows = project["url"], project["name"], project["tmp"], project["rows"]
    from optimize.cli.main import main

    tools = [{**row, "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]}
             for row in rows[:2]] + rows[2:]
    assert main(["registry", "datasets", "register", f"{name}/tools", "-f", str(write_jsonl(tmp / "t.jsonl", tools)),
                 "--server", url]) == 0
    return project


def test_a_grpo_run_raises_its_mean_reward_and_shows_its_rollouts(rl_project, capsys):
    cli = Cli(capsys, rl_project["url"])
    path = write_plan(rl_project["tmp"], rl_plan(rl_project["name"], steps=20, learning_rate=0.05,
                                                            generations=8, temperature=0.1))
    run = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    metrics = cli.json("training", "runs", "metrics", run["runId"])["steps"]
    rewards = [m["reward"] for m in metrics]
    assert len(rewards) == 20 and all("reward:vowel" in m and "kl" in m for m in metrics)
    # each update's seconds: generating and scoring its rollouts, and the rest, the update itself
    assert all(0 < m["generationSeconds"] < m["stepSeconds"] for m in metrics)
    assert all(m["updateSeconds"] == pytest.approx(m["stepSeconds"] - m["generationSeconds"]) for m in metrics)
    shown = cli.ok("training", "runs", "metrics", run["runId"]).out
    assert "GENERATION S" in shown and "UPDATE S" in shown
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"GRPO mean reward: first five updates {first:.3f}, last five {last:.3f}")
    assert last > first + 0.3, (first, last)  # answers starting with a vowel were learnt
    # the random stand-in moves far from where it started (a KL of several nats per token): its guards said so
    kl = next(w for w in run["guards"]["warnings"] if w["kind"] == "klHigh")
    assert kl["message"] in run["warnings"] and kl["value"] > 0.25, run["guards"]
    rollouts = run["results"]["rollouts"]
    assert rollouts["klBeta"] == 0.04 and rollouts["temperature"] == 0.1 and rollouts["generations"] == 8
    assert set(rollouts["terms"]) == {"vowel", "length"}
    settings = cli.json("training", "runs", "get", run["runId"], "--settings")["settings"]
    assert settings["config.rlHyperparams.klBeta"] == {"value": 0.04, "source": "default"}
    assert settings["config.rlHyperparams.temperature"] == {"value": 0.1, "source": "stated"}
    assert settings["config.rlHyperparams.importanceSampling"]["value"] == "token"
    text = cli.ok("training", "runs", "get", run["runId"], "--settings").out
    assert "Rollouts     klBeta 0.04, temperature 0.1, 8 generations per prompt" in text, text
    assert "Rollouts     reward " in text
    assert f"Warning      {kl['message']}" in text


def test_a_gspo_run_trains_with_sequence_level_importance_sampling(rl_project, capsys):
    """…with a jsonSchema term among its reward's (the four-token answers of the random stand-in are no JSON)."""
    cli = Cli(capsys, rl_project["url"])
    document = rl_plan(rl_project["name"], method="gspo", steps=2, klBeta=0)
    document["config"]["reward"]["terms"].append({"kind": "jsonSchema", "name": "answer", "schema": {
        "type": "object", "properties": {"yes": {"type": "boolean"}}, "required": ["yes"]}})
    path = write_plan(rl_project["tmp"], document)
    run = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    metrics = cli.json("training", "runs", "metrics", run["runId"])["steps"]
    assert [m["reward:answer"] for m in metrics] == [0.0, 0.0]
    assert run["results"]["rollouts"]["importanceSampling"] == "sequence"
    assert run["results"]["rollouts"]["klBeta"] == 0
    assert run["results"]["rollouts"]["temperature"] == 0.7  # omitted: the default, not greedy sampling


def test_a_run_whose_stop_when_is_met_stops_itself_and_keeps_its_adapter(rl_project, sqlite_server, capsys):
    """`execution.stopWhen.rewardDropBelow` above any reward the terms can give (at most 1.1) is met by the first
    window it judges (updates 1-3 of a 30-update run, or the window ending at the newest update of the first metrics
    to arrive, when the worker sends several updates' at once): the server records the stop with an event, the worker
    saves its next update as the final one and the run completes there, its adapter registered, the reason in
    `runs get`."""
    from sqlalchemy import select

    from optimize.store.db import Store
    from optimize.store.tables import Event

    cli = Cli(capsys, rl_project["url"])
    document = rl_plan(rl_project["name"], steps=30)
    document["execution"]["stopWhen"] = {"rewardDropBelow": 5}
    run = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force",
                            "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    stop = run["guards"]["stop"]
    met = stop["step"]
    assert stop["kind"] == "rewardDropBelow" and 3 <= met < 30 and stop["window"] == [met - 2, met], stop
    assert stop["message"].startswith(f"the mean reward over updates {met - 2}–{met}, ") and \
        stop["message"].endswith(", is below execution.stopWhen.rewardDropBelow 5")
    steps = run["results"]["steps"]
    assert met <= steps < 30 and run["progress"]["observedStep"] == steps, (steps, run["progress"])
    assert run["results"]["model"] and run["guards"]["window"] == 3
    snapshots = cli.json("training", "runs", "snapshots", run["runId"])["snapshots"]
    assert [s["step"] for s in snapshots if s["final"]] == [steps]
    text = cli.ok("training", "runs", "get", run["runId"]).out
    assert (f"Stopped      {stop['message']} (met at step {met}); it completed at step {steps} with the adapter "
            "trained to there") in text, text
    store = Store(f"sqlite:///{sqlite_server.data_dir / 'optimize.db'}")
    try:
        with store.transaction() as session:
            events = session.scalars(select(Event).where(Event.subject == f"run:{run['runId']}",
                                                         Event.kind == "guard-stop")).all()
            assert [(e.data["guard"], e.data["step"], e.data["message"]) for e in events] == \
                [("rewardDropBelow", met, stop["message"])]
    finally:
        store.dispose()


def test_rows_that_offer_tools_are_refused_at_submission_and_in_the_dry_run(rl_project, capsys):
    cli = Cli(capsys, rl_project["url"])
    document = rl_plan(rl_project["name"])
    document["config"]["dataset"] = "tools"
    path = write_plan(rl_project["tmp"], document)
    for extra in ((), ("--dry-run",)):
        refused = cli("training", "runs", "start", "-f", path, "--force", *extra)
        assert refused.code == 1
        assert "has 2 row(s) that offer tools; the trl engine of a grpo run does not render" in refused.err, \
            refused.err


@pytest.mark.parametrize(("change", "words"), [
    (lambda c: c.pop("reward"), "a grpo run needs config.reward.terms"),
    (lambda c: c.update(hyperparams={"lora": {"rank": 4}}), "takes its adapter, optimizer and loop from "
                                                              "config.rlHyperparams"),
    (lambda c: c["reward"]["terms"].append({"kind": "regex"}), "config.reward.terms[2]"),
    (lambda c: c["reward"]["terms"].append({"kind": "exact", "name": "vowel"}), "name a term twice"),
    (lambda c: c["reward"]["terms"].append({"kind": "jsonSchema", "schema": {"type": "objekt"}}),
     "config.reward.terms[2].schema: not a JSON schema at type"),
])
def test_a_reinforcement_plan_is_refused_by_field(rl_project, capsys, change, words):
    cli = Cli(capsys, rl_project["url"])
    document = rl_plan(rl_project["name"])
    change(document["config"])
    refused = cli("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force", "--dry-run")
    assert refused.code == 1 and words in refused.err, refused.err


def test_a_scoring_bundle_scores_the_rollouts_and_one_that_cannot_import_is_refused(rl_project, capsys, tmp_path):
    cli = Cli(capsys, rl_project["url"])
    name = rl_project["name"]
    good = tmp_path / "good"
    good.mkdir()
    (good / "helpers.py").write_text("VOWELS = set('aeiouAEIOU')\n")
    (good / "reward.py").write_text(
        "from . import helpers\n\n"
        "def compute_score(prompt, completion, fields):\n"
        "    text = completion.lstrip()\n"
        "    return 1.0 if text[:1] in helpers.VOWELS else 0.0\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "reward.py").write_text("import not_a_module_anywhere\n")
    cli.ok("registry", "bundles", "register", f"{name}/vowels", "-f", str(good))
    cli.ok("registry", "bundles", "register", f"{name}/broken", "-f", str(broken))
    document = rl_plan(name, steps=2)
    document["config"]["reward"]["terms"] = [{"kind": "rule", "bundle": f"{name}/vowels", "function": "reward",
                                              "name": "vowel"}]
    run = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force",
                            "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert all("reward:vowel" in m for m in cli.json("training", "runs", "metrics", run["runId"])["steps"])
    settings = cli.json("training", "runs", "get", run["runId"], "--settings")["settings"]
    assert settings["config.reward.terms"]["value"][0]["bundle"] == f"{name}/vowels:v1"  # the exact version
    # a continuation of it takes the parent's terms as a plan states them (the archive digest resolved again)
    continued = cli.json("training", "runs", "branch", run["runId"], "--max-steps", "3", "--dry-run")
    assert continued["branch"]["restore"] == "trainingState", continued["branch"]
    assert continued["resolved"]["config"]["reward"]["terms"][0]["bundle"] == f"{name}/vowels:v1"
    child = json.loads(cli.ok("training", "runs", "branch", run["runId"], "--max-steps", "3", "--wait",
                              "-o", "json").out)
    assert child["phase"] == "COMPLETED" and child["branch"]["restore"] == "trainingState", child.get("failureReason")
    assert len(cli.json("training", "runs", "metrics", child["runId"])["steps"]) == 3  # its own updates
    document["config"]["reward"]["terms"][0]["bundle"] = f"{name}/broken"
    refused = cli("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force")
    assert refused.code == 1 and "not_a_module_anywhere" in refused.err, refused.err
    document["config"]["reward"]["terms"][0]["bundle"] = f"{name}/nothing"
    refused = cli("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force")
    assert refused.code == 1 and f"{name}/nothing" in refused.err, refused.err


def test_a_paused_and_resumed_grpo_run_ends_with_the_uninterrupted_weights(rl_project, capsys):
    """Seeded on CPU: the rollouts after the resume sample what the uninterrupted run sampled (TRL restores the
    random state with the optimizer), so the adapter comes out the same."""
    import time

    import httpx

    cli = Cli(capsys, rl_project["url"])
    client = httpx.Client(base_url=rl_project["url"], headers=headers_for(rl_project["url"]), timeout=60)
    document = rl_plan(rl_project["name"], steps=8, temperature=0.5)
    document["execution"]["saveEvery"] = 2
    path = write_plan(rl_project["tmp"], document)
    baseline = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert baseline["phase"] == "COMPLETED", baseline.get("failureReason")

    run_id = cli.json("training", "runs", "start", "-f", path, "--force")["runId"]
    deadline = time.monotonic() + 180
    # asked as soon as it trains: the worker learns of a pause with its next report (within a second), and the
    # stand-in's updates are fast enough to finish all eight in that time once they are under way
    while client.get(f"/v1/training/runs/{run_id}").json()["phase"] != "TRAINING":
        assert time.monotonic() < deadline, "the run never started training"
        time.sleep(0.1)
    assert client.post(f"/v1/training/runs/{run_id}/pause", json={"checkpoint": "save"}).status_code == 202
    paused = json.loads(cli.ok("training", "runs", "wait", run_id, "-o", "json").out)
    assert paused["phase"] == "PAUSED" and paused["pause"]["savedStep"] < 8, paused["pause"]
    cli.ok("training", "runs", "resume", run_id)
    done = json.loads(cli.ok("training", "runs", "wait", run_id, "-o", "json").out)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")
    assert done["results"]["weightsDigest"] == baseline["results"]["weightsDigest"]


def test_a_supervised_adapter_is_trained_on_by_grpo_through_a_weights_branch(rl_project, capsys, tmp_path):
    """A supervised run with a validation set branched into a GRPO run: the child keeps the parent's training
    data, drops its supervised hyperparams and validation set, states its own rollouts and reward, and trains the
    parent's adapter (a weights branch: a fresh optimizer on its weights, its LoRA settings kept)."""
    cli = Cli(capsys, rl_project["url"])
    supervised = {"kind": "run", "project": rl_project["name"], "baseModel": MODEL,
                  "config": {"dataset": "prompts", "validation": {"dataset": "prompts"}, "maxSeqLength": 256,
                             "hyperparams": {"training": {"maxSteps": 2, "batchSize": 4}}},
                  "execution": {"deviceProfile": "cpu"}}
    parent_run = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], supervised),
                                   "--force", "--wait", "-o", "json").out)
    assert parent_run["phase"] == "COMPLETED", parent_run.get("failureReason")
    overrides = tmp_path / "rl.yaml"
    overrides.write_text(json.dumps({
        "method": "grpo", "rlHyperparams": {"maxCompletionLength": 4, "training": {"maxSteps": 2, "batchSize": 2}},
        "reward": {"terms": [{"kind": "contains"}]}}))
    parent = parent_run["runId"]
    child = json.loads(cli.ok("training", "runs", "branch", parent, "--overrides", str(overrides), "--wait",
                              "-o", "json").out)
    assert child["phase"] == "COMPLETED", child.get("failureReason")
    assert child["method"] == "grpo" and child["branch"]["restore"] == "weights"
    assert "the branch trains grpo, not its parent's sft" in child["branch"]["why"]
    settings = cli.json("training", "runs", "get", child["runId"], "--settings")["settings"]
    assert not any(path.startswith("config.hyperparams.") for path in settings)
    assert settings["config.rlHyperparams.klBeta"]["value"] == 0.04
    assert child["dataset"]["reference"] == parent_run["dataset"]["reference"] and child["validation"] is None


def test_a_grpo_run_starts_from_a_registered_adapter_through_source_model(rl_project, capsys):
    """`source.model` (start from existing weights): the run trains the registered adapter with its LoRA settings,
    and its KL reference is a frozen copy of it (no divergence at the first update); refused by field when it names
    no adapter or states LoRA settings of its own."""
    cli = Cli(capsys, rl_project["url"])
    name = rl_project["name"]
    supervised = {"kind": "run", "project": name, "baseModel": MODEL, "modelName": "warm",
                  "config": {"dataset": "prompts", "maxSeqLength": 256,
                             "hyperparams": {"lora": {"rank": 4, "alpha": 8},
                                             "training": {"maxSteps": 2, "batchSize": 4}}},
                  "execution": {"deviceProfile": "cpu"}}
    parent = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], supervised),
                               "--force", "--wait", "-o", "json").out)
    adapter = parent["results"]["model"]
    document = rl_plan(name, steps=2)
    document["source"] = {"model": f"{name}/warm"}
    dry = cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--dry-run").out
    assert f"Source       the run trains {adapter} (its weights and LoRA settings)" in dry, dry
    run = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(rl_project["tmp"], document), "--force",
                            "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert run["branch"]["source"] == {"model": adapter} and run["branch"]["parentRunId"] is None
    text = cli.ok("training", "runs", "get", run["runId"]).out
    assert f"Source       starts from the weights of {adapter}, with a fresh optimizer and its LoRA settings" in text
    settings = cli.json("training", "runs", "get", run["runId"], "--settings")["settings"]
    assert settings["config.rlHyperparams.lora.rank"]["value"] == 4  # the adapter's own
    chain = cli.json("training", "runs", "ancestry", run["runId"])["chain"]
    assert [(hop["runId"], hop.get("source"), hop.get("snapshotId")) for hop in chain] == [
        (run["runId"], adapter, None)], chain  # the root of its chain
    first = cli.json("training", "runs", "metrics", run["runId"])["steps"][0]
    assert abs(first["kl"]) < 1e-3, first  # the reference is the adapter it starts from
    lora = rl_plan(name, steps=2, lora={"rank": 8})
    lora["source"] = {"model": adapter}
    refused = cli("training", "runs", "start", "-f", write_plan(rl_project["tmp"], lora), "--force")
    assert refused.code == 1 and "config.rlHyperparams.lora is stated, but a run from source.model" in refused.err
    unknown = dict(document, source={"model": f"{name}/nothing"})
    refused = cli("training", "runs", "start", "-f", write_plan(rl_project["tmp"], unknown), "--force")
    assert refused.code == 1 and f"source.model '{name}/nothing'" in refused.err, refused.err
