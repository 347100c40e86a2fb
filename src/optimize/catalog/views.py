"""Catalog entries and their envelopes (labelled as measurements) as the API answers them.

Once a model is selected, its parameter count is the one counted in the selected files (`parameters.source:
files`), not the catalog's figure: what is shown is what will train.
"""

from __future__ import annotations

from typing import Any

from optimize.catalog.schema import Entry
from optimize.chat.families import reads_images
from optimize.core.clock import iso
from optimize.core.server_paths import shows_server_paths
from optimize.schemas import catalog as answers
from optimize.store.tables import BaseModelSelection


def entry_view(entry: Entry, selection: BaseModelSelection | None) -> answers.BaseModelEntry:
    """An entry as the list shows it."""
    return answers.BaseModelEntry(**_summary(entry, selection))


def entry_detail(entry: Entry, selection: BaseModelSelection | None, **more: Any) -> answers.BaseModelDetail:
    """An entry in full: what the list shows, its envelopes, notes and selection (and `more`: a download's
    progress)."""
    return answers.BaseModelDetail(**_summary(entry, selection), **_full(entry, selection), **more)


def _summary(entry: Entry, selection: BaseModelSelection | None) -> dict[str, Any]:
    return {
        "id": entry.id,
        "repository": entry.repository,
        "commit": selection.commit if selection else entry.commit,
        "family": entry.family,
        "takesImages": reads_images(entry.family),
        "parameters": _parameters(entry, selection),
        "contextLength": entry.context_length,
        "allowedFor": list(entry.allowed_for),
        "servingOnly": entry.serving_only,
        "methods": sorted({e.method for e in entry.envelopes}),
        "status": "ready" if selection else "not-selected",
        "standIn": entry.stand_in is not None,
    }


def _full(entry: Entry, selection: BaseModelSelection | None) -> dict[str, Any]:
    return {
        "catalogCommit": entry.commit,
        "commitNote": entry.commit_note,
        "architecture": entry.architecture,
        "toolCallParser": entry.tool_call_parser,
        "servedOn": entry.served_on,
        "chatTemplate": entry.chat_template,
        "adaptExperts": entry.adapt_experts,
        "notes": entry.notes,
        "chatTemplateSha256": entry.chat_template_sha256,
        "addedAt": entry.added_at,
        "envelopes": [
            {**envelope.model_dump(by_alias=True, exclude={"measurement"}), "kind": "measurement",
             "measurement": envelope.measurement.model_dump()}
            for envelope in entry.envelopes
        ],
        "selection": None if selection is None else {
            "commit": selection.commit, "contentDigest": f"sha256:{selection.content_digest}",
            "source": selection.source, "path": selection.path if shows_server_paths() else None,
            "selectedAt": iso(selection.selected_at),
            "revision": selection.revision, "parameters": selection.parameters,
        },
    }


def _parameters(entry: Entry, selection: BaseModelSelection | None) -> dict[str, Any]:
    counted = selection.parameters if selection is not None else None
    if counted is None:
        return {"total": entry.parameters.total, "active": entry.parameters.active,
                "source": "catalog" if entry.parameters.total is not None else None}
    # a dense model's active parameters are all of them; an expert model's are not in its files
    dense = not entry.architecture.get("mixtureOfExperts")
    return {"total": counted, "active": counted if dense else entry.parameters.active, "source": "files"}
