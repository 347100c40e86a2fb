"""The distillation job: read the source's rows (each checked by the registry's row rule, refused by its line),
find every decision, and have the teacher answer them — the smoke first (the decisions named, or the first 16),
then the rest — saving the verdicts in chunks to the server as it goes. Decisions saved by an earlier attempt are
not asked again, and a smoke that passed before is not run again.

With replicas, the worker holds one device per replica: it starts a replica process per further device at once
(`python -m optimize.worker distillation ID --replica N`, each seeing only its own device, loading its teacher while
the smoke runs on the first), and once the smoke has passed hands each replica its share of the decisions left;
every replica saves its own chunks under the job's lease. A replica that dies abandons the attempt (the worker
exits non-zero): the kernel treats it as a lost worker and the next attempt goes on from the chunks saved.

Prompts are rendered through `optimize.chat` under the teacher's template, with the row's tools, exactly as a
supervised run renders them (a Gemma 4 teacher thinking where `--thinking on` asks; its reasoning is stripped
before the answer is judged). The teacher answers through the serving engine an endpoint answers with (vLLM where
it is installed and a GPU is visible, else Transformers' continuous batching): each decision is sampled with its
own generator, seeded from the distillation's seed and the decision's address, so an answer depends neither on the
chunk, the replica nor the attempt that asked it — the same distillation twice registers the same rows. A decision
whose prompt leaves no room for an answer within max-model-length is rejected (`prompt_too_long`) unasked.

The distillation's instructions, where it has them, are the teacher's system prompt: each prompt is rendered with
them in place of the row's own system message, while the row an accepted answer makes keeps the row's history. An
acceptance grader scores each answer the checks accepted, a chunk at a time, against the decision's own assistant
message, by the grader an evaluation grades with (`optimize.scoring.graders.batch_grader`: a `bundle:` grader's
archive downloaded through the job's lease and run in the sandboxed runner); one scored below min-score, or left
unscored, is rejected (`below_min_score`).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from optimize.schemas.distillations import DistillationJobSpec
from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import ApiError, Channel
from optimize.worker.frame import Ended, run_framed
from optimize.worker.rendering import renderer_for
from optimize.worker.replicas import Replicas, end_with_parent, received, share_cores
from optimize.worker.reporter import Reporter

CHUNK = 32  # decisions answered and saved together
TEACHER = "teacher"  # the adapter's name in the engine


def run_distillation(channel: Channel, distillation_id: str) -> int:
    return run_framed(channel, DistillationJobSpec, _distill, refusals=(RowRefused,),
                      failed_prefix="the distillation failed: ")


def _distill(channel: Channel, spec: dict[str, Any], reporter: Reporter) -> None:
    from optimize.distillation.decisions import SMOKE_DECISIONS

    # the replicas load their teachers while the smoke runs here
    replicas = Replicas(channel, spec["replicas"], _devices(spec["replicas"]))
    try:
        found, by_address = _decisions(channel, spec)
        smoke = spec["smoke"] or [d.address for d in found[:SMOKE_DECISIONS]]
        missing = [address for address in smoke if address not in by_address]
        if missing:
            raise RowRefused(f"--smoke names {', '.join(missing)}, which {spec['source']['reference']} has no "
                             "assistant message at (ROW:MESSAGE, both zero-based)")
        done = set(spec["answered"])
        with tempfile.TemporaryDirectory(prefix=f"distillation-{spec['distillationId'][:12]}-") as workdir:
            ask = _Asker(channel, spec, Path(workdir))
            try:
                if not spec["smokePassed"]:
                    _answer(channel, ask, [by_address[a] for a in smoke if a not in done], len(found), reporter.lost)
                    if not channel.post_json(f"{channel.base}/smoke", {"decisions": smoke}).get("passed"):
                        raise Ended("the smoke failed; the distillation has ended")
                    done |= set(smoke)
                pending = [d for d in found if d.address not in done]
                shares = [pending[index::spec["replicas"]] for index in range(spec["replicas"])]
                replicas.hand_out([[d.address for d in share] for share in shares[1:]])
                _answer(channel, ask, shares[0], len(found), reporter.lost)
                print(f"replica 0 answered {len(shares[0])} decisions", flush=True)
            finally:
                ask.close()
        replicas.wait(reporter.lost)
    finally:
        replicas.stop()


def run_replica(channel: Channel, distillation_id: str, index: int) -> int:
    """A replica: its teacher loaded, it answers the share the worker hands it on its stdin (none when the smoke
    failed or the worker gave up), then exits; it ends with the worker that started it."""
    end_with_parent()
    try:
        spec = channel.spec(DistillationJobSpec)
    except ApiError as error:
        print(f"replica {index} cannot start: {error.message}", flush=True)
        return 3
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        share_cores(spec["replicas"])
    found, by_address = _decisions(channel, spec)
    with tempfile.TemporaryDirectory(prefix=f"distillation-{distillation_id[:12]}-{index}-") as workdir:
        ask = _Asker(channel, spec, Path(workdir))
        try:
            share = received()
            if share is None:
                return 0
            _answer(channel, ask, [by_address[address] for address in share], len(found), threading.Event())
            print(f"replica {index} answered {len(share)} decisions", flush=True)
        finally:
            ask.close()
    return 0


def _decisions(channel: Channel, spec: dict[str, Any]):
    from optimize.distillation.decisions import decisions

    found = [d for line, row in _rows(channel, spec) for d in decisions(row, line)]
    return found, {d.address: d for d in found}


def _rows(channel: Channel, spec: dict[str, Any]):
    """(zero-based row, row) of the source, each checked by the registry's row rule."""
    import orjson

    from optimize.chat.rows import RowError, RowKind, check_row

    reference = spec["source"]["reference"]
    for line, raw in channel.example_lines(spec["source"]["objects"]):
        try:
            row = orjson.loads(raw)
            check_row(row, RowKind.CHAT)
        except (RowError, orjson.JSONDecodeError) as error:
            raise RowRefused(f"{reference} line {line}: {error}") from None
        yield line - 1, row


def _answer(channel: Channel, ask, pending: list, decisions: int, lost: threading.Event) -> None:
    for start in range(0, len(pending), CHUNK):
        if lost.is_set():
            return
        channel.post_json(f"{channel.base}/answers", {
            "decisions": decisions, "answers": ask(pending[start:start + CHUNK]),
            "chatTemplateSha256": ask.renderer.chat_template_sha256})


def _devices(count: int) -> Callable[[int], dict[str, str]]:
    """This worker takes the first device; replica n sees only the n-th (on a cpu slot, each torch takes its part
    of the cores)."""
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]  # before anything here touches CUDA
    else:
        share_cores(count)  # a no-op for one replica
    return lambda index: {"CUDA_VISIBLE_DEVICES": gpus[index]} if gpus else {}


class _Asker:
    """Asks the teacher a chunk of decisions at once (the engine batches them) and judges each answer."""

    def __init__(self, channel: Channel, spec: dict[str, Any], workdir: Path) -> None:
        from optimize.chat.families import reasoning_markers
        from optimize.scoring.graders import batch_grader

        self.spec, self.settings = spec, spec["settings"]
        thinking = self.settings["thinking"]
        self.renderer = renderer_for(spec["model"], thinking=thinking)
        self.held = ExitStack()  # what the acceptance grader holds (a bundle's process, an HTTP client)
        grader = self.settings.get("acceptGrader")
        # a judge model is refused at creation, so every grader here is one batch_grader builds
        self.grade = batch_grader(grader, channel.fetch_blob, self.held) if grader else None
        self.engine = _engine(channel, spec, workdir / "adapter")
        self.adapter = TEACHER if spec["adapterManifest"] else None
        self.held_to = {}  # every answer under the response schema's grammar, where one is asked for
        if self.settings.get("responseSchema") is not None:
            from optimize.chat.grammars import json_constraint

            if not getattr(self.engine, "constrains", False):
                raise RuntimeError("the distillation asks for a response schema, and this worker's engine (vLLM) "
                                   "has no constrained decoding here; distil without --response-schema")
            self.held_to = {"constraint": json_constraint(self.settings["responseSchema"], "responseSchema")}
        markers = reasoning_markers(spec["model"]["family"]) if thinking else None
        self.reasoning = tuple(self.renderer.tokenizer.convert_tokens_to_ids(m) for m in markers) if markers else None

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            self.held.close()

    def __call__(self, chunk: list) -> list[dict[str, Any]]:
        from optimize.distillation.decisions import Verdict

        asked, verdicts, prompts = [], {}, {}
        for decision in chunk:
            try:
                text = self._text(decision)
                prompt = self._prompt(decision, text)
            except ValueError as error:  # the template refuses the history (RenderError is a ValueError)
                verdicts[decision.address] = (Verdict(False, "template_refused", str(error)), "")
                continue
            room = self.settings["maxModelLength"] - len(prompt)
            if room < 1:
                verdicts[decision.address] = (Verdict(False, "prompt_too_long", f"the prompt is {len(prompt)} "
                                                      f"tokens; max-model-length is {self.settings['maxModelLength']}"),
                                              "")
                continue
            prompts[decision.address] = text
            seed = (self.settings["seed"] * 1_000_003 + decision.line * 1009 + decision.message) % 2**63
            temperature = self.settings["temperature"]
            asked.append((decision, self.engine.stream(
                self.adapter, prompt, min(self.settings["maxTokens"], room), temperature,
                self.settings["topP"], seed if temperature > 0 else None, **self.held_to)))
        for decision, steps in asked:
            tokens = [step.token for step in steps]
            verdicts[decision.address] = self._judge(decision, tokens)
        if self.grade is not None:
            self._graded([d for d, _ in asked], verdicts, prompts)
        return [{"decision": d.address, "accepted": v.accepted, "reason": v.reason, "detail": v.detail,
                 "output": output, "row": v.row} for d in chunk for v, output in [verdicts[d.address]]]

    def _text(self, decision) -> str:
        """The prompt as text: the decision's history (under the instructions, where given) and the row's tools."""
        from optimize.distillation.decisions import asked

        history = asked(decision.history, self.settings.get("instructions"))
        return self.renderer.text(history, decision.tools, generation_prompt=True)

    def _prompt(self, decision, text: str | None = None) -> list[int]:
        """The prompt's token ids (of `text`, where it was rendered already)."""
        text = self._text(decision) if text is None else text
        return self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes the BOS

    def _graded(self, decisions: list, verdicts: dict[str, tuple], prompts: dict[str, str]) -> None:
        """The answers the checks accepted, scored in one batch by the acceptance grader against each decision's
        own assistant message: those below min-score (or unscored) rejected in place. The grader reads the answer's
        text (a call it makes is not graded) and the prompt as the teacher was asked."""
        from optimize.distillation.decisions import asked, graded
        from optimize.scoring.samples import message_text

        accepted = [d for d in decisions if verdicts[d.address][0].accepted]
        if not accepted:
            return
        instructions = self.settings.get("instructions")
        items = [{"prompt": prompts[d.address], "expected": (d.expected or {}).get("content") or "",
                  "messages": asked(d.history, instructions),
                  "expectedText": message_text((d.expected or {}).get("content")), "fields": d.fields or {}}
                 for d in accepted]
        answers = [verdicts[d.address][0].row["messages"][-1]["content"] for d in accepted]
        for decision, grade in zip(accepted, self.grade(items, answers), strict=True):
            verdict, output = verdicts[decision.address]
            verdicts[decision.address] = (graded(verdict, grade.score, grade.explanation, self.settings["minScore"]),
                                          output)

    def _judge(self, decision, tokens: list[int]):
        from optimize.distillation.decisions import judge, without_reasoning

        stopped = bool(tokens) and tokens[-1] in self.engine.stop_ids
        kept = [t for t in tokens if t not in self.engine.stop_ids]
        answer = without_reasoning(kept, *self.reasoning) if self.reasoning else kept
        # special tokens stay where the row offers tools: a call's markers are special tokens in some families
        decode = self.renderer.tokenizer.decode
        text = decode(answer, skip_special_tokens=not decision.tools)
        verdict = judge(decision, text, stopped, self.spec["toolCallParser"], self._renders)
        # the output kept to read is all the teacher wrote, its reasoning included
        return verdict, (decode(kept, skip_special_tokens=False) if self.reasoning else text)

    def _renders(self, row: dict[str, Any]) -> None:
        """Raises where the teacher's template refuses the row (RenderError is a ValueError)."""
        self.renderer.text(row["messages"], row.get("tools"), generation_prompt=False)


def _engine(channel: Channel, spec: dict[str, Any], adapter_dir: Path):
    """The endpoint's engine: vLLM where it is installed and a GPU is visible, else Transformers' batcher."""
    from optimize.serving.engine import engine_for

    engine = engine_for(spec["model"]["path"])
    if spec["adapterManifest"]:
        engine.load_adapter(TEACHER, channel.fetch_artifact(spec["adapterManifest"], adapter_dir))
    return engine
