"""Text from users and servers, made safe to print on a terminal.

A name, a description or a reason the server echoes can carry terminal control sequences (ESC [ … to recolour,
clear or move the cursor, OSC to retitle the window or plant a link, a carriage return or backspaces to print over
what came before). The CLI prints every such character visibly escaped instead (`\\x1b`, `\\r`, `\\x9b`, `\\u202e`):
C0 controls but newline and tab (which are layout), DEL, C1 controls, and the Unicode bidirectional overrides and
isolates that reorder what a terminal shows.

Every console the CLI prints through is a `SafeConsole` (`cli/output.py` makes them): it escapes the text of what
it renders at the last step, below tables and markup, so nothing from a user reaches the terminal raw whichever
renderer printed it; Rich's own styling and cursor moves are not text and pass. Renderers that lay text out in
columns escape it first (`escape_controls`, as `render.table` does for its cells), so widths are measured on what
is shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f", "\x08": "\\b", "\x00": "\\0"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every terminal control character shown as an escape; newline and tab kept as layout."""
    if not isinstance(text, str):
        return text
    return _UNSAFE.sub(_escaped, text)


def safe_markup(text: str) -> str:
    """`text` to put inside Rich markup: controls escaped, and square brackets that would read as markup too."""
    from rich.markup import escape

    return escape(escape_controls(text))


class SafeConsole(Console):
    """A Rich console whose rendered text carries no terminal control sequence from its content."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(escape_controls(segment.text), segment.style)
            for segment in buffer
        )


__all__ = ["SafeConsole", "escape_controls", "safe_markup"]
