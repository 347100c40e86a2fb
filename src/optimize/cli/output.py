"""Output modes (`-o text|json|json-compact`, `--jq`) and error printing, shared by every command.

An error is printed in the mode of the command that meets it: in text mode as `error: MESSAGE` (then the lines it
names and `hint: …`) on stderr; in JSON modes as one object on stdout, `{"error": {"message", "code", "status",
"hint", …}}`, so a script reads results and refusals from one stream. The exit codes are the same in every mode.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from optimize.cli.safe_text import SafeConsole, safe_markup

MODES = ("text", "json", "json-compact")
# The output of the command now running: set by the `command` wrapper once its options are read, cleared by
# `main()` around each invocation, read by `print_error` (so `fail()` and the process edge need no `out`).
_active: ContextVar[Output | None] = ContextVar("optimize_cli_output", default=None)


class CommandFailed(Exception):
    """Ends a command with an exit code after its message was printed."""

    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    # text from users (names, descriptions, reasons the server echoes) is printed with its control sequences
    # escaped: a name cannot move the cursor or rewrite the terminal
    return SafeConsole(file=stream, width=width, soft_wrap=True, highlight=False)


@dataclass
class Output:
    mode: str = "text"
    jq: str | None = None
    server: str = ""
    token: str | None = None  # --token / OPTIMIZE_TOKEN; None: found for the server (client/credentials.py)

    @property
    def is_json(self) -> bool:
        return self.mode != "text" or self.jq is not None

    def emit(self, data: Any, render: Callable[[Console, Any], None] | None = None) -> None:
        """Print `data` as JSON in JSON modes, or through `render` as text."""
        if self.is_json or render is None:
            self._print_json(data)
        else:
            render(console(), data)

    def _print_json(self, data: Any) -> None:
        values = [data]
        if self.jq is not None:
            import jq

            try:
                values = jq.compile(self.jq).input_value(data).all()
            except ValueError as error:
                print_error(f"--jq {self.jq!r} failed: {error}", "fix the jq expression", code="usage")
                raise CommandFailed(2) from None
        for value in values:
            self._write(value)

    def _write(self, value: Any) -> None:
        compact = self.mode == "json-compact"
        sys.stdout.write(json.dumps(value, indent=None if compact else 2, separators=(",", ":") if compact else None,
                                    ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def error(self, problem: dict[str, Any]) -> None:
        """`{"error": problem}` on stdout, never filtered by --jq (whose expression is written for results)."""
        self._write({"error": problem})

    def note(self, message: str) -> None:
        """A line for people (progress, confirmations): stderr, so JSON on stdout stays clean."""
        if not self.is_json:
            console(stderr=True).print(message)


def activate(out: Output | None) -> None:
    """Make `out` the mode errors are printed in, until `main()` returns."""
    _active.set(out)


def print_error(message: str, hint: str | None = None, lines: list[str] | None = None, *, code: str = "error",
                status: int | None = None, details: dict[str, Any] | None = None) -> None:
    """Report an error in the active command's mode. `lines` are the text form of what `details` hold (the rows a
    refusal names); `code` and `status` are the problem's: its HTTP status (a refusal the CLI makes before asking
    the server has the status the server gives it), or none for what is no refusal (nothing answers, a usage
    error, an unexpected failure)."""
    out = _active.get()
    if out is not None and out.is_json:
        problem = {**(details or {}), "message": message, "code": code, "status": status or None, "hint": hint}
        if lines and not details:
            problem["lines"] = lines
        out.error({key: problem[key] for key in ("message", "code", "status", "hint")} | problem)
        return
    err = console(stderr=True)
    err.print(f"[bold red]error:[/] {_escape(message)}")
    for line in lines or ():
        err.print(f"  {_escape(line)}")
    if hint:
        err.print(f"  hint: {_escape(hint)}")


def _escape(text: str) -> str:
    return safe_markup(text)
