"""The sharding protocol, end to end without an API server: real `ShardMember` loops on a
virtual clock, each talking to one in-memory Lease store through its own faulty link, with
Hypothesis choosing the schedule.

The links add latency (often as long as a retry period, sometimes longer than the renew
deadline), fail requests before or after the store applied them, and partition a member
for a while. Members crash (their loop is cancelled, as kill -9 would end it), leave
gracefully, join; someone writes a member's Lease behind its back; dead members' Leases
are garbage-collected. Every member's runtime is modelled by its drainer: the reconciles of
a slot that stops being served keep running until the drainer returns (up to 3 s for a
graceful handover, within the safety margin when urgent).

At every turn of the event loop the test checks the rule across replicas: **no slot is
active on two members at once** (active: served now, or still draining). After the faults,
a quiet stretch must end with every slot served by exactly its rendezvous owner among the
live members: the protocol is safe *and* it makes progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
from collections.abc import Mapping
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastctl.kube._http import ApiError
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._member import ShardMember
from fastctl.testing import VirtualTimeLoop, run_virtual

SLOTS = 16
GROUP = "g"
PROTOCOL_EXAMPLES = int(os.environ.get("FASTCTL_SHARDING_PROTOCOL_EXAMPLES", "60"))
"""Schedules per run of the end-to-end property: 60 by default; `scripts/mutants sharding`
sets fewer (it runs this test once per mutant), and derandomizes, so that every mutant meets
the same schedules."""


def config(identity: str) -> Sharding:
    return Sharding(GROUP, identity=identity, slots=SLOTS)  # 15 / 10 / 2 s, the defaults


class LeaseStore:
    """The group's Leases as the API server keeps them: resourceVersions, preconditions,
    404 and 409, and linearizable reads."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.written_at: dict[str, float] = {}

    def _stamp(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored: dict[str, Any] = orjson.loads(orjson.dumps(lease))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[stored["metadata"]["name"]] = stored
        self.written_at[stored["metadata"]["name"]] = asyncio.get_running_loop().time()
        return copy(stored)

    def write(self, current: Mapping[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        stored = self.leases.get(name)
        if current is None:
            if stored is not None:
                raise ApiError(409, "AlreadyExists", name)
        elif stored is None:
            raise ApiError(404, "NotFound", name)
        elif stored["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", name)
        return self._stamp(body)

    def list(self) -> list[dict[str, Any]]:
        return [copy(lease) for lease in self.leases.values()]

    def delete(self, lease: Mapping[str, Any]) -> None:
        name = lease["metadata"]["name"]
        stored = self.leases.get(name)
        if stored is not None and (
            stored["metadata"]["resourceVersion"] == lease["metadata"]["resourceVersion"]
        ):
            del self.leases[name]

    def touch(self, name: str) -> None:
        """Somebody else writes the Lease, unchanged: its holder's next write gets a 409."""
        if name in self.leases:
            self._stamp(self.leases[name])


def copy(lease: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(lease))
    return copied


class Link:
    """One member's connection to the store: latency, failures, partitions."""

    def __init__(self, store: LeaseStore, rng: random.Random) -> None:
        self.store = store
        self.rng = rng
        self.lossy = True
        self.cut_until = 0.0

    async def _delay(self) -> None:
        draw = self.rng.random()
        if self.lossy and draw < 0.05:
            delay = self.rng.uniform(2.0, 12.0)  # slower than the renew deadline
        elif self.lossy and draw < 0.35:
            delay = self.rng.uniform(0.2, 2.5)  # as slow as a retry period
        else:
            delay = self.rng.uniform(0.001, 0.05)
        # A partition holds every request until it heals.
        await asyncio.sleep(max(delay, self.cut_until - asyncio.get_running_loop().time()))

    def _fails(self) -> bool:
        return self.lossy and self.rng.random() < 0.08

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        await self._delay()
        if self._fails():
            raise ApiError(500, "InternalError", "lost before it was applied")
        written = self.store.write(current, body)
        await self._delay()
        if self._fails():
            raise TimeoutError  # applied, but the answer was lost
        return written

    async def list(self) -> list[dict[str, Any]]:
        await self._delay()
        items = self.store.list()
        await self._delay()
        if self._fails():
            raise ApiError(503, "ServiceUnavailable", "try again")
        return items

    async def delete(self, lease: Mapping[str, Any]) -> None:
        await self._delay()
        self.store.delete(lease)


class Runtime:
    """A member's reconciles, as far as the rule is concerned: the slots some reconcile may
    be running in. A slot joins the set whenever the member serves it, and leaves it only
    when a drain of it returns (or the process dies): a member that stopped serving a slot
    without draining it keeps it active for good, as its reconciles would be."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.running: set[int] = set()
        self.hangs = False  # reconciles that ignore cancellation (to see the check fail)

    async def drain(self, slots: frozenset[int], urgent: bool) -> None:
        if self.hangs:
            await asyncio.Event().wait()
        await asyncio.sleep(self.rng.uniform(0, 0.4 if urgent else 3.0))
        self.running -= slots


class Replica:
    def __init__(self, name: str, store: LeaseStore, rng: random.Random) -> None:
        self.link = Link(store, rng)
        self.runtime = Runtime(rng)
        self.member = ShardMember(self.link, config(name), drainer=self.runtime.drain)
        self.task = asyncio.get_running_loop().create_task(self.member.run())
        self.alive = True

    def active(self, slot: int) -> bool:
        if self.member.serves(slot):
            self.runtime.running.add(slot)
        return slot in self.runtime.running


class Cluster:
    def __init__(self, loop: VirtualTimeLoop, rng: random.Random) -> None:
        self.loop = loop
        self.rng = rng
        self.store = LeaseStore()
        self.replicas: list[Replica] = []
        self.violations: list[str] = []
        loop.on_step.append(self.check)

    def check(self) -> None:
        for slot in range(SLOTS):
            active = [r.member.identity for r in self.replicas if r.active(slot)]
            if len(active) > 1:
                self.violations.append(f"t={self.loop.time():.3f}: slot {slot} on {active}")

    def join(self) -> None:
        self.replicas.append(Replica(f"m{len(self.replicas)}", self.store, self.rng))

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def pick(self, index: int) -> Replica | None:
        live = self.live()
        return live[index % len(live)] if len(live) > 1 else None

    async def crash(self, index: int) -> None:
        if (replica := self.pick(index)) is not None:
            replica.alive = False
            replica.task.cancel()
            replica.runtime.running.clear()  # kill -9: its reconciles end with it

    async def leave(self, index: int) -> None:
        if (replica := self.pick(index)) is not None:
            replica.alive = False
            await replica.member.leave()
            replica.task.cancel()

    async def partition(self, index: int) -> None:
        if (replica := self.pick(index)) is not None:
            replica.link.cut_until = self.loop.time() + self.rng.uniform(5, 40)

    async def touch(self, index: int) -> None:
        names = sorted(self.store.leases)
        if names:
            self.store.touch(names[index % len(names)])

    async def collect(self, index: int) -> None:
        """An administrator deletes the Leases of crashed members (never a live one's)."""
        for replica in self.replicas:
            if not replica.alive:
                self.store.leases.pop(replica.member.config.lease_name, None)

    async def stop(self) -> None:
        for replica in self.replicas:
            replica.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replica.task
        await asyncio.sleep(1)  # let the urgent drains of the loops' ends run


FAULTS = st.lists(
    st.tuples(
        st.floats(0, 90),
        st.sampled_from(["crash", "leave", "join", "partition", "touch", "collect"]),
        st.integers(0, 7),
    ),
    max_size=8,
)


async def scenario(
    loop: VirtualTimeLoop, rng: random.Random, members: int, faults: list[tuple[float, str, int]]
) -> Cluster:
    cluster = Cluster(loop, rng)
    for _ in range(members):
        cluster.join()
    for when, kind, index in sorted(faults):
        await asyncio.sleep(max(0.0, when - loop.time()))
        if kind == "join":
            cluster.join()
        else:
            await getattr(cluster, kind)(index)
    # The quiet stretch: fast links, no faults, long enough for expiries and handovers.
    for replica in cluster.replicas:
        replica.link.lossy = False
        replica.link.cut_until = 0.0
    await asyncio.sleep(max(0.0, 90 - loop.time()) + 60 + 40)
    return cluster


@settings(
    max_examples=PROTOCOL_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize="FASTCTL_SHARDING_PROTOCOL_EXAMPLES" in os.environ,
)
@given(members=st.integers(1, 4), faults=FAULTS, seed=st.integers(0, 2**32 - 1))
def test_no_slot_on_two_members_and_every_slot_served(
    members: int, faults: list[tuple[float, str, int]], seed: int
) -> None:
    async def main() -> None:
        loop = VirtualTimeLoop.current()
        cluster = await scenario(loop, random.Random(seed), members, faults)
        live = cluster.live()
        expected = assign([r.member.identity for r in live], SLOTS)
        serving = {r.member.identity: r.member.serving for r in live}
        await cluster.stop()
        assert cluster.violations == []
        assert serving == expected

    run_virtual(main())


async def two_settled_members(loop: VirtualTimeLoop, *, seed: int) -> Cluster:
    """Two members on fast, reliable links, after they have split the slots."""
    cluster = Cluster(loop, random.Random(seed))
    cluster.join()
    cluster.join()
    for replica in cluster.replicas:
        replica.link.lossy = False
    await asyncio.sleep(20)
    return cluster


def test_two_members_split_the_slots_and_a_crash_hands_them_over() -> None:
    """The plain story, with numbers: two members split the 16 slots; the survivor of a
    crash takes the dead member's slots only once its Lease has expired."""

    async def main() -> None:
        loop = VirtualTimeLoop.current()
        cluster = await two_settled_members(loop, seed=7)
        first, second = cluster.replicas
        assert first.member.serving | second.member.serving == set(range(SLOTS))
        assert first.member.serving
        assert second.member.serving
        dead_slots = second.member.serving
        await cluster.crash(1)
        while not dead_slots <= first.member.serving:
            await first.member.wait_change(first.member.version)
        # Not before the dead member's Lease expired: a lease duration after its last write
        # reached the store, with no slack (this is the safety bound); and not much later.
        last_write = cluster.store.written_at[second.member.config.lease_name]
        assert loop.time() >= last_write + first.member.config.lease_duration
        assert loop.time() <= last_write + first.member.config.lease_duration + 3 * 2.4 + 0.5
        assert first.member.serving == set(range(SLOTS))
        await cluster.stop()

    run_virtual(main())


def test_the_check_sees_two_members_on_one_slot() -> None:
    """The invariant can fail: a member cut off from the API server whose reconciles ignore
    cancellation is still active on its slots when the other takes them over."""

    async def main() -> list[str]:
        loop = VirtualTimeLoop.current()
        cluster = await two_settled_members(loop, seed=3)
        cut_off = cluster.replicas[0]
        cut_off.runtime.hangs = True
        cut_off.link.cut_until = loop.time() + 60
        await asyncio.sleep(40)
        await cluster.stop()
        return cluster.violations

    assert run_virtual(main())


def test_a_member_cut_off_stops_before_the_others_take_its_slots() -> None:
    """A partition longer than the lease: the cut-off member stops serving at its renew
    deadline, the other takes the slots over after the expiry, never in between, and the
    cut-off member gets its share back once the partition heals."""

    async def main() -> None:
        loop = VirtualTimeLoop.current()
        cluster = await two_settled_members(loop, seed=5)
        cut_off, other = cluster.replicas
        its_slots = cut_off.member.serving
        assert its_slots
        cut_off.link.cut_until = loop.time() + 40
        while not its_slots <= other.member.serving:
            await other.member.wait_change(other.member.version)
        assert cut_off.member.serving == frozenset()
        await asyncio.sleep(60)
        assert cut_off.member.serving == its_slots
        await cluster.stop()
        assert cluster.violations == []

    run_virtual(main())


def test_a_tenure_timer_that_runs_a_hair_early_still_ends_the_tenure() -> None:
    """A counterexample the property above found in CI, replayed as Hypothesis runs an
    example (the global `random` seeded with 0: the members' retry jitter reads it). m0,
    partitioned, reaches its renew deadline at 14.5834...; its timer ran at a reading one
    unit in the last place below the deadline, found the tenure valid and stopped nothing,
    and no timer was left: m0's reconciles of 7 slots ran on until its crash at 41 s, and
    from 40.2 s m1 served four of those slots too."""
    faults = [
        (0.0, "leave", 6),
        (0.0, "partition", 1),
        (0.0, "partition", 1),
        (0.0, "partition", 4),
        (11.0, "partition", 0),
        (41.0, "crash", 0),
    ]
    random.seed(0)
    test_no_slot_on_two_members_and_every_slot_served.hypothesis.inner_test(  # type: ignore[attr-defined]
        members=4, faults=faults, seed=385172
    )


def test_the_tenure_timer_run_one_ulp_early_stops_every_slot_and_drains_urgently() -> None:
    """The same, on one member: its timer runs at the largest reading below the deadline."""

    async def main() -> None:
        drained: list[tuple[frozenset[int], bool]] = []

        async def drainer(slots: frozenset[int], urgent: bool) -> None:
            drained.append((slots, urgent))

        member = ShardMember(Link(LeaseStore(), random.Random(0)), config("m0"), drainer=drainer)
        deadline = asyncio.get_running_loop().time() + 5.0
        member._rules.serving = {1, 5}
        member._rules.deadline = deadline
        member._now = lambda: math.nextafter(deadline, -math.inf)  # type: ignore[method-assign]
        assert member.serving == {1, 5}
        member._end_tenure("renewals failed for the renew deadline")
        assert member.serving == frozenset()
        assert member._rules.serving == set()
        await asyncio.sleep(0)
        assert drained == [(frozenset({1, 5}), True)]

    asyncio.run(main())
