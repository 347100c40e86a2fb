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

from optimize.schemas.jobs import EvaluationSpec
from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import ApiError, Channel
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter

BATCH_ROWS = 32  # rows asked, graded and sent together


def run_evaluation(channel: Channel, evaluation_id: str) -> int:
    base = channel.base
    try:
        spec = channel.spec(EvaluationSpec)
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
    renderer = renderer_for(spec["model"])
    prompts = list(_prompts(channel, spec, renderer))  # every row is checked before the model is loaded
    generator = _generator(channel, spec, workdir / "adapter")
    grade = _grader(channel, spec, workdir)
    answered = set(spec["answeredLines"])
    pending = [p for p in prompts if p["line"] not in answered]
    for start in range(0, len(pending), BATCH_ROWS):
        if reporter.lost.is_set():
            return
        batch = pending[start:start + BATCH_ROWS]
        answers = [a.text for a in generator.generate([p["ids"] for p in batch], spec.get("maxNewTokens") or 256)]
        items = []
        for item, answer, grade_of in zip(batch, answers, grade(batch, answers), strict=True):
            items.append({"line": item["line"], "prompt": item["prompt"], "expected": item["expected"],
                          "answer": answer, "score": grade_of.score, "explanation": grade_of.explanation,
                          "fields": grade_of.fields, "chatTemplateSha256": renderer.chat_template_sha256,
                          "baseModelRevision": spec["model"]["commit"]})
        channel.post_json(f"{base}/predictions", {"items": items})


def _generator(channel: Channel, spec: dict[str, Any], adapter_dir: Path):
    """The model answering (a base model, or an adapter over it), on this job's device."""
    from optimize.evaluation.generation import generator_for

    adapter = channel.fetch_artifact(spec["adapterManifest"], adapter_dir) if spec["adapterManifest"] else None
    return generator_for(spec["model"]["path"], adapter)


def _grader(channel: Channel, spec: dict[str, Any], workdir: Path):
    """A function grading a batch of rows' answers, by the evaluation's grader."""
    import httpx

    from optimize.evaluation.graders import DEFAULT_GRADER, http_grade, json_label_match, judge_grade, judge_messages

    grader = spec["grader"]
    if grader == DEFAULT_GRADER:
        return lambda batch, answers: [json_label_match(a, item["expected"])
                                       for item, a in zip(batch, answers, strict=True)]
    if grader.startswith("http:"):
        http = httpx.Client(timeout=30.0)
        url = grader.removeprefix("http:")
        return lambda batch, answers: [http_grade(url, item["prompt"], a, item["expected"], http)
                                       for item, a in zip(batch, answers, strict=True)]
    judge = spec["judge"]  # model:REF, served here beside the model evaluated
    judge_renderer = renderer_for(judge["model"])
    judge_model = _generator(channel, judge, workdir / "judge")

    def ask_judge(batch, answers):
        prompts = [judge_renderer.tokenizer(judge_renderer.text(
            judge_messages(item["question"], answer, judge["instructions"], item["system"]), None,
            generation_prompt=True),
            add_special_tokens=False)["input_ids"] for item, answer in zip(batch, answers, strict=True)]
        return [judge_grade(judge["reference"], reply.text) for reply in judge_model.generate(prompts, 64)]

    return ask_judge


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
        question = "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in messages[:-1] if m["role"] != "system")
        system = messages[0].get("content") if messages[0]["role"] == "system" else None
        yield {"line": line, "prompt": text, "ids": ids, "expected": answer.get("content") or "", "question": question,
               "system": system if isinstance(system, str) else None}
