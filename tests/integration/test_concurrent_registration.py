"""Concurrent registrations into one dataset get distinct, gapless version numbers (constraints, not luck)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from optimize.client.http import OptimizeClient
from optimize.client.registry import register_dataset
from optimize.core.refs import parse_reference
from tests.conftest import chat_row, write_jsonl

pytestmark = pytest.mark.integration


def test_concurrent_registrations_get_distinct_versions(server, ns, tmp_path):
    files = [write_jsonl(tmp_path / f"{i}.jsonl", [chat_row(f"row {i}")]) for i in range(8)]
    reference = parse_reference(f"{ns}/d")

    def register(path):
        with OptimizeClient(server.url, token=server.token) as client:
            return register_dataset(client, reference, path)

    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = list(pool.map(register, files + files))  # each file twice: the repeats return the same version
    first, repeats = versions[:8], versions[8:]
    assert sorted(v["version"] for v in first) == list(range(1, 9))
    assert [v["version"] for v in repeats] == [v["version"] for v in first]


def test_concurrent_first_moves_of_one_alias_all_answer_and_one_pointer_is_left(server, ns, tmp_path):
    """Every move is answered (no 500 when two insert the alias at once); the alias ends on one of the versions."""
    for i in range(2):
        with OptimizeClient(server.url, token=server.token) as client:
            rows = write_jsonl(tmp_path / f"{i}.jsonl", [chat_row(str(i))])
            register_dataset(client, parse_reference(f"{ns}/d"), rows)

    def move(index):
        with OptimizeClient(server.url, token=server.token) as client:
            version = f"v{index % 2 + 1}"
            return client.put(f"/v1/registry/datasets/{ns}/d/aliases/prod", json={"version": version})

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(move, range(8)))
    assert all(answer["alias"] == "prod" for answer in answers)
    with OptimizeClient(server.url, token=server.token) as client:
        assert client.get(f"/v1/registry/datasets/{ns}/d/aliases/prod")["version"] in (1, 2)
