"""``ignore_own_writes`` against a scripted API server: what the echo of a write of ours is,
and what it never is.

The server (`FakeServer`, in place of the HTTP layer) keeps one kind's objects as the real one
does for what matters here: a write that changes nothing is answered with the object as it
is, its version unchanged (whoever made that version); a write that changes the object
commits a new version, and the controller's in-memory watch hears of it; a write whose
``metadata.resourceVersion`` is not the object's is refused with 409 Conflict.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from fastctl import ObjectRef
from fastctl.errors import ApiError
from fastctl.kube import _http
from fastctl.kube._objects import patch
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ObjectEvent, ObjectKind, WatchEvent
from fastctl.kube._writes import observed_write
from fastctl.runtime._filters import EventFilter
from fastctl.runtime._own_writes import NOTE_TTL, OwnWrites
from fastctl.runtime._settled_events import settled
from fastctl.runtime.controller import Controller

from .test_controller_relist import (
    CHILD,
    DONE,
    INIT,
    NS,
    WIDGET,
    Feed,
    Sources,
    client,
    running,
    until,
)

WIDGETS = ResolvedResource("example.com", "v1", "Widget", "widgets", True)


def _merged(target: Any, patch: Any) -> Any:
    """RFC 7386: `patch` merged into `target`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


def _without_version(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._data = orjson.dumps(body)

    async def read(self) -> bytes:
        return self._data

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class FakeServer:
    """Widgets in namespace `NS`, patched by JSON merge patches (``status`` or the object)."""

    def __init__(self, feed: Feed, monkeypatch: pytest.MonkeyPatch) -> None:
        self.feed = feed
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.before_next_write: Callable[[], object] | None = None
        """Runs when the next write arrives, before it is applied: another writer's change
        committed just before ours."""
        self.writes: list[str] = []  # "200", "201", "409" per write, in order
        monkeypatch.setattr(_http, "request", self.request)

    def commit(self, obj: dict[str, Any], kind: ObjectKind = EventKind.APPLY) -> dict[str, Any]:
        """Store `obj` at a new version; the watch delivers it."""
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = obj
        self.feed.push(ObjectEvent(kind, copy.deepcopy(obj)))
        return obj

    def create(
        self, name: str, kind: ObjectKind = EventKind.APPLY, **fields: Any
    ) -> dict[str, Any]:
        meta = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, **fields}
        return self.commit(widget, kind)

    def change(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Someone else's write of `name`."""
        return self.commit(_merged(self.objects[name], body))

    async def request(self, client: Any, method: str, path: str, **kw: Any) -> _Response:
        assert method == "PATCH", (method, path)
        hook, self.before_next_write = self.before_next_write, None
        if hook is not None:
            hook()
        name = path.split("/widgets/")[1].split("/")[0]
        body = orjson.loads(kw["body"])
        current = self.objects[name]
        condition = (body.get("metadata") or {}).pop("resourceVersion", None)
        if condition is not None and condition != current["metadata"]["resourceVersion"]:
            self.writes.append("409")
            status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "modified"}
            return _Response(409, status)
        if body.get("metadata") == {}:
            del body["metadata"]
        changed = _merged(current, body)
        self.writes.append("200")
        if _without_version(changed) == _without_version(current):
            return _Response(200, current)  # nothing to change: the object as it is
        return _Response(200, self.commit(changed))


async def _answer(status: int, obj: dict[str, Any]) -> tuple[int, Any]:
    return status, obj


def n_of(obj: dict[str, Any]) -> int:
    return int(obj["spec"]["n"])


async def test_a_no_op_write_after_another_writers_change_leaves_that_change_to_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reconcile writes the status it computed, already there: the server answers with
    the object as it is, at the version of another writer's change made just before. That
    version is not ours, and its event must trigger a reconcile."""
    sources = Sources(False, monkeypatch)
    feed = sources.feeds[WIDGET]
    server = FakeServer(feed, monkeypatch)
    seen: list[int] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(n_of(obj))
        if n_of(obj) < 3:
            n = n_of(obj) + 1
            server.before_next_write = lambda: server.change("a", {"spec": {"n": n}})
        await patch(
            client(), WIDGETS, "a", {"status": {"ready": True}}, namespace=NS, subresource="status"
        )

    ctl = Controller(client(), WIDGET, reconcile, ignore_own_writes=True)
    feed.push(INIT)
    server.create("a", EventKind.INIT_APPLY, spec={"n": 0}, status={"ready": True})
    feed.push(DONE)
    async with running(ctl):
        await until(lambda: seen[-1:] == [3], "every change of the other writer reconciled")
    assert seen == [0, 1, 2, 3]
    # Each write carried the version the watch had delivered, refused: the other writer's
    # change came first; sent again as written, it changed nothing. The last one is alone.
    assert server.writes == ["409", "200"] * 3 + ["200"]


async def test_the_echo_of_a_change_of_ours_triggers_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status the reconcile computes is not there yet: the write, conditional on the
    version the watch delivered, changes the object, and its echo is held back. A change of
    `b` afterwards is reconciled: by then the echo has been through the filter."""
    sources = Sources(False, monkeypatch)
    feed = sources.feeds[WIDGET]
    server = FakeServer(feed, monkeypatch)
    seen: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        seen.append(f"{name}{n_of(obj)}")
        if not obj.get("status"):
            ready = {"status": {"ready": True}}
            await patch(client(), WIDGETS, name, ready, namespace=NS, subresource="status")

    ctl = Controller(client(), WIDGET, reconcile, ignore_own_writes=True)
    feed.push(INIT)
    server.create("a", EventKind.INIT_APPLY, spec={"n": 0})
    feed.push(DONE)
    async with running(ctl):
        await until(lambda: server.writes == ["200"], "a's status written")
        server.create("b", spec={"n": 0}, status={"ready": True})
        await until(lambda: "b0" in seen, "b reconciled")
        run = ctl._run
        assert run is not None
        assert run.own_writes is not None
        assert len(run.own_writes) == 0  # the echo came, and used the note up
    assert seen == ["a0", "b0"]


async def test_a_precondition_of_the_callers_own_is_kept_and_its_conflict_is_the_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = Sources(False, monkeypatch)
    server = FakeServer(sources.feeds[WIDGET], monkeypatch)
    server.create("a", spec={"n": 0})
    errors: list[int] = []

    async def reconcile(obj: Any, ctx: Any) -> None:
        stale = {"metadata": {"resourceVersion": "1"}, "spec": {"n": 1}}
        try:
            await patch(client(), WIDGETS, "a", stale, namespace=NS)
        except ApiError as exc:
            errors.append(exc.status)

    own = OwnWrites([WIDGET])
    own.saw(WIDGET, server.objects["a"])
    await own.observing(reconcile)(None, None)  # type: ignore[misc]
    assert errors == [409]
    assert server.writes == ["409"]  # not sent again: the condition was the caller's
    assert len(own) == 0


def cm(namespace: str, name: str, version: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    return {"metadata": {**meta, "resourceVersion": version}}


CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)


def namespace_of(event: WatchEvent) -> str:
    assert isinstance(event, ObjectEvent)
    return str(event.obj["metadata"]["namespace"])


async def test_a_write_in_one_namespace_holds_nothing_of_the_same_name_in_another() -> None:
    """Keys carry the namespace: while a write of ``ns-a/x`` is in flight its events wait,
    ``ns-b/x``'s pass; and a write of ``ns-b/x`` is not made conditional on the version of
    ``ns-a/x``."""
    own = OwnWrites([CHILD])
    own.saw(CHILD, cm("ns-a", "x", "7"))
    assert own.started(CONFIGMAPS, "ns-b", "x") is None  # nothing known of ns-b/x
    own.finished(CONFIGMAPS, "ns-b", "x", None, made=False, based_on=None)
    assert own.started(CONFIGMAPS, "ns-a", "x") == "7"  # in flight until `finished`
    assert own.in_flight(CHILD, cm("ns-a", "x", "8"))
    assert not own.in_flight(CHILD, cm("ns-b", "x", "8"))

    queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
    for namespace in ("ns-a", "ns-b"):
        queue.put_nowait(ObjectEvent(EventKind.APPLY, cm(namespace, "x", "8")))

    async def events() -> AsyncIterator[WatchEvent]:
        while (event := await queue.get()) is not None:
            yield event

    stream = settled(own, CHILD, events())
    # ns-a/x's event waits for the answer; ns-b/x's does not
    assert namespace_of(await anext(stream)) == "ns-b"
    own.finished(CONFIGMAPS, "ns-a", "x", cm("ns-a", "x", "8"), made=True, based_on="7")
    assert namespace_of(await anext(stream)) == "ns-a"
    queue.put_nowait(None)
    assert [e async for e in stream] == []


async def test_an_unproven_answer_claims_nothing_even_for_an_object_no_watch_has_shown() -> None:
    """Another writer has just created ``x``; before the watch delivers it, a write of ours
    to ``x`` changes nothing and is answered with ``x`` as that writer made it (HTTP 200,
    no precondition: nothing was known to condition it on). That answer proves nothing,
    and ``x``'s first event passes."""
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    theirs = cm("ns", "x", "5")

    async def reconcile(obj: Any, ctx: Any) -> None:
        with observed_write(CONFIGMAPS, "ns", "x", conditional=True) as write:
            await write.send(lambda version: _answer(200, theirs))

    await own.observing(reconcile)(None, None)  # type: ignore[misc]
    assert len(own) == 0
    assert f.admits(ObjectEvent(EventKind.APPLY, theirs))


async def test_an_echo_after_versions_the_watch_skipped_passes() -> None:
    """A write of ours proven applied to version 4: its echo is held back only when the
    event before it in the watch is version 4. After a relist that skipped 4 (the filter
    last saw 3), the echo passes: it carries the change 3 -> 4 that no event showed."""
    own = OwnWrites([CHILD])
    f = EventFilter(None, controller="c", kind="ConfigMap", own_writes=own)
    assert f.admits(ObjectEvent(EventKind.APPLY, cm("ns", "x", "3")))
    own.saw(CHILD, cm("ns", "x", "4"))  # delivered to the watch, not yet to the filter

    async def reconcile(obj: Any, ctx: Any) -> None:
        async def send(version: str | None) -> tuple[int, Any]:
            assert version == "4"
            return 200, cm("ns", "x", "5")

        with observed_write(CONFIGMAPS, "ns", "x", conditional=True) as write:
            await write.send(send)

    await own.observing(reconcile)(None, None)  # type: ignore[misc]
    assert len(own) == 1
    relisted: list[WatchEvent] = [INIT, ObjectEvent(EventKind.INIT_APPLY, cm("ns", "x", "5")), DONE]
    assert [f.admits(event) for event in relisted] == [True, True, True]
    assert f.take_listed() == {ObjectRef("x", "ns")}
    assert len(own) == 0  # the note is used up


async def test_notes_of_objects_no_watch_delivers_are_forgotten_after_a_while() -> None:
    """A note waits for its echo at most `NOTE_TTL`: creates of objects outside every
    watch's scope (another namespace) leave no note behind for the life of the process,
    and their answers add nothing to the versions kept per watched object."""
    now = [0.0]
    own = OwnWrites([CHILD], clock=lambda: now[0])

    async def create(namespace: str, name: str) -> None:
        async def send(version: str | None) -> tuple[int, Any]:
            return 201, cm(namespace, name, "1")

        with observed_write(CONFIGMAPS, namespace, name, conditional=True) as write:
            await write.send(send)

    async def reconcile(names: list[tuple[str, str]], ctx: Any) -> None:
        for namespace, name in names:
            await create(namespace, name)

    run: Any = own.observing(reconcile)
    await run([("elsewhere", f"c{i}") for i in range(1000)], None)
    assert len(own) == 1000  # each waits for an echo that will not come
    assert own.known == 0
    now[0] = NOTE_TTL - 1
    await run([("ns", "x")], None)
    assert len(own) == 1001  # not yet
    now[0] = NOTE_TTL
    await run([("ns", "y")], None)
    assert len(own) == 2  # the thousand are gone; the two recent ones wait on
