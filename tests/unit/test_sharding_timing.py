"""How a shard member keeps its tenure on a slow API server: the pure timing rules
(`next_write`, `write_budget`, reads beside the writes), then real `ShardMember` loops on a
virtual clock whose Lease server answers slowly or refuses writes for a while.

With lease 6 s, renew deadline 4 s and retry period 1 s, a member that read the group's
Leases between its writes and waited a retry period after the read lost its tenure as soon
as a write and a read took about a second each; every member of the group did at once,
since they share the API server (docs/sharding.md, "Timings on a loaded cluster").
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastctl.kube._http import ApiError
from fastctl.runtime.leader._rules import RETRY_JITTER
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._rules import RETRY_FLOOR, Member, next_write, write_budget
from fastctl.testing import VirtualTimeLoop, run_virtual

from .test_sharding_protocol import SLOTS, LeaseStore

# -- the pure rules ---------------------------------------------------------------------------


def test_the_next_write_is_due_a_retry_period_after_the_last_send() -> None:
    """Not after the answer, nor after the reads: their time comes out of the period."""
    due = next_write(ok=True, sent_at=10.0, now=10.7, deadline=14.0, retry_period=1.0, jitter=0)
    assert due == pytest.approx(0.3)
    # A write that took longer than the period: the next one goes at once.
    assert next_write(ok=True, sent_at=10.0, now=11.5, deadline=14.0, retry_period=1, jitter=0) == 0


def test_the_period_is_jittered_per_write() -> None:
    """Members that a slow API server answers together drift apart again."""
    plain = next_write(ok=True, sent_at=0.0, now=0.0, deadline=4.0, retry_period=1.0, jitter=0.0)
    most = next_write(
        ok=True, sent_at=0.0, now=0.0, deadline=4.0, retry_period=1.0, jitter=RETRY_JITTER
    )
    assert plain == pytest.approx(1.0)
    assert most == pytest.approx(1.0 + RETRY_JITTER)


def test_a_failed_write_is_retried_until_the_tenure_really_ends() -> None:
    """Writes that fail at once, from a retry period after the last success: the retries
    come closer as the deadline nears (each leaves room for the next), never closer than
    the floor, and the last one goes out just before the deadline."""
    deadline, period = 4.0, 1.0
    attempts: list[float] = []
    now = next_write(
        ok=True, sent_at=0.0, now=0.0, deadline=deadline, retry_period=period, jitter=0
    )
    while now < deadline:
        attempts.append(now)
        now += next_write(
            ok=False, sent_at=now, now=now, deadline=deadline, retry_period=period, jitter=0
        )
    assert attempts[:3] == pytest.approx([1.0, 2.0, 3.0])  # the period while time is left
    assert attempts[3] == pytest.approx(3.5)  # then half the time left
    assert deadline - attempts[-1] <= RETRY_FLOOR * period
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert min(gaps) >= RETRY_FLOOR * period - 1e-9
    assert len(attempts) < 10


def test_without_a_tenure_a_failed_write_waits_the_plain_period() -> None:
    assert next_write(
        ok=False, sent_at=20.0, now=20.1, deadline=-math.inf, retry_period=1.0, jitter=0
    ) == pytest.approx(0.9)
    # The attempt that timed out at the tenure's end: a new one at once.
    assert next_write(ok=False, sent_at=1.0, now=4.0, deadline=4.0, retry_period=1, jitter=0) == 0


def test_a_write_may_take_all_the_time_left_in_the_tenure() -> None:
    assert write_budget(1.3, deadline=4.0, renew_deadline=4.0) == pytest.approx(2.7)
    assert write_budget(3.9, deadline=4.0, renew_deadline=4.0) == pytest.approx(0.1)
    # No tenure: the renew deadline (an answer later than that starts no tenure).
    assert write_budget(5.0, deadline=4.0, renew_deadline=4.0) == 4.0
    assert write_budget(0.0, deadline=-math.inf, renew_deadline=10.0) == 10.0


def test_a_read_counts_only_for_the_writes_completed_before_it_was_sent() -> None:
    """Reads run beside the writes: a claim published by a write that completed while the
    read was on its way is not served on that read's strength (rule 3)."""
    member = Member("a", 4, renew_deadline=4.0)
    member.wrote(0.0, frozenset())
    member.observed({}, 0.1)
    assert member.claiming == {0, 1, 2, 3}
    read_sent = member.durable
    member.wrote(1.0, member.to_publish())  # the claims are written while the read travels
    member.observed({}, 1.5, read_sent)
    assert member.serving == set()
    member.observed({}, 1.6, member.durable)  # a read sent after that write
    assert member.serving == {0, 1, 2, 3}


def tenure_lapses(latencies: list[float], jitters: list[float], config: Sharding) -> bool:
    """The writer alone, by the rules: each write takes its latency; True if an answer ever
    came after the deadline then in force (the tenure ran out between two successes)."""
    member = Member("a", 1, config.renew_deadline)
    now = 0.0
    for latency, jitter in zip(latencies, jitters, strict=True):
        sent = now
        budget = write_budget(sent, member.deadline, config.renew_deadline)
        ok = latency < budget
        if member.valid(sent) and not ok:
            return True
        now = sent + min(latency, budget)
        if ok:
            member.wrote(sent, frozenset())
        now += next_write(
            ok=ok,
            sent_at=sent,
            now=now,
            deadline=member.deadline,
            retry_period=config.retry_period,
            jitter=jitter,
        )
    return False


SHORT = Sharding("g", identity="a", lease_duration=6, renew_deadline=4, retry_period=1)
DEFAULT = Sharding("g", identity="a")


@settings(max_examples=200, deadline=None)
@given(data=st.data(), config=st.sampled_from([SHORT, DEFAULT]))
def test_writes_slower_than_a_retry_period_keep_the_tenure(
    data: st.DataObject, config: Sharding
) -> None:
    """Every write takes up to half the renew deadline (2 s at 6/4/1, 5 s with the
    defaults), reads take what they take: the tenure never runs out."""
    bound = config.renew_deadline / 2
    latencies = data.draw(st.lists(st.floats(0, bound * 0.999), min_size=30, max_size=30))
    jitters = data.draw(st.lists(st.floats(0, RETRY_JITTER), min_size=30, max_size=30))
    assert not tenure_lapses(latencies, jitters, config)


def test_one_write_as_slow_as_the_deadline_allows_keeps_the_tenure() -> None:
    """Among fast writes, one that takes the renew deadline less the longest period."""
    slowest = SHORT.renew_deadline - SHORT.retry_period * (1 + RETRY_JITTER)
    latencies = [0.01] * 5 + [slowest * 0.999] + [0.01] * 5
    assert not tenure_lapses(latencies, [RETRY_JITTER] * 11, SHORT)
    # The bounds are tight: a little more and the tenure runs out.
    assert tenure_lapses([0.01] * 5 + [slowest * 1.01] + [0.01] * 5, [RETRY_JITTER] * 11, SHORT)
    steady = SHORT.renew_deadline / 2
    assert tenure_lapses([steady * 1.01] * 10, [0.0] * 10, SHORT)


# -- real members against a slow Lease server ---------------------------------------------------


class SlowServer:
    """The group's Leases behind fixed latencies: every write takes `write_latency` to
    apply and as long again to answer, every list `list_latency`; writes can be refused
    (500, before they apply) for a while after a given write."""

    def __init__(self, store: LeaseStore, write_latency: float, list_latency: float) -> None:
        self.store = store
        self.write_latency = write_latency
        self.list_latency = list_latency
        self.refuse_until = 0.0
        self._outage_after: float | None = None

    def refuse_after_next_write(self, seconds: float) -> None:
        """The next write succeeds; writes are refused for `seconds` after its answer."""
        self._outage_after = seconds

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if loop.time() < self.refuse_until:
            raise ApiError(500, "InternalError", "refused")
        await asyncio.sleep(self.write_latency / 2)
        written = self.store.write(current, body)
        await asyncio.sleep(self.write_latency / 2)
        if self._outage_after is not None:
            self.refuse_until = loop.time() + self._outage_after
            self._outage_after = None
        return written

    async def list(self) -> list[dict[str, Any]]:
        await asyncio.sleep(self.list_latency)
        return self.store.list()

    async def delete(self, lease: Mapping[str, Any]) -> None:
        self.store.delete(lease)


def short(identity: str, slots: int = SLOTS) -> Sharding:
    return Sharding(
        "g", identity=identity, slots=slots, lease_duration=6, renew_deadline=4, retry_period=1
    )


async def settle(members: list[ShardMember], seconds: float) -> None:
    await asyncio.sleep(seconds)
    expected = assign([m.identity for m in members], SLOTS)
    assert {m.identity: m.serving for m in members} == expected


def test_slow_reads_never_delay_the_renewals() -> None:
    """Writes take 1.5 s, reads 3.5 s, at 6/4/1: a write, a read and a retry period in a
    row (6 s) would overrun the 4 s renew deadline every time. The writes keep their own
    pace, so the tenure holds, and the slow reads still bring the member its slots."""

    async def main(loop: VirtualTimeLoop) -> None:
        server = SlowServer(LeaseStore(), write_latency=1.5, list_latency=3.5)
        member = ShardMember(server, short("m0"))
        task = loop.create_task(member.run())
        await settle([member], 30)
        await asyncio.sleep(120)
        assert member.lost == 0, "the tenure ran out"
        assert member.serving == set(range(SLOTS))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run_virtual(_with_the_loop(main))


def test_a_member_retries_refused_writes_until_its_tenure_ends() -> None:
    """Right after a successful write, writes are refused for 3.7 s of the 4 s renew
    deadline: a retry a period apart would come too late, retries that close in on the
    deadline get one through and the slots are kept."""

    async def main(loop: VirtualTimeLoop) -> None:
        server = SlowServer(LeaseStore(), write_latency=0.02, list_latency=0.02)
        member = ShardMember(server, short("m0"))
        task = loop.create_task(member.run())
        await settle([member], 20)
        for _ in range(5):
            server.refuse_after_next_write(3.7)
            await asyncio.sleep(15)
            assert member.lost == 0, "the tenure ran out"
            assert member.serving == set(range(SLOTS))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run_virtual(_with_the_loop(main))


def test_three_members_on_a_slow_api_server_keep_their_tenures() -> None:
    """Every request takes 1.8 s, for all three members alike: they split the slots and
    none loses its tenure (reading and writing in one round, each member lost it every few
    seconds, all of them together)."""

    async def main(loop: VirtualTimeLoop) -> None:
        store = LeaseStore()
        members = [
            ShardMember(SlowServer(store, write_latency=1.8, list_latency=1.8), short(f"m{i}"))
            for i in range(3)
        ]
        tasks = [loop.create_task(m.run()) for m in members]
        await settle(members, 60)
        lost = [m.lost for m in members]
        await asyncio.sleep(120)
        assert [m.lost for m in members] == lost, "a tenure ran out"
        assert all(m.serving for m in members)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run_virtual(_with_the_loop(main))


class Scripted:
    """A Lease server whose requests take scripted times: each write is applied after
    the first delay of its plan and answered after the second; each list reads the store
    after the first and answers after the second (then fast: 5 ms and 5 ms)."""

    def __init__(
        self,
        store: LeaseStore,
        writes: list[tuple[float, float]],
        lists: list[tuple[float, float]],
    ) -> None:
        self.store = store
        self.writes = list(writes)
        self.lists = list(lists)

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        applied, answered = self.writes.pop(0) if self.writes else (0.005, 0.005)
        await asyncio.sleep(applied)
        written = self.store.write(current, body)
        await asyncio.sleep(answered)
        return written

    async def list(self) -> list[dict[str, Any]]:
        read, answered = self.lists.pop(0) if self.lists else (0.005, 0.005)
        await asyncio.sleep(read)
        items = self.store.list()
        await asyncio.sleep(answered)
        return items

    async def delete(self, lease: Mapping[str, Any]) -> None:
        self.store.delete(lease)


def test_a_claim_written_while_a_read_travels_is_not_served_on_that_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reads run beside the writes. m0, alone when it first read, claims the only slot;
    its next read is sent, and then the write that publishes the claim completes while
    that read travels (the write applied late). m1 joins in between: it sees m0 publish
    nothing, claims the slot (its rendezvous owner) and serves it. The read m0 sent
    before its claim was written proves nothing about m1's claim: serving on it would put
    the slot on both members."""
    monkeypatch.setattr(random, "uniform", lambda low, high: 0.0)  # periods of exactly 1 s

    async def main(loop: VirtualTimeLoop) -> None:
        store = LeaseStore()
        first = Scripted(
            store,
            # W0 fast; W1 (t=1) fast; W2 (t=2) publishes the claim, applied at 3.2
            writes=[(0.005, 0.005), (0.005, 0.005), (1.2, 0.1)],
            # R1 (t=0.01) reads at once and answers at 1.5: m0 alone, it claims;
            # R2 (sent at 1.5, after W1) reads at once and answers at 3.6, after W2
            lists=[(0.001, 1.489), (0.001, 2.099)],
        )
        m0 = ShardMember(first, short("m0", slots=1))
        m1 = ShardMember(Scripted(store, [], []), short("m1", slots=1))
        both: list[float] = []
        loop.on_step.append(
            lambda: both.append(loop.time()) if m0.serves(0) and m1.serves(0) else None
        )
        tasks = [loop.create_task(m0.run())]
        await asyncio.sleep(1.505)
        tasks.append(loop.create_task(m1.run()))  # its Lease appears after R2's read
        await asyncio.sleep(2.5)
        assert m1.serving == {0}, "the scenario did not happen: m1 should serve the slot"
        await asyncio.sleep(20)
        assert both == []
        assert m0.serving == frozenset()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run_virtual(_with_the_loop(main))


async def _with_the_loop(main: Callable[[VirtualTimeLoop], Awaitable[None]]) -> None:
    """Run `main` with the virtual loop it runs on."""
    await main(VirtualTimeLoop.current())
