"""Sharding at its edges, without a server: the slot arithmetic's bounds and errors, the
gate's slot of an object or ref without the key field, a gate used before it is bound, an
urgent drain that meets reconciles in threads, the cache as the applier reads it, the
primary watch when the slots change or the consumer stops while it waits for an event, and
the metrics' help texts."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest

from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._assignment import assign, weight
from fastctl.runtime.sharding._gate import ShardedStore, ShardGate
from fastctl.runtime.sharding._rules import (
    RETRY_FLOOR,
    Member,
    format_slots,
    next_write,
    parse_slots,
)
from fastctl.runtime.sharding._slots import fnv1a_64, shard_selector, slot_of, slot_range
from fastctl.runtime.sharding._watch import sharded_events
from fastctl.types import ObjectRef

from .test_sharding_runtime import SLOTS, FakeMember, FakeServer, obj_in, track

MANY = 65536
"""Slots enough that two different key values practically never share one."""


# -- slot arithmetic -------------------------------------------------------------------------


def test_the_slot_count_is_an_integer_from_1_to_65536_and_a_slot_lies_below_it() -> None:
    assert slot_range(0, 1) == (0, 1 << 64)
    assert slot_range(65535, 65536)[1] == 1 << 64
    for slots in (0, 65537, 70000, True, 2.0):
        with pytest.raises(ValueError, match="number of slots") as refused:
            slot_range(0, slots)  # type: ignore[arg-type]
        assert str(refused.value) == (
            f"the number of slots must be an integer in [1, 65536], not {slots!r}"
        )
    for slot in (-1, 4, 5):
        with pytest.raises(ValueError, match="outside") as outside:
            slot_range(slot, 4)
        assert str(outside.value) == f"slot {slot} is outside [0, 4)"


# -- the gate ------------------------------------------------------------------------------


def test_an_object_or_ref_without_a_namespace_hashes_the_empty_field() -> None:
    """As the server hashes a missing field: a cluster-scoped object (key ``namespace``)
    and a ref without a namespace fall in the slot of ``""``; a ref with one, in its own."""
    member = FakeMember(set())
    gate = ShardGate(member, "namespace", MANY)
    empty, team = slot_of(fnv1a_64(""), MANY), slot_of(fnv1a_64("team-a"), MANY)
    assert empty != team
    assert gate.object_slot({"metadata": {"name": "node-1", "uid": "u"}}) == empty
    store: dict[ObjectRef, Any] = {}
    member.move({empty})
    assert gate.admits_ref(ObjectRef("node-1"), store)
    assert not gate.admits_ref(ObjectRef("w", "team-a"), store)
    member.move({team})
    assert gate.admits_ref(ObjectRef("w", "team-a"), store)
    assert not gate.admits_ref(ObjectRef("node-1"), store)


def test_a_new_gate_watches_nothing_and_counts_each_restart() -> None:
    gate = ShardGate(FakeMember(set()), "uid", SLOTS)
    assert gate.watching == frozenset()
    assert gate.relists == 0
    gate.restarted(frozenset({1}))
    gate.restarted(frozenset({1, 2}))
    assert (gate.relists, gate.watching) == (2, frozenset({1, 2}))


async def test_a_gate_not_bound_to_a_loop_still_counts_and_drains() -> None:
    """Before the controller binds it (a test, a reconcile run by hand), the gate counts
    the reconciles it lets start and a drain sees them end."""
    gate = ShardGate(FakeMember({0}), "uid", SLOTS)
    started, release = asyncio.Event(), asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> str:
        started.set()
        await release.wait()
        return "done"

    running = asyncio.create_task(track(gate, reconcile)(obj_in(gate, 0), None))
    await started.wait()
    assert gate.running() == 1
    drained = asyncio.create_task(gate.drain(frozenset({0}), False))
    release.set()
    await drained
    assert await running == "done"
    assert gate.running() == 0


async def test_an_async_callable_object_is_tracked_as_a_coroutine_function() -> None:
    gate = ShardGate(FakeMember({0}), "uid", SLOTS)
    gate.bind(asyncio.get_running_loop())

    class Reconciler:
        async def __call__(self, obj: dict[str, Any], ctx: Any) -> str:
            assert gate.running() == 1  # counted while it runs
            return "done"

    tracked = track(gate, Reconciler())
    assert asyncio.iscoroutinefunction(tracked)
    assert await tracked(obj_in(gate, 0), None) == "done"
    assert await tracked(obj_in(gate, 1), None) is None  # slot 1 is not served


async def test_an_urgent_drain_logs_the_reconciles_it_cannot_cancel_in_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Of the drained slots only: a thread running a reconcile of another slot, and the
    cancellable tasks of a drained one, are not counted."""
    member = FakeMember({0, 1})
    gate = ShardGate(member, "uid", SLOTS)
    loop = asyncio.get_running_loop()
    gate.bind(loop)
    release = threading.Event()
    started = [asyncio.Event() for _ in range(4)]

    def blocking(obj: dict[str, Any], ctx: Any) -> str:
        loop.call_soon_threadsafe(started[gate.object_slot(obj)].set)
        release.wait()
        return "done"

    async def forever(obj: dict[str, Any], ctx: Any) -> None:
        started[int(obj["metadata"]["name"])].set()
        await asyncio.Event().wait()

    threads = [
        loop.run_in_executor(None, track(gate, blocking), obj_in(gate, slot), None)
        for slot in (0, 1)
    ]
    tasks = [asyncio.create_task(track(gate, forever)(obj_in(gate, 0, n), None)) for n in "23"]
    for event in started:
        await event.wait()
    assert gate.running(frozenset({0})) == 3
    member.move(set())
    try:
        with caplog.at_level(logging.ERROR, logger="fastctl.sharding"):
            drain = asyncio.create_task(gate.drain(frozenset({0}), True))
            for task in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert not drain.done()  # the thread still runs
            release.set()
            await drain
    finally:
        release.set()  # never leave the threads blocked, whatever failed
    assert await asyncio.gather(*threads) == ["done", "done"]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            "1 plain-function reconcile(s) of slots this replica no longer serves still run "
            "in threads (they cannot be cancelled)",
        )
    ]


def test_the_cache_the_applier_reads_hides_the_objects_of_slots_not_served() -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    store = Store()
    ours, theirs = obj_in(gate, 0, "a"), obj_in(gate, 1, "b")
    for event in (
        ListFrame(EventKind.INIT),
        ObjectEvent(EventKind.INIT_APPLY, ours),
        ObjectEvent(EventKind.INIT_APPLY, theirs),
        ListFrame(EventKind.INIT_DONE),
    ):
        store.apply(event)
    sharded = ShardedStore(store, gate)
    a, b = ObjectRef("a", "ns"), ObjectRef("b", "ns")
    assert sharded[a] == store[a]
    with pytest.raises(KeyError) as missing:
        sharded[b]
    assert missing.value.args == (b,)
    assert sorted(sharded, key=str) == sorted([a, b], key=str)  # iterates the whole cache
    assert len(sharded) == 2


# -- the primary watch ---------------------------------------------------------------------


class IdleServer(FakeServer):
    """A `FakeServer` that says when its watch waits for the next event; with `ends`, a
    watch cancelled while it waits ends instead (as a source that swallows its
    cancellation does)."""

    def __init__(self, gate: ShardGate, objects: list[dict[str, Any]], ends: bool = False) -> None:
        super().__init__(gate, objects)
        self.idle = asyncio.Event()
        self.ends = ends

    async def _watch(self, keep: Callable[[dict[str, Any]], bool]) -> AsyncIterator[WatchEvent]:
        self.open += 1
        try:
            yield ListFrame(EventKind.INIT)
            yield ListFrame(EventKind.INIT_DONE)
            self.idle.set()
            try:
                obj = await self.pushed.get()
            except asyncio.CancelledError:
                if self.ends:
                    return
                raise
            yield ObjectEvent(EventKind.APPLY, obj)
        finally:
            self.idle.clear()
            self.open -= 1


async def _listed(events: AsyncIterator[WatchEvent]) -> None:
    assert [(await anext(events)).kind for _ in range(2)] == [EventKind.INIT, EventKind.INIT_DONE]


@pytest.mark.parametrize("ends", [False, True], ids=["cancelled", "ends-when-cancelled"])
async def test_slots_that_change_while_the_watch_waits_start_a_new_list(ends: bool) -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "namespace", SLOTS)
    server = IdleServer(gate, [], ends)
    events = sharded_events(member, SLOTS, "namespace", server.make, gate.in_slots)
    await _listed(events)
    assert server.selectors == [shard_selector({0}, SLOTS, "namespace")]
    waiting = asyncio.ensure_future(anext(events))
    await server.idle.wait()
    member.move({1})
    assert (await waiting).kind is EventKind.INIT
    assert server.selectors[-1] == shard_selector({1}, SLOTS, "namespace")
    assert server.open == 1, "the old watch was not closed"
    assert (await anext(events)).kind is EventKind.INIT_DONE
    assert isinstance(events, AsyncGenerator)
    await events.aclose()
    assert server.open == 0


@pytest.mark.parametrize("ends", [False, True], ids=["cancelled", "ends-when-cancelled"])
async def test_a_consumer_that_stops_while_the_watch_waits_closes_it(ends: bool) -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    server = IdleServer(gate, [], ends)
    events = sharded_events(member, SLOTS, "uid", server.make, gate.in_slots)
    await _listed(events)
    waiting = asyncio.ensure_future(anext(events))
    await server.idle.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert server.open == 0
    member.move({1})  # nobody waits for a change any more
    with pytest.raises(StopAsyncIteration):
        await anext(events)


# -- metrics -------------------------------------------------------------------------------


def test_the_sharding_metrics_say_what_they_count() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from fastctl.runtime.sharding._handover import HandoverTimes
    from fastctl.runtime.sharding._metrics import ShardingCollector

    member = SimpleNamespace(
        config=SimpleNamespace(group="g"),
        serving=frozenset(),
        members=["a"],
        gained=0,
        lost=0,
        handovers=HandoverTimes(),
    )
    gate = ShardGate(FakeMember(set()), "uid", SLOTS)
    registry = CollectorRegistry()
    registry.register(ShardingCollector(lambda: member, lambda: [("ctl", gate)]))  # type: ignore[arg-type,return-value]
    assert {m.name: m.documentation for m in registry.collect()} == {
        "fastctl_shard_slots_served": "Slots this replica serves",
        "fastctl_shard_members": "Live members of the shard group",
        "fastctl_shard_handovers": "Slots this replica started (in) or stopped (out) serving",
        "fastctl_shard_handover_duration_seconds": (
            "How long handovers took: out, slot stopped to unpublished; in, wanted to served"
        ),
        "fastctl_shard_events_received": "Watch events the sharded primary watch delivered",
        "fastctl_shard_objects_listed": "Objects the sharded primary watch's lists delivered",
        "fastctl_shard_filtered": "Objects and events the client-side shard filter dropped",
        "fastctl_shard_relists": "Primary watches started over with a new set of slots",
    }


def test_a_failed_write_trusts_none_of_its_new_claims() -> None:
    """A write that failed may or may not have been applied: the claims it carried are not
    certainly published, so no read may promote them to serving; what an earlier write
    published still stands, as long as the member still publishes it."""
    member = Member("m0", slots=4, renew_deadline=10.0)
    member.serving = {0}
    member.wrote(0.0, member.to_publish())
    member.claiming = {1}
    member.write_failed()
    assert member.durable == frozenset({0})
    member.serving = set()  # slot 0 handed over meanwhile: no longer published
    member.write_failed()
    assert member.durable == frozenset()


def test_of_two_claims_on_one_slot_only_the_smaller_identity_may_serve() -> None:
    """Rule 3 when two members claim one slot: the larger identity withdraws; the smaller
    keeps its claim but does not serve while the other still publishes it, however
    certain its own claim is; once the other's claim is gone, it serves."""
    everything = frozenset(range(4))
    small = Member("a", slots=4, renew_deadline=10.0)
    large = Member("b", slots=4, renew_deadline=10.0)
    for member in (small, large):
        member.wrote(0.0, frozenset())
        # Alone at first: each claims every slot, and publishes its claims.
        assert member.observed({}, 1.0) == set()
        assert member.claiming == everything
        member.wrote(1.0, member.to_publish())
    ours = {"a": small.to_publish(), "b": large.to_publish()}
    assert small.observed({"b": ours["b"]}, 2.0) == set()
    assert small.serving == set()
    assert small.claiming == everything & assign(["a", "b"], 4)["a"]
    assert large.observed({"a": ours["a"]}, 2.0) == set()
    assert large.serving == set()
    assert large.claiming == set()  # withdrawn: the smaller claim wins
    # The larger one publishes its withdrawal; the smaller one serves its share.
    assert small.observed({"b": frozenset()}, 3.0) == set()
    assert small.serving == set(assign(["a", "b"], 4)["a"])


def test_a_read_passed_no_durable_set_uses_what_the_writes_so_far_published() -> None:
    """`observed` without `durable`: the claims published by the successful writes so
    far may be promoted, a claim not yet written may not."""
    member = Member("m0", slots=4, renew_deadline=10.0)
    member.wrote(0.0, frozenset())
    member.observed({}, 1.0)  # claims every slot, none written yet
    assert member.observed({}, 1.5) == set()
    assert member.serving == set()
    member.wrote(2.0, member.to_publish())
    member.observed({}, 2.5)
    assert member.serving == set(range(4))


def test_a_tenure_that_ends_with_only_claims_forgets_them() -> None:
    """The tenure's end starts the member over, also when it served nothing yet: its
    pending claims are dropped and nothing it wrote counts any more."""
    member = Member("m0", slots=4, renew_deadline=10.0)
    member.wrote(0.0, frozenset())
    member.observed({}, 1.0)
    member.wrote(2.0, member.to_publish())
    assert member.claiming == set(range(4))
    assert member.durable == frozenset(range(4))
    assert member.check(12.0) == set()  # nothing was served
    assert member.claiming == set()
    assert member.durable == frozenset()
    assert member.to_publish() == frozenset()


def test_a_claim_on_a_slot_no_longer_assigned_is_withdrawn() -> None:
    """A member appears while the claims are pending: the claims on the slots that are now
    its are withdrawn, certain as they were, and only the member's new share is served."""
    member = Member("m0", slots=4, renew_deadline=10.0)
    member.wrote(0.0, frozenset())
    member.observed({}, 1.0)
    member.wrote(2.0, member.to_publish())  # every claim written
    member.observed({"m1": frozenset()}, 2.5)
    share = assign(["m0", "m1"], 4)["m0"]
    assert share != frozenset(range(4))
    assert member.serving == set(share)
    assert member.claiming == set()


def test_a_slot_that_drains_is_not_served_again_before_it_has_drained() -> None:
    """A slot moves away and is assigned back while its reconciles still drain: it is not
    served again until the drain has ended and a new claim has been written and read."""
    member = Member("m0", slots=4, renew_deadline=10.0)
    member.wrote(0.0, frozenset())
    member.observed({}, 1.0)
    member.wrote(2.0, member.to_publish())
    member.observed({}, 2.5)
    assert member.serving == set(range(4))
    assert member.claiming == set()
    moved = set(assign(["m0", "m1"], 4)["m1"])
    assert member.observed({"m1": frozenset()}, 3.0) == moved
    assert member.draining == moved
    member.wrote(4.0, member.to_publish())
    member.observed({}, 4.5)  # m1 gone again: the slots are assigned back, still draining
    assert member.serving == set(range(4)) - moved
    for slot in moved:
        member.drained(slot)
    member.observed({}, 5.0)  # claimed anew
    assert member.serving == set(range(4)) - moved
    member.wrote(6.0, member.to_publish())
    member.observed({}, 6.5)
    assert member.serving == set(range(4))


def test_sharding_defaults_and_what_it_keeps() -> None:
    """The defaults (docs/sharding.md): namespace `default`, a generated identity, key `uid`,
    256 slots, 15 / 10 / 2 s; what is given is kept as given (timings as floats)."""
    default = Sharding("grp")
    assert (default.group, default.namespace, default.key, default.slots) == (
        "grp",
        "default",
        "uid",
        256,
    )
    assert (default.lease_duration, default.renew_deadline, default.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert default.identity
    assert default.identity != Sharding("grp").identity  # generated for each
    given = Sharding(
        "g2",
        namespace="ops",
        identity="me",
        key="namespace",
        slots=8,
        lease_duration=20,
        renew_deadline=12,
        retry_period=3,
    )
    assert (given.group, given.namespace, given.identity, given.key, given.slots) == (
        "g2",
        "ops",
        "me",
        "namespace",
        8,
    )
    assert (Sharding("g", slots=1).slots, Sharding("g", slots=65536).slots) == (1, 65536)
    timings = (given.lease_duration, given.renew_deadline, given.retry_period)
    assert timings == (20.0, 12.0, 3.0)
    assert all(type(t) is float for t in timings)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group": ""}, "Sharding needs a group name and a namespace"),
        ({"namespace": ""}, "Sharding needs a group name and a namespace"),
        ({"identity": ""}, "identity must not be empty"),
        ({"key": "name"}, "key must be one of ['namespace', 'uid'], not 'name'"),
        ({"slots": 0}, "slots must be an integer in [1, 65536], not 0"),
        ({"slots": 65537}, "slots must be an integer in [1, 65536], not 65537"),
        ({"slots": True}, "slots must be an integer in [1, 65536], not True"),
        ({"slots": 2.0}, "slots must be an integer in [1, 65536], not 2.0"),
        (
            {"lease_duration": 10.2},
            "lease_duration (10.2) must be longer than renew_deadline (10.0) by at least "
            "0.5 s: a member must stop serving before the others may count its Lease as "
            "expired",
        ),
    ],
)
def test_each_bad_sharding_option_is_refused_with_its_own_message(
    kwargs: dict[str, Any], message: str
) -> None:
    options: dict[str, Any] = {"group": "grp", **kwargs}
    group = options.pop("group")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Sharding(group, **options)


@pytest.mark.parametrize("text", ["5-16", "16", "0-3,16", "3-2", "-1", "a", "1-b", "1-2-3"])
def test_published_slots_out_of_range_or_unreadable_count_as_every_slot(text: str) -> None:
    """A member that cannot read what another publishes takes it to publish every slot:
    reading too much keeps it out, reading too little could put two members on one slot.
    With 16 slots, slot 16 does not exist."""
    assert parse_slots(text, 16) == frozenset(range(16))


@pytest.mark.parametrize(
    ("slots", "text"),
    [({0, 1, 2}, "0-2"), ({5, 7, 8}, "5,7-8"), ({3}, "3"), (set(), ""), ({1, 3}, "1,3")],
)
def test_published_slots_are_written_as_the_fewest_ranges(slots: set[int], text: str) -> None:
    """Each run of adjacent slots is one range, the last one too (the annotation stays
    short, and others read it as written)."""
    assert format_slots(slots) == text


def test_the_assignment_is_the_same_in_every_version() -> None:
    """Every member computes the assignment itself, so it is a wire format: members of two
    versions (a rolling upgrade) that weighed slots differently would each leave slots to
    the other, and some slots would be served by nobody. Pinned: the 8-byte big-endian
    BLAKE2b of ``identity NUL slot``, and one assignment."""
    assert weight("m0", 3) == 8271110689089302780
    assert weight("replica-a", 255) == 10767223844392450558
    assert assign(["m0", "m1", "m2"], 8) == {
        "m0": frozenset({1, 5, 7}),
        "m1": frozenset({0, 4}),
        "m2": frozenset({2, 3, 6}),
    }


def test_a_failed_write_is_never_retried_sooner_than_a_tenth_of_the_period() -> None:
    """Near the tenure's end a failed write is retried after half the time left, but never
    sooner than `RETRY_FLOOR` periods (0.2 s of a 2 s period): no tight loop against a
    server that refuses at once."""
    assert RETRY_FLOOR == 0.1
    delay = next_write(ok=False, sent_at=9.9, now=9.95, deadline=10.0, retry_period=2.0, jitter=0.0)
    assert delay == pytest.approx(0.2)


def test_a_write_failed_at_the_deadline_waits_the_plain_period() -> None:
    """A write that times out at its budget fails exactly at the tenure's end: the tenure
    is over then (it holds while ``now < deadline``), so the next write waits the plain
    period from that write's send, not the short retry of a tenure still held."""
    delay = next_write(ok=False, sent_at=9.5, now=10.0, deadline=10.0, retry_period=2.0, jitter=0.0)
    assert delay == pytest.approx(1.5)
