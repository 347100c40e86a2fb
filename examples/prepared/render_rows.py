"""Render chat rows into prepared token rows: one Parquet file of `input_ids` and `loss_mask` (1 on the tokens of
each row's final assistant answer, as a supervised run trains by default), rendered by Optimize's own renderer under
the tokenizer and chat template in MODEL_DIR. Prints the chat template's sha256 for `describe-prepared`.

    python examples/prepared/render_rows.py ROWS.jsonl MODEL_DIR OUT_FOLDER

Stands in for your own pipeline: any tool that writes the two columns under the base model's tokenizer and chat
template makes rows a supervised run trains as given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from optimize.chat.render import ChatRenderer, LossPolicy, template_sha256


def main(rows_file: str, model_dir: str, out: str) -> None:
    renderer = ChatRenderer.from_pretrained(model_dir)
    rows = [json.loads(line) for line in Path(rows_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    rendered = [renderer.render(row, LossPolicy()) for row in rows]
    target = Path(out) / "data" / "part-00000.parquet"
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"input_ids": [r.input_ids for r in rendered],
                             "loss_mask": [r.loss_mask for r in rendered]}), target)
    print(f"wrote {len(rendered)} rows to {target}")
    print(f"chat template sha256 {template_sha256(renderer.tokenizer.chat_template)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
