"""`akka server settings` (every `OPTIMIZE_*` setting with the value in effect here, secrets masked, the set ones
marked; text and `-o json`), and `akka server start` refusing a malformed setting in one line, exit 2, before it
binds its port."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from optimize.core.environment import MASK, SETTINGS
from tests.conftest import Cli

pytestmark = pytest.mark.integration
SECRET = "tok-9f8e7d6c5b4a"


@pytest.fixture
def settings_env(monkeypatch):
    for entry in SETTINGS:
        monkeypatch.delenv(entry.name, raising=False)
    monkeypatch.setenv("OPTIMIZE_LEASE_SECONDS", "45")
    monkeypatch.setenv("OPTIMIZE_TOKEN", SECRET)
    monkeypatch.setenv("OPTIMIZE_OUTBOUND_HOSTS", "Grader.example:8080")
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no meaning wraps


def test_settings_lists_every_setting_with_the_value_in_effect_marking_the_set_ones(capsys, settings_env):
    done = Cli(capsys, "http://127.0.0.1:9")("server", "settings")
    assert done.code == 0 and done.err == ""
    rows = [re.match(r"([* ])  (OPTIMIZE_\w+) ", line) for line in done.out.splitlines()]  # not wrapped meanings
    lines = {row.group(2): row.string for row in rows if row}
    assert set(lines) == {entry.name for entry in SETTINGS}
    assert lines["OPTIMIZE_LEASE_SECONDS"].split()[:4] == ["*", "OPTIMIZE_LEASE_SECONDS", "45", "60"]
    assert lines["OPTIMIZE_TOKEN"].split()[:3] == ["*", "OPTIMIZE_TOKEN", MASK]
    assert lines["OPTIMIZE_MAX_SHARDS"].split()[:4] == ["OPTIMIZE_MAX_SHARDS", "1000", "1000", "int"]
    assert "How long a worker's job stays held without a heartbeat" in lines["OPTIMIZE_LEASE_SECONDS"]
    assert SECRET not in done.out
    assert done.out.splitlines()[-1] == (f"{len(SETTINGS)} settings, 3 set here (marked *); secrets are masked.")


def test_settings_as_json(capsys, settings_env):
    done = Cli(capsys, "http://127.0.0.1:9")("server", "settings", "-o", "json")
    assert done.code == 0 and SECRET not in done.out
    rows = {row["name"]: row for row in done.json["settings"]}
    assert list(rows) == [entry.name for entry in SETTINGS]
    assert rows["OPTIMIZE_LEASE_SECONDS"] | {"meaning": ""} == {
        "name": "OPTIMIZE_LEASE_SECONDS", "value": 45.0, "shown": "45", "set": True, "default": "60",
        "type": "float", "allowed": "a number of seconds above 0", "meaning": "", "readBy": "server",
        "secret": False, "problem": None}
    assert rows["OPTIMIZE_TOKEN"]["value"] == MASK and rows["OPTIMIZE_TOKEN"]["secret"]
    assert rows["OPTIMIZE_OUTBOUND_HOSTS"]["value"] == ["grader.example:8080"]
    assert rows["OPTIMIZE_EXECUTOR"] | {"meaning": ""} == {
        "name": "OPTIMIZE_EXECUTOR", "value": "local", "shown": "local", "set": False, "default": "local",
        "type": "enum", "allowed": "one of local, ray", "meaning": "", "readBy": "server", "secret": False,
        "problem": None}
    assert sum(row["set"] for row in rows.values()) == 3


def test_settings_names_a_malformed_setting_and_exits_two(capsys, settings_env, monkeypatch):
    monkeypatch.setenv("OPTIMIZE_GC_SECONDS", "hourly")
    cli = Cli(capsys, "http://127.0.0.1:9")
    done = cli("server", "settings")
    assert done.code == 2
    assert done.err.strip() == ("error: OPTIMIZE_GC_SECONDS='hourly' is not a number of seconds of at least 0 (set "
                                "OPTIMIZE_GC_SECONDS to a number of seconds of at least 0, or unset it for the "
                                "default (3600))")
    assert "hourly (malformed)" in done.out
    as_json = cli("server", "settings", "-o", "json")
    assert as_json.code == 2 and as_json.err == ""
    row = next(row for row in as_json.json["settings"] if row["name"] == "OPTIMIZE_GC_SECONDS")
    assert row["value"] is None and row["problem"].startswith("OPTIMIZE_GC_SECONDS='hourly' is not")


def test_a_malformed_setting_refuses_the_start_in_one_line_before_the_port_is_bound(tmp_path):
    # the port is held here: a start that bound first would say it cannot listen, not name the setting
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "optimize", "server", "start", "--port", str(port),
                               "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "OPTIMIZE_LEASE_SECONDS": "soon"})
    assert done.returncode == 2
    assert done.stderr == ("error: OPTIMIZE_LEASE_SECONDS='soon' is not a number of seconds above 0 (set "
                           "OPTIMIZE_LEASE_SECONDS to a number of seconds above 0, or unset it for the default "
                           "(60))\n")
    assert done.stdout == "" and not (tmp_path / "data").exists()  # nothing made, nothing announced
