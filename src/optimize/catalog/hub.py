"""The model hub, through the real `huggingface_hub` client: which commit a revision names, a repository's files
at a commit, and the facts `base-models add` records, read from the repository's own files.

Where the hub is comes from huggingface_hub's own settings in the server's environment, so an operator configures
it the way every Hugging Face tool is configured: HF_ENDPOINT (a mirror or proxy of the hub; the test suite
points it at a loopback mirror), HF_TOKEN (gated repositories), HF_HUB_OFFLINE=1 (no hub: refused up front, with
the `--from DIR` way round). Every hub failure becomes a refusal naming the repository and the endpoint; none
reaches the user as a stack trace. huggingface_hub is imported inside the functions: the API imports this module.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, TypeVar

from optimize.catalog import downloads
from optimize.catalog.facts import ModelFacts, facts_from
from optimize.core.errors import Invalid, NotFound, Refused

# What a selection downloads: configs, weights (safetensors only: pickles are never loaded), tokenizer, template.
MODEL_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.txt", "*.model"]
COMMIT = re.compile(r"^[0-9a-f]{40}$")
T = TypeVar("T")


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def require_online(repository: str, hint: str) -> None:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise Refused(f"this server is offline (HF_HUB_OFFLINE=1) and cannot fetch {repository}", hint=hint)


def _api():
    from huggingface_hub import HfApi

    return HfApi()


def _asking(repository: str, revision: str, call: Callable[[], T], hint: str) -> T:
    """Run one hub call, turning its failures into refusals that say what to change."""
    from huggingface_hub import errors

    unreachable = f"the model hub at {endpoint()} could not provide {repository} at {revision[:12]}"
    try:
        return call()
    except errors.RevisionNotFoundError:
        raise NotFound(f"{repository} has no revision {revision!r} on the hub at {endpoint()}",
                       hint="pass --revision a branch, tag or commit of the repository") from None
    except errors.GatedRepoError:
        raise Refused(f"{repository} is gated on the hub at {endpoint()}: this server's token may not read it",
                      hint="accept the model's terms on the hub and start the server with HF_TOKEN set") from None
    except errors.RepositoryNotFoundError:
        raise NotFound(f"no repository {repository} on the hub at {endpoint()}",
                       hint="check the name (owner/name), or set HF_TOKEN if it is private") from None
    # a local miss (hub unreachable, nothing cached) is a kind of EntryNotFoundError: told apart first
    except (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError) as error:
        raise Refused(f"{unreachable} ({type(error).__name__})", hint=hint) from None
    except errors.EntryNotFoundError as error:
        raise Invalid(f"{repository} at {revision[:12]} lacks a file the model needs ({error})") from None
    except Exception as error:  # noqa: BLE001 - any other failure (connection, HTTP 5xx, bad answer) is the same
        raise Refused(f"{unreachable} ({type(error).__name__})", hint=hint) from None


def resolve(repository: str, revision: str, hint: str) -> str:
    """The commit `revision` (branch, tag or commit) names in `repository` now."""
    info = _asking(repository, revision, lambda: _api().model_info(repository, revision=revision), hint)
    if not info.sha or not COMMIT.match(info.sha):
        raise Refused(f"the model hub at {endpoint()} named no commit for {repository} at {revision!r}",
                          hint=hint)
    return info.sha


def download(repository: str, commit: str, target: Path, hint: str, entry_id: str | None = None) -> None:
    """The model's files at `commit` into `target` (which must not exist), without the client's own bookkeeping
    (`.cache/`), so the folder's digest is the digest of the model's files alone. With `entry_id`, the bytes
    received so far are shown on the entry while it downloads (catalog/downloads.py)."""
    from huggingface_hub import snapshot_download

    work = Path(tempfile.mkdtemp(prefix=".download-", dir=target.parent))
    try:
        total, files = _download_size(repository, commit, hint) if entry_id else (None, None)
        with downloads.watching(entry_id, repository, commit, work, total, files) if entry_id else nullcontext():
            _asking(repository, commit, lambda: snapshot_download(
                repository, revision=commit, local_dir=work, allow_patterns=MODEL_PATTERNS), hint)
        shutil.rmtree(work / ".cache", ignore_errors=True)
        if not list(work.glob("*.safetensors")):
            raise Refused(f"{repository} at {commit[:12]} holds no safetensors weights; pickled weights are not "
                          f"loaded", hint=hint)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _download_size(repository: str, commit: str, hint: str) -> tuple[int | None, int]:
    """Bytes and files a selection downloads: the repository's files the patterns take, as its tree lists them."""
    from huggingface_hub.hf_api import RepoFile

    tree = _asking(repository, commit, lambda: list(_api().list_repo_tree(repository, revision=commit,
                                                                          recursive=True)), hint)
    taken = [item for item in tree if isinstance(item, RepoFile)
             and any(fnmatch(item.path, pattern) for pattern in MODEL_PATTERNS)]
    return sum(item.size for item in taken) or None, len(taken)


def remote_facts(repository: str, commit: str, hint: str) -> ModelFacts:
    """The facts of a repository at `commit`, read from its config, tokenizer config, template and safetensors
    headers (ranged reads: the weights themselves are not downloaded)."""
    from huggingface_hub import hf_hub_download

    api = _api()
    files = {sibling.rfilename for sibling in
             (_asking(repository, commit, lambda: api.model_info(repository, revision=commit), hint).siblings or [])}
    if "config.json" not in files:
        raise Invalid(f"{repository} at {commit[:12]} has no config.json, so it is not a Transformers model")
    with tempfile.TemporaryDirectory(prefix="optimize-facts-") as scratch:

        def text(name: str) -> str | None:
            if name not in files:
                return None
            path = _asking(repository, commit, lambda: hf_hub_download(
                repository, name, revision=commit, local_dir=scratch), hint)
            return Path(path).read_text(encoding="utf-8")

        config = _json(text("config.json"), repository, "config.json")
        tokenizer_config = _json(text("tokenizer_config.json"), repository, "tokenizer_config.json")
        jinja = text("chat_template.jinja")
    weights = sorted(name for name in files if name.endswith(".safetensors"))
    parameters = None
    if weights:
        parameters = 0
        for name in weights:
            header = _asking(repository, commit, lambda n=name: api.parse_safetensors_file_metadata(
                repository, n, revision=commit), hint)
            parameters += sum(header.parameter_count.values())
    return facts_from(config or {}, tokenizer_config, jinja, parameters)


def _json(text: str | None, repository: str, name: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise Invalid(f"{repository}: {name} is not JSON") from None
    if not isinstance(value, dict):
        raise Invalid(f"{repository}: {name} is not a JSON object")
    return value
