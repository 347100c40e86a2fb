"""What a save's weights files say about them, read without torch (the server reads them too): which files they
are, the digest of their tensors and the modules an adapter adapts.

A save holds a LoRA adapter (`ADAPTER_FILES`, of a lora or qlora run) or, of a full fine-tune, every weight of the
model with its config (`FULL_FILES`, the weights in one safetensors file or several shards with their index).
`weights_digest` is the sha256 over the tensors' names, dtypes, shapes and bytes in name order, independent of
run ids and lineage, so two runs that trained the same weights show the same digest.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

# safetensors dtype codes, spelled as torch spells them (the digest's text was defined on torch tensors)
TORCH_DTYPES = {"F64": "torch.float64", "F32": "torch.float32", "F16": "torch.float16", "BF16": "torch.bfloat16",
                "I64": "torch.int64", "I32": "torch.int32", "I16": "torch.int16", "I8": "torch.int8",
                "U8": "torch.uint8", "BOOL": "torch.bool", "F8_E4M3": "torch.float8_e4m3fn",
                "F8_E5M2": "torch.float8_e5m2"}


ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
FULL_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json", "config.json",
              "generation_config.json")


def weights_files(save: Path) -> list[Path]:
    """The files of a save's weights: its adapter's, or every weight's of a full fine-tune (file name patterns)."""
    names = ADAPTER_FILES if (save / ADAPTER_FILES[0]).is_file() else FULL_FILES
    return [path for name in names for path in sorted(save.glob(name)) if path.is_file()]


def saved_weights_digest(save: Path) -> str:
    """The digest of a save's weights: its adapter's tensors, or a full fine-tune's across its shards."""
    return weights_digest(*(path for path in weights_files(save) if path.suffix == ".safetensors"))


def weights_digest(*paths: Path) -> str:
    """The digest of the tensors in one safetensors file or several (a model's shards: one set of names)."""
    tensors = []  # (name, file, header entry, where the data starts)
    for path in paths:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        tensors += [(name, path, entry, 8 + length) for name, entry in header.items() if name != "__metadata__"]
    digest = hashlib.sha256()
    for name, path, entry, start in sorted(tensors, key=lambda tensor: tensor[0]):
        begin, end = entry["data_offsets"]
        digest.update(f"{name}|{TORCH_DTYPES[entry['dtype']]}|{tuple(entry['shape'])}|".encode())
        with path.open("rb") as handle:
            handle.seek(start + begin)
            digest.update(handle.read(end - begin))
    return "sha256:" + digest.hexdigest()


def adapted_modules(config_path: Path) -> list[str]:
    """The module names (q_proj, …) an adapter's `adapter_config.json` targets."""
    targets = json.loads(config_path.read_text()).get("target_modules") or []
    if isinstance(targets, str):
        targets = [targets]
    return sorted({name.rsplit(".", 1)[-1] for name in targets})
