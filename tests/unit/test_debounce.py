"""`debounce` through the applier and through a Controller (docs/applier.md, docs/scheduler.md
"Debounce"), on a virtual clock: a burst of triggers within the window is one reconcile,
started when the window after the burst's last trigger has passed, never earlier.

The scheduler is the one the option builds (`ApplierConfig.new_scheduler`), unpatched: the
applier gives it the loop's (virtual) time, so the bounds below are exact, with no slack for a
loaded machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fastctl import Action, ObjectRef, applier
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.testing import VirtualTimeLoop, run_virtual

from .test_controller_relist import WIDGET, Feed, client, listing, widget

WINDOW = 0.5
REF = ObjectRef("a", "default")


class Starts:
    """When each reconcile started, on the loop's clock."""

    def __init__(self) -> None:
        self.at: list[float] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        self.at.append(asyncio.get_running_loop().time())
        return None


def test_a_burst_through_the_applier_is_one_reconcile_a_window_after_its_last_trigger() -> None:
    starts = Starts()
    sent: list[float] = []

    async def triggers(loop: VirtualTimeLoop) -> AsyncIterator[ObjectRef]:
        for _ in range(5):  # one every 0.1 s: each within the window of the one before
            sent.append(loop.time())
            yield REF
            await asyncio.sleep(0.1)
        await asyncio.sleep(3 * WINDOW)
        sent.append(loop.time())  # a lone trigger after the window: a reconcile of its own
        yield REF
        await asyncio.sleep(3 * WINDOW)

    async def main() -> None:
        loop = VirtualTimeLoop.current()
        store = {REF: {"metadata": {"name": "a", "namespace": "default"}}}
        async for _ in applier(
            starts.reconcile, None, None, store, triggers(loop), debounce=WINDOW
        ):
            pass

    run_virtual(main())
    assert starts.at == [pytest.approx(sent[4] + WINDOW), pytest.approx(sent[5] + WINDOW)]
    assert starts.at[0] >= sent[4] + WINDOW
    assert starts.at[1] >= sent[5] + WINDOW


def test_a_burst_of_changes_through_a_controller_is_one_reconcile_a_window_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = Starts()
    feed = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: feed.events())
    monkeypatch.setattr(_run, "watcher", lambda *a, **kw: feed.events())
    ctl = Controller(client(), WIDGET, starts.reconcile, name="widgets", debounce=WINDOW)
    pushed: list[float] = []

    async def main() -> None:
        loop = VirtualTimeLoop.current()
        run = asyncio.create_task(ctl.run(handle_signals=False))
        pushed.append(loop.time())
        feed.push(*listing(widget("a", 0)))
        await asyncio.sleep(2.0)
        for version in range(1, 5):
            pushed.append(loop.time())
            feed.push(ObjectEvent(EventKind.APPLY, widget("a", version)))
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        ctl.shutdown()
        await run

    run_virtual(main())
    assert starts.at == [pytest.approx(pushed[0] + WINDOW), pytest.approx(pushed[-1] + WINDOW)]
    assert starts.at[0] >= pushed[0] + WINDOW
    assert starts.at[1] >= pushed[-1] + WINDOW
