"""A Manager's life on a virtual clock, with in-memory Leases: the clients it makes for its
elector and its shard member, when it campaigns, what a lost lease does before and during
the drain, a failing elector or controller, a task that ends unexpectedly, the member's
drains and readiness, and a thread that outlives the drain."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import generate_latest

from fastctl.errors import LeadershipLost
from fastctl.kube._watcher import WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.manager import Manager, _manager, _watches
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import Drainer, ShardMember
from fastctl.testing import run_virtual

from .test_controller_relist import CHILD, WIDGET, Feed, client, listing, widget
from .test_leader import _FakeLeases
from .test_manager_drain import Lease
from .test_manager_options import Component
from .test_sharding_protocol import LeaseStore as GroupStore
from .test_sharding_protocol import Link

ELECTION = LeaderElection(
    "l", identity="me", lease_duration=3.0, renew_deadline=2.0, retry_period=0.3
)
SHARDING = Sharding(
    "g", identity="me", slots=4, lease_duration=3.0, renew_deadline=2.0, retry_period=0.3
)


class OwnClient:
    """Stands in for the ApiClient a Manager makes for its elector or its member."""

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class Cluster:
    """Everything a Manager reaches, faked: the clients it makes, the leader Lease, the
    shard group's Leases, and every watch (a feed per kind)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lease = Lease()
        self.link = _FakeLeases(self.lease)
        self.group = GroupStore()
        self.elector_clients: list[Any] = []
        self.member_clients: list[Any] = []
        self.drainers: list[Drainer] = []
        self.member_type: type[ShardMember] = ShardMember
        self.feeds: dict[str, Feed] = defaultdict(Feed)

        def elector(api: Any, config: LeaderElection) -> LeaderElector:
            self.elector_clients.append(api)
            made = LeaderElector(api, config)
            made._leases = self.link  # type: ignore[assignment]
            return made

        def member(api: Any, config: Sharding, *, drainer: Drainer) -> ShardMember:
            self.member_clients.append(api)
            self.drainers.append(drainer)
            link = Link(self.group, random.Random(1))
            link.lossy = False
            return self.member_type(link, config, drainer=drainer)

        self.watches: list[tuple[Any, str, str | None]] = []

        def watcher(api: Any, resource: Any, **kw: Any) -> AsyncIterator[WatchEvent]:
            self.watches.append((api, resource.kind, kw.get("namespace")))
            return self.feeds[resource.kind].events()

        monkeypatch.setattr(_manager, "LeaderElector", elector)
        monkeypatch.setattr(_manager, "ShardMember", member)
        monkeypatch.setattr(_manager, "new_client", OwnClient)
        monkeypatch.setattr(_environment, "watcher", watcher)
        monkeypatch.setattr(_run, "watcher", watcher)
        monkeypatch.setattr(_watches, "watcher", watcher)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    return Cluster(monkeypatch)


def manager_client() -> ApiClient:
    api = client()
    api.configuration = object()  # type: ignore[assignment]  # what the own clients copy
    return api


class Work:
    """Reconciles that run for `seconds` (forever: None), noting per object when each
    started, was cancelled and ended (the first run of each only)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.started: dict[str, float] = {}
        self.cancelled: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        loop = asyncio.get_running_loop()
        if name in self.started:
            return
        self.started[name] = loop.time()
        try:
            await asyncio.sleep(1e6 if self.seconds is None else self.seconds)
        except asyncio.CancelledError:
            self.cancelled[name] = loop.time()
            raise
        finally:
            self.ended[name] = loop.time()


async def until(check: Any, what: str) -> None:
    for _ in range(1000):  # 50 virtual seconds
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _make(**kw: Any) -> Manager:
    return Manager(manager_client(), metrics_port=None, probe_port=None, **kw)


def _messages(caplog: pytest.LogCaptureFixture, logger: str = "fastctl.manager") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


async def _run_to_error(run: asyncio.Task[None]) -> BaseException | None:
    try:
        await run
    except Exception as exc:
        return exc
    return None


# -- leading -------------------------------------------------------------------------------


def test_a_leader_elected_manager_campaigns_on_a_client_of_its_own_and_releases_at_the_end(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    work = Work(1.0)
    mgr = _make(leader_election=ELECTION).add(
        Controller(client(), WIDGET, work.reconcile, name="widgets")
    )
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> set[str]:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.ended, "the reconcile")
        names = {t.get_name() for t in asyncio.all_tasks()}
        with pytest.raises(RuntimeError) as adding:
            mgr.add(Controller(client(), CHILD, work.reconcile, name="late"))
        assert str(adding.value) == "Manager is running: add controllers before run()"
        with pytest.raises(RuntimeError) as adding:
            mgr.add_runnable(Component())
        assert str(adding.value) == "Manager is running: add runnables before run()"
        mgr.shutdown()
        await run
        return names

    names = run_virtual(main())
    assert "widgets" in names  # each controller runs in a task named after it
    (own,) = cluster.elector_clients
    assert isinstance(own, OwnClient)
    assert own.configuration is mgr.client.configuration
    assert own.closed
    assert cluster.lease.released_at is not None
    assert "leading (me, term 1): reconciling" in _messages(caplog)
    mgr.add(Controller(client(), CHILD, work.reconcile, name="later"))  # not running now
    mgr.add_runnable(Component())


def test_controllers_of_one_client_and_namespace_share_one_watch_opened_there(
    cluster: Cluster,
) -> None:
    api = client()
    mgr = _make()
    for name in ("a", "b"):
        mgr.add(Controller(api, WIDGET, Work(0.0).reconcile, name=name, namespace="team"))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(mgr.is_ready, "ready")
        mgr.shutdown()
        await run

    cluster.feeds["Widget"].push(*listing())
    run_virtual(main())
    assert cluster.watches == [(api, "Widget", "team")]


def test_a_lost_lease_cancels_the_reconciles_at_once_and_run_raises(cluster: Cluster) -> None:
    work = Work(None)
    mgr = _make(leader_election=ELECTION, drain_timeout=60).add(
        Controller(client(), WIDGET, work.reconcile, name="widgets")
    )
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> tuple[float, BaseException | None]:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.started, "the reconcile")
        cut = asyncio.get_running_loop().time()
        cluster.link.cut()
        return cut, await _run_to_error(run)

    cut, raised = run_virtual(main())
    assert isinstance(raised, LeadershipLost)
    assert str(raised) == (
        "lost the leader lease (could not renew within the renew deadline); stopped reconciling"
    )
    assert work.cancelled["a"] <= cut + ELECTION.renew_deadline


def _mixed(elected: Work, sharded: Work, **kw: Any) -> Manager:
    mgr = _make(leader_election=ELECTION, sharding=SHARDING, **kw)
    mgr.add(Controller(client(), WIDGET, elected.reconcile, name="elected"), sharded=False)
    mgr.add(Controller(client(), CHILD, sharded.reconcile, name="sharded"))
    return mgr


def test_leadership_lost_during_the_drain_cuts_the_elected_and_lets_the_sharded_finish(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")
    elected, sharded = Work(None), Work(8.0)
    mgr = _mixed(elected, sharded, drain_timeout=60)
    cluster.feeds["Widget"].push(*listing(widget("e", 0)))
    cluster.feeds["ConfigMap"].push(*listing({**widget("s", 0), "kind": "ConfigMap"}))

    async def main() -> tuple[float, BaseException | None]:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "e" in elected.started and "s" in sharded.started, "both running")
        mgr.shutdown()
        await asyncio.sleep(0.1)
        cut = asyncio.get_running_loop().time()
        cluster.link.cut()
        return cut, await _run_to_error(run)

    cut, raised = run_virtual(main())
    assert isinstance(raised, LeadershipLost)
    assert str(raised) == (
        "lost the leader lease during the graceful drain; the running reconciles were "
        "cancelled at once"
    )
    assert elected.cancelled["e"] <= cut + ELECTION.renew_deadline
    assert "s" not in sharded.cancelled
    assert sharded.ended["s"] == sharded.started["s"] + 8.0
    assert _messages(caplog) == [
        "leadership ended during the drain: cancelling 1 leader-elected controller(s) at "
        "once: elected (reconciling 1: default/e)"
    ]


def test_a_manager_of_runnables_only_campaigns_and_stops_cleanly(cluster: Cluster) -> None:
    """Leader election with no controller still campaigns (a component may depend on the
    lease), and a graceful stop raises nothing."""
    mgr = _make(leader_election=ELECTION).add_runnable(Component())

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: mgr.is_leader, "leading")
        mgr.shutdown()
        await run

    run_virtual(main())
    assert cluster.lease.released_at is not None


@pytest.mark.parametrize("all_sharded", [True, False])
def test_a_sharded_manager_campaigns_only_for_elected_controllers_and_shards_only_sharded_ones(
    cluster: Cluster, all_sharded: bool
) -> None:
    work = Work(None)
    mgr = _make(leader_election=ELECTION, sharding=SHARDING)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="w"), sharded=all_sharded)
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.started, "the reconcile")
        assert (mgr.elector is None) is all_sharded
        assert (mgr.member is None) is not all_sharded
        mgr.shutdown()
        await run

    run_virtual(main())


def test_a_sharded_manager_gets_ready_when_its_first_assignment_is_served(
    cluster: Cluster,
) -> None:
    """Its member uses a client of its own (closed at the end), the collector reports the
    member and the controller's gate, and ``/readyz`` waits for the first assignment."""
    work = Work(None)
    mgr = _make(sharding=SHARDING).add(Controller(client(), WIDGET, work.reconcile, name="w"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))
    readiness: list[tuple[bool, str]] = []

    async def main() -> str:
        run = asyncio.create_task(mgr.run())
        await until(lambda: mgr.member is not None, "the member")
        readiness.append(mgr.readiness())
        await until(mgr.is_ready, "ready")
        readiness.append(mgr.readiness())
        text = generate_latest(mgr.registry).decode()
        mgr.shutdown()
        await run
        return text

    text = run_virtual(main())
    assert readiness == [
        (False, "shard member: first assignment not served yet"),
        (True, "ready"),
    ]
    (own,) = cluster.member_clients
    assert isinstance(own, OwnClient)
    assert own.configuration is mgr.client.configuration
    assert own.closed
    assert 'fastctl_shard_slots_served{group="g"} 4.0' in text
    assert 'controller="w"' in text


def test_an_urgent_drain_of_slots_cancels_their_reconciles_only(cluster: Cluster) -> None:
    """What the member asks when a slot moves away with no time left: every controller's
    reconciles of those slots are cancelled, and the others run on."""
    work = Work(None)
    mgr = _make(sharding=SHARDING, drain_timeout=1.0)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="w"))
    probe = ShardGate(_Everything(), "uid", SHARDING.slots)
    objs = {slot: _widget_in(probe, slot) for slot in (0, 1)}
    cluster.feeds["Widget"].push(*listing(*objs.values()))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: len(work.started) == 2, "both reconciles")
        (drainer,) = cluster.drainers
        await drainer(frozenset({0}), True)
        assert set(work.cancelled) == {objs[0]["metadata"]["name"]}
        mgr.shutdown()
        await run

    run_virtual(main())


class _Everything:
    def serves(self, slot: int, now: float | None = None) -> bool:
        return True


def _widget_in(gate: ShardGate, slot: int) -> dict[str, Any]:
    for i in range(10_000):
        obj = widget(f"w{slot}-{i}", 0)
        obj["metadata"]["uid"] = f"uid-{slot}-{i}"
        if gate.object_slot(obj) == slot:
            return obj
    raise AssertionError("no uid found")


# -- failures and unexpected ends -----------------------------------------------------------


class BrokenElector:
    """Leads at once, then its loop fails."""

    def __init__(self, api: Any, config: LeaderElection) -> None:
        self.identity = config.identity
        self.is_leader = True
        self._lost = asyncio.Event()

    async def wait_leading(self) -> int:
        return 1

    async def wait_lost(self, term: int | None = None) -> None:
        await self._lost.wait()

    async def run(self) -> None:
        await asyncio.sleep(1.0)
        raise RuntimeError("elector broke")

    async def release(self) -> None:
        pass


def test_a_failing_elector_cancels_the_elected_reconciles_at_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_manager, "LeaderElector", BrokenElector)
    work = Work(None)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> BaseException | None:
        return await _run_to_error(asyncio.create_task(mgr.run()))

    raised = run_virtual(main())
    assert isinstance(raised, RuntimeError)
    assert str(raised) == "elector broke"
    assert work.cancelled["a"] < 2.0  # when the elector failed (1 s), not after a 60 s drain


def test_a_controller_that_ends_unexpectedly_stops_the_manager_with_a_warning(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")
    ctl = Controller(client(), WIDGET, Work(0.0).reconcile, name="widgets")
    mgr = _make().add(ctl)
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await asyncio.sleep(1.0)
        ctl.shutdown()  # from outside the Manager
        await run

    run_virtual(main())
    assert _messages(caplog) == ["controller widgets ended unexpectedly"]


class FailingFollower(BrokenElector):
    """Never leads; its loop fails after a second."""

    async def wait_leading(self) -> int:
        await asyncio.Event().wait()
        return 0


def test_an_elector_that_never_led_and_ends_in_the_drain_is_no_lost_lease(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's elector fails while the sharded reconciles drain: nothing led, so
    nothing was lost; the stop stays graceful."""
    monkeypatch.setattr(_manager, "LeaderElector", FailingFollower)
    elected, sharded = Work(None), Work(2.0)
    mgr = _mixed(elected, sharded, drain_timeout=60)
    cluster.feeds["ConfigMap"].push(*listing({**widget("s", 0), "kind": "ConfigMap"}))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "s" in sharded.started, "the sharded reconcile")
        mgr.shutdown()
        await run  # no LeadershipLost

    run_virtual(main())
    assert elected.started == {}
    assert sharded.ended["s"] == sharded.started["s"] + 2.0


class EndingMember(ShardMember):
    async def run(self) -> None:
        return None


def test_a_member_loop_that_ends_unexpectedly_stops_the_manager_with_a_warning(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")
    cluster.member_type = EndingMember
    mgr = _make(sharding=SHARDING).add(Controller(client(), WIDGET, Work(0.0).reconcile))
    run_virtual(mgr.run())
    assert _messages(caplog) == ["shard membership ended unexpectedly"]


def test_a_shared_watch_that_ends_unexpectedly_stops_the_manager_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")

    async def ends(*_: Any, **__: Any) -> AsyncIterator[WatchEvent]:
        for event in listing(widget("a", 0)):
            yield event

    monkeypatch.setattr(_environment, "watcher", ends)
    monkeypatch.setattr(_watches, "watcher", ends)
    api = client()
    mgr = _make()
    for name in ("a", "b"):
        mgr.add(Controller(api, WIDGET, Work(0.0).reconcile, name=name))
    run_virtual(mgr.run())
    assert _messages(caplog) == [f"shared watch {WIDGET} ended unexpectedly"]


# -- a thread that outlives the drain ---------------------------------------------------------


async def test_a_thread_that_outlives_the_drain_keeps_the_lease_held(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain-function reconcile cannot be cancelled: the Lease is left to expire rather
    than released while it may still write (real time: a thread does not follow a virtual
    clock; the drain timeout is short so the test does not wait)."""
    caplog.set_level(logging.ERROR, "fastctl.manager")
    cluster = Cluster(monkeypatch)
    go_on, entered = threading.Event(), threading.Event()

    def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        entered.set()
        go_on.wait()

    fast = LeaderElection(
        "l", identity="me", lease_duration=1.0, renew_deadline=0.3, retry_period=0.05
    )
    mgr = _make(leader_election=fast, drain_timeout=0.01)
    mgr.add(Controller(client(), WIDGET, reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))
    run = asyncio.create_task(mgr.run())
    try:
        for _ in range(2000):
            if entered.is_set():
                break
            await asyncio.sleep(0.005)
        assert entered.is_set()
        mgr.shutdown()
        await run
    finally:
        go_on.set()
    assert cluster.lease.released_at is None
    assert _messages(caplog) == [
        "1 plain-function reconcile(s) still running in threads: not releasing the lease "
        "(it expires on its own); exit the process to stop them"
    ]


class LeaderOnly(Component):
    """A runnable that needs leader election (a storage migration, say), noting when it
    started and whether its Manager led then."""

    def __init__(self, mgr: Manager) -> None:
        super().__init__()
        self.mgr = mgr
        self.leading: bool | None = None
        self.at: float | None = None
        self.stopped = False

    def need_leader_election(self) -> bool:
        return True

    async def start(self) -> None:
        self.leading = self.mgr.is_leader
        self.at = asyncio.get_running_loop().time()
        await super().start()

    async def stop(self) -> None:
        self.stopped = True


def test_a_runnable_that_needs_leader_election_starts_once_the_replica_leads(
    cluster: Cluster,
) -> None:
    """Another replica holds the Lease: the leader-only runnable waits until it expires
    and this one leads; the plain runnable started at once. Both stop at the end."""
    from fastctl.runtime.leader._rules import LeaseRecord

    mgr = _make(leader_election=ELECTION)
    everywhere = Component()
    only_leader = LeaderOnly(mgr)
    mgr.add_runnable(everywhere).add_runnable(only_leader)
    cluster.lease.create(LeaseRecord("other", 3))

    async def main() -> float:
        started = asyncio.get_running_loop().time()
        run = asyncio.create_task(mgr.run())
        await until(lambda: everywhere.started, "the plain runnable")
        await asyncio.sleep(2.0)
        assert not only_leader.started, "not while another replica holds the Lease"
        await until(lambda: only_leader.started, "the leader-only runnable")
        mgr.shutdown()
        await run
        return started

    started = run_virtual(main())
    assert only_leader.leading is True
    assert only_leader.at is not None
    assert only_leader.at - started >= 3.0
    assert only_leader.stopped


@pytest.mark.parametrize("election", [None, ELECTION])
def test_a_leader_only_runnable_starts_at_once_without_election_and_makes_sharded_ones_campaign(
    cluster: Cluster, election: LeaderElection | None
) -> None:
    """Without leader election it starts with the others; with sharding and every
    controller sharded, it makes the Manager campaign (else it would never start)."""
    mgr = _make(leader_election=election, sharding=SHARDING if election else None)
    work = Work(None)
    if election is not None:
        mgr.add(Controller(client(), WIDGET, work.reconcile, name="w"))
    only_leader = LeaderOnly(mgr)
    mgr.add_runnable(only_leader)

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: only_leader.started, "the leader-only runnable")
        assert (mgr.elector is not None) is (election is not None)
        mgr.shutdown()
        await run

    run_virtual(main())
    assert only_leader.leading is True
