"""A Manager with both sharding and leader election, on a virtual clock with in-memory
Leases: the controller added with ``sharded=False`` reconciles only while this replica
leads; when the leader Lease is lost its reconcile is cancelled at once (no write after the
renew deadline, as in a plain leader-elected Manager), while the sharded controller's
reconcile, which never depended on that Lease, finishes; the member then leaves the group
and `run()` raises `LeadershipLost` (docs/sharding.md, "Leader-elected controllers in a
sharded Manager")."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from fastctl.errors import LeadershipLost
from fastctl.kube._watcher import WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.manager import Manager, _manager
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._member import Drainer, ShardMember
from fastctl.testing import VirtualTimeLoop, run_virtual

from .fake_lease import LeaseStore
from .test_controller_relist import WIDGET, client, listing, widget
from .test_leader import _FakeLeases
from .test_manager_drain import _ElectorClient, manager_client
from .test_sharding_protocol import LeaseStore as GroupStore
from .test_sharding_protocol import Link

ELECTION = LeaderElection(
    "l", identity="me", lease_duration=3.0, renew_deadline=2.0, retry_period=0.3
)
SHARDING = Sharding(
    "g", identity="me", slots=4, lease_duration=3.0, renew_deadline=2.0, retry_period=0.3
)
SHARDED_WORK = 4.0  # the sharded reconcile's length: it outlives the leader Lease's loss


class Work:
    """One reconcile that runs for `seconds` (forever if None), noting when it started,
    was cancelled and ended."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.started: float | None = None
        self.cancelled: float | None = None
        self.ended: float | None = None

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> None:
        loop = asyncio.get_running_loop()
        if self.started is not None:
            return  # only the first reconcile is observed
        self.started = loop.time()
        try:
            await asyncio.sleep(1000 if self.seconds is None else self.seconds)
        except asyncio.CancelledError:
            self.cancelled = loop.time()
            raise
        finally:
            self.ended = loop.time()


async def one_widget(*args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
    """Every watch, sharded or not, lists one Widget and then waits."""
    for event in listing(widget("a", 0)):
        yield event
    await asyncio.Event().wait()


async def until(check: Callable[[], bool]) -> None:
    for _ in range(1000):  # 50 virtual seconds
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never happened")


class Setup:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lease = LeaseStore()
        self.group = GroupStore()
        self.leader_link = _FakeLeases(self.lease)

        def elector(api: Any, config: LeaderElection) -> LeaderElector:
            made = LeaderElector(api, config)
            made._leases = self.leader_link  # type: ignore[assignment]
            return made

        def member(api: Any, config: Sharding, *, drainer: Drainer) -> ShardMember:
            link = Link(self.group, random.Random(1))
            link.lossy = False
            return ShardMember(link, config, drainer=drainer)

        monkeypatch.setattr(_manager, "LeaderElector", elector)
        monkeypatch.setattr(_manager, "ShardMember", member)
        monkeypatch.setattr(_manager, "new_client", _ElectorClient)
        monkeypatch.setattr(_environment, "watcher", one_widget)
        monkeypatch.setattr(_run, "watcher", one_widget)


def mixed(elected: Work, sharded: Work) -> Manager:
    mgr = Manager(
        manager_client(),
        leader_election=ELECTION,
        sharding=SHARDING,
        metrics_port=None,
        probe_port=None,
    )
    mgr.add(Controller(client(), WIDGET, elected.reconcile, name="elected"), sharded=False)
    mgr.add(Controller(client(), WIDGET, sharded.reconcile, name="sharded"))
    return mgr


def test_a_lost_leader_lease_cancels_the_elected_at_once_and_drains_the_sharded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = Setup(monkeypatch)
    elected, sharded = Work(None), Work(SHARDED_WORK)
    mgr = mixed(elected, sharded)

    async def main() -> tuple[float, BaseException | None]:
        loop = VirtualTimeLoop.current()
        run = asyncio.create_task(mgr.run())
        await until(lambda: elected.started is not None and sharded.started is not None)
        assert mgr.member is not None
        assert mgr.member.serving == set(range(4))
        assert [c.shard is not None for c in mgr.controllers] == [False, True]
        await asyncio.sleep(0.1)
        cut = loop.time()
        setup.leader_link.cut()  # the leader Lease can no longer be renewed
        try:
            await run
        except LeadershipLost as exc:
            return cut, exc
        return cut, None

    cut, raised = run_virtual(main())
    assert isinstance(raised, LeadershipLost)
    # The elected reconcile: cancelled within the renew deadline of the last renewal.
    assert elected.cancelled is not None
    assert elected.cancelled <= cut + ELECTION.renew_deadline
    # The sharded one ran to its end, untouched by the leader Lease.
    assert sharded.started is not None
    assert sharded.cancelled is None
    assert sharded.ended is not None
    assert sharded.ended == pytest.approx(sharded.started + SHARDED_WORK)
    assert sharded.ended > elected.cancelled
    # Then the member left: its Lease publishes nothing and names no holder.
    lease = setup.group.leases[SHARDING.lease_name]
    assert lease["spec"].get("holderIdentity") in (None, "")
    assert setup.group.written_at[SHARDING.lease_name] >= sharded.ended


def test_the_elected_controller_waits_for_leadership_and_the_sharded_for_its_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another replica holds the leader Lease: the sharded controller reconciles, the
    elected one does not."""
    setup = Setup(monkeypatch)
    from fastctl.runtime.leader._rules import LeaseRecord

    setup.lease.create(LeaseRecord("other", 3))
    elected, sharded = Work(None), Work(None)
    mgr = mixed(elected, sharded)

    async def main() -> None:
        loop = VirtualTimeLoop.current()
        run = asyncio.create_task(mgr.run())
        await until(lambda: sharded.started is not None)
        for _ in range(20):  # the other's Lease is renewed behind our back
            await asyncio.sleep(0.5)
            lease = setup.lease.get()
            assert lease is not None
            lease["spec"]["renewTime"] = f"2026-01-01T00:00:{loop.time():09.6f}Z"
            setup.lease.put(lease)
        assert elected.started is None
        assert not mgr.is_leader
        mgr.shutdown()
        await run

    run_virtual(main())
    assert sharded.started is not None


def test_sharded_false_needs_both_modes() -> None:
    ctl = Controller(client(), WIDGET, Work(None).reconcile, name="x")
    for kwargs in ({"sharding": SHARDING}, {"leader_election": ELECTION}, {}):
        mgr = Manager(manager_client(), metrics_port=None, probe_port=None, **kwargs)
        with pytest.raises(ValueError, match=r"sharded=False\) needs a Manager with both"):
            mgr.add(ctl, sharded=False)
