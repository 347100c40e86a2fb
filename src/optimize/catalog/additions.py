"""`base-models add REPO[@REV]`: an administrator adds a hub model to this deployment's catalog.

Only a family Optimize renders and an architecture it trains and serves is accepted; anything else is refused
naming the architecture. The entry is pinned to the commit the revision names now, and its figures (parameters,
context length, architecture, chat template digest) are read from the repository's files at that commit, never
typed in. Envelopes start empty: nothing has been measured for it. The entry is kept in the store, so a restarted
server applies it again; an entry of the catalog file with the same id or repository wins.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from optimize.catalog import hub
from optimize.catalog.catalog import Catalog
from optimize.catalog.facts import ModelFacts
from optimize.catalog.schema import Entry
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid, Refused
from optimize.core.names import is_valid_name
from optimize.store.db import Store
from optimize.store.tables import BaseModelAddition

# architecture class -> the families whose rendering rules fit it (the first is the default)
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "LlamaForCausalLM": ("llama3.2", "smollm2"),
    "Qwen2ForCausalLM": ("qwen2.5",),
    "MistralForCausalLM": ("ministral",),
    "Gemma4ForConditionalGeneration": ("gemma4",),
    "Gemma4ForCausalLM": ("gemma4",),
    "Idefics3ForConditionalGeneration": ("smolvlm",),
}
# family -> (tool-call parser, whose chat template renders it), as the shipped catalog has them
FAMILIES: dict[str, tuple[str | None, str]] = {
    "llama3.2": ("llama3_json", "shipped"), "smollm2": (None, "shipped"), "qwen2.5": ("hermes", "shipped"),
    "ministral": ("mistral", "shipped"), "gemma4": ("gemma4", "corrected"), "smolvlm": (None, "shipped"),
}


def parse_reference(reference: str) -> tuple[str, str | None]:
    """`owner/name[@REV]` -> (repository, revision or None)."""
    repository, _, revision = reference.strip().partition("@")
    parts = repository.split("/")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in repository):
        raise Invalid(f"{reference!r} is not a hub repository", hint="name it as OWNER/NAME or OWNER/NAME@REVISION")
    if not all(is_valid_name(part.lower()) for part in parts):
        raise Invalid(f"{repository!r} cannot name a catalog entry here", hint="name a repository of letters, "
                                                                                 "digits, '.', '-' and '_'")
    if "@" in reference and not revision:
        raise Invalid(f"{reference!r} names no revision after @", hint="leave out @ or name a branch, tag or commit")
    return repository, revision or None


def add(store: Store, catalog: Catalog, reference: str, family: str | None = None) -> Entry:
    """Resolve, read and record a hub model as a catalog entry of this deployment."""
    repository, revision = parse_reference(reference)
    for existing in catalog.entries:
        if repository.lower() in (existing.id.lower(), existing.repository.lower()):
            raise Conflict(f"{repository} is in the catalog already, as {existing.id}",
                           hint=f"select it: akka training base-models select {existing.id}")
    hint = "check the hub this server reaches (HF_ENDPOINT, HF_TOKEN) and try again"
    hub.require_online(repository, hint="start the server with the hub reachable (HF_HUB_OFFLINE unset)")
    commit = hub.resolve(repository, revision or "main", hint)
    facts = hub.remote_facts(repository, commit, hint)
    entry = _entry(repository, revision or "main", commit, facts, _family(facts, family))
    with store.transaction() as session:
        session.add(BaseModelAddition(entry_id=entry.id, repository=entry.repository,
                                      entry=entry.model_dump(mode="json", by_alias=True),
                                      added_at=utcnow()))
        try:
            session.flush()
        except IntegrityError:  # another administrator added it a moment ago: the constraint decides
            raise Conflict(f"{repository} was added to the catalog already") from None
    catalog.add(entry)
    return entry


def _family(facts: ModelFacts, asked: str | None) -> str:
    architecture = facts.architecture.get("class")
    families = ARCHITECTURES.get(architecture or "")
    if families is None:
        raise Refused(f"architecture {architecture or '(none named in config.json)'} is not supported",
                      hint=f"Optimize trains and serves: {', '.join(ARCHITECTURES)}")
    if asked is None:
        return families[0]
    if asked not in families:
        raise Invalid(f"family {asked!r} does not fit architecture {architecture}",
                      hint=f"pass --family {' or '.join(families)}")
    return asked


def _entry(repository: str, revision: str, commit: str, facts: ModelFacts, family: str) -> Entry:
    if facts.parameters is None:
        raise Refused(f"{repository} at {commit[:12]} holds no safetensors weights; pickled weights are not loaded",
                      hint="add a repository that publishes safetensors weights")
    parser, template = FAMILIES[family]
    at = iso(utcnow())
    return Entry.model_validate({
        "id": repository.lower(), "repository": repository, "commit": commit,
        "commitNote": f"{revision} on {hub.endpoint()} when it was added, {at}",
        "family": family, "architecture": {k: v for k, v in facts.architecture.items() if v is not None},
        # an expert model's active parameters are not in its files: left unknown rather than guessed
        "parameters": {"total": facts.parameters, "active": None if facts.mixture_of_experts else facts.parameters},
        "contextLength": facts.context_length, "allowedFor": ["training", "serving"], "toolCallParser": parser,
        "chatTemplate": template, "chatTemplateSha256": facts.chat_template_sha256, "addedAt": at,
        "notes": "added with base-models add: parameters, context length, architecture and template digest read "
                 "from the repository's files at the pinned commit; no envelopes measured yet",
    })


def load_additions(store: Store, catalog: Catalog) -> None:
    """Apply the entries added on this deployment (at server start)."""
    with store.transaction() as session:
        rows = list(session.scalars(select(BaseModelAddition).order_by(BaseModelAddition.added_at)))
    for row in rows:
        catalog.add(Entry.model_validate(row.entry))
