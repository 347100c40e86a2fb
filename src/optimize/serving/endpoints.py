"""Endpoints as users and workers see them: create (or attach to a served base), read, list, detach,
disable/enable, delete; the worker's spec, readiness, heartbeats and end.

An endpoint is one resident base model plus the LoRA adapters attached to it. It waits in AWAITING_CAPACITY for
a device of its profile (the scheduler grants it: `optimize.jobs.scheduler`), loads in STARTING and answers in READY
until it is deleted (DELETED; also when it answered no request for the deployment's idle timeout, since it holds
its device while idle) or fails (FAILED, with the reason). A candidate whose base model and commit an
active endpoint of its project already serves attaches to it without new devices; its worker loads the adapter
at its next heartbeat, and the model answers once the worker says it is loaded. A model disabled at an endpoint
stays loaded on its device but is refused (409) to requests through the server until it is enabled again; the
flag lives in the endpoint's JSON columns (`"disabled": true` on an adapter's entry, or in `base` for the base
model), and the worker is never told (callers of the worker itself are unaffected).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from optimize.catalog.catalog import replica_profile
from optimize.catalog.selection import job_model
from optimize.core.access import current as current_limits
from optimize.core.access import only_visible, visible_projects
from optimize.core.clock import as_utc, iso, unix_seconds, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.refs import parse_reference, without_fine_tuned
from optimize.deployment import Deployment
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import extend, fence, reported
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.jobs.waiting import waiting_for
from optimize.projects.quotas import check_new_work
from optimize.projects.service import project_for_model, project_work
from optimize.registry.models import find_model, resolve_model_reference
from optimize.schemas import endpoints as answers
from optimize.schemas.endpoints import EndpointRequest
from optimize.schemas.jobs import EndpointSpec
from optimize.schemas.outcomes import LastWord
from optimize.serving.following import adapter_entry, answering_for, followed_alias, retire_replaced
from optimize.serving.load import MAX_ADAPTERS
from optimize.serving.phases import ACTIVE as OPEN_PHASES
from optimize.serving.phases import ENDPOINT, SERVED, TERMINAL, EndpointPhase
from optimize.store.db import find_by_id_prefix
from optimize.store.events import record
from optimize.store.tables import Endpoint
from optimize.workloads.models import resolve_model

ACTIVE = tuple(ENDPOINT.values(OPEN_PHASES))  # an endpoint that serves, or will


def create(deployment: Deployment, request: EndpointRequest) -> answers.EndpointCreated:
    """A new endpoint for the model, or the active endpoint of the project that already serves its base model
    at the same commit, with the model attached."""
    with deployment.store.transaction() as session:
        reference, model, owner = resolve_model(deployment, session, request.model)
        entry = deployment.catalog.find(model["baseEntryId"])
        if "serving" not in entry.allowed_for:
            raise Refused(f"base model {entry.id} is not allowed for serving on this deployment",
                          hint="serve a model whose catalog entry allows serving (akka training base-models get)")
        profile = replica_profile(entry, deployment.profiles, request.device_profile, "endpoint")
        project = project_for_model(session, reference, owner, request.project, "endpoint")
        follows = followed_alias(request.model)
        adapter = None if model["kind"] == "base" else adapter_entry(deployment, session, reference, model, follows)
        served = session.scalars(select(Endpoint).where(
            Endpoint.project == project.name, Endpoint.phase.in_(ACTIVE)).order_by(Endpoint.created_at)).all()
        for endpoint in served:
            if (endpoint.base["baseEntryId"], endpoint.base["baseCommit"]) == (entry.id, model["baseCommit"]):
                held = next((a for a in endpoint.adapters if a["name"] == reference), None)
                if adapter is not None and held is None:
                    if len(endpoint.adapters) >= MAX_ADAPTERS:
                        raise Refused(f"endpoint {endpoint.id[:12]} already serves {MAX_ADAPTERS} adapters, the most "
                                      "one endpoint loads at once",
                                      hint=f"detach one: akka training endpoints detach {endpoint.id[:12]} MODEL")
                    endpoint.adapters = [*endpoint.adapters, adapter]
                    record(session, ENDPOINT.subject(endpoint.id), "attached", model=reference)
                    forget_routes(deployment)
                elif held is not None and follows and held.get("follows") != follows:
                    endpoint.adapters = [{**a, "follows": follows} if a is held else a for a in endpoint.adapters]
                return endpoint_view(endpoint).extended(answers.EndpointCreated, attached=True)
        check_new_work(session, project.name, "endpoint", deployment.quotas)
        endpoint = Endpoint(id=new_id(), project=project.name, model_reference=reference,
                            base={"baseEntryId": entry.id, "baseCommit": model["baseCommit"]},
                            adapters=[adapter] if adapter else [], device_profile=profile,
                            phase="AWAITING_CAPACITY", attempt=0, created_at=utcnow())
        session.add(endpoint)
        session.flush()
        record(session, ENDPOINT.subject(endpoint.id), "phase", phase=endpoint.phase)
        queue_wake(session)
        return endpoint_view(endpoint).extended(answers.EndpointCreated, attached=False)


REQUEST_TIME_GRAIN = 10.0  # seconds: last_request_at moves at most this often (or a quarter of the idle timeout)
LOAD_KEYS = ("served", "inFlight", "queued", "tokens", "tokensPerSecond", "latencyP50Seconds", "latencyP95Seconds")


def endpoint_view(endpoint: Endpoint) -> answers.Endpoint:
    base_id = endpoint.base["baseEntryId"]
    started = endpoint.phase == EndpointPhase.READY
    models = [answers.EndpointModel(name=base_id, kind="base", ready=started, enabled=not endpoint.base.get("disabled"),
                                    instructions=None)] + [
        answers.EndpointModel(name=a["name"], kind="adapter", ready=started and bool(a.get("loaded")),
                              enabled=not a.get("disabled"), instructions=a.get("instructions"),
                              follows=a.get("follows"), replaced_by=a.get("replacedBy"))
        for a in endpoint.adapters]
    return answers.Endpoint(
        endpoint_id=endpoint.id, project=endpoint.project, model=endpoint.model_reference,
        base_model={"id": base_id, "commit": endpoint.base["baseCommit"]}, models=models,
        phase=endpoint.phase, attempt=endpoint.attempt, device_profile=endpoint.device_profile,
        devices_held=endpoint.devices or [] if endpoint.phase in SERVED else [],
        failure_reason=endpoint.failure_reason, created_at=iso(endpoint.created_at),
        ready_at=iso(endpoint.ready_at), last_request_at=iso(endpoint.last_request_at),
        finished_at=iso(endpoint.finished_at),
        load=endpoint.load if endpoint.phase == EndpointPhase.READY else None,
        terminal=endpoint.phase in TERMINAL,
        # what `wait` stops at: every model answers, or the endpoint will never answer
        settled=endpoint.phase in TERMINAL or (started and all(m.ready for m in models)))


def find_endpoint(session, endpoint_id: str) -> Endpoint:
    return find_by_id_prefix(session, Endpoint, endpoint_id, "endpoint",
                             "list endpoints with: akka training endpoints list", visible_projects(Endpoint.project))


def get(deployment: Deployment, endpoint_id: str) -> answers.Endpoint:
    with deployment.store.transaction() as session:
        endpoint = find_endpoint(session, endpoint_id)
        return endpoint_view(endpoint).extended(waiting_for=waiting_for(session, deployment, "endpoint", endpoint))


def list_endpoints(deployment: Deployment, project: str | None, phase: str | None, model: str | None = None,
                   include_archived: bool = False) -> list[answers.EndpointListItem]:
    """Newest first; an archived project's endpoints only with `include_archived` or when it is named."""
    query = project_work(Endpoint, project, include_archived)
    if phase:
        query = query.where(Endpoint.phase.in_(phases_asked(ENDPOINT, phase, {"active": OPEN_PHASES})))
    with deployment.store.transaction() as session:
        rows = [endpoint_view(e).extended(answers.EndpointListItem, project_archived=archived)
                for e, archived in session.execute(query.limit(500))]
    if model:
        rows = [row for row in rows if any(m.name.startswith(model) for m in row.models)]
    return rows


def detach(deployment: Deployment, endpoint_id: str, model: str) -> answers.Endpoint:
    """Stop serving an adapter; detaching the last model an endpoint serves takes the endpoint down."""
    with deployment.store.transaction() as session:
        endpoint = find_endpoint(session, endpoint_id)
        if endpoint.phase in TERMINAL:
            raise Refused(f"endpoint {endpoint.id[:12]} is {endpoint.phase}; it serves nothing")
        kept = [a for a in endpoint.adapters if a["name"] != model and not a["name"].startswith(model + ":")]
        if len(kept) == len(endpoint.adapters):
            names = ", ".join(a["name"] for a in endpoint.adapters) or "none"
            raise NotFound(f"endpoint {endpoint.id[:12]} has no adapter {model!r} attached (attached: {names})",
                           hint="the base model is detached by deleting the endpoint")
        endpoint.adapters = kept
        record(session, ENDPOINT.subject(endpoint.id), "detached", model=model)
        forget_routes(deployment)
        return endpoint_view(endpoint)


def set_enabled(deployment: Deployment, endpoint_id: str, model: str, enabled: bool) -> answers.Endpoint:
    """Disable a model at an endpoint (requests through the server are answered 409; it stays loaded on the device
    the endpoint keeps) or enable it again. `model` is the base model's id or an attached adapter's name (NS/NAME
    selects each of its versions attached). Asking for what already holds changes nothing."""
    verb = "enable" if enabled else "disable"
    with deployment.store.transaction() as session:
        endpoint = find_endpoint(session, endpoint_id)
        if endpoint.phase in TERMINAL:
            raise Refused(f"endpoint {endpoint.id[:12]} is {endpoint.phase}; it serves nothing to {verb}")
        changed = False
        if model == endpoint.base["baseEntryId"]:
            if bool(endpoint.base.get("disabled")) == enabled:
                endpoint.base = _flagged(endpoint.base, enabled)
                changed = True
        else:
            chosen = [a for a in endpoint.adapters if a["name"] == model or a["name"].startswith(model + ":")]
            if not chosen:
                names = ", ".join([endpoint.base["baseEntryId"], *(a["name"] for a in endpoint.adapters)])
                raise NotFound(f"endpoint {endpoint.id[:12]} serves no model {model!r} (it serves: {names})",
                               hint=f"{verb} one of those: akka training endpoints {verb} {endpoint.id[:12]} MODEL")
            if any(bool(a.get("disabled")) == enabled for a in chosen):
                names = {a["name"] for a in chosen}
                endpoint.adapters = [_flagged(a, enabled) if a["name"] in names else a for a in endpoint.adapters]
                changed = True
        if changed:
            record(session, ENDPOINT.subject(endpoint.id), "enabled" if enabled else "disabled", model=model)
            forget_routes(deployment)
        return endpoint_view(endpoint)


def _flagged(entry: dict[str, Any], enabled: bool) -> dict[str, Any]:
    """A copy of a model's entry, disabled or not (an enabled one carries no flag)."""
    kept = {key: value for key, value in entry.items() if key != "disabled"}
    return kept if enabled else {**kept, "disabled": True}


def delete_endpoint(deployment: Deployment, endpoint_id: str) -> answers.Endpoint:
    def decide(session) -> answers.Endpoint:
        endpoint = find_endpoint(session, endpoint_id)
        if endpoint.phase == EndpointPhase.DELETED:
            return endpoint_view(endpoint)
        # its worker, if any, is stopped once this commits
        forget_routes(deployment)
        moved(end(session, endpoint, EndpointPhase.DELETED, endpoint.failure_reason), f"endpoint {endpoint.id[:12]}")
        return endpoint_view(endpoint)

    return decided(deployment.store, decide)


def take_down_idle(deployment: Deployment) -> list[str]:
    """Endpoints that answered no request for `endpoint_idle_seconds` (counted from when they became ready) are
    taken down, freeing their devices (their workers are stopped after the commit); the ids taken down."""
    idle = timedelta(seconds=deployment.endpoint_idle_seconds)
    now = utcnow()
    with deployment.store.transaction() as session:
        ready = session.scalars(select(Endpoint).where(Endpoint.phase == EndpointPhase.READY.value)).all()
        stale = [e for e in ready if as_utc(e.last_request_at or e.ready_at or e.created_at) + idle < now]
        if stale:
            forget_routes(deployment)
        return [e.id for e in stale if end(
            session, e, EndpointPhase.DELETED, f"taken down after {_duration(deployment.endpoint_idle_seconds)} "
                                               "without a request, to free its device; create it again to serve")]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} minutes" if seconds >= 120 else f"{seconds:g} seconds"


def info(deployment: Deployment) -> answers.EndpointsInfo:
    """What endpoints of this deployment can do."""
    from optimize.workloads.tool_calls import PARSERS

    return answers.EndpointsInfo(
        idle_timeout_seconds=deployment.endpoint_idle_seconds, adapters_at_once=MAX_ADAPTERS, devices_per_endpoint=1,
        engine="transformers", tool_call_parsers=list(PARSERS), device_profiles=[p.name for p in deployment.profiles])


def end(session, endpoint: Endpoint, phase: EndpointPhase, reason: str | None = None, by_worker: bool = False
         ) -> bool:
    return transition(session, ENDPOINT, endpoint, phase, by_worker=by_worker, note=reason, failure_reason=reason,
                      address=None)


def requeue(session, endpoint: Endpoint, reason: str) -> bool:
    """Start again, once, on the devices free now, with the adapters attached to it."""
    return transition(session, ENDPOINT, endpoint, EndpointPhase.AWAITING_CAPACITY, note=reason, address=None,
                      adapters=[{**a, "loaded": False} for a in endpoint.adapters])


# --- routing a request ---------------------------------------------------------------------------------------


ROUTE_SECONDS = 1.0  # a resolved route is kept this long (or a quarter of the idle timeout, when that is shorter)


def route(deployment: Deployment, requested: str | None, endpoint_id: str | None = None) -> tuple[str, str]:
    """(the worker's address, the served model name) for a request's `model`: a base model, or a registered
    model reference (`NS/NAME`, `NS/NAME:vN`, `NS/NAME:ALIAS`) resolved to the exact version served. With an
    endpoint named, the request may leave the model out (the endpoint's own model answers).

    An answer is kept for a moment per model, endpoint and caller's limits (resolving it is a transaction and a
    registry lookup: a third of the server's work a request under load); what this server changes about an
    endpoint (attach, detach, disable, enable, delete, idle take-down) forgets them at once, and a request whose
    worker does not answer resolves again (`forget_routes`). Only answers are kept, never refusals."""
    if requested is not None and not isinstance(requested, str):
        return _route(deployment, requested, endpoint_id)
    kept = kept_route(deployment, requested, endpoint_id)
    if kept is not None:
        return kept
    now = time.monotonic()
    key = (requested, endpoint_id, current_limits())
    address, name = _route(deployment, requested, endpoint_id)
    if len(deployment.routes) > 1024:
        deployment.routes.clear()
    deployment.routes[key] = (address, name, now + min(ROUTE_SECONDS, deployment.endpoint_idle_seconds / 4))
    return address, name


def kept_route(deployment: Deployment, requested: Any, endpoint_id: str | None) -> tuple[str, str] | None:
    """The route kept for this request, if one is (no store access: the server's event loop may ask)."""
    if requested is not None and not isinstance(requested, str):
        return None
    kept = deployment.routes.get((requested, endpoint_id, current_limits()))
    return (kept[0], kept[1]) if kept is not None and kept[2] > time.monotonic() else None


def forget_routes(deployment: Deployment) -> None:
    deployment.routes.clear()


def _route(deployment: Deployment, requested: Any, endpoint_id: str | None) -> tuple[str, str]:
    with deployment.store.transaction() as session:
        if endpoint_id is not None:
            candidates = [find_endpoint(session, endpoint_id)]
        else:
            candidates = session.scalars(only_visible(select(Endpoint).where(Endpoint.phase.in_(ACTIVE)),
                                                      visible_projects(Endpoint.project))
                                         .order_by(Endpoint.created_at)).all()
        if requested is not None and not isinstance(requested, str):
            raise Invalid("model must be a string: a served model's name", hint="GET /v1/models lists them")
        if endpoint_id is not None and candidates[0].phase in TERMINAL:
            raise Conflict(f"endpoint {candidates[0].id[:12]} is {candidates[0].phase} and answers nothing",
                           hint="serve the model again with: akka training endpoints create --model "
                                + candidates[0].model_reference)
        wanted = requested or (candidates[0].model_reference if endpoint_id is not None else None)
        if not wanted:
            raise Invalid("the request names no model", hint="set model to a served model; GET /v1/models lists them")
        name = _served_name(deployment, session, wanted)
        disabled_at = None  # the first endpoint that serves the model disabled, if no other answers for it
        asked = name
        for endpoint in candidates:
            served = {endpoint.base["baseEntryId"]: True, **{a["name"]: bool(a.get("loaded"))
                                                             for a in endpoint.adapters}}
            if asked not in served:
                continue
            name = answering_for(endpoint, asked)  # an alias that moved answers from its old version until loaded
            if _disabled(endpoint, name):
                disabled_at = disabled_at or endpoint
                continue
            if endpoint.phase != EndpointPhase.READY or not served[name]:
                state = endpoint.phase if endpoint.phase != EndpointPhase.READY else "loading the adapter"
                raise Conflict(f"model {name} is not answering yet: endpoint {endpoint.id[:12]} is {state}",
                               hint=f"wait for it: akka training endpoints wait {endpoint.id[:12]}")
            now = utcnow()
            grain = min(REQUEST_TIME_GRAIN, deployment.endpoint_idle_seconds / 4)
            if endpoint.last_request_at is None or (now - as_utc(endpoint.last_request_at)).total_seconds() > grain:
                # its idle time starts again (moved at most every `grain` seconds: a write each request costs)
                endpoint.last_request_at = now
            return endpoint.address, name
        if disabled_at is not None:
            raise Conflict(f"model {name} is disabled at endpoint {disabled_at.id[:12]}",
                           hint=f"enable it with: akka training endpoints enable {disabled_at.id[:12]} {name}")
        where = f"endpoint {candidates[0].id[:12]}" if endpoint_id is not None else "any endpoint"
        raise NotFound(f"model {wanted!r} is not served by {where}",
                       hint=f"serve it with: akka training endpoints create --model {without_fine_tuned(wanted)}")


def _disabled(endpoint: Endpoint, name: str) -> bool:
    """Whether the model the endpoint serves under `name` is disabled there."""
    if name == endpoint.base["baseEntryId"]:
        return bool(endpoint.base.get("disabled"))
    return any(a["name"] == name and a.get("disabled") for a in endpoint.adapters)


def _served_name(deployment: Deployment, session, wanted: str) -> str:
    """The name a requested model is served under: the exact version a registry reference resolves to, or the
    catalog id of a base model (else the text as given, which nothing serves). A fine-tuned model's `ft:` name is
    its registry reference."""
    wanted = without_fine_tuned(wanted)
    try:
        reference = parse_reference(wanted)
        if find_model(session, reference.namespace, reference.name) is not None:
            model, version = resolve_model_reference(session, reference)
            if version.variant != "BASE":  # an adapter; a full fine-tune's weights, which no endpoint serves
                return f"{model.namespace}/{model.name}:v{version.version}"
            return version.descriptor["catalogEntry"]
    except (Invalid, NotFound):
        pass
    try:
        return deployment.catalog.find(wanted).id
    except (Invalid, NotFound):
        return wanted


def served_models(deployment: Deployment) -> list[answers.ServedModel]:
    """What answers now, in OpenAI's model list shape."""
    with deployment.store.transaction() as session:
        ready = session.scalars(only_visible(select(Endpoint).where(Endpoint.phase == EndpointPhase.READY.value),
                                             visible_projects(Endpoint.project)).order_by(Endpoint.created_at)).all()
        models: dict[str, answers.ServedModel] = {}
        for endpoint in ready:
            created = unix_seconds(endpoint.ready_at or endpoint.created_at)
            for item in endpoint_view(endpoint).models:
                if item.ready and item.enabled and item.name not in models:
                    models[item.name] = answers.ServedModel(id=item.name, object="model", created=created,
                                                            owned_by=endpoint.project, endpoint=endpoint.id,
                                                            instructions=item.instructions)
        return list(models.values())


# --- the worker's calls ------------------------------------------------------------------------------------


def _worker_adapters(endpoint: Endpoint) -> list[dict[str, Any]]:
    return [{"name": a["name"], "manifest": a["manifestDigest"].removeprefix("sha256:"),
             "instructions": a.get("instructions")} for a in endpoint.adapters]


def job_spec(deployment: Deployment, endpoint_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        endpoint, _lease = fence(session, ENDPOINT, endpoint_id, token)
        entry = deployment.catalog.find(endpoint.base["baseEntryId"])
        return EndpointSpec.model_validate({"endpointId": endpoint.id, "leaseSeconds": deployment.lease_seconds,
                "model": job_model(deployment.store, entry, endpoint.base["baseCommit"]),
                "toolCallParser": entry.tool_call_parser, "contextLength": entry.context_length,
                "adapters": _worker_adapters(endpoint)}).wire()


def heartbeat(deployment: Deployment, endpoint_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """The worker says where it answers and which adapters it has loaded; it is told which it should serve."""
    with deployment.store.transaction() as session:
        endpoint, lease = fence(session, ENDPOINT, endpoint_id, token)
        extend(lease, deployment.lease_seconds)
        if body.get("address") and endpoint.phase == EndpointPhase.STARTING:
            reported(transition(session, ENDPOINT, endpoint, EndpointPhase.READY, lease=token, by_worker=True,
                                address=str(body["address"]), ready_at=utcnow()), ENDPOINT, endpoint_id)
        load = body.get("load")
        if isinstance(load, dict):  # the worker's own figures, kept to the keys and types an endpoint shows
            endpoint.load = {key: load[key] for key in LOAD_KEYS if isinstance(load.get(key), (int, float))
                             and not isinstance(load.get(key), bool)}
        loaded = set(body.get("loaded") or [])
        if any(bool(a.get("loaded")) != (a["name"] in loaded) for a in endpoint.adapters):
            endpoint.adapters = [{**a, "loaded": a["name"] in loaded} for a in endpoint.adapters]
            record(session, ENDPOINT.subject(endpoint.id), "adapters", loaded=sorted(loaded))
            if retire_replaced(session, endpoint):  # an alias moved and its new version answers now
                forget_routes(deployment)
        return {"phase": endpoint.phase, "adapters": _worker_adapters(endpoint)}


def finish(deployment: Deployment, endpoint_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word, that it could not serve: the endpoint fails with its reason."""
    with deployment.store.transaction() as session:
        endpoint, _lease = fence(session, ENDPOINT, endpoint_id, token)
        word = LastWord.read(body)
        end(session, endpoint, EndpointPhase.FAILED,
             word.failure_reason() or "the endpoint's worker stopped", by_worker=True)
        return {"phase": endpoint.phase}
