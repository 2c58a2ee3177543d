"""Real `ShardMember` loops with real `ShardGate`s, on a virtual clock against the in-memory
Lease store of the protocol tests: what the gate admits while the member drains, and what a
leave does to the reconciles still running when the tenure runs out.

The protocol tests model a member's reconciles by its drainer alone, and the runtime tests
give the gate a fake member with no drains; here the two real halves meet, and the rule is
checked at every turn of the loop on the reconciles themselves: **no slot has a running
reconcile on one member while another serves it** (or runs one).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import pytest

from fastctl.kube._http import ApiError
from fastctl.runtime.leader._rules import RETRY_JITTER
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._member_api import member_lease
from fastctl.runtime.sharding._rules import GROUP_LABEL, SLOTS_ANNOTATION
from fastctl.testing import VirtualTimeLoop, run_virtual

from .test_sharding_protocol import GROUP, SLOTS, LeaseStore, Link, config


class Node:
    """One replica: its member, its gate (the member's drainer), its link to the store."""

    def __init__(self, name: str, store: LeaseStore) -> None:
        self.link = Link(store, random.Random(name))
        self.link.lossy = False
        self.member = ShardMember(self.link, config(name), drainer=self._drain)
        self.gate = ShardGate(self.member, "uid", SLOTS)
        self.gate.bind(asyncio.get_running_loop())
        self.task = asyncio.get_running_loop().create_task(self.member.run())

    async def _drain(self, slots: frozenset[int], urgent: bool) -> None:
        await self.gate.drain(slots, urgent)

    def active(self, slot: int) -> bool:
        """Serving `slot`, or still running a reconcile of it."""
        return self.member.serves(slot) or self.gate.running(frozenset({slot})) > 0

    def start(self, obj: dict[str, Any], reconcile: Callable[..., Any]) -> asyncio.Task[Any]:
        tracked = cast(Callable[..., Any], self.gate.track(reconcile))
        return asyncio.get_running_loop().create_task(tracked(obj, None))

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Group:
    """The nodes of one group, checked at every turn of the loop."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop
        self.store = LeaseStore()
        self.nodes: list[Node] = []
        self.violations: list[str] = []
        loop.on_step.append(self.check)

    def join(self, name: str) -> Node:
        node = Node(name, self.store)
        self.nodes.append(node)
        return node

    def check(self) -> None:
        for slot in range(SLOTS):
            active = [n.member.identity for n in self.nodes if n.active(slot)]
            if len(active) > 1:
                self.violations.append(f"t={self.loop.time():.3f}: slot {slot} on {active}")

    async def stop(self) -> None:
        for node in self.nodes:
            await node.stop()
        await asyncio.sleep(1)  # the urgent drains of the loops' ends


def obj_in(gate: ShardGate, slot: int, name: str) -> dict[str, Any]:
    """An object whose uid falls in `slot`."""
    for i in range(10_000):
        uid = f"{name}-{i}"
        if gate.slot_of(uid) == slot:
            return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}
    raise AssertionError("no uid found")


async def until_changed(member: ShardMember, done: Callable[[], bool]) -> None:
    """Wait for `done()`, checked at each change of `member`'s slots, for at most a minute
    of the virtual clock (a broken rule may leave the slots as they are for good)."""
    async with asyncio.timeout(60):
        while not done():
            await member.wait_change(member.version)


def test_the_gate_refuses_a_slot_while_the_member_drains_it() -> None:
    """A join moves a slot away while a reconcile of it runs: the member drains the slot
    gracefully, and in that time the gate starts no reconcile of it (the running one goes
    on to its end); the joiner serves the slot only after the drain."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        first = group.join("m0")
        await asyncio.sleep(10)
        assert first.member.serving == set(range(SLOTS))
        moving = min(assign(["m0", "m1"], SLOTS)["m1"])
        release = asyncio.Event()
        ran: list[str] = []

        async def reconcile(obj: dict[str, Any], ctx: Any) -> str:
            ran.append(obj["metadata"]["name"])
            await release.wait()
            return "done"

        running = first.start(obj_in(first.gate, moving, "long"), reconcile)
        await asyncio.sleep(0)
        assert ran == ["long"]
        second = group.join("m1")
        await until_changed(first.member, lambda: moving not in first.member.serving)
        # The slot left `serving` and drains: its reconcile runs on, and none may start.
        assert first.gate.running(frozenset({moving})) == 1
        later = obj_in(first.gate, moving, "later")
        assert not first.gate.admits(later)
        assert await first.start(later, reconcile) is None
        assert ran == ["long"], "the gate started a reconcile of a slot being drained"
        await asyncio.sleep(20)  # rounds go by: still drained, never taken over
        assert moving not in second.member.serving
        assert not first.member.serves(moving)
        release.set()
        assert await running == "done"
        await until_changed(second.member, lambda: moving in second.member.serving)
        await group.stop()
        assert group.violations == []

    run_virtual(_with_the_loop(main))


async def two_members(loop: VirtualTimeLoop) -> tuple[Group, Node, Node]:
    group = Group(loop)
    first, second = group.join("m0"), group.join("m1")
    await asyncio.sleep(20)
    assert first.member.serving | second.member.serving == set(range(SLOTS))
    return group, first, second


async def forever(obj: dict[str, Any], ctx: Any) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("timeout", [None, 1.0], ids=["default-timeout", "short-timeout"])
def test_a_leave_never_lets_a_reconcile_outlive_the_tenure(
    timeout: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewals already fail (the member is cut off) when `leave()` starts, half a second
    before the tenure ends: its graceful drain must not keep the reconcile running past the
    tenure, since the other member takes the slot over once the Lease expires. With a
    `timeout` shorter than the time left, leave() gives up first, and the tenure's end
    still cancels the reconcile."""

    async def main(loop: VirtualTimeLoop) -> None:
        group, leaving, other = await two_members(loop)
        slot = min(leaving.member.serving)
        running = leaving.start(obj_in(leaving.gate, slot, "long"), forever)
        await asyncio.sleep(0)
        assert leaving.gate.running() == 1
        leaving.link.cut_until = loop.time() + 120
        await asyncio.sleep(0.2)  # requests already in flight wait for the cut to heal
        tenure_end = leaving.member._rules.deadline
        assert tenure_end > loop.time() + 1
        await asyncio.sleep(tenure_end - 0.5 - loop.time())
        assert leaving.member.serves(slot)
        served = len(leaving.member.serving)
        with caplog.at_level(logging.WARNING, logger="fastctl.sharding"):
            assert await leaving.member.leave(timeout=timeout) is False  # cut off: not written
            await until_changed(other.member, lambda: slot in other.member.serving)
        assert group.violations == []
        assert running.cancelled()
        name = leaving.member.config.group
        assert (
            f"shard group {name}: the tenure ended while leaving: cancelling the reconciles "
            f"of {served} slots that still run"
        ) in [r.getMessage() for r in caplog.records]
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_a_leave_after_the_tenure_ran_out_cancels_what_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The tenure's end is a timer; a leave that runs after the deadline but before that
    timer (a busy loop) must still cancel the running reconciles, not forget them: the
    tenure is ended there, as the timer would have, and nothing is left to drain."""

    async def main(loop: VirtualTimeLoop) -> None:
        group, leaving, other = await two_members(loop)
        slot = min(leaving.member.serving)
        served = len(leaving.member.serving)
        running = leaving.start(obj_in(leaving.gate, slot, "long"), forever)
        await asyncio.sleep(0)
        leaving.link.cut_until = loop.time() + 120
        await asyncio.sleep(0.2)
        leaving.member._rules.deadline = loop.time()  # over now; the timer has not run yet
        with caplog.at_level(logging.WARNING, logger="fastctl.sharding"):
            await leaving.member.leave()
        said = [r.getMessage() for r in caplog.records]
        assert said[0] == (
            f"shard group g: stopped serving {served} slots: renewals failed for the renew deadline"
        )
        assert not [line for line in said if "while leaving" in line]
        await until_changed(other.member, lambda: slot in other.member.serving)
        assert group.violations == []
        assert running.cancelled()
        await group.stop()

    run_virtual(_with_the_loop(main))


async def _with_the_loop(main: Callable[[VirtualTimeLoop], Awaitable[None]]) -> None:
    """Run `main` with the virtual loop it runs on."""
    await main(VirtualTimeLoop.current())


def test_a_member_cut_off_stops_serving_at_its_tenures_end_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        group, cut, _ = await two_members(loop)
        served = len(cut.member.serving)
        assert served > 0
        cut.link.cut_until = loop.time() + 120
        with caplog.at_level(logging.WARNING, logger="fastctl.sharding"):
            await until_changed(cut.member, lambda: not cut.member.serving)
        name = cut.member.config.group
        assert (
            f"shard group {name}: stopped serving {served} slots: renewals failed for the "
            "renew deadline"
        ) in [r.getMessage() for r in caplog.records]
        await group.stop()

    run_virtual(_with_the_loop(main))


@pytest.mark.parametrize(
    ("timeout", "budget"), [(None, 10.0), (1.0, 1.0)], ids=["default", "given"]
)
def test_a_leave_that_cannot_write_gives_up_after_its_budget(
    timeout: float | None, budget: float
) -> None:
    """Cut off, the leave's write hangs: it gives up after `timeout`, by default after the
    renew deadline (10 s here), not when the link heals two minutes later."""

    async def main(loop: VirtualTimeLoop) -> None:
        group, leaving, _ = await two_members(loop)
        leaving.link.cut_until = loop.time() + 120
        began = loop.time()
        assert await leaving.member.leave(timeout=timeout) is False
        assert loop.time() - began == pytest.approx(budget, abs=1e-6)
        await group.stop()

    run_virtual(_with_the_loop(main))


class _ConflictOnce(Link):
    """A link whose next write, once `trip` is set, finds the Lease changed and then gone
    (a 409, and a list without it); `recreated` is set when the member creates it again."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store, random.Random("conflict"))
        self.lossy = False
        self.trip = False
        self.recreated = asyncio.Event()

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if self.trip:
            self.trip = False
            del self.store.leases[name]
            raise ApiError(409, "Conflict", name)
        written = await super().write(current, body)
        if current is None and name in self.store.leases:
            self.recreated.set()
        return written


def test_a_conflict_after_which_our_lease_is_gone_creates_it_again() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        link = _ConflictOnce(LeaseStore())

        async def drain(slots: frozenset[int], urgent: bool) -> None:
            return None

        member = ShardMember(link, config("m0"), drainer=drain)
        task = loop.create_task(member.run())
        await until_changed(member, lambda: member.serving == set(range(SLOTS)))
        link.recreated.clear()
        link.trip = True
        async with asyncio.timeout(60):
            await link.recreated.wait()
        assert not task.done()  # the member goes on
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_a_clean_leave_publishes_no_holder_and_no_slot_in_its_groups_lease() -> None:
    """Connected, a leave writes its Lease once more: no holder, no slot, a one-second
    duration and the group's label (the others list the group by it), so the other member
    takes every slot over at once instead of after the old lease duration. A second leave
    (a Manager stopping after a leave) finds nothing left to cancel and writes again."""

    async def main(loop: VirtualTimeLoop) -> None:
        group, leaving, other = await two_members(loop)
        name = leaving.member.config.lease_name
        assert await leaving.member.leave() is True
        lease = group.store.leases[name]
        assert lease["spec"]["holderIdentity"] == ""
        assert lease["spec"]["leaseDurationSeconds"] == 1
        assert lease["metadata"]["labels"] == {GROUP_LABEL: leaving.member.config.group}
        assert lease["metadata"]["annotations"] == {SLOTS_ANNOTATION: ""}
        left_at = loop.time()
        await until_changed(other.member, lambda: other.member.serving == set(range(SLOTS)))
        assert loop.time() - left_at < leaving.member.config.lease_duration
        assert await leaving.member.leave() is True
        assert group.violations == []
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_a_leave_whose_write_fails_says_why(caplog: pytest.LogCaptureFixture) -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        group, leaving, _ = await two_members(loop)

        async def refused(current: Any, body: dict[str, Any]) -> dict[str, Any]:
            raise ApiError(500, "InternalError", "etcd is gone")

        leaving.link.write = refused  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="fastctl.sharding"):
            assert await leaving.member.leave() is False
        name = leaving.member.config.group
        assert f"shard group {name}: could not leave cleanly: 500 InternalError: etcd is gone" in [
            r.getMessage() for r in caplog.records
        ]
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_a_failing_renewal_is_logged_once_per_distinct_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Renewals that fail the same way again and again warn once (then at debug level); a
    new error warns again, and a timed-out request says so (a TimeoutError's text is
    empty)."""

    async def main(loop: VirtualTimeLoop) -> None:
        group, failing, _ = await two_members(loop)
        errors: list[BaseException] = [ApiError(500, "InternalError", "etcd is gone")]

        async def refused(current: Any, body: dict[str, Any]) -> dict[str, Any]:
            raise errors[0]

        failing.link.write = refused  # type: ignore[method-assign]
        name = failing.member.config.group
        with caplog.at_level(logging.DEBUG, logger="fastctl.sharding"):
            await asyncio.sleep(8)  # a few renewals, all refused
            errors[0] = TimeoutError()
            await asyncio.sleep(4)
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        refused_text = (
            f"shard group {name}: writing the member Lease: 500 InternalError: etcd is gone"
        )
        timed_out = f"shard group {name}: writing the member Lease: request timed out"
        assert said.count((logging.WARNING, refused_text)) == 1
        assert said.count((logging.DEBUG, refused_text)) >= 1
        assert said.count((logging.WARNING, timed_out)) == 1
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_serves_answers_for_the_time_it_is_given() -> None:
    """`serves(slot, now)` judges at `now`, not at the loop's time: a caller in another
    thread has no loop and passes the loop's time itself, and at the tenure's end the
    answer is no, whatever the loop's clock says."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        node = group.join("m0")
        await until_changed(node.member, lambda: bool(node.member.serving))
        slot = min(node.member.serving)
        deadline = node.member._rules.deadline
        assert loop.time() < deadline
        assert node.member.serves(slot)
        assert node.member.serves(slot, loop.time())
        assert not node.member.serves(slot, deadline)
        assert not node.member.serves(slot, deadline + 1.0)
        await group.stop()

    run_virtual(_with_the_loop(main))


class _Recorded(Link):
    """A reliable link that records when each call starts and ends, in order."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store, random.Random(0))
        self.lossy = False
        self.calls: list[str] = []

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append("write sent")
        try:
            return await super().write(current, body)
        finally:
            self.calls.append("write answered")

    async def list(self) -> list[dict[str, Any]]:
        self.calls.append("list sent")
        return await super().list()


def test_the_first_read_waits_for_the_first_write() -> None:
    """A read counts only for the writes that had completed when it was sent (rule 3), so
    a member sends none before its first write has been answered: such a read could
    promote nothing, and would only load the API server."""

    async def main(loop: VirtualTimeLoop) -> None:
        link = _Recorded(LeaseStore())
        member = ShardMember(link, config("m0"))
        task = loop.create_task(member.run())
        await until_changed(member, lambda: bool(member.serving))
        assert link.calls[:3] == ["write sent", "write answered", "list sent"]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_another_members_lease_counts_for_the_duration_it_publishes() -> None:
    """Rule 1 with the other member's own `leaseDurationSeconds` (40 s here, ours 15 s):
    its slots are not taken before 40 s after its Lease was last seen to change."""

    async def main(loop: VirtualTimeLoop) -> None:
        store = LeaseStore()
        peer = config("peer")
        store.write(None, member_lease(peer.lease_name, GROUP, "peer", 40, frozenset(range(SLOTS))))
        link = Link(store, random.Random(0))
        link.lossy = False
        member = ShardMember(link, config("m0"))
        assert member.config.lease_duration == 15
        task = loop.create_task(member.run())
        await asyncio.sleep(35)
        assert member.serving == frozenset()
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        assert loop.time() >= 40
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_the_member_counts_each_change_and_the_slots_it_gains_and_loses() -> None:
    """`version` counts the changes of `serving` (one each), `gained` and `lost` the slots
    that came and went over the member's life: alone it gains all 16; a joiner takes its
    share away (lost); when the joiner leaves, the share comes back (gained again)."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        first = group.join("m0")
        member = first.member
        assert member.version == 0
        versions = [member.version]
        changes: list[frozenset[int]] = []

        async def follow() -> None:
            while True:
                versions.append(await member.wait_change(versions[-1]))
                changes.append(member.serving)

        follower = loop.create_task(follow())
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        assert (member.gained, member.lost) == (SLOTS, 0)
        second = group.join("m1")
        share = assign(["m0", "m1"], SLOTS)["m1"]
        await until_changed(second.member, lambda: second.member.serving == share)
        assert (member.gained, member.lost) == (SLOTS, len(share))
        assert await second.member.leave() is True
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        assert (member.gained, member.lost) == (SLOTS + len(share), len(share))
        follower.cancel()
        assert versions == list(range(versions[0], versions[0] + len(versions)))
        assert len(changes) >= 3
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_a_member_says_when_it_joins_what_it_serves_and_when_the_server_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The info lines of a member's life: its join, each change of its share (with the
    members it counts), and the first answer after failed writes or reads."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        with caplog.at_level(logging.INFO, logger="fastctl.sharding"):
            first = group.join("m0")
            await until_changed(first.member, lambda: len(first.member.serving) == SLOTS)
            group.join("m1")
            share = assign(["m0", "m1"], SLOTS)["m0"]
            await until_changed(first.member, lambda: first.member.serving == share)
            write, read = first.link.write, first.link.list

            async def refused_write(current: Any, body: dict[str, Any]) -> dict[str, Any]:
                raise ApiError(500, "InternalError", "etcd is gone")

            async def refused_list() -> list[dict[str, Any]]:
                raise ApiError(500, "InternalError", "etcd is gone")

            first.link.write = refused_write  # type: ignore[method-assign]
            first.link.list = refused_list  # type: ignore[method-assign]
            await asyncio.sleep(3)
            first.link.write, first.link.list = write, read  # type: ignore[method-assign]
            await asyncio.sleep(3)
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        info = [text for level, text in said if level == logging.INFO]
        assert info[0] == "shard group g: joining as 'm0'"
        assert "shard group g: joining as 'm1'" in info
        assert f"shard group g: serving {SLOTS} of {SLOTS} slots (1 members)" in info
        assert f"shard group g: serving {len(share)} of {SLOTS} slots (2 members)" in info
        for what in ("writing the member Lease", "listing the group's Leases"):
            failed = f"shard group g: {what}: 500 InternalError: etcd is gone"
            assert (logging.WARNING, failed) in said
            again = (logging.INFO, f"shard group g: {what}: the API server answers again")
            assert said.count(again) == 1  # once, after the failures
        await group.stop()

    run_virtual(_with_the_loop(main))


def test_each_renewal_publishes_the_holder_its_duration_and_its_slots() -> None:
    """What the others read (rule 1 needs the duration, rule 3 the slots): the member's
    Lease names it as holder, for its lease duration in whole seconds, with every slot it
    serves."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        node = group.join("m0")
        await until_changed(node.member, lambda: len(node.member.serving) == SLOTS)
        await asyncio.sleep(5)  # renewals since
        lease = group.store.leases[node.member.config.lease_name]
        assert lease["spec"]["holderIdentity"] == "m0"
        assert lease["spec"]["leaseDurationSeconds"] == 15
        assert lease["metadata"]["annotations"][SLOTS_ANNOTATION] == f"0-{SLOTS - 1}"
        await group.stop()

    run_virtual(_with_the_loop(main))


class _Timed(Link):
    """A reliable link that records when each write was sent."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store, random.Random(0))
        self.lossy = False
        self.sent: list[float] = []

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.sent.append(asyncio.get_running_loop().time())
        return await super().write(current, body)


def test_a_renewal_that_succeeded_waits_a_whole_retry_period() -> None:
    """Only a failed write is retried sooner as the tenure's end nears: after a success the
    next write waits the jittered retry period, also when the renew deadline leaves little
    more room than one period (2.5 s here, for a 2 s period)."""

    async def main(loop: VirtualTimeLoop) -> None:
        link = _Timed(LeaseStore())
        tight = Sharding(GROUP, identity="m0", slots=SLOTS, renew_deadline=2.5, retry_period=2.0)
        member = ShardMember(link, tight)
        task = loop.create_task(member.run())
        await asyncio.sleep(30)
        assert member.serving == frozenset(range(SLOTS))
        gaps = [b - a for a, b in itertools.pairwise(link.sent)]
        assert len(gaps) >= 10
        assert min(gaps) >= 2.0
        assert max(gaps) <= 2.0 * (1 + RETRY_JITTER)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_a_member_whose_loop_is_cancelled_stops_serving_at_once_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancelling `run()` (a Manager stopped without a leave) ends the tenure there: no
    slot is served any more, and the reconciles still running are cancelled (an urgent
    drain), with a warning that says why."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        node = group.join("m0")
        await until_changed(node.member, lambda: len(node.member.serving) == SLOTS)
        running = node.start(obj_in(node.gate, 3, "long"), forever)
        await asyncio.sleep(0)
        version = node.member.version
        with caplog.at_level(logging.WARNING, logger="fastctl.sharding"):
            await node.stop()
            await asyncio.sleep(0.1)
        assert node.member.serving == frozenset()
        assert node.member.version == version + 1
        assert running.cancelled()
        assert [r.getMessage() for r in caplog.records] == [
            f"shard group g: stopped serving {SLOTS} slots: the membership loop stopped"
        ]

    run_virtual(_with_the_loop(main))


def test_a_member_cancelled_before_any_tenure_has_nothing_to_say() -> None:
    """A member cut off from its first write on serves nothing: cancelling it stops
    nothing, changes nothing and warns of nothing."""

    async def main(loop: VirtualTimeLoop) -> None:
        group = Group(loop)
        node = group.join("m0")
        node.link.cut_until = loop.time() + 3600
        await asyncio.sleep(30)
        assert node.member.serving == frozenset()
        version = node.member.version
        await node.stop()
        assert node.member.version == version
        assert node.member.lost == 0

    run_virtual(_with_the_loop(main))


class _Swallows(Link):
    """A reliable link that never answers the writes (or lists) it is told to swallow."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store, random.Random(0))
        self.lossy = False
        self.swallow = 0
        self.swallow_lists = 0

    async def list(self) -> list[dict[str, Any]]:
        if self.swallow_lists:
            self.swallow_lists -= 1
            await asyncio.Event().wait()
        return await super().list()

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        if self.swallow:
            self.swallow -= 1
            await asyncio.Event().wait()
        return await super().write(current, body)


def test_a_write_never_answered_is_given_up_and_the_member_goes_on() -> None:
    """A write may take the time left in the tenure, or the renew deadline when there is
    none, and no longer: a request the network lost is given up, and the next write starts
    the member over. Here the first write, with no tenure, and a later one, within a
    tenure, are never answered."""

    async def main(loop: VirtualTimeLoop) -> None:
        link = _Swallows(LeaseStore())
        link.swallow = 1
        member = ShardMember(link, config("m0"))
        task = loop.create_task(member.run())
        everything = frozenset(range(SLOTS))
        await until_changed(member, lambda: member.serving == everything)
        assert loop.time() >= member.config.renew_deadline  # the first write was given up
        link.swallow = 1
        await until_changed(member, lambda: member.serving != everything)
        await until_changed(member, lambda: member.serving == everything)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_a_read_never_answered_is_given_up_after_the_renew_deadline() -> None:
    """The reads, too, may take the renew deadline and no longer: a list the network lost
    is given up, and the next one lets the member claim its slots."""

    async def main(loop: VirtualTimeLoop) -> None:
        link = _Swallows(LeaseStore())
        link.swallow_lists = 1
        member = ShardMember(link, config("m0"))
        task = loop.create_task(member.run())
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        assert loop.time() >= member.config.renew_deadline
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_a_dead_members_lease_is_deleted_a_lease_duration_after_it_expired() -> None:
    """A Lease nobody renews counts until it expires (a lease duration after it was first
    seen), is kept one more lease duration (its holder may only be slow), and is then
    deleted: a restarted replica has a new identity, and nobody else would delete it."""

    async def main(loop: VirtualTimeLoop) -> None:
        store = LeaseStore()
        dead = config("dead")
        store.write(None, member_lease(dead.lease_name, GROUP, "dead", 15, frozenset({0, 1})))
        link = Link(store, random.Random(0))
        link.lossy = False
        member = ShardMember(link, config("m0"))
        task = loop.create_task(member.run())
        await asyncio.sleep(12)
        assert member.serving  # its share beside the dead member, not the dead one's slots
        assert not member.serving & {0, 1}
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        assert 15 <= loop.time() < 20
        await asyncio.sleep(25 - loop.time())
        assert dead.lease_name in store.leases  # expired, kept
        await asyncio.sleep(40 - loop.time())
        assert dead.lease_name not in store.leases
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))


def test_a_members_background_tasks_are_kept_while_they_run_and_forgotten_after() -> None:
    """Drains (graceful and urgent) and the deletion of a dead member's Lease run as tasks
    the member holds on to while they run (the loop keeps only weak references) and lets
    go of when they end, without an error in the loop."""

    async def main(loop: VirtualTimeLoop) -> None:
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: errors.append(context))
        group = Group(loop)
        dead = config("dead")
        group.store.write(None, member_lease(dead.lease_name, GROUP, "dead", 15, frozenset()))
        first = group.join("m0")
        held: list[int] = []
        real_collect = first.member._collect

        def collect(lease: Mapping[str, Any]) -> None:
            real_collect(lease)
            held.append(len(first.member._drains))

        first.member._collect = collect  # type: ignore[method-assign]
        await until_changed(first.member, lambda: len(first.member.serving) == SLOTS)
        group.join("m1")  # a graceful drain of the slots that move
        share = assign(["m0", "m1"], SLOTS)["m0"]
        await until_changed(first.member, lambda: first.member.serving == share)
        await asyncio.sleep(40 - loop.time())
        assert dead.lease_name not in group.store.leases
        assert held == [1]  # the deletion, held while it ran
        assert first.member._drains == set()
        await first.stop()  # an urgent drain
        await asyncio.sleep(1)
        assert first.member._drains == set()
        assert errors == []
        await group.stop()

    run_virtual(_with_the_loop(main))


class _LateThenGone(Link):
    """A reliable link whose write number `late` is answered `delay` seconds after it was
    applied, and whose later writes are never answered."""

    def __init__(self, store: LeaseStore, late: int, delay: float) -> None:
        super().__init__(store, random.Random(0))
        self.lossy = False
        self.late, self.delay = late, delay
        self.sent: list[float] = []

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.sent.append(asyncio.get_running_loop().time())
        if len(self.sent) > self.late:
            await asyncio.Event().wait()
        written = self.store.write(current, body)
        await asyncio.sleep(self.delay if len(self.sent) == self.late else 0.01)
        return written


def test_the_tenure_ends_exactly_at_the_deadline_of_a_late_answered_write() -> None:
    """A write answered late (1.2 s after it was sent, against a 2 s renew deadline) still
    renews the tenure, from its send: the tenure then ends exactly a renew deadline after
    that send, less than a second after the answer, not a moment later."""

    async def main(loop: VirtualTimeLoop) -> None:
        link = _LateThenGone(LeaseStore(), late=6, delay=1.2)
        fast = Sharding(GROUP, identity="m0", slots=SLOTS, renew_deadline=2.0, retry_period=0.5)
        member = ShardMember(link, fast)
        task = loop.create_task(member.run())
        await until_changed(member, lambda: member.serving == frozenset(range(SLOTS)))
        await until_changed(member, lambda: not member.serving)
        assert len(link.sent) > 6
        assert loop.time() == pytest.approx(link.sent[5] + 2.0, abs=1e-9)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_virtual(_with_the_loop(main))
