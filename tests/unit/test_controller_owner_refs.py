"""Which owner reference of a related object names its primary: the one marked
``controller: true`` of the primary's kind and group, wherever it stands in the list, and,
in a sharded controller, whose UID (not another reference's of the same name) decides the
slot, read from the event itself before the owner is cached."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastctl import ObjectRef
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.runtime.controller import _environment
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.testing import virtual_time
from fastctl.types import Trigger

from .test_controller_relist import Feed, listing
from .test_sharding_runtime import SLOTS, FakeMember, _sharded_controller, obj_in


def _ref(kind: str, name: str, uid: str, *, controller: bool) -> dict[str, Any]:
    api = "example.com/v1" if kind in ("Widget", "Gadget") else "other.io/v1"
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def _child(owners: list[dict[str, Any]], name: str = "c") -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "ownerReferences": owners}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


def test_the_controller_reference_is_found_behind_references_that_are_not() -> None:
    """A child that other objects also own (for garbage collection only: ``controller``
    false, even one of the primary's kind) lists their references in any order; its primary
    is the one controller reference (the API server allows one at most)."""
    run = _sharded_controller(FakeMember(set()), "uid", mapped=False)
    owners = [
        _ref("Widget", "keeper", "uid-k", controller=False),
        _ref("Gadget", "g", "uid-g", controller=False),
        _ref("Widget", "w", "uid-w", controller=True),
    ]
    assert run._owner_of(_child(owners)) == [ObjectRef("w", "ns")]
    assert run._owner_of(_child(owners[:2])) == []


def test_a_sharded_child_is_placed_by_its_controller_owners_uid_not_a_namesakes() -> None:
    """Another owner of the same name (a Gadget ``w`` beside the controlling Widget ``w``)
    comes first: its UID must not pick the slot."""
    member = FakeMember({0})
    run = _sharded_controller(member, "uid", mapped=False)
    gate = run.env.shard.gate
    rel = run.spec.relations[0]
    ours = obj_in(ShardGate(member, "uid", SLOTS), 0, "w")["metadata"]["uid"]
    theirs = obj_in(ShardGate(member, "uid", SLOTS), 1, "w")["metadata"]["uid"]
    for controller_uid, namesake_uid, kept in ((ours, theirs, True), (theirs, ours, False)):
        owners = [
            _ref("Gadget", "w", namesake_uid, controller=False),
            _ref("Widget", "w", controller_uid, controller=True),
        ]
        event = ObjectEvent(EventKind.APPLY, _child(owners))
        assert run._related_served(gate, rel, event, ObjectRef("w", "ns")) is kept


@virtual_time
async def test_a_related_watch_keeps_an_owned_childs_trigger_before_its_owner_is_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owner is not cached yet (the primary's list may come later): a changed child's
    own ownerReference says the owner's slot, so its trigger is kept when that slot is
    served here, and dropped when not."""
    member = FakeMember({0})
    probe = ShardGate(member, "uid", SLOTS)
    ours, theirs = obj_in(probe, 0, "ours"), obj_in(probe, 1, "theirs")
    run = _sharded_controller(member, "uid", mapped=False)
    assert len(run.store) == 0
    feed = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: feed.events())
    children = [
        _child([_ref("Widget", o["metadata"]["name"], o["metadata"]["uid"], controller=True)], n)
        for o, n in ((theirs, "c1"), (ours, "c2"))
    ]
    feed.push(*listing(), *(ObjectEvent(EventKind.APPLY, c) for c in children))
    watch = asyncio.create_task(run._watch_related(run.spec.watch_uses()[1], run.spec.relations[0]))
    try:
        async with asyncio.timeout(60):  # virtual seconds: a dropped trigger never comes
            first = await anext(aiter(run.triggers))
    finally:
        watch.cancel()
    assert (first.ref if isinstance(first, Trigger) else first) == ObjectRef("ours", "ns")
    assert len(run.triggers) == 0
