"""What an adapter's files say about it, read without torch (the server reads them too): the digest of its
tensors and the modules it adapts.

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


def weights_digest(path: Path) -> str:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
        start = 8 + length
        digest = hashlib.sha256()
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            begin, end = entry["data_offsets"]
            digest.update(f"{name}|{TORCH_DTYPES[entry['dtype']]}|{tuple(entry['shape'])}|".encode())
            handle.seek(start + begin)
            digest.update(handle.read(end - begin))
    return "sha256:" + digest.hexdigest()


def adapted_modules(config_path: Path) -> list[str]:
    """The module names (q_proj, …) an adapter's `adapter_config.json` targets."""
    targets = json.loads(config_path.read_text()).get("target_modules") or []
    if isinstance(targets, str):
        targets = [targets]
    return sorted({name.rsplit(".", 1)[-1] for name in targets})
