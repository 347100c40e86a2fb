"""`akka registry datasets get`: the `Lineage` line of a version a job produced, rendered from its lineage."""

from __future__ import annotations

import io

from rich.console import Console

from optimize.cli.commands.datasets import _render_version, lineage_line

LINEAGE = {
    "producedBy": {"kind": "distillation", "id": "1a2b3c4d5e6f"},
    "teacher": {"reference": "optimize/tiny-llama-3.2", "commit": "0123456789abcdef0123456789abcdef01234567"},
    "source": {"reference": "demo/src:v1", "digest": "sha256:" + "ab" * 32},
    "settings": {"maxTokens": 64},  # a key the line does not know: not shown
}
VERSION = {
    "reference": "demo/out:v1", "dataset": "demo/out", "namespace": "demo", "name": "out", "version": 1,
    "digest": "sha256:" + "cd" * 32, "format": "chat-jsonl-v1", "examples": 3, "toolRows": 0, "shards": 1,
    "bytes": 300, "aliases": ["latest"], "archived": False, "createdAt": "2026-01-01T00:00:00Z", "conversion": None,
    "lineage": LINEAGE, "objects": [], "kind": "chat", "versionCount": 1,
}


def rendered(item: dict) -> list[str]:
    buffer = io.StringIO()
    _render_version(Console(file=buffer, width=160, highlight=False), item)
    return buffer.getvalue().splitlines()


def test_the_line_names_producer_teacher_and_source():
    assert lineage_line(LINEAGE) == ("distillation 1a2b3c4d5e6f: teacher optimize/tiny-llama-3.2 "
                                     "(commit 0123456789ab), from demo/src:v1")


def test_get_shows_a_lineage_line_after_created():
    lines = rendered(VERSION)
    (line,) = [line for line in lines if line.startswith("Lineage")]
    assert line == ("Lineage   distillation 1a2b3c4d5e6f: teacher optimize/tiny-llama-3.2 (commit 0123456789ab), "
                    "from demo/src:v1")
    assert lines.index(line) == next(i for i, text in enumerate(lines) if text.startswith("Created")) + 1


def test_an_uploaded_version_has_no_lineage_line():
    assert not [line for line in rendered({**VERSION, "lineage": None}) if line.startswith("Lineage")]
    assert not [line for line in rendered({k: v for k, v in VERSION.items() if k != "lineage"})
                if line.startswith("Lineage")]


def test_parts_are_shown_as_far_as_they_are_known():
    assert lineage_line(None) is None and lineage_line({}) is None and lineage_line({"other": 1}) is None
    assert lineage_line({"producedBy": {"kind": "distillation", "id": "d1"}}) == "distillation d1"
    assert lineage_line({"teacher": {"reference": "ns/teacher:v2"}}) == "teacher ns/teacher:v2"
    assert lineage_line({"producedBy": {"kind": "job"}, "source": {"digest": "sha256:" + "ef" * 32}}) == (
        "job: from sha256:efefefefefef")
    assert lineage_line({"producedBy": "not an object", "teacher": ["nor this"]}) is None
