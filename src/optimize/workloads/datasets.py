"""A dataset version as a job reads it: a reference (one with no namespace resolves inside the project's namespace)
picked from the registry, with the kind of rows it holds. Evaluations and distillations read chat rows; a training
method names the kind it trains on and refuses the others in its own words (`training.admission.resolve`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from optimize.core.errors import Invalid, Refused
from optimize.core.refs import parse_reference
from optimize.registry.datasets import resolve_reference
from optimize.workloads.dataset_kinds import HOLDS


@dataclass
class DatasetPick:
    reference: str
    digest: str
    rows: int
    tool_rows: int
    prepared: dict | None = None  # prepared token rows: the descriptor and longestRow (chat/prepared)
    images: int = 0  # images its rows name


def find_dataset(session: Session, text: str, project: str, field: str) -> tuple[DatasetPick, str]:
    """The version `text` names (in `project`'s namespace when it names none) and the kind of rows it holds; a
    malformed reference is refused naming `field`."""
    qualified = text if "/" in text else f"{project}/{text}"
    try:
        reference = parse_reference(qualified)
    except Invalid as error:
        raise Invalid(f"{field}: {error.message}", hint=error.hint) from None
    found, version = resolve_reference(session, reference)
    label = f"{found.namespace}/{found.name}:v{version.version}"
    return DatasetPick(label, version.digest, version.rows, version.tool_rows, version.prepared,
                       len(version.images or [])), found.kind


def refuse_images(pick: DatasetPick, field: str, why: str) -> None:
    """Rows with images are read where a model that takes images reads them (runs, analyses and evaluations on it);
    elsewhere the work refuses them, saying `why`, rather than use their text alone."""
    if pick.images:
        raise Refused(f"{field} {pick.reference} holds rows with images ({pick.images} image(s)), {why}",
                      hint="use a model that takes images (the smolvlm family), or register the rows without their "
                           "image parts to use their text")


def pick_chat_dataset(session: Session, text: str, project: str, field: str) -> DatasetPick:
    """A dataset of chat rows, as an evaluation (or a distillation's source) reads it: a dataset of pairs is
    refused. Rows with images are the caller's to refuse (`refuse_images`) where its model reads none."""
    picked, kind = find_dataset(session, text, project, field)
    if kind != "chat":
        raise Refused(f"{field} {picked.reference} holds {HOLDS.get(kind, kind)}; an evaluation reads {HOLDS['chat']} "
                      "(the model answers each conversation and the grader scores the answer against its last "
                      "assistant message), so a dataset of pairs cannot be evaluated",
                      hint="evaluate on a chat dataset")
    return picked
