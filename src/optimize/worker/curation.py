"""The curation job: read the candidates of the curation's sessions (each session's blob, downloaded through the
job's lease), ask the judge about each — one greedy call a candidate, a chunk at a time — and save the verdicts in
chunks to the server as it goes. Candidates judged by an earlier attempt are not asked again.

The judge is asked as an evaluation's `model:` grader asks one (`optimize.curation.verdicts.asked`: the
curation's instructions, then the reply form), rendered through `optimize.chat` under the judge's template, and
answers through the generator an evaluation answers with (vLLM where it is installed and a GPU is visible, else
Transformers' `generate`); its reply is read by the judge grader's `judge_grade`. A candidate whose prompt leaves
the judge no room to reply within its context is rejected (`prompt_too_long`) unasked.

A judge an endpoint serves (`judge: endpoint:MODEL`) is not loaded: each chunk's conversations go to the server (the
lease's `judge` action), which asks the endpoint; a conversation the endpoint refused leaves its candidate unscored,
the refusal its detail.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from optimize.schemas.curations import CurationJobSpec
from optimize.worker.channel import Channel
from optimize.worker.frame import run_framed
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter

CHUNK = 16  # candidates judged and saved together


class SessionRefused(Exception):
    """A session's candidates cannot be read (another attempt would read the same bytes)."""


def run_curation(channel: Channel, curation_id: str) -> int:
    return run_framed(channel, CurationJobSpec, _curate, refusals=(SessionRefused,),
                      failed_prefix="the curation failed: ")


def _curate(channel: Channel, spec: dict[str, Any], reporter: Reporter) -> None:
    done = set(spec["judged"])
    pending = [c for c in _candidates(channel, spec) if c["position"] not in done]
    if not pending:
        return
    with tempfile.TemporaryDirectory(prefix=f"curation-{spec['curationId'][:12]}-") as workdir:
        judge = _EndpointJudge(channel, spec) if spec["judgeEndpoint"] else _Judge(channel, spec, Path(workdir))
        for start in range(0, len(pending), CHUNK):
            if reporter.lost.is_set():
                return
            channel.post_json(f"{channel.base}/verdicts", {"verdicts": judge(pending[start:start + CHUNK])})


def _candidates(channel: Channel, spec: dict[str, Any]):
    """Each candidate of the sessions in order, with its position across them (zero-based)."""
    position = 0
    for session in spec["sessions"]:
        digest = session["sessionHash"]
        with channel.fetch_blob(digest).open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    candidate = json.loads(raw)
                    candidate["messages"][-1]  # noqa: B018 - a candidate ends in the answer judged
                except (ValueError, KeyError, IndexError, TypeError):
                    raise SessionRefused(f"session {digest[:12]}… line {number} is not a candidate") from None
                yield {"position": position, "sessionHash": digest, "candidate": candidate}
                position += 1


class _Judge:
    """The judge model, asked a chunk of candidates at once (the generator batches them)."""

    def __init__(self, channel: Channel, spec: dict[str, Any], workdir: Path) -> None:
        from optimize.evaluation.generation import generator_for

        self.spec = spec
        self.renderer = renderer_for(spec["model"])
        adapter = (channel.fetch_artifact(spec["adapterManifest"], workdir / "adapter")
                   if spec["adapterManifest"] else None)
        self.generator = generator_for(spec["model"]["path"], adapter)

    def __call__(self, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from optimize.curation.verdicts import asked, judged, too_long
        from optimize.scoring.judge import JUDGE_MAX_NEW_TOKENS

        context = self.spec["maxModelLength"]
        prompts, verdicts = {}, {}
        for item in chunk:
            messages = asked(item["candidate"]["messages"], self.spec["instructions"])
            text = self.renderer.text(messages, None, generation_prompt=True)
            ids = self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes the BOS
            if context and len(ids) + JUDGE_MAX_NEW_TOKENS > context:
                verdicts[item["position"]] = (too_long(len(ids), context), "")
            else:
                prompts[item["position"]] = ids
        if prompts:
            positions = list(prompts)
            replies = self.generator.generate([prompts[p] for p in positions], JUDGE_MAX_NEW_TOKENS)
            for position, reply in zip(positions, replies, strict=True):
                verdicts[position] = (judged(self.spec["judgeReference"], reply.text, self.spec["threshold"]),
                                      reply.text)
        return [_saved(item, *verdicts[item["position"]]) for item in chunk]


class _EndpointJudge:
    """The judge an endpoint serves, asked through the server a chunk at a time."""

    def __init__(self, channel: Channel, spec: dict[str, Any]) -> None:
        self.channel, self.spec = channel, spec

    def __call__(self, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from optimize.curation.verdicts import asked, judged, refused

        conversations = [asked(item["candidate"]["messages"], self.spec["instructions"]) for item in chunk]
        replies = self.channel.post_json(f"{self.channel.base}/judge", {"conversations": conversations})["replies"]
        return [_saved(item, judged(self.spec["judgeReference"], reply["text"], self.spec["threshold"]),
                       reply["text"]) if "text" in reply else _saved(item, refused(reply.get("refused", "")), "")
                for item, reply in zip(chunk, replies, strict=True)]


def _saved(item: dict[str, Any], verdict, output: str) -> dict[str, Any]:
    """A verdict as the server saves it."""
    return {"position": item["position"], "sessionHash": item["sessionHash"],
            "candidate": str(item["candidate"].get("id") or ""), "kept": verdict.kept, "score": verdict.score,
            "reason": verdict.reason.value if verdict.reason else None, "detail": verdict.detail, "output": output}
