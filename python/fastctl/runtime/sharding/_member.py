"""The loop of one shard member: renew its own Lease, read the group's, and serve, claim and
drain slots by the rules of `_rules` (the safety argument is there and in docs/sharding.md).
The writes keep their own pace and the reads run beside them, so a slow API server costs a
renewal no more than its own latency (`_rules`, "Renewing on a slow API server").

The runtime asks two things of it: `serves(slot)` before it starts a reconcile, and a
`drainer` coroutine, given to the constructor, that returns once no reconcile of the given
slots is running any more (it must stop starting them at once). `wait_change()` wakes
whoever must restart a watch with a new ``shardSelector``.

Time is the runtime's clock (`fastctl._clock`: the event loop's), so the tests run the loop
on a virtual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl.kube._http import ApiError
from fastctl.runtime.leader._lease_api import TRANSIENT
from fastctl.runtime.leader._rules import RETRY_JITTER, LeaseRecord
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._handover import HandoverTimes
from fastctl.runtime.sharding._member_api import GroupLeases, ShardLeaseClient, member_lease
from fastctl.runtime.sharding._rules import (
    SLOTS_ANNOTATION,
    Member,
    Sharding,
    next_write,
    parse_slots,
    write_budget,
)

__all__ = ["Drainer", "ShardMember"]

log = logging.getLogger("fastctl.sharding")

Drainer = Callable[[frozenset[int], bool], Awaitable[None]]
"""``drainer(slots, urgent)`` stops starting reconciles of `slots` and returns once none is
running. `urgent` is True when the tenure ended (or the loop stopped): the running ones must
be cancelled at once, within the safety margin; otherwise (the slots moved to another
member) they may finish, as they do in a graceful drain."""


async def _nothing_to_drain(slots: frozenset[int], urgent: bool) -> None:
    return None


class ShardMember:
    """One replica's membership in a shard group, as configured by `Sharding`.

    - `run()`: the membership loop, until `leave()` (cancel it to stop as a crash would:
      the others take over the slots once this member's Lease expires);
    - `serving` / `serves(slot)`: what may be reconciled now, from the clock at each call;
    - `wait_change(seen)`: wait until the served slots differ from version `seen`;
    - `leave()`: drain everything, then publish nothing, so the others take over at once.
    """

    def __init__(
        self,
        client: ApiClient | GroupLeases,
        config: Sharding,
        *,
        drainer: Drainer = _nothing_to_drain,
    ) -> None:
        self.config = config
        self._leases: GroupLeases = (
            ShardLeaseClient(client, config.namespace, config.group, config.renew_deadline)
            if isinstance(client, ApiClient)
            else client
        )
        self._drainer = drainer
        self._rules = Member(config.identity, config.slots, config.renew_deadline)
        self._lease: dict[str, Any] | None = None  # our own, as last read or written
        self._seen: dict[str, _Seen] = {}
        self._version = 0
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._cut: asyncio.TimerHandle | None = None  # a leave's drain, cut at the tenure's end
        self._drains: set[asyncio.Task[None]] = set()
        self._errors: dict[str, str] = {}  # the last error of each kind of request
        self._writing = asyncio.Lock()
        self._writes = 0  # writes attempted: the reads follow them
        self._written = asyncio.Event()
        self._last_serving: frozenset[int] = frozenset()
        self.gained = 0
        """Slots this member started serving (counted once per start)."""
        self.lost = 0
        """Slots this member stopped serving (moved away, or its tenure ended)."""
        self.handovers = HandoverTimes()
        """How long its handovers took, in and out (`fastctl.runtime.sharding._handover`)."""

    def __repr__(self) -> str:
        return (
            f"<ShardMember {self.config.group!r} as {self.identity!r}: {len(self.serving)} slots>"
        )

    @property
    def identity(self) -> str:
        return self.config.identity

    @staticmethod
    def _now() -> float:
        return monotonic()

    @property
    def serving(self) -> frozenset[int]:
        """The slots whose objects may be reconciled now (none once the tenure ran out)."""
        rules = self._rules
        return frozenset(rules.serving) if rules.valid(self._now()) else frozenset()

    def serves(self, slot: int, now: float | None = None) -> bool:
        """True if a reconcile of an object in `slot` may start now (`now`: the loop's
        time, for a caller in another thread, which has no running loop)."""
        return self._rules.serves(slot, self._now() if now is None else now)

    @property
    def members(self) -> list[str]:
        """The live members this one counts (itself included)."""
        now = self._now()
        live = [seen.holder for seen in self._seen.values() if now < seen.expires_at()]
        return sorted({self.identity, *live})

    @property
    def settled(self) -> bool:
        """Serving exactly its rendezvous share among the members it counts (the first
        time this holds, the replica is ready)."""
        desired = assign(self.members, self.config.slots).get(self.identity, frozenset())
        return self.serving == desired

    @property
    def version(self) -> int:
        """Counts changes of `serving`; pass it to `wait_change`."""
        return self._version

    async def wait_change(self, seen: int) -> int:
        """Wait until `serving` changed after version `seen`; return the new version."""
        while self._version == seen:
            await self._changed.wait()
        return self._version

    def _notify(self) -> None:
        serving = self.serving
        self.gained += len(serving - self._last_serving)
        self.lost += len(self._last_serving - serving)
        self._last_serving = serving
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Write our Lease at its own pace and, beside the writes, read the group's Leases
        after each one and act on them (rule 3: a read counts for the writes that had
        completed when it was sent). A slow read never delays a renewal."""
        log.info("shard group %s: joining as %r", self.config.group, self.identity)
        reads = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            while not self._stop.is_set():
                sent, ok = await self._renew()
                self._writes += 1
                self._written.set()
                delay = next_write(
                    ok=ok,
                    sent_at=sent,
                    now=self._now(),
                    deadline=self._rules.deadline,
                    retry_period=self.config.retry_period,
                    jitter=random.uniform(0, RETRY_JITTER),
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stop.wait()
        finally:
            reads.cancel()  # at its next step: it observes nothing more
            stopped = self._abandon()
            if stopped and not self._stop.is_set():
                self._stopped(stopped, "the membership loop stopped")

    async def _renew(self) -> tuple[float, bool]:
        """One write of our Lease, given the time left in the tenure (`write_budget`):
        when it was sent, and whether it succeeded. After a 409 (someone else wrote the
        Lease, or a write of ours that timed out was applied after all) it reads the
        current copy, so the next write's precondition holds."""
        rules = self._rules
        config = self.config
        async with self._writing:  # one write at a time (leave() writes after this one)
            sent = self._now()
            if self._stop.is_set():
                return sent, False
            published = rules.to_publish()
            body = member_lease(
                config.lease_name,
                config.group,
                self.identity,
                config.lease_duration_seconds,
                published,
            )
            try:
                async with asyncio.timeout(
                    write_budget(sent, rules.deadline, config.renew_deadline)
                ):
                    try:
                        self._lease = await self._leases.write(self._lease, body)
                    except ApiError as exc:
                        if exc.status == 409:
                            await self._refresh()
                        raise
            except TRANSIENT as exc:
                rules.write_failed()
                if isinstance(exc, ApiError) and exc.status == 404:
                    self._lease = None  # deleted behind our back: create it again
                self._note_error("writing the member Lease", exc)
                return sent, False
            self._answered("writing the member Lease")
            now = self._now()
            if self._stop.is_set():  # leaving: the tenure was given up meanwhile
                return sent, True
            if now < sent + config.renew_deadline:
                rules.wrote(sent, published)
                self._arm_timer()
            self.handovers.published(published, now)
            return sent, True

    async def _refresh(self) -> None:
        """Take our Lease's current copy from a read (None if it is gone: create it)."""
        with contextlib.suppress(*TRANSIENT):
            items = await self._leases.list()
            name = self.config.lease_name
            self._lease = next(
                (lease for lease in items if (lease.get("metadata") or {}).get("name") == name),
                None,
            )

    async def _read_loop(self) -> None:
        """After each write (those that end while a read is on its way are covered by the
        next read), list the group's Leases and act on what the list says."""
        read = 0
        while True:
            while self._writes == read:
                self._written.clear()
                await self._written.wait()
            read = self._writes
            durable = self._rules.durable  # what the writes completed so far published
            try:
                async with asyncio.timeout(self.config.renew_deadline):
                    items = await self._leases.list()
            except TRANSIENT as exc:
                self._note_error("listing the group's Leases", exc)
                continue
            self._answered("listing the group's Leases")
            if not self._stop.is_set():
                self._observe(items, durable)

    def _observe(self, items: list[dict[str, Any]], durable: frozenset[int]) -> None:
        now = self._now()
        config = self.config
        listed: set[str] = set()
        for lease in items:
            metadata = lease.get("metadata") or {}
            name = metadata.get("name")
            if not isinstance(name, str) or name == config.lease_name:
                continue  # our own: the writes keep their copy (a 409 refreshes it)
            listed.add(name)
            seen = self._seen.get(name)
            if seen is None or seen.version != _version(lease):
                self._seen[name] = _Seen.of(lease, now, config)
        others: dict[str, frozenset[int]] = {}
        for name, seen in list(self._seen.items()):
            expiry = seen.expires_at()
            if now < expiry:
                # Counted until it expires even if it vanished from the list: a deleted
                # Lease proves nothing about whether its holder stopped.
                others[seen.holder] = seen.slots
            elif name not in listed or now >= expiry + config.lease_duration:
                del self._seen[name]
                if name in listed and seen.holder:
                    self._collect(seen.lease)
        before = self.serving
        stopped = self._rules.observed(others, now, durable)
        if stopped:
            self.handovers.stopped(stopped, now)
            self._start_drain(frozenset(stopped), urgent=False)
        if self._rules.valid(now):
            self.handovers.wanted(self._rules.wanted, self._rules.serving, now)
        if self.serving != before:
            log.info(
                "shard group %s: serving %d of %d slots (%d members)",
                config.group,
                len(self.serving),
                config.slots,
                len(others) + 1,
            )
            self._notify()

    def _collect(self, lease: Mapping[str, Any]) -> None:
        """Delete a Lease that has been expired for a whole lease duration more: its holder
        is gone (a restarted replica has a new identity), and nobody else will."""

        async def delete() -> None:
            with contextlib.suppress(*TRANSIENT):
                await self._leases.delete(lease)

        task = asyncio.get_running_loop().create_task(delete())
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    def _start_drain(self, slots: frozenset[int], *, urgent: bool) -> None:
        """Drain `slots` in the background; a graceful drain then stops publishing them."""

        async def drain() -> None:
            await self._drainer(slots, urgent)
            if not urgent:
                for slot in slots:
                    self._rules.drained(slot)

        task = asyncio.get_running_loop().create_task(drain())
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    def _arm_timer(self) -> None:
        """End the tenure exactly at its deadline, whatever the loop is awaiting."""
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, self._rules.deadline - self._now())
        self._timer = asyncio.get_running_loop().call_later(
            delay, self._end_tenure, "renewals failed for the renew deadline"
        )

    def _end_tenure(self, reason: str) -> None:
        """The tenure ran out: stop serving everything at once (rule 2).

        The timer may run a hair before the deadline: an event loop runs the timers due
        within its clock's resolution, and ``now + (deadline - now)`` can round below
        ``deadline``. Checked at that reading, the tenure would still hold, nothing would
        stop and no timer would be left: the tenure would lapse with its reconciles still
        running. The timer is armed for the deadline and nothing else, so it ends the
        tenure at the deadline."""
        self._timer = None
        stopped = self._rules.check(max(self._now(), self._rules.deadline))
        if stopped:
            self._stopped(frozenset(stopped), reason)

    def _stopped(self, slots: frozenset[int], reason: str) -> None:
        log.warning(
            "shard group %s: stopped serving %d slots: %s", self.config.group, len(slots), reason
        )
        self.handovers.stopped(slots, self._now())
        self._start_drain(slots, urgent=True)
        self._notify()

    def _abandon(self) -> frozenset[int]:
        """Forget every slot and the tenure, as after a crash; the slots that were live.

        A tenure already over whose timer has not run yet (a busy loop) is ended first, as
        the timer would have: its reconciles are cancelled, not forgotten."""
        rules = self._rules
        expired = rules.check(self._now())
        if expired:
            self._stopped(frozenset(expired), "renewals failed for the renew deadline")
        live = frozenset(rules.serving | rules.draining)  # empty unless the tenure holds
        rules.serving.clear()
        rules.claiming.clear()
        rules.draining.clear()
        rules.deadline = -math.inf
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return live

    def _note_error(self, what: str, exc: BaseException) -> None:
        """Log a failed request once per distinct error of each kind (writes, reads)."""
        message = "request timed out" if isinstance(exc, TimeoutError) else str(exc)
        level = logging.DEBUG if message == self._errors.get(what) else logging.WARNING
        log.log(level, "shard group %s: %s: %s", self.config.group, what, message)
        self._errors[what] = message

    def _answered(self, what: str) -> None:
        if self._errors.pop(what, None) is not None:
            log.info("shard group %s: %s: the API server answers again", self.config.group, what)

    # -- leaving ----------------------------------------------------------------------

    async def leave(self, *, timeout: float | None = None) -> bool:
        """Leave the group on purpose: stop serving everything, wait for the drainer, then
        publish no slot (and no holder) so the others take over at once instead of waiting
        for the Lease to expire. True if that last write succeeded within `timeout`
        (default: `renew_deadline`).

        The drain lets the running reconciles finish only while the tenure lasts: renewals
        stop here, and at the tenure's end (which may come first when renewals were already
        failing) the reconciles still running are cancelled, as at any tenure's end, even
        if this call has given up waiting."""
        self._stop.set()
        tenure_end = self._rules.deadline
        everything = self._abandon()
        if everything:
            self.handovers.stopped(everything, self._now())
            self._notify()
            # The drain is graceful only while the tenure lasts: once it ends, the others
            # may count the Lease as expired and take the slots, so whatever still runs is
            # cancelled then, whether this leave still waits or has given up.
            self._cut = asyncio.get_running_loop().call_at(
                tenure_end, self._tenure_ended_leaving, everything
            )
        budget = self.config.renew_deadline if timeout is None else timeout
        try:
            async with asyncio.timeout(budget):
                await self._drainer(everything, False)
                if self._cut is not None:  # drained: nothing left for the tenure's end
                    self._cut.cancel()
                    self._cut = None
                body = member_lease(self.config.lease_name, self.config.group, "", 1, frozenset())
                async with self._writing:  # after a renewal in flight, on its answer's copy
                    self._lease = await self._leases.write(self._lease, body)
            self.handovers.published(frozenset(), self._now())
        except TRANSIENT as exc:
            log.warning("shard group %s: could not leave cleanly: %s", self.config.group, exc)
            return False
        return True

    def _tenure_ended_leaving(self, slots: frozenset[int]) -> None:
        """The tenure ended while a leave still drained `slots`: cancel what still runs."""
        self._cut = None
        log.warning(
            "shard group %s: the tenure ended while leaving: cancelling the reconciles of "
            "%d slots that still run",
            self.config.group,
            len(slots),
        )
        self._start_drain(slots, urgent=True)


def _version(lease: Mapping[str, Any]) -> object:
    return (lease.get("metadata") or {}).get("resourceVersion")


@dataclass(slots=True)
class _Seen:
    """Another member's Lease as last received, and when (on our clock) it last changed."""

    version: object
    holder: str
    duration: float
    slots: frozenset[int]
    observed_at: float
    lease: dict[str, Any]

    @classmethod
    def of(cls, lease: dict[str, Any], now: float, config: Sharding) -> _Seen:
        metadata = lease.get("metadata") or {}
        record = LeaseRecord.from_lease(lease)
        annotations = metadata.get("annotations") or {}
        duration = record.lease_duration_seconds or config.lease_duration
        slots = parse_slots(annotations.get(SLOTS_ANNOTATION), config.slots)
        return cls(metadata.get("resourceVersion"), record.holder, duration, slots, now, lease)

    def expires_at(self) -> float:
        """Rule 1: a lease duration after it last changed; at once if nobody holds it."""
        return self.observed_at + self.duration if self.holder else -math.inf
