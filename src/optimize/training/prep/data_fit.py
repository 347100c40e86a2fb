"""Fitting a row into `maxSeqLength` by the run's `data.truncation`: the one place a run decides, per row, what
trains.

- `error`: a longer row is refused, naming its line.
- `drop`: a longer row is left out (counted as `tooLong`).
- `oldest` / `oldest_or_drop`: whole turns are removed, oldest first (the system prompt and the final turn stay;
  a tool call and its result go together), until the row fits; a row that cannot fit however many turns are
  removed is refused (`oldest`) or left out (`oldest_or_drop`). A long row carrying an explicit loss mask is
  refused under both: the mask covers the whole conversation.
- `right`: tokens past maxSeqLength are cut, never a token selected for training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimize.chat.render import ChatRenderer, LossPolicy, Rendered, RenderError
from optimize.chat.turns import trimmed


class RowRefused(Exception):
    """A row of the job's datasets cannot be used as it is; the message names its dataset and line."""


@dataclass
class DataFit:
    rows: int = 0
    too_long: int = 0
    trimmed: int = 0
    turns_removed: int = 0
    cut: int = 0
    masked: int = 0  # rows that carry an explicit loss mask

    def as_json(self) -> dict[str, int]:
        return {"rows": self.rows, "tooLong": self.too_long, "trimmed": self.trimmed,
                "turnsRemoved": self.turns_removed, "cut": self.cut}


@dataclass
class Fitter:
    renderer: ChatRenderer
    policy: LossPolicy
    limit: int
    truncation: str
    counts: DataFit = field(default_factory=DataFit)

    def fit(self, row: dict[str, Any], where: str) -> Rendered | None:
        """The row as it trains, or None when it is left out; `where` names it ("ns/name:v1 line 7")."""
        rendered = self._render(row, where)
        column = self.policy.explicit_mask_column
        if column and row.get(column) is not None:
            self.counts.masked += 1
        return self._fitted(rendered, where, row)

    def fit_tokens(self, ids: list[int], mask: list[int], where: str) -> Rendered | None:
        """A prepared token row (chat/prepared), its tokens and mask as given, fitted by the same rules; it has no
        turns to remove (admission refuses `oldest` and `oldest_or_drop` for prepared rows)."""
        return self._fitted(Rendered("", list(ids), [int(m) for m in mask], [], []), where, None)

    def _fitted(self, rendered: Rendered, where: str, row: dict[str, Any] | None) -> Rendered | None:
        if len(rendered.input_ids) <= self.limit:
            return self._kept(rendered)
        if self.truncation == "drop":
            self.counts.too_long += 1
            return None
        if rendered.images:  # its image tokens are whole or the row is not trained: never cut, never trimmed
            raise RowRefused(f"{where} is {len(rendered.input_ids)} tokens long with its images' tokens, longer than "
                             f"maxSeqLength {self.limit}; raise maxSeqLength, shorten the row, or set "
                             "data.truncation: drop to leave it out")
        if self.truncation == "right":
            return self._cut(rendered, where)
        if row is not None and self.truncation in ("oldest", "oldest_or_drop"):
            return self._trim(row, rendered, where)
        raise RowRefused(f"{where} is {len(rendered.input_ids)} tokens long, longer than maxSeqLength {self.limit}; "
                         "raise maxSeqLength, shorten the row, or set data.truncation: drop to leave it out")

    def _render(self, row: dict[str, Any], where: str) -> Rendered:
        try:
            return self.renderer.render(row, self.policy)
        except RenderError as error:
            raise RowRefused(f"{where}: {error}") from None

    def _kept(self, rendered: Rendered) -> Rendered:
        self.counts.rows += 1
        return rendered

    def _cut(self, rendered: Rendered, where: str) -> Rendered:
        if any(rendered.loss_mask[self.limit:]):
            raise RowRefused(f"{where} is {len(rendered.input_ids)} tokens long and its mask selects tokens past "
                             f"maxSeqLength {self.limit}, which data.truncation: right would cut; make the mask "
                             "exclude every token past maxSeqLength, or raise maxSeqLength")
        self.counts.cut += 1
        cut = Rendered(rendered.text, rendered.input_ids[: self.limit], rendered.loss_mask[: self.limit],
                       rendered.offsets[: self.limit], rendered.spans)
        return self._kept(cut)

    def _trim(self, row: dict[str, Any], rendered: Rendered, where: str) -> Rendered | None:
        column = self.policy.explicit_mask_column
        if column and row.get(column) is not None:
            raise RowRefused(f"{where} is {len(rendered.input_ids)} tokens long and carries '{column}', whose mask "
                             f"covers the whole conversation, so its oldest turns cannot be removed; shorten the row, "
                             "raise maxSeqLength, or leave its mask out")
        shortest = len(rendered.input_ids)
        # Trim the row as written (weights included): the render normalizes each candidate itself.
        for removed, messages in trimmed(row["messages"]):
            candidate = self._render({**row, "messages": messages}, where)
            shortest = len(candidate.input_ids)
            if shortest <= self.limit:
                self.counts.trimmed += 1
                self.counts.turns_removed += removed
                return self._kept(candidate)
        if self.truncation == "oldest_or_drop":
            self.counts.too_long += 1
            return None
        raise RowRefused(f"{where} is {len(rendered.input_ids)} tokens long and still {shortest} with its oldest "
                         f"turns removed, longer than maxSeqLength {self.limit}; use a larger maxSeqLength, shorter "
                         "rows, or data.truncation: oldest_or_drop")


def require_masks(fit: Fitter, reference: str) -> None:
    """With loss.explicitLossMaskColumn, each training and validation dataset holds at least one mask."""
    column = fit.policy.explicit_mask_column
    if column and not fit.counts.masked:
        raise RowRefused(f"{reference} holds no row with a mask under '{column}', which loss.explicitLossMaskColumn "
                         "names; add masks to its rows, or remove loss.explicitLossMaskColumn to use the other loss "
                         "settings")
