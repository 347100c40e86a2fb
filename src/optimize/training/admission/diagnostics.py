"""What a dry run says of a dataset's rows: duplicates and conversation shapes, from a bounded read.

A dry run reads at most `max_examples` examples or `max_bytes` bytes of a dataset (20,000 and 64 MiB unless the
deployment sets other limits), so it answers quickly whatever the dataset's size. A dataset within both limits is
read whole; above them, the first examples are read, or the first examples of up to 16 evenly spaced shards, and
`coverage` says how many were read, of how many, and that the unread rest may differ.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from optimize.core.environment import setting
from optimize.core.sharding import UTF8_BOM

SPREAD_SHARDS = 16
DUPLICATES_NAMED = 10


@dataclass(frozen=True)
class ReadLimits:
    max_examples: int = 20_000
    max_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_env(cls) -> ReadLimits:
        return cls(setting("OPTIMIZE_DRY_RUN_MAX_EXAMPLES"), setting("OPTIMIZE_DRY_RUN_MAX_BYTES"))


def plan_reads(objects: list[dict[str, Any]], limits: ReadLimits) -> tuple[list[tuple[int, dict[str, Any]]], int, int]:
    """Which objects to read and how many rows of each: [(first line number, object)], rows and bytes per object."""
    total_rows = sum(o["rows"] for o in objects)
    total_bytes = sum(o["bytes"] for o in objects)
    firsts, line = [], 1
    for item in objects:
        firsts.append((line, item))
        line += item["rows"]
    if total_rows <= limits.max_examples and total_bytes <= limits.max_bytes:
        return firsts, total_rows, total_bytes
    if len(objects) == 1:
        return firsts, limits.max_examples, limits.max_bytes
    count = min(SPREAD_SHARDS, len(objects))
    chosen = sorted({round(i * (len(objects) - 1) / max(count - 1, 1)) for i in range(count)})
    return [firsts[i] for i in chosen], limits.max_examples // len(chosen), limits.max_bytes // len(chosen)


def shape_of(row: dict[str, Any]) -> list[str]:
    messages = row.get("messages") or []
    users = sum(1 for m in messages if m.get("role") == "user")
    shapes = ["single-turn" if users <= 1 else "multi-turn"]
    if messages and messages[0].get("role") == "system":
        shapes.append("with a system prompt")
    if row.get("tools"):
        shapes.append("offering tools")
    if any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages[:-1]):
        shapes.append("with earlier tool calls")
    if messages and messages[-1].get("tool_calls"):
        shapes.append("answering with tool calls")
    return shapes


def diagnose(reference: str, objects: list[dict[str, Any]], open_object, limits: ReadLimits) -> dict[str, Any]:
    """`open_object(sha256)` opens an object's bytes for reading."""
    import orjson

    reads, rows_each, bytes_each = plan_reads(objects, limits)
    total = sum(o["rows"] for o in objects)
    seen: dict[bytes, int] = {}
    duplicates: list[dict[str, int]] = []
    duplicate_count = read = 0
    shapes: Counter[str] = Counter()
    for first_line, item in reads:
        taken = size = 0
        with open_object(item["sha256"]) as handle:
            for offset, raw in enumerate(handle):
                if taken >= rows_each or size + len(raw) > bytes_each and taken:
                    break
                taken, size = taken + 1, size + len(raw)
                row = orjson.loads(raw.removeprefix(UTF8_BOM) if offset == 0 else raw)
                key = hashlib.sha256(orjson.dumps(row, option=orjson.OPT_SORT_KEYS)).digest()
                line = first_line + offset
                if key in seen:
                    duplicate_count += 1
                    if len(duplicates) < DUPLICATES_NAMED:
                        duplicates.append({"line": line, "sameAs": seen[key]})
                else:
                    seen[key] = line
                shapes.update(shape_of(row))
        read += taken
    complete = read >= total
    coverage: dict[str, Any] = {"read": read, "total": total, "complete": complete}
    if not complete:
        where = (f"the first examples of {len(reads)} evenly spaced shards of {len(objects)}" if len(objects) > 1
                 else "the first examples")
        coverage["note"] = (f"the dry run read {read} of {total} examples of {reference} ({where}); "
                            "the unread rest may differ")
    return {"dataset": reference, "coverage": coverage,
            "duplicates": {"count": duplicate_count, "rows": duplicates},
            "shapes": [{"shape": shape, "rows": n} for shape, n in shapes.most_common()]}
