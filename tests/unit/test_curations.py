"""Curations without a server: a request is refused by field in its own words (an unknown field by name), the
verdict rule (kept at the threshold or more, below it rejected with the score, an unreadable reply unscored), how
the judge is asked and the row a kept candidate registers as; migration 0031 makes what the tables declare."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from optimize.core.errors import Invalid
from optimize.curation.verdicts import Reason, asked, judged, kept_row, too_long
from optimize.schemas.curations import CurationRequest
from optimize.scoring.judge import JUDGE_INSTRUCTIONS
from optimize.store.migrate import alembic_config
from optimize.store.tables import Base
from tests.conftest import migrated_store

HASH = "ab" * 32
VALID = {"curationId": "triage-curation-1", "project": "support", "sessionHashes": [HASH],
         "judge": "optimize/tiny-llama-3.2", "instructions": "Keep answers that solve the problem.", "threshold": 0.7,
         "dataset": "support/curated"}


def refusal(**changes) -> str:
    body = {**VALID, **changes}
    for key in [k for k, v in changes.items() if v is ...]:
        del body[key]
    with pytest.raises(Invalid) as refused:
        CurationRequest.parse(body)
    return refused.value.message


def test_a_valid_request_reads_with_its_defaults():
    request = CurationRequest.parse(VALID)
    assert request.threshold == 0.7 and request.system_prompt is None and request.device_profile is None
    assert CurationRequest.parse({**VALID, "threshold": 1}).threshold == 1  # an integer is a number
    assert CurationRequest.parse({**VALID, "sessionHashes": [f"sha256:{HASH.upper()}"]}).session_hashes


@pytest.mark.parametrize(("changes", "words"), [
    ({"threshold": 1.5}, "threshold must be a number from 0 to 1"),
    ({"threshold": -0.1}, "threshold must be a number from 0 to 1"),
    ({"threshold": "high"}, "threshold must be a number from 0 to 1"),
    ({"threshold": ...}, "a curation needs threshold"),
    ({"instructions": ""}, "instructions must be text of 1 to 32,768 characters"),
    ({"instructions": "   "}, "instructions must be text of 1 to 32,768 characters"),
    ({"instructions": "x" * 32_769}, "instructions must be text of 1 to 32,768 characters"),
    ({"instructions": ...}, "a curation needs instructions"),
    ({"sessionHashes": []}, "sessionHashes must be a list of 1 to 100 session hashes"),
    ({"sessionHashes": ["not-a-hash"]}, "sessionHashes must be a list of 1 to 100 session hashes"),
    ({"sessionHashes": HASH}, "sessionHashes must be a list"),
    ({"sessionHashes": ...}, "a curation needs sessionHashes"),
    ({"judge": ...}, "a curation needs judge"),
    ({"dataset": ...}, "a curation needs dataset"),
    ({"curationId": "has space"}, "curationId must be 1 to 128 letters"),
    ({"source": "csv"}, "source must be oasst1, otel or canonical"),
    ({"treshold": 0.5, "teacher": "x"}, "unknown field(s): teacher, treshold"),
])
def test_each_field_is_refused_in_its_own_words(changes, words):
    assert words in refusal(**changes)


def test_a_body_that_is_no_object_is_refused():
    with pytest.raises(Invalid, match="a curation request is one object"):
        CurationRequest.parse(["sessionHashes"])


def test_the_verdict_keeps_a_score_at_the_threshold_or_more():
    kept = judged("optimize/judge", '{"score": 0.7, "explanation": "solves it"}', 0.7)
    assert kept.kept and kept.score == 0.7 and kept.reason is None
    low = judged("optimize/judge", 'Sure! {"score": 0.4, "explanation": "vague"}', 0.7)
    assert not low.kept and low.reason is Reason.BELOW_THRESHOLD and low.score == 0.4
    assert low.detail == "score 0.4 below threshold 0.7; vague"
    assert judged("optimize/judge", '{"score": true}', 1.0).kept  # a boolean counts as 0 or 1
    assert judged("optimize/judge", '{"score": 0}', 0).kept  # threshold 0 keeps every scored candidate


@pytest.mark.parametrize("reply", ["I think it is good.", '{"score": 7}', '{"grade": 0.9}', ""])
def test_a_reply_without_a_score_between_0_and_1_is_unscored(reply):
    verdict = judged("optimize/judge", reply, 0.0)
    assert not verdict.kept and verdict.reason is Reason.UNSCORED and verdict.score is None
    assert "gave no score between 0 and 1" in verdict.detail
    assert too_long(900, 512).reason is Reason.PROMPT_TOO_LONG


def test_the_judge_is_asked_with_the_instructions_then_the_reply_form():
    messages = [{"role": "system", "content": "You are support."}, {"role": "user", "content": "Reset my password"},
                {"role": "assistant", "content": "Click 'Forgot password'.",
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {}}}]}]
    system, user = asked(messages, "Keep helpful answers.")
    assert system == {"role": "system", "content": f"Keep helpful answers.\n\n{JUDGE_INSTRUCTIONS}"}
    assert user["content"].startswith("Input:\nsystem: You are support.\nuser: Reset my password\n\nOutput:\n")
    assert "Click 'Forgot password'.\n[tool call]" in user["content"] and '"name": "lookup"' in user["content"]


def test_a_kept_row_takes_the_system_prompt_first_in_place_of_its_own():
    candidate = {"id": "a1", "source": "oasst1", "meta": {"lang": "en"},
                 "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    assert kept_row(candidate, None) == {"messages": candidate["messages"]}
    assert kept_row(candidate, "Be kind.")["messages"][0] == {"role": "system", "content": "Be kind."}
    with_own = {**candidate, "messages": [{"role": "system", "content": "old"}, *candidate["messages"]],
                "tools": [{"type": "function", "function": {"name": "f"}}]}
    row = kept_row(with_own, "new")
    assert [m["content"] for m in row["messages"]] == ["new", "hi", "hello"] and row["tools"] == with_own["tools"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def test_the_migration_makes_what_the_tables_declare_and_goes_down_and_up(store):
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert not [d for d in differences if "curation" in repr(d)], differences
        assert {tuple(u["column_names"]) for u in inspect(connection).get_unique_constraints("curations")} == {
            ("key",)}
    command.downgrade(alembic_config(store.url), "0030")
    with store.engine.connect() as connection:
        assert not {"curations", "curation_verdicts"} & set(inspect(connection).get_table_names())
    command.upgrade(alembic_config(store.url), "head")
    with store.engine.connect() as connection:
        assert {"curations", "curation_verdicts"} <= set(inspect(connection).get_table_names())
