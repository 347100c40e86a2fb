"""Output modes (`-o text|json|json-compact`, `--jq`) and error printing, shared by every command."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

MODES = ("text", "json", "json-compact")


class CommandFailed(Exception):
    """Ends a command with an exit code after its message was printed."""

    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(file=stream, width=width, soft_wrap=True, highlight=False)


@dataclass
class Output:
    mode: str = "text"
    jq: str | None = None
    server: str = ""

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
        indent = None if self.mode == "json-compact" else 2
        separators = (",", ":") if self.mode == "json-compact" else None
        values = [data]
        if self.jq is not None:
            import jq

            try:
                values = jq.compile(self.jq).input_value(data).all()
            except ValueError as error:
                print(f"error: --jq {self.jq!r} failed: {error}", file=sys.stderr)
                raise CommandFailed(2) from None
        for value in values:
            sys.stdout.write(json.dumps(value, indent=indent, separators=separators, ensure_ascii=False) + "\n")

    def note(self, message: str) -> None:
        """A line for people (progress, confirmations): stderr, so JSON on stdout stays clean."""
        if not self.is_json:
            console(stderr=True).print(message)


def print_error(message: str, hint: str | None = None, lines: list[str] | None = None) -> None:
    err = console(stderr=True)
    err.print(f"[bold red]error:[/] {_escape(message)}")
    for line in lines or ():
        err.print(f"  {_escape(line)}")
    if hint:
        err.print(f"  hint: {_escape(hint)}")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
