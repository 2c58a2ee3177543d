"""Event filters on a running Controller (in-memory event sources, no server), and the
own-writes registry: what a filter holds back, and what it never touches (requeues,
``reconcile_all_on`` resyncs, the echo of someone else's write)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from fastctl import Action, generation_changed
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.kube._writes import WRITE_OBSERVER, observed_write
from fastctl.runtime._filters import EventFilter
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime.controller import Controller

from .test_controller_relist import (
    CHILD,
    DONE,
    INIT,
    WIDGET,
    Sources,
    client,
    running,
    until,
)

CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
EVENTS = ResolvedResource("events.k8s.io", "v1", "Event", "events", True)


async def observed(own: OwnWrites, reconcile: Callable[[Any, Any], Awaitable[None]]) -> None:
    """Run `reconcile` as the controller would with ``ignore_own_writes``."""
    result = own.observing(reconcile)(None, None)
    assert inspect.isawaitable(result)
    await result


def widget(name: str, generation: int, status: str = "") -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": generation}
    return {"metadata": meta, "status": {"s": status}}


def configmap(name: str, version: str, uid: str = "") -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"}
    return {"metadata": {**meta, "resourceVersion": version}}


async def test_status_writes_do_not_trigger_requeues_and_resyncs_still_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = Sources(False, monkeypatch)
    calls: list[tuple[str, int, str]] = []
    requeued: set[str] = set()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        name = obj["metadata"]["name"]
        calls.append((name, obj["metadata"]["generation"], obj["status"]["s"]))
        if name == "b" and name not in requeued:
            requeued.add(name)
            return Action.requeue(0)
        return None

    ticks: asyncio.Queue[None] = asyncio.Queue()

    async def resync() -> AsyncIterator[None]:
        while True:
            await ticks.get()
            yield None

    ctl = Controller(client(), WIDGET, reconcile, event_filter=generation_changed)
    ctl.reconcile_all_on(resync())
    feed = sources.feeds[WIDGET]
    async with running(ctl):
        feed.push(INIT, ObjectEvent(EventKind.INIT_APPLY, widget("a", 1)), DONE)
        await until(lambda: len(calls) == 1, "the listed Widget reconciled")
        feed.push(ObjectEvent(EventKind.APPLY, widget("a", 1, "Ready")))  # a status write
        feed.push(ObjectEvent(EventKind.APPLY, widget("b", 1)))  # first event: passes
        await until(lambda: calls.count(("b", 1, "")) == 2, "b requeued and reconciled again")
        feed.push(ObjectEvent(EventKind.APPLY, widget("a", 2, "Ready")))  # a spec change
        await until(lambda: ("a", 2, "Ready") in calls, "the spec change reconciled")
        ticks.put_nowait(None)
        await until(lambda: len(calls) == 6, "the resync reconciled both")
    assert ("a", 1, "Ready") not in calls, calls  # the status write triggered nothing
    assert calls[-2:] in ([("a", 2, "Ready"), ("b", 1, "")], [("b", 1, ""), ("a", 2, "Ready")])


def test_a_controller_rejects_an_event_filter_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="Controller: event_filter must be callable"):
        Controller(client(), WIDGET, lambda o, c: None, event_filter="generation")  # type: ignore[arg-type]
    ctl = Controller(client(), WIDGET, lambda o, c: None)
    with pytest.raises(TypeError, match="owns: event_filter must be callable") as wrong:
        ctl.owns(CHILD, event_filter=1)  # type: ignore[arg-type]
    assert str(wrong.value) == "owns: event_filter must be callable (old, new) -> bool, got int"


def deliver(f: EventFilter, own: OwnWrites, event: WatchEvent) -> bool:
    """`event` through the own-writes watch as the controller passes it: the version noted
    as the latest known (`fastctl.runtime._settled_events`), then the filter's verdict."""
    if isinstance(event, ObjectEvent) and event.kind is not EventKind.DELETE:
        own.saw(CHILD, event.obj)
    return f.admits(event)


async def wrote(
    resource: ResolvedResource,
    name: str | None,
    answer: dict[str, Any],
    *,
    status: int = 200,
    dry_run: bool = False,
    sent: list[str | None] | None = None,
) -> None:
    """One write of ours answered with `answer` (`status`); the precondition it carried goes
    to `sent`."""

    async def send(version: str | None) -> tuple[int, Any]:
        if sent is not None:
            sent.append(version)
        return status, answer

    with observed_write(resource, "default", name, dry_run=dry_run, conditional=True) as write:
        await write.send(send)


async def test_the_echo_of_an_own_write_is_held_back_and_a_foreign_write_passes() -> None:
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "1")))  # someone made it
    sent: list[str | None] = []

    async def reconcile(obj: Any, ctx: Any) -> None:
        for version in ("5", "6"):  # two writes of one object in one reconcile
            await wrote(CONFIGMAPS, "x", configmap("x", version), sent=sent)
        event = {"metadata": {"uid": "uid-event", "resourceVersion": "7"}}  # not watched
        await wrote(EVENTS, "note", event, status=201, sent=sent)

    await observed(own, reconcile)
    assert WRITE_OBSERVER.get() is None  # reset after the reconcile
    assert sent == ["1", "5", None]  # each on the version before it; the Event as it is
    assert len(own) == 1  # "x" only: the Event is not remembered
    assert not deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "5")))
    assert not deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "6")))
    assert len(own) == 0  # both echoes used up
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "9")))  # someone else's


async def test_an_echo_that_comes_before_the_answer_waits_for_it() -> None:
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "4")))
    echo = configmap("x", "5")
    answered = asyncio.Event()

    async def reconcile(obj: Any, ctx: Any) -> None:
        async def send(version: str | None) -> tuple[int, Any]:
            await answered.wait()  # the watch delivers the echo meanwhile
            return 200, echo

        with observed_write(CONFIGMAPS, "default", "x", conditional=True) as write:
            await write.send(send)

    task = asyncio.create_task(observed(own, reconcile))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(own.settle(CHILD, echo))
    await asyncio.sleep(0)
    assert not waiting.done()  # a write of ours to "x" is in flight: wait for its answer
    answered.set()
    await waiting
    await task
    assert not deliver(f, own, ObjectEvent(EventKind.APPLY, echo))
    assert len(own) == 0


async def test_own_writes_go_with_their_object() -> None:
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "4")))

    async def reconcile(obj: Any, ctx: Any) -> None:
        await wrote(CONFIGMAPS, "x", configmap("x", "5"))

        async def fail(version: str | None) -> tuple[int, Any]:
            raise RuntimeError("the write failed")

        with observed_write(CONFIGMAPS, "default", "y", conditional=True) as write:
            await write.send(fail)

    with pytest.raises(RuntimeError):
        await observed(own, reconcile)
    assert len(own) == 1  # "x"'s version; the failed write of "y" left nothing behind
    assert own.known == 1
    deliver(f, own, ObjectEvent(EventKind.DELETE, configmap("x", "5")))
    assert len(own) == 0
    assert own.known == 0  # its latest version went with it


async def test_the_echo_of_a_create_by_generate_name_is_held_back_and_a_dry_run_is_not_noted() -> (
    None
):
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    made = configmap("x-7f2q", "11")
    deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("y", "4")))

    async def reconcile(obj: Any, ctx: Any) -> None:
        await wrote(CONFIGMAPS, None, made, status=201)  # the name comes back
        # A dry run's answer: the version the object has, and no precondition sent.
        await wrote(CONFIGMAPS, "y", configmap("y", "4"), dry_run=True)

    await observed(own, reconcile)
    assert len(own) == 1  # the created object's version; nothing of the dry run
    assert not deliver(f, own, ObjectEvent(EventKind.APPLY, made))  # its echo
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("y", "5")))


def _spec_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return old.get("spec") != new.get("spec")


async def test_a_filter_that_keeps_whole_objects_holds_back_own_writes_too() -> None:
    """A predicate that reads the body makes the filter keep whole objects, not only their
    metadata: the version an echo was written on is still read from the metadata."""
    own = OwnWrites([CHILD])
    f = EventFilter(_spec_changed, controller="c", kind="ConfigMap", own_writes=own)
    first = configmap("x", "4") | {"spec": {"k": "1"}}
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, first))  # a first event passes
    echo = configmap("x", "5") | {"spec": {"k": "2"}}  # our change, which the predicate sees

    async def reconcile(obj: Any, ctx: Any) -> None:
        await wrote(CONFIGMAPS, "x", echo)

    await observed(own, reconcile)
    assert not deliver(f, own, ObjectEvent(EventKind.APPLY, echo))
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "6") | {"spec": {}}))


async def test_a_relist_that_no_longer_shows_an_object_forgets_all_of_it() -> None:
    """Its state, its failure report, and what the own-writes registry kept of it."""
    own = OwnWrites([CHILD])

    def broken(old: Any, new: Any) -> bool:
        raise KeyError("spec")

    f = EventFilter(broken, controller="c", kind="ConfigMap", own_writes=own)
    deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "4")))
    assert deliver(f, own, ObjectEvent(EventKind.APPLY, configmap("x", "5")))  # reported

    async def reconcile(obj: Any, ctx: Any) -> None:
        await wrote(CONFIGMAPS, "x", configmap("x", "6"))

    await observed(own, reconcile)
    assert (len(f), len(own), own.known) == (2, 1, 1)
    for event in (INIT, DONE):
        assert deliver(f, own, event)
    assert (len(f), len(own), own.known) == (0, 0, 0)
