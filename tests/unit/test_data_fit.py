"""Fitting rows into maxSeqLength under each data.truncation value, counted against an independent measure
(the tokenizer's own apply_chat_template)."""

from __future__ import annotations

import pytest

from optimize.chat.render import LossPolicy
from optimize.training.prep.data_fit import Fitter, RowRefused

FAMILY = "llama3.2"


def conversation(turns: int, words: int = 30) -> dict:
    messages = [{"role": "system", "content": "You answer support tickets."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: " + "order refund " * words},
                     {"role": "assistant", "content": f"Answer {i}: shipped."}]
    return {"messages": messages}


def length(renderers, row) -> int:
    from optimize.chat.families import template_kwargs

    tokenizer = renderers[FAMILY].tokenizer
    return len(tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                             **template_kwargs(FAMILY))["input_ids"])


def fitter(renderers, limit, truncation, policy=LossPolicy()) -> Fitter:
    return Fitter(renderers[FAMILY], policy, limit, truncation)


def test_error_refuses_a_long_row_by_its_line(renderers):
    row = conversation(3)
    limit = length(renderers, row) - 1
    with pytest.raises(RowRefused, match=r"^d:v1 line 4 is \d+ tokens long, longer than maxSeqLength"):
        fitter(renderers, limit, "error").fit(row, "d:v1 line 4")
    assert fitter(renderers, limit + 1, "error").fit(row, "x") is not None


def test_drop_leaves_long_rows_out_and_counts_them(renderers):
    rows = [conversation(1), conversation(4), conversation(6)]
    limit = length(renderers, rows[0])
    fit = fitter(renderers, limit, "drop")
    kept = [fit.fit(row, f"line {i}") for i, row in enumerate(rows, 1)]
    assert [k is not None for k in kept] == [True, False, False]
    assert fit.counts.as_json() == {"rows": 1, "tooLong": 2, "trimmed": 0, "turnsRemoved": 0, "cut": 0}


def test_oldest_removes_whole_turns_until_the_row_fits(renderers):
    row = conversation(5)
    # what the row is with its two oldest turns removed, measured by the tokenizer itself
    two_removed = {"messages": [row["messages"][0], *row["messages"][5:]]}
    limit = length(renderers, two_removed)
    fit = fitter(renderers, limit, "oldest")
    rendered = fit.fit(row, "line 1")
    assert len(rendered.input_ids) == limit
    assert rendered.text.startswith(renderers[FAMILY].text(two_removed["messages"], None)[:40])
    assert "Question 2:" in rendered.text and "Question 1:" not in rendered.text
    assert "You answer support tickets." in rendered.text  # the system prompt stays
    assert fit.counts.trimmed == 1 and fit.counts.turns_removed == 2


def test_oldest_refuses_what_cannot_fit_and_oldest_or_drop_leaves_it_out(renderers):
    row = conversation(3, words=200)  # the final turn alone is longer than the limit
    limit = 64
    with pytest.raises(RowRefused, match="still .* with its oldest turns removed.*oldest_or_drop"):
        fitter(renderers, limit, "oldest").fit(row, "line 9")
    fit = fitter(renderers, limit, "oldest_or_drop")
    assert fit.fit(row, "line 9") is None and fit.counts.too_long == 1


def test_a_long_row_with_an_explicit_mask_is_refused_under_oldest(renderers):
    row = conversation(4)
    full = renderers[FAMILY].render(row)
    row["mask"] = [0] * (len(full.input_ids) - 1) + [1]
    policy = LossPolicy(explicit_mask_column="mask")
    with pytest.raises(RowRefused, match="carries 'mask', whose mask covers the whole conversation"):
        fitter(renderers, len(full.input_ids) - 5, "oldest", policy).fit(row, "line 2")


def test_right_cuts_past_the_limit_but_never_a_trained_token(renderers):
    row = conversation(2)
    full = renderers[FAMILY].render(row)
    n = len(full.input_ids)
    policy = LossPolicy(explicit_mask_column="mask")
    row["mask"] = [0] * 5 + [1] * 5 + [0] * (n - 10)
    fit = fitter(renderers, 20, "right", policy)
    cut = fit.fit(row, "line 1")
    assert cut.input_ids == full.input_ids[:20] and cut.loss_mask == row["mask"][:20] and fit.counts.cut == 1
    row["mask"] = [0] * (n - 1) + [1]
    with pytest.raises(RowRefused, match="its mask selects tokens past maxSeqLength 20"):
        fitter(renderers, 20, "right", policy).fit(row, "line 1")


def test_a_dataset_without_any_mask_is_refused_when_masks_are_named(renderers):
    from optimize.training.prep.data_fit import require_masks

    fit = fitter(renderers, 4096, "error", LossPolicy(explicit_mask_column="mask"))
    fit.fit(conversation(1), "line 1")
    with pytest.raises(RowRefused, match="d/t:v1 holds no row with a mask under 'mask'"):
        require_masks(fit, "d/t:v1")
    row = conversation(1)
    n = len(renderers[FAMILY].render(row).input_ids)
    fit.fit({**row, "mask": [0] * (n - 1) + [1]}, "line 2")
    require_masks(fit, "d/t:v1")  # one mask is enough; rows without one use the other loss settings
