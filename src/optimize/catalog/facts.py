"""What a model's files say it is: architecture and shape, context length, parameter count, chat template digest.

Read without torch: config.json and tokenizer_config.json are JSON, and a safetensors file starts with an 8-byte
little-endian header length and a JSON header giving every tensor's shape. The same readers serve a local folder
(`select --from`, a download, a stand-in) and a hub repository (`base-models add`, which reads the safetensors
headers with ranged requests instead of downloading the weights).

`check_shape` is how a selection proves the files are the model the catalog entry names: every shape figure the
entry states (class, model type, hidden size, layers, heads, KV heads, vocabulary) must be what the config says.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.chat.render import template_sha256  # the digest every job records as chatTemplateSha256
from optimize.core.errors import Invalid

# catalog architecture key -> config.json key (read at the top level, else in text_config for multimodal models)
SHAPE_KEYS = {"hiddenSize": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
              "kvHeads": "num_key_value_heads", "vocab": "vocab_size"}
HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors header larger than this is not one we trust to parse


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """Figures read from a model's own files; None where the files do not say."""

    architecture: dict[str, Any] = field(default_factory=dict)  # class, modelType and the SHAPE_KEYS figures
    context_length: int | None = None
    parameters: int | None = None
    chat_template_sha256: str | None = None
    mixture_of_experts: bool = False


def architecture_of(config: dict[str, Any]) -> dict[str, Any]:
    """The catalog's architecture highlights of a config.json."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    classes = config.get("architectures") or []
    found: dict[str, Any] = {"class": classes[0] if classes else None, "modelType": config.get("model_type")}
    for key, name in SHAPE_KEYS.items():
        found[key] = config.get(name, text.get(name))
    return found


def context_length_of(config: dict[str, Any]) -> int | None:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    value = config.get("max_position_embeddings", text.get("max_position_embeddings"))
    return value if isinstance(value, int) else None


def is_mixture_of_experts(config: dict[str, Any]) -> bool:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    keys = ("num_experts", "num_local_experts", "n_routed_experts")
    return any((source.get(key) or 0) > 1 for source in (config, text) for key in keys)


def header_parameters(header: dict[str, Any]) -> int:
    """Parameters a safetensors header lists: the sum of its tensors' element counts."""
    return sum(math.prod(tensor["shape"]) for name, tensor in header.items() if name != "__metadata__")


def read_safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise Invalid(f"{path.name} is not a safetensors file: it is shorter than its header length")
        (size,) = struct.unpack("<Q", prefix)
        if size > HEADER_LIMIT:
            raise Invalid(f"{path.name} is not a safetensors file: its header claims {size} bytes")
        try:
            return json.loads(handle.read(size))
        except ValueError:
            raise Invalid(f"{path.name} is not a safetensors file: its header is not JSON") from None


def template_of(tokenizer_config: dict[str, Any] | None, jinja: str | None) -> str | None:
    """The chat template Transformers would use: chat_template.jinja when present, else the tokenizer config's
    (a string, or a list of named templates of which `default` is the one rendered)."""
    if jinja is not None:
        return jinja
    template = (tokenizer_config or {}).get("chat_template")
    if isinstance(template, list):
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def facts_from(config: dict[str, Any], tokenizer_config: dict[str, Any] | None, jinja: str | None,
               parameters: int | None) -> ModelFacts:
    template = template_of(tokenizer_config, jinja)
    return ModelFacts(architecture_of(config), context_length_of(config), parameters,
                      template_sha256(template) if template else None, is_mixture_of_experts(config))


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise Invalid(f"{what}: cannot read {path.name} ({type(error).__name__})") from None
    if not isinstance(value, dict):
        raise Invalid(f"{what}: {path.name} is not a JSON object")
    return value


def read_folder_facts(folder: Path, what: str) -> ModelFacts:
    """The facts of a model folder (`what` names it in refusals)."""
    config = read_json(folder / "config.json", what)
    tokenizer_path = folder / "tokenizer_config.json"
    tokenizer_config = read_json(tokenizer_path, what) if tokenizer_path.is_file() else None
    jinja_path = folder / "chat_template.jinja"
    jinja = jinja_path.read_text(encoding="utf-8") if jinja_path.is_file() else None
    weights = sorted(folder.glob("*.safetensors"))
    parameters = sum(header_parameters(read_safetensors_header(p)) for p in weights) if weights else None
    return facts_from(config, tokenizer_config, jinja, parameters)


def shape_mismatches(expected: dict[str, Any], found: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, expected, found) for every shape figure the entry states that the files contradict."""
    wrong = []
    for key in ("class", "modelType", *SHAPE_KEYS):
        want = expected.get(key)
        if want is not None and found.get(key) != want:
            wrong.append((key, want, found.get(key)))
    return wrong


def check_shape(entry_id: str, expected: dict[str, Any], facts: ModelFacts, what: str) -> None:
    """Refuse files that are not the model the entry names, naming each field that differs."""
    wrong = shape_mismatches(expected, facts.architecture)
    if not wrong:
        return
    differences = "; ".join(f"architecture.{key}: {entry_id} has {want}, the files have {got}"
                            for key, want, got in wrong)
    raise Invalid(f"{what} is not {entry_id}: {differences}",
                  hint=f"pass the files of {entry_id} itself, or select the catalog entry these files are "
                       f"(akka training base-models list)")
