"""JSON shapes of catalog entries and their envelopes (labelled as measurements)."""

from __future__ import annotations

from typing import Any

from optimize.catalog.schema import Entry
from optimize.core.clock import iso
from optimize.store.tables import BaseModelSelection


def entry_json(entry: Entry, selection: BaseModelSelection | None, *, full: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": entry.id,
        "repository": entry.repository,
        "commit": selection.commit if selection else entry.commit,
        "family": entry.family,
        "parameters": {"total": entry.parameters.total, "active": entry.parameters.active},
        "contextLength": entry.context_length,
        "allowedFor": list(entry.allowed_for),
        "servingOnly": entry.serving_only,
        "methods": sorted({e.method for e in entry.envelopes}),
        "status": "ready" if selection else "not-selected",
        "standIn": entry.stand_in is not None,
    }
    if full:
        body.update({
            "catalogCommit": entry.commit,
            "commitNote": entry.commit_note,
            "architecture": entry.architecture,
            "toolCallParser": entry.tool_call_parser,
            "servedOn": entry.served_on,
            "chatTemplate": entry.chat_template,
            "adaptExperts": entry.adapt_experts,
            "notes": entry.notes,
            "envelopes": [
                {**envelope.model_dump(by_alias=True, exclude={"measurement"}), "kind": "measurement",
                 "measurement": envelope.measurement.model_dump()}
                for envelope in entry.envelopes
            ],
            "selection": None if selection is None else {
                "commit": selection.commit, "contentDigest": f"sha256:{selection.content_digest}",
                "source": selection.source, "path": selection.path, "selectedAt": iso(selection.selected_at),
            },
        })
    return body
