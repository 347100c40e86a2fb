"""The distillation job: read the source's rows (each checked by the registry's row rule, refused by its line),
find every decision, and have the teacher answer them — the smoke first (the decisions named, or the first 16),
then the rest — saving the verdicts in chunks to the server as it goes. Decisions saved by an earlier attempt are
not asked again, and a smoke that passed before is not run again.

Prompts are rendered through `optimize.chat` under the teacher's template, with the row's tools, exactly as a
supervised run renders them. The teacher answers through the serving engine an endpoint answers with (vLLM where it
is installed and a GPU is visible, else Transformers' continuous batching): each decision is sampled with its own
generator, seeded from the distillation's seed and the decision's address, so an answer does not depend on which
chunk or attempt asked it — the same distillation twice registers the same rows. A decision whose prompt leaves no
room for an answer within max-model-length is rejected (`prompt_too_long`) without being asked.
"""

from __future__ import annotations

import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

from optimize.schemas.jobs import DistillationSpec
from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import ApiError, Channel
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter

CHUNK = 32  # decisions answered and saved together
TEACHER = "teacher"  # the adapter's name in the engine


class SmokeFailed(Exception):
    """The server judged the smoke failed and ended the distillation."""


def run_distillation(channel: Channel, distillation_id: str) -> int:
    base = channel.base
    try:
        spec = channel.spec(DistillationSpec)
    except ApiError as error:
        print(f"cannot start: {error.message}", flush=True)
        return 3
    reporter = Reporter(channel, base, spec["leaseSeconds"]).start()
    workdir = Path(tempfile.mkdtemp(prefix=f"distillation-{distillation_id[:12]}-"))
    try:
        _distill(channel, spec, base, workdir, reporter)
        result: dict[str, Any] = {}
    except SmokeFailed:
        reporter.stop()
        print("the smoke failed; the distillation has ended", flush=True)
        return 0
    except RowRefused as refusal:
        result = {"failed": str(refusal)}
    except Exception as error:  # noqa: BLE001 - the process edge: the reason goes on the distillation
        traceback.print_exc()
        result = {"failed": f"the distillation failed: {type(error).__name__}: {error}"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return reporter.end(f"{base}/result", result)


def _distill(channel: Channel, spec: dict[str, Any], base: str, workdir: Path, reporter: Reporter) -> None:
    from optimize.distillation.decisions import SMOKE_DECISIONS, decisions

    renderer = renderer_for(spec["model"])
    found = [d for line, row in _rows(channel, spec) for d in decisions(row, line)]
    by_address = {d.address: d for d in found}
    smoke = spec["smoke"] or [d.address for d in found[:SMOKE_DECISIONS]]
    missing = [address for address in smoke if address not in by_address]
    if missing:
        raise RowRefused(f"--smoke names {', '.join(missing)}, which {spec['source']['reference']} has no assistant "
                         "message at (ROW:MESSAGE, both zero-based)")
    done = set(spec["answered"])
    engine = _engine(channel, spec, workdir / "adapter")
    try:
        ask = _Asker(engine, renderer, spec)
        if not spec["smokePassed"]:
            _answer(channel, base, ask, [by_address[a] for a in smoke if a not in done], len(found), reporter)
            verdict = channel.post_json(f"{base}/smoke", {"decisions": smoke})
            if not verdict.get("passed"):
                raise SmokeFailed
            done |= set(smoke)
        _answer(channel, base, ask, [d for d in found if d.address not in done], len(found), reporter)
    finally:
        engine.close()


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


def _answer(channel: Channel, base: str, ask, pending: list, decisions: int, reporter: Reporter) -> None:
    for start in range(0, len(pending), CHUNK):
        if reporter.lost.is_set():
            return
        chunk = pending[start:start + CHUNK]
        channel.post_json(f"{base}/answers", {"decisions": decisions, "answers": ask(chunk),
                                              "chatTemplateSha256": ask.renderer.chat_template_sha256})


def _engine(channel: Channel, spec: dict[str, Any], adapter_dir: Path):
    """The endpoint's engine: vLLM where it is installed and a GPU is visible, else Transformers' batcher."""
    from optimize.serving.engine import engine_for

    engine = engine_for(spec["model"]["path"])
    if spec["adapterManifest"]:
        engine.load_adapter(TEACHER, channel.fetch_artifact(spec["adapterManifest"], adapter_dir))
    return engine


class _Asker:
    """Asks the teacher a chunk of decisions at once (the engine batches them) and judges each answer."""

    def __init__(self, engine, renderer, spec: dict[str, Any]) -> None:
        self.engine, self.renderer, self.spec = engine, renderer, spec
        self.settings = spec["settings"]
        self.adapter = TEACHER if spec["adapterManifest"] else None

    def __call__(self, chunk: list) -> list[dict[str, Any]]:
        from optimize.distillation.decisions import Verdict

        asked, verdicts = [], {}
        for decision in chunk:
            try:
                prompt = self._prompt(decision)
            except ValueError as error:  # the template refuses the history (RenderError is a ValueError)
                verdicts[decision.address] = (Verdict(False, "template_refused", str(error)), "")
                continue
            room = self.settings["maxModelLength"] - len(prompt)
            if room < 1:
                verdicts[decision.address] = (Verdict(False, "prompt_too_long", f"the prompt is {len(prompt)} "
                                                      f"tokens; max-model-length is {self.settings['maxModelLength']}"),
                                              "")
                continue
            seed = (self.settings["seed"] * 1_000_003 + decision.line * 1009 + decision.message) % 2**63
            temperature = self.settings["temperature"]
            asked.append((decision, self.engine.stream(
                self.adapter, prompt, min(self.settings["maxTokens"], room), temperature,
                self.settings["topP"], seed if temperature > 0 else None)))
        for decision, steps in asked:
            tokens = [step.token for step in steps]
            verdicts[decision.address] = self._judge(decision, tokens)
        return [{"decision": d.address, "accepted": v.accepted, "reason": v.reason, "detail": v.detail,
                 "output": output, "row": v.row} for d in chunk for v, output in [verdicts[d.address]]]

    def _prompt(self, decision) -> list[int]:
        text = self.renderer.text(decision.history, decision.tools, generation_prompt=True)
        return self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes the BOS

    def _judge(self, decision, tokens: list[int]):
        from optimize.distillation.decisions import judge

        stopped = bool(tokens) and tokens[-1] in self.engine.stop_ids
        kept = [t for t in tokens if t not in self.engine.stop_ids]
        # special tokens stay where the row offers tools: a call's markers are special tokens in some families
        output = self.renderer.tokenizer.decode(kept, skip_special_tokens=not decision.tools)
        verdict = judge(decision, output, stopped, self.spec["toolCallParser"], self._renders)
        return verdict, output

    def _renders(self, row: dict[str, Any]) -> None:
        """Raises where the teacher's template refuses the row (RenderError is a ValueError)."""
        self.renderer.text(row["messages"], row.get("tools"), generation_prompt=False)
