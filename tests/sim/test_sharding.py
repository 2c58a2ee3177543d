"""The simulation of sharded replicas: see tests/sim/README.md ("Sharding")."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from . import counterexamples as cx
from .apiserver import ServerConfig
from .sharding_invariants import violations
from .sharding_world import ShardOp, ShardRecord, ShardSchedule, simulate
from .strategies import sim_settings
from .world import Outcome

MAX_MEMBERS = 4
MAX_OBJECTS = 6
DELAYS = st.sampled_from([0.0, 0.5, 2.0, 5.0, 10.0, 20.0])
DURATIONS = st.sampled_from([0.1, 1.0, 4.0, 8.0, 20.0, 40.0])
"""Reconcile durations: most beyond the safety margin (5 s), some beyond the renew deadline."""


def check(schedule: ShardSchedule) -> ShardRecord:
    record = simulate(schedule)
    broken = violations(record, schedule)
    if broken:
        log = "\n".join(record.log[-80:])
        raise AssertionError("\n".join(broken) + f"\n-- last events:\n{log}")
    return record


def _ops(kind: str, member: st.SearchStrategy[int]) -> st.SearchStrategy[list[ShardOp]]:
    """Operations of one kind (a list: a leave during failing renewals is two)."""
    if kind in ("put", "delete"):
        op = st.builds(ShardOp, DELAYS, st.just(kind), index=st.integers(0, MAX_OBJECTS - 1))
    elif kind == "join":
        op = st.builds(ShardOp, DELAYS, st.just(kind))
    elif kind == "leave":
        op = st.builds(ShardOp, DELAYS, st.just(kind), member)
    elif kind == "partition":
        lengths = st.sampled_from([3.0, 8.0, 12.0, 30.0])
        op = st.builds(ShardOp, DELAYS, st.just(kind), member, arg=lengths)
    elif kind == "slow":
        latency = st.sampled_from([1.0, 4.0, 12.0])
        lengths = st.sampled_from([5.0, 20.0])
        op = st.builds(ShardOp, DELAYS, st.just(kind), member, arg=lengths, latency=latency)
    elif kind == "fail":
        lengths = st.sampled_from([5.0, 20.0])
        op = st.builds(ShardOp, DELAYS, st.just(kind), member, arg=lengths, flag=st.booleans())
    elif kind == "outage":
        lengths = st.sampled_from([1.0, 5.0])
        op = st.builds(ShardOp, DELAYS, st.just(kind), arg=lengths, flag=st.booleans())
    elif kind == "leave_failing":
        # renewals fail, then the member leaves while its tenure still runs (or just after)
        return st.tuples(DELAYS, member, st.sampled_from([5.0, 6.0, 7.0, 8.0, 9.0, 12.0])).map(
            lambda t: [
                ShardOp(t[0], "partition", t[1], arg=30.0),
                ShardOp(t[2], "leave", t[1]),
            ]
        )
    else:  # pragma: no cover
        raise ValueError(kind)
    return op.map(lambda o: [o])


@st.composite
def shard_schedules(
    draw: st.DrawFn,
    *,
    ops: tuple[str, ...],
    max_ops: int = 8,
    members: tuple[int, int] = (1, 3),
    durations: st.SearchStrategy[float] = DURATIONS,
    drain_timeouts: tuple[float, ...] = (1.0, 3.0, 10.0),
    min_script: int = 0,
) -> ShardSchedule:
    """A sharded schedule whose operations are of the kinds `ops`, on `members` members at
    first (faults and leaves hit one of those, or one that joined)."""
    first = draw(st.integers(*members))
    member = st.integers(0, max(first, MAX_MEMBERS - 1) if "join" in ops else first - 1)
    groups = draw(st.lists(st.one_of(*[_ops(k, member) for k in ops]), max_size=max_ops))
    if "leave_failing" in ops:  # at least one, anywhere
        at = draw(st.integers(0, len(groups)))
        groups.insert(at, draw(_ops("leave_failing", member)))
    outcome = st.builds(Outcome, st.sampled_from(["ok", "ok", "requeue", "error"]), durations)
    scripts = draw(
        st.lists(
            st.lists(outcome, min_size=min_script, max_size=3).map(tuple),
            min_size=MAX_OBJECTS * min_script,
            max_size=MAX_OBJECTS,
        ).map(tuple)
    )
    return ShardSchedule(
        members=first,
        objects=draw(st.integers(1, MAX_OBJECTS)),
        ops=tuple(op for group in groups for op in group),
        scripts=scripts,
        slots=draw(st.sampled_from([4, 8])),
        drain_timeout=draw(st.sampled_from(drain_timeouts)),
        concurrency=draw(st.integers(1, 3)),
        server=ServerConfig(
            page_size=draw(st.integers(1, 3)),
            item_delay=draw(st.sampled_from([0.0, 0.1, 1.0])),
            shards=draw(st.booleans()),
        ),
        seed=draw(st.integers(0, 2**16)),
    )


EVERY_FAULT = ("put", "delete", "join", "leave", "partition", "slow", "fail", "outage")


@sim_settings(200)
@given(shard_schedules(ops=EVERY_FAULT))
def test_members_join_leave_and_fail(schedule: ShardSchedule) -> None:
    """Two to four members while objects change: partitions from the Leases, slow Lease
    requests (past the renew deadline), Lease writes that fail before or after the server
    applied them, server outages, members joining and leaving; reconciles longer than the
    safety margin."""
    check(schedule)


@sim_settings(150)
@given(
    shard_schedules(
        ops=("put", "leave_failing", "slow"),
        max_ops=3,
        members=(2, 3),
        durations=st.sampled_from([20.0, 40.0, 0.1]),
        drain_timeouts=(1.0, 3.0),
        min_script=1,
    )
)
@example(cx.LEAVE_DURING_FAILING_RENEWALS)
def test_leaves_during_failing_renewals(schedule: ShardSchedule) -> None:
    """A member whose Lease renewals fail is stopped while a long reconcile runs: its
    leave drains, and the others take its slots once its Lease expires."""
    check(schedule)
