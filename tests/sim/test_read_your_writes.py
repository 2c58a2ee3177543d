"""The simulation of the read-your-writes guard: see tests/sim/README.md ("Reading one's
own writes")."""

from __future__ import annotations

from hypothesis import given

from .ryw_invariants import violations
from .ryw_strategies import ryw_schedules
from .ryw_world import RywRecord, RywSchedule, simulate
from .strategies import sim_settings

OPS = ("put", "delete", "delete_child", "watch_delay", "relist", "outage")


def check(schedule: RywSchedule) -> RywRecord:
    record = simulate(schedule)
    broken = violations(record, schedule)
    if broken:
        log = "\n".join(record.log[-60:])
        raise AssertionError("\n".join(broken) + f"\n-- last events:\n{log}")
    return record


@sim_settings(200)
@given(ryw_schedules(ops=OPS))
def test_no_reconcile_starts_on_a_cache_older_than_its_writes(schedule: RywSchedule) -> None:
    """Reconciles that create, delete and write status, mostly requeued at once, behind
    watches late by up to 8 s (past every bound drawn), changed as the schedule runs; other
    writers change widgets and delete children; watches relist; the server goes away."""
    check(schedule)
