"""The own-writes registry at its edges, driven directly: what it keeps of the watched
objects (and what it ignores), several writes of one object in flight, the order of the
notes an echo uses up, a recreated object, an answer without a version, and a plain-function
reconcile. The registry's place in a running controller is in test_own_writes.py."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from fastctl import Action
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._writes import WRITE_OBSERVER
from fastctl.runtime._own_writes import SETTLE_TIMEOUT, OwnWrites, uid_of
from fastctl.testing import VirtualTimeLoop, run_virtual

from .test_controller_relist import CHILD, WIDGET

CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
SECRETS = ResolvedResource("", "v1", "Secret", "secrets", True)
DONE = Action.requeue(1.0)


def cm(name: str, version: str | None, uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"}
    if version is not None:
        meta["resourceVersion"] = version
    return {"metadata": meta}


def test_the_uid_of_an_object_without_one_is_its_namespace_and_name() -> None:
    assert uid_of(cm("a", "1")) == "uid-a"
    assert uid_of({"metadata": {"name": "a", "namespace": "ns"}}) == "ns/a"
    assert uid_of({"metadata": {"name": "a"}}) == "/a"
    assert uid_of({"metadata": "not a mapping"}) == "/"


def test_only_the_watched_kinds_delivered_versions_are_kept() -> None:
    own = OwnWrites([CHILD])
    own.saw(WIDGET, {"metadata": {"name": "w", "resourceVersion": "3"}})  # not watched
    own.saw(CHILD, {"metadata": "garbage"})
    own.saw(CHILD, cm("a", None))  # no version: nothing to condition a write on
    assert own.known == 0
    own.saw(CHILD, cm("a", "3"))
    assert own.known == 1
    assert own.started(CONFIGMAPS, "ns", "a") == "3"
    own.finished(CONFIGMAPS, "ns", "a", None, made=False, based_on=None)
    # A write of a kind it does not watch is not followed at all.
    assert own.started(SECRETS, "ns", "a") is None
    own.finished(SECRETS, "ns", "a", cm("a", "9"), made=True, based_on="8")
    assert not own.in_flight(CHILD, cm("a", "4"))
    assert not own.is_echo("uid-a", cm("a", "9"), "8")


def test_an_object_with_two_writes_in_flight_waits_for_both_answers() -> None:
    own = OwnWrites([CHILD])
    own.started(CONFIGMAPS, "ns", "a")
    own.started(CONFIGMAPS, "ns", "a")
    own.finished(CONFIGMAPS, "ns", "a", None, made=False, based_on=None)
    assert own.in_flight(CHILD, cm("a", "4"))
    assert len(own) == 1
    own.finished(CONFIGMAPS, "ns", "a", None, made=False, based_on=None)
    assert not own.in_flight(CHILD, cm("a", "4"))
    assert len(own) == 0


async def test_settle_returns_when_the_last_write_ends() -> None:
    own = OwnWrites([CHILD])
    own.started(CONFIGMAPS, "ns", "a")
    settling = asyncio.create_task(own.settle(CHILD, cm("a", "4")))
    await asyncio.sleep(0)
    assert not settling.done()
    own.finished(CONFIGMAPS, "ns", "a", None, made=False, based_on=None)
    await settling
    await own.settle(CHILD, cm("b", "1"))  # nothing in flight: at once


def test_settle_gives_up_on_a_write_that_never_ends_after_the_settle_timeout() -> None:
    """A write stuck in a slow API server holds its object's events back for
    `SETTLE_TIMEOUT`, then lets them pass (one reconcile more, nothing lost): it neither
    waits forever nor raises the timeout to the watch."""

    async def main() -> float:
        own = OwnWrites([CHILD])
        own.started(CONFIGMAPS, "ns", "a")
        began = VirtualTimeLoop.current().time()
        await own.settle(CHILD, cm("a", "4"))
        assert own.in_flight(CHILD, cm("a", "4")), "the write itself is still under way"
        return VirtualTimeLoop.current().time() - began

    assert run_virtual(main()) == SETTLE_TIMEOUT


def _wrote(own: OwnWrites, version: str, based_on: str | None) -> None:
    own.started(CONFIGMAPS, "ns", "a")
    own.finished(CONFIGMAPS, "ns", "a", cm("a", version), made=True, based_on=based_on)


def test_an_echo_uses_up_its_note_and_the_earlier_ones_and_a_stranger_uses_none() -> None:
    own = OwnWrites([CHILD])
    _wrote(own, "5", "4")
    _wrote(own, "6", "5")
    assert len(own) == 1  # one object with notes
    assert not own.is_echo("uid-a", cm("a", "7"), "6")  # not a version of ours: kept
    assert own.is_echo("uid-a", cm("a", "6"), "5")  # 5's echo will not come after it
    assert len(own) == 0
    assert not own.is_echo("uid-a", cm("a", "5"), "4")
    _wrote(own, "8", "7")
    assert not own.is_echo("uid-a", cm("a", "8"), "6")  # the watch skipped 7: passes
    assert len(own) == 0  # and the note is used up either way


def test_a_create_is_an_echo_only_as_the_first_event_of_the_object() -> None:
    own = OwnWrites([CHILD])
    own.finished(CONFIGMAPS, "ns", "a", cm("a", "1"), made=True, based_on=None)
    assert own.is_echo("uid-a", cm("a", "1"), None)
    own.finished(CONFIGMAPS, "ns", "a", cm("a", "1", uid="uid-2"), made=True, based_on=None)
    assert not own.is_echo("uid-2", cm("a", "1", uid="uid-2"), "1")


def test_the_answer_of_a_write_is_the_next_writes_precondition_for_that_object_only() -> None:
    own = OwnWrites([CHILD])
    own.saw(CHILD, cm("a", "3"))
    own.started(CONFIGMAPS, "ns", "a")
    own.finished(CONFIGMAPS, "ns", "a", cm("a", "4"), made=False, based_on=None)
    assert own.started(CONFIGMAPS, "ns", "a") == "4"
    # An answer for another object of that name (recreated meanwhile) is not its version.
    own.finished(CONFIGMAPS, "ns", "a", cm("a", "9", uid="uid-new"), made=False, based_on=None)
    assert own.started(CONFIGMAPS, "ns", "a") == "4"


def test_an_answer_without_a_version_notes_nothing() -> None:
    own = OwnWrites([CHILD])
    own.saw(CHILD, cm("a", "3"))
    own.started(CONFIGMAPS, "ns", "a")
    own.finished(CONFIGMAPS, "ns", "a", cm("a", None), made=True, based_on="3")
    assert len(own) == 0
    assert own.started(CONFIGMAPS, "ns", "a") == "3"


def test_a_recreated_object_is_known_by_its_new_uid_and_forgetting_the_old_keeps_it() -> None:
    own = OwnWrites([CHILD])
    own.saw(CHILD, cm("a", "3", uid="uid-old"))
    own.saw(CHILD, cm("a", "1", uid="uid-new"))
    assert own.known == 1
    own.forget("uid-old")  # the old object's late removal
    assert own.started(CONFIGMAPS, "ns", "a") == "1"
    own.forget("uid-new")
    assert own.known == 0
    own.forget("uid-never-seen")


def test_forgetting_an_object_drops_its_notes() -> None:
    own = OwnWrites([CHILD])
    own.saw(CHILD, cm("a", "3"))
    _wrote(own, "4", "3")
    assert len(own) == 1
    own.forget("uid-a")
    assert len(own) == 0
    assert own.known == 0


def test_a_plain_function_reconcile_reports_to_the_registry_and_leaves_no_trace() -> None:
    """A plain function runs in a thread the applier gives a copy of the task's context: the
    observer is set around the call itself, and only there."""
    own = OwnWrites([CHILD])
    inside: list[object] = []

    def reconcile(obj: Any, ctx: Any) -> Action:
        inside.append(WRITE_OBSERVER.get())
        return DONE

    observing = own.observing(reconcile)
    assert observing.__name__ == "reconcile"
    assert not asyncio.iscoroutinefunction(observing)
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(observing(None, None)))
    thread.start()
    thread.join()
    assert result == [DONE]
    assert observing(None, None) == DONE  # and called where it is, it cleans up after
    assert inside == [own, own]
    assert WRITE_OBSERVER.get() is None


async def test_an_async_reconcile_reports_to_the_registry_and_leaves_no_trace() -> None:
    own = OwnWrites([CHILD])
    inside: list[object] = []

    class Reconciler:
        async def __call__(self, obj: Any, ctx: Any) -> Action:
            inside.append(WRITE_OBSERVER.get())
            return DONE

    observing = own.observing(Reconciler())
    assert asyncio.iscoroutinefunction(observing)
    running = observing(None, None)
    assert inspect.isawaitable(running)
    assert await running == DONE
    assert inside == [own]
    assert WRITE_OBSERVER.get() is None
