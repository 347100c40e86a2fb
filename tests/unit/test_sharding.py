"""Cutting files into shards: on line boundaries, deterministic, refused with a size that fits."""

from __future__ import annotations

import pytest

from optimize.core.errors import Invalid
from optimize.core.limits import DatasetLimits
from optimize.core.sharding import check_fits, plan_shards

MIB = 1024 * 1024


def make_file(tmp_path, lines):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_small_file_without_shard_size_is_one_object(tmp_path):
    path = make_file(tmp_path, [b"aaaa\n", b"bb\n"])
    shards = plan_shards(path, None, DatasetLimits())
    assert [(s.path, s.size, s.lines) for s in shards] == [("examples.jsonl", 8, 2)]


def test_cut_is_on_line_boundaries_and_at_most_shard_size(tmp_path):
    lines = [b"x" * n + b"\n" for n in (3, 5, 2, 7, 1, 4, 6)]
    path = make_file(tmp_path, lines)
    shards = plan_shards(path, 10, DatasetLimits(max_shard_bytes=10))
    data = path.read_bytes()
    assert all(s.size <= 10 for s in shards)
    assert [s.path for s in shards] == [f"examples-{i:05d}.jsonl" for i in range(len(shards))]
    pieces = [data[s.offset:s.offset + s.size] for s in shards]
    assert b"".join(pieces) == data
    assert all(piece.endswith(b"\n") for piece in pieces)
    assert sum(s.lines for s in shards) == len(lines)
    assert [s.first_line for s in shards][0] == 1


def test_same_file_same_cut(tmp_path):
    path = make_file(tmp_path, [b"%d\n" % i for i in range(1000)])
    first = plan_shards(path, 100, DatasetLimits())
    second = plan_shards(path, 100, DatasetLimits())
    assert [(s.sha256, s.size) for s in first] == [(s.sha256, s.size) for s in second]


def test_line_longer_than_shard_size_names_a_size(tmp_path):
    path = make_file(tmp_path, [b"a\n", b"b" * (3 * MIB) + b"\n"])
    with pytest.raises(Invalid) as refused:
        plan_shards(path, MIB, DatasetLimits())
    assert "--shard-size of at least 4MiB" in refused.value.hint


def test_too_many_shards_names_a_shard_size():
    limits = DatasetLimits(max_shard_bytes=8 * MIB, max_shards=4)
    with pytest.raises(Invalid) as refused:
        check_fits(20 * MIB, 2 * MIB, limits)
    assert refused.value.hint == "pass --shard-size 5MiB"


def test_shard_size_above_limit_names_one_that_fits():
    limits = DatasetLimits(max_shard_bytes=8 * MIB, max_shards=4)
    with pytest.raises(Invalid) as refused:
        check_fits(10 * MIB, 16 * MIB, limits)
    assert "larger than the registry's shard limit 8MiB" in refused.value.message
    assert refused.value.hint == "pass --shard-size 8MiB"


def test_file_larger_than_a_version_holds():
    with pytest.raises(Invalid) as refused:
        check_fits(40 * MIB, None, DatasetLimits(max_shard_bytes=8 * MIB, max_shards=4))
    assert "more than the registry holds in one version" in refused.value.message


def test_empty_file_refused(tmp_path):
    path = make_file(tmp_path, [])
    with pytest.raises(Invalid, match="the file is empty"):
        plan_shards(path, None, DatasetLimits())


def test_a_leading_byte_order_mark_is_left_out_so_the_file_cuts_as_its_twin_without_one(tmp_path):
    rows = [b"%d\n" % i for i in range(300)]
    plain = make_file(tmp_path, rows)
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    for size in (None, 100):
        with_mark, without = plan_shards(marked, size, DatasetLimits()), plan_shards(plain, size, DatasetLimits())
        assert [(s.sha256, s.size, s.lines, s.first_line) for s in with_mark] == \
            [(s.sha256, s.size, s.lines, s.first_line) for s in without]
        assert with_mark[0].offset == 3  # what is sent starts after the mark
        data = marked.read_bytes()
        assert b"".join(data[s.offset:s.offset + s.size] for s in with_mark) == plain.read_bytes()


def test_a_file_holding_only_a_byte_order_mark_is_empty(tmp_path):
    path = make_file(tmp_path, [b"\xef\xbb\xbf"])
    with pytest.raises(Invalid, match="the file is empty"):
        plan_shards(path, None, DatasetLimits())
