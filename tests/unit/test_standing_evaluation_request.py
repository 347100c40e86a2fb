"""The standing evaluation's request body, parsed by its model: the default grader, a null key left out, and each
field refused in its own words naming what to send."""

from __future__ import annotations

import pytest

from optimize.core.errors import Invalid
from optimize.schemas.projects import StandingEvaluationRequest


def refusal(body) -> Invalid:
    with pytest.raises(Invalid) as refused:
        StandingEvaluationRequest.parse(body)
    return refused.value


def test_the_grader_defaults_as_an_evaluations_does_and_null_keys_are_left_out():
    request = StandingEvaluationRequest.parse({"dataset": "shipping/held-out", "grader": None,
                                               "graderInstructions": None})
    assert (request.dataset, request.grader, request.grader_instructions) == (
        "shipping/held-out", "json-label-match", None)
    judged = StandingEvaluationRequest.parse({"dataset": "d", "grader": "model:a/judge", "graderInstructions": "x"})
    assert (judged.grader, judged.grader_instructions) == ("model:a/judge", "x")


@pytest.mark.parametrize(("body", "words"), [
    ({}, "a standing evaluation needs dataset: the registered chat dataset each new model version is evaluated on"),
    (None, "a standing evaluation needs dataset (a registered chat dataset, NS/NAME[:vN|:ALIAS])"),
    (["dataset"], "a standing evaluation needs dataset (a registered chat dataset, NS/NAME[:vN|:ALIAS])"),
    ({"dataset": 3}, "dataset must be a registered chat dataset's reference, NS/NAME[:vN|:ALIAS]"),
    ({"dataset": ""}, "dataset must be a registered chat dataset's reference"),
    ({"dataset": "a/" + "b" * 300}, "dataset must be a registered chat dataset's reference"),
    ({"dataset": "a/b", "grader": True}, "grader must be a grader's name, as an evaluation takes it"),
    ({"dataset": "a/b", "grader": ""}, "grader must be a grader's name"),
    ({"dataset": "a/b", "graderInstructions": 5}, "graderInstructions must be a string"),
    ({"dataset": "a/b", "colour": "red", "size": 1}, "unknown field(s): colour, size"),
])
def test_each_field_is_refused_in_its_own_words(body, words):
    refused = refusal(body)
    assert refused.message.startswith(words), refused.message
    assert refused.status == 422


def test_unknown_fields_name_the_fields_there_are():
    assert refusal({"dataset": "a/b", "datset": "x"}).hint == "fields: dataset, grader, graderInstructions"
