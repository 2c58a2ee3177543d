"""The watch path's shortcuts: `ObjectEvent._of_item` (an event filled without the frozen
guard), the watcher's fast path for a plain watch event, and `Store.apply`'s for an
``APPLY``. Each must give what the general path gives."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl._core import Item
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._store import Store
from fastctl.kube._watcher import (
    Backoff,
    EventKind,
    MetadataOnlyUnsupported,
    ObjectEvent,
    WatchConfig,
    _Watcher,
)
from fastctl.kube._wire import decode_watch_line
from fastctl.types import ObjectRef

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
SECRET = ResolvedResource("", "v1", "Secret", "secrets", True)


def make(config: WatchConfig | None = None, resource: ResolvedResource = CM) -> _Watcher:
    w = _Watcher(
        ApiClient.__new__(ApiClient),  # never used: no request is made
        resource,
        "ns",
        config or WatchConfig(strip_managed_fields=True),
        Backoff(),
        None,
    )
    w.state.listed("10")  # past the list: watch events
    return w


def cm(name: str, rv: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": rv}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def decoded(etype: str, obj: dict[str, Any]) -> Item:
    line = orjson.dumps({"type": etype, "object": obj})
    kind, item = decode_watch_line(line, strip_managed_fields=True)
    assert kind == etype
    assert isinstance(item, Item)
    return item


def test_of_item_makes_a_frozen_object_event() -> None:
    item = decoded("MODIFIED", cm("a", "11"))
    event = ObjectEvent._of_item(EventKind.APPLY, item)
    assert type(event) is ObjectEvent
    assert event.kind is EventKind.APPLY
    assert event._decoded is item
    assert event.obj == cm("a", "11")
    assert event == ObjectEvent(EventKind.APPLY, cm("a", "11"))
    assert event._ref() == ObjectRef("a", "ns")
    with pytest.raises(FrozenInstanceError):
        event.kind = EventKind.DELETE
    with pytest.raises(FrozenInstanceError):
        event._obj = {}
    match event:
        case ObjectEvent(EventKind.APPLY, {"metadata": {"name": name}}):
            assert name == "a"
        case _:  # pragma: no cover - the match above must hold
            pytest.fail("an event from _of_item does not match as an ObjectEvent")


@pytest.mark.parametrize("etype", ["ADDED", "MODIFIED"])
def test_a_plain_watch_event_is_the_frame_as_decoded(etype: str) -> None:
    w = make()
    item = decoded(etype, cm("a", "11"))
    event = w._event(etype, item)
    assert isinstance(event, ObjectEvent)
    assert type(event) is ObjectEvent
    assert event.kind is EventKind.APPLY
    assert event._decoded is item  # not parsed, not decoded again
    assert event._obj is None
    assert w.state.rv == "11"
    # the same frame given as a parsed object takes the general path: the same event
    assert make()._event(etype, cm("a", "11")) == event


def test_a_frame_without_a_version_keeps_the_position() -> None:
    w = make()
    obj = cm("a", "")
    del obj["metadata"]["resourceVersion"]
    event = w._event("MODIFIED", decoded("MODIFIED", obj))
    assert event is not None
    assert event.kind is EventKind.APPLY
    assert w.state.rv == "10"


def test_a_streaming_list_frame_is_not_a_watch_event() -> None:
    w = make()
    w.state.gone()  # a list comes first: ADDED frames are the list's
    event = w._event("ADDED", decoded("ADDED", cm("a", "11")))
    assert event is not None
    assert event.kind is EventKind.INIT_APPLY
    assert w.state.rv is None


def test_a_transform_still_applies() -> None:
    def no_data(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k != "data"}

    w = make(WatchConfig(strip_managed_fields=True, transform=no_data))
    event = w._event("MODIFIED", decoded("MODIFIED", cm("a", "11")))
    assert isinstance(event, ObjectEvent)
    assert "data" not in event.obj
    assert b'"data"' not in event._decoded.json  # type: ignore[union-attr]


def test_secrets_are_still_remembered() -> None:
    w = make(resource=SECRET)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "11"},
        "data": {"password": "aHVudGVyMg=="},
    }
    event = w._event("MODIFIED", decoded("MODIFIED", secret))
    assert isinstance(event, ObjectEvent)
    assert event._obj is not None  # parsed, so its values were remembered


def test_metadata_only_still_checks_what_came() -> None:
    w = make(WatchConfig(strip_managed_fields=True, metadata_only=True))
    with pytest.raises(MetadataOnlyUnsupported):
        w._event("MODIFIED", decoded("MODIFIED", cm("a", "11")))


def test_a_shard_filter_still_applies() -> None:
    w = make()
    w.state.filtering = True
    w.shard_filter = lambda obj: obj["metadata"]["name"] != "other"
    assert w._event("MODIFIED", decoded("MODIFIED", cm("other", "11"))) is None
    assert w.state.rv == "11"
    kept = w._event("MODIFIED", decoded("MODIFIED", cm("a", "12")))
    assert kept is not None
    assert kept.kind is EventKind.APPLY


def test_store_apply_of_decoded_events_keeps_the_label_index() -> None:
    store = Store()
    store.apply(ObjectEvent._of_item(EventKind.APPLY, decoded("ADDED", cm("a", "1", app="x"))))
    assert [o["metadata"]["name"] for o in store.with_label("app", "x")] == ["a"]
    store.apply(ObjectEvent._of_item(EventKind.APPLY, decoded("MODIFIED", cm("a", "2", app="y"))))
    assert store.with_label("app", "x") == []
    assert [o["metadata"]["name"] for o in store.with_label("app", "y")] == ["a"]
    assert store[ObjectRef("a", "ns")]["metadata"]["resourceVersion"] == "2"


def test_trusted_refs_are_object_refs() -> None:
    ref = ObjectRef._trusted("a", "ns")
    assert type(ref) is ObjectRef
    assert ref == ObjectRef("a", "ns")
    assert hash(ref) == hash(ObjectRef("a", "ns"))
    assert ref.key == "ns/a"
    assert repr(ref) == "ObjectRef(name='a', namespace='ns')"
    with pytest.raises(FrozenInstanceError):
        ref.name = "b"  # type: ignore[misc]
    assert type(ObjectRef._from_trusted_key("a")) is ObjectRef
    assert ObjectRef._from_trusted_key("ns/a") == ref
    assert type(ObjectRef.from_object(cm("a", "1"))) is ObjectRef


def test_trusted_refs_of_a_subclass() -> None:
    class Named(ObjectRef):
        __slots__ = ("extra",)

    ref = Named._trusted("a", None)
    assert type(ref) is Named
    assert ref.name == "a"
    assert ref.namespace is None
