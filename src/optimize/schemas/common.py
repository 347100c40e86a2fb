"""What every answer model shares: camelCase keys, every key declared, and the answer kept exactly as the service
built it.

An answer model documents and checks the JSON a route answers: every key it may hold is declared with a
description (a key that is not always present has a default and is left out of `required`), and a missing
required key, a key the model does not declare or a value of the wrong type is caught before it leaves the server.
It never rewrites the answer: the keys come out in the order the service wrote them, and a declared key the service
left out stays out (it is not added as null). (The same holds for an answer built in code, `Run(run_id=…)`: the
keys given are the keys answered.)
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializationInfo, model_serializer, model_validator
from pydantic.alias_generators import to_camel

# A JSON number that may be written as an integer or a fraction: declared as both, so an integer stays an integer
# (a plain `float` field would answer 1 as 1.0).
Number = int | float


class Answer(BaseModel):
    """Base of the API's answer models: fields are snake_case in Python and camelCase in JSON."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    _keys: tuple[str, ...] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_keys(cls, data: Any, handler: Any) -> Any:
        item = handler(data)
        if isinstance(data, dict) and isinstance(item, Answer):
            item._keys = tuple(data)
        return item

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any, info: SerializationInfo):  # unannotated: the schema stays the model's
        out = handler(self)
        if self._keys is None or not isinstance(out, dict):
            return out
        written = _written_keys(type(self), bool(info.by_alias))
        keys = (written.get(key, key) for key in self._keys)
        return {key: out[key] for key in keys if key in out}

    def given(self) -> dict[str, Any]:
        """The fields this answer was built with, by field name and in the order given (nested answers as they
        are)."""
        names = _field_names(type(self))
        keys = self._keys if self._keys is not None else tuple(self.model_fields_set)
        return {names[key]: getattr(self, names[key]) for key in keys if key in names}

    def extended(self, as_model: type[A] | None = None, **fields: Any) -> A:
        """This answer with more (or other) fields, built again by its model, or by a model extending it (a list's
        item adding what only the list says): the fields added come out after those it was built with."""
        model = as_model or type(self)
        return model(**{**self.given(), **fields})


A = TypeVar("A", bound=Answer)


@functools.cache
def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """The field name each key a field may be given under (its alias or its name) stands for."""
    names = {}
    for name, field in model.model_fields.items():
        names[name] = names[field.alias or name] = name
    return names


@functools.cache
def _written_keys(model: type[BaseModel], by_alias: bool) -> dict[str, str]:
    """The key each given key of a declared field (its alias or its name) is written under."""
    written = {}
    for name, field in model.model_fields.items():
        alias = field.serialization_alias or field.alias or name
        written[name] = written[field.alias or name] = alias if by_alias else name
    return written


class OpenAIAnswer(Answer):
    """Base of answers in OpenAI's shapes, whose keys are snake_case in JSON too."""

    model_config = ConfigDict(alias_generator=None)


class Health(Answer):
    status: str = Field(description="ok while the server answers")
    version: str = Field(description="The server's Optimize version")
    database: str = Field(description="The store's database dialect: sqlite or postgresql")


class BaseModelPin(Answer):
    id: str = Field(description="Catalog entry id of the base model")
    commit: str = Field(description="The base model's repository commit the work uses")


class DatasetPin(Answer):
    reference: str = Field(description="The dataset version, frozen at submission: NS/NAME:vN")
    digest: str = Field(description="The version's digest (sha256:HEX over its shards)")
    rows: int = Field(description="Rows (examples or pairs) in the version")


class AcceptanceRate(Answer):
    """How much of what a job decided on it kept, against the floor below which it warns (`core.acceptance`)."""

    rate: Number | None = Field(description="Accepted over decided; null before anything is decided")
    accepted: int = Field(description="Decisions accepted")
    decided: int = Field(description="Decisions accepted or rejected")
    floor: Number = Field(description="The rate below which it warns (once 20 are decided, or all where fewer)")
    below_floor: bool = Field(description="Whether the rate is below the floor (its answer then warns)")


def event_stream(description: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` of a server-sent events route: a text/event-stream answer, each `status` event's data the
    item's JSON as its own route answers it."""
    return {200: {"description": description,
                  "content": {"text/event-stream": {"schema": {"type": "string", "description":
                                                               "event: status, data: the item's JSON; "
                                                               "`: keep-alive` comments while nothing changes"}}}}}
