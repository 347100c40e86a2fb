"""Curations as users and workers see them: apply (every reference resolved and frozen, or the curation its
curationId already names), read, list, cancel, the rejections; the worker's spec, saved verdicts and end; the
assembling.

A curation waits in QUEUED for a device of its profile (the scheduler grants it) and judges in RUNNING: its worker
asks the judge about each candidate of its sessions, in order — the judge loaded on that device, or, for a judge
named `endpoint:MODEL`, asked through the server where an endpoint serves it (`workloads.served`; the curation then
holds no device: `job.CurationKind.request`) — and saves the verdicts in chunks
(`curation_verdicts`), so a lost worker or a server restart goes on from the verdicts held and judges nothing twice.
Its worker's end moves it to ASSEMBLING, which has released the device: its server step (`assemble`, run by the
kernel's `jobs.server_steps`) registers the kept candidates, in order, as the dataset's next version (the
registry's row rule applies; the same rows register the same digest), with the curation, its sessions, the judge
and its commit and the instructions' sha256 in the version's lineage, and ends it COMPLETED — or FAILED when
nothing was kept, or the registry refused the rows (an archived namespace among them).

Refused at submission, by field, before anything starts: a session hash that no session of the project has (one of
another project named so), a judge that is no base model selected here nor a registered model, an archived or
foreign target namespace, a target that is no chat dataset; the request's own fields are refused by its model
(`schemas.curations`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import func, select

from optimize.catalog.catalog import check_replica_profile
from optimize.catalog.selection import job_model
from optimize.core import access
from optimize.core.access import visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Forbidden, Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.refs import parse_reference
from optimize.curation.phases import CURATION, OPEN, TERMINAL, CurationPhase
from optimize.curation.verdicts import REASONS, kept_row
from optimize.deployment import Deployment
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import extend, fence
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.jobs.server_steps import worker_ended
from optimize.jobs.waiting import waiting_for
from optimize.projects.quotas import check_new_work
from optimize.projects.service import open_project, project_work
from optimize.registry.archival import refuse_if_archived
from optimize.registry.datasets import find_dataset
from optimize.schemas import curations as answers
from optimize.schemas.curations import CurationJobSpec, CurationRequest
from optimize.schemas.progress import count_of
from optimize.scoring.judge import JUDGE_MAX_NEW_TOKENS
from optimize.store.db import find_by_id_prefix, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import ConversationSession, Curation, CurationVerdict, Pipeline
from optimize.workloads import served
from optimize.workloads.models import resolve_model

ENDPOINT_PREFIX = "endpoint:"  # a judge an endpoint serves: asked there
MOST_ASKED = 64  # judge conversations one call of the worker's may carry

P = CurationPhase
LIST_HINT = "list curations with: akka training curations list"


def _digest(request: CurationRequest) -> str:
    """What a repeated curationId must ask again: the request without its key, as parsed."""
    body = request.model_dump(mode="json", by_alias=True, exclude={"curation_id"}, exclude_none=True)
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def instructions_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _project_name(asked: str | None) -> str:
    """The project named, or the token's one project (as a session's)."""
    if asked:
        return asked.strip().lower()
    limits = access.current()
    if limits is not None and limits.projects is not None and len(limits.projects) == 1:
        return next(iter(limits.projects))
    raise Invalid("project: a curation counts for a training project; say which",
                  hint="add project: NAME to the request")


def apply(deployment: Deployment, request: CurationRequest) -> tuple[answers.Curation, bool]:
    """Store a new QUEUED curation, or answer the one its curationId already names (created False); a curationId
    used for another request is refused."""
    key = request.curation_id or new_id()
    digest = _digest(request)
    with deployment.store.transaction() as session:
        existing = session.scalar(select(Curation).where(Curation.key == key))
        if existing is not None:
            return _same_request(session, existing, digest), False
    served_judge = _served_judge(deployment, request.judge)  # its own transaction: before this one opens
    with deployment.store.transaction() as session:
        project = open_project(session, _project_name(request.project))
        sessions = _sessions(session, request, project.name)
        reference, judge, _owner = _judge(deployment, session, served_judge or request.judge)
        if served_judge:
            judge = {**judge, "endpoint": True}
        profile = request.device_profile or "cpu"
        named = {p.name: p for p in deployment.profiles}
        if profile not in named:
            raise Refused(f"deviceProfile {profile!r} is not a device profile of this deployment",
                          hint="profiles here: " + ", ".join(named))
        if not judge.get("endpoint"):  # a judge an endpoint serves holds that endpoint's devices, none of ours
            check_replica_profile(deployment.catalog.find(judge["baseEntryId"]), named[profile],
                                  deployment.profiles, "curation")
        dataset = _dataset(session, request.dataset, project.name)
        check_new_work(session, project.name, "curation", deployment.quotas)
        token = access.current_token()
        total = sum(s["candidates"] for s in sessions)
        curation_id = new_id()
        inserted = insert_ignoring_conflict(session, Curation, {
            "id": curation_id, "key": key, "request_digest": digest, "project": project.name, "sessions": sessions,
            "candidates": total, "judge_reference": reference, "judge": judge, "instructions": request.instructions,
            "threshold": request.threshold, "system_prompt": request.system_prompt, "dataset": dataset,
            "device_profile": profile, "phase": P.QUEUED.value, "attempt": 0, "progress": _progress(total, {}),
            "created_by": token[1][:200] if token else None, "created_at": utcnow()}, ["key"]) == 1
        item = session.scalar(select(Curation).where(Curation.key == key))
        if not inserted:  # another request with the same curationId won the race
            return _same_request(session, item, digest), False
        record(session, CURATION.subject(item.id), "phase", phase=item.phase)
        queue_wake(session)
        return curation_view(item), True


def _same_request(session, item: Curation, digest: str) -> answers.Curation:
    condition = visible_projects(Curation.project)
    if condition is not None and session.scalar(select(Curation.id).where(Curation.id == item.id, condition)) is None:
        raise Conflict(f"curationId {item.key!r} is taken", hint="use another curationId, or leave it out")
    if item.request_digest != digest:
        raise Conflict(f"curationId {item.key!r} was used for another request (curation {item.id[:12]})",
                       hint="use a new curationId for a different request, or leave it out")
    return curation_view(item)


def _sessions(session, request: CurationRequest, project: str) -> list[dict[str, Any]]:
    """The sessions named, of the project, in order: each hash once, each a session of this project (one of
    another project, or none, refused naming the hash)."""
    found, seen = [], set()
    for given in request.session_hashes:
        wanted = given.lower().removeprefix("sha256:")
        if wanted in seen:
            raise Invalid(f"sessionHashes: session {wanted[:12]}… is named twice", hint="name each session once")
        seen.add(wanted)
        row = session.scalar(select(ConversationSession).where(ConversationSession.sha256 == wanted,
                                                               ConversationSession.project == project))
        if row is None:
            query = select(ConversationSession.project).where(ConversationSession.sha256 == wanted)
            condition = visible_projects(ConversationSession.project)
            others = sorted(session.scalars(query if condition is None else query.where(condition)).all())
            if others:
                raise Refused(f"sessionHashes: session {wanted[:12]}… belongs to project {', '.join(others)}, not "
                              f"{project}", hint=f"create the session in project {project} (sessions create "
                                                 f"--project {project}), or curate in its own project")
            raise NotFound(f"sessionHashes: no session {wanted[:12]}… in project {project}",
                           hint="sessions create prints a session's hash")
        if request.source is not None and row.source != request.source:
            raise Refused(f"sessionHashes: session {wanted[:12]}… holds {row.source} candidates, not "
                          f"{request.source}", hint=f"leave source out, or name only {request.source} sessions")
        found.append({"sessionHash": row.sha256, "source": row.source, "candidates": row.candidates})
    return found


def _served_judge(deployment: Deployment, text: str) -> str | None:
    """For a judge named `endpoint:MODEL`, the exact version an endpoint serves for MODEL now (what the lineage
    names, and what is asked); None for a judge the curation's worker loads."""
    text = text.strip()
    if not text.startswith(ENDPOINT_PREFIX):
        return None
    try:
        return served.asker().exact_name(deployment, text.removeprefix(ENDPOINT_PREFIX).strip())
    except (NotFound, Invalid, Refused, Forbidden, Conflict) as error:
        raise type(error)(f"judge: {error.message}", hint=error.hint) from None


def _judge(deployment: Deployment, session, text: str) -> tuple[str, dict[str, Any], str | None]:
    try:
        return resolve_model(deployment, session, text.strip())
    except (NotFound, Invalid, Refused, Forbidden) as error:
        raise type(error)(f"judge: {error.message}", hint=error.hint) from None


def _dataset(session, text: str, project: str) -> str:
    """NS/NAME (a name alone is the project's), a chat dataset or a new one, in a namespace the token may write and
    that is not archived."""
    text = text.strip()
    try:
        reference = parse_reference(text if "/" in text else f"{project}/{text}")
    except Invalid as error:
        raise Invalid(f"dataset: {error.message}", hint="name it NS/NAME") from None
    if reference.version is not None or reference.alias is not None or reference.digest is not None:
        raise Invalid(f"dataset {text!r} must be NS/NAME: the kept candidates become its next version",
                      hint="leave out the version or alias")
    try:
        access.check_namespace(reference.namespace)
        refuse_if_archived(session, reference.namespace)
    except (Refused, Forbidden) as error:
        raise type(error)(f"dataset: {error.message}", hint=error.hint) from None
    existing = find_dataset(session, reference.namespace, reference.name)
    if existing is not None and existing.kind != "chat":
        raise Refused(f"dataset: {reference.namespace}/{reference.name} is a {existing.kind} dataset; the kept "
                      "candidates are chat rows", hint="name a chat dataset, or a new one")
    return f"{reference.namespace}/{reference.name}"


def _progress(total: int, by_reason: dict[str, int], kept: int = 0) -> dict[str, Any]:
    rejected = sum(by_reason.values())
    return {"total": total, "judged": kept + rejected, "kept": kept, "rejected": rejected,
            "rejectedByReason": dict(sorted(by_reason.items()))}


def curation_view(item: Curation) -> answers.Curation:
    running = item.phase == P.RUNNING
    return answers.Curation(
        curation_id=item.id, key=item.key, project=item.project, sessions=item.sessions,
        judge={"reference": item.judge_reference, "endpoint": bool(item.judge.get("endpoint")),
               "base_model": {"id": item.judge["baseEntryId"], "commit": item.judge["baseCommit"]}},
        instructions=item.instructions, instructions_sha256=instructions_sha256(item.instructions),
        threshold=item.threshold, system_prompt=item.system_prompt, dataset=item.dataset,
        device_profile=item.device_profile, phase=item.phase, attempt=item.attempt,
        devices_held=item.devices or [] if running else [], progress=item.progress,
        count=count_of("curation", item.phase, item.progress), registered=item.registered,
        failure_reason=item.failure_reason, created_at=iso(item.created_at), finished_at=iso(item.finished_at),
        terminal=item.phase in TERMINAL, settled=item.phase in CURATION.settled)


def find_curation(session, text: str) -> Curation:
    """By its curationId as the request named it, else by its id or an unambiguous prefix of it."""
    condition = visible_projects(Curation.project)
    query = select(Curation).where(Curation.key == text.strip())
    by_key = session.scalar(query if condition is None else query.where(condition))
    if by_key is not None:
        return by_key
    return find_by_id_prefix(session, Curation, text, "curation", LIST_HINT, condition)


def get(deployment: Deployment, curation_id: str) -> answers.Curation:
    with deployment.store.transaction() as session:
        item = find_curation(session, curation_id)
        return curation_view(item).extended(waiting_for=waiting_for(session, deployment, "curation", item))


def list_curations(deployment: Deployment, project: str | None, phase: str | None, include_archived: bool = False
                   ) -> list[answers.CurationListItem]:
    """Newest first; an archived project's curations only with `include_archived` or when it is named."""
    query = project_work(Curation, project, include_archived)
    if phase:
        query = query.where(Curation.phase.in_(phases_asked(CURATION, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        return [curation_view(item).extended(answers.CurationListItem, project_archived=archived)
                for item, archived in session.execute(query.limit(500))]


def cancel(deployment: Deployment, curation_id: str, by_pipeline: bool = False) -> answers.Curation:
    """Cancel a curation; one that is a pipeline's stage is cancelled with its pipeline only (`by_pipeline`), so the
    pipeline never finds its stage ended under it."""
    def decide(session) -> answers.Curation:
        item = find_curation(session, curation_id)
        if item.phase == P.CANCELLED:
            return curation_view(item)
        owner = None if by_pipeline else _pipeline_of(session, item)
        if owner is not None:
            raise Refused(f"curation {item.id[:12]} is stage {owner[1]} of pipeline {owner[0][:12]}; a pipeline's "
                          "curation stage is cancelled with its pipeline",
                          hint=f"cancel the pipeline: akka training pipelines cancel {owner[0][:12]}")
        if P(item.phase) not in (P.QUEUED, P.RUNNING):
            raise Conflict(f"curation {item.id[:12]} is {item.phase}; there is nothing to cancel", phase=item.phase)
        # its worker, if any, is stopped once this commits; nothing is registered
        moved(transition(session, CURATION, item, P.CANCELLED, note="cancel"), f"curation {item.id[:12]}")
        return curation_view(item)

    return decided(deployment.store, decide)


def _pipeline_of(session, item: Curation) -> tuple[str, str] | None:
    """(pipeline id, stage) of the open pipeline whose stage started this curation: a pipeline's curations take the
    curationId PIPELINE-STAGE-ATTEMPT."""
    pipeline_id, _, rest = item.key.partition("-")
    stage = rest.rpartition("-")[0]
    if not stage:
        return None
    found = session.get(Pipeline, pipeline_id)
    if found is None or found.phase not in ("PENDING", "RUNNING"):
        return None
    return pipeline_id, stage


def rejections(deployment: Deployment, curation_id: str, reason: str | None = None, limit: int | None = None
               ) -> answers.CurationRejections:
    if reason is not None and reason not in REASONS:
        raise Invalid(f"reason {reason!r} is not one a curation rejects for",
                      hint="reasons: " + ", ".join(REASONS))
    with deployment.store.transaction() as session:
        item = find_curation(session, curation_id)
        query = select(CurationVerdict).where(CurationVerdict.curation_id == item.id,
                                              CurationVerdict.kept.is_(False))
        if reason is not None:
            query = query.where(CurationVerdict.reason == reason)
        query = query.order_by(CurationVerdict.position)
        rows = session.scalars(query.limit(limit) if limit else query).all()
        return answers.CurationRejections(
            curation_id=item.id, rejected_by_reason=item.progress.get("rejectedByReason", {}),
            rejections=[answers.CurationRejection(position=v.position, candidate=v.candidate,
                                                  session_hash=v.session_hash, reason=v.reason, score=v.score,
                                                  detail=v.detail, output=v.output) for v in rows])


# --- the worker's calls ------------------------------------------------------------------------------------


def session_blobs(item: Curation) -> frozenset[str]:
    """The candidates' blobs its worker reads: one a session, named by the session hash."""
    return frozenset(s["sessionHash"] for s in item.sessions)


def judge_manifest(item: Curation) -> str | None:
    """The judge adapter's weights its worker loads (none for a judge an endpoint serves)."""
    if item.judge.get("endpoint"):
        return None
    return (item.judge.get("manifestDigest") or "").removeprefix("sha256:") or None


def job_spec(deployment: Deployment, curation_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        item, _lease = fence(session, CURATION, curation_id, token)
        judged = session.scalars(select(CurationVerdict.position).where(
            CurationVerdict.curation_id == item.id)).all()
        entry = deployment.catalog.find(item.judge["baseEntryId"])
        return CurationJobSpec.model_validate({
            "curationId": item.id, "leaseSeconds": deployment.lease_seconds,
            "sessions": [{"sessionHash": s["sessionHash"], "candidates": s["candidates"]} for s in item.sessions],
            "model": job_model(deployment.store, entry, item.judge["baseCommit"]),
            "judgeReference": item.judge_reference, "judgeEndpoint": bool(item.judge.get("endpoint")),
            "adapterManifest": judge_manifest(item),
            "maxModelLength": entry.context_length or None, "instructions": item.instructions,
            "threshold": item.threshold, "judged": sorted(judged)}).wire()


def ask_endpoint(deployment: Deployment, curation_id: str, token: str, body: Any) -> dict[str, Any]:
    """A chunk of the worker's judge conversations, asked where an endpoint serves its judge (`worker_judge`)."""
    conversations = body.get("conversations") if isinstance(body, dict) else None
    if not isinstance(conversations, list) or len(conversations) > MOST_ASKED or not all(
            isinstance(c, list) for c in conversations):
        raise Invalid(f"conversations must be a list of at most {MOST_ASKED} conversations (lists of messages)")
    with deployment.store.transaction() as session:
        item, lease = fence(session, CURATION, curation_id, token)
        extend(lease, deployment.lease_seconds)
        if not item.judge.get("endpoint"):
            raise Refused(f"curation {item.id[:12]} loads its judge on its worker; no endpoint is asked for it")
        judge = item.judge_reference
    return {"replies": served.asker().ask(deployment, judge, conversations, JUDGE_MAX_NEW_TOKENS)}


def add_verdicts(deployment: Deployment, curation_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chunk of verdicts, saved as it comes (a verdict already saved is kept as it was: nothing twice)."""
    verdicts = body.get("verdicts") or []
    with deployment.store.transaction() as session:
        item, lease = fence(session, CURATION, curation_id, token)
        extend(lease, deployment.lease_seconds)
        for verdict in verdicts:
            insert_ignoring_conflict(session, CurationVerdict, {
                "curation_id": item.id, "position": int(verdict["position"]),
                "candidate": str(verdict.get("candidate") or ""), "session_hash": str(verdict["sessionHash"]),
                "kept": bool(verdict["kept"]), "score": verdict.get("score"), "reason": verdict.get("reason"),
                "detail": verdict.get("detail"), "output": verdict.get("output") or ""},
                ["curation_id", "position"])
        item.progress = _counted(session, item.id, item.candidates)
        record(session, CURATION.subject(item.id), "progress",
               **{key: item.progress[key] for key in ("total", "judged", "kept", "rejected")})
        return {"saved": len(verdicts)}


def _counted(session, curation_id: str, total: int) -> dict[str, Any]:
    counts = session.execute(select(CurationVerdict.kept, CurationVerdict.reason, func.count()).where(
        CurationVerdict.curation_id == curation_id).group_by(CurationVerdict.kept, CurationVerdict.reason)).all()
    kept = sum(n for ok, _, n in counts if ok)
    return _progress(total, {reason: n for ok, reason, n in counts if not ok}, kept)


def finish(deployment: Deployment, curation_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word: FAILED with its reason, or ASSEMBLING, where its server step registers the rows."""
    with deployment.store.transaction() as session:
        item, _lease = fence(session, CURATION, curation_id, token)
        return worker_ended(session, CURATION, item, token, body, P.ASSEMBLING)

def requeue(session, item: Curation, reason: str) -> bool:
    """Queued again after its worker was lost or the server restarted: the verdicts saved are kept."""
    return transition(session, CURATION, item, P.QUEUED, note=reason)


# --- assembling --------------------------------------------------------------------------------------------


def assemble(deployment: Deployment, curation_id: str) -> None:
    """The server step of a curation in ASSEMBLING: register its kept candidates and end it COMPLETED with the
    version, or FAILED naming why (nothing kept, or the registry refused them). Run again after a stop, the same
    rows register the same version."""
    from optimize.registry.produced import register_rows
    from optimize.registry.uploads import Registry

    with deployment.store.transaction() as session:
        item = session.get(Curation, curation_id)
        if item is None or item.phase != P.ASSEMBLING:
            return
        kept = set(session.scalars(select(CurationVerdict.position).where(
            CurationVerdict.curation_id == item.id, CurationVerdict.kept.is_(True))).all())
        lineage = {"producedBy": {"kind": "curation", "id": item.id},
                   "sessions": [s["sessionHash"] for s in item.sessions],
                   "judge": {"reference": item.judge_reference, "baseCommit": item.judge["baseCommit"]},
                   "instructionsSha256": instructions_sha256(item.instructions), "threshold": item.threshold}
        sessions, dataset, progress, system_prompt = item.sessions, item.dataset, item.progress, item.system_prompt
    registered, failure = None, None
    if not kept:
        reasons = ", ".join(f"{r} {n}" for r, n in progress.get("rejectedByReason", {}).items())
        failure = (f"nothing was kept: {progress.get('rejected', 0)} of {progress.get('total', 0)} candidates "
                   f"rejected ({reasons or 'none judged'}); read them with: akka training curations rejections "
                   f"{curation_id[:12]}")
    else:
        try:
            rows = _kept_rows(deployment, sessions, kept, system_prompt)
            registry = Registry(deployment.store, deployment.blobs, deployment.dataset_limits, deployment.quotas)
            registered = register_rows(registry, dataset, rows, lineage)
        except (Invalid, Refused, NotFound, Conflict, Forbidden) as error:
            failure = f"the kept candidates could not be registered as {dataset}: {error.message}"

    def decide(session) -> None:
        item = session.get(Curation, curation_id)
        if item is None or item.phase != P.ASSEMBLING:
            return
        what = f"curation {curation_id[:12]}"  # lost: decided again on a fresh read (`decided`)
        if failure is not None:
            moved(transition(session, CURATION, item, P.FAILED, failure_reason=failure), what)
        else:
            moved(transition(session, CURATION, item, P.COMPLETED, registered={
                "reference": registered.version.reference, "digest": registered.version.digest,
                "rows": registered.rows}), what)

    decided(deployment.store, decide)


def _kept_rows(deployment: Deployment, sessions: list[dict[str, Any]], kept: set[int], system_prompt: str | None
               ) -> list[dict[str, Any]]:
    """The kept candidates' rows in order, read from the sessions' blobs (positions count across the sessions)."""
    rows, position = [], 0
    for s in sessions:
        with deployment.blobs.open_held(s["sessionHash"],
                                        what=f"the candidates of session {s['sessionHash'][:12]}…") as held:
            for line in held:
                if not line.strip():
                    continue
                if position in kept:
                    rows.append(kept_row(json.loads(line), system_prompt))
                position += 1
    return rows
