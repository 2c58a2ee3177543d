"""The sharded world: several replicas, each a real `Manager` with ``sharding=Sharding(...)``
and one real `Controller`, on the in-memory API server and the virtual clock.

The replicas ("members") share the server: its objects, its watches and the shard group's
Leases (`leases.MemberLeases`), and each is told apart by its API client's host, so a
schedule can cut one member off the Leases (a partition), slow its requests down past the
renew deadline, fail its writes before or after the server applied them, stop it
(``Manager.shutdown()``: a graceful leave, as on SIGTERM) or start a new one (a join), while
objects change and reconciles run for longer than the safety margin (``lease_duration -
renew_deadline``). The reconciles are async (a thread cannot be cancelled at the end of a
tenure: docs/sharding.md says so, and the leader-election tests cover threads).

Everything is recorded per member (`ShardRecord`): each reconcile with the member that ran
it, what each member serves whenever that changes, and how each Manager ended, for the
properties of `sharding_invariants`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

import fastctl.kube._watcher as watcher_module
import fastctl.runtime.manager._manager as manager_module
import fastctl.runtime.sharding._member_api as member_api_module
from fastctl import Action, ApplierConfig, Controller, Manager
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._rules import format_slots
from fastctl.testing import VirtualTimeLoop, run_virtual

from .apiserver import NAMESPACE, ApiServer, ServerConfig
from .leases import MemberLeases
from .record import Record
from .tls import rest_module, ssl_once
from .world import (
    SETTLE,
    SPIN_LIMIT,
    START,
    WIDGET,
    Outcome,
    SimError,
    SimScheduler,
    name_of,
    no_signals,
    patched,
)

GROUP = "sim"
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
MARGIN = LEASE_DURATION - RENEW_DEADLINE
"""The safety margin: how long after its tenure ends a member's Lease still counts for the
others. Reconciles run longer than it (`DURATIONS` in the tests)."""


@dataclass(frozen=True)
class ShardOp:
    """One step of a sharded schedule, `delay` virtual seconds after the previous one.

    Kinds: ``put``/``delete`` (object `index`); ``join`` (a new member); ``leave`` (member
    `member` shuts down gracefully); ``partition`` (its Lease requests fail for `arg` s);
    ``slow`` (they take `latency` s for `arg` s); ``fail`` (its Lease writes fail for `arg` s,
    after the server applied them if `flag`); ``outage`` (the server is down for `arg` s, and
    comes back compacted if `flag`)."""

    delay: float
    kind: str
    member: int = 0
    index: int = 0
    arg: float = 0.0
    latency: float = 0.0
    flag: bool = False


@dataclass(frozen=True)
class ShardSchedule:
    """Everything one sharded run does; Hypothesis generates these."""

    members: int = 2
    objects: int = 4
    ops: tuple[ShardOp, ...] = ()
    scripts: tuple[tuple[Outcome, ...], ...] = ()
    slots: int = 8
    drain_timeout: float = 3.0
    concurrency: int = 2
    server: ServerConfig = field(default_factory=ServerConfig)
    seed: int = 0


@dataclass
class ShardRecord(Record):
    """`Record`, plus what each member did."""

    members: list[str] = field(default_factory=list)
    live_at_settle: list[str] = field(default_factory=list)
    serving_at_settle: dict[str, frozenset[int]] = field(default_factory=dict)
    serving: dict[str, list[tuple[float, frozenset[int]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    stop_asked_of: dict[str, float] = field(default_factory=dict)
    stopped_at: dict[str, float] = field(default_factory=dict)
    ended_how: dict[str, str] = field(default_factory=dict)


class _Reconciler:
    """The reconciles of one member: the n-th reconcile of an object (on any member) ends
    as the object's script says."""

    def __init__(
        self, member: str, record: ShardRecord, schedule: ShardSchedule, counts: dict[str, int]
    ) -> None:
        self.member = member
        self.record = record
        self.scripts = schedule.scripts
        self.counts = counts

    async def __call__(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        index = int(meta["name"][1:])
        n = self.counts[key]
        self.counts[key] = n + 1
        script = self.scripts[index] if index < len(self.scripts) else ()
        outcome = script[n] if n < len(script) else Outcome("ok", 0.1)
        run = self.record.start(
            self.member, key, str(meta["resourceVersion"]), outcome.kind, thread=False
        )
        try:
            await asyncio.sleep(outcome.duration)
        finally:
            self.record.end(run)
        if outcome.kind == "requeue":
            return Action.requeue(1.0)
        if outcome.kind == "error":
            raise SimError(f"scripted failure of {key}")
        return None


class _Member:
    """One replica: its Manager, its controller and the task that runs them."""

    def __init__(
        self, name: str, record: ShardRecord, schedule: ShardSchedule, counts: dict[str, int]
    ) -> None:
        self.name = name
        self.record = record
        self.client = ApiClient(Configuration(host=f"http://{name}.sim"))
        self.manager = Manager(
            self.client,
            sharding=Sharding(
                GROUP,
                namespace=NAMESPACE,
                identity=name,
                slots=schedule.slots,
                lease_duration=LEASE_DURATION,
                renew_deadline=RENEW_DEADLINE,
                retry_period=RETRY_PERIOD,
            ),
            metrics_port=None,
            probe_port=None,
            drain_timeout=schedule.drain_timeout,
        )
        self.controller = Controller(
            self.client,
            WIDGET,
            _Reconciler(name, record, schedule, counts),
            name="widgets",
            # The simulation judges the sharding and the scheduling, not Events.
            config=ApplierConfig(concurrency=schedule.concurrency, failure_events=False),
            namespace=NAMESPACE,
            scheduler=SimScheduler(name, record, schedule.concurrency),
        )
        self.manager.add(self.controller)
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self.manager.run(), name=f"manager {name}")
        self.task.add_done_callback(self._ended)
        record.members.append(name)
        record.log.append(f"{loop.time():.2f} {name} starts")

    def _ended(self, task: asyncio.Task[None]) -> None:
        record = self.record
        record.stopped_at[self.name] = asyncio.get_running_loop().time()
        if task.cancelled():
            how = "cancelled"
        else:
            exc = task.exception()
            how = "returned" if exc is None else f"raised {exc!r}"
        record.ended_how[self.name] = how
        record.log.append(f"{record.stopped_at[self.name]:.2f} {self.name} ended: {how}")

    @property
    def running(self) -> bool:
        return not self.task.done() and self.name not in self.record.stop_asked_of

    def stop(self) -> None:
        if self.name not in self.record.stop_asked_of:
            now = asyncio.get_running_loop().time()
            self.record.stop_asked_of[self.name] = now
            self.record.log.append(f"{now:.2f} {self.name} leaves (shutdown)")
        self.manager.shutdown()

    async def close(self) -> None:
        await self.client.close()


def _recording_member(record: ShardRecord) -> type[ShardMember]:
    """A `ShardMember` that records what it serves each time that changes (the Manager
    makes its own)."""

    class RecordingMember(ShardMember):
        def _notify(self) -> None:
            super()._notify()
            now = asyncio.get_running_loop().time()
            serving = self.serving
            record.serving[self.identity].append((now, serving))
            record.log.append(f"{now:.2f} {self.identity} serves [{format_slots(serving)}]")

    return RecordingMember


@contextlib.contextmanager
def _wired(server: ApiServer, leases: MemberLeases, record: ShardRecord) -> Iterator[None]:
    """Point the watchers and the members' Lease clients at the in-memory server, and the
    Managers at the recording member (and at no signal handler)."""
    patches: list[tuple[Any, str, Any]] = [
        (watcher_module, "request", server.request),
        (member_api_module, "request_json", leases.request_json),
        (manager_module, "ShardMember", _recording_member(record)),
        (manager_module, "stop_on_signals", no_signals),
        (rest_module, "ssl", ssl_once()),
    ]
    with patched(patches):
        yield


def _apply(
    op: ShardOp,
    server: ApiServer,
    leases: MemberLeases,
    members: list[_Member],
    start: Any,
) -> float:
    """Do one operation; returns until when a fault it starts lasts."""
    now = server.now
    kind = op.kind
    target = members[op.member] if op.member < len(members) else None
    if kind == "put":
        server.put("widgets", name_of(op.index))
    elif kind == "delete":
        server.delete("widgets", name_of(op.index))
    elif kind == "join":
        start()
    elif kind == "leave":
        if target is not None:
            target.stop()
    elif kind == "outage":
        server.outage(op.arg, compact=op.flag)
        return now + op.arg
    elif target is not None:
        faults = leases.of(target.name)
        until = now + op.arg
        if kind == "partition":
            faults.partition_until = max(faults.partition_until, until)
        elif kind == "slow":
            faults.slow_until, faults.slow_latency = until, op.latency
            until += op.latency
        elif kind == "fail":
            faults.fail_until, faults.fail_after_apply = until, op.flag
        else:  # pragma: no cover
            raise ValueError(f"unknown op {kind!r}")
        server.record.log.append(f"{now:.2f} {target.name}: {kind} for {op.arg:.0f} s")
        return until
    return now


STOP_BOUND = 3 * RENEW_DEADLINE
"""How long past `drain_timeout` a stopping Manager may take: the leave's own budget (the
renew deadline) and cancelling what is left."""


IDLE_CAP = 1200.0
"""Virtual seconds to wait, after settling, for the members' queues to empty: long scripted
reconciles one at a time (and a scheduler that serves the longest-waiting key first, whatever
its priority) can keep a backlog for minutes."""


async def _until_idle(members: list[_Member]) -> None:
    """Wait until no live member has a reconcile queued or running (or `IDLE_CAP`)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + IDLE_CAP
    while loop.time() < give_up and any(  # noqa: ASYNC110 - a scheduler has no idle event
        len(m.controller.scheduler) or m.controller.scheduler.in_flight for m in members
    ):
        await asyncio.sleep(RETRY_PERIOD)


async def _simulate(schedule: ShardSchedule, record: ShardRecord) -> None:
    random.seed(schedule.seed)
    loop = asyncio.get_running_loop()
    server = ApiServer(record, schedule.server)
    leases = MemberLeases(server, record)
    counts: dict[str, int] = defaultdict(int)
    for i in range(schedule.objects):
        server.put("widgets", name_of(i))
    members: list[_Member] = []

    def start() -> None:
        members.append(_Member(f"m{len(members)}", record, schedule, counts))

    with _wired(server, leases, record):
        for _ in range(schedule.members):
            start()
        last = loop.time()
        for op in schedule.ops:
            await asyncio.sleep(op.delay)
            until = _apply(op, server, leases, members, start)
            last = max(last, loop.time(), until)
        await asyncio.sleep(max(0.0, last - loop.time()) + SETTLE)
        await _until_idle([m for m in members if m.running])
        record.settled_at = loop.time()
        record.quiet_from = last
        for m in members:
            if m.running and m.manager.member is not None:
                record.live_at_settle.append(m.name)
                record.serving_at_settle[m.name] = m.manager.member.serving
        for m in members:
            if not m.task.done():
                m.stop()
        pending = {m.task for m in members if not m.task.done()}
        if pending:
            await asyncio.wait(pending, timeout=schedule.drain_timeout + STOP_BOUND)
        for m in members:
            if not m.task.done():
                m.task.cancel()
                with contextlib.suppress(BaseException):
                    await m.task
                record.ended_how[m.name] = "stop hung"  # not "cancelled": that was us
            await m.close()


def simulate(schedule: ShardSchedule) -> ShardRecord:
    """Run `schedule` on a fresh virtual loop; return what happened."""
    record = ShardRecord()

    async def main() -> None:
        record.clock = VirtualTimeLoop.current().time
        await _simulate(schedule, record)

    fastctl_log = logging.getLogger("fastctl")
    level = fastctl_log.level
    fastctl_log.setLevel(logging.CRITICAL)
    try:
        run_virtual(main(), start=START, spin_limit=SPIN_LIMIT, thread_grace=0)
    finally:
        fastctl_log.setLevel(level)
    return record


__all__ = ["ShardOp", "ShardRecord", "ShardSchedule", "simulate"]
