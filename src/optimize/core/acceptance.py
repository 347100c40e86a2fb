"""The acceptance floor of work that keeps only part of what it decides on (a distillation keeps the teacher's
answers it accepts): its acceptance rate — accepted over decided — and the warning when that falls below the floor.

The default floor is 0.2: below one kept in five, four fifths of the device time goes to answers thrown away, and a
rate that low is seldom chance — it is nearly always one cause (answers cut at max-tokens, a template or a tool
parser that does not fit the teacher, prompts longer than max-model-length) that the rejections by reason name.
A rate is judged only once `LEAST_DECIDED` decisions are decided (or all of them, where there are fewer): the
first few say little about the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_FLOOR = 0.2
LEAST_DECIDED = 20


def check_floor(value: Any) -> float:
    """A floor as given (a number from 0 to 1; 0 never warns), or ValueError saying what it must be."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError("acceptanceFloor must be a number from 0 to 1 (the share of answers accepted below which "
                         "it warns)")
    return float(value)


@dataclass(frozen=True)
class Acceptance:
    accepted: int
    decided: int  # accepted and rejected
    total: int  # all there is to decide (0 while not counted yet)
    floor: float = DEFAULT_FLOOR

    @property
    def rate(self) -> float | None:
        return self.accepted / self.decided if self.decided else None

    @property
    def judged(self) -> bool:
        """Whether enough is decided for the rate to say anything: LEAST_DECIDED, or all where there are fewer."""
        return self.decided > 0 and self.decided >= min(LEAST_DECIDED, self.total or LEAST_DECIDED)

    @property
    def below_floor(self) -> bool:
        return self.judged and self.rate is not None and self.rate < self.floor

    def warning(self, noun: str = "answers") -> str | None:
        """The sentence a job's answer carries while its rate is below the floor; None otherwise."""
        if not self.below_floor:
            return None
        return (f"{self.accepted} of {self.decided} {noun} decided were accepted ({self.rate:.0%}), below the "
                f"acceptance floor of {self.floor:.0%}")

    def as_json(self) -> dict[str, Any]:
        return {"rate": None if self.rate is None else round(self.rate, 4), "accepted": self.accepted,
                "decided": self.decided, "floor": self.floor, "belowFloor": self.below_floor}


def crossed_below(before: Acceptance, after: Acceptance) -> bool:
    """Whether `after` is below the floor where `before` was not: the moment to record it once as an event."""
    return after.below_floor and not before.below_floor
