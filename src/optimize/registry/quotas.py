"""The registry's side of the per-project quotas (core.quotas): upload sessions open into a namespace and the bytes
its datasets and scoring bundles hold, checked when a new upload session is opened and when a bundle version is
registered.

A namespace may have no row yet (it is created by its first registration), so the transactions that check its
quotas serialize on a key of its name instead (`lock_namespace`), taken first and held until they commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.errors import TooMany
from optimize.core.quotas import Quota
from optimize.core.sizes import human_size
from optimize.registry.nouns import NOUNS
from optimize.registry.upload_phases import UploadPhase
from optimize.store.db import hold_key
from optimize.store.tables import UploadSession


def lock_namespace(session: Session, namespace: str) -> None:
    """Held until the transaction ends by every transaction that checks the namespace's quotas and then stores what
    they count (an upload session, a bundle version): they count one after another, never the same room twice."""
    hold_key(session, f"namespace quotas:{namespace}")


def open_sessions(session: Session, namespace: str) -> list[UploadSession]:
    return list(session.scalars(select(UploadSession).where(
        UploadSession.namespace == namespace, UploadSession.phase == UploadPhase.OPEN.value)
        .order_by(UploadSession.created_at)))


def stored_bytes(session: Session, namespace: str, sessions: list[UploadSession]) -> int:
    """The bytes of the namespace's versions of every noun that declares them counted (dataset versions, bundle
    archives), and what its open sessions announce."""
    held = 0
    for kind in NOUNS:
        if kind.stored_bytes is not None:
            held += int(session.scalar(
                select(func.coalesce(func.sum(getattr(kind.version, kind.stored_bytes)), 0))
                .join(kind.owner, kind.owner.id == getattr(kind.version, kind.owner_column))
                .where(kind.owner.namespace == namespace)) or 0)
    return held + sum(item["bytes"] for upload in sessions for item in upload.manifest)


def registry_usage(session: Session, namespace: str) -> dict[str, int]:
    sessions = open_sessions(session, namespace)
    return {"uploadSessions": len(sessions), "storedBytes": stored_bytes(session, namespace, sessions)}


def check_new_upload(session: Session, namespace: str, quota: Quota, manifest: list[dict[str, Any]]) -> None:
    """Refuses a new upload session the namespace's quota has no room for, naming the quota and its holders."""
    lock_namespace(session, namespace)
    sessions = open_sessions(session, namespace)
    if len(sessions) >= quota.upload_sessions:
        holders = ", ".join(f"{u.namespace}/{u.name} ({u.id[:12]})" for u in sessions[:5])
        more = f" and {len(sessions) - 5} more" if len(sessions) > 5 else ""
        raise TooMany(f"namespace {namespace} already has {len(sessions)} open upload sessions, its quota "
                      f"uploadSessions ({quota.upload_sessions}); held by {holders}{more}",
                      hint="finish those uploads or let them expire (akka server gc collects them), or ask the "
                           "operator to raise OPTIMIZE_QUOTA_UPLOAD_SESSIONS (or this project's uploadSessions in "
                           "OPTIMIZE_PROJECT_QUOTAS)",
                      quota="uploadSessions", limit=quota.upload_sessions, used=len(sessions))
    check_stored_bytes(session, namespace, quota, sum(item["bytes"] for item in manifest), sessions)


def check_stored_bytes(session: Session, namespace: str, quota: Quota, adding: int,
                       sessions: list[UploadSession] | None = None) -> None:
    """Refuses `adding` bytes more where they would pass the namespace's storedBytes quota."""
    lock_namespace(session, namespace)
    used = stored_bytes(session, namespace, open_sessions(session, namespace) if sessions is None else sessions)
    if used + adding > quota.stored_bytes:
        raise TooMany(f"namespace {namespace} holds {human_size(used)} of datasets, scoring bundles and open uploads; "
                      f"{human_size(adding)} more would pass its quota storedBytes ({human_size(quota.stored_bytes)})",
                      hint="ask the operator to raise OPTIMIZE_QUOTA_STORED_BYTES (or this project's storedBytes in "
                           "OPTIMIZE_PROJECT_QUOTAS)", quota="storedBytes", limit=quota.stored_bytes, used=used)
