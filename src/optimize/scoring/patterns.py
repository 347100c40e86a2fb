"""User-supplied regular expressions (a `regex` reward term's or member's `pattern`, the `regex:PATTERN` grader),
matched in linear time with RE2 (`google-re2`).

Python's `re` backtracks: `^(a+)+$` over 31 `a`s and a `!` takes minutes, holding the interpreter's lock the whole
time, so every thread of the process (the server's event loop, a worker's heartbeat) stops with it. RE2 matches in
time linear in the text and the pattern's compiled program, and releases the lock while it matches.

A pattern is written in Python's syntax (`re`), and is first checked by `re` (a malformed one is refused quoting
`re`). It is then translated to RE2's syntax — `\\Z` becomes `\\z`; `$` outside `(?m)` matches at the end or
before a final newline, as Python's does; `{,N}` is `{0,N}`; `\\uXXXX`, `\\UXXXXXXXX`, `\\N{NAME}` and octal
escapes become code points; a `[` inside a set is a literal; `(?#...)` comments and the `a`/`u` flags are dropped —
and constructs that need backtracking are refused by name, with what to write instead: backreferences (`\\1`,
`(?P=name)`), lookahead and lookbehind, atomic groups, possessive quantifiers, conditional groups, and the verbose
flag `(?x)`. What RE2 itself refuses (a repetition count above 1000, a program over its memory) is refused
quoting RE2.

Differences that remain: `\\d`, `\\w`, `\\s` and `\\b` are ASCII (Python's match any Unicode digit, letter or
space, and its `\\s` also `\\v`); a `$` takes a final newline into the match, so what follows it in the pattern
sees the end of the text (`a$\\n` and `a$\\b` do not match `a` and a newline). Only whether a pattern matches
somewhere is used.

The bound on one call: a pattern compiles to at most `MAX_PROGRAM_SIZE` (10,000) RE2 instructions within
`MAX_MEMORY` (8 MiB, RE2's own budget for the program and its match cache; past the cache RE2 goes on with its
slower automaton, still linear), and one search does at most `WORK_BUDGET` (10⁸) instruction × byte steps: a
text is matched when its UTF-8 is at most `WORK_BUDGET / program size` bytes (and at most `MAX_TEXT_BYTES`, 1 MiB;
10 KB for the largest program), else the search raises `TextTooLong` (the sample is unscored, saying why). At
RE2's slowest, about 4 ns a step on a free core, that is under half a second, while the other threads run.

This module imports only the standard library and `re2`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

import re2

MAX_PATTERN_CHARS = 4096
MAX_PROGRAM_SIZE = 10_000  # RE2 instructions; `.{0,500}` is about 4,500, `\w{1000}` about 3,000
MAX_MEMORY = 8 << 20  # RE2's budget for one pattern's program and its match cache (its own default)
MAX_TEXT_BYTES = 1 << 20
WORK_BUDGET = 100_000_000  # program instructions × text bytes in one search; RE2's slowest is about 4 ns a step
_OCTAL = "01234567"
_BRACES = re.compile(r"\{(\d*)(,(\d*))?\}")
_FLAGS = "aiLmsux"


class PatternRefused(ValueError):
    """A pattern that is not matched: the message is a clause about the pattern (`'(a)\\\\1' uses ...`), naming
    the construct and, after a semicolon, what to write instead."""


class TextTooLong(ValueError):
    """A text longer than one search may read for this pattern."""


@dataclass(frozen=True)
class Pattern:
    """A checked, compiled pattern: `search(text)` is whether it matches somewhere in the text."""

    source: str
    case_sensitive: bool
    compiled: Any  # re2's compiled expression
    max_text_bytes: int

    def search(self, text: str) -> bool:
        # Bytes go to RE2 as they are: the wrapper's own encoding refuses a lone surrogate
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > self.max_text_bytes:
            raise TextTooLong(f"the text is {len(data):,} bytes of UTF-8; this pattern is matched against at most "
                              f"{self.max_text_bytes:,}")
        return self.compiled.search(data) is not None


def compile_pattern(pattern: str, *, case_sensitive: bool = True) -> Pattern:
    """The pattern checked and compiled for RE2; PatternRefused, whose message names the construct, otherwise."""
    if not isinstance(pattern, str) or not pattern:
        raise PatternRefused("a regular expression is needed")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefused(f"the pattern has {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    try:
        re.compile(pattern)  # Python's syntax, checked by Python: compiling does not match, so it cannot backtrack
    except (re.error, OverflowError, RecursionError, ValueError) as error:
        raise PatternRefused(f"{pattern!r} is not a regular expression: {error}") from None
    try:
        translated = _Translator(pattern).run()
    except PatternRefused:
        raise
    except (IndexError, KeyError, ValueError) as error:  # a form `re` reads that the translation does not know
        raise PatternRefused(f"{pattern!r} is not supported by linear-time matching ({error}); rewrite it with "
                             "the constructs RE2 supports") from None
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # a refused pattern is the caller's answer, not a line on the server's stderr
    options.case_sensitive = case_sensitive
    try:
        compiled = re2.compile(translated, options)
    except re2.error as error:
        raise _re2_refusal(pattern, error) from None
    size = compiled.programsize
    if size > MAX_PROGRAM_SIZE:
        raise PatternRefused(f"{pattern!r} compiles to {size:,} steps, more than linear-time matching takes "
                             f"({MAX_PROGRAM_SIZE:,}); use smaller repetition counts (.{{0,500}} is about 4,500 "
                             "steps)")
    return Pattern(pattern, case_sensitive, compiled, min(MAX_TEXT_BYTES, WORK_BUDGET // max(size, 1)))


def _re2_refusal(pattern: str, error: Exception) -> PatternRefused:
    reason = error.args[0] if error.args else str(error)
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    if reason.startswith(("invalid repetition size", "bad repetition operator")):
        return PatternRefused(f"{pattern!r} repeats more than linear-time matching allows ({reason}); use counts of "
                              "at most 1000 in all, or * and +")
    if reason.startswith("pattern too large"):
        return PatternRefused(f"{pattern!r} is too large for linear-time matching ({reason}); use smaller "
                              "repetition counts")
    return PatternRefused(f"{pattern!r} is not supported by linear-time matching ({reason}); rewrite it with "
                          "the constructs RE2 supports")


def _unsupported(pattern: str, construct: str, hint: str) -> PatternRefused:
    return PatternRefused(f"{pattern!r} uses {construct}, which linear-time matching does not support; {hint}")


def _code_point(value: int) -> str:
    return f"\\x{{{value:x}}}"


class _Translator:
    """Python's syntax to RE2's, for a pattern `re` has already parsed (so the scan may assume it is well formed)."""

    def __init__(self, pattern: str) -> None:
        self.pattern, self.at, self.out = pattern, 0, []
        self.multiline = False
        self.saved: list[bool] = []  # `multiline` as each open group found it
        self.after_repeat = False

    def refuse(self, construct: str, hint: str) -> PatternRefused:
        return _unsupported(self.pattern, construct, hint)

    def run(self) -> str:
        text = self.pattern
        while self.at < len(text):
            char = text[self.at]
            repeat = False
            if char == "\\":
                self.out.append(self.escape(in_set=False))
            elif char == "[":
                self.char_set()
            elif char == "(":
                self.group()
            elif char == ")":
                self.multiline = self.saved.pop() if self.saved else self.multiline
                self.out.append(")")
                self.at += 1
            elif char == "$":
                # Python's `$` outside MULTILINE also matches before a final newline; RE2's only at the very end
                self.out.append("$" if self.multiline else "(?:\\n?\\z)")
                self.at += 1
            elif char in "*+?":
                self.quantifier(char)
                repeat = True
            elif char == "{":
                repeat = self.braces()
            else:
                self.out.append(_code_point(ord(char)) if char in "]}" else char)
                self.at += 1
            self.after_repeat = repeat
        return "".join(self.out)

    def quantifier(self, char: str) -> None:
        if self.after_repeat and char == "+":
            raise self.refuse("a possessive quantifier (*+, ++, ?+ or {m,n}+)", "drop the + after the quantifier")
        if self.after_repeat and char == "?":  # lazy: RE2 has it
            self.out.append("?")
            self.at += 1
            self.after_repeat = False
            return
        self.out.append(char)
        self.at += 1

    def braces(self) -> bool:
        """`{m,n}` as RE2 writes it (Python reads `{,n}` as `{0,n}`), or a literal `{` as Python reads it."""
        found = _BRACES.match(self.pattern, self.at)
        if found is None or found.group(0) == "{}":
            self.out.append(_code_point(ord("{")))
            self.at += 1
            return False
        low, comma, high = found.group(1), found.group(2), found.group(3)
        if self.after_repeat:  # `a*{2}` is refused by `re` ("multiple repeat"); kept for the scan's sake
            raise self.refuse("a repeated repetition", "group it first, (?:a*){2}")
        self.out.append(f"{{{low or 0}" + ("," + (high or "") if comma else "") + "}")
        self.at = found.end()
        return True

    def group(self) -> None:
        text, at = self.pattern, self.at
        self.saved.append(self.multiline)
        if not text.startswith("(?", at):
            self.out.append("(")
            self.at += 1
            return
        rest = text[at + 2:]
        if rest.startswith(":"):
            self.out.append("(?:")
            self.at += 3
        elif rest.startswith("P<"):
            end = text.index(">", at) + 1
            self.out.append(text[at:end])
            self.at = end
        elif rest.startswith("P="):
            raise self.refuse(f"a backreference ({text[at:text.index(')', at) + 1]})", "rewrite it without a "
                                                                                      "backreference")
        elif rest.startswith(("=", "!")):
            raise self.refuse(f"a lookahead ((?{rest[0]}...))", "rewrite it without a lookahead (a second regex "
                                                                 "term can check what follows)")
        elif rest.startswith(("<=", "<!")):
            raise self.refuse(f"a lookbehind ((?{rest[:2]}...))", "rewrite it without a lookbehind")
        elif rest.startswith(">"):
            raise self.refuse("an atomic group ((?>...))", "write it as a plain group, (?:...)")
        elif rest.startswith("("):
            raise self.refuse("a conditional group ((?(1)...|...))", "rewrite it with alternatives, (?:a|b)")
        elif rest.startswith("#"):
            self.saved.pop()
            self.at = text.index(")", at) + 1  # a comment ends at the first `)`, as Python reads it
            return
        else:
            self.flags()

    def flags(self) -> None:
        """`(?flags)` (global: `re` allows them only at the start) or `(?flags-flags:...)` (scoped)."""
        text = self.pattern
        end = self.at + 2
        while text[end] in _FLAGS + "-":
            end += 1
        added, _, removed = text[self.at + 2:end].partition("-")
        if "x" in added or "x" in removed:
            raise self.refuse("the verbose flag ((?x))", "remove it, and write the pattern without layout spaces "
                                                         "or # comments")
        # `a` (ASCII) is what RE2's classes are already; `u` (Unicode) is `re`'s default for text, not RE2's
        added = "".join(f for f in added if f in "ims")
        removed = "".join(f for f in removed if f in "ims")
        scoped = text[end] == ":"
        if "m" in added:
            self.multiline = True
        if "m" in removed:
            self.multiline = False
        written = added + ("-" + removed if removed else "")
        if scoped:
            self.out.append(f"(?{written}:" if written else "(?:")
        else:
            self.saved.pop()  # a global flag opens no group
            self.out.append(f"(?{written})" if written else "")
        self.at = end + 1

    def char_set(self) -> None:
        text = self.pattern
        self.out.append("[")
        self.at += 1
        if text[self.at] == "^":
            self.out.append("^")
            self.at += 1
        first = True
        while True:
            char = text[self.at]
            if char == "]" and not first:
                self.out.append("]")
                self.at += 1
                return
            first = False
            if char == "\\":
                self.out.append(self.escape(in_set=True))
            elif char in "[]^":  # `[` is POSIX's `[:alpha:]` in RE2, a literal in Python
                self.out.append(_code_point(ord(char)))
                self.at += 1
            else:
                self.out.append(char)
                self.at += 1

    def escape(self, *, in_set: bool) -> str:
        text, at = self.pattern, self.at
        char = text[at + 1]
        self.at = at + 2
        if char in "dDsSwW" or char in "afnrtv\\":
            return "\\" + char
        if char in "AbB" and not in_set:
            return "\\" + char
        if char == "b":  # in a set, a backspace
            return _code_point(8)
        if char == "Z":
            return "\\z"
        if char == "x":
            self.at = at + 4
            return _code_point(int(text[at + 2:at + 4], 16))
        if char in "uU":
            width = 4 if char == "u" else 8
            self.at = at + 2 + width
            return _code_point(int(text[at + 2:self.at], 16))
        if char == "N":
            end = text.index("}", at)
            self.at = end + 1
            return _code_point(ord(unicodedata.lookup(text[at + 3:end])))
        if char.isdigit():
            return self.number(char, in_set=in_set)
        return _code_point(ord(char))  # an escaped punctuation mark, space or other literal

    def number(self, char: str, *, in_set: bool) -> str:
        """An octal escape (`\\0`, `\\012`, `\\101`), or outside a set a backreference (`\\1`)."""
        text, at = self.pattern, self.at - 2
        digits = text[at + 1:at + 4]
        if char == "0" or in_set:
            octal = char
            while len(octal) < 3 and at + 1 + len(octal) < len(text) and text[at + 1 + len(octal)] in _OCTAL:
                octal += text[at + 1 + len(octal)]
            self.at = at + 1 + len(octal)
            return _code_point(int(octal, 8))
        if len(digits) == 3 and all(d in _OCTAL for d in digits):
            self.at = at + 4
            return _code_point(int(digits, 8))
        reference = char + (text[at + 2] if at + 2 < len(text) and text[at + 2].isdigit() else "")
        raise self.refuse(f"a backreference (\\{reference})", "rewrite it without a backreference")
