"""Job specs are typed once and read the same on both sides: the camelCase wire form round-trips, and a spec with
a key missing or unknown is refused at the boundary rather than by a worker minutes later."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from optimize.schemas.jobs import AnalysisSpec, EndpointSpec

MODEL = {"id": "optimize/tiny-llama-3.2", "repository": "optimize/tiny-llama-3.2", "family": "llama3",
         "commit": "abc", "path": "/models/abc", "chatTemplate": None}


def analysis_spec(**changes) -> dict:
    return {"analysisId": "a1", "kind": "chat", "format": "chat-jsonl-v1", "leaseSeconds": 60.0, "model": MODEL,
            "objects": [{"path": "shard-0.jsonl", "sha256": "0" * 64, "bytes": 10, "rows": 1}],
            "images": [{"path": "images/a.png", "sha256": "1" * 64, "bytes": 20}], **changes}


def test_a_spec_round_trips_in_its_wire_form():
    wire = AnalysisSpec.model_validate(analysis_spec()).wire()
    assert wire == analysis_spec()
    assert EndpointSpec.model_validate({"endpointId": "e", "leaseSeconds": 5, "model": MODEL, "toolCallParser": None,
                                        "contextLength": 8192, "adapters": [{"name": "p/m:v1", "manifest": "f" * 64,
                                                                             "instructions": "Be brief."}]
                                        }).wire()["adapters"] == [{"name": "p/m:v1", "manifest": "f" * 64,
                                                                   "instructions": "Be brief."}]


@pytest.mark.parametrize("broken", [{"leaseSecond": 60}, {"objects": [{"path": "x", "sha256": "y", "bytes": 1}]}])
def test_a_spec_with_an_unknown_or_missing_key_is_refused(broken):
    document = analysis_spec(**broken)
    with pytest.raises(ValidationError):
        AnalysisSpec.model_validate(document)
