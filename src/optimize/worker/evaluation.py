"""The evaluation job: read the dataset's rows, ask the model each row's prompt (with the row's tools, rendered
through `optimize.chat` as a supervised run trains it), grade each answer and send it to the server as it goes;
the server builds the report from the answers it holds.

A row whose expected answer calls tools is refused by its line: an evaluation compares text. Rows answered by an
earlier attempt from the same base model commit are not asked again.
"""

from __future__ import annotations

import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

from optimize.training.data_fit import RowRefused
from optimize.worker.channel import ApiError, Channel
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter

BATCH_ROWS = 32  # rows asked, graded and sent together


def run_evaluation(channel: Channel, evaluation_id: str) -> int:
    base = f"/v1/internal/evaluations/{evaluation_id}"
    try:
        spec = channel.get(base)
    except ApiError as error:
        print(f"cannot start: {error.message}", flush=True)
        return 3
    reporter = Reporter(channel, base, spec["leaseSeconds"]).start()
    workdir = Path(tempfile.mkdtemp(prefix=f"evaluation-{evaluation_id[:12]}-"))
    try:
        _evaluate(channel, spec, base, workdir, reporter)
        result: dict[str, Any] = {}
    except RowRefused as refusal:
        result = {"failed": str(refusal)}
    except Exception as error:  # noqa: BLE001 - the process edge: the reason goes on the evaluation
        traceback.print_exc()
        result = {"failed": f"the evaluation failed: {type(error).__name__}: {error}"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return reporter.end(f"{base}/result", result)


def _evaluate(channel: Channel, spec: dict[str, Any], base: str, workdir: Path, reporter: Reporter) -> None:
    import httpx

    from optimize.evaluation.generation import TransformersGenerator
    from optimize.evaluation.graders import DEFAULT_GRADER, http_grade, json_label_match

    renderer = renderer_for(spec["model"])
    prompts = list(_prompts(channel, spec, renderer))  # every row is checked before the model is loaded
    adapter = channel.fetch_artifact(spec["adapterManifest"], workdir / "adapter") if spec["adapterManifest"] \
        else None
    generator = TransformersGenerator(spec["model"]["path"], adapter)
    grader = spec["grader"]
    http = httpx.Client(timeout=30.0) if grader.startswith("http:") else None
    answered = set(spec["answeredLines"])
    pending = [p for p in prompts if p["line"] not in answered]
    for start in range(0, len(pending), BATCH_ROWS):
        if reporter.lost.is_set():
            return
        batch = pending[start:start + BATCH_ROWS]
        answers = generator.generate([p["ids"] for p in batch], spec.get("maxNewTokens") or 256)
        items = []
        for item, answer in zip(batch, answers):
            grade = json_label_match(answer.text, item["expected"]) if grader == DEFAULT_GRADER else \
                http_grade(grader.removeprefix("http:"), item["prompt"], answer.text, item["expected"], http)
            items.append({"line": item["line"], "prompt": item["prompt"], "expected": item["expected"],
                          "answer": answer.text, "score": grade.score, "explanation": grade.explanation,
                          "fields": grade.fields, "chatTemplateSha256": renderer.chat_template_sha256,
                          "baseModelRevision": spec["model"]["commit"]})
        channel.post_json(f"{base}/predictions", {"items": items})


def _prompts(channel: Channel, spec: dict[str, Any], renderer):
    """Each row's prompt (every message before its answer, with its tools) as text and token ids."""
    import orjson

    from optimize.chat.normalize import normalize_messages, row_tools
    from optimize.chat.rows import RowError, RowKind, check_row

    reference = spec["dataset"]["reference"]
    for line, raw in channel.example_lines(spec["dataset"]["objects"]):
        try:
            row = orjson.loads(raw)
            check_row(row, RowKind.CHAT)
        except (RowError, orjson.JSONDecodeError) as error:
            raise RowRefused(f"{reference} line {line}: {error}") from None
        messages = normalize_messages(row["messages"])
        answer = messages[-1]
        if answer.get("tool_calls"):
            raise RowRefused(f"{reference} line {line}: the expected answer calls tools, and an evaluation compares "
                             "text; leave such rows out of the evaluation dataset")
        text = renderer.text(messages[:-1], row_tools(row), generation_prompt=True)
        ids = renderer.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes the BOS once
        yield {"line": line, "prompt": text, "ids": ids, "expected": answer.get("content") or ""}
