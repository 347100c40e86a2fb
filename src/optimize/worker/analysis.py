"""The analysis job: stream the dataset's shards to local disk, measure every row, report.

Rows are read line by line from the local shard files, so memory holds the per-row figures only. Each row is
checked by the registry's row rule first; a row that breaks it refuses the dataset, naming the line.
"""

from __future__ import annotations

import json
import resource
import tempfile
from pathlib import Path
from typing import Any

from optimize import __version__
from optimize.schemas.jobs import AnalysisSpec
from optimize.schemas.outcomes import AnalysisLastWord
from optimize.worker.channel import Channel
from optimize.worker.frame import run_framed
from optimize.worker.images import ImageFiles
from optimize.worker.rendering import renderer_for
from optimize.worker.reporter import Reporter


def run_analysis(channel: Channel, analysis_id: str) -> int:
    # a refusal names a bad row (another attempt would fail the same way); any other failure is the host's, its
    # model cache's or the connection's, so another attempt can succeed
    return run_framed(channel, AnalysisSpec, _measure, refusals=(_Refusal,), refused=True)


CHUNK_ROWS = 256  # rows measured per batch tokenizer call: fast, and memory stays bounded


class _Refusal(Exception):
    """The dataset cannot be analyzed as it is (a bad row); another attempt would fail the same way."""


def _measured(renderer, lines: list[int], rows: list[dict], kind: str, model_id: str) -> list:
    """The figures of a chunk of rows; a row the tokenizer or chat template fails on refuses the dataset, naming
    its line (measuring is deterministic: the same rows fail the same way under the same commit and version)."""
    from optimize.analysis.measure import measure_rows

    try:
        return measure_rows(renderer, rows, kind)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - find the row it was, one at a time
        for line, row in zip(lines, rows, strict=True):
            try:
                measure_rows(renderer, [row], kind)
            except MemoryError:
                raise
            except Exception as error:  # noqa: BLE001 - named on the analysis, by line
                raise _Refusal(f"line {line}: {model_id}'s chat template or tokenizer fails on this row "
                               f"({type(error).__name__}: {error}); fix or remove the row") from None
        raise


def _measure(channel: Channel, spec: dict[str, Any], reporter: Reporter) -> AnalysisLastWord:
    import orjson

    from optimize.analysis.report import ReportBuilder
    from optimize.chat.rows import RowError, RowKind, check_row

    renderer = renderer_for(spec["model"])
    images = ImageFiles(channel, spec.get("images") or [])  # measured as the processor counts them
    kind = RowKind(spec["kind"])
    builder = ReportBuilder(kind.value)
    total = sum(item["rows"] for item in spec["objects"])
    measured = 0

    def flush(lines: list[int], rows: list[dict], sink) -> None:
        nonlocal measured
        for line, figures in zip(lines, _measured(renderer, lines, rows, kind.value, spec["model"]["id"]),
                                 strict=True):
            builder.add(line, figures)
            sink.write(json.dumps([figures.length, figures.trimmed, figures.trained_final]) + "\n")
        measured += len(rows)
        # rows measured of total, for followers; the reporter sends the newest at most about once a second
        reporter.progress(progress={"rowsMeasured": measured, "rowsTotal": total})
        lines.clear()
        rows.clear()

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as lengths:
        lines: list[int] = []
        rows: list[dict] = []
        for line, raw in channel.example_lines(spec["objects"]):
            row = orjson.loads(raw)
            try:
                check_row(row, kind)
            except RowError as error:
                raise _Refusal(f"line {line}: {error}") from None
            lines.append(line)
            rows.append(images.resolved(row, f"line {line}"))
            if len(rows) == CHUNK_ROWS:
                flush(lines, rows, lengths)
        flush(lines, rows, lengths)
    lengths_path = Path(lengths.name)
    try:
        lengths_sha = channel.put_blob(lengths_path)
    finally:
        lengths_path.unlink(missing_ok=True)
    model = spec["model"]
    report = {
        "tokenizer": {"repository": model["repository"], "commit": model["commit"]},
        "chatTemplate": {"sha256": renderer.chat_template_sha256,
                         "source": model.get("chatTemplate") or "shipped"},
        "optimizeVersion": __version__,
        **builder.report(),
        "worker": {"peakRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
    }
    return AnalysisLastWord(report=report, lengths_sha256=lengths_sha)
