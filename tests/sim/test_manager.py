"""The simulation of a Manager with leader election: see tests/sim/README.md."""

from __future__ import annotations

from hypothesis import example, given

from . import counterexamples as cx
from .check import check
from .strategies import schedules, sim_settings
from .world import Schedule

LEADER_OPS = ("put", "delete", "put_child", "burst", "partition", "sigterm")


@sim_settings(100)
@given(
    schedules(
        ops=("put", "delete", "put_child", "burst", "partition"),
        outcomes=("ok", "requeue", "error", "hang"),
        threads=False,
        manager=True,
    )
)
def test_leader_election_lost_while_reconciling(schedule: Schedule) -> None:
    """One or two controllers under a Manager with leader election, async reconciles: lease
    partitions (the tenure runs out while reconciles run) and a rival that takes over; the
    Manager is stopped only once everything settled."""
    check(schedule)


@sim_settings(80)
@given(
    schedules(
        ops=LEADER_OPS, outcomes=("ok", "requeue", "error", "hang"), threads=False, manager=True
    )
)
@example(cx.LEASE_LOST_DURING_DRAIN)
def test_leader_election_async(schedule: Schedule) -> None:
    """One or two controllers on the same objects under a Manager with leader election:
    lease partitions and a rival that takes the lease over, SIGTERM at any point."""
    check(schedule)


@sim_settings(60)
@given(schedules(ops=LEADER_OPS, outcomes=("ok", "error", "hang"), threads=True, manager=True))
@example(cx.THREAD_OUTLIVES_LOST_LEASE)
def test_leader_election_threads(schedule: Schedule) -> None:
    """The same with plain-function reconciles, which run in threads that cannot be
    stopped."""
    check(schedule)
