"""Every operation and every outcome at once, with or without a Manager: the schedule
space the focused tests cut into pieces. This is the one to run long (tests/sim/README.md)."""

from __future__ import annotations

from hypothesis import given

from .check import check
from .strategies import schedules, sim_settings
from .world import Schedule

EVERY_OP = (
    "put",
    "delete",
    "put_child",
    "delete_child",
    "outage",
    "relist",
    "burst",
    "partition",
    "sigterm",
)
EVERY_OUTCOME = ("ok", "requeue", "error", "base", "cancel", "timeouterror", "hang")


@sim_settings(60)
@given(schedules(ops=EVERY_OP, outcomes=EVERY_OUTCOME, manager=None, max_ops=16))
def test_everything(schedule: Schedule) -> None:
    check(schedule)
