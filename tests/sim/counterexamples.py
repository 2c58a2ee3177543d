"""The shrunk schedules that broke a property, pinned on their tests with `@example`.

Each ran on the code as it was when found; the comment says which property broke and why.
Once the defect is fixed the schedule must pass, and it stays as a regression check.
"""

from __future__ import annotations

from .apiserver import ServerConfig
from .sharding_world import ShardOp, ShardSchedule
from .world import Op, Outcome, Schedule
from .writes_world import WOp, WritesSchedule

OLD_SERVER = ServerConfig(streaming=False, page_size=1, item_delay=0.0)
"""Paginated lists, one object per page: a relist takes several requests."""

RELIST_READS_OLD_CACHE = Schedule(
    objects=2,
    ops=(Op(0.05, "outage", 0, 1.0, True), Op(0.0, "put", 0)),
    concurrency=1,
    server=OLD_SERVER,
)
"""lost-trigger: w0 changes during an outage that ends in a 410; the relist's trigger for
w0 starts its reconcile before the list is complete, against the old cache (rv 1); after
the swap nothing triggers it again, so its last reconcile never sees rv 3."""

CHILD_DELETED_DURING_RELIST = Schedule(
    objects=1,
    ops=(Op(1.0, "put_child", 0), Op(1.0, "relist", flag=True), Op(0.0, "delete_child", 0)),
)
"""lost-trigger: the owned child c0 is deleted while the children's watch is down and
compacted; the relist of the children does not report the deletion, so w0 is never
reconciled after its child vanished."""

BASE_EXCEPTION_LEAKS_SLOT = Schedule(objects=1, scripts=((Outcome("base", 0.0),),), concurrency=1)
"""slots + stop-bound: a reconcile raising a BaseException that is not an Exception leaves
its key in flight for good (1 in flight, 0 running), and the graceful stop never ends."""

OWN_TIMEOUT_ERROR = Schedule(
    objects=0, ops=(Op(0.0, "put", 0),), scripts=((Outcome("timeouterror", 0.0),),), concurrency=1
)
"""timeout-report: the reconcile's own TimeoutError, raised at once, is reported as the
applier's ReconcileTimeout of 5 s."""

SCHEDULER_BELOW_CONCURRENCY = Schedule(objects=2, concurrency=2, scheduler_concurrency=1)
"""spin: with a scheduler limited to 1 under an applier allowing 2, the driver re-arms a
0-second timer forever: 121 ``pop_many`` calls for 2 adds before virtual time moves."""

LEASE_LOST_DURING_DRAIN = Schedule(
    objects=1,
    manager=True,
    ops=(Op(0.05, "partition", 0, 30.0), Op(5.0, "sigterm")),
    scripts=((Outcome("ok", 12.0),),),
    drain_timeout=10.0,
    timeout=30.0,
)
"""leader-safety: the leader is cut off from the Lease, SIGTERM starts the drain, and the
tenure ends (1010.01) while a reconcile still runs; the drain ignores the loss and the
reconcile runs, and writes, until 1012.21."""

THREAD_OUTLIVES_LOST_LEASE = Schedule(
    objects=3,
    manager=True,
    threads=True,
    concurrency=2,
    ops=(Op(0.05, "partition", 0, 12.0), Op(8.0, "sigterm")),
    scripts=((Outcome("hang", 12.0),),),
    server=ServerConfig(streaming=True, item_delay=1.0),
    drain_timeout=3.0,
    timeout=30.0,
)
"""leader-safety: a plain-function reconcile hangs (8 s); the leader is cut off from the
Lease, SIGTERM starts the drain, the tenure ends during it (1010.01) and the Manager goes on
draining, so the thread runs, and writes, until 1011.01. (With the process ending when the
Manager returns, as `fastctl run` now does, the thread ends with the lost lease.)"""

TRANSIENT_CHILD_BETWEEN_RELISTS = Schedule(
    objects=2,
    ops=(
        Op(0.0, "put_child", 0),
        Op(0.0, "delete_child", 0),
        Op(0.3, "delete_child", 0),
        Op(0.0, "put_child", 0),
        Op(0.05, "put_child", 0),
        Op(0.0, "delete_child", 0),
        Op(5.0, "relist", 0, 0.0, True),
        Op(0.05, "put_child", 0),
        Op(0.0, "put_child", 0),
        Op(0.3, "delete_child", 0),
        Op(5.0, "delete_child", 0),
        Op(0.3, "relist", 0, 0.0, True),
    ),
    concurrency=1,
    server=ServerConfig(streaming=True, page_size=3, item_delay=0.1, request_latency=0.01),
    timeout=5.0,
)
"""Found by the long run (2,000 schedules per test): the child c0 is created, changed and
deleted again (rv 8-11) between two relists of the children, and w0 is not reconciled after
it. Those versions were never shown to the watch (compacted before it resumed, gone again by
the relist), so no list + watch client can see them: the invariant asked too much and now
asks only for changes the watch was shown (README.md, the long run)."""

LEAVE_DURING_FAILING_RENEWALS = ShardSchedule(
    members=2,
    objects=1,
    ops=(ShardOp(5.0, "partition", 1, arg=30.0), ShardOp(6.0, "leave", 1)),
    scripts=((Outcome("ok", 20.0),),),
    drain_timeout=1.0,
    concurrency=1,
    server=ServerConfig(page_size=1, item_delay=0.0),
    seed=255,
)
"""shard-overlap: m1 reconciles w0 (20 s) when its Lease requests start failing (its last
renewal applied at 1004.32, so its tenure ends at 1014.31); it is stopped at 1011, drains for
its 1 s and leaves at 1012 while the reconcile still runs. The leave forgot the tenure and
drained gracefully, for up to the renew deadline: the reconcile ran on until 1022.00, while
m0, having counted m1's Lease expired, served the slot from 1021.98 and started w0 at
1021.99."""

NO_OP_WRITE_DURING_ANOTHER_WRITE = WritesSchedule(
    namespaces=1,
    objects=1,
    ops=(WOp(0.3, "race", 0, 0), WOp(0.0, "burst")),
    ignore_own_writes=True,
    concurrency=1,
    server=ServerConfig(streaming=False, page_size=1, item_delay=0.0),
)
"""held-back: w0's first reconcile wrote its status (rv 2, an echo held back as it should
be). At 1000.30 a re-trigger reconciles it again, and its status write changes nothing;
while that write is in flight another writer changes w0's spec (rv 3, gen 2). The no-op's
answer is the object as it is, at rv 3, which was noted as the controller's own version: the
watch event of rv 3 was then held back as an echo, and no reconcile ever saw gen 2."""

CHILD_MOVED_DURING_RELIST = WritesSchedule(
    namespaces=1,
    objects=2,
    ops=(
        WOp(0.0, "put_child", 0, 0, target=0),
        WOp(0.05, "relist", plural="children"),
        WOp(0.0, "put_child", 0, 0, target=1),
    ),
    ignore_own_writes=False,
    concurrency=1,
    server=ServerConfig(streaming=False, page_size=1, item_delay=0.0),
)
"""related: the child c0, owned by w0, moves to w1 (rv 4) while the children's watch is
down and compacted; the relist (1000.64) shows c0 owned by w1, and the related triggers'
diff at the end of the list re-triggered only the new owner, w1: w0, which lost its child,
was not reconciled after the move."""

POINTER_MOVED_DURING_RELIST = WritesSchedule(
    namespaces=1,
    objects=2,
    ops=(
        WOp(0.0, "put_pointer", 0, 0, target=0),
        WOp(0.05, "relist", plural="pointers"),
        WOp(0.0, "put_pointer", 0, 0, target=1),
    ),
    ignore_own_writes=False,
    concurrency=1,
    server=ServerConfig(streaming=False, page_size=1, item_delay=0.0),
)
"""related: the same with a watched pointer whose ``spec.target`` changes from w0 to w1 while
the pointers' watch is down (the mapper's old target is not re-triggered)."""
