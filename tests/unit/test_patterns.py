"""User-supplied regular expressions in linear time: patterns that make Python's `re` backtrack for minutes finish
at once, constructs that need backtracking are refused naming the field and the construct, Python's syntax keeps
its meaning (`$` before a final newline, `\\Z`, `{,n}`, escapes), and one search's text is bounded."""

from __future__ import annotations

import random
import re
import threading
import time

import pytest

from optimize.core.errors import Invalid
from optimize.scoring import Sample, check_member
from optimize.scoring.graders import parse_grader
from optimize.scoring.members import build_builtin
from optimize.scoring.patterns import MAX_TEXT_BYTES, PatternRefused, TextTooLong, compile_pattern


def sample(completion: str) -> Sample:
    return Sample(prompt=[{"role": "user", "content": "q"}], completion=completion, expected=None, fields={})


@pytest.mark.parametrize(("pattern", "text"), [
    (r"^(a+)+$", "a" * 31 + "!"),  # minutes in `re`
    (r"(\w|\S|.)*X", "ab " * 100_000),
    (r"(a|aa)*b", "a" * 100_000),
])
def test_catastrophic_patterns_finish_at_once(pattern, text):
    member = build_builtin({"kind": "regex", "pattern": pattern})
    started = time.monotonic()
    assert [score.value for score in member.score([sample(text)])] == [0.0]
    assert time.monotonic() - started < 0.5


def test_a_long_search_lets_other_threads_run():
    """RE2 releases the interpreter's lock while it matches: a thread beside a long search keeps ticking (were the
    lock held, it could tick at most once before and once after)."""
    pattern = compile_pattern(r"(a|b)*a(a|b){999}c")  # too many states for RE2's cache: its slowest automaton
    text = "".join(random.Random(1).choice("ab") for _ in range(pattern.max_text_bytes // 4))
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.002):
            ticks.append(time.monotonic())

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        time.sleep(0.01)
        started = time.monotonic()
        assert not pattern.search(text)
        ended = time.monotonic()
    finally:
        stop.set()
        thread.join()
    during = [t for t in ticks if started < t < ended]
    assert ended - started > 0.03 and len(during) >= 5, (ended - started, len(during))


@pytest.mark.parametrize(("pattern", "construct", "hint"), [
    (r"(a)\1", r"a backreference (\1)", "rewrite it without a backreference"),
    (r"(?P<x>a)(?P=x)", "a backreference ((?P=x))", "rewrite it without a backreference"),
    (r"a(?=b)", "a lookahead ((?=...))", "rewrite it without a lookahead"),
    (r"a(?!b)", "a lookahead ((?!...))", "rewrite it without a lookahead"),
    (r"(?<=a)b", "a lookbehind ((?<=...))", "rewrite it without a lookbehind"),
    (r"(?<!a)b", "a lookbehind ((?<!...))", "rewrite it without a lookbehind"),
    (r"(?>a+)b", "an atomic group ((?>...))", "write it as a plain group"),
    (r"a++b", "a possessive quantifier", "drop the + after the quantifier"),
    (r"(a)?(?(1)b|c)", "a conditional group", "rewrite it with alternatives"),
    (r"(?x) a b", "the verbose flag ((?x))", "remove it"),
])
def test_constructs_that_need_backtracking_are_refused_naming_the_field(pattern, construct, hint):
    with pytest.raises(Invalid) as caught:
        check_member({"kind": "regex", "pattern": pattern}, where="reward.terms[0]")
    message = caught.value.message
    assert message.startswith(f"reward.terms[0].pattern: {pattern!r} uses {construct}"), message
    assert "which linear-time matching does not support; " + hint in message, message


def test_the_grader_names_its_pattern_and_the_construct():
    with pytest.raises(Invalid) as caught:
        parse_grader(r"regex:(a)\1")
    assert caught.value.message.startswith(r"grader 'regex:(a)\\1': grader.pattern: '(a)\\1' uses a backreference")
    assert parse_grader(r"regex:^\d+$") == r"regex:^\d+$"


def test_what_re2_cannot_hold_is_refused_saying_so():
    with pytest.raises(PatternRefused, match=r"repeats more than linear-time matching allows .*at most 1000"):
        compile_pattern("a{1001}")
    with pytest.raises(PatternRefused, match=r"compiles to 16,004 steps, more than linear-time matching takes"):
        compile_pattern(".{1000}.{1000}")


PATTERNS = [r"^yes$", r"^\d+$", r"<answer>\d+</answer>", r"^\W*[aeiouAEIOU]", r".|^$", r"a\Z", r"(?m)^b$",
            r"(?m:^b$)|c$", r"a{,2}b", r"x{", r"{}", r"[]a]", r"[^]a]+", r"[[]", r"\u0041", r"\N{EN DASH}", r"\101",
            r"\0", r"[\b]", r"\bfoo\b", r"(?#note)a*", r"(?s)a.b", r"(?P<n>a)b", r"a\.b", r"\$\d", r"foo$|bar",
            r"[\w.-]+@[\w.-]+", r"\{\}", r"a}", r"a??b", r"[a-c\x64]", r"(?i)^YES", r"\t\n", r"$"]
TEXTS = ["yes", "yes\n", "YES it is", "12\n", "12\n\n", "so <answer>12</answer>", "  apple", "", "a\n", "a", "b\nc",
         "c\nb\n", "aab", "x{", "{}", "]", "a]b", "[", "A", "\u2013", "\x00", "\x08", "foo bar", "a\nb", "a.b", "$5",
         "me@x.org", "a}", "b", "\t\n", "d"]


@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")  # `re` on `[[]`
@pytest.mark.parametrize("pattern", PATTERNS)
def test_python_syntax_keeps_its_meaning(pattern):
    compiled = compile_pattern(pattern)
    assert [compiled.search(text) for text in TEXTS] == [re.search(pattern, text) is not None for text in TEXTS]


def test_case_and_non_ascii_text():
    assert compile_pattern("^yes", case_sensitive=False).search("YES it is")
    assert not compile_pattern("^yes").search("YES it is")
    assert compile_pattern("caf.$").search("café")
    assert compile_pattern("a.b").search("a\ud800b")  # a lone surrogate is a character, not an error


def test_a_text_longer_than_one_search_reads_is_unscored_saying_why():
    small, large = compile_pattern("x"), compile_pattern(".{0,500}x")
    assert small.max_text_bytes == MAX_TEXT_BYTES and large.max_text_bytes < MAX_TEXT_BYTES
    with pytest.raises(TextTooLong, match="this pattern is matched against at most"):
        large.search("a" * (large.max_text_bytes + 1))
    [score] = build_builtin({"kind": "regex", "pattern": "x"}).score([sample("x" * (MAX_TEXT_BYTES + 1))])
    assert score.value is None and score.error.startswith("TextTooLong: the text is 1,048,577 bytes of UTF-8")
