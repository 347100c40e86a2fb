"""Curations through the CLI against a real server and a real worker on the built-in stand-in: a small OASST1
session is judged by a model, one call a candidate, and the kept candidates register as a chat dataset version
whose lineage names the curation, the session, the judge and its commit and the instructions' sha256.

The stand-in's own replies are random, so its verdicts are not asserted one by one: judged by it, every candidate
is rejected as `unscored` or `below_threshold`, or kept, and the counts add up. A judge that says one thing is
made the honest way: an adapter of the stand-in trained on the curation's own judge prompts to reply
`{"score": 0.5}`, greedy at judging — so a threshold of 0.5 keeps every candidate, and 0.9 rejects every one
(`below_threshold`, nothing kept: FAILED, `--exit-status` exits 1). A session of another project, and a curationId
reused for another request, are refused; the same request again reaches the same curation."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
import yaml

from optimize.curation.verdicts import asked
from optimize.sessions.candidates import parse
from optimize.sessions.oasst1 import Oasst1Parser
from tests.conftest import Cli, from_standin, headers_for, write_jsonl
from tests.run_fixtures import MODEL, plan, write_plan
from tests.session_files import jsonl, oasst_slice

pytestmark = pytest.mark.integration

INSTRUCTIONS = "Keep answers that are correct and polite."
SCORE = '{"score": 0.5}'


def session_of(cli: Cli, project: str, path) -> str:
    return cli.json("training", "sessions", "create", "-f", str(path), "--source", "oasst1", "--project",
                    project)["sessionHash"]


def request_file(tmp, **fields) -> str:
    path = tmp / f"curation-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(fields))
    return str(path)


def followed(cli: Cli, *args: str) -> tuple[int, dict]:
    result = cli(*args, "-o", "json-compact")
    return result.code, json.loads(result.out.splitlines()[-1])


@pytest.fixture(scope="module")
def curated(sqlite_server, tmp_path_factory):
    """A project with a session of the OASST1 slice (5 candidates), a second project with its own session, and
    a judge adapter trained to reply SCORE to the curation's prompts."""
    tmp = tmp_path_factory.mktemp("curations")
    url = sqlite_server.url
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    name, other = f"cu{uuid.uuid4().hex[:8]}", f"cv{uuid.uuid4().hex[:8]}"
    for project in (name, other):
        client.post("/v1/training/projects", json={"name": project}).raise_for_status()
    trees = tmp / "trees.jsonl"
    trees.write_bytes(jsonl(oasst_slice()))
    foreign = tmp / "foreign.jsonl"
    foreign.write_bytes(jsonl(oasst_slice()[2:]))
    from optimize.cli.main import main

    # the judge: the curation's own prompts, each answered SCORE
    candidates = parse(Oasst1Parser(), jsonl(oasst_slice())).candidates
    rows = [{"messages": [*asked(c.messages, INSTRUCTIONS), {"role": "assistant", "content": SCORE}]}
            for c in candidates] * 8
    assert main(["registry", "datasets", "register", f"{name}/judging", "-f", str(write_jsonl(tmp / "j.jsonl", rows)),
                 "--server", url]) == 0
    document = plan(name, "judging", modelName="judge")
    document["config"]["maxSeqLength"] = 512
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": 0.02},
                                         "training": {"maxSteps": 30, "batchSize": 8}}
    assert main(["training", "runs", "start", "-f", write_plan(tmp, document), "--force", "--wait",
                 "--exit-status", "--server", url]) == 0
    judge = client.get("/v1/training/runs", params={"project": name}).json()["runs"][0]["results"]["model"]
    return {"name": name, "other": other, "tmp": tmp, "client": client, "trees": trees, "foreign": foreign,
            "judge": judge, "url": url}


def test_kept_candidates_register_as_a_dataset_version_with_lineage(curated, capsys):
    cli, name, tmp = Cli(capsys, curated["url"]), curated["name"], curated["tmp"]
    session_hash = session_of(cli, name, curated["trees"])
    path = request_file(tmp, curationId=f"keep-{name}", project=name, sessionHashes=[session_hash],
                        judge=curated["judge"], instructions=INSTRUCTIONS, threshold=0.5, dataset=f"{name}/curated",
                        systemPrompt="You are a helpful assistant.")
    code, done = followed(cli, "training", "curations", "apply", "-f", path, "--wait", "--exit-status")
    assert code == 0 and done["phase"] == "COMPLETED", done["failureReason"]
    assert done["progress"] == {"total": 5, "judged": 5, "kept": 5, "rejected": 0, "rejectedByReason": {}}
    assert done["count"] == {"done": 5, "total": 5, "unit": "judged", "kept": 5}
    registered = done["registered"]
    assert registered["reference"] == f"{name}/curated:v1" and registered["rows"] == 5

    version = curated["client"].get(f"/v1/registry/datasets/{name}/curated/versions/v1").json()
    lineage = version["lineage"]
    assert lineage["producedBy"] == {"kind": "curation", "id": done["curationId"]}
    assert lineage["sessions"] == [session_hash]
    assert lineage["judge"] == {"reference": curated["judge"], "baseCommit": done["judge"]["baseModel"]["commit"]}
    assert lineage["instructionsSha256"] == done["instructionsSha256"] and len(done["instructionsSha256"]) == 64
    page = curated["client"].get(f"/v1/registry/datasets/{name}/curated/versions/v1/rows").json()
    messages = [item["row"]["messages"] for item in page["items"]]
    assert all(m[0] == {"role": "system", "content": "You are a helpful assistant."} for m in messages)
    assert messages[0][1:] == [{"role": "user", "content": "What is a monad?"},
                               {"role": "assistant", "content": "A monad is a monoid in the category of endofunctors."}]

    shown = cli.ok("training", "curations", "get", f"keep-{name}").out
    assert curated["judge"] in shown and f"{name}/curated:v1" in shown and "5/5 judged, 5 kept" in shown
    assert cli.json("training", "curations", "rejections", done["curationId"][:12])["rejections"] == []
    listed = cli.json("training", "curations", "list", "--project", name, "--phase", "COMPLETED")["curations"]
    assert done["curationId"] in {c["curationId"] for c in listed}

    # the same request again reaches the same curation; its curationId for another request is refused
    again = cli.json("training", "curations", "apply", "-f", path)
    assert again["curationId"] == done["curationId"] and again["registered"] == registered
    other = request_file(tmp, curationId=f"keep-{name}", project=name, sessionHashes=[session_hash],
                         judge=curated["judge"], instructions=INSTRUCTIONS, threshold=0.6, dataset=f"{name}/curated")
    refused = cli("training", "curations", "apply", "-f", other)
    assert refused.code != 0 and "was used for another request" in refused.err + refused.out


def test_a_judge_an_endpoint_serves_is_asked_there_and_keeps_what_the_loaded_judge_keeps(curated, capsys):
    """`judge: endpoint:MODEL`: the curation claims no device, its worker asks the endpoint through the server, and
    the endpoint's greedy replies keep every candidate, as the judge loaded on a worker does; the lineage names the
    exact version the endpoint serves. A judge no endpoint serves is refused at submission."""
    cli, name, tmp = Cli(capsys, curated["url"]), curated["name"], curated["tmp"]
    session_hash = session_of(cli, name, curated["trees"])
    unserved = request_file(tmp, project=name, sessionHashes=[session_hash], judge=f"endpoint:{curated['judge']}",
                            instructions=INSTRUCTIONS, threshold=0.5, dataset=f"{name}/served")
    refused = cli("training", "curations", "apply", "-f", unserved)
    assert refused.code == 1 and f"judge: model '{curated['judge']}' is not served by any endpoint" in refused.err
    endpoint = cli.json("training", "endpoints", "create", "--model", curated["judge"])["endpointId"]
    try:
        cli.ok("training", "endpoints", "wait", endpoint)
        code, done = followed(cli, "training", "curations", "apply", "-f", unserved, "--wait", "--exit-status")
        assert code == 0 and done["phase"] == "COMPLETED", done
        assert done["judge"]["endpoint"] is True and done["judge"]["reference"] == curated["judge"]
        assert done["progress"]["kept"] == 5 and done["registered"]["rows"] == 5
        lineage = curated["client"].get(f"/v1/registry/datasets/{name}/served/versions/v1").json()["lineage"]
        assert lineage["judge"]["reference"] == curated["judge"]
        assert "asked where an endpoint serves it" in cli.ok("training", "curations", "get", done["curationId"]).out
    finally:
        cli.ok("training", "endpoints", "delete", endpoint)


def test_a_threshold_the_judge_never_reaches_keeps_nothing_and_fails(curated, capsys):
    cli, name = Cli(capsys, curated["url"]), curated["name"]
    session_hash = session_of(cli, name, curated["trees"])
    path = request_file(curated["tmp"], project=name, sessionHashes=[session_hash], judge=curated["judge"],
                        instructions=INSTRUCTIONS, threshold=0.9, dataset=f"{name}/never")
    code, done = followed(cli, "training", "curations", "apply", "-f", path, "--wait", "--exit-status")
    assert code == 1 and done["phase"] == "FAILED" and done["registered"] is None
    assert done["progress"]["rejectedByReason"] == {"below_threshold": 5}
    assert done["failureReason"].startswith("nothing was kept: 5 of 5 candidates rejected (below_threshold 5)")
    rejected = cli.json("training", "curations", "rejections", done["curationId"], "--reason", "below_threshold")
    assert [r["position"] for r in rejected["rejections"]] == [0, 1, 2, 3, 4]
    assert all(r["score"] == 0.5 and r["detail"].startswith("score 0.5 below threshold 0.9")
               and SCORE in r["output"] for r in rejected["rejections"])
    assert cli.json("training", "curations", "rejections", done["curationId"], "--reason", "unscored",
                    "--limit", "2")["rejections"] == []
    text = cli.ok("training", "curations", "rejections", done["curationId"]).out
    assert "Rejected 5 in all: below_threshold 5" in text


def test_the_stand_ins_verdicts_add_up_by_reason(curated, capsys):
    """The base stand-in as the judge: its replies are random, so each candidate is kept, or rejected as unscored or
    below_threshold; whatever it said, the counts add up and each rejection says why."""
    cli, name = Cli(capsys, curated["url"]), curated["name"]
    session_hash = session_of(cli, name, curated["trees"])
    path = request_file(curated["tmp"], curationId=f"raw-{name}", project=name, sessionHashes=[session_hash],
                        judge=MODEL, instructions=INSTRUCTIONS, threshold=0.5, dataset=f"{name}/raw")
    followed_text = cli("training", "curations", "apply", "-f", path, "--wait")  # the text a follower prints
    code = followed_text.code
    assert "judged 5/5 (100%)" in followed_text.out and " kept" in followed_text.out, followed_text.out
    done = cli.json("training", "curations", "get", f"raw-{name}")
    progress = done["progress"]
    assert progress["judged"] == 5 and progress["kept"] + progress["rejected"] == 5
    assert set(progress["rejectedByReason"]) <= {"unscored", "below_threshold"}
    assert done["phase"] == ("COMPLETED" if progress["kept"] else "FAILED") and code == 0
    rejected = cli.json("training", "curations", "rejections", done["curationId"])["rejections"]
    assert len(rejected) == progress["rejected"]
    for reason, count in progress["rejectedByReason"].items():
        assert sum(r["reason"] == reason for r in rejected) == count
    assert all("gave no score between 0 and 1" in r["detail"] for r in rejected if r["reason"] == "unscored")


def test_refused_by_field_before_anything_starts(curated, capsys):
    cli, name, tmp = Cli(capsys, curated["url"]), curated["name"], curated["tmp"]
    foreign = session_of(cli, curated["other"], curated["foreign"])
    base = {"project": name, "judge": MODEL, "instructions": INSTRUCTIONS, "threshold": 0.5,
            "dataset": f"{name}/refused"}

    def refused(**fields) -> str:
        result = cli("training", "curations", "apply", "-f", request_file(tmp, **{**base, **fields}))
        assert result.code != 0, result.out
        return result.err + result.out

    words = refused(sessionHashes=[foreign])
    assert f"belongs to project {curated['other']}, not {name}" in words
    assert "no session" in refused(sessionHashes=["ab" * 32])
    own = session_of(cli, name, curated["trees"])
    assert "judge:" in refused(sessionHashes=[own], judge="nobody/nothing")
    assert "threshold must be a number from 0 to 1" in refused(sessionHashes=[own], threshold=2)
    assert "instructions must be text" in refused(sessionHashes=[own], instructions="")
    assert "unknown field(s): teacher" in refused(sessionHashes=[own], teacher=MODEL)
    # a namespace archived takes no new version: refused now, not once the judging is done
    from optimize.cli.main import main

    archived = f"ar{uuid.uuid4().hex[:8]}"
    assert main(["registry", "datasets", "register", f"{archived}/d", "-f",
                 str(write_jsonl(tmp / "d.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                                 {"role": "assistant", "content": "hello"}]}])),
                 "--server", curated["url"]]) == 0
    cli.ok("registry", "namespaces", "archive", archived)
    assert f"namespace {archived!r} is archived" in refused(sessionHashes=[own], dataset=f"{archived}/curated")
    listed = cli.json("training", "curations", "list", "--project", name)["curations"]
    assert all(c["dataset"] not in (f"{name}/refused", f"{archived}/curated") for c in listed)  # none started


def test_a_pipeline_curates_then_trains_on_the_curated_rows_and_evaluates_them(curated, capsys):
    """A curate stage's registered version is what `@curate` names: the next stage trains on it and the last one
    evaluates the model it trained on it. The stage's curation is cancelled with its pipeline, not on its own."""
    cli, name = Cli(capsys, curated["url"]), curated["name"]
    session = session_of(cli, name, curated["trees"])
    document = plan(name, "@curate", modelName="curated-model")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 2
    stages = [{"name": "curate", "type": "curate", "sessionHashes": [session], "judge": curated["judge"],
               "instructions": INSTRUCTIONS, "threshold": 0.5, "dataset": f"{name}/piped"},
              {"name": "train", "type": "train", "baseModel": document["baseModel"], "modelName": "curated-model",
               "config": document["config"], "execution": document["execution"]},
              {"name": "check", "type": "evaluate", "model": "@train", "dataset": "@curate", "grader": "contains",
               "maxNewTokens": 2, "minMeanScore": 0}]
    path = curated["tmp"] / f"pipeline-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump({"kind": "pipeline", "project": name, "stages": stages}))
    dry = cli.json("training", "pipelines", "start", "-f", str(path), "--dry-run")
    assert [s["reads"] for s in dry["stages"]] == [{}, {"config.dataset": "@curate"},
                                                   {"model": "@train", "dataset": "@curate"}]
    started = cli.json("training", "pipelines", "start", "-f", str(path))
    pipeline = f"/v1/training/pipelines/{started['pipelineId']}"
    deadline = time.monotonic() + 120
    while not (stage := curated["client"].get(pipeline).json()["stages"][0])["jobId"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    refused = cli("training", "curations", "cancel", stage["jobId"])  # the pipeline is still under way
    assert refused.code == 1 and f"is stage curate of pipeline {started['pipelineId'][:12]}" in refused.err
    done = json.loads(cli.ok("training", "pipelines", "wait", started["pipelineId"], "--exit-status",
                             "-o", "json-compact").out.splitlines()[-1])
    assert done["phase"] == "COMPLETED", done
    curate, train, check = done["stages"]
    assert curate["jobKind"] == "curation" and curate["output"] == f"{name}/piped:v1"
    run = curated["client"].get(f"/v1/training/runs/{train['jobId']}").json()
    assert run["dataset"]["reference"] == f"{name}/piped:v1" and train["output"] == f"{name}/curated-model:v1"
    evaluation = curated["client"].get(f"/v1/training/evaluations/{check['jobId']}").json()
    assert evaluation["dataset"]["reference"] == f"{name}/piped:v1"
