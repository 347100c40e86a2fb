"""Reinforcement methods a plan may name but this deployment does not train yet (grpo, gspo): declared so their
plans validate and their dataset rules speak at admission before the method itself is refused.

Their runs read chat rows as prompts to roll out. The trl engine renders no row's tools into those prompts, so a
dataset with tools is refused: the run would train unlike evaluation and serving.
"""

from __future__ import annotations

from typing import Any

from optimize.core.errors import Refused
from optimize.training.methods.base import Method


class Reinforcement(Method):
    dataset_kind = "chat"
    trained = False

    def admit_datasets(self, picks: list[tuple[str, Any]]) -> None:
        for field, pick in picks:
            if pick is not None and pick.tool_rows:
                raise Refused(f"{field} {pick.reference} has {pick.tool_rows} row(s) that offer tools; the "
                              f"{self.engine} engine of a {self.name} run does not render a row's tools into the "
                              "prompts it rolls out, so the run would train unlike evaluation and serving",
                              hint="remove tools from every row of a reinforcement dataset")


class Grpo(Reinforcement):
    name = "grpo"


class Gspo(Reinforcement):
    name = "gspo"


GRPO, GSPO = Grpo(), Gspo()
