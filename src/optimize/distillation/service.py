"""Distillations as users and workers see them: create (every reference resolved and frozen), read, list, pause,
resume, cancel, the rejections; the worker's spec, saved answers, smoke verdict and end; the assembling.

A distillation waits in QUEUED for a device of its profile (the scheduler grants it), answers in RUNNING — first
the smoke (the first 16 decisions, all but one accepted; or the decisions named, all accepted), then the rest —
saving its answers in chunks (`distillation_answers`), so a pause, a lost worker or a server restart goes on from
the chunks held and answers nothing twice. Its worker's end moves it to ASSEMBLING, which has released the device:
its server step (`assemble`, run by the kernel's `jobs.server_steps`) then registers the accepted rows, in decision
order, as the target's next version
(the registry's row rule applies; the same rows register the same digest), with the teacher, its commit, the
source version and the distillation in the version's lineage, and ends it COMPLETED — or FAILED when no answer was
accepted.

A request with a submissionId reaches the distillation that id started, when it is the same request (a retry, a
pipeline's step taken again), and is refused when it is another.

Its instructions (the teacher's system prompt) and its acceptance grader are kept in its settings and handed to
its worker; the grader is checked at creation as an evaluation's is (`workloads.graders`: a bundle's resolved to
its exact version and import-checked through the user-code pool; a judge model refused), and a `bundle:` grader's
archive is one its worker may read (`job.readable_blobs`).

Its acceptance rate (accepted over decided) is judged against its floor (`acceptanceFloor`, default 0.2;
`core.acceptance`): below it, its answer carries a warning, and the moment it falls below is recorded once as a
`warning` event.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import func, select

from optimize.catalog.catalog import replica_profile
from optimize.catalog.selection import job_model
from optimize.chat.grammars import refuse_uncompilable
from optimize.core.acceptance import DEFAULT_FLOOR, Acceptance, crossed_below
from optimize.core.access import visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.crashpoints import crashpoint
from optimize.core.errors import Conflict, Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.refs import parse_reference
from optimize.deployment import Deployment
from optimize.distillation.decisions import REASONS, parse_smoke
from optimize.distillation.phases import DISTILLATION, OPEN, TERMINAL, DistillationPhase
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import extend, fence, reported
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.jobs.server_steps import worker_ended
from optimize.jobs.waiting import waiting_for
from optimize.projects.quotas import check_new_work, check_queue_room
from optimize.projects.service import project_for_model, project_work
from optimize.registry.datasets import examples_objects
from optimize.schemas import distillations as answers
from optimize.schemas.distillations import DistillationJobSpec, DistillationRequest
from optimize.schemas.progress import count_of
from optimize.scoring.graders import parse_bundle_grader
from optimize.store.db import find_by_id_prefix, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Distillation, DistillationAnswer
from optimize.workloads.datasets import pick_chat_dataset, refuse_images
from optimize.workloads.graders import Grader, check_grader, prepare_grader
from optimize.workloads.models import resolve_model

P = DistillationPhase


def _settings(request: DistillationRequest) -> dict[str, Any]:
    """What the distillation keeps of its request: every setting with its default filled in, the smoke's
    decisions as ROW:MESSAGE."""
    if request.max_tokens >= request.max_model_length:
        raise Invalid(f"maxTokens {request.max_tokens} leaves no room for a prompt within maxModelLength "
                      f"{request.max_model_length}", hint="raise --max-model-length or lower --max-tokens")
    settings = {"replicas": request.replicas, "maxTokens": request.max_tokens,
                "maxModelLength": request.max_model_length, "temperature": request.temperature,
                "topP": request.top_p, "seed": request.seed, "thinking": request.thinking,
                "acceptanceFloor": request.acceptance_floor, "smoke": None, "instructions": request.instructions,
                "acceptGrader": None, "minScore": request.min_score, "responseSchema": request.response_schema}
    if request.response_schema is not None:
        refuse_uncompilable(request.response_schema, "responseSchema")
    if request.smoke is not None:
        try:
            settings["smoke"] = [f"{line}:{message}" for line, message in parse_smoke(request.smoke)]
        except ValueError as error:
            raise Invalid(str(error)) from None
    return settings


def _accept_grader(deployment: Deployment, request: DistillationRequest) -> Grader | None:
    """The acceptance grader checked as an evaluation's grader is (`workloads.graders`), before any transaction: a
    `bundle:` grader resolved to its exact version and its module imported in the sandbox. A judge model is not
    an acceptance grader: it would need a second model served beside the teacher."""
    if request.accept_grader is None:
        return None
    try:
        grader = check_grader(request.accept_grader)
    except Invalid as error:  # the grader's own words, said of this field and its flag
        raise Invalid(f"acceptGrader: {error.message}",
                      hint=error.hint and error.hint.replace("--grader ", "--accept-grader ")) from None
    if grader.startswith("model:"):
        raise Invalid(f"acceptGrader {grader!r}: a judge model cannot be a distillation's acceptance grader (it "
                      "would be served beside the teacher)",
                      hint="grade with exact, contains, regex:PATTERN, numeric[:TOLERANCE], json-label-match, "
                           "http:URL or bundle:NS/NAME#MODULE[:FUNCTION]")
    return prepare_grader(deployment, grader, request.project)


def create(deployment: Deployment, request: DistillationRequest) -> answers.Distillation:
    """Start a distillation, or reach the one the request's submissionId already names (the same request)."""
    digest = _request_digest(request)
    if request.submission_id is not None:
        with deployment.store.transaction() as session:
            existing = session.scalar(select(Distillation).where(Distillation.submission_id == request.submission_id))
            if existing is not None:
                return _same_submission(session, existing, digest)
    settings = _settings(request)
    grader = _accept_grader(deployment, request)  # user code (a bundle's import check): outside the transaction
    if grader is not None:
        settings["acceptGrader"] = grader.text
        if grader.bundle is not None:
            settings["acceptGraderBundle"] = grader.bundle  # what the worker downloads (`job.readable_blobs`)
    with deployment.store.transaction() as session:
        reference, teacher, owner = resolve_model(deployment, session, request.teacher)
        entry = deployment.catalog.find(teacher["baseEntryId"])
        if settings["thinking"] and entry.family != "gemma4":
            raise Refused(f"--thinking on is for Gemma 4 teachers; {entry.id} is a {entry.family} model",
                          hint="leave --thinking out (off)")
        if entry.context_length and settings["maxModelLength"] > entry.context_length:
            if "max_model_length" in request.model_fields_set:
                raise Refused(f"maxModelLength {settings['maxModelLength']} is above {entry.id}'s context of "
                              f"{entry.context_length} tokens", hint=f"pass --max-model-length {entry.context_length}"
                                                                     " or less")
            settings["maxModelLength"] = entry.context_length  # the default, cut to what the teacher holds
        profile = replica_profile(entry, deployment.profiles, request.device_profile, "distillation")
        _check_replicas(settings["replicas"], next(p for p in deployment.profiles if p.name == profile))
        project = project_for_model(session, reference, owner, request.project, "distillation")
        target = _target(request.target, project.name)
        source = pick_chat_dataset(session, request.source, project.name, "source")
        refuse_images(source, "source", "and a distillation's teacher answers text rows only")
        check_new_work(session, project.name, "distillation", deployment.quotas)
        values = {"id": new_id(), "project": project.name, "submission_id": request.submission_id,
                  "submission_digest": digest if request.submission_id else None, "teacher_reference": reference,
                  "teacher": teacher, "source_reference": source.reference, "source_digest": source.digest,
                  "source_rows": source.rows, "target": target, "settings": settings, "device_profile": profile,
                  "phase": P.QUEUED.value, "attempt": 0, "progress": _progress(None, {}), "created_at": utcnow()}
        if request.submission_id is None:
            session.add(Distillation(**values))
        elif insert_ignoring_conflict(session, Distillation, values, ["submission_id"]) == 0:
            # another request with the same id won the race
            return _same_submission(session, session.scalar(select(Distillation).where(
                Distillation.submission_id == request.submission_id)), digest)
        session.flush()
        item = session.get(Distillation, values["id"])
        record(session, DISTILLATION.subject(item.id), "phase", phase=item.phase)
        queue_wake(session)
        return distillation_view(item)


def _request_digest(request: DistillationRequest) -> str:
    body = request.model_dump(mode="json", by_alias=True, exclude={"submission_id"})
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _same_submission(session, item: Distillation, digest: str) -> answers.Distillation:
    """The distillation a submissionId started, for the same request; a token that may not see it learns only that
    the id is taken."""
    condition = visible_projects(Distillation.project)
    if condition is not None and session.scalar(select(Distillation.id).where(Distillation.id == item.id,
                                                                              condition)) is None:
        raise Conflict(f"submissionId {item.submission_id!r} is taken", hint="use another submissionId, or leave it "
                                                                              "out")
    if item.submission_digest != digest:
        raise Conflict(f"submissionId {item.submission_id!r} was used for another distillation "
                       f"({item.id[:12]})", hint="use a new submissionId for a different request, or leave it out")
    return distillation_view(item)


def _check_replicas(replicas: int, profile) -> None:
    """A replica per device, all held at once: more replicas than the profile has devices could never start."""
    if replicas > profile.devices:
        raise Refused(f"replicas {replicas} need {replicas} devices of profile {profile.name}; this deployment has "
                      f"{profile.devices}", hint=f"pass --replicas {profile.devices} or fewer")


def _target(text: str, project: str) -> str:
    """NS/NAME; a name without a namespace is the project's (as a source dataset's is)."""
    text = text.strip()
    try:
        reference = parse_reference(text if "/" in text else f"{project}/{text}")
    except Invalid as error:
        raise Invalid(f"target: {error.message}", hint="name it NS/NAME") from None
    if reference.version is not None or reference.alias is not None or reference.digest is not None:
        raise Invalid(f"target {text!r} must be NS/NAME: the accepted rows become its next version",
                      hint="leave out the version or alias")
    return f"{reference.namespace}/{reference.name}"


def _progress(decisions: int | None, by_reason: dict[str, int], accepted: int = 0) -> dict[str, Any]:
    rejected = sum(by_reason.values())
    return {"decisions": decisions or 0, "answered": accepted + rejected, "accepted": accepted,
            "rejected": rejected, "rejectedByReason": dict(sorted(by_reason.items()))}


def acceptance(item: Distillation, progress: dict[str, Any] | None = None) -> Acceptance:
    """Its answers accepted over those decided (`progress` as given, else as recorded), against its floor (one
    created before floors were set has the default)."""
    p = item.progress if progress is None else progress
    return Acceptance(p.get("accepted", 0), p.get("accepted", 0) + p.get("rejected", 0), p.get("decisions", 0),
                      (item.settings or {}).get("acceptanceFloor", DEFAULT_FLOOR))


def acceptance_warning(item: Distillation, rate: Acceptance) -> str | None:
    warning = rate.warning()
    return warning and f"{warning}; read why with: akka training distillations rejections {item.id[:12]}"


def distillation_view(item: Distillation) -> answers.Distillation:
    running = item.phase == P.RUNNING
    smoke = item.smoke
    rate = acceptance(item)
    warning = acceptance_warning(item, rate)
    return answers.Distillation(
        distillation_id=item.id, project=item.project, teacher=item.teacher_reference,
        base_model={"id": item.teacher["baseEntryId"], "commit": item.teacher["baseCommit"]},
        source={"reference": item.source_reference, "digest": item.source_digest, "rows": item.source_rows},
        target=item.target, settings={**_shown(item.settings), "acceptanceFloor": rate.floor},
        device_profile=item.device_profile,
        phase=item.phase,
        stage=(("answering" if smoke and smoke.get("passed") else "smoke") if running else None),
        attempt=item.attempt, devices_held=item.devices or [] if running else [],
        progress=item.progress, count=count_of("distillation", item.phase, item.progress),
        acceptance=rate.as_json(), warnings=[warning] if warning else [],
        smoke=smoke, registered=item.registered,
        failure_reason=item.failure_reason, created_at=iso(item.created_at),
        finished_at=iso(item.finished_at), terminal=item.phase in TERMINAL,
        settled=item.phase in DISTILLATION.settled)


def _shown(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as `get` shows them: the acceptance grader's bundle digest is the worker's to read."""
    return {key: value for key, value in settings.items() if key != "acceptGraderBundle"}


def accept_grader_sha256(item: Distillation) -> str | None:
    """The archive of its `bundle:` acceptance grader, which its worker downloads; None for any other grader."""
    return ((item.settings or {}).get("acceptGraderBundle") or {}).get("sha256")


def _worker_grader(settings: dict[str, Any]) -> str | None:
    """The acceptance grader as the worker reads it: a `bundle:` grader pinned to its archive's digest."""
    grader, bundle = settings.get("acceptGrader"), settings.get("acceptGraderBundle")
    if grader is None or bundle is None:
        return grader
    return parse_bundle_grader(grader).resolved(bundle["reference"], bundle["sha256"]).pinned


def find_distillation(session, distillation_id: str) -> Distillation:
    return find_by_id_prefix(session, Distillation, distillation_id, "distillation",
                             "list distillations with: akka training distillations list",
                             visible_projects(Distillation.project))


def get(deployment: Deployment, distillation_id: str) -> answers.Distillation:
    with deployment.store.transaction() as session:
        item = find_distillation(session, distillation_id)
        return distillation_view(item).extended(waiting_for=waiting_for(session, deployment, "distillation", item))


def list_distillations(deployment: Deployment, project: str | None, phase: str | None,
                       include_archived: bool = False) -> list[answers.DistillationListItem]:
    """Newest first; an archived project's distillations only with `include_archived` or when it is named."""
    query = project_work(Distillation, project, include_archived)
    if phase:
        query = query.where(Distillation.phase.in_(phases_asked(DISTILLATION, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        return [distillation_view(item).extended(answers.DistillationListItem, project_archived=archived)
                for item, archived in session.execute(query.limit(500))]


def _move(deployment: Deployment, distillation_id: str, to: DistillationPhase, verb: str,
          allowed: frozenset[DistillationPhase], check_room: bool = False) -> answers.Distillation:
    def decide(session) -> answers.Distillation:
        item = find_distillation(session, distillation_id)
        if item.phase == to:
            return distillation_view(item)
        if P(item.phase) not in allowed:
            raise Conflict(f"distillation {item.id[:12]} is {item.phase}; there is nothing to {verb}",
                           phase=item.phase)
        if check_room:
            check_queue_room(session, item.project, deployment.quotas)
        # its worker, if any, is stopped once this commits; its saved answers stay
        moved(transition(session, DISTILLATION, item, to, note=verb), f"distillation {item.id[:12]}")
        return distillation_view(item)

    return decided(deployment.store, decide)


def pause(deployment: Deployment, distillation_id: str) -> answers.Distillation:
    return _move(deployment, distillation_id, P.PAUSED, "pause", frozenset({P.QUEUED, P.RUNNING}))


def resume(deployment: Deployment, distillation_id: str) -> answers.Distillation:
    return _move(deployment, distillation_id, P.QUEUED, "resume", frozenset({P.PAUSED}), check_room=True)


def cancel(deployment: Deployment, distillation_id: str) -> answers.Distillation:
    return _move(deployment, distillation_id, P.CANCELLED, "cancel", frozenset({P.QUEUED, P.RUNNING, P.PAUSED}))


def rejections(deployment: Deployment, distillation_id: str, reason: str | None = None, limit: int | None = None
               ) -> answers.Rejections:
    if reason is not None and reason not in REASONS:
        raise Invalid(f"reason {reason!r} is not one a distillation rejects for",
                      hint="reasons: " + ", ".join(REASONS))
    with deployment.store.transaction() as session:
        item = find_distillation(session, distillation_id)
        query = select(DistillationAnswer).where(DistillationAnswer.distillation_id == item.id,
                                                 DistillationAnswer.accepted.is_(False))
        if reason is not None:
            query = query.where(DistillationAnswer.reason == reason)
        query = query.order_by(DistillationAnswer.line, DistillationAnswer.message)
        rows = session.scalars(query.limit(limit) if limit else query).all()
        return answers.Rejections(
            distillation_id=item.id, rejected_by_reason=item.progress.get("rejectedByReason", {}),
            rejections=[answers.Rejection(decision=f"{a.line}:{a.message}", reason=a.reason, detail=a.detail,
                                          output=a.output) for a in rows])


# --- the worker's calls ------------------------------------------------------------------------------------


def job_spec(deployment: Deployment, distillation_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        item, _lease = fence(session, DISTILLATION, distillation_id, token)
        answered = session.execute(select(DistillationAnswer.line, DistillationAnswer.message).where(
            DistillationAnswer.distillation_id == item.id)).all()
        entry = deployment.catalog.find(item.teacher["baseEntryId"])
        settings = item.settings
        return DistillationJobSpec.model_validate({
            "distillationId": item.id, "leaseSeconds": deployment.lease_seconds,
            "source": {"reference": item.source_reference, "digest": item.source_digest,
                       "objects": examples_objects(session, item.source_digest)},
            "model": job_model(deployment.store, entry, item.teacher["baseCommit"]),
            "adapterManifest": (item.teacher.get("manifestDigest") or "").removeprefix("sha256:") or None,
            "toolCallParser": entry.tool_call_parser,
            "settings": {**{key: settings[key] for key in ("maxTokens", "maxModelLength", "temperature", "topP",
                                                           "seed", "thinking")},
                         "instructions": settings.get("instructions"), "acceptGrader": _worker_grader(settings),
                         "minScore": settings.get("minScore"), "responseSchema": settings.get("responseSchema")},
            "replicas": len(item.devices or []) or 1,
            "smoke": settings.get("smoke"), "smokePassed": bool((item.smoke or {}).get("passed")),
            "answered": [f"{line}:{message}" for line, message in answered]}).wire()


def add_answers(deployment: Deployment, distillation_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chunk of answers, saved as it comes (an answer already saved is kept as it was: nothing twice)."""
    with deployment.store.transaction() as session:
        item, lease = fence(session, DISTILLATION, distillation_id, token)
        extend(lease, deployment.lease_seconds)
        for answer in body.get("answers") or []:
            line, message = (int(part) for part in answer["decision"].split(":"))
            insert_ignoring_conflict(session, DistillationAnswer, {
                "distillation_id": item.id, "line": line, "message": message, "accepted": bool(answer["accepted"]),
                "reason": answer.get("reason"), "detail": answer.get("detail"), "output": answer.get("output") or "",
                "row": answer.get("row")}, ["distillation_id", "line", "message"])
        template = body.get("chatTemplateSha256")
        if isinstance(template, str) and item.teacher.get("chatTemplateSha256") != template:
            item.teacher = {**item.teacher, "chatTemplateSha256": template}  # what the prompts were rendered with
        decisions = body.get("decisions", item.progress.get("decisions"))
        before = acceptance(item)
        item.progress = _counted(session, item.id, decisions)
        after = acceptance(item)
        if crossed_below(before, after):  # once, when it falls below (not at every chunk while it stays there)
            record(session, DISTILLATION.subject(item.id), "warning", code="acceptanceBelowFloor",
                   message=acceptance_warning(item, after), **after.as_json())
        record(session, DISTILLATION.subject(item.id), "progress", **{
            key: item.progress[key] for key in ("decisions", "answered", "accepted", "rejected")})
        return {"saved": len(body.get("answers") or [])}


def _counted(session, distillation_id: str, decisions: int | None) -> dict[str, Any]:
    counts = session.execute(select(DistillationAnswer.accepted, DistillationAnswer.reason, func.count()).where(
        DistillationAnswer.distillation_id == distillation_id).group_by(DistillationAnswer.accepted,
                                                                      DistillationAnswer.reason)).all()
    accepted = sum(n for ok, _, n in counts if ok)
    return _progress(decisions, {reason: n for ok, reason, n in counts if not ok}, accepted)


def judge_smoke(deployment: Deployment, distillation_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """The smoke's verdict from its saved answers: the decisions named must all be accepted; the first 16 all but
    one. A failed smoke ends the distillation FAILED naming the decisions it failed on."""
    decisions = [str(d) for d in body.get("decisions") or []]
    with deployment.store.transaction() as session:
        item, _lease = fence(session, DISTILLATION, distillation_id, token)
        answers = {f"{a.line}:{a.message}": a for a in session.scalars(select(DistillationAnswer).where(
            DistillationAnswer.distillation_id == item.id)).all()}
        failed = [d for d in decisions if d not in answers or not answers[d].accepted]
        named = item.settings.get("smoke") is not None
        passed = bool(decisions) and (not failed if named else len(failed) <= 1)
        item.smoke = {"decisions": decisions, "accepted": len(decisions) - len(failed), "passed": passed,
                      "failed": failed}
        record(session, DISTILLATION.subject(item.id), "smoke", passed=passed, failed=failed)
        if not passed:
            why = ", ".join(f"{d} ({answers[d].reason})" if d in answers else f"{d} (not answered)" for d in failed)
            rule = "all of the named decisions" if named else "all but one of the first 16 decisions"
            reported(transition(
                session, DISTILLATION, item, P.FAILED, lease=token, by_worker=True,
                failure_reason=(f"the smoke failed: {len(decisions) - len(failed)} of {len(decisions)} decisions "
                                f"accepted ({rule} must be); rejected: {why or 'none answered'}; read them with: "
                                f"akka training distillations rejections {item.id[:12]}")), DISTILLATION, item.id)
        return {"passed": passed}


def finish(deployment: Deployment, distillation_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word: FAILED with its reason, or ASSEMBLING, where its server step registers the rows."""
    with deployment.store.transaction() as session:
        item, _lease = fence(session, DISTILLATION, distillation_id, token)
        return worker_ended(session, DISTILLATION, item, token, body, P.ASSEMBLING)

def requeue(session, item: Distillation, reason: str) -> bool:
    """Queued again after its worker was lost or the server restarted: the answers saved are kept."""
    return transition(session, DISTILLATION, item, P.QUEUED, note=reason)


# --- assembling --------------------------------------------------------------------------------------------


def assemble(deployment: Deployment, distillation_id: str) -> None:
    """The server step of a distillation in ASSEMBLING: register its accepted rows and end it COMPLETED with the
    version, or FAILED naming why (none accepted, or the registry refused them). Run again after a stop, the same
    rows register the same version."""
    from optimize.registry.produced import register_rows
    from optimize.registry.uploads import Registry

    with deployment.store.transaction() as session:
        item = session.get(Distillation, distillation_id)
        if item is None or item.phase != P.ASSEMBLING:
            return
        rows = [a.row for a in session.scalars(select(DistillationAnswer).where(
            DistillationAnswer.distillation_id == item.id, DistillationAnswer.accepted.is_(True)).order_by(
            DistillationAnswer.line, DistillationAnswer.message)).all()]
        lineage = {"producedBy": {"kind": "distillation", "id": item.id},
                   "teacher": {"reference": item.teacher_reference, "commit": item.teacher["baseCommit"],
                               "weightsDigest": item.teacher.get("weightsDigest"),
                               "chatTemplateSha256": item.teacher.get("chatTemplateSha256")},
                   "source": {"reference": item.source_reference, "digest": item.source_digest}}
        target, progress = item.target, item.progress
    crashpoint("distillation.assemble")  # fault tests: the server dies between its worker's end and the registration
    registered, failure = None, None
    if not rows:
        failure = (f"no answer was accepted ({progress.get('rejected', 0)} rejected: "
                   + ", ".join(f"{r} {n}" for r, n in progress.get("rejectedByReason", {}).items())
                   + f"); read them with: akka training distillations rejections {distillation_id[:12]}")
    else:
        try:
            registry = Registry(deployment.store, deployment.blobs, deployment.dataset_limits, deployment.quotas)
            registered = register_rows(registry, target, rows, lineage)
        except (Invalid, Refused, NotFound, Conflict) as error:
            failure = f"the accepted rows could not be registered as {target}: {error.message}"

    def decide(session) -> None:
        item = session.get(Distillation, distillation_id)
        if item is None or item.phase != P.ASSEMBLING:
            return
        what = f"distillation {distillation_id[:12]}"  # lost: decided again on a fresh read (`decided`)
        if failure is not None:
            moved(transition(session, DISTILLATION, item, P.FAILED, failure_reason=failure), what)
        else:
            moved(transition(session, DISTILLATION, item, P.COMPLETED, registered={
                "reference": registered.version.reference, "digest": registered.version.digest,
                "rows": registered.rows}),
                what)

    decided(deployment.store, decide)
