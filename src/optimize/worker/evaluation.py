"""The evaluation job: read the dataset's rows, ask the model each row's prompt (with the row's tools, rendered
through `optimize.chat` as a supervised run trains it), grade each answer and send it to the server as it goes;
the server builds the report from the answers it holds.

A row whose expected answer calls tools is refused by its line: an evaluation compares text. Rows answered by an
earlier attempt from the same base model commit are not asked again. A sampling evaluation (`sampling`) asks the
first `rows` rows for several answers each at a temperature, grades every one and sends the group with the row
(its first answer shown as the row's, its score the group's mean): what a reinforcement run's rollouts would see.
A `bundle:` grader's archive is downloaded through the job's lease and its function runs in a separate limited
process (`optimize.scoring.BundleRunner`), a batch at a time; what the function raises or a limit it hits leaves
that example unscored, never the evaluation failed.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from optimize.schemas.jobs import EvaluationSpec
from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import Channel
from optimize.worker.frame import run_framed
from optimize.worker.images import ImageFiles
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter

BATCH_ROWS = 32  # rows asked, graded and sent together


def run_evaluation(channel: Channel, evaluation_id: str) -> int:
    return run_framed(channel, EvaluationSpec, _evaluate, refusals=(RowRefused,),
                      failed_prefix="the evaluation failed: ")


def _evaluate(channel: Channel, spec: dict[str, Any], reporter: Reporter) -> None:
    with tempfile.TemporaryDirectory(prefix=f"evaluation-{spec['evaluationId'][:12]}-") as workdir:
        _evaluate_in(channel, spec, channel.base, Path(workdir), reporter)


def _evaluate_in(channel: Channel, spec: dict[str, Any], base: str, workdir: Path, reporter: Reporter) -> None:
    renderer = renderer_for(spec["model"])
    prompts = list(_prompts(channel, spec, renderer))  # every row is checked before the model is loaded
    if spec.get("rows"):
        prompts = prompts[:spec["rows"]]
    generator = _generator(channel, spec, workdir / "adapter")
    answered = set(spec["answeredLines"])
    pending = [p for p in prompts if p["line"] not in answered]
    with ExitStack() as held:  # what the grader holds (a bundle's process, an HTTP client) ends with the job
        grade = _grader(channel, spec, workdir, held)
        held_to = _held_to(spec)
        for start in range(0, len(pending), BATCH_ROWS):
            if reporter.lost.is_set():
                return
            batch = pending[start:start + BATCH_ROWS]
            items = []
            for item, group in zip(batch, _answer(generator, spec, batch, grade, held_to), strict=True):
                first_answer, first_grade = group[0]
                scores = [g.score for _, g in group if g.score is not None]
                items.append({"line": item["line"], "prompt": item["prompt"], "expected": item["expected"],
                              "answer": first_answer,
                              "score": first_grade.score if len(group) == 1 else
                              (sum(scores) / len(scores) if scores else None),
                              "explanation": first_grade.explanation, "fields": first_grade.fields,
                              "samples": None if len(group) == 1 else
                              [{"answer": a, "score": g.score, "explanation": g.explanation, "fields": g.fields}
                               for a, g in group],
                              "chatTemplateSha256": renderer.chat_template_sha256,
                              "baseModelRevision": spec["model"]["commit"]})
            channel.post_json(f"{base}/predictions", {"items": items})


def _held_to(spec: dict[str, Any]) -> dict[str, Any]:
    """The generator's argument holding every answer to the response schema's grammar, compiled once for the job
    (none without a schema)."""
    if spec.get("responseSchema") is None:
        return {}
    from optimize.chat.grammars import json_constraint

    return {"constraint": json_constraint(spec["responseSchema"], "responseSchema")}


def _answer(generator, spec: dict[str, Any], batch: list[dict[str, Any]], grade, held_to: dict[str, Any]
            ) -> list[list]:
    """Each row's answers with their grades: one greedy answer, or the sampling's group of answers (every answer of
    the batch graded in one call; the batch seeded by its first line, so a retry samples the rows it asks again
    as the first attempt would have)."""
    budget = spec.get("maxNewTokens") or 256
    sampling = spec.get("sampling")
    ids = [p["ids"] for p in batch]
    extra = {"images": [p["images"] for p in batch]} if any(p["images"] for p in batch) else {}
    extra.update(held_to)
    if not sampling:
        answers = [a.text for a in generator.generate(ids, budget, **extra)]
        return [[pair] for pair in zip(answers, grade(batch, answers), strict=True)]
    groups = generator.sample(ids, budget, sampling["generations"], sampling["temperature"],
                              sampling["seed"] + batch[0]["line"], **extra)
    flat_rows = [item for item, group in zip(batch, groups, strict=True) for _ in group]
    flat_answers = [a.text for group in groups for a in group]
    grades = iter(grade(flat_rows, flat_answers))
    return [[(a.text, next(grades)) for a in group] for group in groups]


def _generator(channel: Channel, spec: dict[str, Any], adapter_dir: Path):
    """The model answering (a base model, or an adapter over it), on this job's device."""
    from optimize.evaluation.generation import generator_for

    adapter = channel.fetch_artifact(spec["adapterManifest"], adapter_dir) if spec["adapterManifest"] else None
    # Transformers generate reads a prompt's pixels and holds answers to a grammar; vLLM here does neither
    if (spec.get("dataset") or {}).get("images") or spec.get("responseSchema") is not None:
        from optimize.chat.generation import TransformersGenerator

        return TransformersGenerator(spec["model"]["path"], adapter)
    return generator_for(spec["model"]["path"], adapter)


def _grader(channel: Channel, spec: dict[str, Any], workdir: Path, held: ExitStack):
    """A function grading a batch of rows' answers, by the evaluation's grader; what it holds is closed by `held`.
    Every grader but a judge is the one a distillation's acceptance grader is too (`scoring.graders.batch_grader`);
    a `model:` judge is served here beside the model evaluated."""
    from optimize.scoring.graders import batch_grader, judge_grade, judge_messages

    grade = batch_grader(spec["grader"], channel.fetch_blob, held)
    if grade is not None:
        return grade
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
    """Each row's prompt (every message before its answer, with its tools) as text and token ids, and what a
    scoring bundle sees of the row (as a reinforcement run's reward does): the prompt's messages, the answer's text
    and the row's other fields."""
    import orjson

    from optimize.chat.normalize import normalize_messages, row_tools
    from optimize.chat.render import RenderError
    from optimize.chat.rows import RowError, RowKind, check_row
    from optimize.scoring.samples import message_text

    reference = spec["dataset"]["reference"]
    images = ImageFiles(channel, spec["dataset"].get("images") or [])
    for line, raw in channel.example_lines(spec["dataset"]["objects"]):
        try:
            row = orjson.loads(raw)
            check_row(row, RowKind.CHAT)
        except (RowError, orjson.JSONDecodeError) as error:
            raise RowRefused(f"{reference} line {line}: {error}") from None
        messages = normalize_messages(images.resolved(row, f"{reference} line {line}")["messages"])
        answer = messages[-1]
        if answer.get("tool_calls"):
            raise RowRefused(f"{reference} line {line}: the expected answer calls tools, and an evaluation compares "
                             "text; leave such rows out of the evaluation dataset")
        try:
            text = renderer.text(messages[:-1], row_tools(row), generation_prompt=True)
            expansion, files = renderer.expanded(text, messages[:-1])  # its images' tokens, as the processor's
        except RenderError as error:
            raise RowRefused(f"{reference} line {line}: {error}") from None
        # the template writes the BOS once
        ids = renderer.tokenizer(expansion.text if expansion else text, add_special_tokens=False)["input_ids"]
        question = "\n".join(f"{m['role']}: {message_text(m.get('content')) or ''}" for m in messages[:-1]
                             if m["role"] != "system")
        system = messages[0].get("content") if messages[0]["role"] == "system" else None
        yield {"line": line, "prompt": text, "ids": ids, "images": files, "expected": answer.get("content") or "",
               "question": question,
               "system": system if isinstance(system, str) else None, "messages": messages[:-1],
               "expectedText": message_text(answer.get("content")),
               "fields": {key: value for key, value in row.items() if key not in ("messages", "tools")}}
