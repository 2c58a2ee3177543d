"""The real `LeaderElector` on a virtual clock, against a Lease server whose latencies,
failures and competing writers Hypothesis chooses.

Three electors compete for one Lease. For a while every request travels for any time to the
server and back, and meets any fate: answered, refused with a 500, lost on the way, applied
but its answer lost, applied but answered with a 500; electors are cut off for any stretch;
a meddler bumps the Lease's resourceVersion without touching its record (``kubectl label``),
so renewals meet 409s. Then the network heals and the leader is killed (``kill -9``) or
steps down (``release()``), twice.

Checked at every turn of the event loop (the leadership state changes only inside
callbacks, so every state it takes is seen):

- safety: never two leaders at once, and a new term never starts before
  ``lease_duration - renew_deadline`` after the last deadline of any other elector that did
  not release (a crashed leader's lease must expire first). No slack: the clock is virtual.
- liveness: after each kill the network is healthy, and another elector leads within a
  bound; all three lead in turn, so takeovers do happen.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError
from fastctl.runtime.leader import LeaderElection, LeaderElector, _elector
from fastctl.runtime.leader._rules import LeaseRecord, micro_time
from fastctl.testing import VirtualTimeLoop, run_virtual

from .fake_lease import LeaseStore

T = TypeVar("T")

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 2.0, 1.5, 0.25
MARGIN = LEASE_DURATION - RENEW_DEADLINE
CHAOS = 8.0
"""Seconds of chaos before the network heals."""
MAX_TO_SERVER = 1.0
TAKEOVER_WITHIN = (
    LEASE_DURATION
    + RENEW_DEADLINE  # a candidate's attempt that hangs on a lost request
    + MAX_TO_SERVER  # a write of the old leader still on its way when it died
    + 4 * RETRY_PERIOD * 1.2  # polls, jittered
    + 0.1  # healthy requests
)
"""Liveness bound on a healthy network: from a kill (or the healing) to the next leader."""
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
CHAOS_EXAMPLES = int(os.environ.get("FASTCTL_LEADER_CHAOS_EXAMPLES", "300"))
"""Examples per run: 300 by default; `scripts/mutants leader` sets fewer (it runs this test
once per mutant), and derandomizes, so that every mutant meets the same examples."""


@dataclass(frozen=True)
class Hop:
    """How one request fares: seconds to the server, seconds back, and its fate."""

    to_server: float
    back: float
    fate: str  # ok | refused | lost | applied_then_lost | applied_then_refused


HEALTHY = Hop(0.01, 0.01, "ok")
FATES = ("ok", "ok", "ok", "refused", "lost", "applied_then_lost", "applied_then_refused")


class ChaoticLeases:
    """An elector's Lease client in front of a shared `LeaseStore`.

    The server applies a request when it arrives, whatever the client does meanwhile: an
    elector that gives up on a PUT has not unsent it."""

    def __init__(
        self, store: LeaseStore, hops: list[Hop], cut_off: list[tuple[float, float]]
    ) -> None:
        self.store = store
        self.healthy = False
        self._hops = itertools.cycle(hops)
        self._cut_off = cut_off
        self._in_flight: set[asyncio.Task[None]] = set()

    def _next_hop(self) -> Hop:
        if self.healthy:
            return HEALTHY
        now = asyncio.get_running_loop().time()
        if any(start <= now < start + length for start, length in self._cut_off):
            return Hop(0.0, 0.0, "lost")
        return next(self._hops)

    async def _request(self, apply: Callable[[], T]) -> T:
        hop = self._next_hop()
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def travel() -> None:
            await asyncio.sleep(hop.to_server)
            if hop.fate in ("lost", "refused"):
                result: T | ApiError = ApiError(500, "InternalError", "refused")
            else:
                try:
                    result = apply()
                except ApiError as exc:
                    result = exc
            if hop.fate == "applied_then_refused":
                result = ApiError(500, "InternalError", "applied, then failed")
            await asyncio.sleep(hop.back)
            if answer.done() or hop.fate in ("lost", "applied_then_lost"):
                return  # the client gave up, or the answer never comes
            if isinstance(result, ApiError):
                answer.set_exception(result)
            else:
                answer.set_result(result)

        task = asyncio.create_task(travel())
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return await answer

    async def get(self) -> dict[str, Any] | None:
        return await self._request(self.store.get)

    async def create(self, record: LeaseRecord) -> dict[str, Any]:
        return await self._request(lambda: self.store.create(record))

    async def replace(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        return await self._request(lambda: self.store.replace(lease, record))


class Referee:
    """Watches every elector at every turn of the loop and notes what breaks the rules."""

    def __init__(self, loop: VirtualTimeLoop, electors: list[LeaderElector]) -> None:
        self._loop = loop
        self.electors = electors
        self._leading: set[str] = set()
        self.deadlines = {e.identity: -math.inf for e in electors}
        self.terms: list[tuple[float, str]] = []
        self.violations: list[str] = []

    def step(self) -> None:
        now = self._loop.time()
        leaders = [e for e in self.electors if e.is_leader]
        if len(leaders) > 1:
            self.violations.append(f"{now:.6f}: {[e.identity for e in leaders]} all lead")
        for elector in leaders:
            me = elector.identity
            if me not in self._leading:
                self.terms.append((now, me))
                for other, deadline in self.deadlines.items():
                    if other != me and now < deadline + MARGIN:
                        self.violations.append(
                            f"{now:.6f}: {me} leads, {other}'s tenure ended at {deadline:.6f}"
                        )
            until = elector.leading_until
            assert until is not None
            self.deadlines[me] = until
        self._leading = {e.identity for e in leaders}

    def released(self, elector: LeaderElector) -> None:
        """A release hands over at once: no expiry to wait for."""
        self.deadlines[elector.identity] = -math.inf

    def leader_since(self, since: float) -> str | None:
        """The elector whose term started last, if it started at or after `since`."""
        return self.terms[-1][1] if self.terms and self.terms[-1][0] >= since else None


def _virtual_micro_time(when: datetime | None = None) -> str:
    """The wall clock follows the virtual one (renewTime values must differ as in life)."""
    now = asyncio.get_running_loop().time()
    return micro_time(when if when is not None else EPOCH + timedelta(seconds=now))


async def _run_after(delay: float, elector: LeaderElector) -> None:
    await asyncio.sleep(delay)
    await elector.run()


async def _meddle(store: LeaseStore, times: list[float]) -> None:
    """Bump the Lease's resourceVersion without changing its record, at the given times."""
    loop = asyncio.get_running_loop()
    for n, when in enumerate(sorted(times)):
        await asyncio.sleep(max(0.0, when - loop.time()))
        if store.lease is not None:
            metadata = {**store.lease["metadata"], "annotations": {"touched": str(n)}}
            store.put({**store.lease, "metadata": metadata})


async def _next_leader(
    loop: VirtualTimeLoop, referee: Referee, since: float, *, current: bool = False
) -> str:
    """The leader whose term started at `since` or later (`current`: or the one leading
    now), waiting for it at most `TAKEOVER_WITHIN` seconds after `since`."""
    limit = since + TAKEOVER_WITHIN
    while (leader := referee.leader_since(-math.inf if current else since)) is None or (
        current and not any(e.is_leader for e in referee.electors)
    ):
        assert loop.time() <= limit, f"nobody led within {TAKEOVER_WITHIN} s of {since}"
        await asyncio.sleep(0.01)
    return leader


hops = st.builds(
    Hop,
    to_server=st.floats(0.0, MAX_TO_SERVER),
    back=st.floats(0.0, 1.4),
    fate=st.sampled_from(FATES),
)


@settings(
    max_examples=CHAOS_EXAMPLES,
    deadline=None,
    derandomize="FASTCTL_LEADER_CHAOS_EXAMPLES" in os.environ,
)
@given(
    plans=st.lists(st.lists(hops, min_size=1, max_size=6), min_size=3, max_size=3),
    cut_off=st.lists(
        st.tuples(st.integers(0, 2), st.floats(0.0, CHAOS), st.floats(0.0, 3.0)), max_size=4
    ),
    starts=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    meddles=st.lists(st.floats(0.0, CHAOS), max_size=6),
    releases=st.lists(st.booleans(), min_size=2, max_size=2),
    jitter=st.randoms(use_true_random=False),
)
@example(  # a slow answer to a write applied at once, then a cut-off: the leader's tenure
    # must count from the send, or it overruns the lease the others see expire
    plans=[[HEALTHY, Hop(0.0, 1.2, "ok")], [HEALTHY], [HEALTHY]],
    cut_off=[(0, 1.3, 1.7)],
    starts=[0.0, 0.5, 0.5],
    meddles=[],
    releases=[False, True],
    jitter=random.Random(0),
)
@example(  # a renewal refused by a 409, a re-read that still names the leader, a cut-off:
    # only a write extends a tenure, never a read
    plans=[[HEALTHY], [HEALTHY], [HEALTHY]],
    cut_off=[(0, 1.3, 3.0)],
    starts=[0.0, 0.5, 0.5],
    meddles=[1.1],
    releases=[False, True],
    jitter=random.Random(3),  # a jitter that puts the 409 and the cut-off in step
)
def test_the_real_elector_never_overlaps_and_hands_over_under_chaos(
    plans: list[list[Hop]],
    cut_off: list[tuple[int, float, float]],
    starts: list[float],
    meddles: list[float],
    releases: list[bool],
    jitter: random.Random,
) -> None:
    async def scenario() -> Referee:
        loop = VirtualTimeLoop.current()
        store = LeaseStore()
        electors, clients, tasks = [], [], []
        for i, plan in enumerate(plans):
            elector = LeaderElector(
                cast(ApiClient, None),
                LeaderElection(
                    "l",
                    identity="abc"[i],
                    lease_duration=LEASE_DURATION,
                    renew_deadline=RENEW_DEADLINE,
                    retry_period=RETRY_PERIOD,
                ),
            )
            client = ChaoticLeases(store, plan, [(s, n) for who, s, n in cut_off if who == i])
            elector._leases = client  # type: ignore[assignment]
            electors.append(elector)
            clients.append(client)
        referee = Referee(loop, electors)
        loop.on_step.append(referee.step)
        for elector, delay in zip(electors, starts, strict=True):
            tasks.append(asyncio.create_task(_run_after(delay, elector)))
        meddler = asyncio.create_task(_meddle(store, meddles))
        try:
            await asyncio.sleep(CHAOS)
            for client in clients:
                client.healthy = True
            since = loop.time()
            for n, release in enumerate(releases):
                leader = await _next_leader(loop, referee, since, current=n == 0)
                i = "abc".index(leader)
                since = loop.time()
                if release:
                    referee.released(electors[i])
                    assert await electors[i].release()
                    await tasks[i]
                else:
                    tasks[i].cancel()
            await _next_leader(loop, referee, since)
            return referee
        finally:
            meddler.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, meddler, return_exceptions=True)

    with (
        mock.patch.object(_elector, "micro_time", _virtual_micro_time),
        mock.patch.object(_elector, "random", jitter),
    ):
        referee = run_virtual(scenario())
    assert referee.violations == []
    assert {who for _, who in referee.terms} == {"a", "b", "c"}  # takeovers happened
