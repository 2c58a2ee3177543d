"""`fastctl.Manager`: several controllers on one client, run as a production process.

The Manager

- shares one watch and one cache per resource among its controllers (`SharedWatch`);
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
  leaves the shard group before `run()` raises `LeadershipLost` (the process exits and
  comes back as a follower and a new member);
- serves ``/metrics`` on `metrics_port` (8443), by default over HTTPS and only to callers
  the cluster's RBAC allows to ``get`` ``/metrics`` (a TokenReview and a
  SubjectAccessReview per new token, cached: `fastctl.runtime._metrics_auth`), with a
  self-signed certificate made at start or `metrics_certificate` (files reloaded when they
  change); ``metrics_secure=False`` serves plain HTTP to anyone, an explicit opt-out;
- serves ``/healthz`` and ``/readyz`` in plain HTTP on their own `probe_port` (8081), so a
  liveness probe never depends on the metrics' TLS or on the API server answering reviews
  (ready: caches synced and every runnable that can say so ready, such as a managed
  webhook server);
- serves ``/debug/queue`` (every controller's queue, and why each object is queued, as JSON
  for ``fastctl inspect``) on `debug_queue_port` when given (off by default), bound to
  `debug_queue_host` (``127.0.0.1``) and answering loopback clients only unless that host
  is not a loopback address (`fastctl.runtime._debug_queue`);
- starts other components of the process (`add_runnable`: a webhook server, say) before the
  controllers and stops them after, on every replica, leader or not;
- shuts down gracefully on SIGTERM/SIGINT or `shutdown()`: no new reconciles start, running
  ones get `drain_timeout` seconds to finish, then they are cancelled; the lease is released
  so a successor takes over at once. If leadership ends during the drain (the lease is lost,
  or the elector fails), the running reconciles are cancelled at once and `run()` raises
  `LeadershipLost`;
- never releases the Lease while a plain-function reconcile may still write: a thread
  cannot be cancelled, so when one outlives the cancellation (`fastctl._threads`), the
  Lease is left to expire, and ``fastctl run`` exits the process without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fastctl._threads import live_threads
from fastctl._tls import ServingCertificate
from fastctl.errors import LeadershipLost
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import WatchConfig, WatchEvent, watcher
from fastctl.runtime._controller import Controller
from fastctl.runtime._debug_queue import DebugQueueServer, is_loopback
from fastctl.runtime._health import HealthServer
from fastctl.runtime._metrics import FastctlCollector
from fastctl.runtime._metrics_auth import MetricsAuthorizer
from fastctl.runtime._shared_watch import SharedWatch
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._metrics import ShardingCollector
from fastctl.runtime.sharding._rules import Sharding

__all__ = ["LeadershipLost", "Manager", "Runnable"]

log = logging.getLogger("fastctl.manager")

_WatchKey = tuple[Resource, str | None, WatchConfig]
"""What makes two controllers' watches of a resource the same: (resource, namespace, the
watch options)."""


class Runnable(Protocol):
    """A component the Manager starts before its controllers and stops after them. One
    that also has ``is_ready()`` (a bool, or ``(bool, reason)``) holds ``/readyz`` until it
    says so: a webhook server that does not serve yet makes the replica not ready."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class Manager:
    """Runs controllers together (see the module docstring)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        leader_election: LeaderElection | None = None,
        metrics_port: int | None = 8443,
        metrics_host: str = "0.0.0.0",
        metrics_secure: bool = True,
        metrics_certificate: ServingCertificate | None = None,
        probe_port: int | None = 8081,
        probe_host: str = "0.0.0.0",
        drain_timeout: float = 30.0,
        registry: CollectorRegistry | None = None,
        namespace: str | None = None,
        sharding: Sharding | None = None,
        debug_queue_port: int | None = None,
        debug_queue_host: str = "127.0.0.1",
    ) -> None:
        self.client = client
        self.leader_election = leader_election
        self.sharding = sharding
        self.member: ShardMember | None = None
        self._member_client: ApiClient | None = None
        self._settled = False
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics_secure = metrics_secure
        self.metrics_certificate = metrics_certificate
        self.probe_port = probe_port
        self.probe_host = probe_host
        self.debug_queue_port = debug_queue_port
        self.debug_queue_host = debug_queue_host
        self.drain_timeout = drain_timeout
        self.namespace = namespace
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(FastctlCollector(lambda: self.controllers))
        self.controllers: list[Controller] = []
        self._unsharded: set[str] = set()  # names of the leader-elected ones, when sharding
        self.runnables: list[Runnable] = []
        self.health: HealthServer | None = None
        """The probe server (``/healthz``, ``/readyz``), once `run` started it."""
        self.metrics_server: HealthServer | None = None
        """The ``/metrics`` server, once `run` started it."""
        self.debug_queue: DebugQueueServer | None = None
        """The ``/debug/queue`` server, once `run` started it (with `debug_queue_port`)."""
        self._cert_watch: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        self._leading = asyncio.Event()
        self._stop = asyncio.Event()
        self._running = False
        self._failed: str | None = None
        self._elector_client: ApiClient | None = None
        self._led = False  # this replica has led (so a loss in the drain is a lost lease)
        self.registry.register(_LeaderCollector(self))
        self.registry.register(
            ShardingCollector(
                lambda: self.member,
                lambda: [(c.name, c.shard) for c in self.controllers if c.shard is not None],
            )
        )

    def _alive(self) -> bool:
        """/healthz: false once a controller, watch or the elector has died."""
        return self._failed is None

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

    def _sharded(self, controller: Controller) -> bool:
        """Its objects are split between the replicas of the shard group."""
        return self.sharding is not None and controller.name not in self._unsharded

    def _elected(self, controller: Controller) -> bool:
        """It reconciles only while this replica leads."""
        return self.leader_election is not None and not self._sharded(controller)

    def add_runnable(self, runnable: Runnable) -> Manager:
        """Add a component with ``async start()`` and ``async stop()`` (before `run`); it
        runs on every replica, whether it leads or not. Returns the manager."""
        if self._running:
            raise RuntimeError("Manager is running: add runnables before run()")
        self.runnables.append(runnable)
        return self

    @property
    def is_leader(self) -> bool:
        return self.leader_election is None or self._leading.is_set()

    def is_ready(self) -> bool:
        """Caches synced (whether or not this replica leads), every runnable with an
        ``is_ready()`` ready and, sharded, the member's first assignment served."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """`is_ready`, with the first reason it is not (what ``/readyz`` answers); sharded,
        not ready until the member has served its first assignment."""
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

    def shutdown(self) -> None:
        """Stop gracefully (see the module docstring)."""
        self._stop.set()

    def _share_watches(self) -> list[SharedWatch]:
        """One SharedWatch for every resource that more than one controller watches in the
        same namespace with the same watch options (`WatchConfig`): a controller shares a
        watch only when it would have watched the resource exactly so itself. Controllers
        that disagree (on `strip_managed_fields`, a label selector, ...) get one watch per
        set of options, so each cache holds what its controllers asked for."""
        uses: Counter[_WatchKey] = Counter()

        def watch_uses(ctl: Controller) -> list[tuple[int | None, _WatchKey]]:
            # A sharded primary watch lists only this replica's slots: never shared.
            return [
                (use, (resource, ctl.namespace, config))
                for use, resource, config in ctl._watch_uses()
                if use is not None or not self._sharded(ctl)
            ]

        for ctl in self.controllers:
            for _, key in watch_uses(ctl):
                uses[key] += 1
        shared: dict[_WatchKey, SharedWatch] = {}
        for ctl in self.controllers:
            for use, key in watch_uses(ctl):
                if uses[key] < 2:
                    continue
                if key not in shared:
                    shared[key] = _shared_watch(self.client, *key)
                ctl._use_shared_watch(use, shared[key])
        return list(shared.values())

    async def run(self) -> None:
        """Run every controller until `shutdown()`, SIGTERM or SIGINT."""
        if not self.controllers and not self.runnables:
            raise ValueError("Manager has no controllers: add one with manager.add(...)")
        self._running = True
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.shutdown)
                installed.append(sig)
        shared = self._share_watches()
        if self.debug_queue_port is not None:
            for ctl in self.controllers:
                ctl.record_reasons()
        for ctl in self.controllers:
            if self._elected(ctl):
                ctl._gate_on(self._leading)
        if self.sharding is not None and any(self._sharded(c) for c in self.controllers):
            # Its own client, like the elector's: renewals never wait for a connection.
            self._member_client = ApiClient(self.client.configuration)
            self.member = ShardMember(self._member_client, self.sharding, drainer=self._drain_slots)
            for ctl in [c for c in self.controllers if self._sharded(c)]:
                ctl._shard_on(
                    ShardGate(self.member, self.sharding.key, self.sharding.slots), self.member
                )
        tasks: dict[asyncio.Task[None], str] = {}
        drain = True
        lost_in_drain = False
        started: list[Runnable] = []
        try:
            await self._serve()
            for runnable in self.runnables:
                await runnable.start()
                started.append(runnable)
            for watch in shared:
                tasks[watch.start()] = f"shared watch {watch.name}"
            for ctl in self.controllers:
                tasks[loop.create_task(ctl.run(handle_signals=False), name=ctl.name)] = (
                    f"controller {ctl.name}"
                )
            lost: asyncio.Task[None] | None = None
            if self.member is not None:
                tasks[loop.create_task(self.member.run())] = "shard membership"
            if self.leader_election is not None:
                # Its own client, so renewals never queue behind watches for a connection
                # of the shared pool (each watch holds one for its whole life).
                self._elector_client = ApiClient(self.client.configuration)
                self.elector = LeaderElector(self._elector_client, self.leader_election)
                tasks[loop.create_task(self.elector.run())] = "leader election"
                lost = loop.create_task(self._follow_leadership())
                tasks[lost] = "leadership"
            stop = loop.create_task(self._wait_stop())
            done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            for task in done:
                if task is stop:
                    continue
                exc = task.exception() if not task.cancelled() else None
                if exc is not None:
                    self._failed = tasks[task]
                    # Without the lease (lost, or the elector failed), not one more write:
                    # cancel at once, no drain.
                    drain = not isinstance(exc, LeadershipLost) and task not in _leadership(tasks)
                    raise exc
                if task is not lost:
                    log.warning("%s ended unexpectedly", tasks[task])
        finally:
            lost_in_drain = await self._stop_everything(tasks, shared, drain=drain)
            for runnable in reversed(started):
                await runnable.stop()
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._running = False
        if lost_in_drain and self._led:
            raise LeadershipLost(
                "lost the leader lease during the graceful drain; the running reconciles "
                "were cancelled at once"
            )

    async def _serve(self) -> None:
        """Start the probe server, then the metrics server (see the module docstring)."""
        if self.probe_port is not None:
            self.health = HealthServer(
                self.probe_port,
                host=self.probe_host,
                live=self._alive,
                ready=self.readiness,
                metrics=False,
            )
            await self.health.start()
            log.info("serving /healthz, /readyz on port %d", self.health.port)
        if self.debug_queue_port is not None:
            self.debug_queue = DebugQueueServer(
                lambda: self.controllers,
                port=self.debug_queue_port,
                host=self.debug_queue_host,
                allow_remote=not _names_loopback(self.debug_queue_host),
            )
            await self.debug_queue.start()
        if self.metrics_port is None:
            return
        context, authorizer = None, None
        if self.metrics_secure:
            certificate = self.metrics_certificate or _self_signed()
            if self.metrics_certificate is not None:
                self._cert_watch = asyncio.get_running_loop().create_task(
                    certificate.watch(), name="metrics certificate reload"
                )
            context = certificate.ssl_context
            authorizer = MetricsAuthorizer(self.client)
        self.metrics_server = HealthServer(
            self.metrics_port,
            host=self.metrics_host,
            registry=self.registry,
            probes=False,
            ssl_context=context,
            authorizer=authorizer,
        )
        await self.metrics_server.start()
        log.info(
            "serving /metrics on port %d (%s)",
            self.metrics_server.port,
            "HTTPS, TokenReview and SubjectAccessReview" if context else "plain HTTP, no auth",
        )

    async def _drain_slots(self, slots: frozenset[int], urgent: bool) -> None:
        """The member's drainer: every controller's reconciles of `slots` have ended."""
        gates = [c.shard for c in self.controllers if c.shard is not None]
        await asyncio.gather(*(gate.drain(slots, urgent) for gate in gates))

    async def _wait_stop(self) -> None:
        await self._stop.wait()

    async def _follow_leadership(self) -> None:
        """Open the gate when this replica leads; raise LeadershipLost when it stops."""
        assert self.elector is not None
        term = await self.elector.wait_leading()
        log.info("leading (%s, term %d): reconciling", self.elector.identity, term)
        self._leading.set()
        self._led = True
        await self.elector.wait_lost(term)
        self._leading.clear()
        if not self._stop.is_set():  # during the drain, `_drain` acts on this task's end
            raise LeadershipLost(
                "lost the leader lease (could not renew within the renew deadline); "
                "stopped reconciling"
            )

    async def _stop_everything(
        self,
        tasks: dict[asyncio.Task[None], str],
        shared: Iterable[SharedWatch],
        *,
        drain: bool,
    ) -> bool:
        """Drain, cancel everything, release the lease if that is safe. Without `drain`
        (leadership ended) the leader-elected controllers are cancelled at once and only
        the sharded ones drain: their safety rests on the member's tenure, not on the
        leader Lease. Returns True if leadership ended during the drain."""
        controllers = {t for t, what in tasks.items() if what.startswith("controller ")}
        names = {c.name for c in self.controllers if self._elected(c)}
        elected = {t for t in controllers if t.get_name() in names}
        for ctl in self.controllers:
            ctl.shutdown()
        leadership = _leadership(tasks)
        if not drain:
            await _cancel(elected)
            controllers -= elected
            leadership = set()
        lost = False
        if controllers:
            lost = await self._drain(controllers, leadership, elected)
        if self.member is not None and not live_threads():
            # Graceful: the reconciles have drained; publish nothing so that the others
            # take over at once. Otherwise the Lease is left to expire (a crash's path).
            await self.member.leave()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
        if self._elector_client is not None:
            await self._elector_client.close()
        if self._member_client is not None:
            await self._member_client.close()
        if self._cert_watch is not None:
            self._cert_watch.cancel()
        for server in (self.metrics_server, self.health, self.debug_queue):
            if server is not None:
                await server.stop()
        return lost

    async def _drain(
        self,
        controllers: set[asyncio.Task[None]],
        leadership: set[asyncio.Task[None]],
        elected: set[asyncio.Task[None]],
    ) -> bool:
        """Let the controllers finish their running reconciles, for up to `drain_timeout`.
        If leadership ends first (a lost lease, a failed elector), the `elected` ones are
        cancelled at once and the others (sharded) drain on. True if leadership ended."""
        pending = set(controllers)
        lost = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.drain_timeout):
                while pending:
                    if any(task.done() for task in leadership):
                        cut = pending & elected
                        log.warning(
                            "leadership ended during the drain: cancelling %d leader-elected "
                            "controller(s) at once",
                            len(cut),
                        )
                        await _cancel(cut)
                        pending -= cut
                        leadership, lost = set(), True
                        continue
                    done, _ = await asyncio.wait(
                        pending | leadership, return_when=asyncio.FIRST_COMPLETED
                    )
                    pending -= done
                return lost
        log.warning(
            "drain timeout (%.0f s) passed: cancelling %d controller(s)",
            self.drain_timeout,
            len(pending),
        )
        return lost


class _LeaderCollector(Collector):
    """``leader_election_master_status{name}``: 1 while this replica leads (the gauge
    client-go's leader election exports)."""

    def __init__(self, manager: Manager) -> None:
        self._manager = manager

    def collect(self) -> Iterator[Metric]:
        config = self._manager.leader_election
        if config is None:
            return
        gauge = GaugeMetricFamily(
            "leader_election_master_status",
            "1 if this replica is the leader of the lease, else 0",
            labels=["name"],
        )
        elector = self._manager.elector
        gauge.add_metric([config.name], 1.0 if elector is not None and elector.is_leader else 0.0)
        yield gauge


def _self_signed() -> ServingCertificate:
    """A certificate for this pod's names, made now; its files are deleted once loaded, so
    no private key stays on disk (Prometheus scrapes pods with certificate checks off, or
    trusts a certificate it is given: `metrics_certificate`)."""
    names = ("localhost", "127.0.0.1", socket.gethostname())
    with tempfile.TemporaryDirectory(prefix="fastctl-metrics-") as where:
        return ServingCertificate.self_signed(Path(where), names, purpose="metrics")


async def _cancel(tasks: set[asyncio.Task[None]]) -> None:
    """Cancel `tasks` (controllers: their running reconciles with them) and wait for them."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _leadership(tasks: dict[asyncio.Task[None], str]) -> set[asyncio.Task[None]]:
    """The tasks whose end means this replica may no longer act: the elector and the task
    that follows its terms."""
    return {t for t, what in tasks.items() if what in ("leader election", "leadership")}


def _shared_watch(
    client: ApiClient, resource: Resource, namespace: str | None, config: WatchConfig
) -> SharedWatch:
    """A shared watch of `resource` whose watcher reports its retried errors to every
    subscriber (each controller counts them in its own metrics)."""

    def events() -> AsyncIterator[WatchEvent]:
        return watcher(
            client, resource, namespace=namespace, config=config, on_error=watch.report_error
        )

    watch = SharedWatch(f"{resource}", events)
    return watch


def _names_loopback(host: str) -> bool:
    """Whether a listen address is loopback (then only local clients are answered)."""
    return host == "localhost" or is_loopback(host)
