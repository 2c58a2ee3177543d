"""One run of a Controller in detail, without a server: how each watch is opened, what the
reconcile is given, how the run counts, reports, fails and ends, how related objects find
their primary, and a sharded run's primary watch and related triggers.

The watcher is replaced by a fake that records the arguments of every watch it opens and
reads, for each kind, a feed the test pushes events into. Names and messages are checked
exactly where they are what a user reads (logs, errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, cast

import pytest

from fastctl import Action, ObjectRef, ReconcileResult
from fastctl._core import Scheduler
from fastctl.kube._events import Recorder
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchConfig, WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.controller._environment import Environment, ShardAssignment
from fastctl.runtime.controller._wrappers import ReadinessGate
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._slots import shard_selector
from fastctl.testing import run_virtual
from fastctl.testing.model import ModelScheduler

from .test_controller_relist import (
    CHILD,
    DONE,
    INIT,
    NS,
    WIDGET,
    Feed,
    child,
    client,
    listing,
    running,
    settle,
    shared_environment,
    until,
    widget,
)
from .test_sharding_runtime import FakeMember, obj_in
from .test_typed_controller import Gizmo, gizmo

SECRET = Resource("v1", "Secret", plural="secrets", namespaced=True)
TENANT = Resource("example.com/v1", "Tenant", plural="tenants", namespaced=False)


class Watches:
    """The run's own watches, faked: every watch opened is recorded with its arguments and
    reads the feed of its kind (`fail` makes a kind's watch raise once it has listed)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.feeds: dict[str, Feed] = defaultdict(Feed)
        self.calls: list[dict[str, Any]] = []
        self.closed: list[str] = []
        self.fail: dict[str, BaseException] = {}

        def fake(api: Any, resource: Any, **kw: Any) -> AsyncIterator[WatchEvent]:
            self.calls.append({"client": api, "resource": resource, **kw})
            return self._events(resource.kind)

        monkeypatch.setattr(_environment, "watcher", fake)
        monkeypatch.setattr(_run, "watcher", fake)

    async def _events(self, kind: str) -> AsyncIterator[WatchEvent]:
        try:
            if kind in self.fail:
                yield INIT
                yield DONE
                raise self.fail[kind]
            async for event in self.feeds[kind].events():
                yield event
        finally:
            self.closed.append(kind)

    def opened(self, kind: str) -> dict[str, Any]:
        (call,) = [c for c in self.calls if c["resource"].kind == kind]
        return call


@pytest.fixture
def watches(monkeypatch: pytest.MonkeyPatch) -> Watches:
    return Watches(monkeypatch)


class Calls:
    """What each reconcile was given, by name; `hold` keeps the named ones running."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.hold: set[str] = set()
        self.release = asyncio.Event()

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        name = obj["metadata"]["name"]
        self.seen.append((name, ctx))
        if name in self.hold:
            await self.release.wait()
        return None

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.seen if n == name)


# -- the watches a run opens --------------------------------------------------------------


async def test_each_watch_is_opened_on_the_controllers_client_namespace_and_options(
    watches: Watches,
) -> None:
    """The primary with the controller's options; a related resource in the same namespace
    without the primary's selectors and, when asked, metadata only. Both report their
    retried errors to the controller's metrics."""
    api = client()
    config = WatchConfig(label_selector="app=web", field_selector="metadata.name!=x")
    calls = Calls()
    ctl = Controller(api, WIDGET, calls.reconcile, namespace=NS, watch_config=config)
    ctl.owns(CHILD, metadata_only=True)
    async with running(ctl):
        await until(lambda: len(watches.calls) == 2, "both watches opened")
    primary, related = watches.opened("Widget"), watches.opened("ConfigMap")
    assert primary["client"] is api
    assert related["client"] is api
    assert (primary["namespace"], related["namespace"]) == (NS, NS)
    used = replace(config, strip_managed_fields=True)  # the controller's default, said
    assert primary["config"] == used
    assert related["config"] == replace(
        used, label_selector=None, field_selector=None, metadata_only=True
    )
    primary["on_error"](RuntimeError("retried"))
    related["on_error"](RuntimeError("retried"))
    assert ctl.counters.watch_errors == 2


async def test_discovery_errors_of_every_resource_count_as_watch_errors(
    watches: Watches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving waits out an API server that is not up; each retried lookup, of the
    primary or of a related resource, counts as a watch error."""

    async def flaky(api: Any, resource: Resource, *, on_error: Any = None) -> ResolvedResource:
        if on_error is not None:
            on_error(OSError("connection refused"))
        return await resource.resolve(api)

    monkeypatch.setattr(_run, "resolve_patiently", flaky)
    ctl = Controller(client(), WIDGET, Calls().reconcile).owns(CHILD)
    async with running(ctl):
        await until(lambda: len(watches.calls) == 2, "both watches opened")
    assert ctl.counters.watch_errors == 2


# -- what the reconcile is given, and what the run counts ---------------------------------


async def test_the_reconcile_gets_the_controllers_context(watches: Watches) -> None:
    context = object()
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile, context=context)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    async with running(ctl):
        await until(lambda: calls.count("a") == 1, "the reconcile")
    assert calls.seen == [("a", context)]


async def test_results_are_counted_by_outcome(watches: Watches) -> None:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        name = obj["metadata"]["name"]
        if name == "fails":
            raise RuntimeError("no")
        return Action.requeue(600) if name == "later" else None

    ctl = Controller(client(), WIDGET, reconcile)
    watches.feeds["Widget"].push(
        *listing(widget("fine", 0), widget("fails", 0), widget("later", 0))
    )
    results: list[ReconcileResult] = []
    async for result in ctl.stream():
        results.append(result)
        if len(results) == 3:
            ctl.shutdown()
    c = ctl.counters
    assert (c.success, c.error, c.requeue_after) == (1, 1, 1)


async def test_a_controller_run_again_after_it_ended_can_be_configured_again(
    watches: Watches,
) -> None:
    ctl = Controller(client(), WIDGET, Calls().reconcile)
    async with running(ctl):
        await until(lambda: len(watches.calls) == 1, "the watch")
        with pytest.raises(RuntimeError) as running_error:
            ctl.owns(CHILD)
    assert str(running_error.value) == "controller widget is running: configure it before"
    assert ctl.shard is None
    ctl.owns(CHILD)  # the run has ended
    assert ctl.owned == [CHILD]


# -- a trigger source that fails ------------------------------------------------------------


def _failing_controller(watches: Watches, where: str) -> Controller:
    ctl = Controller(client(), WIDGET, Calls().reconcile, name="widgets").owns(CHILD)
    if where == "primary":
        watches.fail["Widget"] = RuntimeError("boom")
    elif where == "ConfigMap":
        watches.fail["ConfigMap"] = RuntimeError("boom")
    else:

        async def ticks() -> AsyncIterator[None]:
            yield None
            raise RuntimeError("boom")

        ctl.reconcile_all_on(ticks())
    return ctl


@pytest.mark.parametrize("where", ["primary", "ConfigMap", "resync"])
async def test_a_trigger_source_that_fails_stops_the_run_which_raises_its_error(
    watches: Watches, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """The run drains and raises the source's own error; the log names the source."""
    caplog.set_level(logging.ERROR, "fastctl.controller")
    ctl = _failing_controller(watches, where)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    watches.feeds["ConfigMap"].push(*listing())
    with pytest.raises(RuntimeError) as failure:
        await ctl.run(handle_signals=False)
    assert str(failure.value) == "boom"
    logged = [r for r in caplog.records if r.name == "fastctl.controller"]
    assert [(r.levelno, r.getMessage()) for r in logged] == [
        (logging.ERROR, f"widgets:{where} failed: RuntimeError('boom'); stopping the controller")
    ]


async def test_when_a_run_ends_its_watches_are_closed(watches: Watches) -> None:
    """Closed before the run returns, not merely asked to close."""
    ctl = Controller(client(), WIDGET, Calls().reconcile).owns(CHILD)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    async for _ in ctl.stream():
        await until(lambda: len(watches.calls) == 2, "both watches opened")
        await settle()
        ctl.shutdown()
    assert sorted(watches.closed) == ["ConfigMap", "Widget"]


# -- stopping while the API server is awaited ---------------------------------------------


@pytest.fixture
def discovery_waits(monkeypatch: pytest.MonkeyPatch) -> list[Resource]:
    """Discovery that never answers (an API server not up yet); lists what it was asked."""
    asked: list[Resource] = []

    async def never(api: Any, resource: Resource, **_: Any) -> ResolvedResource:
        asked.append(resource)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(_run, "resolve_patiently", never)
    return asked


async def test_a_controller_stopped_while_it_waits_for_the_api_server_returns(
    discovery_waits: list[Resource],
) -> None:
    ctl = Controller(client(), WIDGET, Calls().reconcile)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await until(lambda: discovery_waits == [WIDGET], "discovery asked")
    ctl.shutdown()
    await task  # returns: nothing ran, nothing to drain


async def test_a_stopped_controller_cancelled_while_it_waits_is_cancelled(
    discovery_waits: list[Resource],
) -> None:
    """A stop, then a cancel from outside (a second signal): the cancel wins."""
    ctl = Controller(client(), WIDGET, Calls().reconcile)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await until(lambda: discovery_waits == [WIDGET], "discovery asked")
    ctl.shutdown()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()


# -- Events about invalid objects ---------------------------------------------------------


class SlowRecorder:
    """Publishes each Event after `delay` virtual seconds (forever: None); notes what it
    published and what was cancelled (which takes it half a second to clean up); `error`
    makes every publish fail."""

    def __init__(self, delay: float | None, error: Exception | None = None) -> None:
        self.delay = delay
        self.error = error
        self.published: list[dict[str, Any]] = []
        self.cancelled = 0

    async def publish(self, obj: Any, **fields: Any) -> Any:
        try:
            if self.delay is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay or 0.0)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # closing its connection takes a while
            self.cancelled += 1
            raise
        if self.error is not None:
            raise self.error
        self.published.append({"name": obj["metadata"]["name"], **fields})
        return {}


def _gizmo_events(monkeypatch: pytest.MonkeyPatch, *objs: dict[str, Any]) -> None:
    async def events(*_: Any, **__: Any) -> AsyncIterator[WatchEvent]:
        yield INIT
        for obj in objs:
            yield ObjectEvent(EventKind.INIT_APPLY, obj)
        yield DONE
        await asyncio.Event().wait()

    monkeypatch.setattr(_environment, "watcher", events)


async def _nothing(obj: Any, ctx: Any) -> None:
    return None


def _run_typed(recorder: SlowRecorder) -> tuple[float, int]:
    """Run a typed controller over one invalid object until its result, stop it, and
    return the virtual time the run took to end after the stop, and how many Events had
    been cancelled when it ended."""

    async def main() -> tuple[float, int]:
        ctl = Controller(client(), Gizmo, _nothing, recorder=cast(Recorder, recorder))
        async for _ in ctl.stream():
            ctl.shutdown()
            stopped = asyncio.get_running_loop().time()
        return asyncio.get_running_loop().time() - stopped, recorder.cancelled

    return run_virtual(main())


def test_the_event_about_an_invalid_object_says_why_and_the_drain_lets_it_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "asyncio")
    _gizmo_events(monkeypatch, gizmo("bad", "many"))
    recorder = SlowRecorder(delay=2.0)
    assert _run_typed(recorder) == (2.0, 0)  # the run waited for the Event, no longer
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    (event,) = recorder.published
    assert event["name"] == "bad"
    assert (event["type"], event["reason"], event["action"]) == (
        "Warning",
        "InvalidObject",
        "Reconcile",
    )
    assert event["note"].startswith("default/bad is not a valid Gizmo")


def test_an_event_that_never_goes_out_holds_the_end_of_a_run_five_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _gizmo_events(monkeypatch, gizmo("bad", "many"))
    recorder = SlowRecorder(delay=None)
    # Cancelled after 5 s, and the run returned once it had cleaned up.
    assert _run_typed(recorder) == (5.5, 1)


def test_an_event_that_fails_is_logged_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.controller")
    _gizmo_events(monkeypatch, gizmo("bad", "many"))
    recorder = SlowRecorder(delay=1.0, error=RuntimeError("no events"))
    assert _run_typed(recorder) == (1.0, 0)
    logged = [r.getMessage() for r in caplog.records if r.name == "fastctl.controller"]
    ref = ObjectRef("bad", "default")
    assert logged == [f"controller gizmo: no Event for {ref}: RuntimeError('no events')"]


# -- related objects and their primary ----------------------------------------------------


def _owned(name: str, owner: Resource, owner_name: str, namespace: str) -> dict[str, Any]:
    """A ConfigMap controlled by `owner_name` of kind `owner`, which also has an owner
    reference that is not its controller (listed first)."""
    other = {"apiVersion": "v1", "kind": "Secret", "name": "other", "uid": "uid-other"}
    ref = {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner_name}
    refs = [other, {**ref, "uid": f"uid-{owner_name}", "controller": True}]
    meta = {"name": name, "namespace": namespace, "ownerReferences": refs}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


@pytest.mark.parametrize(
    ("primary", "namespace"),
    [(WIDGET, NS), (SECRET, NS), (TENANT, None)],
    ids=["namespaced", "core-group", "cluster-scoped"],
)
async def test_a_change_of_an_owned_object_triggers_its_controller_owner(
    watches: Watches, primary: Resource, namespace: str | None
) -> None:
    """Whatever else the child references, its controller reference names the owner: in
    the child's namespace, or none for a cluster-scoped owner; the core group is ``""``."""
    calls = Calls()
    ctl = Controller(client(), primary, calls.reconcile).owns(CHILD)
    owner: dict[str, Any] = {"apiVersion": primary.api_version, "kind": primary.kind}
    owner["metadata"] = {
        "name": "o",
        "uid": "uid-o",
        **({"namespace": namespace} if namespace else {}),
    }
    watches.feeds[primary.kind].push(*listing(owner))
    watches.feeds["ConfigMap"].push(*listing())
    async with running(ctl):
        await until(lambda: calls.count("o") == 1, "the initial reconcile")
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, _owned("c", primary, "o", NS)))
        await until(lambda: calls.count("o") == 2, "the owner triggered by its child")


async def test_watches_triggers_what_the_mapper_returns(watches: Watches) -> None:
    """A watched object maps to what its mapper says, owner references or not."""
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile).watches(
        CHILD, lambda obj: [ObjectRef(obj["data"]["target"], NS)]
    )
    watches.feeds["Widget"].push(*listing(widget("a", 0), widget("b", 0)))
    watches.feeds["ConfigMap"].push(*listing())
    pointer = {**child("c", "a"), "data": {"target": "b"}}  # owned by a, pointing at b
    async with running(ctl):
        await until(lambda: calls.count("a") == calls.count("b") == 1, "initial reconciles")
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, pointer))
        await until(lambda: calls.count("b") == 2, "the mapped target")
        await settle()
    assert calls.count("a") == 1


@pytest.mark.parametrize("relation", ["owns", "watches"])
async def test_a_related_event_filter_decides_which_changes_trigger(
    watches: Watches, relation: str
) -> None:
    def important(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return bool(new["data"].get("important"))

    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile)
    if relation == "owns":
        ctl.owns(CHILD, event_filter=important)
    else:
        ctl.watches(
            CHILD, lambda obj: [ObjectRef(obj["data"]["owner"], NS)], event_filter=important
        )
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    watches.feeds["ConfigMap"].push(*listing(child("c", "a")))
    changed = child("c", "a")
    async with running(ctl):
        await until(lambda: calls.count("a") == 1, "the initial reconcile")
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, changed))
        await settle()
        assert calls.count("a") == 1, "a change the filter rejects triggered"
        changed = {**changed, "data": {**changed["data"], "important": "yes"}}
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, changed))
        await until(lambda: calls.count("a") == 2, "a change the filter admits")


async def test_a_failing_event_filter_is_counted_each_time_and_logged_once(
    watches: Watches, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "fastctl.controller")

    def broken(old: Any, new: Any) -> bool:
        raise RuntimeError("bad filter")

    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile, name="widgets", event_filter=broken)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    async with running(ctl):
        await until(lambda: calls.count("a") == 1, "the initial reconcile")
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, widget("a", 1)))
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, widget("a", 2)))
        await until(lambda: ctl.counters.event_filter_errors == 2, "two failures counted")
    logged = [r.getMessage() for r in caplog.records if r.name == "fastctl.controller"]
    assert logged == [
        f"controller widgets: event filter on Widget {NS}/a failed: "
        "RuntimeError('bad filter'); the event passes (reported once per object)"
    ]


async def test_a_failing_mapper_is_logged_with_the_controller_and_kind(
    watches: Watches, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "fastctl.controller")

    def broken(obj: Any) -> list[ObjectRef]:
        raise RuntimeError("bad mapper")

    ctl = Controller(client(), WIDGET, Calls().reconcile, name="widgets").watches(CHILD, broken)
    watches.feeds["ConfigMap"].push(*listing(child("c", "a")))
    async with running(ctl):
        await until(lambda: bool(caplog.records), "the mapper's failure")
    assert caplog.records[0].getMessage() == (
        "controller widgets: mapper for ConfigMap failed; event skipped"
    )


async def test_a_cached_relation_on_its_own_watch_is_read_by_the_reconcile(
    watches: Watches,
) -> None:
    """The run's own watch fills the cache; no reconcile starts before the cache has its
    first list; the reconcile finds the children by owner and by mapped target."""
    found: list[tuple[list[str], list[str]]] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        cache = ctl.cache(CHILD)
        owned = [c["metadata"]["name"] for c in cache.owned_by(obj)]
        mapped = [c["metadata"]["name"] for c in cache.mapped_to(obj)]
        found.append((owned, mapped))

    ctl = Controller(client(), WIDGET, reconcile).owns(CHILD, cache=True)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    async with running(ctl):
        await settle()
        assert found == [], "reconciled before the related cache was listed"
        watches.feeds["ConfigMap"].push(*listing(child("c", "a")))
        await until(lambda: bool(found), "the reconcile")
    assert found[0] == (["c"], ["c"])


# -- looking into a running controller ----------------------------------------------------


def _resync_source() -> tuple[asyncio.Event, AsyncIterator[None]]:
    tick = asyncio.Event()

    async def ticks() -> AsyncIterator[None]:
        await tick.wait()
        yield None
        await asyncio.Event().wait()

    return tick, ticks()


async def test_inspect_sees_the_run_its_reasons_and_the_slots(watches: Watches) -> None:
    """While "a" holds the only slot, "b" waits: inspect shows "a" running, and "b" ready
    behind a busy slot with the reasons of every trigger since (an owned object, a watched
    one, a resync)."""
    calls = Calls()
    calls.hold = {"a"}
    tick, resync = _resync_source()
    ctl = Controller(client(), WIDGET, calls.reconcile, concurrency=1, name="widgets")
    ctl.owns(CHILD).watches(SECRET, lambda obj: [ObjectRef("b", NS)]).reconcile_all_on(resync)
    ctl.record_reasons()
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    watches.feeds["ConfigMap"].push(*listing())
    watches.feeds["Secret"].push(*listing())
    async with running(ctl):
        await until(lambda: calls.count("a") == 1, "a running")
        assert ctl.inspect(NS, "a").state == "in_flight"
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, widget("b", 0)))
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, child("c", "b")))
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS}}
        watches.feeds["Secret"].push(ObjectEvent(EventKind.APPLY, secret))
        tick.set()
        want = {
            "Widget changed",
            f"owned ConfigMap changed: {NS}/c",
            f"watched Secret changed: {NS}/s",
            "reconcile_all_on",
        }
        await until(
            lambda: {r.reason for r in ctl.inspect(NS, "b").reasons} == want, "every reason"
        )
        waiting = ctl.inspect(NS, "b")
        assert waiting.state == "ready"
        assert "1 of 1 slots busy" in waiting.message
        calls.release.set()


async def test_inspect_without_reasons_still_answers(watches: Watches) -> None:
    calls = Calls()
    calls.hold = {"a"}
    ctl = Controller(client(), WIDGET, calls.reconcile, concurrency=1)
    watches.feeds["Widget"].push(*listing(widget("a", 0), widget("b", 0)))
    async with running(ctl):
        await until(lambda: len(calls.seen) == 1, "one running")
        queued = "b" if calls.count("a") else "a"
        answer = ctl.inspect(NS, queued)
        assert (answer.state, answer.reasons) == ("ready", ())
        assert ctl.inspect(NS, "nope").state == "not_known"
        calls.release.set()


def test_a_scheduler_that_cannot_be_looked_into_is_refused_by_name() -> None:
    ctl = Controller(client(), WIDGET, Calls().reconcile, scheduler=ModelScheduler(), name="w")
    with pytest.raises(TypeError) as inspect_error:
        ctl.inspect(NS, "a")
    assert str(inspect_error.value) == (
        "controller w: its scheduler (ModelScheduler) cannot be inspected"
    )
    with pytest.raises(TypeError) as summary_error:
        ctl.queue_summary()
    assert str(summary_error.value) == (
        "controller w: its scheduler (ModelScheduler) has no queue summary"
    )


class _NoMembership:
    """A scheduler that does not answer ``in`` (as a user's own might not)."""

    def __init__(self) -> None:
        self._inner = Scheduler()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)


async def test_reasons_are_not_kept_with_a_scheduler_that_does_not_answer_in(
    watches: Watches,
) -> None:
    """Asked to record reasons, the run leaves them off rather than ask such a scheduler
    ``in`` at the end of every reconcile: each result comes, without an error."""
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile, scheduler=cast(Any, _NoMembership()))
    ctl.record_reasons()
    watches.feeds["Widget"].push(*listing(widget("a", 0), widget("b", 0)))
    results: list[ReconcileResult] = []

    async def collect() -> None:
        async for result in ctl.stream():
            results.append(result)

    collecting = asyncio.create_task(collect())
    try:
        await until(lambda: len(results) == 2 or collecting.done(), "both results")
        assert not collecting.done()  # the run goes on
    finally:
        ctl.shutdown()
        await collecting
    assert sorted(r.ref.name for r in results) == ["a", "b"]
    assert [r.error for r in results] == [None, None]


# -- the cache views the applier reads -----------------------------------------------------


def test_the_readiness_gate_reads_like_its_store() -> None:
    store = Store()
    store.apply(ObjectEvent(EventKind.APPLY, widget("a", 0)))
    gate = ReadinessGate(store, None, [])
    ref = ObjectRef("a", NS)
    assert list(gate) == [ref]
    assert len(gate) == 1
    assert gate[ref] == widget("a", 0)
    assert gate.get(ObjectRef("b", NS), "absent") == "absent"


# -- a sharded run ------------------------------------------------------------------------


class RecordingMember(FakeMember):
    """A fake member that notes the time each start-time check was asked at."""

    def __init__(self, serving: set[int]) -> None:
        super().__init__(serving)
        self.asked_at: list[float | None] = []

    def serves(self, slot: int, now: float | None = None) -> bool:
        self.asked_at.append(now)
        return super().serves(slot, now)


def _sharded(member: FakeMember, ctl: Controller) -> tuple[Environment, ShardGate]:
    gate = ShardGate(member, "uid", 4)
    return Environment(ctl.client, shard=ShardAssignment(gate, member)), gate


def _in_slot(gate: ShardGate, slot: int, name: str) -> dict[str, Any]:
    obj = obj_in(gate, slot, name)
    obj["metadata"]["namespace"] = NS
    return {"apiVersion": "example.com/v1", "kind": "Widget", **obj}


def _child_of(owner: dict[str, Any], name: str, *other_owners: dict[str, Any]) -> dict[str, Any]:
    """A ConfigMap controlled by `owner`, also referencing `other_owners` (first, without
    being controlled by them)."""
    refs = [
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "name": o["metadata"]["name"],
            "uid": o["metadata"]["uid"],
        }
        for o in (*other_owners, owner)
    ]
    refs[-1]["controller"] = True
    meta = {"name": name, "namespace": NS, "ownerReferences": refs}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


async def test_a_sharded_run_watches_and_reconciles_only_the_served_slots(
    watches: Watches,
) -> None:
    member = FakeMember({0})
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile, namespace=NS, name="widgets")
    ctl.owns(CHILD)
    env, gate = _sharded(member, ctl)
    ours, theirs = _in_slot(gate, 0, "ours"), _in_slot(gate, 1, "theirs")
    calls.hold = {"ours"}
    results: list[str] = []

    async def collect() -> None:
        async for result in ctl.stream(environment=env):
            results.append(result.ref.name)

    task = asyncio.create_task(collect())
    try:
        await until(lambda: len(watches.calls) == 2, "both watches opened")
        primary = watches.opened("Widget")
        assert primary["client"] is ctl.client
        assert isinstance(primary["resource"], ResolvedResource)
        assert primary["resource"].plural == "widgets"
        assert primary["namespace"] == NS
        assert primary["config"] == ctl.watch_config
        assert primary["shard_selector"] == shard_selector({0}, 4, "uid")
        keep = primary["shard_filter"]
        assert keep(ours)
        assert not keep(theirs)
        assert (gate.relists, gate.watching) == (1, frozenset({0}))
        primary["on_error"](RuntimeError("retried"))
        assert ctl.counters.watch_errors == 1

        watches.feeds["Widget"].push(*listing(ours, theirs))
        watches.feeds["ConfigMap"].push(*listing())
        await until(lambda: calls.count("ours") == 1, "ours reconciled")
        assert gate.running() == 1  # counted in its slot while it runs
        calls.release.set()
        await until(lambda: results == ["ours"], "its result")

        # Related objects: ours' child (with another owner first) triggers it, theirs' none.
        added = ctl.scheduler_stats()["adds_total"]
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, _child_of(theirs, "t")))
        await settle()
        assert ctl.scheduler_stats()["adds_total"] == added, (
            "a trigger for another replica's object"
        )
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, _child_of(ours, "o", theirs)))
        await until(lambda: calls.count("ours") == 2, "ours triggered by its child")

        # Counted apart: the two listed objects, and three watch events (not the frames
        # of the list, which carry no object).
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, ours))
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, ours))
        watches.feeds["Widget"].push(ObjectEvent(EventKind.DELETE, theirs))
        await until(lambda: ObjectRef("theirs", NS) not in ctl.store, "the delete applied")
        await settle()
        assert (gate.listed, gate.received) == (2, 3)
        assert "theirs" not in results
    finally:
        ctl.shutdown()
        await task


async def test_a_mapped_event_keeps_each_target_in_a_served_slot(watches: Watches) -> None:
    """One watched object maps to another replica's object and to ours: ours is still
    triggered."""
    member = FakeMember({0})
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile, name="widgets")
    ctl.watches(CHILD, lambda obj: [ObjectRef(n, NS) for n in obj["data"]["targets"].split()])
    env, gate = _sharded(member, ctl)
    ours, theirs = _in_slot(gate, 0, "ours"), _in_slot(gate, 1, "theirs")
    pointer = {**child("p", "none"), "data": {"targets": "theirs ours"}}
    watches.feeds["Widget"].push(*listing(ours, theirs))
    watches.feeds["ConfigMap"].push(*listing())
    async with running(ctl, env=env):
        await until(lambda: calls.count("ours") == 1, "ours reconciled")
        watches.feeds["ConfigMap"].push(ObjectEvent(EventKind.APPLY, pointer))
        await until(lambda: calls.count("ours") == 2, "ours triggered")


def test_a_sharded_plain_function_reconcile_is_checked_at_the_loops_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain function runs in a thread, which has no loop: the start-time check asks the
    member at the time of the loop the controller runs on (a virtual one here, far from the
    machine's clock)."""
    watches = Watches(monkeypatch)
    member = RecordingMember({0, 1, 2, 3})
    ran = threading.Event()

    def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        ran.set()

    async def main() -> None:
        ctl = Controller(client(), WIDGET, reconcile)
        env, gate = _sharded(member, ctl)
        watches.feeds["Widget"].push(*listing(_in_slot(gate, 0, "a")))
        async for _ in ctl.stream(environment=env):
            ctl.shutdown()

    run_virtual(main(), start=1e9)
    assert ran.is_set()
    checked = [t for t in member.asked_at if t is not None]  # the cache view asks for "now"
    assert checked
    assert all(t >= 1e9 for t in checked)


# -- signals with an environment ------------------------------------------------------------


async def test_run_with_signal_handling_runs_in_the_environment_it_is_given() -> None:
    feeds = {WIDGET: Feed()}
    calls = Calls()
    ctl = Controller(client(), WIDGET, calls.reconcile)
    env, shared = shared_environment(ctl, feeds)
    for watch in shared:
        watch.start()
    feeds[WIDGET].push(*listing(widget("a", 0)))
    task = asyncio.create_task(ctl.run(environment=env))
    try:
        await until(lambda: calls.count("a") == 1, "the object of the shared watch")
    finally:
        ctl.shutdown()
        await task
        for watch in shared:
            await watch.stop()
