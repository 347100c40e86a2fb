"""Per-project quota settings: the deployment's defaults, projects set apart, and bad settings refused by name
(also by `akka server start`, before it binds a port)."""

from __future__ import annotations

import pytest

from optimize.core.errors import Invalid
from optimize.core.quotas import GIB, Quota, quotas_from_env


def test_defaults_and_projects_set_apart():
    quotas = quotas_from_env({"OPTIMIZE_QUOTA_OPEN_RUNS": "7",
                              "OPTIMIZE_PROJECT_QUOTAS": '{"Shop": {"queuedWork": 2, "storedBytes": 10}}'})
    assert quotas.of("other") == Quota(open_runs=7)
    assert quotas.of("shop") == Quota(open_runs=7, queued_work=2, stored_bytes=10)  # the rest from the defaults
    assert quotas_from_env({}).of("x").stored_bytes == 500 * GIB
    assert quotas.to_json()["projects"]["shop"] == {"openRuns": 7, "queuedWork": 2, "uploadSessions": 100,
                                                    "storedBytes": 10}


@pytest.mark.parametrize(("env", "named"), [
    ({"OPTIMIZE_QUOTA_QUEUED_WORK": "-1"}, "OPTIMIZE_QUOTA_QUEUED_WORK must be a whole number"),
    ({"OPTIMIZE_QUOTA_STORED_BYTES": "1e9"}, "OPTIMIZE_QUOTA_STORED_BYTES must be a whole number"),
    ({"OPTIMIZE_PROJECT_QUOTAS": "{"}, "OPTIMIZE_PROJECT_QUOTAS is not JSON"),
    ({"OPTIMIZE_PROJECT_QUOTAS": "[1]"}, "must map project names to quotas"),
    ({"OPTIMIZE_PROJECT_QUOTAS": '{"shop": {"runs": 1}}'}, "OPTIMIZE_PROJECT_QUOTAS['shop']: runs is not a quota"),
    ({"OPTIMIZE_PROJECT_QUOTAS": '{"shop": {"openRuns": true}}'}, "shop.openRuns must be a whole number"),
])
def test_a_bad_setting_is_refused_by_name(env, named):
    with pytest.raises(Invalid, match=named.replace("[", r"\[").replace("]", r"\]")):
        quotas_from_env(env)


def test_the_server_refuses_to_start_on_a_bad_quota(monkeypatch, tmp_path, capsys):
    from optimize.cli.main import main

    monkeypatch.setenv("OPTIMIZE_QUOTA_OPEN_RUNS", "many")
    assert main(["server", "start", "--port", "0", "--data-dir", str(tmp_path)]) == 2  # a usage error
    assert "OPTIMIZE_QUOTA_OPEN_RUNS must be a whole number of at least 0, not 'many'" in capsys.readouterr().err
    assert not (tmp_path / "server.json").exists()
