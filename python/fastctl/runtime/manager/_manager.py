"""`fastctl.Manager`: several controllers, run as one production process.

The Manager

- runs each controller in an environment it builds (`Environment`): one shared watch and
  cache per (client, resource, namespace, options) among its controllers
  (`fastctl.runtime.manager._watches`), a leader gate, a shard assignment. Controllers may
  use different clients (several clusters): each then watches and caches its own cluster,
  while leader election and sharding use the Manager's own client (its cluster holds the
  Leases);
- with `leader_election`, keeps every cache warm on every replica but lets only the leader
  reconcile (followers queue their triggers, de-duplicated, and start when they lead); a
  leader that loses its lease stops at once: running reconciles are cancelled and `run()`
  raises `LeadershipLost`, so the process exits and is restarted as a follower (what
  controller-runtime does: two leaders must never act at once);
- with `sharding`, splits every controller's objects with the other replicas of the group
  (docs/sharding.md): each primary watch lists only the served slots and starts over when
  they change, a reconcile starts only while its object's slot is served, a slot that moves
  away is drained before it is released, and a tenure that runs out cancels the running
  reconciles at once;
- with both, the controllers added with ``add(controller, sharded=False)`` are leader-elected
  and the others sharded. A lost leader Lease cancels the leader-elected reconciles at once
  and, since the sharded ones never depended on that Lease, drains those gracefully and
  leaves the shard group before `run()` raises `LeadershipLost`. A Manager whose
  controllers are all sharded does not campaign for the leader Lease at all;
- with `rate_limit`, holds its clients' requests to that rate, shared by its controllers;
- serves ``/metrics`` (controllers, process, API requests), ``/healthz``, ``/readyz``
  and on request ``/debug/queue`` (`ServerOptions`, `fastctl.runtime.manager._servers`);
- starts other components of the process (`add_runnable`: a webhook server, say) before the
  controllers and stops them after, on every replica, leader or not, except those that
  need leader election (a `StorageMigration`): started once this replica leads
  (`fastctl.runtime.manager._runnables`);
- shuts down gracefully on SIGTERM/SIGINT or `shutdown()`: no new reconciles start, running
  ones get `drain_timeout` seconds to finish, then they are cancelled (a second signal
  cancels them at once); the lease is released so a successor takes over at once. If
  leadership ends during the drain, the leader-elected reconciles are cancelled at once and
  `run()` raises `LeadershipLost`;
- never releases the Lease while a plain-function reconcile of its own may still write: a
  thread cannot be cancelled, so when one outlives the cancellation (`fastctl._threads`),
  the Lease is left to expire, and ``fastctl run`` exits the process without waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry

from fastctl._options import pick
from fastctl._rate import RateLimit
from fastctl._threads import live_threads
from fastctl.errors import LeadershipLost
from fastctl.kube._lazy_rest import ApiClient, new_client
from fastctl.kube._throttle import limit_clients
from fastctl.runtime._debug_queue import DebugQueueServer
from fastctl.runtime._health import HealthServer
from fastctl.runtime._metrics import FastctlCollector
from fastctl.runtime._process_metrics import register_process_metrics
from fastctl.runtime._shared_watch import SharedWatch
from fastctl.runtime._signals import stop_on_signals
from fastctl.runtime._storage_migration import StorageMigrationCollector
from fastctl.runtime.controller import Controller
from fastctl.runtime.controller._environment import Environment
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.manager._collectors import LeaderCollector
from fastctl.runtime.manager._drain import cancel, describe
from fastctl.runtime.manager._drain import drain as _drain
from fastctl.runtime.manager._environments import build_environments
from fastctl.runtime.manager._roles import Role, Tasks
from fastctl.runtime.manager._runnables import Runnable, Started, needs_leader
from fastctl.runtime.manager._servers import ServerOptions, Servers
from fastctl.runtime.manager._watches import share_watches
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._metrics import ShardingCollector
from fastctl.runtime.sharding._rules import Sharding

__all__ = ["LeadershipLost", "Manager", "Runnable"]

log = logging.getLogger("fastctl.manager")

_DEFAULT_SERVERS = ServerOptions()


class Manager:
    """Runs controllers together (see the module docstring).

    The servers' options are `servers` (a `ServerOptions`); the two most set, `metrics_port`
    and `probe_port`, are also keywords (one or the other, not both)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        leader_election: LeaderElection | None = None,
        sharding: Sharding | None = None,
        metrics_port: int | None = _DEFAULT_SERVERS.metrics_port,
        probe_port: int | None = _DEFAULT_SERVERS.probe_port,
        servers: ServerOptions | None = None,
        drain_timeout: float = 30.0,
        registry: CollectorRegistry | None = None,
        rate_limit: RateLimit | None = None,
        tracing: bool | Any = False,
    ) -> None:
        self.client = client
        self.rate_limit = rate_limit  # set on the clients by `run` (`limit_clients`)
        self.tracing = tracing  # while `run` runs: True, a TracerProvider, False (tracing.md)
        self.leader_election = leader_election
        self.sharding = sharding
        self.servers: ServerOptions = pick(
            servers,
            ServerOptions(metrics_port=metrics_port, probe_port=probe_port),
            _DEFAULT_SERVERS,
            name="servers",
        )
        self.drain_timeout = drain_timeout
        self.member: ShardMember | None = None
        self.elector: LeaderElector | None = None
        self.registry = registry if registry is not None else CollectorRegistry()
        self.controllers: list[Controller] = []
        self.runnables: list[Runnable] = []
        self._unsharded: set[str] = set()  # names of the leader-elected ones, when sharding
        self._gates: dict[str, ShardGate] = {}
        self._running_servers = Servers(self.servers, tracing=tracing)  # made again by run
        self._member_client: ApiClient | None = None
        self._elector_client: ApiClient | None = None
        self._settled = False
        self._leading = asyncio.Event()
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._running = False
        self._failed: str | None = None
        self._led = False  # this replica has led (so a loss in the drain is a lost lease)
        self.registry.register(FastctlCollector(lambda: self.controllers))
        self.registry.register(LeaderCollector(lambda: self.leader_election, lambda: self.elector))
        self.registry.register(ShardingCollector(lambda: self.member, self._gates.items))
        register_process_metrics(self.registry)  # process_*, python_*, rest_client_*
        self.registry.register(StorageMigrationCollector())
        self._started = Started()  # the runnables, stopped in reverse (`_runnables`)

    # -- configuring ------------------------------------------------------------------------

    def add(self, controller: Controller, *, sharded: bool = True) -> Manager:
        """Add a controller (before `run`); returns the manager so calls chain.

        In a Manager with both `sharding` and `leader_election`, ``sharded=False`` makes
        this controller leader-elected (it reconciles all its objects, on the leader only)
        while the others are sharded: for work that must see everything at once, or that
        is too small to split."""
        if not sharded and (self.sharding is None or self.leader_election is None):
            raise ValueError(
                "add(controller, sharded=False) needs a Manager with both sharding= and "
                "leader_election=: without leader election the controller would run on "
                "every replica at once"
            )
        if self._running:
            raise RuntimeError("Manager is running: add controllers before run()")
        if not isinstance(controller, Controller):
            raise TypeError(f"expected a fastctl.Controller, got {type(controller).__name__}")
        if any(c.name == controller.name for c in self.controllers):
            raise ValueError(
                f"two controllers named {controller.name!r}: give one a name= (metrics and "
                "logs tell controllers apart by name)"
            )
        self.controllers.append(controller)
        if not sharded:
            self._unsharded.add(controller.name)
        return self

    def add_runnable(self, runnable: Runnable) -> Manager:
        """Add a component with ``async start()`` and ``async stop()`` (before `run`); it
        runs on every replica, unless its ``need_leader_election()`` says it runs on the
        leader only (`fastctl.runtime.manager._runnables`). Returns the manager."""
        if self._running:
            raise RuntimeError("Manager is running: add runnables before run()")
        self.runnables.append(runnable)
        return self

    def _sharded(self, controller: Controller) -> bool:
        """Its objects are split between the replicas of the shard group."""
        return self.sharding is not None and controller.name not in self._unsharded

    def _elected(self, controller: Controller) -> bool:
        """It reconciles only while this replica leads."""
        return self.leader_election is not None and not self._sharded(controller)

    # -- what it says about itself ----------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_election is None or self._leading.is_set()

    @property
    def health(self) -> HealthServer | None:
        """The probe server (``/healthz``, ``/readyz``), once `run` started it."""
        return self._running_servers.health

    @property
    def metrics_server(self) -> HealthServer | None:
        """The ``/metrics`` server, once `run` started it."""
        return self._running_servers.metrics

    @property
    def debug_queue(self) -> DebugQueueServer | None:
        """The ``/debug/queue`` server, once `run` started it (with `debug_queue_port`)."""
        return self._running_servers.debug_queue

    def _alive(self) -> bool:
        """/healthz: false once a controller, watch or the elector has died."""
        return self._failed is None

    def is_ready(self) -> bool:
        """Caches synced (whether or not this replica leads), every runnable with an
        ``is_ready()`` ready and, sharded, the member's first assignment served."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """`is_ready`, with the first reason it is not (what ``/readyz`` answers)."""
        if self.member is not None and not self._settled:
            self._settled = self.member.settled
            if not self._settled:
                return False, "shard member: first assignment not served yet"
        for ctl in self.controllers:
            if not ctl.is_ready:
                return False, f"controller {ctl.name}: caches not synced"
        for runnable in self.runnables:
            check = getattr(runnable, "is_ready", None)
            if not callable(check):
                continue
            result = check()
            ok, reason = result if isinstance(result, tuple) else (bool(result), "")
            if not ok:
                return False, reason or f"{type(runnable).__name__} not ready"
        return True, "ready"

    # -- running ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop gracefully (see the module docstring)."""
        self._stop.set()

    def _cancel_at_once(self) -> None:
        """A second signal: cut the drain short."""
        self._abort.set()
        self._stop.set()

    async def run(self) -> None:
        """Run every controller until `shutdown()`, SIGTERM or SIGINT."""
        if not self.controllers and not self.runnables:
            raise ValueError("Manager has no controllers: add one with manager.add(...)")
        self._running = True
        loop = asyncio.get_running_loop()
        limit_clients([self.client, *(c.client for c in self.controllers)], self.rate_limit)
        shared = share_watches(self.controllers, sharded=self._sharded)
        if self.servers.debug_queue_port is not None:
            for ctl in self.controllers:
                ctl.record_reasons()
        if self.sharding is not None and any(self._sharded(c) for c in self.controllers):
            # Its own client, like the elector's: renewals never wait for a connection.
            self._member_client = new_client(self.client.configuration)
            self.member = ShardMember(self._member_client, self.sharding, drainer=self._drain_slots)
        envs = build_environments(
            self.controllers,
            shared.sources,
            sharded=self._sharded,
            elected=self._elected,
            leading=self._leading,
            member=self.member,
            sharding=self.sharding,
            gates=self._gates,
        )
        self._running_servers = Servers(self.servers, tracing=self.tracing)
        tasks = Tasks()
        drain_gracefully = True
        lost_in_drain = False
        with stop_on_signals("manager", graceful=self.shutdown, at_once=self._cancel_at_once):
            try:
                await self._running_servers.start(
                    self.client,
                    self.registry,
                    live=self._alive,
                    ready=self.readiness,
                    controllers=lambda: self.controllers,
                )
                await self._started.start(*(r for r in self.runnables if not self._deferred(r)))
                self._start(loop, tasks, shared.watches, envs)
                drain_gracefully, failure = await self._watch_tasks(loop, tasks)
                if failure is not None:
                    raise failure
            finally:
                try:
                    lost_in_drain = await self._stop_everything(
                        tasks, shared.watches, drain=drain_gracefully
                    )
                finally:
                    await self._started.stop()
                    self._running = False
        if lost_in_drain and self._led:
            raise LeadershipLost(
                "lost the leader lease during the graceful drain; the running reconciles "
                "were cancelled at once"
            )

    def _start(
        self,
        loop: asyncio.AbstractEventLoop,
        tasks: Tasks,
        watches: tuple[SharedWatch, ...],
        envs: dict[str, Environment],
    ) -> None:
        for watch in watches:
            tasks.add(Role.SHARED_WATCH, watch.start(), watch.name)
        for ctl in self.controllers:
            run = ctl.run(handle_signals=False, environment=envs[ctl.name])
            tasks.add(Role.CONTROLLER, loop.create_task(run, name=ctl.name), ctl.name, ctl)
        if self.member is not None:
            tasks.add(Role.SHARD_MEMBERSHIP, loop.create_task(self.member.run()))
        if self._campaigns():
            # Its own client, so renewals never queue behind watches for a connection
            # of the shared pool (each watch holds one for its whole life).
            self._elector_client = new_client(self.client.configuration)
            assert self.leader_election is not None
            self.elector = LeaderElector(self._elector_client, self.leader_election)
            tasks.add(Role.LEADER_ELECTION, loop.create_task(self.elector.run()))
            tasks.add(Role.LEADERSHIP, loop.create_task(self._follow_leadership()))

    async def _watch_tasks(
        self, loop: asyncio.AbstractEventLoop, tasks: Tasks
    ) -> tuple[bool, BaseException | None]:
        """Wait for a stop, or for a task to end. Returns whether the controllers may drain
        gracefully, and the failure of a task that failed."""
        stop = loop.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait([stop, *tasks.all()], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        for task in done:
            if task is stop:
                continue
            what = tasks.of(task)  # type: ignore[arg-type]
            exc = task.exception() if not task.cancelled() else None
            if exc is not None:
                self._failed = str(what)
                # Without the lease (lost, or the elector failed), not one more write:
                # cancel at once, no drain.
                leadership = isinstance(exc, LeadershipLost) or what.role in (
                    Role.LEADER_ELECTION,
                    Role.LEADERSHIP,
                )
                return not leadership, exc
            if what.role is not Role.LEADERSHIP:
                log.warning("%s ended unexpectedly", what)
        return True, None

    def _campaigns(self) -> bool:
        """Whether to campaign for the leader Lease: with leader election, unless every
        controller is sharded (then nothing depends on the Lease, and losing it must not
        restart a replica)."""
        if self.leader_election is None:
            return False
        return (
            self.sharding is None
            or any(self._elected(c) for c in self.controllers)
            or any(needs_leader(r) for r in self.runnables)
        )

    def _deferred(self, runnable: Runnable) -> bool:
        """Started once this replica leads, not at once."""
        return needs_leader(runnable) and self._campaigns()

    async def _drain_slots(self, slots: frozenset[int], urgent: bool) -> None:
        """The member's drainer: every controller's reconciles of `slots` have ended."""
        await asyncio.gather(*(gate.drain(slots, urgent) for gate in self._gates.values()))

    async def _follow_leadership(self) -> None:
        """Open the gate when this replica leads; raise LeadershipLost when it stops."""
        assert self.elector is not None
        term = await self.elector.wait_leading()
        log.info("leading (%s, term %d): reconciling", self.elector.identity, term)
        self._leading.set()
        self._led = True
        await self._started.start(*(r for r in self.runnables if self._deferred(r)))
        await self.elector.wait_lost(term)
        self._leading.clear()
        if not self._stop.is_set():  # during the drain, `drain` acts on this task's end
            raise LeadershipLost(
                "lost the leader lease (could not renew within the renew deadline); "
                "stopped reconciling"
            )

    async def _stop_everything(
        self, tasks: Tasks, shared: tuple[SharedWatch, ...], *, drain: bool
    ) -> bool:
        """Drain, cancel everything, release the lease if that is safe. Without `drain`
        (leadership ended) the leader-elected controllers are cancelled at once and only
        the sharded ones drain: their safety rests on the member's tenure, not on the
        leader Lease. Returns True if leadership ended during the drain."""
        controllers = tasks.with_role(Role.CONTROLLER)
        elected = {
            t.task
            for t in tasks
            if t.role is Role.CONTROLLER
            and t.controller is not None
            and self._elected(t.controller)
        }
        for ctl in self.controllers:
            ctl.shutdown()
        leadership = tasks.leadership()
        if not drain:
            await cancel(elected)
            controllers -= elected
            leadership = set()
        lost = False
        if controllers:
            lost = await _drain(
                controllers,
                leadership=leadership,
                elected=elected,
                timeout=self.drain_timeout,
                abort=self._abort,
                what=lambda task: describe(tasks.of(task)),
            )
        if self.member is not None and not live_threads():
            # Graceful: the reconciles have drained; publish nothing so that the others
            # take over at once. Otherwise the Lease is left to expire (a crash's path).
            await self.member.leave()
        await cancel(tasks.all())
        for watch in shared:
            await watch.stop()
        if self.elector is not None:
            threads = live_threads()
            if threads:
                # A thread cannot be cancelled: it may still write. Releasing would let a
                # successor start at once; leaving the Lease to expire gives it
                # lease_duration, and `fastctl run` ends the process (and the thread) now.
                log.error(
                    "%d plain-function reconcile(s) still running in threads: not releasing "
                    "the lease (it expires on its own); exit the process to stop them",
                    threads,
                )
            else:
                await self.elector.release()
        for client in (self._elector_client, self._member_client):
            if client is not None:
                await client.close()
        await self._running_servers.stop()
        return lost
