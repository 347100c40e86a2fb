"""Dataset analysis through the CLI and API, against a real server and worker processes.

Figures are checked against an independent count: the stand-in's tokenizer and chat template applied directly
(`apply_chat_template(tokenize=True)` and the template's own generation markers), not our rendering path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from optimize.workloads.packing import bins
from tests.conftest import Cli, built_standin, chat_row, from_standin, pair_row, write_jsonl
from tests.row_cases import TOOLS

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-smollm2"


@pytest.fixture(scope="module")
def analysis_server(tmp_path_factory):
    from tests.conftest import start_server

    proc = start_server(tmp_path_factory.mktemp("analysis-server"))
    httpx.post(f"{proc.url}/v1/training/base-models/{MODEL}/select", headers=proc.headers, json=from_standin(MODEL),
               timeout=600).raise_for_status()
    yield proc
    proc.stop()


@pytest.fixture
def acli(capsys, analysis_server):
    return Cli(capsys, analysis_server.url)


def model_path(cli) -> Path:
    return Path(cli.json("training", "base-models", "get", MODEL)["selection"]["path"])


def long_conversation(turns: int, words: int = 60) -> dict:
    messages = [{"role": "system", "content": "You answer support tickets."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + "order refund status " * words})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "shipped today thanks " * (words // 2)})
    return {"messages": messages}


def dataset_rows() -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "12"}'}}
    return [
        chat_row("hi", "hello"),
        chat_row("what is the status of order 12?", '{"category": "shipping", "urgent": false}'),
        {"messages": [{"role": "user", "content": "find 12"},
                      {"role": "assistant", "content": "checking", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                      {"role": "assistant", "content": "It shipped."}], "tools": TOOLS},
        long_conversation(4),
        long_conversation(1, words=200),
    ]


def independent_figures(path: Path, rows: list[dict]):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    lengths, trained_all, trained_final = [], 0, 0
    for row in rows:
        messages = [{**m, "tool_calls": [{**c, "function": {**c["function"],
                                                            "arguments": json.loads(c["function"]["arguments"])}}
                                         for c in m["tool_calls"]]} if m.get("tool_calls") else m
                    for m in row["messages"]]
        encoded = tokenizer.apply_chat_template(messages, tools=row.get("tools"), tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True)
        lengths.append(len(encoded["input_ids"]))
        mask = encoded["assistant_masks"]
        trained_all += sum(mask)
        # The final answer is the last run of assistant tokens.
        last_run, position = 0, len(mask) - 1
        while position >= 0 and mask[position] == 0:
            position -= 1
        while position >= 0 and mask[position] == 1:
            last_run += 1
            position -= 1
        trained_final += last_run
    return lengths, trained_final, trained_all


def test_report_matches_an_independent_count(acli, ns, tmp_path, analysis_server):
    rows = dataset_rows()
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    analysis = acli.json("training", "datasets", "analyze", f"{ns}/d", "--model", MODEL, "--wait")
    assert analysis["phase"] == "done", analysis["reason"]
    report = analysis["report"]
    lengths, trained_final, trained_all = independent_figures(model_path(acli), rows)
    ordered = sorted(lengths)
    assert report["rows"] == len(rows)
    assert report["lengths"]["max"] == ordered[-1]
    assert report["lengths"]["median"] == ordered[2]
    assert report["longest"][0] == {"line": lengths.index(ordered[-1]) + 1, "length": ordered[-1]}
    assert report["trainedTokens"] == {"default": trained_final, "assistantTurnsAll": trained_all}
    over_512 = sum(1 for n in lengths if n > 512)
    assert report["limits"][0] == {"limit": 512, "over": over_512, "overTrimmed": report["limits"][0]["overTrimmed"]}
    assert report["suggestedMaxSeqLength"] >= ordered[-1]
    # the histogram the dashboard draws, from the per-row lengths the worker stored
    url = f"{analysis_server.url}/v1/training/datasets/analyses/{analysis['analysisId']}/histogram"
    histogram = httpx.get(url, params={"bins": 4}, headers=analysis_server.headers).json()
    assert histogram["rows"] == len(rows) and histogram["longest"] == ordered[-1] and len(histogram["bins"]) <= 4
    assert [b["rows"] for b in histogram["bins"]] == [sum(1 for n in lengths if b["from"] <= n <= b["to"])
                                                      for b in histogram["bins"]]
    assert sum(b["rows"] for b in histogram["bins"]) == len(rows)
    assert histogram["limits"][0] == {"limit": 512, "over": over_512}
    refused = httpx.get(url, params={"bins": 0}, headers=analysis_server.headers)
    assert refused.status_code == 422 and "bins" in refused.text
    missing = httpx.get(url.replace(analysis["analysisId"], "ffffffffffff"), headers=analysis_server.headers)
    assert missing.status_code == 404 and "does not exist" in missing.text
    assert report["tokenizer"]["commit"] == acli.json("training", "base-models", "get", MODEL)["commit"]
    template = (model_path(acli) / "chat_template.jinja").read_bytes()
    import hashlib

    assert report["chatTemplate"] == {"sha256": hashlib.sha256(template).hexdigest(), "source": "optimize"}
    text = acli.ok("training", "datasets", "analyze", f"{ns}/d", "--model", MODEL).out
    assert "Suggested  maxSeqLength" in text and "Template findings: none" in text


def test_trimmed_lengths_count_rows_still_over(acli, ns, tmp_path):
    rows = [long_conversation(4), long_conversation(1, words=200), chat_row()]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    report = acli.json("training", "datasets", "analyze", f"{ns}/d", "--model", MODEL, "--wait")["report"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path(acli))
    multi = rows[0]["messages"]
    trimmed = [multi[0], *multi[-2:]]  # system prompt and final turn kept
    trimmed_length = len(tokenizer.apply_chat_template(trimmed, tokenize=True, return_dict=True)["input_ids"])
    single_length = len(tokenizer.apply_chat_template(rows[1]["messages"], tokenize=True,
                                                      return_dict=True)["input_ids"])
    assert trimmed_length <= 512 < single_length  # the test's premise
    limit = report["limits"][0]
    assert limit["over"] == 2 and limit["overTrimmed"] == 1


def test_one_analysis_is_shared_across_names(acli, ns, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [chat_row("shared")])
    acli.ok("registry", "datasets", "register", f"{ns}/a", "-f", str(path))
    acli.ok("registry", "datasets", "register", f"{ns}/b", "-f", str(path))
    first = acli.json("training", "datasets", "analyze", f"{ns}/a", "--model", MODEL, "--wait")
    second = acli.json("training", "datasets", "analyze", f"{ns}/b:v1", "--model", MODEL)
    assert second["analysisId"] == first["analysisId"] and second["phase"] == "done"
    listed = acli.json("training", "datasets", "analyses", f"{ns}/b")["analyses"]
    assert [a["analysisId"] for a in listed] == [first["analysisId"]]
    api = httpx.get(f"{acli.url}/v1/training/datasets/analyses/{first['analysisId'][:8]}", headers=acli.headers).json()
    assert api["analysisId"] == first["analysisId"] and api["report"]["rows"] == 1


def test_findings_name_their_lines(acli, ns, tmp_path, analysis_server):
    proc = analysis_server
    httpx.post(f"{proc.url}/v1/training/base-models/optimize/tiny-llama-3.2/select", headers=proc.headers,
               json=from_standin("optimize/tiny-llama-3.2"), timeout=600).raise_for_status()
    rows = dataset_rows()
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    analysis = acli.json("training", "datasets", "analyze", f"{ns}/d", "--model", "optimize/tiny-llama-3.2", "--wait")
    findings = analysis["report"]["findings"]
    assert findings == [{"line": 3, "message": 1, "reason": "the chat template renders the message without its text"}]
    assert analysis["report"]["findingCount"] == 1


def test_preference_pairs_are_measured_in_pairs(acli, ns, tmp_path):
    pairs = [pair_row("q1", "a short answer", "a much longer rejected answer " * 10), pair_row("q2")]
    path = write_jsonl(tmp_path / "p.jsonl", pairs)
    acli.ok("registry", "datasets", "register", f"{ns}/p", "-f", str(path))
    report = acli.json("training", "datasets", "analyze", f"{ns}/p", "--model", MODEL, "--wait")["report"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path(acli))

    def length(pair, field):
        return len(tokenizer.apply_chat_template([*pair["prompt"], pair[field]], tokenize=True,
                                                 return_dict=True)["input_ids"])

    expected = [max(length(p, "chosen"), length(p, "rejected")) for p in pairs]
    assert report["pairs"] == 2 and "rows" not in report
    assert report["lengths"]["max"] == max(expected)
    assert report["longest"][0] == {"line": 1, "length": expected[0]}


def test_sharded_dataset_is_analyzed_whole(acli, ns, tmp_path):
    rows = [chat_row(f"question {i} " + "x" * 200, f"answer {i}") for i in range(300)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    version = acli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "16KiB")
    assert version["shards"] > 3
    report = acli.json("training", "datasets", "analyze", f"{ns}/d", "--model", MODEL, "--wait")["report"]
    assert report["rows"] == 300
    assert report["worker"]["peakRssMiB"] < 1024


def test_unselected_model_is_refused(acli, ns, tmp_path):
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    result = acli("training", "datasets", "analyze", f"{ns}/d", "--model", "optimize/tiny-qwen2.5")
    assert result.code == 1 and "is not selected on this deployment" in result.err
    assert "akka training base-models select optimize/tiny-qwen2.5" in result.err


def test_failed_analysis_starts_again_on_the_next_request(server_factory, capsys, tmp_path):
    proc = server_factory("retry")
    cli = Cli(capsys, proc.url)
    cli.ok("registry", "datasets", "register", "r/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    selected = cli.json("training", "base-models", "select", MODEL, "--from", str(built_standin(MODEL)))
    cache = Path(selected["selection"]["path"])
    moved = tmp_path / "moved"
    shutil.move(cache, moved)
    failed = cli("training", "datasets", "analyze", "r/d", "--model", MODEL, "--wait", "-o", "json")
    assert failed.code == 1
    body = json.loads(failed.out)
    assert body["phase"] == "failed" and "not in this host's model cache" in body["reason"] and not body["refused"]
    shutil.move(moved, cache)
    again = cli.json("training", "datasets", "analyze", "r/d", "--model", MODEL, "--wait")
    assert again["analysisId"] == body["analysisId"] and again["attempt"] == 2 and again["phase"] == "done"


def run_file(tmp_path, dataset: str, **training) -> Path:
    import yaml

    plan = {"kind": "run", "project": "p", "baseModel": MODEL,
            "config": {"dataset": dataset, "maxSeqLength": 64, "hyperparams": {"training": training}}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_run_file_adds_estimates_with_their_sources(acli, ns, tmp_path):
    rows = [chat_row(f"q{i}", f"a{i}") for i in range(10)]
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", rows)))
    plan = run_file(tmp_path, f"{ns}/d", epochs=2, batchSize=4)
    analysis = acli.json("training", "datasets", "analyze", f"{ns}/d", "-f", str(plan), "--wait")
    estimates = analysis["estimates"]
    lengths, _final, _all = independent_figures(model_path(acli), rows)
    # packed (on the cpu by default): the updates are counted over the bins the rows fill
    filled = bins(lengths, 64)
    assert estimates["packing"] == {"rows": 10, "bins": filled, "binTokens": 64, "tokens": sum(lengths),
                                    "efficiency": round(sum(lengths) / (filled * 64), 4)}
    assert estimates["stepsPerEpoch"] == -(-filled // 4) and estimates["steps"] == 2 * estimates["stepsPerEpoch"]
    assert estimates["sequencesPerUpdate"] == 4
    assert estimates["tokens"] == 2 * sum(min(n, 64) for n in lengths)
    assert estimates["seconds"] is not None and "tokens/s per device measured by" in estimates["basis"]
    sources = {item["field"]: (item["value"], item["source"]) for item in estimates["inputs"]}
    assert sources["config.hyperparams.training.epochs"] == (2, "file")
    assert sources["config.hyperparams.training.batchSize"] == (4, "file")
    assert sources["config.hyperparams.training.gradientAccumulation"] == (1, "default")
    assert sources["execution.deviceProfile"] == ("cpu", "default")
    # Reading the analysis by id gives its measurements without estimates.
    by_id = httpx.get(f"{acli.url}/v1/training/datasets/analyses/{analysis['analysisId']}", headers=acli.headers).json()
    assert "estimates" not in by_id and by_id["report"] == analysis["report"]
    text = acli.ok("training", "datasets", "analyze", f"{ns}/d", "-f", str(plan)).out
    assert "config.hyperparams.training.epochs = 2 (from the file)" in text


def test_model_naming_another_base_model_than_the_run_file_is_refused(acli, ns, tmp_path):
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    plan = run_file(tmp_path, f"{ns}/d")
    result = acli("training", "datasets", "analyze", f"{ns}/d", "-f", str(plan), "--model", "optimize/tiny-llama-3.2")
    assert result.code == 1
    assert f"names another base model than the run file's baseModel {MODEL}" in result.err
    assert acli.json("training", "datasets", "analyses", f"{ns}/d")["analyses"] == []


def test_invalid_run_file_is_refused_by_path(acli, ns, tmp_path):
    acli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    plan = tmp_path / "run.yaml"
    plan.write_text(f"kind: run\nproject: p\nbaseModel: {MODEL}\nconfig:\n  dataset: {ns}/d\n  colour: red\n")
    result = acli("training", "datasets", "analyze", f"{ns}/d", "-f", str(plan))
    assert result.code == 1 and "config.colour: unknown field" in result.err


def test_an_analysis_is_followed_over_its_events_stream_until_it_is_done(acli, analysis_server, tmp_path):
    acli.ok("registry", "datasets", "register", "ev/d", "-f",
            str(write_jsonl(tmp_path / "d.jsonl", [chat_row(f"q{i}", f"a{i}") for i in range(12)])))
    started = acli.json("training", "datasets", "analyze", "ev/d", "--model", MODEL)
    statuses = []
    with httpx.stream("GET", f"{analysis_server.url}/v1/training/datasets/analyses/{started['analysisId']}/events",
                      timeout=120, headers=analysis_server.headers) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                statuses.append(json.loads(line[6:]))
    assert statuses[-1]["phase"] == "done" and statuses[-1]["settled"] and statuses[-1]["report"]
    order = ["pending", "running", "done"]  # each status after an event of the analysis, never backwards
    assert [order.index(s["phase"]) for s in statuses] == sorted(order.index(s["phase"]) for s in statuses)
    unknown = httpx.get(f"{analysis_server.url}/v1/training/datasets/analyses/ffffffff/events",
                        headers=analysis_server.headers, timeout=30)
    assert unknown.status_code == 404


def test_weights_decide_which_answers_train_a_weight_0_answer_trains_nothing(acli, ns, tmp_path):
    """An OpenAI-style weighted row: its first answer has weight 1, its final answer weight 0."""
    plain = {"messages": [{"role": "user", "content": "One?"}, {"role": "assistant", "content": "First answer."},
                          {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "Second answer."}]}
    weighted = {"messages": [*plain["messages"][:1], {**plain["messages"][1], "weight": 1}, plain["messages"][2],
                             {**plain["messages"][3], "weight": 0}]}
    path = write_jsonl(tmp_path / "weighted.jsonl", [weighted])
    acli.ok("registry", "datasets", "register", f"{ns}/w", "-f", str(path))
    report = acli.json("training", "datasets", "analyze", f"{ns}/w", "--model", MODEL, "--wait")["report"]
    _, trained_final, trained_all = independent_figures(model_path(acli), [plain])
    first_answer = trained_all - trained_final
    assert first_answer > 0
    assert report["trainedTokens"] == {"default": first_answer, "assistantTurnsAll": first_answer}


def test_the_same_examples_cut_at_another_shard_size_share_one_analysis(acli, ns, tmp_path):
    import hashlib

    path = write_jsonl(tmp_path / "d.jsonl", [chat_row(f"question {i} " + "x" * 100, f"answer {i}") for i in range(30)])
    whole = acli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path))
    cut = acli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "2KiB")
    assert cut["reference"] == f"{ns}/d:v2" and cut["shards"] > 1 and cut["digest"] != whole["digest"]  # premise
    first = acli.json("training", "datasets", "analyze", f"{ns}/d:v1", "--model", MODEL, "--wait")
    second = acli.json("training", "datasets", "analyze", f"{ns}/d:v2", "--model", MODEL)
    assert second["analysisId"] == first["analysisId"] and second["phase"] == "done"
    assert first["examplesDigest"] == f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"  # the rows' bytes
    listed = acli.json("training", "datasets", "analyses", f"{ns}/d:v2")["analyses"]
    assert [a["analysisId"] for a in listed] == [first["analysisId"]]


def test_a_byte_order_mark_another_client_sends_is_accepted_and_left_out_when_rows_are_read(acli, analysis_server, ns):
    import hashlib

    data = b"\xef\xbb\xbf" + b"".join(json.dumps(chat_row(q, "ok")).encode() + b"\n" for q in ("a", "b"))
    url = f"{analysis_server.url}/v1/registry/dataset-uploads"
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 2}
    session = httpx.post(url, json={"dataset": f"{ns}/bom", "format": "chat-jsonl-v1", "shards": [shard]},
                         headers=analysis_server.headers).json()
    sent = httpx.put(f"{url}/{session['uploadId']}/shards/0", content=data, headers=analysis_server.headers)
    assert sent.status_code == 201, sent.text
    committed = httpx.post(f"{url}/{session['uploadId']}/commit", json={}, headers=analysis_server.headers)
    assert committed.status_code in (200, 201) and committed.json()["examples"] == 2, committed.text
    analysis = acli.json("training", "datasets", "analyze", f"{ns}/bom", "--model", MODEL, "--wait")
    assert analysis["phase"] == "done" and analysis["report"]["rows"] == 2, analysis
