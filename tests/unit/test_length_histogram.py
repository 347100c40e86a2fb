"""An analysis' row lengths as equal-width bins (`analysis.histogram`), read from the per-row figures its worker
stores, with the rows over each common maxSeqLength limit up to the first one the longest row fits."""

from __future__ import annotations

import json

from optimize.analysis.histogram import histogram


def lengths_file(tmp_path, lengths):
    path = tmp_path / "lengths.jsonl"
    path.write_text("".join(json.dumps([n, n, 1]) + "\n" for n in lengths))
    return path


def shown(answer) -> dict:
    return answer.model_dump(mode="json", by_alias=True)


def test_bins_span_one_token_to_the_longest_row_and_count_every_row(tmp_path):
    lengths = [1, 10, 10, 11, 600, 1030, 1030]
    found = shown(histogram("a1", lengths_file(tmp_path, lengths), 10))
    assert found["rows"] == 7 and found["longest"] == 1030 and found["width"] == 103
    assert len(found["bins"]) == 10 and found["bins"][0] == {"from": 1, "to": 103, "rows": 4}
    assert found["bins"][-1] == {"from": 928, "to": 1030, "rows": 2}
    assert sum(b["rows"] for b in found["bins"]) == 7
    # 512 and 1024 are below the longest row; 2048 is the first it fits
    assert found["limits"] == [{"limit": 512, "over": 3}, {"limit": 1024, "over": 2}, {"limit": 2048, "over": 0}]


def test_more_bins_than_tokens_are_one_token_wide_and_an_empty_analysis_has_one_empty_bin(tmp_path):
    found = shown(histogram("a1", lengths_file(tmp_path, [3, 5]), 40))
    assert found["width"] == 1 and [b["rows"] for b in found["bins"]] == [0, 0, 1, 0, 1]
    assert found["limits"] == [{"limit": 512, "over": 0}]
    empty = shown(histogram("a1", lengths_file(tmp_path, []), 40))
    assert empty["rows"] == 0 and empty["bins"] == [{"from": 1, "to": 1, "rows": 0}]
