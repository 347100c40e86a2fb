"""The shipped catalog and the catalog format: entries, serving-only models, refusals naming fields."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import load_catalog
from optimize.core.errors import Invalid, NotFound

REQUIRED = [
    "google/gemma-4-e2b-it", "google/gemma-4-e4b-it", "google/gemma-4-12b-it", "google/gemma-4-26b-a4b-it",
    "meta-llama/llama-3.2-1b-instruct", "meta-llama/llama-3.2-3b-instruct", "qwen/qwen2.5-0.5b-instruct",
    "qwen/qwen2.5-1.5b-instruct", "huggingfacetb/smollm2-135m-instruct", "huggingfacetb/smollm2-360m-instruct",
    "mistralai/ministral-8b-instruct-2410", "huggingfacetb/smolvlm-instruct",
]


def test_shipped_catalog_holds_every_required_entry():
    catalog = load_catalog()
    ids = [entry.id for entry in catalog.entries]
    for required in REQUIRED:
        assert required in ids
    assert catalog.strict_envelopes is False
    assert {e.stand_in.family for e in catalog.entries if e.stand_in} == {"llama3.2", "qwen2.5", "gemma4", "smollm2",
                                                                            "smolvlm"}


def test_gemma_4_moe_is_serving_only_without_adapt_experts():
    entry = load_catalog().find("google/gemma-4-26B-A4B-it")
    assert entry.serving_only and entry.adapt_experts is False and entry.envelopes == []
    assert entry.parameters.active < entry.parameters.total


def test_unknown_figures_are_null_with_a_note():
    for entry in load_catalog().entries:
        if entry.commit is None:
            assert entry.commit_note, entry.id


def test_stand_ins_carry_cpu_envelopes_as_measurements():
    for entry in load_catalog().entries:
        if entry.stand_in:
            assert entry.envelopes and all(e.device_profile == "cpu" and e.measurement.by for e in entry.envelopes)


def test_lookup_by_repository_prefix_and_refusals():
    catalog = load_catalog()
    assert catalog.find("Qwen/Qwen2.5-1.5B-Instruct").id == "qwen/qwen2.5-1.5b-instruct"
    assert catalog.find("gemma-4-26b").id == "google/gemma-4-26b-a4b-it"
    with pytest.raises(Invalid, match="matches"):
        catalog.find("google/gemma-4")
    with pytest.raises(NotFound, match="no base model 'gpt-9'"):
        catalog.find("gpt-9")


def test_unknown_field_is_refused_by_path(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("models:\n  - id: a/b\n    repository: a/b\n    commit: null\n    family: x\n"
                    "    architecture: {}\n    parameters: {total: 1, active: 1}\n    contextLength: 8\n"
                    "    allowedFor: [serving]\n    colour: red\n")
    with pytest.raises(Invalid) as refused:
        load_catalog(path)
    assert "models.0.colour" in refused.value.message


def test_duplicate_ids_are_refused(tmp_path):
    entry = ("  - {id: a/b, repository: a/b, commit: null, family: x, architecture: {}, "
             "parameters: {total: 1, active: 1}, contextLength: 8, allowedFor: [serving]}\n")
    path = tmp_path / "catalog.yaml"
    path.write_text("models:\n" + entry + entry)
    with pytest.raises(Invalid, match="appears twice"):
        load_catalog(path)
