"""A project's standing evaluation: a registered chat dataset and a grader that every model version the project
registers from then on is evaluated by, started by the server rather than the user.

Setting it (`set_standing`) checks what an evaluation would check before anything is kept — the project is open,
the dataset is a registered chat dataset, the grader is one an evaluation takes (a judge model or a scoring bundle
it names exists, an `http:` grader's host is one this server may call, instructions only for a judge) — and keeps
the dataset and the grader as given: an unpinned reference (`shipping/held-out`, an alias, a bundle's alias) is
resolved when each evaluation starts, as an evaluation resolves it, so a pinned one (`:vN`) is how to hold it still.

Starting them (`housekeeping`, called by the evaluation kind's hook at every scheduler tick): one query finds the
versions that are due — an adapter or weights version of a project holding a standing evaluation, registered since
it was set, with no row in `standing_evaluations` for that version, dataset and grader — and a thread of its own
starts each with `service.start`, the way a user's evaluation starts (quotas, the project's lock, the worker), so
the scheduler's tick never waits on a start (a bundle grader's import check runs user code). Each version is first
claimed by inserting its row (the unique version, dataset and grader make two servers on one store, or two passes,
start it once), then the evaluation's id is recorded on it.

A start that is refused (the project's quota of queued work, a dataset or bundle removed since) keeps its refusal on
the row — shown with the version's score — and is tried again at most once a minute, at most `MOST_ATTEMPTS` times:
quota room comes back as work ends, so a refusal is not final, but one that stays (a dataset gone) must neither be
retried every second nor forever. A row claimed whose start never said how it went (the server stopped in between)
is looked at again after a minute too: an evaluation of that version on that dataset and grader started since the
claim is taken as its own rather than starting a second one.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from optimize.core.clock import utcnow
from optimize.core.errors import Invalid, NotFound, PlatformError
from optimize.deployment import Deployment
from optimize.evaluation import service
from optimize.evaluation.service import check_grader
from optimize.projects import service as projects
from optimize.registry.bundles import resolve_bundle
from optimize.schemas.evaluations import EvaluationRequest
from optimize.schemas.projects import StandingEvaluationChange, StandingEvaluationRequest
from optimize.scoring.graders import parse_bundle_grader
from optimize.store.db import insert_ignoring_conflict
from optimize.store.tables import Evaluation, Model, ModelVersion, Project, StandingEvaluation
from optimize.workloads.datasets import find_dataset, pick_chat_dataset, refuse_images
from optimize.workloads.models import resolve_model

log = logging.getLogger("optimize.evaluation.standing")
RETRY_SECONDS = 60  # a refused (or unfinished) start is tried again at most this often
MOST_ATTEMPTS = 30  # and at most this many times in all
BATCH = 20  # versions started by one pass; the next pass takes the rest
_starting = threading.Lock()  # one pass at a time in this process


# --- setting it ---------------------------------------------------------------------------------------------------


def set_standing(deployment: Deployment, name: str, request: StandingEvaluationRequest) -> StandingEvaluationChange:
    """Check the dataset and the grader as an evaluation of the project's models would, then hold them."""
    grader = check_grader(request.grader)  # an http grader's host must be one this server may call
    if request.grader_instructions is not None and not grader.startswith("model:"):
        raise Invalid("graderInstructions are for a judge model's grader (model:REF)",
                      hint="leave --grader-instructions out, or pass --grader model:NS/NAME")
    dataset = request.dataset.strip()
    with deployment.store.transaction() as session:
        project = projects.open_project(session, name)
        refuse_images(pick_chat_dataset(session, dataset, project.name, "dataset"), "dataset",
                      "and a standing evaluation evaluates text rows only")
        if grader.startswith("bundle:"):
            bundle = parse_bundle_grader(grader)
            try:
                resolve_bundle(session, bundle.reference)
            except NotFound as error:
                raise NotFound(f"grader {grader!r} needs a scoring bundle the registry does not hold: "
                               f"{error.message}", hint=error.hint) from None
        elif grader.startswith("model:"):
            judge = grader.removeprefix("model:")
            try:
                resolve_model(deployment, session, judge)
            except PlatformError as error:
                raise type(error)(f"grader {grader!r}: the judge model {judge} cannot be used: {error.message}",
                                  hint=error.hint or "name a selected base model or a registered model version"
                                  ) from None
        return projects.set_standing(session, project, dataset, grader, request.grader_instructions)


# --- starting them ------------------------------------------------------------------------------------------------


def housekeeping(deployment: Any) -> None:
    """At every scheduler tick: when versions are due and no pass is under way, start a pass in a thread of its own.
    Never raises: the tick goes on to grant the kinds' jobs whatever happens here."""
    try:
        if not _starting.acquire(blocking=False):
            return
        try:
            due = _due(deployment)
        except Exception:
            _starting.release()
            raise
        if not due:
            _starting.release()
            return
        threading.Thread(target=_pass, args=(deployment, due), name="standing-evaluations", daemon=True).start()
    except Exception:  # noqa: BLE001 - the scheduler's tick must outlive a bad pass; the next tick looks again
        log.exception("looking for model versions due a standing evaluation failed")


def _pass(deployment: Any, due: list[Any]) -> None:
    try:
        for row in due:
            try:
                start_one(deployment, row)
            except Exception:  # noqa: BLE001 - one version's trouble does not hold up the others
                log.exception("standing evaluation of model version %s failed to start", row.version_id)
    finally:
        _starting.release()


def start_due(deployment: Any) -> int:
    """One pass in the caller's thread (what the housekeeping thread runs): the evaluations started."""
    return sum(start_one(deployment, row) for row in _due(deployment))


def _due(deployment: Any) -> list[Any]:
    """The model versions due a standing evaluation, oldest first: one query."""
    cutoff = utcnow() - timedelta(seconds=RETRY_SECONDS)
    held = StandingEvaluation
    query = (
        select(Project.name.label("project"), Project.standing_dataset.label("dataset"),
               Project.standing_grader.label("grader"),
               Project.standing_grader_instructions.label("instructions"),
               ModelVersion.id.label("version_id"), Model.namespace, Model.name, ModelVersion.version,
               held.id.label("held_id"), held.attempts, held.claimed_at, held.refusal)
        .join(Model, Model.namespace == Project.name)
        .join(ModelVersion, ModelVersion.model_id == Model.id)
        .outerjoin(held, and_(held.model_version_id == ModelVersion.id, held.dataset == Project.standing_dataset,
                              held.grader == Project.standing_grader))
        .where(Project.standing_dataset.is_not(None), Project.archived.is_(False),
               ModelVersion.variant != "BASE", ModelVersion.created_at >= Project.standing_set_at,
               or_(held.id.is_(None),
                   and_(held.evaluation_id.is_(None), held.attempted_at < cutoff, held.attempts < MOST_ATTEMPTS)))
        .order_by(ModelVersion.created_at, ModelVersion.id)
        .limit(BATCH))
    with deployment.store.transaction() as session:
        return list(session.execute(query).all())


def start_one(deployment: Any, row: Any) -> bool:
    """Claim the version's row, then start its evaluation and record how that went; False when another pass claimed
    it first or an evaluation started before was found."""
    reference = f"{row.namespace}/{row.name}:v{row.version}"
    if not _claim(deployment, row, reference):
        return False
    if row.held_id is not None and row.refusal is None and _adopted(deployment, row, reference):
        return False
    request = EvaluationRequest(model=reference, dataset=row.dataset, project=row.project, grader=row.grader,
                                grader_instructions=row.instructions)
    try:
        started = service.start(deployment, request)
    except PlatformError as error:
        refusal = error.message + (f" ({error.hint})" if error.hint else "")
        log.warning("standing evaluation of %s on %s refused: %s", reference, row.dataset, refusal)
        _outcome(deployment, row, None, refusal)
        return False
    log.info("standing evaluation %s of %s on %s started", started.evaluation_id, reference, row.dataset)
    _outcome(deployment, row, started.evaluation_id, None)
    return True


def _claim(deployment: Any, row: Any, reference: str) -> bool:
    now = utcnow()
    with deployment.store.transaction() as session:
        if row.held_id is None:
            return insert_ignoring_conflict(session, StandingEvaluation, {
                "project": row.project, "model_version_id": row.version_id, "model_reference": reference,
                "dataset": row.dataset, "grader": row.grader, "evaluation_id": None, "refusal": None,
                "attempts": 1, "claimed_at": now, "attempted_at": now}, ["model_version_id", "dataset", "grader"]) == 1
        # tried before: taken again only by the pass whose update finds it as the due query read it
        claimed = session.execute(
            update(StandingEvaluation)
            .where(StandingEvaluation.id == row.held_id, StandingEvaluation.evaluation_id.is_(None),
                   StandingEvaluation.attempts == row.attempts)
            .values(attempted_at=now, attempts=StandingEvaluation.attempts + 1)
            .returning(StandingEvaluation.id)).all()
        return len(claimed) == 1


def _adopted(deployment: Any, row: Any, reference: str) -> bool:
    """A claim whose start never said how it went: an evaluation of the version on the dataset and grader, started
    since the claim, is recorded as its own."""
    with deployment.store.transaction() as session:
        try:
            dataset = find_dataset(session, row.dataset, row.project, "dataset")[0].reference
        except PlatformError:
            return False  # the dataset is gone: the start is tried again, and its refusal recorded
        found = session.scalars(select(Evaluation).where(
            Evaluation.project == row.project, Evaluation.model_reference == reference,
            Evaluation.dataset_reference == dataset, Evaluation.created_at >= row.claimed_at)
            .order_by(Evaluation.created_at)).all()
        match = next((item for item in found if _same_grader(item, row.grader)), None)
        if match is None:
            return False
        _record(session, row, match.id, None)
        return True


def _same_grader(item: Evaluation, grader: str) -> bool:
    """Whether an evaluation's grader is the standing one: equal, or a bundle grader's same module and function
    (an evaluation keeps the bundle's exact version)."""
    if item.grader == grader:
        return True
    if not (grader.startswith("bundle:") and item.grader.startswith("bundle:")):
        return False
    return item.grader.partition("#")[2] == grader.partition("#")[2]


def _outcome(deployment: Any, row: Any, evaluation_id: str | None, refusal: str | None) -> None:
    with deployment.store.transaction() as session:
        _record(session, row, evaluation_id, refusal)


def _record(session: Session, row: Any, evaluation_id: str | None, refusal: str | None) -> None:
    session.execute(update(StandingEvaluation)
                    .where(StandingEvaluation.model_version_id == row.version_id,
                           StandingEvaluation.dataset == row.dataset, StandingEvaluation.grader == row.grader)
                    .values(evaluation_id=evaluation_id, refusal=refusal))


__all__ = ["MOST_ATTEMPTS", "RETRY_SECONDS", "housekeeping", "set_standing", "start_due", "start_one"]
