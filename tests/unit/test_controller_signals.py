"""`Controller.run()` and the process's signals (docs/contract.md): the first SIGTERM or
SIGINT stops gracefully (no new reconcile starts, the running one finishes, `run()`
returns), a second one cancels at once; the loop's handlers are removed when `run()`
ends. The
signals are real, sent to this process; what is checked is what happened, not when.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import pytest

from fastctl import Action
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.manager import Manager

from .test_controller_relist import WIDGET, Feed, client, listing, until, widget


class Work:
    """Reconciles that wait for `release`, noting which started, ended and were cancelled."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.ended: list[str] = []
        self.cancelled: list[str] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        name = obj["metadata"]["name"]
        self.started.append(name)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        self.ended.append(name)
        return None


def _handled(sig: signal.Signals) -> bool:
    """Whether the running loop has a handler for `sig` (removing it: the answer of
    ``remove_signal_handler``, the same on asyncio's loops and on uvloop)."""
    return asyncio.get_running_loop().remove_signal_handler(sig)


async def _running_one_of_two(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Work, asyncio.Task[None]]:
    """A controller (one reconcile at a time) with "a" running and "b" queued."""
    feed = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: feed.events())
    monkeypatch.setattr(_run, "watcher", lambda *a, **kw: feed.events())
    work = Work()
    ctl = Controller(client(), WIDGET, work.reconcile, name="widgets", concurrency=1)
    feed.push(*listing(widget("a", 0), widget("b", 0)))
    task = asyncio.create_task(ctl.run())
    await until(lambda: len(work.started) == 1, "the first reconcile")
    return work, task


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT])
async def test_the_first_signal_drains(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, first: signal.Signals
) -> None:
    caplog.set_level(logging.INFO, "fastctl.signals")
    work, task = await _running_one_of_two(monkeypatch)
    os.kill(os.getpid(), first)
    for _ in range(200):
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records if r.name == "fastctl.signals"] == [
        f"controller widgets: {first.name}: stopping gracefully; again to cancel at once"
    ]
    assert not task.done(), "a graceful stop waits for the running reconcile"
    assert work.cancelled == []
    work.release.set()
    await until(task.done, "run() to return")
    assert task.exception() is None
    assert work.ended == work.started  # the running one finished; the queued one never began
    assert len(work.started) == 1
    assert not _handled(signal.SIGINT)
    assert not _handled(signal.SIGTERM)


async def test_a_second_signal_cancels_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    work, task = await _running_one_of_two(monkeypatch)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(200):
        await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGINT)
    await until(task.done, "run() to end")
    assert task.cancelled()
    assert work.cancelled == work.started
    assert work.ended == []


async def _manager_running_one_of_two(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Work, Manager, asyncio.Task[None]]:
    """The same controller in a Manager (long drain timeout: only signals end the drain)."""
    feed = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: feed.events())
    work = Work()
    ctl = Controller(client(), WIDGET, work.reconcile, name="widgets", concurrency=1)
    manager = Manager(client(), metrics_port=None, probe_port=None, drain_timeout=3600)
    manager.add(ctl)
    feed.push(*listing(widget("a", 0), widget("b", 0)))
    task = asyncio.create_task(manager.run())
    await until(lambda: len(work.started) == 1, "the first reconcile")
    return work, manager, task


async def test_a_managers_first_signal_drains(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Manager takes the signal (its controllers install no handlers of their own)."""
    caplog.set_level(logging.INFO, "fastctl")
    work, _, task = await _manager_running_one_of_two(monkeypatch)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(200):
        await asyncio.sleep(0)
    assert not task.done(), "a graceful stop waits for the running reconcile"
    assert [r.getMessage() for r in caplog.records if r.name == "fastctl.signals"] == [
        "manager: SIGTERM: stopping gracefully; again to cancel at once"
    ]
    draining = [r.getMessage() for r in caplog.records if r.name == "fastctl.manager"]
    assert draining == [
        "draining 1 controller(s) for up to 3600 s: widgets (reconciling 1: default/a)"
    ], "the drain names what it waits for"
    work.release.set()
    await until(task.done, "run() to return")
    assert task.exception() is None
    assert work.ended == work.started == ["a"]
    assert "drained widgets" in [r.getMessage() for r in caplog.records]
    assert not _handled(signal.SIGTERM)


async def test_a_managers_second_signal_cancels_the_running_reconciles_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As for a lone controller: the second signal does not wait out the drain timeout."""
    caplog.set_level(logging.WARNING, "fastctl.manager")
    work, _, task = await _manager_running_one_of_two(monkeypatch)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(200):
        await asyncio.sleep(0)
    assert not task.done()
    os.kill(os.getpid(), signal.SIGINT)
    await until(task.done, "run() to end")
    assert work.cancelled == ["a"]
    assert work.ended == []
    assert [r.getMessage() for r in caplog.records if r.name == "fastctl.manager"] == [
        "aborted: cancelling 1 controller(s) at once: widgets (reconciling 1: default/a)"
    ]
