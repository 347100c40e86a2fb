"""`akka training base-models select --from DIR` checks that the folder is the model it claims to be, and shows the
parameter count of the imported files, never the catalog's figure for another model."""

from __future__ import annotations

import pytest

from tests.conftest import Cli, built_standin

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_sqlite(capsys, sqlite_server):
    return Cli(capsys, sqlite_server.url)


def test_a_stand_in_is_not_imported_as_the_real_model_it_imitates(cli_sqlite):
    # the quickstart's 3.4M-parameter stand-in once imported as SmolLM2-135M and showed "134.5M params"
    small = built_standin("optimize/small-smollm2")
    refused = cli_sqlite("training", "base-models", "select", "huggingfacetb/smollm2-135m-instruct",
                         "--from", str(small))
    assert refused.code == 1
    assert f"the folder {small} is not huggingfacetb/smollm2-135m-instruct" in refused.err
    assert "architecture.hiddenSize: huggingfacetb/smollm2-135m-instruct has 576, the files have 256" in refused.err
    assert "architecture.layers" in refused.err and "architecture.vocab" in refused.err
    as_json = cli_sqlite("training", "base-models", "select", "huggingfacetb/smollm2-135m-instruct", "--from",
                         str(small), "-o", "json")
    assert as_json.code == 1 and as_json.json["error"]["status"] == 422
    entry = cli_sqlite.json("training", "base-models", "get", "huggingfacetb/smollm2-135m-instruct")
    assert entry["status"] == "not-selected" and entry["parameters"]["source"] == "catalog"


def test_an_imported_model_shows_the_parameters_of_its_files(cli_sqlite):
    model = "optimize/small-smollm2"
    selected = cli_sqlite.json("training", "base-models", "select", model, "--from", str(built_standin(model)))
    assert selected["selection"]["source"] == "import" and selected["selection"]["parameters"] == 3426560
    assert selected["parameters"] == {"total": 3426560, "active": 3426560, "source": "files"}
    text = cli_sqlite.ok("training", "base-models", "get", model).out
    assert "3.4M total, 3.4M active (counted in the selected files)" in text


def test_a_folder_whose_config_is_not_json_is_refused(cli_sqlite, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    refused = cli_sqlite("training", "base-models", "select", "optimize/tiny-llama-3.2", "--from", str(tmp_path))
    assert refused.code == 1 and "cannot read config.json" in refused.err
