"""A model version's files: `GET /v1/registry/models/{ns}/{name}/versions/{selector}/files[/{path}]`.

The list says what a download writes (each file's path, sha256 and size) and where the server reads it from; the
file route answers the bytes themselves (`application/octet-stream`).
"""

from __future__ import annotations

from pydantic import Field

from optimize.schemas.common import Answer


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
