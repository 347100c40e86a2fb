"""Row lengths before a device is claimed: each dataset of a run read against the dataset analysis kept for its
examples, the run's base model commit and this Optimize version.

A Lengths section says what the analysis shows against the run's maxSeqLength (or why there is none, and the
command that starts one). The check refuses, naming up to 20 rows longest first: under `error` rows longer than
maxSeqLength; under `oldest` rows still too long with every removable turn removed; under every truncation
value rows whose answer or earlier messages the chat template refuses or renders without a text or a call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from optimize import __version__
from optimize.core.errors import Gone
from optimize.registry.datasets import content_digest
from optimize.schemas.phases import AnalysisPhase
from optimize.store.tables import Analysis
from optimize.workloads.lengths import TRIM_FROM, lengths_file

ROWS_NAMED = 20


@dataclass(frozen=True)
class Subject:
    role: str  # training | validation
    reference: str  # ns/name:vN
    digest: str
    prepared: dict | None = None  # prepared token rows: the version's descriptor and longestRow (no analysis)


def analysis_for(session, blobs, digest: str, commit: str) -> Analysis | None:
    """The analysis kept for the examples of a version digest (by their content: the same examples cut into other
    shards share it) under a base model commit and this Optimize version."""
    examples = content_digest(session, blobs, digest)
    return session.scalar(select(Analysis).where(Analysis.examples_digest == examples, Analysis.base_commit == commit,
                                                 Analysis.optimize_version == __version__))


def section(analysis: Analysis | None, subject: Subject, entry_id: str, commit: str | None, max_seq_length: int,
            truncation: str, lengths_file: Path | None) -> dict[str, Any]:
    """The Lengths section for one dataset; `lengths_file` is the analysis' per-row figures when it is done."""
    body: dict[str, Any] = {"role": subject.role, "dataset": subject.reference, "maxSeqLength": max_seq_length}
    command = f"akka training datasets analyze {subject.reference} --model {entry_id}"
    if commit is None:
        return {**body, "status": "noCommit", "note": f"base model {entry_id} resolves to no commit, so no analysis "
                                                     "can measure the rows"}
    if analysis is None:
        return {**body, "status": "none", "command": command,
                "note": "no analysis of these rows under this base model commit exists yet"}
    body["analysisId"] = analysis.id
    if analysis.phase in (AnalysisPhase.PENDING, AnalysisPhase.RUNNING):
        return {**body, "status": analysis.phase, "note": f"analysis {analysis.id[:12]} is {analysis.phase}"}
    if analysis.phase == AnalysisPhase.FAILED:
        reason = (analysis.reason or "no reason was recorded").removeprefix("the analysis failed: ")  # older words
        failed = {**body, "status": "failed", "reason": reason, "note": f"analysis {analysis.id[:12]} failed: {reason}"}
        if analysis.refused:  # the rows fail the same way under this commit and version: fix them, not retry
            failed["log"] = f"akka training datasets logs {analysis.id[:12]}"
        else:  # the host or the connection failed it: another attempt can succeed
            failed["command"] = f"{command} --wait"
        return failed
    report = analysis.report
    rows = _rows(lengths_file)
    over = sorted(((length, line) for line, (length, _trimmed) in enumerate(rows, 1) if length > max_seq_length),
                  key=lambda item: (-item[0], item[1]))
    body.update({
        "status": "done", "tokenizer": report["tokenizer"], "chatTemplate": report["chatTemplate"],
        "optimizeVersion": report["optimizeVersion"], "baseModelCommit": analysis.base_commit,
        "rows": report.get("rows", report.get("pairs")), "unit": "pairs" if "pairs" in report else "rows",
        **report["lengths"],
        "longest": report["lengths"]["max"], "overMaxSeqLength": len(over),
        "suggestedMaxSeqLength": report["suggestedMaxSeqLength"],
        "longRows": [{"line": line, "length": length} for length, line in over[:ROWS_NAMED]],
        "findings": report.get("findings") or [], "findingCount": report.get("findingCount", 0),
    })
    if truncation in ("oldest", "oldest_or_drop"):
        # The analysis measures trimmed lengths of rows longer than TRIM_FROM only; a shorter long row is left to
        # the run, which trims it (or refuses it by its line) when it reads it.
        unfit = sorted(((trimmed, line) for line, (length, trimmed) in enumerate(rows, 1)
                        if trimmed > max_seq_length and length > TRIM_FROM), key=lambda item: (-item[0], item[1]))
        unmeasured = sum(1 for length, _ in rows if max_seq_length < length <= TRIM_FROM)
        body["trimmed"] = len(over) - len(unfit) - unmeasured
        body["trimUnmeasured"] = unmeasured
        body["trimMeasuredFrom"] = TRIM_FROM
        body["cannotFitTrimmed"] = len(unfit)
        body["unfitRows"] = [{"line": line, "trimmedLength": trimmed} for trimmed, line in unfit[:ROWS_NAMED]]
    return body


def _rows(lengths_file: Path | None) -> list[tuple[int, int]]:
    if lengths_file is None:
        return []
    with lengths_file.open() as handle:
        return [(figures[0], figures[1]) for figures in map(json.loads, handle)]


def refusal(sections: list[dict[str, Any]], truncation: str, max_seq_length: int, entry_id: str) -> str | None:
    """The sentence that refuses the run, or None when every done section passes."""
    problems = []
    for part in (s for s in sections if s["status"] == "done"):
        unit = "pair" if part.get("unit") == "pairs" else "row"  # a dpo run's dataset is measured in pairs
        source = f"measured by analysis {part['analysisId'][:12]} under {entry_id} at {part['baseModelCommit'][:12]}"
        if part["findings"]:
            named = ", ".join(f"line {f['line']} ({_where(f)}{f['reason']})" for f in part["findings"][:ROWS_NAMED])
            problems.append(f"the chat template refuses or drops part of {part['findingCount']} {unit}(s) of "
                            f"{part['dataset']}: {named} ({source}); fix or remove those {unit}s")
        if truncation == "error" and part["overMaxSeqLength"]:
            named = ", ".join(f"line {r['line']} ({r['length']} tokens)" for r in part["longRows"])
            problems.append(f"{part['overMaxSeqLength']} {unit}(s) of {part['dataset']} are longer than maxSeqLength "
                            f"{max_seq_length}: {named} ({source}); raise maxSeqLength (the analysis suggests "
                            f"{part['suggestedMaxSeqLength']}), shorten the {unit}s, or set data.truncation: drop to "
                            "leave them out")
        left_out = {"drop": part["overMaxSeqLength"], "oldest_or_drop": part.get("cannotFitTrimmed", 0)}.get(truncation)
        if left_out and left_out == part["rows"]:
            problems.append(f"data.truncation: {truncation} would leave {part['dataset']} empty: all {part['rows']} "
                            f"{unit}(s) are longer than maxSeqLength {max_seq_length} ({source}); raise maxSeqLength "
                            f"(the analysis suggests {part['suggestedMaxSeqLength']}) or shorten the {unit}s")
        if truncation == "oldest" and part.get("cannotFitTrimmed"):
            named = ", ".join(f"line {r['line']} ({r['trimmedLength']} tokens trimmed)" for r in part["unfitRows"])
            problems.append(f"{part['cannotFitTrimmed']} {unit}(s) of {part['dataset']} are longer than maxSeqLength "
                            f"{max_seq_length} even with their oldest turns removed: {named} ({source}); use a larger "
                            "maxSeqLength, shorter rows, or data.truncation: oldest_or_drop")
    return "; ".join(problems) or None


def _where(finding: dict[str, Any]) -> str:
    return "" if finding.get("message") is None else f"message {finding['message']}: "


def evaluate(session, blobs, subjects: list[Subject], entry_id: str, commit: str | None, max_seq_length: int,
             truncation: str) -> tuple[list[dict[str, Any]], str]:
    """Every dataset's section and the check's state: `passed` (every analysis done and nothing refused),
    `waiting` (an analysis is pending or running, or none exists yet) or `notRun` (one failed or cannot exist)."""
    sections = []
    for subject in subjects:
        if subject.prepared is not None:
            sections.append(prepared_section(subject, max_seq_length))
            continue
        analysis = analysis_for(session, blobs, subject.digest, commit) if commit else None
        done = analysis is not None and analysis.phase == AnalysisPhase.DONE and analysis.lengths_sha256
        try:
            held = lengths_file(blobs, analysis.id, analysis.lengths_sha256) if done else None
        except Gone as lost:  # its figures were found corrupt and set aside: the check cannot run on them
            sections.append({"role": subject.role, "dataset": subject.reference, "maxSeqLength": max_seq_length,
                             "analysisId": analysis.id, "status": "failed", "reason": lost.message,
                             "note": f"analysis {analysis.id[:12]} cannot be read: {lost.message}"})
            continue
        sections.append(section(analysis, subject, entry_id, commit, max_seq_length, truncation, held))
    states = {s["status"] for s in sections}
    if states <= {"done", "prepared"}:
        return sections, "passed"
    if states & {"failed", "noCommit"}:
        return sections, "notRun"
    return sections, "waiting"


def prepared_section(subject: Subject, max_seq_length: int) -> dict[str, Any]:
    """Prepared token rows need no analysis: the version recorded their longest row when it was registered (a row
    longer than maxSeqLength under `error` is refused by `admission.prepared`)."""
    longest = int(subject.prepared.get("longestRow") or 0)
    return {"role": subject.role, "dataset": subject.reference, "maxSeqLength": max_seq_length, "status": "prepared",
            "longest": longest, "note": f"prepared token rows: the longest is {longest} tokens (recorded by the "
                                        "version), " + ("within maxSeqLength" if longest <= max_seq_length
                                                        else "longer than maxSeqLength")}


def record(sections: list[dict[str, Any]], state: str) -> dict[str, Any]:
    """What a run keeps of its check (the API's `lengthCheck`): its state (`passed`, `waiting`, `notRun`, or
    `refused` when its analyses refused the run) and the analysis each dataset was checked against."""
    return {"status": state, "datasets": [
        {key: s.get(key) for key in ("role", "dataset", "status", "analysisId", "baseModelCommit", "overMaxSeqLength",
                                     "reason", "longest")} for s in sections]}
