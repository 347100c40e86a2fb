"""Row rules: each one refuses with words that say what to change; valid rows pass and are counted."""

from __future__ import annotations

import pytest

from optimize.chat.rows import RowError, RowKind, check_row
from tests.row_cases import BAD_CHAT_ROWS, BAD_PAIRS, GOOD_CHAT_ROWS, GOOD_PAIRS


@pytest.mark.parametrize(("case", "row", "words"), BAD_CHAT_ROWS, ids=[c[0] for c in BAD_CHAT_ROWS])
def test_bad_chat_row_is_refused_with_reason(case, row, words):
    with pytest.raises(RowError) as refused:
        check_row(row, RowKind.CHAT)
    assert words in str(refused.value)


@pytest.mark.parametrize(("case", "row"), GOOD_CHAT_ROWS, ids=[c[0] for c in GOOD_CHAT_ROWS])
def test_good_chat_row_passes(case, row):
    facts = check_row(row, RowKind.CHAT)
    assert facts.offers_tools == bool(row.get("tools"))


@pytest.mark.parametrize(("case", "row", "words"), BAD_PAIRS, ids=[c[0] for c in BAD_PAIRS])
def test_bad_pair_is_refused_with_reason(case, row, words):
    with pytest.raises(RowError) as refused:
        check_row(row, RowKind.PREFERENCE)
    assert words in str(refused.value)


@pytest.mark.parametrize(("case", "row"), GOOD_PAIRS, ids=[c[0] for c in GOOD_PAIRS])
def test_good_pair_passes(case, row):
    assert check_row(row, RowKind.PREFERENCE).offers_tools == bool(row.get("tools"))


def test_rules_do_not_modify_the_row():
    import copy

    row = GOOD_CHAT_ROWS[3][1]
    before = copy.deepcopy(row)
    check_row(row, RowKind.CHAT)
    assert row == before
