"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Several replicas of an operator run the same controllers; only the one holding the Lease
reconciles. The others watch the Lease and take over when its holder stops renewing it::

    config = fastctl.LeaderElection("my-operator", namespace="operators")
    elector = LeaderElector(client, config)
    task = asyncio.create_task(elector.run())
    while True:
        term = await elector.wait_leading()   # this replica now holds the lease
        ...start reconciling...
        await elector.wait_lost(term)         # renewals failed, or the lease was taken
        ...stop reconciling at once...

and on graceful shutdown, after reconciling has stopped: ``await elector.release()``.

The algorithm is client-go's (``tools/leaderelection``), and so is the Lease it writes
(``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``,
``leaseTransitions``): a fastctl replica and a Go replica can share a lease. Two rules carry
the safety property *a leader stops before anyone else can start* (the argument is in
docs/leader-election.md):

- A candidate never trusts the remote ``renewTime`` (the clocks of two machines differ).
  Like client-go, it notes on its own monotonic clock when it *received* a record it had not
  seen before; the lease is free once ``leaseDurationSeconds`` have passed since then with
  no change.
- A leader's tenure ends ``renew_deadline`` after it *sent* its last successful write. This
  is stricter than client-go, whose deadline starts with each renewal round (a retry period
  after the last success): however long a request took, the leader gives up before any
  observer's clock can expire the lease. A timer ends the tenure on time even if a request
  hangs, and `is_leader` reads the clock itself, so it is right even while the event loop
  is busy.

The pure rules (`LeaseRecord`, `Observation`, `Tenure`, `next_record`, `released_record`)
live in `_rules` and take the time as an argument; the Lease REST calls live in `_lease_api`.
This module is the loop that drives them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl.kube._http import ApiError
from fastctl.runtime.leader._lease_api import TRANSIENT, LeaseClient
from fastctl.runtime.leader._rules import (
    RETRY_JITTER,
    LeaderElection,
    LeaseRecord,
    Observation,
    Tenure,
    micro_time,
    next_record,
    released_record,
)

__all__ = ["LeaderElector"]

log = logging.getLogger("fastctl.leader")


class LeaderElector:
    """Takes part in leader election for one Lease, as configured by `LeaderElection`.

    The API is awaitables, not callbacks: code that reconciles only while leading awaits
    `wait_leading()` and then `wait_lost()`; a callback would run inside the renewal loop,
    where a slow or failing one would delay the very renewals that keep the lease.

    - `run()`: the election loop, forever (until `release()`; cancel it to stop without
      releasing). After a loss it goes back to being a candidate.
    - `is_leader`: the truth, computed from the clock at each call; check it before a write
      that must never happen twice.
    - `wait_leading() -> term` / `wait_lost(term)`: level-triggered waits (they return at
      once if already so). Pass the term from `wait_leading` to `wait_lost` so a loss that
      is followed by a new term before you await cannot go unnoticed.
    - `release()`: step down and clear the holder so a successor takes over at once.
    """

    def __init__(self, client: ApiClient, config: LeaderElection) -> None:
        self.config = config
        self._leases = LeaseClient(client, config.namespace, config.name, config.renew_deadline)
        self._observed = Observation()
        self._lease: dict[str, Any] | None = None  # the last copy read or written
        self._tenure: Tenure | None = None
        self._terms = 0
        self._leading = asyncio.Event()
        self._not_leading = asyncio.Event()
        self._not_leading.set()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()  # one write at a time: run()'s renewal or release()
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        self._last_error = ""
        self._attempt_timeout: asyncio.Timeout | None = None  # the attempt in flight

    def __repr__(self) -> str:
        state = f"leading (term {self._terms})" if self.is_leader else "candidate"
        return f"<LeaderElector {self._where} {state}>"

    @property
    def _where(self) -> str:
        """How log lines name this elector: ``lease ns/name as 'identity'``."""
        return f"lease {self.config.namespace}/{self.config.name} as {self.identity!r}"

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the lease and its tenure has not run out.

        It reads the clock itself, so it turns False at the deadline even if the event
        loop has been too busy to run the renewal loop or the deadline timer."""
        tenure = self._tenure
        return tenure is not None and tenure.valid(monotonic())

    @property
    def leading_until(self) -> float | None:
        """When the current tenure ends unless a renewal succeeds first, or ``None`` when
        not leading: seconds on the event loop's clock (``loop.time()``, which on asyncio's
        own loops is ``time.monotonic()``). Work that must finish while leading can bound
        itself by it."""
        tenure = self._tenure
        return tenure.deadline if tenure is not None else None

    @property
    def leader(self) -> str | None:
        """The holder named by the last lease record seen (``None``: nobody, or not read
        yet). It may be another replica whose lease has expired but not been taken over."""
        record = self._observed.record
        return record.holder if record is not None and record.holder else None

    async def wait_leading(self) -> int:
        """Wait until this replica leads; return the number of that term (1, 2, ...)."""
        while self._tenure is None:
            await self._leading.wait()
        return self._terms

    async def wait_lost(self, term: int | None = None) -> None:
        """Wait until this replica does not lead (at once if it does not), or, given a
        `term` from `wait_leading`, until that term is over."""
        while self._tenure is not None and (term is None or term == self._terms):
            await self._not_leading.wait()

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire the lease, renew it, and after a loss try again, until `release()`.

        Cancelling `run()` stops the renewals without releasing (as a crash would): this
        replica stops leading at once, and the others take over once the lease expires."""
        if self._running:
            raise RuntimeError("LeaderElector.run() is already running")
        self._running = True
        log.info("%s: taking part in leader election", self._where)
        try:
            while not self._stop.is_set():
                if not await self._attempt(self.config.renew_deadline):
                    await self._sleep(self._candidate_delay())
                    continue
                while self.is_leader and not self._stop.is_set():
                    await self._sleep(min(self.config.retry_period, self._time_left()))
                    if not self.is_leader or self._stop.is_set():
                        break
                    await self._attempt(self._time_left())
                self._lose("renewals failed for the renew deadline")
                await self._sleep(self._candidate_delay())  # then compete like any candidate
        finally:
            self._running = False
            self._lose("run() was stopped", level=logging.INFO)

    def _candidate_delay(self) -> float:
        """A jittered retry period, or less if the lease we saw expires sooner: waking at
        the expiry saves up to a retry period on a takeover (and safety does not depend on
        when candidates poll)."""
        delay = self.config.retry_period * (1 + random.uniform(0, RETRY_JITTER))
        until_expiry = self._observed.expires_at(self.config.lease_duration) - monotonic()
        return until_expiry if 0 < until_expiry < delay else delay

    def _time_left(self) -> float:
        tenure = self._tenure
        return max(0.0, tenure.deadline - monotonic()) if tenure is not None else 0.0

    async def _sleep(self, delay: float) -> None:
        """Sleep, waking early when `release()` asks the loop to stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stop.wait()

    async def _attempt(self, budget: float) -> bool:
        """One try to acquire or renew, within `budget` seconds; True if we lead after it."""
        if budget <= 0:
            return False
        try:
            async with asyncio.timeout(budget) as self._attempt_timeout, self._lock:
                if self._stop.is_set():
                    return False
                leading = await self._try_acquire_or_renew()
        except TRANSIENT as exc:
            if not self._stop.is_set():  # release() cuts attempts short: not an error
                self._note_error(exc)
            return False
        finally:
            self._attempt_timeout = None
        if self._last_error:
            log.info("%s: the API server answers again", self._where)
            self._last_error = ""
        return leading

    def _note_error(self, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            message = "request timed out"
        # Once per distinct error, not once per retry: a candidate retries every 2 s.
        level = logging.DEBUG if message == self._last_error else logging.WARNING
        log.log(level, "%s: %s", self._where, message)
        self._last_error = message

    async def _try_acquire_or_renew(self) -> bool:
        config = self.config
        identity = config.identity
        # Fast path: a leader writes over its own last copy without reading first. A 409
        # means somebody else wrote, a 404 that the lease was deleted: read, then decide.
        if self._tenure is not None and self._lease is not None:
            record = next_record(
                self._observed.record, identity, config.lease_duration_seconds, micro_time()
            )
            sent = monotonic()
            try:
                written = await self._leases.replace(self._lease, record)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
            else:
                return self._wrote(written, sent)

        lease = await self._leases.get()
        now = monotonic()
        if lease is None:
            record = next_record(None, identity, config.lease_duration_seconds, micro_time())
            sent = monotonic()
            try:
                written = await self._leases.create(record)
            except ApiError as exc:
                if exc.status == 409:  # another candidate created it first
                    return False
                raise
            return self._wrote(written, sent)

        self._lease = lease
        current = LeaseRecord.from_lease(lease)
        if self._observed.observe(current, now):
            log.debug("%s: the holder is %r", self._where, current.holder or None)
        if self._observed.held_by_other(identity, now, config.lease_duration):
            self._lose(f"the lease is held by {current.holder!r}")
            return False
        record = next_record(current, identity, config.lease_duration_seconds, micro_time())
        sent = monotonic()
        try:
            written = await self._leases.replace(lease, record)
        except ApiError as exc:
            if exc.status == 409:  # someone wrote between our read and our write
                return False
            raise
        return self._wrote(written, sent)

    def _wrote(self, lease: dict[str, Any], sent: float) -> bool:
        """A write that names us succeeded; it was sent at `sent`. Start or extend the
        tenure, unless the answer came too late to leave any of it."""
        now = monotonic()
        self._lease = lease
        record = LeaseRecord.from_lease(lease)
        self._observed.observe(record, now)
        deadline = sent + self.config.renew_deadline
        if record.holder != self.identity or now >= deadline or self._stop.is_set():
            return self.is_leader
        if self._tenure is None:
            self._terms += 1
            self._tenure = Tenure(self._terms, now, deadline)
            self._not_leading.clear()
            self._leading.set()
            log.info(
                "%s: leading (term %d, %d transitions)",
                self._where,
                self._terms,
                record.transitions,
            )
        else:
            self._tenure.renewed(sent, self.config.renew_deadline)
        self._arm_timer()
        return True

    def _arm_timer(self) -> None:
        """End the tenure exactly at its deadline, whatever the loop is awaiting."""
        if self._timer is not None:
            self._timer.cancel()
        delay = self._time_left()
        self._timer = asyncio.get_running_loop().call_later(
            delay, self._lose, "the renew deadline passed"
        )

    def _lose(self, reason: str, *, level: int = logging.WARNING) -> None:
        """End the tenure (if any) and wake `wait_lost()`; idempotent."""
        tenure = self._tenure
        if tenure is None:
            return
        self._tenure = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._leading.clear()
        self._not_leading.set()
        held = monotonic() - tenure.started_at
        log.log(
            level,
            "%s: stopped leading after %.1f s (term %d): %s",
            self._where,
            held,
            tenure.term,
            reason,
        )

    # -- stepping down ---------------------------------------------------------------

    async def release(self, *, timeout: float | None = None) -> bool:
        """Step down for good: stop `run()`, stop leading, and clear the lease's holder so
        a successor takes over at once instead of waiting out the lease.

        Call it after reconciling has stopped (leadership ends *before* the release is
        written: from that moment another replica may start). Returns True if the lease was
        released; False if it was not ours, or the API server did not answer within
        `timeout` (default: `renew_deadline`) — then the successor waits for the expiry.
        It never raises for API errors: it runs on the way out."""
        self._stop.set()
        self._lose("releasing the lease", level=logging.INFO)
        if self._attempt_timeout is not None:  # don't wait for a slow renewal: it's moot
            self._attempt_timeout.reschedule(monotonic())
        budget = self.config.renew_deadline if timeout is None else timeout
        try:
            async with asyncio.timeout(budget), self._lock:
                return await self._write_release()
        except TRANSIENT as exc:
            log.warning("%s: could not release: %s", self._where, str(exc) or "timed out")
            return False

    async def _write_release(self) -> bool:
        for _ in range(3):  # a 409 means our copy is stale: re-read and try again
            lease = self._lease
            if lease is None:
                return False
            current = LeaseRecord.from_lease(lease)
            if current.holder != self.identity:
                return False
            try:
                self._lease = await self._leases.replace(
                    lease, released_record(current, micro_time())
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
                self._lease = await self._leases.get()
                continue
            self._observed.observe(LeaseRecord.from_lease(self._lease), monotonic())
            log.info("%s: released", self._where)
            return True
        return False
