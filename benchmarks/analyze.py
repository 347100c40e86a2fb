"""Dataset analysis throughput against the fast tokenizer alone.

Generates a chat dataset (200k rows by default: mixed single- and multi-turn, some tool calls, some rows over
512 tokens), measures every row exactly as an analysis worker does (`optimize.analysis.measure`, the same code
path, streaming the rows from a file in the worker's chunks), and compares the time with the stand-in's fast
tokenizer alone encoding the same rendered texts in one batch call — the limit for this job. The peak RSS is
read when the analysis ends, before the baseline loads every text at once.

    .venv/bin/python benchmarks/analyze.py [--rows 200000] [--model-family smollm2]

Target: analysis time at most 2x the tokenizer-alone time, peak RSS under 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

WORDS = "order refund status shipped printer router urgent thanks please today broken missing label".split()
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def text(rnd: random.Random, words: int) -> str:
    return " ".join(rnd.choices(WORDS, k=words))


def make_row(rnd: random.Random, index: int) -> dict:
    kind = index % 10
    if kind < 5:
        return {"messages": [{"role": "user", "content": text(rnd, 20)},
                             {"role": "assistant", "content": text(rnd, 15)}]}
    if kind < 8:
        messages = [{"role": "system", "content": "You answer tickets."}]
        for _ in range(rnd.randint(2, 4)):
            messages += [{"role": "user", "content": text(rnd, 30)}, {"role": "assistant", "content": text(rnd, 25)}]
        return {"messages": messages}
    if kind == 8:
        call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": str(index)}}}
        return {"messages": [{"role": "user", "content": text(rnd, 20)},
                             {"role": "assistant", "content": "checking", "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": "c1", "content": text(rnd, 10)},
                             {"role": "assistant", "content": text(rnd, 15)}], "tools": TOOLS}
    return {"messages": [{"role": "user", "content": text(rnd, 400)}, {"role": "assistant", "content": text(rnd, 100)}]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--model-family", default="smollm2")
    args = parser.parse_args()
    from optimize.analysis.measure import measure_rows
    from optimize.analysis.report import ReportBuilder
    from optimize.catalog.standins import StandIn, build
    from optimize.chat.families import template_kwargs
    from optimize.chat.normalize import normalize_messages, row_tools
    from optimize.chat.render import ChatRenderer

    work = Path(tempfile.mkdtemp(prefix="analyze-bench-"))
    build(StandIn(args.model_family), work / "model")
    renderer = ChatRenderer.from_pretrained(str(work / "model"), template_kwargs(args.model_family))
    rnd = random.Random(0)
    data = work / "rows.jsonl"
    with data.open("w") as sink:
        for i in range(args.rows):
            sink.write(json.dumps(make_row(rnd, i)) + "\n")

    start = time.perf_counter()
    builder = ReportBuilder("chat")
    chunk: list[dict] = []
    line = 0
    with data.open() as source:
        for raw in source:
            chunk.append(json.loads(raw))
            if len(chunk) == 256 or line + len(chunk) == args.rows:  # the worker's chunk size
                for figures in measure_rows(renderer, chunk, "chat"):
                    line += 1
                    builder.add(line, figures)
                chunk = []
    report = builder.report()
    analysis_seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rows = [json.loads(raw) for raw in data.open()]
    texts = [renderer.text(normalize_messages(r["messages"]), row_tools(r)) for r in rows]
    start = time.perf_counter()
    renderer.tokenizer(texts, add_special_tokens=False)
    tokenizer_seconds = time.perf_counter() - start

    ratio = analysis_seconds / tokenizer_seconds
    over = report["limits"][0]["over"]
    print(f"rows                 {args.rows:,} ({over:,} over 512 tokens), stand-in {args.model_family}")
    print(f"analysis             {analysis_seconds:7.2f} s  {args.rows / analysis_seconds:9,.0f} rows/s")
    print(f"tokenizer alone      {tokenizer_seconds:7.2f} s  "
          f"{args.rows / tokenizer_seconds:9,.0f} rows/s (batch encode)")
    print(f"ratio                {ratio:7.2f}    target <= 2   {'PASS' if ratio <= 2 else 'MISS'}")
    print(f"analysis peak RSS    {peak_mib:7.0f} MiB target < 1024 {'PASS' if peak_mib < 1024 else 'MISS'}")
    print("RESULT " + json.dumps({"rows": args.rows, "analysisSeconds": round(analysis_seconds, 2),
                                  "tokenizerSeconds": round(tokenizer_seconds, 2), "ratio": round(ratio, 2),
                                  "peakRssMiB": round(peak_mib)}))


if __name__ == "__main__":
    main()
