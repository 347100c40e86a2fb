"""The acceptance floor (`optimize.core.acceptance`): the rate of answers accepted over decided, judged once enough
are decided, the warning below the floor and the one moment it is recorded; and how `distillations get` and a
followed distillation's headline show them (the renderers take the server's JSON)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from optimize.cli.commands import distillations as cli
from optimize.core.acceptance import DEFAULT_FLOOR, LEAST_DECIDED, Acceptance, check_floor, crossed_below
from tests.unit.test_distillations_cli import ID, lines_by_label, sample


def test_the_rate_is_accepted_over_decided_and_judged_once_enough_are_decided():
    assert (DEFAULT_FLOOR, LEAST_DECIDED) == (0.2, 20)
    assert Acceptance(0, 0, 100).rate is None and not Acceptance(0, 0, 100).below_floor
    early = Acceptance(1, 10, 100)  # 10% of the first 10: too few to say
    assert early.rate == 0.1 and not early.judged and early.warning() is None
    judged = Acceptance(3, 20, 100)
    assert judged.below_floor and judged.warning() == \
        "3 of 20 answers decided were accepted (15%), below the acceptance floor of 20%"
    assert judged.as_json() == {"rate": 0.15, "accepted": 3, "decided": 20, "floor": 0.2, "belowFloor": True}
    assert not Acceptance(4, 20, 100).below_floor  # at the floor is not below it
    assert Acceptance(1, 10, 10).below_floor  # a source of fewer decisions is judged once all are decided
    assert not Acceptance(0, 40, 100, floor=0.0).below_floor  # a floor of 0 never warns


def test_it_is_recorded_once_when_it_falls_below():
    assert crossed_below(Acceptance(15, 19, 100), Acceptance(15, 80, 100))
    assert not crossed_below(Acceptance(3, 20, 100), Acceptance(3, 40, 100))  # still below: said already
    assert not crossed_below(Acceptance(30, 40, 100), Acceptance(40, 50, 100))


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.2", True, None])
def test_a_floor_is_a_number_from_0_to_1(value):
    with pytest.raises(ValueError, match="acceptanceFloor must be a number from 0 to 1"):
        check_floor(value)
    assert check_floor(1) == 1.0


def text(render, data) -> str:
    buffer = io.StringIO()
    render(Console(file=buffer, width=400, color_system=None), data)
    return buffer.getvalue()


def test_get_shows_the_rate_and_warns_below_the_floor():
    fine = sample(acceptance={"rate": 0.925, "accepted": 37, "decided": 40, "floor": 0.2, "belowFloor": False},
                  warnings=[])
    lines = lines_by_label(text(cli.render, fine))
    assert lines["Acceptance"] == "92% (37 of 40 decided), floor 20%" and "Warning" not in lines
    warning = f"3 of 40 answers decided were accepted (8%), below the acceptance floor of 20%; read why with: " \
              f"akka training distillations rejections {ID[:12]}"
    low = sample(acceptance={"rate": 0.075, "accepted": 3, "decided": 40, "floor": 0.2, "belowFloor": True},
                 warnings=[warning])
    lines = lines_by_label(text(cli.render, low))
    assert lines["Acceptance"] == "8% (3 of 40 decided), floor 20% — below it"
    assert lines["Warning"] == warning
    assert cli.follow_line(low) == f"{ID[:12]} Running (answering)  — acceptance 8% below the floor of 20%"
    assert cli.follow_line(fine) == f"{ID[:12]} Running (answering)"
    none = sample(acceptance={"rate": None, "accepted": 0, "decided": 0, "floor": 0.5, "belowFloor": False})
    assert lines_by_label(text(cli.render, none))["Acceptance"] == "— (nothing decided yet), floor 50%"
