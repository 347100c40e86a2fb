"""A failed analysis as users meet it: a row the template fails on is named by its line and not retried; the
Lengths section and the dry run say the failure once and suggest a retry only where one could succeed; a run's
length check agrees with how the run ended."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from optimize.training.admission.lengths import Subject, section

SUBJECT = Subject("training", "ns/d:v1", "sha256:" + "a" * 64)
COMMAND = "akka training datasets analyze ns/d:v1 --model m"


def failed(refused: bool, reason: str) -> SimpleNamespace:
    return SimpleNamespace(id="0123456789abcdef", phase="failed", reason=reason, refused=refused, report=None,
                           base_commit="c" * 40)


def test_a_row_the_template_fails_on_refuses_the_analysis_naming_its_line(monkeypatch):
    from optimize.analysis import measure
    from optimize.worker import analysis

    def measure_rows(_renderer, rows, _kind):
        if any(row.get("boom") for row in rows):
            raise TypeError('can only concatenate str (not "list") to str')
        return [len(rows)] * len(rows)

    monkeypatch.setattr(measure, "measure_rows", measure_rows)
    assert analysis._measured(None, [1, 2], [{}, {}], "chat", "org/m") == [2, 2]
    with pytest.raises(analysis._Refusal) as refused:
        analysis._measured(None, [7, 8, 9], [{}, {"boom": True}, {}], "chat", "org/m")
    assert str(refused.value) == ("line 8: org/m's chat template or tokenizer fails on this row (TypeError: can only "
                                  "concatenate str (not \"list\") to str); fix or remove the row")


def test_a_failed_analysis_is_said_once_with_a_retry_only_where_one_could_succeed():
    lost = section(failed(False, "RuntimeError: base model m is not in this host's model cache"), SUBJECT, "m",
                   "c" * 40, 64, "error", None)
    assert lost["status"] == "failed" and lost["command"] == f"{COMMAND} --wait" and "log" not in lost
    assert lost["note"] == "analysis 0123456789ab failed: RuntimeError: base model m is not in this host's model cache"
    bad_row = section(failed(True, "line 8: the row fails"), SUBJECT, "m", "c" * 40, 64, "error", None)
    assert "command" not in bad_row and bad_row["log"] == "akka training datasets logs 0123456789ab"
    older = section(failed(False, "the analysis failed: TypeError: x"), SUBJECT, "m", "c" * 40, 64, "error", None)
    assert older["note"] == "analysis 0123456789ab failed: TypeError: x"  # older workers' words, said once


@pytest.mark.parametrize("refused", [False, True])
def test_the_dry_run_says_a_failure_once(refused):
    from rich.console import Console

    from optimize.cli.dry_run import render_dry_run

    lengths = section(failed(refused, "the analysis failed: TypeError: x"), SUBJECT, "m", "c" * 40, 64, "error", None)
    dry = {"project": "p", "modelName": "m1", "baseModel": {"id": "m", "commit": "c" * 40},
           "envelope": {"status": "unmeasured", "mode": "advisory"}, "warnings": [],
           "resolved": {"lengths": [lengths], "sources": {}}, "diagnostics": []}
    sink = io.StringIO()
    render_dry_run(Console(file=sink, width=300), dry, False)
    text = sink.getvalue()
    assert text.count("failed") == 1 and text.count("TypeError: x") == 1, text
    if refused:
        assert "analyze" not in text and "another attempt would fail the same way" in text
        assert "akka training datasets logs 0123456789ab" in text
    else:
        assert f"try it again with: {COMMAND} --wait" in text


@pytest.mark.parametrize("phase, status, shown", [
    ("CANCELLED", "waiting", "notRun"),  # it ended before its analyses were done: the check never ran
    ("FAILED", "waiting", "notRun"),
    ("QUEUED", "waiting", "waiting"),
    ("FAILED", "refused", "refused"),
    ("COMPLETED", "passed", "passed"),
])
def test_a_run_s_length_check_agrees_with_how_it_ended(phase, status, shown):
    from optimize.training.server.views import _length_check

    check = {"status": status, "datasets": [{"role": "training", "dataset": "ns/d:v1", "status": "none"}]}
    assert _length_check(SimpleNamespace(phase=phase, length_check=check))["status"] == shown
