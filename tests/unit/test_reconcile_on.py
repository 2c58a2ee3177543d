"""`Controller.reconcile_on`: refs from outside the cluster trigger their objects.

What must hold: each yielded ref triggers that object once the cache holds it, a ref the
cache does not hold triggers nothing and holds no slot, refs collapse like any trigger,
and anything but an `ObjectRef` stops the controller with an error that names it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from fastctl import ObjectRef
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.runtime.controller import Controller

from .test_controller_relist import NS, WIDGET, client, listing, running, settle, until, widget
from .test_controller_run import Calls, Watches


@pytest.fixture
def watches(monkeypatch: pytest.MonkeyPatch) -> Watches:
    return Watches(monkeypatch)


class Refs:
    """A source whose refs the test sends one at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[object] = asyncio.Queue()

    async def __aiter__(self) -> AsyncIterator[ObjectRef]:
        while True:
            item = await self.queue.get()
            yield item  # type: ignore[misc]  # a wrong type, on purpose, in one test


async def test_each_ref_triggers_its_cached_object_and_a_missing_one_nothing(
    watches: Watches,
) -> None:
    calls = Calls()
    refs = Refs()
    ctl = Controller(client(), WIDGET, calls.reconcile, name="widgets").reconcile_on(refs)
    watches.feeds["Widget"].push(*listing(widget("a", 0), widget("b", 0)))
    async with running(ctl):
        await until(lambda: calls.count("a") == 1 and calls.count("b") == 1, "the list")
        refs.queue.put_nowait(ObjectRef("nope", NS))  # not in the cache
        refs.queue.put_nowait(ObjectRef("b", NS))
        await until(lambda: calls.count("b") == 2, "b triggered by its ref")
        await settle()
        assert calls.count("a") == 1
        assert [name for name, _ in calls.seen].count("nope") == 0
        # A ref to an object created later triggers it once the cache shows it.
        watches.feeds["Widget"].push(ObjectEvent(EventKind.APPLY, widget("c", 0)))
        await until(lambda: calls.count("c") == 1, "c created")
        refs.queue.put_nowait(ObjectRef("c", NS))
        await until(lambda: calls.count("c") == 2, "c triggered by its ref")
        assert ctl.scheduler.stats(now=0.0)["in_flight"] == 0


async def test_refs_that_arrive_while_it_runs_give_one_follow_up(watches: Watches) -> None:
    calls = Calls()
    calls.hold = {"a"}
    refs = Refs()
    ctl = Controller(client(), WIDGET, calls.reconcile, name="widgets").reconcile_on(refs)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    async with running(ctl):
        await until(lambda: calls.count("a") == 1, "a running")
        for _ in range(5):
            refs.queue.put_nowait(ObjectRef("a", NS))
        await settle()
        calls.hold.clear()
        calls.release.set()
        await until(lambda: calls.count("a") == 2, "one follow-up")
        await settle()
        assert calls.count("a") == 2


async def test_anything_but_a_ref_stops_the_controller_naming_it(
    watches: Watches, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "fastctl.controller")
    refs = Refs()
    ctl = Controller(client(), WIDGET, Calls().reconcile, name="widgets").reconcile_on(refs)
    watches.feeds["Widget"].push(*listing(widget("a", 0)))
    refs.queue.put_nowait(f"{NS}/a")
    with pytest.raises(TypeError) as failure:
        await ctl.run(handle_signals=False)
    assert str(failure.value) == (
        f"reconcile_on of widgets yielded str '{NS}/a': expected an ObjectRef"
    )
    assert any("widgets:reconcile_on failed" in r.getMessage() for r in caplog.records)


async def test_it_is_configured_before_the_run_only(watches: Watches) -> None:
    ctl = Controller(client(), WIDGET, Calls().reconcile)
    watches.feeds["Widget"].push(*listing())
    async with running(ctl):
        await until(lambda: len(watches.calls) == 1, "the watch")
        with pytest.raises(RuntimeError, match="is running: configure it before"):
            ctl.reconcile_on(Refs())
