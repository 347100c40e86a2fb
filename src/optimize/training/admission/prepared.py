"""A supervised run over prepared token rows (chat/prepared), refused at submission — before a device — when the rows
cannot be what the run would train: made with another tokenizer or at another commit, rendered under another chat
template than the one the run renders under (for Gemma 4, Optimize's corrected one), trimmed by turns they do not
have (`data.truncation: oldest`, `oldest_or_drop`), answered by a smoke check (which renders chat rows), or, under
`data.truncation: error`, holding a row longer than maxSeqLength (the version records its longest). Each refusal
names the dataset and what differs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from optimize.core.errors import Refused
from optimize.workloads.datasets import DatasetPick

RENDER_AGAIN = ("render the rows again under the run's tokenizer and chat template, describe them with akka registry "
                "datasets describe-prepared --chat-template, and register the new version")


def check_prepared(entry: Any, commit: str, model_path: str, config: Any,
                   prepared: list[tuple[str, DatasetPick]]) -> None:
    """`prepared`: (field, dataset) of each prepared dataset the run reads."""
    if not prepared:
        return
    field, first = prepared[0]
    if config.data.truncation in ("oldest", "oldest_or_drop"):
        raise Refused(f"data.truncation: {config.data.truncation} removes whole turns, and {field} {first.reference} "
                      "holds prepared token rows, which have none", hint="set data.truncation to error, drop or right")
    if config.smoke is not None:
        raise Refused(f"a smoke check renders and answers chat rows, and {field} {first.reference} holds prepared "
                      "token rows", hint="remove config.smoke")
    template = run_template_sha256(model_path, entry.family, entry.chat_template == "corrected")
    for field, pick in prepared:
        tokenizer = pick.prepared.get("tokenizer") or {}
        if tokenizer.get("repository") != entry.repository or tokenizer.get("revision") != commit:
            raise Refused(f"{field} {pick.reference} was tokenised with {tokenizer.get('repository')} at "
                          f"{str(tokenizer.get('revision'))[:12]}; this run trains {entry.id} "
                          f"({entry.repository}) at {commit[:12]}", hint=RENDER_AGAIN)
        if pick.prepared.get("chatTemplateSha256") != template:
            raise Refused(f"{field} {pick.reference} was rendered under the chat template sha256 "
                          f"{pick.prepared.get('chatTemplateSha256')}; this run renders {entry.id} under "
                          f"{template}", hint=RENDER_AGAIN)
        longest = int(pick.prepared.get("longestRow") or 0)
        if config.data.truncation == "error" and longest > config.max_seq_length:
            raise Refused(f"{field} {pick.reference} holds a row of {longest} tokens, longer than maxSeqLength "
                          f"{config.max_seq_length}", hint=f"raise config.maxSeqLength to {longest}, or set "
                                                           "data.truncation to drop or right")


@lru_cache(maxsize=32)
def run_template_sha256(model_path: str, family: str, corrected: bool) -> str:
    """The sha256 of the chat template a run over the model at `model_path` renders under (the tokenizer's own, or
    Optimize's corrected copy): what the rows' `chatTemplateSha256` must be. Read once per model folder."""
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer, template_sha256

    renderer = ChatRenderer.from_pretrained(model_path, template_kwargs(family, False),
                                            corrected_family=family if corrected else None, light=True)
    return template_sha256(renderer.tokenizer.chat_template)
