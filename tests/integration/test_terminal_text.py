"""Text from users reaches the terminal with its control sequences escaped: a description that would clear the
screen, retitle the window or recolour what follows prints as visible escapes, in tables, in a project's page and in
errors that echo what the user typed; JSON output keeps the text as it was stored."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.integration
HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m\u202etxt"
SHOWN = "evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202etxt"


def _raw_controls(text: str) -> list[str]:
    """Control characters left in printed text other than newline and tab (and Rich's own styling)."""
    return re.findall("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", re.sub("\x1b\\[[0-9;]*m", "", text))


@pytest.fixture
def project(sqlite_server, capsys) -> str:
    name = f"tty{uuid.uuid4().hex[:10]}"
    Cli(capsys, sqlite_server.url).ok("training", "projects", "create", name, "--description", HOSTILE)
    return name


def test_a_description_lists_escaped_and_stays_whole_in_json(sqlite_server, capsys, project):
    cli = Cli(capsys, sqlite_server.url)
    listed = cli.ok("training", "projects", "list")
    assert SHOWN in listed.out and _raw_controls(listed.out) == []
    assert cli.json("training", "projects", "get", project)["description"] == HOSTILE


def test_a_project_page_and_an_error_echoing_a_name_print_escaped(sqlite_server, capsys, project):
    """Needs `cli/output.py` to print through `safe_text.SafeConsole` (every console, errors included)."""
    cli = Cli(capsys, sqlite_server.url)
    shown = cli.ok("training", "projects", "get", project)
    assert "evil\\x1b]0;pwned" in shown.out and "\\x1b[2J\\x9b31m\\u202etxt" in shown.out  # (Rich drops the bell)
    assert _raw_controls(shown.out) == []
    from optimize.cli.output import print_error

    capsys.readouterr()
    print_error(f"dataset {HOSTILE}/x does not exist", f"see {HOSTILE}", [f"line 1: {HOSTILE}"])  # as a server says
    err = capsys.readouterr().err
    assert err.count("\\x1b[2J\\x9b31m\\u202etxt") == 3 and _raw_controls(err) == []
