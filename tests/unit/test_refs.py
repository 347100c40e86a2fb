"""The reference grammar and name rules, parsed in one place."""

from __future__ import annotations

import pytest

from optimize.core.errors import Invalid
from optimize.core.names import check_alias, check_name
from optimize.core.refs import parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ns/name", ("ns", "name", None, None, None)),
        ("NS/Name", ("ns", "name", None, None, None)),
        ("ns/name:v3", ("ns", "name", 3, None, None)),
        ("ns/name:prod", ("ns", "name", None, "prod", None)),
        (f"ns/name@{DIGEST}", ("ns", "name", None, None, DIGEST)),
        ("my-team.x/train_set:v12", ("my-team.x", "train_set", 12, None, None)),
    ],
)
def test_references_parse(text, expected):
    ref = parse_reference(text)
    assert (ref.namespace, ref.name, ref.version, ref.alias, ref.digest) == expected


@pytest.mark.parametrize(
    "text",
    ["ns", "a/b/c", "/name", "ns/", "ns/na me", "ns/-x", "ns/x-", "ns/a..b", "../etc", "ns/name@sha256:zz",
     "ns/name:v0", "x" * 65 + "/n", "ns/name:", "ns/\u2024x", "ns/ｘ"],
)
def test_malformed_references_are_refused(text):
    with pytest.raises(Invalid):
        parse_reference(text)


def test_str_round_trips():
    for text in ("ns/name", "ns/name:v2", "ns/name:prod", f"ns/name@{DIGEST}"):
        assert str(parse_reference(text)) == text


@pytest.mark.parametrize("alias", ["v1", "latest", "bad alias"])
def test_alias_rules(alias):
    with pytest.raises(Invalid):
        check_alias(alias)


def test_name_length_limit():
    assert check_name("a" * 64, "name") == "a" * 64
    with pytest.raises(Invalid):
        check_name("a" * 65, "name")
