"""What a followed item's status means while it is followed (`wait`, `--wait`): how far it is (steps of a run,
answers of an evaluation, rows an analysis measured, decisions a distillation answered, candidates a curation judged:
the status's `count`, in the one vocabulary the server answers for every kind, `schemas.progress`), its loss and
tokens/s, and an ETA that names its basis — the pace over the last steps seen, or the run's pre-flight estimate
before any.

An ETA is measured only between two updates the follower saw (two statuses whose counts differ, neither of them the
start at zero): until then it is "measuring" (`etaStatus`), never a figure. The start is left out because the first
update carries the warm-up, and the server's training clock starts with the first report, which may already hold
several steps: a pace from the start read tens of steps a second and showed `ETA 0s` while minutes remained. The
pre-flight estimate is the ETA only before training (queued, preparing), and it does not count down there: no
training time passes while a run waits.

Everything here takes status dicts (what `GET …/{id}` and its `/events` stream answer) and a clock reading, so
it is tested without a server. `follow.py` feeds it and chooses where the result goes: a Rich view on a terminal
(`view`), a plain line elsewhere (`line`), a JSON event under `-o json` (`event`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from optimize.schemas.phases import (
    AnalysisPhase,
    ComparisonPhase,
    CurationPhase,
    DistillationPhase,
    EvaluationPhase,
    RunPhase,
)

WINDOW = 20  # the measured pace is taken over (about) the last this many steps, answers or rows


@dataclass
class Reading:
    """One status as a follower shows it; `at` is the follower's clock when it arrived (the ETA counts down from
    there between statuses)."""

    kind: str
    item_id: str
    phase: str
    at: float
    done: int | None = None
    total: int | None = None
    unit: str = ""  # the count's unit: steps, rows prepared, answers, decisions answered, rows measured
    loss: float | None = None
    tokens_per_second: float | None = None
    eta_seconds: float | None = None
    eta_basis: str | None = None
    # measured (from the pace), estimated (the pre-flight estimate), measuring (under way, fewer than two updates
    # seen) or None (nothing to wait for: ended, paused, or no count)
    eta_status: str | None = None
    counting: bool = True  # whether the ETA counts down between statuses (not while a run waits for training)
    accepted: int | None = None  # a distillation's answers accepted so far
    kept: int | None = None  # a curation's candidates kept so far

    def eta_now(self, now: float) -> float | None:
        if self.eta_seconds is None:
            return None
        return max(self.eta_seconds - (now - self.at), 0.0) if self.counting else self.eta_seconds

    def as_json(self) -> dict[str, Any]:
        """The figures of a JSON event, camelCase as the API's (`accepted`, `kept` only where the kind counts any)."""
        figures = {"done": self.done, "total": self.total, "unit": self.unit, "loss": self.loss,
                   "tokensPerSecond": None if self.tokens_per_second is None else round(self.tokens_per_second, 1),
                   "etaSeconds": None if self.eta_seconds is None else round(self.eta_seconds, 1),
                   "etaBasis": self.eta_basis, "etaStatus": self.eta_status}
        if self.accepted is not None:
            figures["accepted"] = self.accepted
        if self.kept is not None:
            figures["kept"] = self.kept
        return figures


@dataclass
class _Point:
    seconds: float
    count: int
    tokens: int | None


@dataclass
class Pace:
    """The recent points (time, count, tokens) of one item, kept over about WINDOW counts, and the rates they
    give. A point is kept only when the count grows: a status that repeats a step (a new loss, a save) says
    nothing about the pace; nor does a count of zero (the start is no update). A rate needs two points: two
    updates seen."""

    window: int = WINDOW
    points: deque[_Point] = field(default_factory=deque)

    def add(self, seconds: float, count: int, tokens: int | None = None) -> None:
        if self.points and (count < self.points[-1].count or seconds < self.points[-1].seconds):
            self.points.clear()  # a new attempt started over (a resume restores an earlier step): measure afresh
        if count <= 0 or (self.points and count == self.points[-1].count):
            return
        self.points.append(_Point(seconds, count, tokens))
        while len(self.points) > 2 and self.points[-1].count - self.points[1].count >= self.window:
            self.points.popleft()

    def counted(self) -> int:
        return self.points[-1].count - self.points[0].count if len(self.points) > 1 else 0

    def per_second(self) -> float | None:
        if len(self.points) < 2:
            return None
        first, last = self.points[0], self.points[-1]
        span = last.seconds - first.seconds
        return (last.count - first.count) / span if span > 0 else None

    def tokens_per_second(self) -> float | None:
        with_tokens = [p for p in self.points if p.tokens is not None]
        if len(with_tokens) < 2:
            return None
        first, last = with_tokens[0], with_tokens[-1]
        span = last.seconds - first.seconds
        if span <= 0 or last.tokens < first.tokens:  # the count started over: no honest figure
            return None
        return (last.tokens - first.tokens) / span


class Tracker:
    """Turns each status of one followed item into a Reading, keeping the pace between them."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.follows = FOLLOWED[kind]
        self.pace = Pace()

    def read(self, status: dict[str, Any], now: float) -> Reading:
        reading = Reading(self.kind, status.get(self.follows.id_key, ""), status.get("phase", ""), now)
        self.follows.read(status, reading, now, self.pace)
        return reading


def _measured(pace: Pace, reading: Reading, now: float, noun: str, active: bool) -> None:
    """The count's pace and the ETA it gives, for a kind that counts answers, decisions or rows at a steady pace."""
    if reading.done is None:
        return
    pace.add(now, reading.done)
    rate = pace.per_second()
    if not active or not reading.total or reading.done >= reading.total:
        return
    if rate:
        reading.eta_seconds = max(reading.total - reading.done, 0) / rate
        reading.eta_basis = f"from the last {pace.counted()} {noun}"
        reading.eta_status = "measured"
    else:
        reading.eta_status = "measuring"


def _counted(status: dict[str, Any], reading: Reading) -> None:
    """The item's count as the server answers it (`schemas.progress`: done of total in a unit, the same words for
    every kind)."""
    count = status.get("count")
    if count:
        reading.done, reading.total, reading.unit = count["done"], count.get("total"), count["unit"]
        reading.accepted = count.get("accepted")
        reading.kept = count.get("kept")


def _read_run(status: dict[str, Any], reading: Reading, now: float, pace: Pace) -> None:
    progress = status.get("progress") or {}
    phase = status.get("phase")
    _counted(status, reading)
    reading.loss = progress.get("loss")
    # The server's account of training time (its TRAINING spans) is the clock: it leaves out queueing,
    # preparing and pauses, and a follower that starts late reads the same clock as one that started early.
    trained = ((status.get("timing") or {}).get("phaseMillis") or {}).get("TRAINING")
    seconds = trained / 1000 if trained is not None else now
    if phase == RunPhase.TRAINING and reading.unit == "steps":
        pace.add(seconds, reading.done, progress.get("tokens"))
        reading.tokens_per_second = pace.tokens_per_second()
        rate = pace.per_second()
        if rate:
            reading.eta_seconds = max(reading.total - reading.done, 0) / rate
            reading.eta_basis = f"from the last {pace.counted()} steps"
            reading.eta_status = "measured"
        elif reading.done < reading.total:
            reading.eta_status = "measuring"  # the estimate may be far off on a loaded machine: no figure
        return
    predicted = (status.get("prediction") or {}).get("seconds")
    left = None if predicted is None else predicted - (trained or 0) / 1000
    if left is not None and left > 0 and phase in (RunPhase.QUEUED, RunPhase.PREPARING):
        # Before training: what the pre-flight estimate leaves of the training time, held (not counted down)
        reading.eta_seconds, reading.eta_basis = left, "from the pre-flight estimate"
        reading.eta_status, reading.counting = "estimated", False


def _steady(noun: str, active: StrEnum) -> Callable[[dict[str, Any], Reading, float, Pace], None]:
    """The reader of a kind that counts at a steady pace while in its `active` phase (an evaluation's answers, a
    distillation's decisions, an analysis's rows), its pace named by `noun`."""

    def read(status: dict[str, Any], reading: Reading, now: float, pace: Pace) -> None:
        _counted(status, reading)
        _measured(pace, reading, now, noun, active=status.get("phase") == active)

    return read


def _read_endpoint(status: dict[str, Any], reading: Reading, now: float, pace: Pace) -> None:
    """An endpoint's headline says how many of its models answer: there is nothing to measure a pace of."""


def _read_pipeline(status: dict[str, Any], reading: Reading, now: float, pace: Pace) -> None:
    """A pipeline's stages completed of all, with no ETA: its stages take unlike times (a run, then an evaluation),
    so their pace foretells nothing; the stage under way is followed in its own words in the headline."""
    _counted(status, reading)


@dataclass(frozen=True)
class Followed:
    """How one kind's status is followed: the item a JSON event names, the key of its id in a status, and the
    reader that sets a Reading's figures from a status (keeping the item's pace)."""

    item: str
    id_key: str
    read: Callable[[dict[str, Any], Reading, float, Pace], None]


# by the kind's route family, as `wait` commands name it
FOLLOWED: dict[str, Followed] = {
    "runs": Followed("run", "runId", _read_run),
    "evaluations": Followed("evaluation", "evaluationId", _steady("answers", EvaluationPhase.RUNNING)),
    "endpoints": Followed("endpoint", "endpointId", _read_endpoint),
    "analyses": Followed("analysis", "analysisId", _steady("rows", AnalysisPhase.RUNNING)),
    "distillations": Followed("distillation", "distillationId", _steady("answers", DistillationPhase.RUNNING)),
    "curations": Followed("curation", "curationId", _steady("candidates", CurationPhase.RUNNING)),
    "comparisons": Followed("comparison", "comparisonId", _steady("evaluations", ComparisonPhase.EVALUATING)),
    "pipelines": Followed("pipeline", "pipelineId", _read_pipeline),
}
ID_KEYS = {kind: followed.id_key for kind, followed in FOLLOWED.items()}
ITEMS = {kind: followed.item for kind, followed in FOLLOWED.items()}


def duration(seconds: float) -> str:
    """`41s`, `3m`, `3m20s`, `2h05m`: as exact as an estimate deserves."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 10:
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def figures(reading: Reading, now: float | None = None, count: bool = True) -> list[str]:
    """The measured parts of a line: count of total (unless `count` is False), answers accepted, loss, tokens/s,
    ETA with its basis."""
    parts = []
    if not count:
        pass
    elif reading.total:
        share = 100 * (reading.done or 0) / reading.total
        parts.append(f"{reading.unit} {reading.done or 0}/{reading.total} ({share:.0f}%)")
    elif reading.done is not None and reading.unit:
        parts.append(f"{reading.unit} {reading.done}")
    if reading.accepted is not None:
        parts.append(f"{reading.accepted} accepted")
    if reading.kept is not None:
        parts.append(f"{reading.kept} kept")
    if reading.loss is not None:
        parts.append(f"loss {reading.loss:.4f}")
    if reading.tokens_per_second is not None:
        parts.append(f"{reading.tokens_per_second:,.0f} tokens/s")
    eta = reading.eta_now(now if now is not None else reading.at)
    if eta is not None:
        parts.append(f"ETA {duration(eta)} {reading.eta_basis}")
    elif reading.eta_status == "measuring":
        parts.append("ETA measuring")
    return parts


def line(headline: str, reading: Reading) -> str:
    """The plain line (not a terminal): the command's headline (id, phase, pause, what it waits for) with the
    figures."""
    return "  ".join([headline, *figures(reading)])


def event(status: dict[str, Any], reading: Reading) -> dict[str, Any]:
    """One JSON event (`-o json`): the status as the API answers it, named (`event`, `item`), with the figures a
    follower derived from it under `live`."""
    return {"event": "status", "item": ITEMS[reading.kind], **status, "live": reading.as_json()}


def view(headline: str, reading: Reading, now: float) -> RenderableType:
    """The terminal view: the headline, a bar of done over total, and the figures."""
    rows: list[RenderableType] = [Text(headline)]
    if reading.total:
        bar = Table.grid(padding=(0, 1))
        bar.add_column(width=40)
        bar.add_column()
        share = 100 * (reading.done or 0) / reading.total
        bar.add_row(ProgressBar(total=reading.total, completed=reading.done or 0, width=40),
                    Text(f"{reading.done or 0}/{reading.total} {reading.unit} ({share:.0f}%)"))
        rows.append(bar)
    rest = figures(reading, now, count=not reading.total)  # the bar's label says the count
    if rest:
        rows.append(Text(" · ".join(rest), style="dim"))
    return Group(*rows)
