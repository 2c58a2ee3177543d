"""The simulation of ``ignore_own_writes``: see tests/sim/README.md ("Own writes")."""

from __future__ import annotations

from hypothesis import example, given

from . import counterexamples as cx
from .strategies import sim_settings
from .writes_invariants import violations
from .writes_strategies import writes_schedules
from .writes_world import WritesRecord, WritesSchedule, simulate


def check(schedule: WritesSchedule) -> WritesRecord:
    record = simulate(schedule)
    broken = violations(record, schedule)
    if broken:
        log = "\n".join(record.log[-60:])
        raise AssertionError("\n".join(broken) + f"\n-- last events:\n{log}")
    return record


@sim_settings(200)
@given(
    writes_schedules(
        ops=("put", "race", "burst", "delete", "put_child", "relist"),
        latencies=(0.0, 0.05, 0.5, 3.0),
    )
)
@example(cx.NO_OP_WRITE_DURING_ANOTHER_WRITE)
def test_own_writes_and_other_writers(schedule: WritesSchedule) -> None:
    """A controller that ignores its own writes writes each widget's status at the end of
    each reconcile (a no-op when nothing changed), while other writers change the widgets,
    at any time or exactly while a write of the controller is in flight; writes answered
    at once or after longer than an event waits for them; widgets of the same names in
    several namespaces."""
    check(schedule)
