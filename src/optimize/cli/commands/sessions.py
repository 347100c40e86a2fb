"""`akka training sessions create|get`: a conversation file (OASST1 message trees, OpenTelemetry GenAI log events
or captured model calls) sent to the server, parsed there into candidates and kept as a session; its hash is what a
curation names (there is no list of sessions: keep the hash)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.render import DASH

app = typer.Typer(help="Sessions: conversation corpora parsed into candidates for a curation.",
                  no_args_is_help=True)
SOURCES = ("oasst1", "otel", "canonical")
CHUNK = 1024 * 1024
# the server parses the whole file while the command waits: up to the session limit (256 MiB by default)
_CREATE_TIMEOUT_S = 900.0


@command(app, "create")
def create(
    out: Output,
    file: Annotated[Path, typer.Option("-f", "--file", help="The conversation file (JSONL); read from disk, never "
                                                            "from stdin.")],
    source: Annotated[str, typer.Option("--source", help="Its format: oasst1 (OASST1 message trees), otel (OTLP "
                                                         "JSON logs of GenAI events, as the Collector's file "
                                                         "exporter writes them) or canonical (captured calls).")],
    project: Annotated[str | None, typer.Option("--project", help="The training project the session belongs to "
                                                                  "(may be left out with a token limited to one "
                                                                  "project).")] = None,
) -> None:
    """Parse a conversation file into candidates and keep them as a session; prints the session hash (keep it:
    there is no list command). A bad line is refused by its number and nothing is kept; the same file again
    answers the same session."""
    if source not in SOURCES:
        raise typer.BadParameter(f"{source!r} is not one of {', '.join(SOURCES)}", param_hint="'--source'")
    if str(file) == "-":
        raise typer.BadParameter("sessions create reads a file, not stdin: name the file", param_hint="'-f'")
    if not file.is_file():
        raise typer.BadParameter(f"{file} is not a file", param_hint="'-f'")
    size = file.stat().st_size
    with client_for(out, timeout=_CREATE_TIMEOUT_S) as api:
        answer = api.sessions.create(source=source, chunks=_chunks(file), size=size, project=project)
    out.emit(answer, _render_created)


@command(app, "get")
def get(
    out: Output,
    session_hash: Annotated[str, typer.Argument(metavar="HASH", help="The session hash sessions create printed.")],
    project: Annotated[str | None, typer.Option("--project", help="The project, where the token sees the same "
                                                                  "session in two.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=0, max=100, help="How many of its first candidates "
                                                                             "to show (default 5).")] = None,
) -> None:
    """Show a session: its source, project, counts and first candidates."""
    with client_for(out) as api:
        out.emit(api.sessions.get(session_hash, project=project, limit=limit), _render_detail)


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _skipped(s) -> str:
    return ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in s["skipped"].items()) or "none"


def _render_created(con, s) -> None:
    state = "Created" if s["created"] else "Already held:"
    con.print(f"{state} session {s['sessionHash']} in project {s['project']}")
    con.print(f"{s['candidates']} candidates from {s['records']} {_records(s['source'])} ({s['source']}); "
              f"skipped: {_skipped(s)}")
    con.print("Keep the hash: a curation names it, and there is no list of sessions.")


def _records(source: str) -> str:
    return {"oasst1": "message trees", "otel": "log records"}.get(source, "records")


def _render_detail(con, s) -> None:
    con.print(f"[bold]Session[/]     {s['sessionHash']}")
    con.print(f"Project     {s['project']}")
    con.print(f"Source      {s['source']}: {s['records']} {_records(s['source'])} read")
    con.print(f"Candidates  {s['candidates']} (skipped: {_skipped(s)})")
    con.print(f"Created     {s['createdAt']} by {s['createdBy'] or DASH}")
    for candidate in s["firstCandidates"]:
        con.print(f"[bold]{candidate['id']}[/]", highlight=False)
        for message in candidate["messages"]:
            con.print(f"  {message['role']:<9} {_text(message)}", highlight=False, markup=False)


def _text(message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = (content or "").replace("\n", " ")
    calls = message.get("tool_calls") or []
    if calls:
        text += (" " if text else "") + " ".join(f"[calls {c['function']['name']}]" for c in calls)
    return text if len(text) <= 120 else text[:119] + "…"
