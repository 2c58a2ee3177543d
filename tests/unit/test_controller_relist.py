"""A Controller across relists, without a server: in-memory event sources stand in for the
watcher (its own watch, or a Manager's `SharedWatch`), so each test decides exactly where a
relist pauses and what it lacks.

What must hold: a reconcile triggered by a relist reads the state the relist describes (not
the cache before it); an object created during the outage is reconciled; an object deleted
during it is not; and the owner of a related object that vanished is re-triggered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, ObjectRef
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime._shared_watch import SharedWatch
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.controller._environment import Environment

# plural and scope given: resolving needs no server
WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
CHILD = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
NS = "default"
INIT = ListFrame(EventKind.INIT)
DONE = ListFrame(EventKind.INIT_DONE)


def widget(name: str, version: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, "v": version}


def child(name: str, owner: str) -> dict[str, Any]:
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner, "uid": f"uid-{owner}"}
    meta = {"name": name, "namespace": NS, "ownerReferences": [{**ref, "controller": True}]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"owner": owner}}


def listing(*objs: dict[str, Any]) -> list[WatchEvent]:
    return [INIT, *(ObjectEvent(EventKind.INIT_APPLY, o) for o in objs), DONE]


class Feed:
    """An event source the test pushes into: what a watcher would yield, when it says."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

    def push(self, *events: WatchEvent) -> None:
        for event in events:
            self.queue.put_nowait(event)

    async def events(self) -> AsyncIterator[WatchEvent]:
        while True:
            yield await self.queue.get()


class Seen:
    """What each reconcile was given: (name, version) in start order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        self.calls.append((obj["metadata"]["name"], obj["v"]))
        return None

    def last(self, name: str) -> int | None:
        versions = [v for n, v in self.calls if n == name]
        return versions[-1] if versions else None

    def names(self, since: int = 0) -> set[str]:
        return {n for n, _ in self.calls[since:]}


async def settle(rounds: int = 200) -> None:
    """Let every task run until nothing is left to do (bounded in loop turns, not time)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def running(
    ctl: Controller, *watches: SharedWatch, env: Environment | None = None
) -> AsyncIterator[None]:
    for watch in watches:
        watch.start()
    task = asyncio.create_task(ctl.run(handle_signals=False, environment=env))
    try:
        yield
    finally:
        ctl.shutdown()
        for watch in watches:
            await watch.stop()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class Sources:
    """Where the controller's events come from: its own watches (the watcher patched to
    read the feeds) or a Manager's shared watches, one per resource."""

    def __init__(self, shared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.shared = shared
        self.feeds = {WIDGET: Feed(), CHILD: Feed()}
        self.watches: list[SharedWatch] = []

        def fake_watcher(client: Any, resource: Resource, **_: Any) -> AsyncIterator[WatchEvent]:
            return self.feeds[resource].events()

        monkeypatch.setattr(_environment, "watcher", fake_watcher)

        monkeypatch.setattr(_run, "watcher", fake_watcher)

    def bind(self, ctl: Controller) -> list[SharedWatch]:
        self.env: Environment | None = None
        if self.shared:
            self.env, self.watches = shared_environment(ctl, self.feeds)
        return self.watches


def shared_environment(
    ctl: Controller, feeds: dict[Resource, Feed]
) -> tuple[Environment, list[SharedWatch]]:
    """An environment in which every watch use of `ctl` is a shared watch of its feed (as
    a Manager would share them)."""
    watches, sources = [], {}
    for use in ctl.spec.watch_uses():
        watch = SharedWatch(str(use.resource), feeds[use.resource].events)
        sources[use.use] = watch.subscribe()
        watches.append(watch)
    return Environment(ctl.client, sources=sources), watches


def client() -> ApiClient:
    return ApiClient.__new__(ApiClient)  # never used: the events are faked


@pytest.fixture(params=[False, True], ids=["own-watch", "shared-watch"])
def sources(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Sources:
    return Sources(request.param, monkeypatch)


async def test_a_relist_triggers_reconciles_of_the_state_it_lists(sources: Sources) -> None:
    """The relist pauses after its objects, before INIT_DONE: nothing may be reconciled
    against the old cache meanwhile, and after the swap every listed object is reconciled
    with its listed state; the one created during the outage too, the deleted one not."""
    seen = Seen()
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets")
    watches = sources.bind(ctl)
    feed = sources.feeds[WIDGET]
    async with running(ctl, *watches, env=sources.env):
        feed.push(*listing(widget("changed", 0), widget("kept", 0), widget("deleted", 0)))
        await until(lambda: seen.names() == {"changed", "kept", "deleted"}, "initial list")
        before = len(seen.calls)
        # the outage: "changed" changed, "deleted" deleted, "created" created; then a relist
        relist = listing(widget("changed", 1), widget("kept", 0), widget("created", 0))
        feed.push(*relist[:-1])  # everything but the INIT_DONE
        await settle()
        assert seen.calls[before:] == [], "reconciled against the cache before the swap"
        feed.push(DONE)
        await until(lambda: seen.names(before) >= {"changed", "kept", "created"}, "relist")
        await settle()
    assert seen.last("changed") == 1
    assert seen.last("created") == 0
    assert "deleted" not in seen.names(before)


async def test_a_live_change_is_not_held_back_by_a_relation_relisting(sources: Sources) -> None:
    """While a related resource relists (its INIT_DONE not yet come), the primary's live
    changes are reconciled at once."""
    seen = Seen()
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets").owns(CHILD)
    watches = sources.bind(ctl)
    sources.feeds[WIDGET].push(*listing(widget("a", 0)))
    sources.feeds[CHILD].push(*listing(child("c", "a")))
    async with running(ctl, *watches, env=sources.env):
        await until(lambda: seen.last("a") == 0, "initial list")
        sources.feeds[CHILD].push(INIT, ObjectEvent(EventKind.INIT_APPLY, child("c", "a")))
        sources.feeds[WIDGET].push(ObjectEvent(EventKind.APPLY, widget("a", 1)))
        await until(lambda: seen.last("a") == 1, "live change")


@pytest.mark.parametrize("relation", ["owns", "watches"])
async def test_the_owner_of_a_child_deleted_during_an_outage_is_retriggered(
    sources: Sources, relation: str
) -> None:
    """The child's relist lacks it (its DELETE was compacted away): the relation's diff
    must produce the deletion and re-trigger the owner (or the objects the mapper chose)."""
    seen = Seen()
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets")
    if relation == "owns":
        ctl.owns(CHILD)
    else:
        ctl.watches(CHILD, lambda obj: [ObjectRef(obj["data"]["owner"], NS)])
    watches = sources.bind(ctl)
    sources.feeds[WIDGET].push(*listing(widget("w1", 0), widget("w2", 0), widget("w3", 0)))
    sources.feeds[CHILD].push(*listing(child("c1", "w1"), child("c2", "w2")))
    async with running(ctl, *watches, env=sources.env):
        await until(lambda: seen.names() == {"w1", "w2", "w3"}, "initial lists")
        await settle()
        before = len(seen.calls)
        sources.feeds[CHILD].push(*listing(child("c2", "w2")))  # c1 vanished
        await until(lambda: "w1" in seen.names(before), "owner of the vanished child")
        await settle()
    assert "w3" not in seen.names(before)  # owns nothing: not triggered by the child relist


async def test_an_owner_that_lost_a_child_to_another_is_triggered() -> None:
    """A child whose controller reference moves triggers both owners, the old and the new."""
    seen = Seen()
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets").owns(CHILD)
    widgets, children = Feed(), Feed()
    sources = {WIDGET: widgets, CHILD: children}
    env, watches = shared_environment(ctl, sources)
    widgets.push(*listing(widget("w1", 0), widget("w2", 0)))
    children.push(*listing(child("c", "w1")))
    async with running(ctl, *watches, env=env):
        await until(lambda: seen.names() == {"w1", "w2"}, "initial lists")
        await settle()
        before = len(seen.calls)
        children.push(ObjectEvent(EventKind.APPLY, child("c", "w2")))
        await until(lambda: seen.names(before) == {"w1", "w2"}, "both owners")


async def test_a_reconcile_running_at_the_swap_gets_one_follow_up_with_the_new_state(
    sources: Sources,
) -> None:
    seen = Seen()
    release = asyncio.Event()

    async def slow(obj: dict[str, Any], ctx: Any) -> Action | None:
        await seen.reconcile(obj, ctx)
        await release.wait()
        return None

    ctl = Controller(client(), WIDGET, slow, name="widgets")
    watches = sources.bind(ctl)
    feed = sources.feeds[WIDGET]
    async with running(ctl, *watches, env=sources.env):
        feed.push(*listing(widget("a", 0)))
        await until(lambda: seen.calls == [("a", 0)], "first reconcile running")
        feed.push(*listing(widget("a", 1)))  # the relist swaps while it runs
        await settle()
        release.set()
        await until(lambda: len(seen.calls) == 2, "the follow-up")
        await settle()
    assert seen.calls == [("a", 0), ("a", 1)]


@pytest.mark.parametrize("which", ["initial list", "relist"])
async def test_a_live_change_overtakes_the_listed_objects_still_queued(
    sources: Sources, which: str
) -> None:
    """A list's triggers have priority INITIAL_LIST_PRIORITY (-100), a live change 0: with
    one reconcile at a time and the listed objects queued behind a running one, a new
    object and a listed object that changed are served before every other listed object
    (the changed one first: raised while ready, it keeps its age)."""
    seen = Seen()
    hold = asyncio.Event()
    hold.set()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        await seen.reconcile(obj, ctx)
        await hold.wait()
        return None

    names = [f"l{i}" for i in range(6)]
    ctl = Controller(client(), WIDGET, reconcile, name="widgets", concurrency=1)
    watches = sources.bind(ctl)
    feed = sources.feeds[WIDGET]
    async with running(ctl, *watches, env=sources.env):
        if which == "relist":
            feed.push(*listing(*(widget(n, 0) for n in names)))
            await until(lambda: seen.names() == set(names), "the initial list")
            await settle()
        before = len(seen.calls)
        hold.clear()
        feed.push(*listing(*(widget(n, 1) for n in names)))
        await until(lambda: len(seen.calls) == before + 1, "the first listed object running")
        waiting = [n for n in names if n not in seen.names(before)]
        feed.push(
            ObjectEvent(EventKind.APPLY, widget("live", 1)),
            ObjectEvent(EventKind.APPLY, widget(waiting[-1], 2)),
        )
        await settle()
        hold.set()
        await until(lambda: len(seen.calls) == before + 1 + len(names), "everything")
        await settle()
    served = seen.calls[before + 1 :]
    assert served[:2] == [(waiting[-1], 2), ("live", 1)]
    assert sorted(n for n, _ in served[2:]) == sorted(waiting[:-1])
