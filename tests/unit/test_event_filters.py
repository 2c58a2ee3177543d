"""Event filters, event by event (no controller, no loop): the predicates, and the rules a
filter cannot break (a first event, a relist's new or changed object, a delete, a failing
predicate: each passes), with the per-object state dropped when the object goes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from fastctl import all_of, annotations_changed, any_of, generation_changed, labels_changed
from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime._filters import EventFilter, Predicate
from fastctl.runtime._triggers import RelatedTriggers, primary_triggers
from fastctl.types import ObjectRef, Trigger

INIT = ListFrame(EventKind.INIT)
DONE = ListFrame(EventKind.INIT_DONE)


def obj(
    name: str,
    generation: int | None = 1,
    *,
    labels: dict[str, str] | None = None,
    status: str = "",
    uid: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"}
    if generation is not None:
        meta["generation"] = generation
    if labels is not None:
        meta["labels"] = labels
    if owner is not None:
        meta["owner"] = owner
    return {"metadata": meta, "status": {"s": status}}


def apply(o: dict[str, Any]) -> WatchEvent:
    return ObjectEvent(EventKind.APPLY, o)


def listed(o: dict[str, Any]) -> WatchEvent:
    return ObjectEvent(EventKind.INIT_APPLY, o)


def delete(o: dict[str, Any]) -> WatchEvent:
    return ObjectEvent(EventKind.DELETE, o)


def new_filter(predicate: Predicate | None = generation_changed, **kw: Any) -> EventFilter:
    return EventFilter(predicate, controller="c", kind="Widget", **kw)


def test_generation_changed() -> None:
    assert not generation_changed(obj("a", 1), obj("a", 1, status="Ready"))
    assert generation_changed(obj("a", 1), obj("a", 2))
    # no generation (a ConfigMap): nothing says the change is unimportant
    assert generation_changed(obj("a", None), obj("a", None, status="x"))
    deleting = obj("a", 1)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert generation_changed(obj("a", 1), deleting)
    assert not generation_changed(deleting, deleting)


def test_the_built_in_predicates_read_missing_or_malformed_metadata_as_empty() -> None:
    """An object without a ``metadata`` mapping (a partial or broken event) is judged as
    one with empty metadata, never a crash that would report the filter as failing."""
    for broken in ({}, {"metadata": None}, {"metadata": "not a mapping"}):
        assert generation_changed(broken, broken)  # no generation: it passes
        assert generation_changed(broken, obj("a", 1))
        assert not labels_changed(broken, broken)
        assert labels_changed(broken, obj("a", labels={"x": "1"}))
        assert not annotations_changed(broken, obj("a"))


def test_labels_and_annotations_changed() -> None:
    assert not labels_changed(obj("a"), obj("a", labels={}))  # missing == empty
    assert labels_changed(obj("a", labels={"x": "1"}), obj("a", labels={"x": "2"}))
    assert not labels_changed(obj("a", 1), obj("a", 2))
    old, new = obj("a"), obj("a")
    new["metadata"]["annotations"] = {"k": "v"}
    assert annotations_changed(old, new)
    assert not annotations_changed(new, new)


def test_combinators() -> None:
    either = any_of(generation_changed, labels_changed)
    both = all_of(generation_changed, labels_changed)
    same, relabelled = obj("a", 1), obj("a", 1, labels={"x": "1"})
    respec_relabel = obj("a", 2, labels={"x": "1"})
    assert not either(same, same)
    assert either(same, relabelled)
    assert not both(same, relabelled)
    assert both(same, respec_relabel)
    assert either.__qualname__ == "any_of(generation_changed, labels_changed)"
    with pytest.raises(ValueError, match="any_of") as empty:
        any_of()
    assert str(empty.value) == "any_of() needs at least one predicate"
    with pytest.raises(TypeError, match=r"all_of\(\): a predicate must be callable") as wrong:
        all_of(generation_changed, "labels")  # type: ignore[arg-type]
    assert str(wrong.value) == (
        "all_of(): a predicate must be callable (old, new) -> bool, got str"
    )


def test_a_status_write_is_filtered_and_a_spec_change_passes() -> None:
    f = new_filter()
    assert f.admits(apply(obj("a", 1)))  # first event: always
    assert not f.admits(apply(obj("a", 1, status="Ready")))
    assert f.admits(apply(obj("a", 2, status="Ready")))
    assert not f.admits(apply(obj("a", 2, status="Done")))


def test_the_first_event_passes_whatever_the_predicate_says() -> None:
    f = new_filter(lambda old, new: False)
    assert f.admits(apply(obj("a")))
    assert not f.admits(apply(obj("a", 2)))
    # a new incarnation (same name, another UID) is another object: first event again
    assert f.admits(apply(obj("a", 2, uid="uid-a-2")))


def test_a_delete_passes_and_drops_the_state() -> None:
    f = new_filter(lambda old, new: False)
    for i in range(100):
        assert f.admits(apply(obj(f"o{i}")))
        assert not f.admits(apply(obj(f"o{i}", status="x")))
    assert len(f) == 100
    for i in range(100):
        assert f.admits(delete(obj(f"o{i}")))
    assert len(f) == 0
    # recreated under the same name: a first event
    assert f.admits(apply(obj("o1", uid="uid-o1-again")))


def test_a_relist_passes_new_and_changed_objects_and_drops_the_vanished() -> None:
    f = new_filter()
    for name in ("same", "changed", "gone"):
        f.admits(apply(obj(name, 1)))
    verdicts = [
        f.admits(e) for e in (INIT, listed(obj("same", 1, status="x")), listed(obj("changed", 2)))
    ]
    verdicts.append(f.admits(listed(obj("new", 1))))
    assert verdicts == [True, False, True, True]
    assert f.admits(DONE)
    assert f.take_listed() == {ObjectRef("changed", "ns"), ObjectRef("new", "ns")}
    assert f.take_listed() == set()  # released once read
    assert len(f) == 3  # "gone" vanished during the relist: its state went with it
    assert f.admits(apply(obj("gone", 1)))  # back: a first event


def test_a_delete_after_the_relist_that_dropped_the_object_passes() -> None:
    """A shared watch's reflector also sends a ``DELETE`` for each object its relist no
    longer shows, after the list's end has already dropped the object's state."""
    f = new_filter(lambda old, new: False)
    assert f.admits(apply(obj("gone", 1)))
    for e in (INIT, DONE):
        assert f.admits(e)
    assert len(f) == 0
    assert f.admits(delete(obj("gone", 1)))
    assert f.admits(delete(obj("never-seen", 1)))
    assert len(f) == 0


def test_a_list_that_starts_over_keeps_only_the_complete_one() -> None:
    f = new_filter()
    f.admits(apply(obj("a", 1)))
    for e in (INIT, listed(obj("a", 2)), INIT, listed(obj("a", 2)), DONE):
        f.admits(e)
    assert f.take_listed() == {ObjectRef("a", "ns")}


def test_a_raising_predicate_passes_and_is_reported_once_per_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors: list[None] = []

    def broken(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        raise KeyError("spec")

    f = new_filter(broken, on_error=lambda: errors.append(None))
    with caplog.at_level(logging.ERROR, logger="fastctl.controller"):
        for _ in range(3):
            assert f.admits(apply(obj("a", 1)))
        assert f.admits(apply(obj("b", 1)))
        assert f.admits(apply(obj("b", 1)))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "event filter on Widget ns/a failed: KeyError('spec')" in messages[0]
    assert "ns/b" in messages[1]
    assert len(errors) == 3  # every failure is counted, only the first per object logged
    f.admits(delete(obj("a")))
    assert len(f) == 2  # "a" forgotten: its state and its report
    node = obj("n1", 1)
    del node["metadata"]["namespace"]  # cluster-scoped: no namespace to name
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="fastctl.controller"):
        assert f.admits(apply(node))
        assert f.admits(apply(node))
    assert [r.getMessage() for r in caplog.records] == [
        "controller c: event filter on Widget /n1 failed: KeyError('spec'); the event passes "
        "(reported once per object)"
    ]


def test_a_non_bool_verdict_is_an_error_naming_the_predicate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> Any:
        return ["spec"]

    f = new_filter(any_of(generation_changed, changed_keys))
    f.admits(apply(obj("a", 1)))
    with caplog.at_level(logging.ERROR, logger="fastctl.controller"):
        assert f.admits(apply(obj("a", 1)))
    name = "test_a_non_bool_verdict_is_an_error_naming_the_predicate.<locals>.changed_keys"
    error = TypeError(f"event filter {name} returned list, not bool")
    assert [r.getMessage() for r in caplog.records] == [
        f"controller c: event filter on Widget ns/a failed: {error!r}; the event passes "
        "(reported once per object)"
    ]


class ChangedKeys:
    """A predicate that is an object, not a function: it has no ``__qualname__``."""

    def __call__(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> Any:
        return ["spec"]

    def __repr__(self) -> str:
        return "ChangedKeys()"


def test_a_predicate_object_is_named_by_its_repr(caplog: pytest.LogCaptureFixture) -> None:
    either = any_of(generation_changed, ChangedKeys())
    assert either.__qualname__ == "any_of(generation_changed, ChangedKeys())"
    f = new_filter(either)
    f.admits(apply(obj("a", 1)))
    with caplog.at_level(logging.ERROR, logger="fastctl.controller"):
        assert f.admits(apply(obj("a", 1)))
    error = TypeError("event filter ChangedKeys() returned list, not bool")
    assert [r.getMessage() for r in caplog.records] == [
        f"controller c: event filter on Widget ns/a failed: {error!r}; the event passes "
        "(reported once per object)"
    ]


def test_the_primary_triggers_only_what_passes_and_a_relist_what_changed() -> None:
    store, f = Store(), new_filter()

    def feed(*events: WatchEvent) -> list[str]:
        out: list[ObjectRef | Trigger] = []
        for event in events:
            store.apply(event)
            out.extend(primary_triggers(event, store, f))
        return sorted(t.ref.name if isinstance(t, Trigger) else t.name for t in out)

    assert feed(INIT, listed(obj("a", 1)), listed(obj("b", 1)), DONE) == ["a", "b"]
    assert feed(apply(obj("a", 1, status="Ready"))) == []
    assert feed(apply(obj("a", 2))) == ["a"]
    # relist: "a" unchanged since last seen, "b" changed while the watch was down
    assert feed(INIT, listed(obj("a", 2, status="x")), listed(obj("b", 5)), DONE) == ["b"]


def test_a_filtered_relation_holds_back_changes_but_not_deletes_or_vanished_children() -> None:
    def to_owner(o: dict[str, Any]) -> list[ObjectRef]:
        return [ObjectRef(o["metadata"]["owner"], "ns")]

    f = new_filter(labels_changed)
    related = RelatedTriggers(to_owner, "child", controller="c", kind="ConfigMap", event_filter=f)

    def feed(*events: WatchEvent) -> list[str]:
        return sorted(t.ref.name for e in events for t in related.on_event(e))

    x, y = obj("x", None, owner="w1"), obj("y", None, owner="w2")
    assert feed(INIT, listed(x), listed(y), DONE) == ["w1", "w2"]
    assert feed(apply(obj("x", None, owner="w1", status="rewritten"))) == []
    assert feed(apply(obj("x", None, owner="w1", labels={"k": "v"}))) == ["w1"]
    # relist: "y" unchanged (held back), "x" vanished: its owner re-triggered
    assert feed(INIT, listed(obj("y", None, owner="w2", status="x")), DONE) == ["w1"]
    assert feed(delete(y)) == ["w2"]
    assert len(f) == 0


class Body(dict[str, Any]):
    """A body that can be watched for being freed (a plain dict takes no weak reference)."""


def _spec_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return old.get("spec") != new.get("spec")


@pytest.mark.parametrize("listing", [False, True], ids=["watched", "listed"])
@pytest.mark.parametrize(
    ("make", "keeps_body"),
    [
        (lambda: generation_changed, False),
        (
            lambda: any_of(
                labels_changed,
                all_of(generation_changed, any_of(annotations_changed, generation_changed)),
            ),
            False,
        ),
        (lambda: None, False),  # only own writes held back: nothing of the body is needed
        (lambda: _spec_changed, True),
        (lambda: any_of(labels_changed, all_of(generation_changed, _spec_changed)), True),
    ],
    ids=["generation", "combined", "none", "custom", "custom-combined"],
)
def test_metadata_only_predicates_keep_no_body_also_when_combined_at_run_time(
    make: Callable[[], Predicate | None], keeps_body: bool, listing: bool
) -> None:
    """A watch without a cache must not keep every object's body alive through its
    filter: built-in predicates need only metadata. A custom one may read anything, so its
    old object is kept whole, and still gets it, also inside a combination. (The
    combinations are made by the test itself, not when the tests are collected.)"""
    import gc
    import weakref

    predicate = make()
    f = new_filter(predicate)
    first = obj("a", 1)
    first["spec"] = Body(big="x" * 1000)
    alive = weakref.ref(first["spec"])
    if listing:
        f.admits(INIT)
        f.admits(listed(first))
        f.admits(DONE)
    else:
        f.admits(apply(first))
    del first
    gc.collect()
    assert (alive() is not None) is keeps_body
    # the verdicts are unchanged: a new generation passes, a status-only change does not
    if predicate is not None:
        bumped = obj("a", 2)
        bumped["spec"] = {"big": "y"}
        assert f.admits(apply(bumped))
    if predicate is generation_changed:
        assert not f.admits(apply(obj("a", 2, status="Ready")))
    if keeps_body and predicate is not None:  # the custom part sees the old spec
        assert not f.admits(apply(obj("a", 2, status="Ready") | {"spec": {"big": "y"}}))


def test_a_list_without_its_init_is_taken_as_one() -> None:
    """As the store does: an object listed with no INIT before it is judged as listed, and
    the list's end reports it."""
    f = new_filter()
    assert f.admits(listed(obj("a", 1)))
    assert f.admits(DONE)
    assert f.take_listed() == {ObjectRef("a", "ns")}
    assert not f.admits(apply(obj("a", 1, status="Ready")))  # its state was kept


def test_every_list_without_its_init_is_taken_as_one_and_a_bare_end_as_an_empty_list() -> None:
    """Not only the first: a list that follows a complete one without its INIT is judged
    as listed too; an INIT_DONE with no list before it is an empty list (everything
    vanished), as the store reads it."""
    f = new_filter()
    for e in (INIT, listed(obj("a", 1)), DONE):
        f.admits(e)
    assert f.take_listed() == {ObjectRef("a", "ns")}
    assert f.admits(listed(obj("a", 2)))
    assert f.admits(listed(obj("b", 1)))
    assert f.admits(DONE)
    assert f.take_listed() == {ObjectRef("a", "ns"), ObjectRef("b", "ns")}
    assert len(f) == 2
    assert f.admits(DONE)
    assert f.take_listed() == set()
    assert len(f) == 0
    assert f.admits(apply(obj("a", 2)))  # forgotten: a first event again
