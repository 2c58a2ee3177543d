"""The compact Store: each object kept as its JSON bytes in the extension, parsed anew on
every read. Readers own what they get (mutating it leaves the cache as it was), and the
indexes (controller owner, labels) and relist swaps agree with a plain dict model under
any sequence of events (Hypothesis)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fastctl._core import CompactMap
from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.kube._wire import decode_watch_line
from fastctl.types import ObjectRef

from .test_store import DONE, INIT, cm, feed, listed

REF = ObjectRef("a", "default")


def _mutate(obj: dict[str, Any]) -> None:
    obj["status"] = {"ready": True}
    obj["metadata"]["labels"]["app"] = "changed"
    obj["metadata"]["ownerReferences"].clear()


def test_what_a_reader_changes_is_its_own() -> None:
    """Every read path returns a new object: a reconcile that sets ``status`` or changes
    the labels of what it read does not change the cache, its indexes or the next read."""
    store = Store()
    original = cm("a", labels={"app": "x"}, owner="u1")
    feed(store, listed(copy.deepcopy(original)))
    reads = [
        store[REF],
        store.get(REF, {}),
        *store.list(),
        *store.list("default"),
        *store.owned_by("u1"),
        *store.with_label("app", "x"),
        *store.values(),
    ]
    for obj in reads:
        _mutate(obj)
    assert store[REF] == original
    assert [o["metadata"]["name"] for o in store.with_label("app", "x")] == ["a"]
    assert store.with_label("app", "changed") == []
    assert [o["metadata"]["name"] for o in store.owned_by("u1")] == ["a"]
    assert store[REF] is not store[REF]


def test_an_event_object_changed_after_it_was_applied_leaves_the_cache() -> None:
    """The store keeps the event's object as bytes: a consumer that changes the event's
    object afterwards (or the dict a test built) changes nothing cached."""
    store = Store()
    obj = cm("a", labels={"app": "x"}, owner="u1")
    event = ObjectEvent(EventKind.APPLY, obj)
    store.apply(event)
    _mutate(event.obj)
    assert store[REF]["metadata"]["labels"] == {"app": "x"}
    assert "status" not in store[REF]


def test_a_relist_keeps_the_held_bytes_of_an_unchanged_object() -> None:
    """A relist holds only the changed objects twice: an object listed again at the same
    uid and resourceVersion is buffered as the bytes already held."""
    store = Store()
    recreated = cm("new", rv="5")
    recreated["metadata"]["uid"] = "old-uid"
    feed(store, listed(cm("same", rv="5"), cm("changed", rv="5"), recreated))
    again = cm("new", rv="5")
    again["metadata"]["uid"] = "new-uid"
    store.apply(INIT)
    for obj in (cm("same", rv="5"), cm("changed", rv="6"), again):
        store.apply(ObjectEvent(EventKind.INIT_APPLY, obj))
    buffer = store._buffers[None]
    held = store._map
    assert buffer.holds_same(held, "same", "default")
    assert not buffer.holds_same(held, "changed", "default")
    assert not buffer.holds_same(held, "new", "default")
    store.apply(DONE)
    assert store[ObjectRef("changed", "default")]["metadata"]["resourceVersion"] == "6"
    assert store[ObjectRef("new", "default")]["metadata"]["uid"] == "new-uid"


def test_frames_go_in_without_being_parsed_and_come_out_whole() -> None:
    """An event the watcher made from a frame is stored from its decoded bytes (the dict
    is never built: `_obj` stays empty), without managedFields when stripped."""
    obj = cm("a", labels={"app": "x"}, owner="u1")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "W", "name": "w", "uid": "u1", "controller": True}
    ]
    obj["metadata"]["managedFields"] = [{"manager": "m"}]
    line = orjson.dumps({"type": "MODIFIED", "object": obj})
    _, item = decode_watch_line(line, strip_managed_fields=True)
    assert not isinstance(item, bytes)
    event = ObjectEvent._of_item(EventKind.APPLY, item)
    store = Store()
    store.apply(event)
    assert event._obj is None  # nothing parsed the object
    expected = copy.deepcopy(obj)
    del expected["metadata"]["managedFields"]
    assert store[REF] == expected
    assert event.obj == expected
    assert store._version(REF) == ("uid-a", "1")
    assert store._version(ObjectRef("b", "default")) is None


# -- the model ----------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "d"])
NAMESPACES = st.sampled_from(["n1", "n2", None])
LABELS = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["x", "y"]))
OWNERS = st.sampled_from([None, "u1", "u2"])


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    obj = cm(
        draw(NAMES),
        draw(NAMESPACES),
        labels=draw(LABELS),
        owner=draw(OWNERS),
        rv=str(draw(st.integers(1, 3))),
    )
    obj["data"] = {"k": draw(st.text(max_size=3))}
    return obj


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), objects()),
        st.tuples(st.just("delete"), objects()),
        st.tuples(st.just("list"), st.lists(objects(), max_size=5)),
        st.tuples(st.just("query"), st.sampled_from(["app", "tier"])),
    ),
    max_size=25,
)


def _version(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


def _ref(obj: dict[str, Any]) -> ObjectRef:
    return ObjectRef.from_object(obj)


def _key(obj: dict[str, Any]) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()


def _keys(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(_key(o) for o in objs)


Model = dict[ObjectRef, dict[str, Any]]


def _labelled(model: Model, key: str, value: str) -> list[dict[str, Any]]:
    return [o for o in model.values() if o["metadata"].get("labels", {}).get(key) == value]


def _owned(model: Model, uid: str) -> list[dict[str, Any]]:
    def controlled(o: dict[str, Any]) -> bool:
        owners = o["metadata"].get("ownerReferences", [])
        return any(r.get("controller") and r["uid"] == uid for r in owners)

    return [o for o in model.values() if controlled(o)]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(OPS)
def test_the_store_agrees_with_a_dict_model(ops: list[tuple[str, Any]]) -> None:
    """Any sequence of applies, deletes, (re)lists and label queries: the store's reads,
    owner and label lookups and a relist's vanished objects are those of a dict."""
    store = Store()
    model: dict[ObjectRef, dict[str, Any]] = {}
    for op, arg in ops:
        if op == "apply":
            store.apply(ObjectEvent(EventKind.APPLY, copy.deepcopy(arg)))
            model[_ref(arg)] = arg
        elif op == "delete":
            store.apply(ObjectEvent(EventKind.DELETE, copy.deepcopy(arg)))
            model.pop(_ref(arg), None)
        elif op == "list":
            # The same uid and resourceVersion mean the same content (the API server
            # changes the version on every write): the store keeps the copy it holds.
            new: Model = {}
            for o in arg:
                held = model.get(_ref(o))
                new[_ref(o)] = held if held is not None and _version(held) == _version(o) else o
            events: list[WatchEvent] = [ListFrame(EventKind.INIT)]
            events += [ObjectEvent(EventKind.INIT_APPLY, copy.deepcopy(o)) for o in arg]
            events.append(ListFrame(EventKind.INIT_DONE))
            vanished = feed(store, events)
            assert _keys(vanished) == _keys([o for r, o in model.items() if r not in new])
            model = new
        else:
            for value in ("x", "y"):
                assert _keys(store.with_label(arg, value)) == _keys(_labelled(model, arg, value))
        for key in list(store._label_index):  # the indexes built so far, kept up to date
            for value in ("x", "y"):
                assert _keys(store.with_label(key, value)) == _keys(_labelled(model, key, value))
        assert len(store) == len(model)
        assert set(store) == set(model)
        for ref, obj in model.items():
            assert ref in store
            assert store[ref] == obj
        for uid in ("u1", "u2"):
            assert _keys(store.owned_by(uid)) == _keys(_owned(model, uid))
        for ns in ("n1", "n2"):
            in_ns = [o for r, o in model.items() if r.namespace == ns]
            assert _keys(store.list(ns)) == _keys(in_ns)
    for key in ("app", "tier"):  # an index built now agrees too
        for value in ("x", "y"):
            assert _keys(store.with_label(key, value)) == _keys(_labelled(model, key, value))


def test_namespace_lists_agree_with_a_dict_model() -> None:
    """A namespace of a set relisted alone: its vanished objects go, the others stay,
    and a label index built before follows."""
    store = Store()
    feed(store, listed(cm("a", "n1", labels={"app": "x"}), cm("b", "n2", labels={"app": "x"})))
    assert len(store.with_label("app", "x")) == 2
    store.apply(ListFrame(EventKind.INIT, "n1"))
    store.apply(ObjectEvent(EventKind.INIT_APPLY, cm("c", "n1", labels={"app": "x"})))
    vanished = store.apply(ListFrame(EventKind.INIT_DONE, "n1"))
    assert [o["metadata"]["name"] for o in vanished] == ["a"]
    assert sorted(o["metadata"]["name"] for o in store.with_label("app", "x")) == ["b", "c"]
    assert sorted(r.key for r in store) == ["n1/c", "n2/b"]
    assert isinstance(store._map, CompactMap)
