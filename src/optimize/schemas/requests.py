"""Request bodies parsed by their models: a model holds each field's type, default and bounds once, with the words
a value that does not fit is refused in.

A field declares its refusal beside its type, as metadata of its annotation (it stays out of /openapi.json):

    max_new_tokens: Annotated[int | None, Refusal("maxNewTokens must be an integer from 1 to 32768")] = Field(
        default=256, ge=1, le=32768, description=…)

`RequestModel.parse(body)` validates a body as sent, strictly (a JSON `true` is no integer, `"3"` no number) and by
the camelCase keys only, and refuses the first field that does not fit (in the order the model declares them) in
that field's words, as a 422 problem. A key sent as null is a key left out: its default holds. A model that refuses
unknown keys (`extra="forbid"`) names them all at once, before any field, in its `unknown_fields` words.
Rules across fields (two fields that may not go together) stay with the service that owns them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import UnionType
from typing import Any, ClassVar, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from optimize.core.errors import Invalid


@dataclass(frozen=True)
class Refusal:
    """The words a field (or a body) is refused in, and what to change."""

    detail: str
    hint: str | None = None
    missing: str | None = None  # the words when the field is left out, where they differ from `detail`

    def error(self, missing: bool = False, **values: Any) -> Invalid:
        detail = self.missing if missing and self.missing else self.detail
        return Invalid(detail.format(**values), hint=self.hint and self.hint.format(**values))


class RequestModel(BaseModel):
    """Base of the request models: fields are snake_case in Python and camelCase in JSON, as on the wire (a model
    built in code may name its fields in Python's spelling; a body is read by the camelCase keys only)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, strict=True)

    # The refusal of a body that is no JSON object (or none at all); unset: a generic one
    not_an_object: ClassVar[Refusal | None] = None
    # Whether the body may be left out (then every field has its default)
    may_be_left_out: ClassVar[bool] = False
    # The refusal of unknown keys of a model with extra="forbid": {names} the unknown keys, {fields} the known ones
    unknown_fields: ClassVar[Refusal] = Refusal("unknown field(s): {names}", hint="fields: {fields}")
    # Whether a refusal names the field's path as `param` (OpenAI's error object carries it)
    names_param: ClassVar[bool] = False

    @classmethod
    def parse(cls, body: Any, **words: str) -> Self:
        """The body as this model, or the refusal of its first problem (Invalid); `words` fill the refusals'
        {placeholders} (one model read by two routes, e.g. the verb it is read for)."""
        if body is None and cls.may_be_left_out:
            body = {}
        if not isinstance(body, dict):
            raise (cls.not_an_object or Refusal("the request body must be a JSON object")).error(value=None, **words)
        given = {key: value for key, value in body.items() if value is not None}
        try:
            return cls.model_validate(given, by_alias=True, by_name=False)
        except ValidationError as error:
            raise cls._refusal(error.errors(), words) from None

    @classmethod
    def fields_written(cls) -> list[str]:
        return [field.alias or name for name, field in cls.model_fields.items()]

    @classmethod
    def _refusal(cls, errors: list[dict[str, Any]], words: dict[str, str]) -> Invalid:
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1)
        if unknown:
            refusal = cls.unknown_fields.error(names=", ".join(unknown),
                                               fields=", ".join(sorted(cls.fields_written())), **words)
            param = unknown[0]
        else:
            first = errors[0]
            refusal = _field_refusal(cls, first["loc"], first, words)
            param = _field_path(cls, first["loc"])
        if cls.names_param:
            refusal.details["param"] = param
        return refusal


def _field_refusal(model: type[BaseModel], loc: tuple[Any, ...], error: dict[str, Any], words: dict[str, str]
                   ) -> Invalid:
    """The refusal of the field at `loc` (walking into nested request models and into a list's items), else the
    nearest declared one above it, else pydantic's words under the field's path. A refusal may name the value
    refused as {value!r} (None for a value left out) or as {shown} (its JSON, cut to 40 characters)."""
    found: Refusal | None = None
    current: Any = model
    for depth, part in enumerate(loc):
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = next((f for name, f in current.model_fields.items() if (f.alias or name) == part), None)
            if field is None:
                break
            found = next((m for m in field.metadata if isinstance(m, Refusal)), found)
            current = field.annotation
        elif isinstance(part, int) and depth:
            item = next((arg for arg in get_args(_without_none(current))), None)  # list[X]: X
            found = _refusal_of(item) or found
            current = item
        else:
            break
        current = _model_in(current) or current
    if found is not None:
        missing = error["type"] == "missing"
        value = None if missing else error.get("input")
        return found.error(missing=missing, value=value, shown=json.dumps(value, default=str)[:40], **words)
    path = ".".join(str(part) for part in loc)
    return Invalid(f"{path}: {error['msg']}" if path else error["msg"])


def _field_path(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The dotted path of the fields `loc` walks through (a union member's tag, which pydantic adds, left out)."""
    names: list[str] = []
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str)):
            break
        field = next((f for name, f in current.model_fields.items() if (f.alias or name) == part), None)
        if field is None:
            names.append(part)  # a key the model does not know (refused as extra)
            break
        names.append(part)
        current = _model_in(field.annotation)
    return ".".join(names)


def _without_none(annotation: Any) -> Any:
    """`X` of `X | None`."""
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    return args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation


def _refusal_of(annotation: Any) -> Refusal | None:
    """The refusal an `Annotated[X, Refusal(…)]` carries."""
    return next((m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Refusal)), None)


def _model_in(annotation: Any) -> Any:
    """The request model an annotation holds (`Sub`, `Sub | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
