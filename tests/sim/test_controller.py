"""The simulation, one Controller at a time: see tests/sim/README.md."""

from __future__ import annotations

from hypothesis import example, given

from . import counterexamples as cx
from .check import check
from .strategies import schedules, sim_settings
from .world import Schedule

CHANGES = ("put", "delete", "put_child", "delete_child", "burst", "sigterm")


@sim_settings(400)
@given(schedules(ops=CHANGES, outcomes=("ok", "requeue", "error", "hang")))
def test_changes_bursts_and_outcomes(schedule: Schedule) -> None:
    """Object changes, deletes, trigger bursts and a SIGTERM at any point, with reconciles
    that return, requeue, fail or hang past their timeout, async or in threads."""
    check(schedule)


@sim_settings(60)
@given(schedules(ops=("put", "delete", "outage", "relist", "burst"), indexes=2, min_ops=4))
@example(cx.RELIST_READS_OLD_CACHE)
def test_relists_of_the_primary(schedule: Schedule) -> None:
    """Outages (with compaction: a 410 on resume) and relists at any point, paginated or
    streaming, pausing between items, while objects are created, changed and deleted."""
    check(schedule)


@sim_settings(60)
@given(schedules(ops=("put_child", "delete_child", "relist"), indexes=1, min_ops=4))
@example(cx.CHILD_DELETED_DURING_RELIST)
def test_relists_of_owned_children(schedule: Schedule) -> None:
    """Owned children change and vanish while their watch is down and compacted (the
    primary's watch stays up: its own relist would re-trigger every object anyway)."""
    check(schedule)


@sim_settings(60)
@given(schedules(ops=CHANGES, outcomes=("ok", "error", "base", "cancel")))
@example(cx.BASE_EXCEPTION_LEAKS_SLOT)
def test_base_exceptions_and_self_cancel(schedule: Schedule) -> None:
    """Reconciles that raise a BaseException that is not an Exception, or cancel their
    own task."""
    check(schedule)


@sim_settings(40)
@given(schedules(ops=("put", "burst"), outcomes=("ok", "timeouterror")))
@example(cx.OWN_TIMEOUT_ERROR)
def test_own_timeout_error(schedule: Schedule) -> None:
    """Reconciles that raise a TimeoutError of their own, well within the timeout."""
    check(schedule)


@sim_settings(40)
@given(schedules(ops=("put", "burst"), scheduler_below=True))
@example(cx.SCHEDULER_BELOW_CONCURRENCY)
def test_scheduler_below_the_applier_concurrency(schedule: Schedule) -> None:
    """A supplied scheduler whose concurrency is below the controller's."""
    check(schedule)


def test_a_child_created_and_deleted_between_two_relists() -> None:
    """The child's versions between the relists were never shown to any watch (compacted
    before the watch resumed, gone before it listed): nothing to trigger on, and the
    invariant asks only for changes a watch was shown. The record must say so."""
    record = check(cx.TRANSIENT_CHILD_BETWEEN_RELISTS)
    changed = {c.rv for c in record.child_changes["sim/w0"]}
    shown = {c.rv for c in record.child_observed["sim/w0"] if not c.deleted}
    assert {8, 9, 11} <= changed
    assert not {8, 9, 11} & shown
