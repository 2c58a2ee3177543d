"""How watch events become triggers, event by event (no controller, no loop): a list
triggers nothing until it is complete, and a relation's relist reports what vanished."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime._triggers import INITIAL_LIST_PRIORITY, RelatedTriggers, primary_triggers
from fastctl.types import ObjectRef, Trigger

INIT = ListFrame(EventKind.INIT)
DONE = ListFrame(EventKind.INIT_DONE)


def obj(name: str, target: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "target": target}


def listed(*names: str) -> list[WatchEvent]:
    return [INIT, *(ObjectEvent(EventKind.INIT_APPLY, obj(n)) for n in names), DONE]


def to_target(o: dict[str, Any]) -> list[ObjectRef]:
    return [ObjectRef(o["target"], "ns")] if o["target"] else []


def feed(related: RelatedTriggers, *events: WatchEvent) -> list[tuple[str, int]]:
    out: list[Trigger] = []
    for event in events:
        out.extend(related.on_event(event))
    return sorted((t.ref.name, t.priority) for t in out)


def apply(name: str, target: str | None) -> WatchEvent:
    return ObjectEvent(EventKind.INIT_APPLY, obj(name, target))


def test_a_primary_list_triggers_the_swapped_store_at_init_done_only() -> None:
    store = Store()
    triggered: list[ObjectRef | Trigger] = []
    for event in listed("a", "b"):
        store.apply(event)
        triggered.extend(primary_triggers(event, store))
        if event.kind is not EventKind.INIT_DONE:
            assert triggered == []
    assert {t.ref.name for t in triggered if isinstance(t, Trigger)} == {"a", "b"}
    assert all(isinstance(t, Trigger) and t.priority == INITIAL_LIST_PRIORITY for t in triggered)
    assert {t.reason for t in triggered if isinstance(t, Trigger)} == {"list"}  # for the logs
    live = ObjectEvent(EventKind.APPLY, obj("c"))
    store.apply(live)
    assert list(primary_triggers(live, store)) == [ObjectRef("c", "ns")]
    gone = ObjectEvent(EventKind.DELETE, obj("a"))
    store.apply(gone)
    assert list(primary_triggers(gone, store)) == []


def test_a_list_triggers_the_store_as_it_was_at_init_done_however_late_they_are_sent() -> None:
    """The refs are made as the triggers are sent (the first reconciles need not wait for a
    ref per object of a large list), but of the keys held at ``INIT_DONE``: an object that
    comes or goes meanwhile is its own event's business, not the list's."""
    store = Store()
    for event in listed("b", "a", "c"):
        store.apply(event)
    triggers = primary_triggers(DONE, store)
    store.apply(ObjectEvent(EventKind.APPLY, obj("d")))
    store.apply(ObjectEvent(EventKind.DELETE, obj("a")))
    sent = [t for t in triggers if isinstance(t, Trigger)]
    assert [t.ref for t in sent] == [ObjectRef(n, "ns") for n in ("a", "b", "c")]
    assert {(t.priority, t.reason) for t in sent} == {(INITIAL_LIST_PRIORITY, "list")}


def test_the_empty_namespace_s_list_of_a_set_triggers_no_cluster_scoped_object() -> None:
    """A set of namespaces frames its own first list as namespace ``""``, which holds no
    object; the store keys a cluster-scoped object by the empty namespace internally, and
    that must not make the frame trigger it."""
    store = Store()
    node = ObjectEvent(EventKind.APPLY, {"metadata": {"name": "node-1"}})
    store.apply(node)
    assert list(primary_triggers(ListFrame(EventKind.INIT_DONE, ""), store)) == []
    assert [t.ref for t in primary_triggers(DONE, store) if isinstance(t, Trigger)] == [
        ObjectRef("node-1")
    ]


def test_a_relation_list_triggers_at_init_done_and_its_relist_reports_what_vanished() -> None:
    related = RelatedTriggers(to_target, "child", controller="c", kind="K")
    assert feed(related, INIT, apply("x", "w1"), apply("y", "w2"), apply("z", None)) == []
    low = INITIAL_LIST_PRIORITY
    assert feed(related, DONE) == [("w1", low), ("w2", low)]
    assert len(related) == 2  # "z" maps to nothing: nothing kept for it
    # relist: "x" vanished (its DELETE was never seen): its owner is re-triggered, live
    assert feed(related, INIT, apply("y", "w2"), DONE) == [("w1", 0), ("w2", low)]
    assert len(related) == 1


def test_a_list_that_starts_over_forgets_what_it_had_collected() -> None:
    related = RelatedTriggers(to_target, "child", controller="c", kind="K")
    feed(related, INIT, apply("x", "w1"), DONE)
    # a list breaks half-way after "y" and starts over without it
    events = [INIT, apply("x", "w1"), apply("y", "w3"), INIT, apply("x", "w1"), DONE]
    assert feed(related, *events) == [("w1", INITIAL_LIST_PRIORITY)]
    assert len(related) == 1


def test_a_live_move_triggers_the_old_and_the_new_target_and_a_delete_both_too() -> None:
    related = RelatedTriggers(to_target, "child", controller="c", kind="K")
    feed(related, INIT, apply("x", "w1"), DONE)
    moved = ObjectEvent(EventKind.APPLY, obj("x", "w2"))
    assert feed(related, moved) == [("w1", 0), ("w2", 0)]
    assert feed(related, ObjectEvent(EventKind.APPLY, obj("x", "w2"))) == [("w2", 0)]
    # a DELETE whose object no longer maps (e.g. its owner reference was removed first)
    assert feed(related, ObjectEvent(EventKind.DELETE, obj("x", None))) == [("w2", 0)]
    assert len(related) == 0


def test_a_move_across_a_relist_triggers_the_old_and_the_new_target() -> None:
    """An object moved to another primary while the watch was down (its change compacted
    away, then a 410 and a relist): the primary that lost it is reconciled as well as the
    one that gained it, as a live move would do, and both as changes (live priority)."""
    related = RelatedTriggers(to_target, "child", controller="c", kind="K")
    feed(related, INIT, apply("x", "w1"), apply("y", "w3"), apply("z", "w5"), DONE)
    low = INITIAL_LIST_PRIORITY
    relist = [INIT, apply("x", "w2"), apply("y", "w3"), apply("z", "w5"), DONE]
    assert feed(related, *relist) == [("w1", 0), ("w2", 0), ("w3", low), ("w5", low)]
    # the memory follows the move: the next live change of x triggers w2 only
    assert feed(related, ObjectEvent(EventKind.APPLY, obj("x", "w2"))) == [("w2", 0)]


def test_a_fan_out_that_changed_across_a_relist_triggers_every_target_it_gained_or_lost() -> None:
    def to_targets(o: dict[str, Any]) -> list[ObjectRef]:
        return [ObjectRef(name, "ns") for name in o["target"].split(",")]

    related = RelatedTriggers(to_targets, "child", controller="c", kind="K", index=True)
    feed(related, INIT, apply("x", "a,b"), DONE)
    relist = [INIT, apply("x", "b,c"), DONE]
    assert feed(related, *relist) == [("a", 0), ("b", INITIAL_LIST_PRIORITY), ("c", 0)]
    assert related.sources_of(ObjectRef("a", "ns")) == ()
    assert related.sources_of(ObjectRef("c", "ns")) == (ObjectRef("x", "ns"),)


def test_a_move_the_filter_holds_back_across_a_relist_triggers_nothing_as_live() -> None:
    """The event filter said the change needs no reconcile: a relist does what the live
    event would have done (nothing), though the memory follows the move."""
    from fastctl.runtime._filters import EventFilter

    held_back = {"x"}

    def predicate(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return new["metadata"]["name"] not in held_back

    event_filter = EventFilter(predicate, controller="c", kind="K")
    related = RelatedTriggers(
        to_target, "child", controller="c", kind="K", event_filter=event_filter
    )
    held_back.clear()
    feed(related, INIT, apply("x", "w1"), DONE)
    held_back.add("x")
    assert feed(related, INIT, apply("x", "w2"), DONE) == []
    assert feed(related, ObjectEvent(EventKind.DELETE, obj("x", None))) == [("w2", 0)]


def test_a_failing_mapper_or_a_wrong_value_is_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def mapper(o: dict[str, Any]) -> list[Any]:
        if o["target"] == "boom":
            raise RuntimeError("boom")
        return ["not-a-ref", ObjectRef("w", "ns")]

    related = RelatedTriggers(mapper, "child", controller="ctl", kind="K")
    assert feed(related, ObjectEvent(EventKind.APPLY, obj("x", "boom"))) == []
    assert feed(related, ObjectEvent(EventKind.APPLY, obj("y", "ok"))) == [("w", 0)]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "controller ctl: mapper for K failed; event skipped"),
        (logging.ERROR, "controller ctl: mapper for K returned 'not-a-ref', not an ObjectRef"),
    ]
    assert caplog.records[0].exc_info is not None  # the mapper's traceback


def test_a_list_without_its_init_is_taken_as_one() -> None:
    """As the store does: objects listed with no INIT before them (a watcher that resumed
    mid-list) are still collected and triggered at the end of the list."""
    related = RelatedTriggers(to_target, "child", controller="ctl", kind="K", index=True)
    listing: list[WatchEvent] = [ObjectEvent(EventKind.INIT_APPLY, obj("x", "w1")), DONE]
    assert feed(related, *listing) == [("w1", INITIAL_LIST_PRIORITY)]
    assert related.sources_of(ObjectRef("w1", "ns")) == (ObjectRef("x", "ns"),)


def test_a_target_keeps_the_sources_that_still_point_at_it() -> None:
    related = RelatedTriggers(to_target, "child", controller="ctl", kind="K", index=True)
    feed(related, ObjectEvent(EventKind.APPLY, obj("p", "w")))
    feed(related, ObjectEvent(EventKind.APPLY, obj("q", "w")))
    feed(related, ObjectEvent(EventKind.APPLY, obj("p", "v")))  # p moves away from w
    assert related.sources_of(ObjectRef("w", "ns")) == (ObjectRef("q", "ns"),)
    assert related.sources_of(ObjectRef("v", "ns")) == (ObjectRef("p", "ns"),)
    feed(related, ObjectEvent(EventKind.DELETE, obj("q", "w")))
    assert related.sources_of(ObjectRef("w", "ns")) == ()


def test_a_delete_of_an_object_not_in_memory_triggers_what_its_last_state_maps_to() -> None:
    """Deleted before any other event of it reached the relation (or while it mapped to
    nothing): its final state still names its targets, and the reason names it."""
    related = RelatedTriggers(to_target, "child", controller="c", kind="K", index=True)
    out = related.on_event(ObjectEvent(EventKind.DELETE, obj("x", "w1")))
    assert [(t.ref, t.priority, t.reason) for t in out] == [
        (ObjectRef("w1", "ns"), 0, "child: ns/x")
    ]
    assert related.on_event(ObjectEvent(EventKind.DELETE, obj("y", None))) == []
    assert len(related) == 0
    assert related.sources_of(ObjectRef("w1", "ns")) == ()


def test_a_relist_skips_only_the_held_objects_not_the_ones_listed_after_them() -> None:
    from fastctl.runtime._filters import EventFilter

    held_back = {"a"}

    def predicate(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return new["metadata"]["name"] not in held_back

    event_filter = EventFilter(predicate, controller="c", kind="K")
    related = RelatedTriggers(
        to_target, "child", controller="c", kind="K", event_filter=event_filter
    )
    feed(related, INIT, apply("a", "w1"), apply("b", "w2"), DONE)
    # "a" listed first and held back; "b" moved and "c" new after it still trigger
    relist: list[WatchEvent] = [INIT, apply("a", "w1"), apply("b", "w3"), apply("c", "w4"), DONE]
    low = INITIAL_LIST_PRIORITY
    assert feed(related, *relist) == [("w2", 0), ("w3", 0), ("w4", low)]


def test_every_list_without_its_init_is_taken_as_one_and_a_bare_end_as_an_empty_list() -> None:
    related = RelatedTriggers(to_target, "child", controller="ctl", kind="K", index=True)
    feed(related, INIT, apply("x", "w1"), DONE)
    # a second list, its INIT missing too: collected and swapped in like the first
    assert feed(related, apply("y", "w2"), DONE) == [("w1", 0), ("w2", INITIAL_LIST_PRIORITY)]
    assert related.sources_of(ObjectRef("w2", "ns")) == (ObjectRef("y", "ns"),)
    # an end with no list before it: everything vanished, its targets re-triggered
    assert feed(related, DONE) == [("w2", 0)]
    assert len(related) == 0
    assert related.sources_of(ObjectRef("w2", "ns")) == ()
