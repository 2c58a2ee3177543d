"""Events held for the answer of a write of ours (``ignore_own_writes``): only the written
object's events wait, in their order; other objects' pass; a list's frame waits for all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, ObjectKind, WatchEvent
from fastctl.kube._writes import observed_write
from fastctl.runtime import _own_writes
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime._settled_events import settled
from fastctl.runtime.controller import Controller

from .test_controller_relist import (
    CHILD,
    DONE,
    INIT,
    NS,
    WIDGET,
    Sources,
    child,
    client,
    running,
    settle,
    until,
)

WIDGETS = ResolvedResource("example.com", "v1", "Widget", "widgets", True)
CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)


def widget(name: str, version: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": version}
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


def apply(name: str, version: str, kind: ObjectKind = EventKind.APPLY) -> WatchEvent:
    return ObjectEvent(kind, widget(name, version))


def seen(event: WatchEvent) -> str:
    if isinstance(event, ListFrame):
        return str(event.kind.value)
    meta = event.obj["metadata"]
    return f"{meta['name']}@{meta['resourceVersion']}"


class HangingWrite:
    """A write of ours whose answer comes only when the test sets `answered`: a change of
    the version the controller knows (HTTP 200), or with `status` 201 a create."""

    def __init__(self, status: int = 200) -> None:
        self.answered, self.writing = asyncio.Event(), asyncio.Event()
        self.status = status

    async def __call__(self, resource: ResolvedResource, name: str, answer: dict[str, Any]) -> None:
        async def send(version: str | None) -> tuple[int, Any]:
            self.writing.set()
            await self.answered.wait()
            return self.status, answer

        with observed_write(resource, NS, name, conditional=True) as write:
            await write.send(send)

    async def start(self, own: OwnWrites, name: str) -> asyncio.Task[None]:
        """Widget `name`'s write, reported to `own` as a reconcile's, under way."""

        async def reconcile(obj: Any, ctx: Any) -> None:
            await self(WIDGETS, name, widget(name, "2"))

        observed: Any = own.observing(reconcile)
        write: asyncio.Task[None] = asyncio.create_task(observed(None, None))
        await self.writing.wait()
        return write


async def source(queue: asyncio.Queue[WatchEvent | None]) -> AsyncIterator[WatchEvent]:
    while (event := await queue.get()) is not None:
        yield event


async def test_only_the_written_objects_events_wait_and_a_lists_end_waits_for_them() -> None:
    own = OwnWrites([WIDGET])
    hanging = HangingWrite()
    write = await hanging.start(own, "a")
    queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
    out: list[str] = []

    async def consume() -> None:
        async for event in settled(own, WIDGET, source(queue)):
            out.append(seen(event))

    consumer = asyncio.create_task(consume())
    for event in (
        INIT,
        apply("a", "2", EventKind.INIT_APPLY),  # the echo, before the write's answer
        apply("b", "1", EventKind.INIT_APPLY),
        apply("a", "3", EventKind.INIT_APPLY),  # behind a's first
        DONE,
        apply("c", "1"),
    ):
        queue.put_nowait(event)
    await until(lambda: out == ["init", "b@1"], "b passes while a's write is in flight")
    for _ in range(50):
        await asyncio.sleep(0)
    assert out == ["init", "b@1"], "the list's end and later events wait for a"
    hanging.answered.set()
    await write
    await until(lambda: len(out) == 6, "a's events, then the list's end, then c")
    assert out == ["init", "b@1", "a@2", "a@3", "init_done", "c@1"]
    queue.put_nowait(None)
    await consumer


async def test_an_error_of_the_source_comes_after_the_held_events() -> None:
    own = OwnWrites([WIDGET])
    hanging = HangingWrite()
    write = await hanging.start(own, "a")

    async def failing() -> AsyncIterator[WatchEvent]:
        yield apply("a", "2")
        yield apply("b", "1")
        raise RuntimeError("the watch broke")

    out: list[str] = []

    async def consume() -> None:
        async for event in settled(own, WIDGET, failing()):
            out.append(seen(event))
            if isinstance(event, ObjectEvent) and event.obj["metadata"]["name"] == "b":
                hanging.answered.set()

    with pytest.raises(RuntimeError, match="the watch broke"):
        await consume()
    await write
    assert out == ["b@1", "a@2"]


async def test_a_consumer_that_stops_early_closes_the_source_and_gets_no_error() -> None:
    """The consumer stops while the reader is blocked on the full buffer, the source
    suspended at a yield: closing the stream closes the source (a watch's connection ends
    with it, not whenever the garbage collector gets to it) and raises nothing, though
    the reader it cancels ends cancelled."""
    own = OwnWrites([WIDGET])
    closed: list[bool] = []

    async def endless() -> AsyncIterator[WatchEvent]:
        try:
            version = 0
            while True:  # never awaits: the reader only ever waits on the full buffer
                version += 1
                yield apply("a", str(version))
        finally:
            closed.append(True)

    events = endless()
    stream = settled(own, WIDGET, events)
    assert isinstance(stream, AsyncGenerator)
    assert seen(await anext(stream)) == "a@1"
    assert not closed
    await stream.aclose()
    assert closed == [True]


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> Sources:
    """In-memory watches, and no end to the wait for a write's answer: waiting in the watch
    loop held every later event for up to `SETTLE_TIMEOUT`; made endless here, a test that
    needs another object's event to pass while one write hangs fails."""
    monkeypatch.setattr(_own_writes, "SETTLE_TIMEOUT", 3600.0)
    return Sources(False, monkeypatch)


async def test_a_controller_reconciles_others_while_one_objects_write_hangs(
    sources: Sources,
) -> None:
    hanging = HangingWrite()
    calls: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        calls.append(f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}")
        if calls == ["a@1"]:
            await hanging(WIDGETS, "a", widget("a", "2"))

    ctl = Controller(client(), WIDGET, reconcile, ignore_own_writes=True)
    feed = sources.feeds[WIDGET]
    async with running(ctl):
        feed.push(INIT, apply("a", "1", EventKind.INIT_APPLY), DONE)
        await until(hanging.writing.is_set, "a's reconcile writes a")
        feed.push(apply("a", "2"), apply("b", "1"))  # a's echo comes before the answer
        await until(lambda: "b@1" in calls, "b reconciled while a's write hangs")
        hanging.answered.set()
        await settle()  # an echo taken for someone's change would re-run a now, with a@2
        feed.push(apply("a", "3"))  # someone else's write
        await until(lambda: "a@3" in calls, "a's next change reconciled")
    assert calls == ["a@1", "b@1", "a@3"]  # the echo triggered nothing


async def test_a_hanging_write_of_a_child_holds_back_only_that_childs_events(
    sources: Sources,
) -> None:
    hanging = HangingWrite(201)  # a's reconcile creates its child
    calls: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        calls.append(obj["metadata"]["name"])
        if calls.count("a") == 1 and obj["metadata"]["name"] == "a":
            answer = {"metadata": {"uid": "uid-child-a", "resourceVersion": "2"}}
            await hanging(CONFIGMAPS, "child-a", answer)

    ctl = Controller(client(), WIDGET, reconcile, ignore_own_writes=True)
    ctl.owns(CHILD)
    feeds = sources.feeds
    async with running(ctl):
        feeds[CHILD].push(INIT, DONE)
        listed = (apply(n, "1", EventKind.INIT_APPLY) for n in "ab")
        feeds[WIDGET].push(INIT, *listed, DONE)
        await until(lambda: hanging.writing.is_set() and "b" in calls, "both reconciled")
        echo = child("child-a", "a")
        echo["metadata"].update(uid="uid-child-a", resourceVersion="2")
        feeds[CHILD].push(  # a's child's echo comes before the answer; then b's child
            ObjectEvent(EventKind.APPLY, echo),
            ObjectEvent(EventKind.APPLY, child("child-b", "b")),
        )
        await until(
            lambda: calls.count("b") == 2, "b re-triggered by its child while a's write hangs"
        )
        hanging.answered.set()
        await settle()
    assert calls.count("a") == 1, calls  # the echo of a's child did not re-trigger a


async def test_every_event_but_a_delete_tells_the_registry_the_latest_version() -> None:
    """The version a write of ours is made conditional on: the last one the watch showed;
    a delete shows no version to build on."""
    own = OwnWrites([WIDGET])
    events = [apply("a", "3"), apply("b", "5", EventKind.INIT_APPLY)]
    events.append(ObjectEvent(EventKind.DELETE, widget("c", "9")))
    out = [seen(e) async for e in settled(own, WIDGET, _iterate(events))]
    assert out == ["a@3", "b@5", "c@9"]
    assert own.started(WIDGETS, NS, "a") == "3"
    assert own.started(WIDGETS, NS, "b") == "5"
    assert own.started(WIDGETS, NS, "c") is None
    assert own.known == 2


class _Events:
    """An event source that is only an async iterator (no ``aclose``), as a user's own
    source may be."""

    def __init__(self, events: list[WatchEvent]) -> None:
        self._events = iter(events)

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> WatchEvent:
        try:
            return next(self._events)
        except StopIteration:
            raise StopAsyncIteration from None


def _iterate(events: list[WatchEvent]) -> AsyncIterator[WatchEvent]:
    return _Events(events)


async def test_a_source_without_aclose_is_read_to_its_end() -> None:
    own = OwnWrites([WIDGET])
    events = [INIT, apply("a", "1", EventKind.INIT_APPLY), DONE]
    assert [seen(e) async for e in settled(own, WIDGET, _iterate(events))] == [
        "init",
        "a@1",
        "init_done",
    ]
