"""Following a long-running item from the CLI (`wait`, `--wait`), then showing it as `get` does.

Where the statuses go depends on where the output goes: on a terminal a live Rich view (headline, bar, loss,
tokens/s, ETA and its basis) redrawn in place; elsewhere a plain line when the headline changes, and otherwise
at most every PLAIN_EVERY seconds (a log is read later, and a line per step would bury it). Under `-o json` one
document: the item as `get` answers it once it has ended; with `--events` (JSON modes only) the stream as JSON
lines instead — one JSON event per status (`progress.event`), then the item as `get` answers it, each on a line.

What ends the follow is the server's `settled`; what the exit status is, the caller decides from the item
returned. Ctrl-C stops following only: the work goes on, the command says how to follow it again, and exits 130.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optimize.cli import progress
from optimize.cli.common import fail
from optimize.cli.output import CommandFailed, Output, activate, console, print_error
from optimize.cli.safe_text import escape_controls

if TYPE_CHECKING:
    from optimize.client.api import OptimizeApi

PLAIN_EVERY = 5.0  # seconds between plain lines that only report progress
INTERRUPTED = 130  # the shell's code for a command ended by SIGINT
Events = Annotated[bool, typer.Option("--events", help="Needs -o json|json-compact (and --wait where it is an "
                                      "option): each status as a JSON line, then the final item on a line; without "
                                      "it JSON modes print the final item only.")]


def check_events(out: Output, events: bool, wait: bool = True) -> None:
    """`--events` is a JSON stream of a follow: a usage error (exit 2) without `--wait` or without a JSON mode."""
    if events and not wait:
        raise typer.BadParameter("--events needs --wait", param_hint="'--events'")
    if events and not out.is_json:
        raise typer.BadParameter("--events needs -o json or -o json-compact (it prints JSON lines)",
                                 param_hint="'--events'")


def emit_final(out: Output, item: dict[str, Any], render: Callable[[Any, dict[str, Any]], None] | None,
               events: bool) -> None:
    """The followed item as `get` shows it; after `--events` on one line, so the whole output is JSON lines."""
    (dataclasses.replace(out, mode="json-compact") if events and out.is_json else out).emit(item, render)


def follow_status(api: OptimizeApi, out: Output, kind: str, item_id: str, timeout: float | None,
                  line: Callable[[dict[str, Any]], str], render: Callable[[Any, dict[str, Any]], None] | None,
                  not_yet: str = "has not ended", again: str | None = None, events: bool = False) -> dict[str, Any]:
    """`kind` is the command group and the typed client's resource (`runs`, `evaluations`, `endpoints`,
    `analyses`); `line(status)` is the headline (id, phase and what only that kind says: a pause, what it waits
    for, a failure). `render` shows the final item (None: the caller shows it, and the last status is returned
    instead of the item re-read). `again` is the command that follows it again (default: `akka training KIND
    wait ID`). In JSON modes the output is the final item alone, unless `events` (`--events`): then a JSON line per
    status first, and the final item (or the error that ends the follow) on a line of its own."""
    if events and out.is_json:  # JSON lines throughout: an error that ends the follow is one line too
        out = dataclasses.replace(out, mode="json-compact")
        activate(out)
    resource = getattr(api, kind)
    noun = progress.ITEMS[kind]
    deadline = time.monotonic() + timeout if timeout else None
    display = _display(out, kind, line, events)
    last: dict[str, Any] | None = None
    try:
        with display:
            for status in _statuses(api, resource, item_id, deadline):
                display.show(status)
                last = status
    except TimeoutError:
        fail(f"{noun} {item_id} {not_yet} after {timeout:g}s; it goes on",
             f"follow it again with: {again or _again(kind, last, item_id)}")
    except KeyboardInterrupt:
        # Ctrl-C ends this command, not the work: say so, and how to pick it up again
        shown = (last or {}).get(progress.ID_KEYS[kind], item_id)[:12]
        message, hint = (f"stopped following {noun} {shown}; the {noun} goes on",
                         f"follow it again with: {again or _again(kind, last, item_id)}")
        if out.is_json:
            print_error(message, hint, code="interrupted")
        else:  # not an error: a sentence, on stderr so a pipe of the lines stays clean
            console(stderr=True).print(f"{message[0].upper()}{message[1:]}; {hint}.", markup=False)
        raise CommandFailed(INTERRUPTED) from None
    if render is None:
        return last
    final = resource.get(last[progress.ID_KEYS[kind]])
    emit_final(out, final, render, events)
    return final


def _statuses(api: OptimizeApi, resource, item_id: str, deadline: float | None):
    if hasattr(resource, "follow"):
        return resource.follow(item_id, deadline)
    from optimize.client.events import follow  # every kind's status stream has the same shape

    return follow(api.http, f"{resource.ROOT}/{item_id}/events", deadline)


def _again(kind: str, last: dict[str, Any] | None, item_id: str) -> str:
    return f"akka training {kind} wait {(last or {}).get(progress.ID_KEYS[kind], item_id)[:12]}"


def _display(out: Output, kind: str, line: Callable[[dict[str, Any]], str], events: bool) -> _Display:
    if out.is_json:
        return _JsonEvents(kind, line) if events else _Display(kind, line)
    con = console()
    if con.is_terminal and not con.is_dumb_terminal:
        return _LiveView(kind, line, con)
    return _PlainLines(kind, line)


class _Display:
    """Shows nothing; the base of the others (a JSON mode without --events: its answer is only the final item)."""

    def __init__(self, kind: str, line: Callable[[dict[str, Any]], str]) -> None:
        self.tracker = progress.Tracker(kind)
        self.line = line

    def __enter__(self) -> _Display:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def show(self, status: dict[str, Any]) -> None:
        self.tracker.read(status, time.monotonic())


class _JsonEvents(_Display):
    def show(self, status: dict[str, Any]) -> None:
        reading = self.tracker.read(status, time.monotonic())
        print(json.dumps(progress.event(status, reading), separators=(",", ":"), ensure_ascii=False), flush=True)


class _PlainLines(_Display):
    def __init__(self, kind: str, line: Callable[[dict[str, Any]], str]) -> None:
        super().__init__(kind, line)
        self.headline: str | None = None
        self.printed = ""
        self.printed_at = 0.0

    def show(self, status: dict[str, Any]) -> None:
        now = time.monotonic()
        reading = self.tracker.read(status, now)
        headline = self.line(status)
        text = progress.line(headline, reading)
        finished = reading.total is not None and reading.done == reading.total
        # a new headline (phase, pause, failure) or the last of a count always shows; mere progress is paced
        if headline != self.headline or (text != self.printed and (finished or now - self.printed_at >= PLAIN_EVERY)):
            print(escape_controls(text), flush=True)  # the headline may carry a reason the server echoes
            self.headline, self.printed, self.printed_at = headline, text, now


class _LiveView(_Display):
    def __init__(self, kind: str, line: Callable[[dict[str, Any]], str], con) -> None:
        from rich.live import Live

        super().__init__(kind, line)
        self.reading: progress.Reading | None = None
        self.headline = ""
        # the view is redrawn 4 times a second so the ETA counts down between statuses; transient: the final
        # `get` view replaces it
        self.live = Live(console=con, refresh_per_second=4, transient=True, get_renderable=self._renderable)

    def __enter__(self) -> _LiveView:
        self.live.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.live.stop()

    def show(self, status: dict[str, Any]) -> None:
        self.reading = self.tracker.read(status, time.monotonic())
        self.headline = self.line(status)
        self.live.refresh()

    def _renderable(self):
        from rich.text import Text

        if self.reading is None:
            return Text("connecting …", style="dim")
        return progress.view(self.headline, self.reading, time.monotonic())
