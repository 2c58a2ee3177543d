"""Cached children without a server: the mapper's memory and reverse index, the cache's
owner index, and the metadata-only watch's requests and checks (docs/authoring.md,
"Cached children")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fastctl.kube._resource import Resource
from fastctl.kube._watcher import (
    METADATA_LIST_ACCEPT,
    METADATA_WATCH_ACCEPT,
    PROTOBUF_WATCH_ACCEPT,
    EventKind,
    ListFrame,
    MetadataOnlyUnsupported,
    ObjectEvent,
    WatchEvent,
)
from fastctl.runtime._children import RelatedCache
from fastctl.runtime._triggers import RelatedTriggers
from fastctl.runtime.controller import Controller
from fastctl.testing import VirtualTimeLoop
from fastctl.types import ObjectRef

from .test_controller_relist import client
from .test_watcher_fallbacks import (
    Query,
    Response,
    Server,
    end_of_initial_events,
    frame,
    run,
    stream,
)

CM = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
INIT = ListFrame(EventKind.INIT)
DONE = ListFrame(EventKind.INIT_DONE)


def ref(name: str) -> ObjectRef:
    return ObjectRef(name, "ns")


def pointer(name: str, *targets: str) -> dict[str, Any]:
    """A related object whose annotation names the primary objects it points at."""
    return {"metadata": {"name": name, "namespace": "ns", "annotations": {"to": ",".join(targets)}}}


def mapper(obj: dict[str, Any]) -> list[ObjectRef]:
    names = obj["metadata"]["annotations"]["to"]
    return [ref(n) for n in names.split(",") if n]


def names(triggers: list[Any]) -> list[str]:
    return sorted(t.ref.name for t in triggers)


def test_a_removed_reference_triggers_its_old_target_and_a_delete_the_last_ones() -> None:
    related = RelatedTriggers(mapper, "watched", controller="c", kind="K", index=True)
    assert names(related.on_event(ObjectEvent(EventKind.APPLY, pointer("p", "a", "b")))) == [
        "a",
        "b",
    ]
    # b is dropped, c added: b must hear of it (it no longer has p pointing at it)
    assert names(related.on_event(ObjectEvent(EventKind.APPLY, pointer("p", "a", "c")))) == [
        "a",
        "b",
        "c",
    ]
    assert related.sources_of(ref("b")) == ()
    assert related.sources_of(ref("c")) == (ref("p"),)
    # every reference removed: the old targets are triggered, and nothing is remembered
    assert names(related.on_event(ObjectEvent(EventKind.APPLY, pointer("p")))) == ["a", "c"]
    assert len(related) == 0
    assert related.sources_of(ref("a")) == ()
    related.on_event(ObjectEvent(EventKind.APPLY, pointer("p", "d")))
    # deleted in a state that names nothing: the last targets are triggered, state dropped
    assert names(related.on_event(ObjectEvent(EventKind.DELETE, pointer("p")))) == ["d"]
    assert len(related) == 0
    assert related.sources_of(ref("d")) == ()


def test_the_reverse_index_follows_a_relist() -> None:
    related = RelatedTriggers(mapper, "watched", controller="c", kind="K", index=True)
    first: tuple[WatchEvent, ...] = (
        INIT,
        ObjectEvent(EventKind.INIT_APPLY, pointer("p", "a")),
        DONE,
    )
    for event in first:
        related.on_event(event)
    assert related.sources_of(ref("a")) == (ref("p"),)
    # relisted: p now points at b, q at a
    listing = [pointer("p", "b"), pointer("q", "a")]
    relist: tuple[WatchEvent, ...] = (
        INIT,
        *(ObjectEvent(EventKind.INIT_APPLY, o) for o in listing),
        DONE,
    )
    for event in relist:
        related.on_event(event)
    assert related.sources_of(ref("a")) == (ref("q"),)
    assert related.sources_of(ref("b")) == (ref("p"),)


def test_no_reverse_index_unless_asked() -> None:
    related = RelatedTriggers(mapper, "watched", controller="c", kind="K")
    with pytest.raises(RuntimeError, match="index=False") as no_index:
        related.sources_of(ref("a"))
    assert str(no_index.value) == "RelatedTriggers keeps no reverse index (index=False)"


def child(name: str, owner_uid: str | None, *, controller: bool = True) -> dict[str, Any]:
    owners = [{"uid": owner_uid, "controller": controller}] if owner_uid else []
    return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": owners}}


def test_the_cache_finds_children_by_controller_owner_and_forgets_deleted_ones() -> None:
    cache = RelatedCache(CM)
    store = cache.store
    for event in (
        INIT,
        ObjectEvent(EventKind.INIT_APPLY, child("a1", "uid-a")),
        ObjectEvent(EventKind.INIT_APPLY, child("a2", "uid-a")),
        ObjectEvent(EventKind.INIT_APPLY, child("b1", "uid-b")),
        ObjectEvent(EventKind.INIT_APPLY, child("loose", "uid-a", controller=False)),
        DONE,
    ):
        store.apply(event)
    owner = {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"}}
    assert sorted(o["metadata"]["name"] for o in cache.owned_by(owner)) == ["a1", "a2"]
    store.apply(ObjectEvent(EventKind.DELETE, child("a1", "uid-a")))
    assert [o["metadata"]["name"] for o in cache.owned_by("uid-a")] == ["a2"]
    # adopted by b: gone from a's children, found under b's
    store.apply(ObjectEvent(EventKind.APPLY, child("a2", "uid-b")))
    assert cache.owned_by("uid-a") == []
    assert sorted(o["metadata"]["name"] for o in cache.owned_by("uid-b")) == ["a2", "b1"]
    got = cache.get("b1", "ns")
    assert got == store[ref("b1")]
    assert got is not store[ref("b1")]  # a copy, free to change
    assert cache.get("missing", "ns") is None


def test_owned_by_needs_an_owner_with_a_uid() -> None:
    cache = RelatedCache(CM)
    with pytest.raises(ValueError, match=r"dict has no metadata\.uid") as no_uid:
        cache.owned_by({"metadata": {"name": "a"}})
    assert str(no_uid.value) == (
        "owned_by: dict has no metadata.uid (pass an object read from the API server, or its UID)"
    )
    with pytest.raises(ValueError, match="UID is empty") as empty:
        cache.owned_by("")
    assert str(empty.value) == "owned_by: the owner UID is empty"


class _Model:
    """An object with attributes, as a `CustomResource` instance is."""

    def __init__(self, uid: str | None) -> None:
        self.metadata = type("Meta", (), {"uid": uid})()


def test_owned_by_takes_a_models_uid() -> None:
    cache = RelatedCache(CM)
    for event in (INIT, ObjectEvent(EventKind.INIT_APPLY, child("c", "uid-m")), DONE):
        cache.store.apply(event)
    assert [o["metadata"]["name"] for o in cache.owned_by(_Model("uid-m"))] == ["c"]
    with pytest.raises(ValueError, match=r"_Model has no metadata\.uid"):
        cache.owned_by(_Model(None))


def test_owned_by_refuses_an_owner_without_a_string_uid() -> None:
    """With a clear ValueError, whatever is missing: the metadata, its uid attribute, or
    a uid that is empty or not a string."""
    cache = RelatedCache(CM)
    no_uid_attribute = type("Owner", (), {"metadata": object()})()
    for owner in (object(), no_uid_attribute, {"metadata": {"uid": ""}}, {"metadata": {"uid": 7}}):
        with pytest.raises(ValueError, match=r"has no metadata\.uid"):
            cache.owned_by(owner)


def test_the_cache_says_when_it_is_ready_how_big_it_is_and_what_it_holds() -> None:
    cache = RelatedCache(CM)
    assert not cache.metadata_only  # whole objects unless asked for
    assert not cache.is_ready
    assert len(cache) == 0
    for event in (INIT, ObjectEvent(EventKind.INIT_APPLY, child("a", "uid-x")), DONE):
        cache.store.apply(event)
    assert cache.is_ready
    assert len(cache) == 1
    assert repr(cache) == f"<RelatedCache {CM}: 1 objects>"


def test_mapped_to_reads_the_mapper_memory_and_the_store() -> None:
    cache = RelatedCache(CM)
    related = RelatedTriggers(mapper, "watched", controller="c", kind="K", index=True)
    with pytest.raises(RuntimeError, match="not running") as not_running:
        cache.mapped_to(ref("a"))
    assert str(not_running.value) == f"the cache of {CM} is not running yet"
    cache._bind(related)
    obj = pointer("p", "a")
    for event in (INIT, ObjectEvent(EventKind.INIT_APPLY, obj), DONE):
        cache.store.apply(event)
        related.on_event(event)
    assert cache.mapped_to({"metadata": {"name": "a", "namespace": "ns"}}) == [obj]
    assert cache.mapped_to(ref("b")) == []


def test_mapped_to_may_answer_from_events_the_triggers_have_not_reached() -> None:
    """docs/authoring.md, "Cached children": with ``ignore_own_writes`` the cache is fed as
    events arrive and the triggers after the settling stage, which reads up to 64 events
    ahead and holds one more while it waits to hand it over. `mapped_to` takes *which*
    objects map to a target from the triggers' memory and *their state* from the cache:
    an object moved away shows under its old target in its new state, one that now maps
    to the target is missing, and each difference is an event on its way that triggers
    the target when it arrives. The pipeline is the controller's (`_watch_related`)."""
    from collections.abc import AsyncIterator

    from fastctl.kube._store import reflector
    from fastctl.runtime._own_writes import OwnWrites
    from fastctl.runtime._settled_events import settled
    from fastctl.testing import run_virtual

    async def main(loop: VirtualTimeLoop) -> None:
        cache = RelatedCache(CM)
        related = RelatedTriggers(mapper, "watched", controller="c", kind="K", index=True)
        cache._bind(related)
        arrived: list[WatchEvent] = []
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

        async def watch() -> AsyncIterator[WatchEvent]:
            while True:
                event = await queue.get()
                arrived.append(event)
                yield event

        stream = settled(OwnWrites([CM]), CM, reflector(cache.store, watch()))

        async def through(count: int) -> list[str]:
            """`count` events through the triggers; the targets they triggered."""
            triggered: list[str] = []
            for _ in range(count):
                triggered += names(related.on_event(await anext(stream)))
            await asyncio.sleep(1)  # virtual: everything else runs until it waits
            return triggered

        queue.put_nowait(INIT)
        queue.put_nowait(ObjectEvent(EventKind.INIT_APPLY, pointer("x", "w1")))
        queue.put_nowait(DONE)
        assert await through(3) == ["w1"]
        assert cache.mapped_to(ref("w1")) == [pointer("x", "w1")]
        queue.put_nowait(ObjectEvent(EventKind.APPLY, pointer("x", "w2")))  # moved to w2
        queue.put_nowait(ObjectEvent(EventKind.APPLY, pointer("y", "w1")))  # new, to w1
        for i in range(200):
            queue.put_nowait(ObjectEvent(EventKind.APPLY, pointer(f"f{i}")))
        await asyncio.sleep(1)
        assert len(arrived) == 3 + 64 + 1, "the cache runs 65 events ahead, no more"
        assert len(cache.store) == 2 + 63
        # x in its new state under its old target; y, which maps to w1, not yet.
        assert cache.mapped_to(ref("w1")) == [pointer("x", "w2")]
        assert cache.mapped_to(ref("w2")) == []
        # The events on their way trigger both of x's targets, then y's.
        assert await through(2) == ["w1", "w2", "w1"]
        assert cache.mapped_to(ref("w1")) == [pointer("y", "w1")]
        assert cache.mapped_to(ref("w2")) == [pointer("x", "w2")]
        assert len(arrived) == 3 + 2 + 64 + 1  # one taken, one more read ahead
        await stream.aclose()  # type: ignore[attr-defined]

    run_virtual(_with_the_loop(main))


def test_the_builder_refuses_what_it_cannot_do() -> None:
    ctl = Controller(client(), WIDGET, lambda obj, ctx: None)
    ctl.owns(CM, cache=True, metadata_only=True)
    assert ctl.cache(CM).metadata_only
    with pytest.raises(ValueError, match="already watched with metadata_only=True"):
        ctl.watches(CM, mapper, metadata_only=False)
    with pytest.raises(ValueError, match="already cached"):
        ctl.watches(CM, mapper, cache=True, metadata_only=True)
    with pytest.raises(ValueError, match="primary resource"):
        ctl.watches(WIDGET, mapper, metadata_only=True)
    with pytest.raises(KeyError, match="does not cache Secret"):
        ctl.cache(Resource("v1", "Secret"))
    assert ctl.spec.watch_config_for(CM).metadata_only
    assert not ctl.spec.watch_config_for(WIDGET).metadata_only


# -- the metadata-only watcher, against a scripted server ----------------------------------


def meta_obj(name: str, rv: int) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
    }


class AcceptServer(Server):
    """Records the Accept header of every request beside its query."""

    def __init__(self, script: Any) -> None:
        super().__init__(script)
        self.accepts: list[str | None] = []

    async def request(self, client: Any, method: str, path: str, **kw: Any) -> Response:
        self.accepts.append(kw.get("accept"))
        return await super().request(client, method, path, **kw)


def test_a_metadata_only_watch_asks_for_partial_objects_and_restores_the_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def script(q: Query) -> Response | None:
        if q.get("sendInitialEvents"):
            return Response(400, {"kind": "Status", "code": 400, "message": "no"})
        if "limit" in q:
            body = {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "items": [meta_obj("a", 5)],
                "metadata": {"resourceVersion": "5"},
            }
            return Response(200, body)
        if q.get("watch") and len(server.requests) < 4:
            return stream(frame("MODIFIED", meta_obj("a", 6)), end_of_initial_events(6))
        return None

    server = AcceptServer(script)
    events = run(server, monkeypatch, metadata_only=True)
    assert server.accepts[1] == METADATA_LIST_ACCEPT  # the paginated list
    assert server.accepts[2] == METADATA_WATCH_ACCEPT  # the watch
    assert server.accepts[0] == METADATA_WATCH_ACCEPT  # the streaming list is a watch
    objs = [e.obj for e in events if isinstance(e, ObjectEvent)]
    assert [(o["apiVersion"], o["kind"]) for o in objs] == [("v1", "ConfigMap")] * 2
    kinds = [e.kind for e in events if isinstance(e, ObjectEvent)]
    assert kinds == [EventKind.INIT_APPLY, EventKind.APPLY]


def test_full_objects_where_metadata_was_asked_for_are_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def script(q: Query) -> Response | None:
        full = {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "a", "namespace": "ns"},
        }
        return stream(frame("ADDED", full))

    with pytest.raises(
        MetadataOnlyUnsupported, match=r"configmaps\.v1 as metadata only.*'ConfigMap'"
    ):
        run(AcceptServer(script), monkeypatch, metadata_only=True)


def test_a_list_of_full_objects_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def script(q: Query) -> Response | None:
        return Response(
            200, {"kind": "ConfigMapList", "items": [], "metadata": {"resourceVersion": "1"}}
        )

    with pytest.raises(MetadataOnlyUnsupported, match="'ConfigMapList' list"):
        run(AcceptServer(script), monkeypatch, metadata_only=True, streaming_list=False)


def test_a_406_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def script(q: Query) -> Response | None:
        return Response(406, {"kind": "Status", "code": 406, "message": "only application/json"})

    with pytest.raises(MetadataOnlyUnsupported, match="406 Not Acceptable: only application/json"):
        run(AcceptServer(script), monkeypatch, metadata_only=True, streaming_list=False)


def test_a_full_watch_sends_no_metadata_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ConfigMap watch asks for protobuf (JSON if refused), and with `protobuf=False`
    for the default JSON; never for metadata."""
    server = AcceptServer(lambda q: None)
    run(server, monkeypatch)
    assert server.accepts == [PROTOBUF_WATCH_ACCEPT]
    as_json = AcceptServer(lambda q: None)
    run(as_json, monkeypatch, protobuf=False)
    assert as_json.accepts == [None]


async def test_a_shared_watch_fills_the_cache_and_keeps_metadata_only_watches_apart() -> None:
    from fastctl.runtime._shared_watch import SharedWatch
    from fastctl.runtime.controller._environment import Environment

    async def nothing() -> Any:
        yield ListFrame(EventKind.INIT)

    ctl = Controller(client(), WIDGET, lambda obj, ctx: None)
    ctl.owns(CM, cache=True)
    shared = SharedWatch("cm", nothing)
    env = Environment(ctl.client, sources={0: shared.subscribe()})
    run = ctl.stream(environment=env)
    ctl.shutdown()  # stopped before it starts: it only takes its environment's stores
    assert [r async for r in run] == []
    assert ctl.cache(CM).store is shared.store
    other = Controller(client(), WIDGET, lambda obj, ctx: None).owns(CM, metadata_only=True)
    # the Manager shares a watch only between equal watch configs
    assert other.spec.watch_config_for(CM) != ctl.spec.watch_config_for(CM)


async def _with_the_loop(main: Callable[[VirtualTimeLoop], Awaitable[None]]) -> None:
    """Run `main` with the virtual loop it runs on."""
    await main(VirtualTimeLoop.current())
