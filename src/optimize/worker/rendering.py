"""The renderer a job's rows go through: the base model's tokenizer and chat template from this host's model
cache, under Optimize's corrected template where the catalog says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def renderer_for(model: dict[str, Any], thinking: bool = False):
    """`model` is the job spec's model block: id, family, path, chatTemplate; `thinking`: prompts ask the model to
    think first (where its family can)."""
    from optimize.chat.families import content_as_parts, template_kwargs
    from optimize.chat.render import ChatRenderer

    if not model.get("path") or not Path(model["path"]).is_dir():
        raise RuntimeError(f"base model {model['id']} is not in this host's model cache")
    corrected = model["family"] if model.get("chatTemplate") == "corrected" else None
    return ChatRenderer.from_pretrained(model["path"], template_kwargs(model["family"], thinking),
                                        corrected_family=corrected, parts=content_as_parts(model["family"]))
