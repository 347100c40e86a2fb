"""What an endpoint following an alias answers with while the alias's new version loads (`serving.following`): the
old version until the new one is loaded, then the new one; which references are followed at all."""

from __future__ import annotations

from types import SimpleNamespace

from optimize.serving.following import answering_for, followed_alias


def endpoint(*adapters: dict) -> SimpleNamespace:
    return SimpleNamespace(adapters=list(adapters))


def test_the_old_version_answers_until_the_new_one_is_loaded():
    old = {"name": "p/m:v1", "loaded": True, "replacedBy": "p/m:v2"}
    loading = endpoint(old, {"name": "p/m:v2", "loaded": False, "follows": "champion"})
    assert answering_for(loading, "p/m:v2") == "p/m:v1"
    loaded = endpoint(old, {"name": "p/m:v2", "loaded": True, "follows": "champion"})
    assert answering_for(loaded, "p/m:v2") == "p/m:v2"
    gone = endpoint({**old, "loaded": False}, {"name": "p/m:v2", "loaded": False})
    assert answering_for(gone, "p/m:v2") == "p/m:v2"  # nothing loaded to answer: the request is told it loads
    assert answering_for(loading, "base/model") == "base/model"


def test_only_an_alias_users_move_is_followed():
    assert followed_alias("p/m:champion") == "champion"
    assert followed_alias("P/M:Candidate") == "candidate"
    assert followed_alias("p/m:latest") is None and followed_alias("p/m") is None
    assert followed_alias("p/m:v3") is None and followed_alias("p/m@sha256:" + "a" * 64) is None
    assert followed_alias("optimize/tiny-llama-3.2") is None and followed_alias("not a reference") is None
