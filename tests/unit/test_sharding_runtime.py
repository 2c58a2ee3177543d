"""The runtime side of sharding, with a fake member: the start-time check and the drains of
`ShardGate`, and the primary watch that starts over when the served slots change."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest

from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._slots import ShardKey, shard_selector
from fastctl.runtime.sharding._watch import sharded_events

SLOTS = 4


class FakeMember:
    """Serves the slots in `serving`; `move(...)` changes them and wakes the watchers."""

    def __init__(self, serving: set[int]) -> None:
        self._serving = frozenset(serving)
        self.version = 0
        self._changed = asyncio.Event()

    @property
    def serving(self) -> frozenset[int]:
        return self._serving

    def serves(self, slot: int, now: float | None = None) -> bool:
        return slot in self._serving

    def move(self, serving: set[int]) -> None:
        self._serving = frozenset(serving)
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, seen: int) -> int:
        while self.version == seen:
            await self._changed.wait()
        return self.version


def track(gate: ShardGate, reconcile: Callable[..., Any]) -> Callable[..., Any]:
    """`gate.track`, typed loosely (the tests call the wrapper directly)."""
    return cast(Callable[..., Any], gate.track(reconcile))


def obj_in(gate: ShardGate, slot: int, name: str = "x") -> dict[str, Any]:
    """An object whose uid falls in `slot`."""
    for i in range(10_000):
        uid = f"{name}-{i}"
        if gate.slot_of(uid) == slot:
            return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}
    raise AssertionError("no uid found")


async def test_a_reconcile_starts_only_while_its_slot_is_served() -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    gate.bind(asyncio.get_running_loop())
    ran: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        ran.append(obj["metadata"]["uid"])

    tracked = track(gate, reconcile)
    mine, theirs = obj_in(gate, 0, "a"), obj_in(gate, 1, "b")
    await tracked(mine, None)
    await tracked(theirs, None)
    assert ran == [mine["metadata"]["uid"]]
    member.move({1})
    await tracked(mine, None)
    await tracked(theirs, None)
    assert ran == [mine["metadata"]["uid"], theirs["metadata"]["uid"]]


async def test_a_graceful_drain_waits_for_the_running_reconciles_of_its_slots_only() -> None:
    member = FakeMember({0, 1})
    gate = ShardGate(member, "uid", SLOTS)
    gate.bind(asyncio.get_running_loop())
    release = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        await release.wait()

    tracked = track(gate, reconcile)
    in_0 = asyncio.create_task(tracked(obj_in(gate, 0, "a"), None))
    in_1 = asyncio.create_task(tracked(obj_in(gate, 1, "b"), None))
    await asyncio.sleep(0)
    assert gate.running() == 2
    member.move({1})
    drain = asyncio.create_task(gate.drain(frozenset({0}), False))
    await asyncio.sleep(0.01)
    assert not drain.done(), "the drain ended while a reconcile of its slot ran"
    await asyncio.wait_for(gate.drain(frozenset({2}), False), 1)  # nothing runs in slot 2
    release.set()
    await asyncio.wait_for(drain, 1)
    await asyncio.gather(in_0, in_1)
    assert not in_0.cancelled()
    assert gate.running() == 0


async def test_an_urgent_drain_cancels_the_running_reconciles() -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    gate.bind(asyncio.get_running_loop())

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(track(gate, reconcile)(obj_in(gate, 0), None))
    await asyncio.sleep(0)
    member.move(set())
    await asyncio.wait_for(gate.drain(frozenset({0}), True), 1)
    assert task.cancelled()


async def test_a_plain_function_reconcile_is_counted_from_its_thread() -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    loop = asyncio.get_running_loop()
    gate.bind(loop)
    started = asyncio.Event()
    release = threading.Event()

    def reconcile(obj: dict[str, Any], ctx: Any) -> Any:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        return "done"

    tracked = track(gate, reconcile)
    assert not asyncio.iscoroutinefunction(tracked)
    future = loop.run_in_executor(None, tracked, obj_in(gate, 0), None)
    await started.wait()
    drain = asyncio.create_task(gate.drain(frozenset({0}), False))
    await asyncio.sleep(0.01)
    assert not drain.done()
    release.set()
    await asyncio.wait_for(drain, 5)
    assert await future == "done"


async def test_key_namespace_puts_a_namespace_in_one_slot() -> None:
    gate = ShardGate(FakeMember(set()), "namespace", SLOTS)
    a = {"metadata": {"namespace": "team-a", "uid": "1"}}
    b = {"metadata": {"namespace": "team-a", "uid": "2"}}
    assert gate.object_slot(a) == gate.object_slot(b) == gate.slot_of("team-a")


# -- the sharded primary watch -------------------------------------------------------------


class FakeServer:
    """Serves objects by slot; each watch lists its slots, then waits for `push`ed events."""

    def __init__(self, gate: ShardGate, objects: list[dict[str, Any]]) -> None:
        self.gate = gate
        self.objects = objects
        self.selectors: list[str] = []
        self.open = 0
        self.pushed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def make(
        self, selector: str, keep: Callable[[dict[str, Any]], bool]
    ) -> AsyncIterator[WatchEvent]:
        self.selectors.append(selector)
        return self._watch(keep)

    async def _watch(self, keep: Callable[[dict[str, Any]], bool]) -> AsyncIterator[WatchEvent]:
        self.open += 1
        try:
            yield ListFrame(EventKind.INIT)
            for obj in self.objects:
                if keep(obj):
                    yield ObjectEvent(EventKind.INIT_APPLY, obj)
            yield ListFrame(EventKind.INIT_DONE)
            while True:
                obj = await self.pushed.get()
                if keep(obj):
                    yield ObjectEvent(EventKind.APPLY, obj)
        finally:
            self.open -= 1


async def _until(events: AsyncIterator[WatchEvent], kind: EventKind) -> list[WatchEvent]:
    got: list[WatchEvent] = []
    async for event in events:
        got.append(event)
        if event.kind is kind:
            return got
    raise AssertionError("stream ended")


def _uids(events: list[WatchEvent]) -> set[str]:
    return {e.obj["metadata"]["uid"] for e in events if isinstance(e, ObjectEvent)}


async def test_the_primary_watch_lists_again_with_the_new_selector_when_slots_change() -> None:
    member = FakeMember({0})
    gate = ShardGate(member, "uid", SLOTS)
    objects = [obj_in(gate, slot, f"o{slot}") for slot in range(SLOTS)]
    server = FakeServer(gate, objects)
    events = sharded_events(member, SLOTS, "uid", server.make, gate.in_slots)
    first = await asyncio.wait_for(_until(events, EventKind.INIT_DONE), 1)
    assert _uids(first) == {objects[0]["metadata"]["uid"]}
    assert server.selectors == [shard_selector({0}, SLOTS)]
    member.move({1, 2})
    second = await asyncio.wait_for(_until(events, EventKind.INIT_DONE), 1)
    assert second[0].kind is EventKind.INIT
    assert _uids(second) == {objects[1]["metadata"]["uid"], objects[2]["metadata"]["uid"]}
    assert server.selectors[-1] == shard_selector({1, 2}, SLOTS)
    assert server.open == 1, "the old watch was not closed"
    server.pushed.put_nowait(objects[3])  # not ours: filtered
    server.pushed.put_nowait(objects[2])
    third = await asyncio.wait_for(_until(events, EventKind.APPLY), 1)
    assert _uids(third) == {objects[2]["metadata"]["uid"]}
    member.move(set())
    empty = await asyncio.wait_for(_until(events, EventKind.INIT_DONE), 1)
    assert [e.kind for e in empty] == [EventKind.INIT, EventKind.INIT_DONE]
    await events.aclose()  # type: ignore[attr-defined]
    assert server.open == 0


@pytest.mark.parametrize("key", ["uid", "namespace"])
async def test_the_client_filter_matches_the_selector_ranges(key: str) -> None:
    """`in_slots` keeps exactly the objects whose hash falls in the selector's ranges."""
    gate = ShardGate(FakeMember(set()), key, 16)  # type: ignore[arg-type]
    owned = frozenset({0, 3, 4, 5, 11})
    keep = gate.in_slots(owned)
    from fastctl.runtime.sharding._slots import fnv1a_64, merge_slots

    ranges = merge_slots(owned, 16)
    dropped = 0
    for i in range(500):
        obj = {"metadata": {"uid": f"uid-{i}", "namespace": f"ns-{i % 37}"}}
        h = fnv1a_64(obj["metadata"][key])
        inside = any(start <= h < end for start, end in ranges)
        assert keep(obj) == inside
        dropped += not inside
    assert gate.filtered == dropped  # counted, for fastctl_shard_filtered_total


@pytest.mark.parametrize("identity", ["vm_e26dcb1338e8", "Node.A", "x", "a--b_"])
def test_the_member_lease_name_is_a_valid_object_name(identity: str) -> None:
    """The default identity (``host_random``) has an underscore: the Lease name must still
    be a DNS subdomain, and two identities must not share one."""
    from fastctl.runtime.sharding import Sharding

    name = Sharding("grp", identity=identity).lease_name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name
    assert name != Sharding("grp", identity=identity + "_").lease_name
    assert Sharding("grp", identity="plain-1").lease_name == "grp-plain-1"


# -- related objects -------------------------------------------------------------------------


def _sharded_controller(member: FakeMember, key: ShardKey, mapped: bool) -> Any:
    """A Controller of Widgets that owns (or, `mapped`, watches) ConfigMaps, sharded by
    `member`; never run, so its client is never used."""
    from kubernetes_asyncio.client import ApiClient

    from fastctl import ObjectRef
    from fastctl.kube._resource import Resource
    from fastctl.runtime.controller import Controller
    from fastctl.runtime.controller._environment import Environment, ShardAssignment
    from fastctl.runtime.controller._run import ControllerRun

    widget = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
    child = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)

    async def reconcile(obj: Any, ctx: Any) -> None:
        return None

    ctl = Controller(ApiClient.__new__(ApiClient), widget, reconcile, name="widgets")
    if mapped:
        ctl.watches(
            child, lambda obj: [ObjectRef(obj["data"]["owner"], obj["metadata"]["namespace"])]
        )
    else:
        ctl.owns(child)
    gate = ShardGate(member, key, SLOTS)
    env = Environment(ctl.client, shard=ShardAssignment(gate, member))
    return ControllerRun(
        ctl.spec,
        env,
        store=ctl.store,
        scheduler=ctl.scheduler,
        counters=ctl.counters,
        reasons=None,
    )


def _child_of(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": meta["name"]}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-child",
            "namespace": meta["namespace"],
            "ownerReferences": [{**ref, "uid": meta["uid"], "controller": True}],
        },
        "data": {"owner": meta["name"]},
    }


@pytest.mark.parametrize("mapped", [False, True], ids=["owns", "watches"])
async def test_a_related_trigger_is_kept_only_if_its_owner_slot_is_served(mapped: bool) -> None:
    """``owns``: the owner's UID in the child's ownerReferences decides, even before the
    owner is cached; ``watches``: the cached owner does (only this replica's are cached)."""
    from fastctl import ObjectRef

    member = FakeMember({0})
    probe = ShardGate(member, "uid", SLOTS)
    ours, theirs = obj_in(probe, 0, "ours"), obj_in(probe, 1, "theirs")
    run = _sharded_controller(member, "uid", mapped)
    rel = run.spec.relations[0]
    gate = run.env.shard.gate

    def kept(owner: dict[str, Any]) -> bool:
        event = ObjectEvent(EventKind.APPLY, _child_of(owner))
        ref = ObjectRef(owner["metadata"]["name"], "ns")
        return bool(run._related_served(gate, rel, event, ref))

    if mapped:  # the mapper names an object: it must be in this replica's cache
        assert not kept(ours)
        for owner in (ours, theirs):
            run.store.apply(ObjectEvent(EventKind.APPLY, owner))
    assert kept(ours)
    assert not kept(theirs)
    member.move({1})
    assert kept(theirs)
    assert not kept(ours)


async def test_a_related_trigger_with_key_namespace_follows_the_namespace() -> None:
    from fastctl import ObjectRef

    member = FakeMember(set())
    run = _sharded_controller(member, "namespace", mapped=False)
    gate = run.env.shard.gate
    rel = run.spec.relations[0]
    owner = {"metadata": {"name": "w", "namespace": "team-a", "uid": "u"}}
    event = ObjectEvent(EventKind.APPLY, _child_of(owner))
    ref = ObjectRef("w", "team-a")
    assert not run._related_served(gate, rel, event, ref)
    member.move({gate.slot_of("team-a")})
    assert run._related_served(gate, rel, event, ref)


# -- metrics ---------------------------------------------------------------------------------


def test_the_collector_reports_the_member_and_each_gate() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from fastctl.runtime.sharding._handover import HandoverTimes
    from fastctl.runtime.sharding._metrics import ShardingCollector

    member = SimpleNamespace(
        config=SimpleNamespace(group="g"),
        serving=frozenset({1, 2, 3}),
        members=["a", "b"],
        gained=5,
        lost=2,
        handovers=HandoverTimes(),
    )
    gate = ShardGate(FakeMember(set()), "uid", SLOTS)
    gate.received, gate.listed, gate.relists, gate.filtered = 7, 11, 3, 13
    registry = CollectorRegistry()
    registry.register(ShardingCollector(lambda: member, lambda: [("ctl", gate)]))  # type: ignore[arg-type,return-value]
    value = registry.get_sample_value
    assert value("fastctl_shard_slots_served", {"group": "g"}) == 3
    assert value("fastctl_shard_members", {"group": "g"}) == 2
    assert value("fastctl_shard_handovers_total", {"group": "g", "direction": "in"}) == 5
    assert value("fastctl_shard_handovers_total", {"group": "g", "direction": "out"}) == 2
    assert value("fastctl_shard_events_received_total", {"controller": "ctl"}) == 7
    assert value("fastctl_shard_objects_listed_total", {"controller": "ctl"}) == 11
    assert value("fastctl_shard_relists_total", {"controller": "ctl"}) == 3
    assert value("fastctl_shard_filtered_total", {"controller": "ctl"}) == 13


def test_the_collector_is_silent_without_sharding() -> None:
    from prometheus_client import CollectorRegistry

    from fastctl.runtime.sharding._metrics import ShardingCollector

    registry = CollectorRegistry()
    registry.register(ShardingCollector(lambda: None, lambda: []))
    assert [m.name for m in registry.collect()] == []
