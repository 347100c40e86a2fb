"""Comparisons through the CLI against a real server and workers on the stand-in (a server of this module's own: an
endpoint takes the cpu's one serving slot). A parent run saves at steps 2 and 4; its step-2 save is registered and
named `champion`, which an endpoint serves. Three branches of the parent's last save train; `comparisons create
--all-branches PARENT --promote champion` scores the source snapshot's model and the three on one dataset with one
grader (a scoring bundle whose score is a digest of the answer's text, so different answers score differently),
ranks them with bootstrap intervals, names the winner of the Complete result and moves `champion` to it; the
endpoint answers `NAME:champion` from the new version without a restart. The same comparison again reuses every
evaluation, and `runs hparams BRANCH --against PARENT` names the one hyperparameter a branch changed. With a new
answer budget (nothing to reuse) and one candidate's evaluation cancelled, the result is
Partial: no winner, no promotion."""

from __future__ import annotations

import time

import pytest

from tests.conftest import Cli, start_server
from tests.endpoint_fixtures import ENDPOINTS
from tests.run_fixtures import capitals_project, followed, plan, wait_for

pytestmark = pytest.mark.integration
DIGEST_SCORE = '''import hashlib


def compute_score(prompt_messages, completion_text, fields):
    # a score of the answer's text alone: two models that answer differently score differently
    return int(hashlib.sha256(completion_text.encode()).hexdigest()[:6], 16) / 0xFFFFFF
'''


def _served(client, endpoint_id: str) -> dict[str, dict]:
    return {m["name"]: m for m in client.get(f"{ENDPOINTS}/{endpoint_id}").json()["models"] if m["kind"] == "adapter"}


def test_three_branches_compared_promote_the_winner_to_the_served_champion(tmp_path, capsys):
    proc = start_server(tmp_path / "server")
    try:
        project = capitals_project(proc.url, tmp_path, "cmp", copies=1)
        client, name = project["client"], project["name"]
        cli = Cli(capsys, proc.url)
        scorer = tmp_path / "scorer"
        scorer.mkdir()
        (scorer / "digest.py").write_text(DIGEST_SCORE)
        cli.ok("registry", "bundles", "register", f"{name}/digest", "-f", str(scorer))
        grader = f"bundle:{name}/digest#digest"

        document = plan(name, "chat", modelName="capitals")
        document["config"]["hyperparams"]["training"]["maxSteps"] = 4
        document["execution"]["saveEvery"] = 2
        parent = client.post("/v1/training/runs", json=document).json()["runId"]
        wait_for(client, f"/v1/training/runs/{parent}", lambda r: r["phase"] == "COMPLETED",
                 fail_if=lambda r: r["terminal"] and r["phase"] != "COMPLETED")
        saves = {s["step"]: s["snapshotId"] for s in client.get(f"/v1/training/runs/{parent}/snapshots").json()[
            "snapshots"]}
        model = f"{name}/capitals"
        early = cli.json("registry", "models", "register", model, "--snapshot", saves[2], "--alias", "champion")
        assert early["reference"] == f"{model}:v2"  # v1: the parent's own model, from its last save
        sweep = client.post(f"/v1/training/runs/{parent}/sweep", json={
            "snapshotId": saves[4], "restoreMode": "weights",
            "grid": {"axes": [{"path": "hyperparams.optimizer.learningRate", "values": [0.003, 0.01, 0.03]}]}})
        assert sweep.status_code == 202, sweep.text
        endpoint_id = cli.json("training", "endpoints", "create", "--model", f"{model}:champion")["endpointId"]
        for branch in sweep.json()["runs"]:
            wait_for(client, f"/v1/training/runs/{branch['runId']}", lambda r: r["phase"] == "COMPLETED",
                     fail_if=lambda r: r["terminal"] and r["phase"] != "COMPLETED")

        # how the branches differ from their parent: their learning rate alone
        first = sweep.json()["runs"][0]["runId"]
        differ = cli.json("training", "runs", "hparams", first, "--against", parent)
        assert [(d["path"], d["value"], d["against"]) for d in differ["differences"]] == [
            ("config.hyperparams.optimizer.learningRate", 0.003, 0.01)]
        assert differ["sha"] != differ["againstSha"] and differ["hyperparams"][
            "config.hyperparams.optimizer.learningRate"] == 0.003
        same = cli.json("training", "runs", "hparams", parent, "--against", parent)
        assert same["differences"] == [] and same["sha"] == same["againstSha"]
        assert "config.dataset" not in same["hyperparams"]
        shown = cli.ok("training", "runs", "hparams", first[:12], "--against", parent[:12]).out
        assert "1 difference(s)" in shown and "config.hyperparams.optimizer.learningRate" in shown

        done = followed(cli, "training", "comparisons", "create", "--source", saves[4][:12], "--all-branches",
                        parent[:12], "--dataset", f"{name}/chat", "--grader", grader, "--max-new-tokens", "6",
                        "--promote", "champion", "--wait", "--exit-status")
        assert done["phase"] == "COMPLETED" and done["result"] == "Complete", done
        assert [e["role"] for e in done["entries"]] == ["source", "branch", "branch", "branch"]
        assert done["entries"][0]["model"] == f"{model}:v1"  # the source: the parent's last save, as registered
        assert done["fans"] == [{"parentRunId": parent, "branches": 3, "compared": 3, "skipped": []}]
        scores = done["scores"]
        assert len(scores) == 4 and all(s["rows"] == 8 and s["low"] <= s["meanScore"] <= s["high"] for s in scores)
        assert [s["meanScore"] for s in scores] == sorted((s["meanScore"] for s in scores), reverse=True)
        source = next(s for s in scores if s["role"] == "source")
        assert source["versusSource"] is None
        assert all(abs(s["versusSource"] - (s["meanScore"] - source["meanScore"])) < 1e-9
                   for s in scores if s is not source)
        winner = done["winner"]
        assert winner["model"] == scores[0]["model"] and winner["runnerUp"] == scores[1]["model"]
        assert winner["margin"] == pytest.approx(scores[0]["meanScore"] - scores[1]["meanScore"])
        assert winner["marginLow"] <= winner["margin"] <= winner["marginHigh"]
        assert done["promotion"] == {"alias": "champion", "leastMargin": 0.0, "model": winner["model"],
                                     "moved": True, "whyNot": None}
        spend = done["spend"]
        assert spend["evaluationsStarted"] == 4 and spend["evaluationsReused"] == 0
        assert spend["training"]["deviceSeconds"] > 0 and spend["comparison"]["deviceSeconds"] > 0
        moves = cli.json("registry", "models", "get", model)["aliasMoves"]
        assert (moves[-1]["alias"], moves[-1]["from"], moves[-1]["to"]) == ("champion", 2,
                                                                           int(winner["model"].split(":v")[1]))

        # the endpoint serving the alias follows it to the winner, without a restart
        deadline = time.monotonic() + 120
        while not (_served(client, endpoint_id).get(winner["model"]) or {}).get("ready"):
            assert time.monotonic() < deadline, _served(client, endpoint_id)
            time.sleep(0.2)
        asked = {"model": f"{model}:champion", "messages": [{"role": "user", "content": "Capital of Peru?"}],
                 "max_tokens": 4, "temperature": 0}
        answer = client.post("/v1/chat/completions", json=asked)
        assert answer.status_code == 200 and answer.json()["model"] == winner["model"], answer.text

        text = cli.ok("training", "comparisons", "get", done["comparisonId"][:10]).out
        assert "Result      Complete" in text and f"Winner      {winner['model']}" in text
        assert f"Promotion   champion → {winner['model']}" in text and "95% INTERVAL" in text
        side = cli.json("training", "comparisons", "answers", done["comparisonId"], "--line", "3")
        assert side["line"] == 3 and side["prompt"] and [a["model"] for a in side["answers"]] == [
            e["model"] for e in done["entries"]]

        # the same comparison again: every evaluation reused, the same figures
        again = followed(cli, "training", "comparisons", "create", "--source", saves[4], "--all-branches", parent,
                         "--dataset", f"{name}/chat", "--grader", grader, "--max-new-tokens", "6", "--wait")
        assert all(e["reused"] for e in again["entries"]) and again["scores"] == scores
        assert again["spend"]["evaluationsReused"] == 4 and again["spend"]["comparison"]["deviceSeconds"] == 0

        # a new budget answers again; one candidate's evaluation cancelled: Partial, no winner, nothing promoted
        started = cli.json("training", "comparisons", "create", "--source", saves[4], "--all-branches", parent,
                           "--dataset", f"{name}/chat", "--grader", grader, "--max-new-tokens", "5",
                           "--promote", "champion")
        assert not any(e["reused"] for e in started["entries"]) and started["phase"] == "EVALUATING"
        dropped = started["entries"][2]
        cli.ok("training", "evaluations", "cancel", dropped["evaluationId"])
        partial = followed(cli, "training", "comparisons", "wait", started["comparisonId"])
        assert partial["phase"] == "COMPLETED" and partial["result"] == "Partial" and partial["winner"] is None
        assert [f["model"] for f in partial["failed"]] == [dropped["model"]]
        assert partial["failed"][0]["phase"] == "CANCELLED" and len(partial["scores"]) == 3
        assert partial["promotion"]["moved"] is False and partial["promotion"]["whyNot"] == "the result is Partial"
        failing = cli("training", "comparisons", "wait", started["comparisonId"], "--exit-status")
        assert failing.code == 1 and "Winner      none: a Partial result names no winner" in failing.out
        listed = cli.json("training", "comparisons", "list", "--project", name)["comparisons"]
        assert [c["comparisonId"] for c in listed] == [started["comparisonId"], again["comparisonId"],
                                                       done["comparisonId"]]
        client.delete(f"{ENDPOINTS}/{endpoint_id}")
    finally:
        proc.stop()
