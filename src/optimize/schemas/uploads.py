"""Dataset upload sessions: `/v1/registry/dataset-uploads` (open, stream shards, commit, and the preview of an
upload that opens nothing)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer
from optimize.schemas.conversions import Conversion
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------


class ShardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(description="Position of the shard in the version, from 0")
    path: str = Field(description="examples.jsonl, or examples-NNNNN.jsonl for sharded versions")
    sha256: str = Field(description="sha256 of the shard's bytes, 64 hex digits")
    bytes: int = Field(description="Size of the shard in bytes")
    lines: int = Field(description="Lines in the shard")


class ImageEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The path the rows name it by (relative to the rows' file)")
    sha256: str = Field(description="sha256 of its bytes, 64 hex digits")
    bytes: int = Field(description="Its size")


class UploadCreate(BaseModel):
    """`POST /v1/registry/dataset-uploads`: the version to register, shard by shard."""

    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(description="NS/NAME the version is registered under")
    format: str = Field(description="chat-jsonl-v1, preference-jsonl-v1 or prepared-tokens-v1")
    shards: list[ShardEntry] = Field(description="The version's shards, in order (of prepared token rows: its "
                                                 "Parquet files, as the descriptor lists them, lines their rows)")
    conversion: Conversion | None = Field(
        default=None, description="How a file of another format became these shards (the client converted it); "
                                  "the version keeps it")
    prepared: dict | None = Field(
        default=None, description="Prepared token rows: the descriptor (prepared.json: tokenizer, "
                                  "chatTemplateSha256, files)")
    images: list[ImageEntry] | None = Field(
        default=None, description="The images the rows' image parts name, each sent first to /v1/registry/images")


class UploadCommit(BaseModel):
    """`POST /v1/registry/dataset-uploads/{uploadId}/commit`."""

    model_config = ConfigDict(extra="forbid")
    alias: str | None = Field(default=None, description="Alias to point at the registered version")


class PreviewShard(RequestModel):
    """One shard of a previewed upload, as the upload itself lists it: a shard whose keys or types do not fit is
    refused in the words of `UploadPreviewRequest.shards`, and its values are then checked as an upload's are."""

    model_config = ConfigDict(extra="forbid")
    index: int = Field(description="Position of the shard in the version, from 0")
    path: str = Field(description="examples.jsonl, or examples-NNNNN.jsonl for sharded versions")
    sha256: str = Field(description="sha256 of the shard's bytes, 64 hex digits")
    size_bytes: int = Field(alias="bytes", description="Size of the shard in bytes")
    lines: int = Field(description="Lines in the shard")


class UploadPreviewRequest(RequestModel):
    """`POST /v1/registry/dataset-uploads/preview`: the version an upload would register, shard by shard, as
    `POST /v1/registry/dataset-uploads` takes it (at most the registry's `maxShards` shards)."""

    model_config = ConfigDict(extra="forbid")
    not_an_object = Refusal("the request body must be a JSON object: {{dataset, format, shards}}")
    dataset: Annotated[str, Refusal("dataset must be NS/NAME, the dataset the version would be registered under")] = (
        Field(description="NS/NAME the version would be registered under"))
    format: Annotated[str, Refusal("format must be chat-jsonl-v1, preference-jsonl-v1 or prepared-tokens-v1")] = Field(
        description="chat-jsonl-v1, preference-jsonl-v1 or prepared-tokens-v1")
    shards: Annotated[list[PreviewShard], Refusal("shards must list the version's shards in order, each "
                                                  "{{index, path, sha256, bytes, lines}}")] = Field(
        description="The version's shards, in order")
    prepared: Annotated[dict | None, Refusal("prepared must be the descriptor object (prepared.json)")] = Field(
        default=None, description="Prepared token rows: the descriptor (prepared.json)")
    images: Annotated[list[ImageEntry] | None, Refusal("images must list {{path, sha256, bytes}} of each image the "
                                                       "rows name")] = Field(
        default=None, description="The images the rows' image parts name")


# --- answers ------------------------------------------------------------------------------------------------


class UploadShard(Answer):
    """A shard of an upload session, and whether the registry holds it already."""

    index: int = Field(description="Position of the shard in the version, from 0")
    path: str = Field(description="examples.jsonl, or examples-NNNNN.jsonl for sharded versions")
    sha256: str = Field(description="sha256 of the shard's bytes, 64 hex digits")
    size_bytes: int = Field(alias="bytes", description="Size of the shard in bytes")
    lines: int = Field(description="Lines in the shard")
    held: bool = Field(description="Whether the registry holds it already (it need not be sent)")


class UploadSession(Answer):
    """An upload session, keyed by its content: the same dataset and shards reach the same session."""

    upload_id: str = Field(description="The session's id")
    dataset: str = Field(description="NS/NAME the version is registered under")
    format: str = Field(description="chat-jsonl-v1 or preference-jsonl-v1")
    digest: str = Field(description="The digest the version will have: sha256:HEX")
    phase: str = Field(description="open, committed, or refused (a shard's rows were refused; the same register "
                                   "command opens it again)")
    expires_at: str = Field(description="When an open session expires (ISO 8601, UTC)")
    shards: list[UploadShard] = Field(description="The version's shards, in order")


class ShardReceived(Answer):
    """A shard the registry holds now (201: received and validated; 200: it held the same bytes already)."""

    index: int = Field(description="Position of the shard in the version, from 0")
    sha256: str = Field(description="sha256 of the shard's bytes")
    size_bytes: int = Field(alias="bytes", description="Size of the shard in bytes")
    rows: int | None = Field(default=None, description="Rows in the shard (when it was received now)")
    tool_rows: int | None = Field(default=None, description="Rows that offer or call tools (when received now)")
    held: bool = Field(description="Whether the registry holds it (always true in an answer)")
    already_held: bool | None = Field(default=None, description="True when the registry held it already and "
                                                                "nothing was read")


class UploadPreview(Answer):
    """What an upload of these shards would find, with nothing opened, sent or registered: the version's digest,
    the version of the dataset that already holds it, and which shards the registry holds."""

    dataset: str = Field(description="NS/NAME the version would be registered under")
    format: str = Field(description="chat-jsonl-v1 or preference-jsonl-v1")
    digest: str = Field(description="The digest the version would have: sha256:HEX")
    existing_version: str | None = Field(description="vN when the dataset holds a version of this digest already "
                                                     "(registering returns it); null otherwise")
    shards: list[UploadShard] = Field(description="The version's shards, in order, each with whether the registry "
                                                  "holds it (an upload would send only those it does not)")
