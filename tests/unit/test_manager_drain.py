"""A Manager whose drain timeout runs out (docs/leader-election.md, "The Manager at the
edges"), on a virtual clock with an in-memory Lease: the running reconciles are cancelled
when `drain_timeout` has passed, and awaited; the Lease is released only after every one has
ended (one that swallows the cancellation and goes on included); `run()` returns normally
(a graceful stop: `fastctl run` exits 0); the controller's slot is released.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.manager import Manager, _manager
from fastctl.runtime.manager._drain import SHOWN_KEYS, describe
from fastctl.runtime.manager._roles import Role, Task
from fastctl.testing import VirtualTimeLoop, run_virtual

from .fake_lease import LeaseStore
from .test_controller_relist import WIDGET, Feed, client, listing, widget
from .test_leader import _FakeLeases

DRAIN = 5.0
ELECTION = LeaderElection(
    "l", identity="me", lease_duration=1.0, renew_deadline=0.3, retry_period=0.05
)


class _ElectorClient:
    """Stands in for the Manager's own ApiClient of the elector (no HTTP here)."""

    def __init__(self, configuration: Any) -> None:
        pass

    async def close(self) -> None:
        pass


class Lease(LeaseStore):
    """The in-memory Lease, noting when its holder was cleared (the release)."""

    def __init__(self) -> None:
        super().__init__()
        self.released_at: float | None = None

    def put(self, lease: dict[str, Any]) -> dict[str, Any]:
        if lease["spec"].get("holderIdentity") == "":
            self.released_at = asyncio.get_running_loop().time()
        return super().put(lease)


def elect_on(store: LeaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Manager's elector use `store` instead of the API server."""

    def elector(client: Any, config: LeaderElection) -> LeaderElector:
        made = LeaderElector(client, config)
        made._leases = _FakeLeases(store)  # type: ignore[assignment]
        return made

    monkeypatch.setattr(_manager, "LeaderElector", elector)
    monkeypatch.setattr(_manager, "new_client", _ElectorClient)


def manager_client() -> ApiClient:
    """A client that is never used: the events and the Lease are faked."""
    api = client()
    api.configuration = None  # type: ignore[assignment]  # read only by the elector's client
    return api


@pytest.fixture
def lease(monkeypatch: pytest.MonkeyPatch) -> Lease:
    store = Lease()
    elect_on(store, monkeypatch)
    return store


class Reconciles:
    """One reconcile that runs for `runs` seconds; on cancellation it stops, or, when it
    `swallows` it, goes on for `after_cancel` seconds more."""

    def __init__(self, *, swallows: bool, after_cancel: float = 3.0) -> None:
        self.swallows = swallows
        self.after_cancel = after_cancel
        self.started: float | None = None
        self.cancelled: float | None = None
        self.ended: float | None = None

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            self.cancelled = loop.time()
            if not self.swallows:
                self.ended = loop.time()
                raise
            await asyncio.sleep(self.after_cancel)
        self.ended = loop.time()
        return None


def _stop_during_a_reconcile(
    work: Reconciles, monkeypatch: pytest.MonkeyPatch
) -> tuple[Controller, float, float]:
    """Run a leading Manager, shut it down while `work` runs; (controller, when the
    shutdown was asked, when run() returned)."""
    feed = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: feed.events())
    monkeypatch.setattr(_run, "watcher", lambda *a, **kw: feed.events())
    ctl = Controller(client(), WIDGET, work.reconcile, name="widgets")
    mgr = Manager(
        manager_client(),
        leader_election=ELECTION,
        metrics_port=None,
        probe_port=None,
        drain_timeout=DRAIN,
    )
    mgr.add(ctl)

    async def main() -> tuple[float, float]:
        loop = VirtualTimeLoop.current()
        feed.push(*listing(widget("a", 0)))
        run = asyncio.create_task(mgr.run())
        for _ in range(1000):
            if work.started is not None:
                break
            await asyncio.sleep(0.01)
        assert work.started is not None, f"never reconciled (leader: {mgr.is_leader})"
        await asyncio.sleep(1.0)
        asked = loop.time()
        mgr.shutdown()
        await run  # a graceful stop: no exception
        return asked, loop.time()

    asked, returned = run_virtual(main())
    return ctl, asked, returned


def test_a_reconcile_running_past_the_drain_timeout_is_cancelled_then_the_lease_released(
    lease: Lease, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")
    work = Reconciles(swallows=False)
    ctl, asked, returned = _stop_during_a_reconcile(work, monkeypatch)
    assert [r.getMessage() for r in caplog.records if r.name == "fastctl.manager"] == [
        "drain timeout (5 s) passed: cancelling 1 controller(s): widgets (reconciling 1: default/a)"
    ]
    assert work.cancelled == asked + DRAIN  # not before the drain timeout, and not later
    assert lease.released_at is not None
    assert lease.released_at >= work.cancelled  # released only once the reconcile ended
    assert returned - asked <= DRAIN + 0.1  # the release is one request away
    assert ctl.scheduler.in_flight == 0  # the slot was released


def test_a_reconcile_that_swallows_the_cancellation_is_awaited_before_the_release(
    lease: Lease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancellation in asyncio is a request: the Manager cannot stop such a reconcile, so it
    waits for it, and leaves the Lease held (no successor starts) until it has ended."""
    work = Reconciles(swallows=True, after_cancel=3.0)
    ctl, asked, _ = _stop_during_a_reconcile(work, monkeypatch)
    assert work.cancelled == asked + DRAIN
    assert work.ended == asked + DRAIN + 3.0
    assert lease.released_at is not None
    assert lease.released_at >= work.ended
    assert ctl.scheduler.in_flight == 0


def test_a_drain_names_a_few_objects_per_controller_and_counts_the_rest() -> None:
    """A controller may run hundreds of reconciles at once: the log line names the first
    `SHOWN_KEYS` (sorted) and counts the others."""
    ctl = Controller(client(), WIDGET, Reconciles(swallows=False).reconcile, name="widgets")
    keys = [f"default/w{i:02}" for i in range(SHOWN_KEYS + 3)]
    ctl.running_keys = lambda: keys  # type: ignore[method-assign]
    task = Task(Role.CONTROLLER, cast("asyncio.Task[None]", None), "widgets", ctl)
    shown = ", ".join(keys[:SHOWN_KEYS])
    assert describe(task) == f"widgets (reconciling {SHOWN_KEYS + 3}: {shown} and 3 more)"
    ctl.running_keys = lambda: []  # type: ignore[method-assign]
    assert describe(task) == "widgets (no reconcile running)"
