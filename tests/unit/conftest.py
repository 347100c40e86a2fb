"""Stand-in models for chat tests, built once per session (offline, deterministic)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def standin_dirs(tmp_path_factory):
    pytest.importorskip("transformers")
    from optimize.catalog.standins import FAMILIES, StandIn, build

    root = tmp_path_factory.mktemp("standins")
    return {family: (root / family, build(StandIn(family), root / family)) for family in FAMILIES}


@pytest.fixture(scope="session")
def renderers(standin_dirs):
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer

    return {family: ChatRenderer.from_pretrained(str(path), template_kwargs(family))
            for family, (path, _commit) in standin_dirs.items()}
