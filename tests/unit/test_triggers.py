"""How watch events become triggers, event by event (no controller, no loop): a list
triggers nothing until it is complete, and a relation's relist reports what vanished."""

from __future__ import annotations

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
    live = ObjectEvent(EventKind.APPLY, obj("c"))
    store.apply(live)
    assert list(primary_triggers(live, store)) == [ObjectRef("c", "ns")]
    gone = ObjectEvent(EventKind.DELETE, obj("a"))
    store.apply(gone)
    assert list(primary_triggers(gone, store)) == []


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
    assert "controller ctl: mapper for K failed" in caplog.text
    assert "returned 'not-a-ref', not an ObjectRef" in caplog.text
