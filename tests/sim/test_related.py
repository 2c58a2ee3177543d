"""The simulation of related objects moving between primaries: see tests/sim/README.md
("Related objects")."""

from __future__ import annotations

from hypothesis import example, given

from . import counterexamples as cx
from .strategies import sim_settings
from .writes_invariants import violations
from .writes_strategies import writes_schedules
from .writes_world import WritesRecord, WritesSchedule, simulate

RELATED_OPS = (
    "put_child",
    "delete_child",
    "put_pointer",
    "delete_pointer",
    "relist",
    "move",
    "move_across_relist",
)


def check(schedule: WritesSchedule) -> WritesRecord:
    record = simulate(schedule)
    broken = violations(record, schedule)
    if broken:
        log = "\n".join(record.log[-60:])
        raise AssertionError("\n".join(broken) + f"\n-- last events:\n{log}")
    return record


@sim_settings(200)
@given(writes_schedules(ops=RELATED_OPS, ignore_own_writes=None, min_ops=2, max_ops=6))
@example(cx.CHILD_MOVED_DURING_RELIST)
@example(cx.POINTER_MOVED_DURING_RELIST)
def test_related_objects_move_across_relists(schedule: WritesSchedule) -> None:
    """Owned children change owner and pointers change target (or point at nothing) while
    their watch is down and compacted, so a 410 relist is all that shows the move; the
    widgets' own watch breaks too."""
    check(schedule)


@sim_settings(100)
@given(writes_schedules(ops=(*RELATED_OPS, "put", "delete", "outage"), ignore_own_writes=None))
def test_related_objects_and_widgets_change(schedule: WritesSchedule) -> None:
    """The same with widgets created, changed and deleted meanwhile, and outages."""
    check(schedule)
