"""Store and reflector logic without a server: atomic swaps, relist diffs, indexes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fastctl.kube._store import Store, controller_uid, reflector
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.types import ObjectRef

INIT = ListFrame(EventKind.INIT)
DONE = ListFrame(EventKind.INIT_DONE)


def cm(
    name: str,
    ns: str | None = "default",
    *,
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"}
    if ns is not None:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [
            {"uid": "not-controller", "kind": "X", "name": "x"},
            {"uid": owner, "controller": True, "kind": "Widget", "name": "w"},
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def listed(*objs: dict[str, Any]) -> list[WatchEvent]:
    return [INIT, *(ObjectEvent(EventKind.INIT_APPLY, o) for o in objs), DONE]


def feed(store: Store, events: list[WatchEvent]) -> list[dict[str, Any]]:
    vanished: list[dict[str, Any]] = []
    for ev in events:
        vanished.extend(store.apply(ev))
    return vanished


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_list_is_buffered_and_swapped_atomically() -> None:
    store = Store()
    assert not store.is_ready
    store.apply(INIT)
    store.apply(ObjectEvent(EventKind.INIT_APPLY, cm("a")))
    assert len(store) == 0
    assert not store.is_ready
    store.apply(DONE)
    assert store.is_ready
    assert list(store) == [ObjectRef("a", "default")]
    assert store[ObjectRef("a", "default")]["metadata"]["name"] == "a"
    assert store.get(ObjectRef("zz", "default")) is None


def test_relist_keeps_serving_old_state_and_reports_vanished() -> None:
    store = Store()
    feed(store, listed(cm("a"), cm("b"), cm("c")))
    store.apply(INIT)
    store.apply(ObjectEvent(EventKind.INIT_APPLY, cm("b", rv="9")))
    # mid-relist: still the old, complete state, still ready
    assert store.is_ready
    assert len(store) == 3
    store.apply(ObjectEvent(EventKind.INIT_APPLY, cm("d")))
    vanished = store.apply(DONE)
    assert names(list(vanished)) == ["a", "c"]
    assert sorted(r.name for r in store) == ["b", "d"]
    assert store[ObjectRef("b", "default")]["metadata"]["resourceVersion"] == "9"


def test_restarted_list_discards_the_partial_one() -> None:
    store = Store()
    store.apply(INIT)
    store.apply(ObjectEvent(EventKind.INIT_APPLY, cm("half")))
    feed(store, listed(cm("whole")))
    assert [r.name for r in store] == ["whole"]


def test_first_list_reports_nothing_vanished() -> None:
    assert feed(Store(), listed(cm("a"))) == []


def test_apply_and_delete() -> None:
    store = Store()
    feed(store, listed())
    store.apply(ObjectEvent(EventKind.APPLY, cm("a")))
    store.apply(ObjectEvent(EventKind.APPLY, cm("a", rv="2")))
    assert store[ObjectRef("a", "default")]["metadata"]["resourceVersion"] == "2"
    store.apply(ObjectEvent(EventKind.DELETE, cm("a", rv="3")))
    assert len(store) == 0
    store.apply(ObjectEvent(EventKind.DELETE, cm("never-seen")))  # harmless


def test_cluster_scoped_and_namespaced_keys() -> None:
    store = Store()
    feed(store, listed(cm("n", None), cm("n", "x"), cm("m", "y")))
    assert ObjectRef("n") in store
    assert ObjectRef("n", "x") in store
    assert names(store.list("x")) == ["n"]
    assert len(store.list()) == 3


def test_owner_index_follows_updates_deletes_and_relists() -> None:
    store = Store()
    feed(store, listed(cm("a", owner="u1"), cm("b", owner="u1"), cm("c")))
    assert names(store.owned_by("u1")) == ["a", "b"]
    assert store.owned_by("not-controller") == []  # only the controller reference counts
    store.apply(ObjectEvent(EventKind.APPLY, cm("b", owner="u2")))
    store.apply(ObjectEvent(EventKind.APPLY, cm("c", owner="u2")))
    assert names(store.owned_by("u1")) == ["a"]
    assert names(store.owned_by("u2")) == ["b", "c"]
    store.apply(ObjectEvent(EventKind.DELETE, cm("a")))
    assert store.owned_by("u1") == []
    feed(store, listed(cm("z", owner="u1")))
    assert names(store.owned_by("u1")) == ["z"]
    assert store.owned_by("u2") == []


def test_label_index_is_lazy_and_incremental() -> None:
    store = Store()
    feed(store, listed(cm("a", labels={"app": "x"}), cm("b", labels={"app": "y"}), cm("c")))
    assert names(store.with_label("app", "x")) == ["a"]  # built on first use
    store.apply(ObjectEvent(EventKind.APPLY, cm("c", labels={"app": "x"})))
    store.apply(ObjectEvent(EventKind.APPLY, cm("a", labels={"other": "1"})))
    assert names(store.with_label("app", "x")) == ["c"]
    assert names(store.with_label("other", "1")) == ["a"]
    store.apply(ObjectEvent(EventKind.DELETE, cm("c")))
    assert store.with_label("app", "x") == []
    feed(store, listed(cm("d", labels={"app": "x", "other": "1"})))
    assert names(store.with_label("app", "x")) == ["d"]
    assert names(store.with_label("other", "1")) == ["d"]
    assert store.with_label("app", "y") == []


def test_a_missing_init_is_tolerated() -> None:
    """A list may come without its INIT (first or later): its objects still make the new
    state, and an INIT_DONE alone is an empty list."""
    store = Store()
    assert feed(store, [ObjectEvent(EventKind.INIT_APPLY, cm("a")), DONE]) == []
    assert [r.name for r in store] == ["a"]
    vanished = feed(store, [ObjectEvent(EventKind.INIT_APPLY, cm("b")), DONE])
    assert (names(vanished), [r.name for r in store]) == (["a"], ["b"])
    empty = Store()
    assert empty.apply(DONE) == []
    assert empty.is_ready
    assert len(empty) == 0


def test_indexes_follow_objects_applied_before_any_list() -> None:
    store = Store()
    assert store.with_label("app", "x") == []  # the index exists before any object
    store.apply(ObjectEvent(EventKind.APPLY, cm("a", owner="u1", labels={"app": "x"})))
    assert names(store.owned_by("u1")) == ["a"]
    assert names(store.with_label("app", "x")) == ["a"]


def test_the_label_index_stays_incremental_after_a_relist() -> None:
    store = Store()
    feed(store, listed(cm("a", labels={"app": "x"})))
    assert names(store.with_label("app", "x")) == ["a"]
    feed(store, listed(cm("a", labels={"app": "x"}), cm("b", labels={"app": "x"})))
    store.apply(ObjectEvent(EventKind.APPLY, cm("a", rv="2", labels={"app": "y"})))
    assert names(store.with_label("app", "x")) == ["b"]
    assert names(store.with_label("app", "y")) == ["a"]


def test_repr_tells_size_and_readiness() -> None:
    store = Store()
    assert repr(store) == "<Store 0 objects, not ready>"
    feed(store, listed(cm("a")))
    assert repr(store) == "<Store 1 objects, ready>"


def test_controller_uid() -> None:
    assert controller_uid(cm("a", owner="u")) == "u"
    assert controller_uid(cm("a")) is None
    assert controller_uid({}) is None


async def test_wait_ready() -> None:
    store = Store()
    waiter = asyncio.create_task(store.wait_ready())
    await asyncio.sleep(0)
    assert not waiter.done()
    feed(store, listed(cm("a")))
    await asyncio.wait_for(waiter, 1)


async def test_reflector_emits_deletes_after_relist() -> None:
    async def events() -> AsyncIterator[WatchEvent]:
        for ev in [
            *listed(cm("a"), cm("b")),
            ObjectEvent(EventKind.APPLY, cm("c")),
            *listed(cm("b")),
        ]:
            yield ev

    store = Store()
    seen: list[tuple[EventKind, str | None, bool]] = []
    async for ev in reflector(store, events()):
        name = ev.obj["metadata"]["name"] if isinstance(ev, ObjectEvent) else None
        in_store = name is not None and ObjectRef(name, "default") in store
        seen.append((ev.kind, name, in_store))
    deletes = [(n, present) for k, n, present in seen if k is EventKind.DELETE]
    assert sorted(deletes) == [("a", False), ("c", False)]  # reported, already gone
    last_done = max(i for i, (k, _, _) in enumerate(seen) if k is EventKind.INIT_DONE)
    assert all(k is EventKind.DELETE for k, _, _ in seen[last_done + 1 :])
    assert [r.name for r in store] == ["b"]


def test_store_is_a_read_only_mapping() -> None:
    store = Store()
    with pytest.raises(TypeError):
        store[ObjectRef("a")] = {}  # type: ignore[index]
