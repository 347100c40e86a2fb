"""A model version's files: `GET /v1/registry/models/{ns}/{name}/versions/{selector}/files[/{path}]`, and the files
of an adapter made elsewhere, sent and imported (`/v1/registry/adapters/{ns}/{name}/…`).

The list says what a download writes (each file's path, sha256 and size) and where the server reads it from; the
file route answers the bytes themselves (`application/octet-stream`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from optimize.schemas.common import Answer
from optimize.schemas.registry import ModelVersionDetail
from optimize.schemas.requests import Refusal, RequestModel


class ModelFile(Answer):
    """One file of a model version, as a download writes it."""

    path: str = Field(description="Path inside the downloaded folder, e.g. adapter_model.safetensors")
    sha256: str = Field(description="sha256 hex digest of the file's bytes; a download is verified against it")
    size: int = Field(description="Size of the file in bytes")
    source: str = Field(description="Where the server reads it: adapter (the blob store: the run's saved weights), "
                                    "adapterConfig (the run's adapter_config.json, naming the base model by its "
                                    "repository), base (the base model's selected folder) or chatTemplate (the "
                                    "template the run trained under, where Optimize corrects the shipped one)")


class ChatTemplateInfo(Answer):
    """The chat template a model loaded from the downloaded folder renders with."""

    path: str = Field(description="The file that holds it: chat_template.jinja or tokenizer_config.json")
    sha256: str = Field(description="sha256 hex digest of the template text (a run's chatTemplateSha256)")
    source: str = Field(description="shipped (the repository's), corrected (Optimize's corrected copy) or "
                                    "optimize (Optimize's own, for stand-ins)")


class ModelFiles(Answer):
    """What downloading a model version writes: an adapter folder (PEFT) with the tokenizer and chat template it
    trained under, or a base model's selected folder."""

    reference: str = Field(description="The version's reference: NS/NAME:vN")
    digest: str = Field(description="The version's digest (sha256:HEX over its variant and descriptor)")
    variant: str = Field(description="BASE or ADAPTER")
    base_model: str | None = Field(description="For an adapter: the BASE version it trains (NS/NAME:vN); null "
                                               "for a base model or when the base was never registered")
    base_commit: str = Field(description="The base model's commit the files belong to")
    chat_template: ChatTemplateInfo | None = Field(description="The chat template the folder carries; null when "
                                                               "the model has none")
    files: list[ModelFile] = Field(description="The files, sorted by path")
    size: int = Field(description="Total size of the files in bytes")


# --- adapters made elsewhere ------------------------------------------------------------------------------------


class AdapterFile(RequestModel):
    """One file of an adapter sent before its import (PUT …/adapters/{ns}/{name}/files/{sha256})."""

    model_config = ConfigDict(extra="forbid")

    path: Annotated[str, Refusal("files[].path must be adapter_config.json or adapter_model.safetensors")] = Field(
        description="adapter_config.json or adapter_model.safetensors")
    sha256: Annotated[str, Refusal("files[].sha256 must be the file's sha256, 64 hex digits")] = Field(
        pattern=r"^[0-9a-f]{64}$", description="sha256 hex digest of the file's bytes")
    size_bytes: Annotated[int, Refusal("files[].bytes must be the file's size, an integer")] = Field(
        alias="bytes", ge=0, description="The file's size in bytes")


class AdapterImport(RequestModel):
    """`POST /v1/registry/adapters/{ns}/{name}/import`: register a PEFT LoRA adapter made elsewhere, whose two files
    the registry holds, as a version of NS/NAME over a selected base model."""

    model_config = ConfigDict(extra="forbid")

    base: Annotated[str, Refusal("base must name a base model of the catalog", missing="name the base model the "
                                 "adapter was trained on: base")] = Field(
        min_length=1, max_length=200, description="The base model the adapter was trained on: a catalog entry id or "
                                                  "repository, selected on this deployment")
    files: Annotated[list[AdapterFile], Refusal("files must list adapter_config.json and adapter_model.safetensors, "
                                                "each with its sha256 and bytes")] = Field(
        min_length=2, max_length=2, description="The adapter's two files, sent first")
    alias: Annotated[str | None, Refusal("alias must be a string")] = Field(
        default=None, description="An alias to point at the version (e.g. candidate)")


class ImportedAdapter(ModelVersionDetail):
    """The version an import registered, or the version the same adapter already was."""

    created: bool = Field(description="Whether this import created the version (false: the same adapter was "
                                      "registered)")


class HeldFile(Answer):
    """An adapter file the registry holds now."""

    sha256: str = Field(description="sha256 of the file's bytes")
    size_bytes: int | None = Field(default=None, alias="bytes", description="Its size in bytes, when this request "
                                                                             "sent it")
    already_held: bool = Field(description="Whether the registry held it before this request (nothing was read)")


class ModelRegister(RequestModel):
    """`POST /v1/registry/models/{ns}/{name}/versions`: a run's save registered as a version of NS/NAME (NS is the
    run's project), e.g. a branch's best step."""

    model_config = ConfigDict(extra="forbid")

    snapshot: Annotated[str, Refusal("snapshot must be a snapshot's id (or a prefix of it)", missing="name the "
                                     "snapshot whose weights to register: snapshot")] = Field(
        min_length=1, max_length=64, description="The snapshot's id, or an unambiguous prefix")
    alias: Annotated[str | None, Refusal("alias must be a string")] = Field(
        default=None, description="An alias to point at the version (e.g. candidate)")
