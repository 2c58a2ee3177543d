"""The handover-duration histogram: real `ShardMember` loops on a virtual clock against the
in-memory Lease store of the protocol tests (reliable links), with a drainer that takes a
known time, so each recorded duration has bounds that follow from the protocol."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from fastctl.runtime.sharding._handover import Durations, HandoverTimes
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._metrics import ShardingCollector
from fastctl.testing import run_virtual

from .test_sharding_protocol import SLOTS, LeaseStore, Link, config

DRAIN = 1.0  # every drain takes this long (a reconcile finishing)
RETRY = 2.0 * 1.2  # the retry period with its largest jitter
LATENCY = 4 * 0.05  # a round's write and list on a reliable link, both ways


async def slow_drain(slots: frozenset[int], urgent: bool) -> None:
    await asyncio.sleep(DRAIN)


def start(name: str, store: LeaseStore) -> tuple[ShardMember, asyncio.Task[None]]:
    import random

    link = Link(store, random.Random(name))
    link.lossy = False
    member = ShardMember(link, config(name), drainer=slow_drain)
    return member, asyncio.get_running_loop().create_task(member.run())


def mean(durations: Durations) -> float:
    return durations.total / durations.count


def test_a_join_and_a_leave_record_each_moved_slot_once_in_each_direction() -> None:
    async def main() -> None:
        store = LeaseStore()
        first, first_task = start("m0", store)
        await asyncio.sleep(10)
        assert first.serving == set(range(SLOTS))
        # Alone: every slot wanted at the first read, served a round later.
        assert first.handovers.incoming.count == SLOTS
        assert 2.0 <= mean(first.handovers.incoming) <= RETRY + LATENCY
        assert first.handovers.outgoing.count == 0

        second, second_task = start("m1", store)
        await asyncio.sleep(20)
        moved = second.serving
        assert moved
        assert first.serving == set(range(SLOTS)) - moved
        # Out: drained (DRAIN), then unpublished by the next renewal.
        assert first.handovers.outgoing.count == len(moved)
        assert DRAIN <= mean(first.handovers.outgoing) <= DRAIN + RETRY + LATENCY
        # In: the joiner waited for that, then claimed and checked (one more round).
        assert second.handovers.incoming.count == len(moved)
        assert mean(second.handovers.incoming) >= DRAIN
        assert mean(second.handovers.incoming) <= DRAIN + 3 * (RETRY + LATENCY)

        await second.leave()
        second_task.cancel()
        # Leaving: drained, then one write that publishes nothing.
        assert second.handovers.outgoing.count == len(moved)
        assert DRAIN <= mean(second.handovers.outgoing) <= DRAIN + LATENCY
        await asyncio.sleep(10)
        assert first.serving == set(range(SLOTS))
        assert first.handovers.incoming.count == SLOTS + len(moved)
        first_task.cancel()
        await asyncio.gather(first_task, second_task, return_exceptions=True)
        await asyncio.sleep(2 * DRAIN)  # the urgent drains of the loops' ends

    run_virtual(main())


def test_a_slot_wanted_then_given_away_before_it_was_served_records_nothing() -> None:
    times = HandoverTimes()
    times.wanted({1, 2}, set(), now=0.0)
    times.wanted({2}, set(), now=1.0)  # slot 1 went to a third member meanwhile
    times.wanted({1, 2}, set(), now=3.0)  # slot 1 wanted anew: its clock starts again
    times.wanted({1, 2}, {1, 2}, now=4.0)  # both served: 1 s and 4 s
    assert times.incoming.count == 2
    assert times.incoming.total == pytest.approx(5.0)


def test_a_lost_slot_served_again_before_it_was_unpublished_records_no_handover() -> None:
    times = HandoverTimes()
    times.stopped({4}, now=0.0)
    times.wanted({4}, {4}, now=2.0)  # drained, claimed back, served: it never left
    times.published(set(), now=5.0)
    assert times.outgoing.count == 0


def test_the_histogram_is_scraped_per_direction() -> None:
    from types import SimpleNamespace

    times = HandoverTimes()
    times.wanted({1}, set(), now=0.0)
    times.wanted({1}, {1}, now=1.5)  # in: 1.5 s
    times.stopped({2, 3}, now=10.0)
    times.published({3}, now=14.0)  # out: slot 2 after 4 s; 3 still published
    member = SimpleNamespace(
        config=SimpleNamespace(group="g"),
        serving=frozenset({1}),
        members=["a"],
        gained=1,
        lost=2,
        handovers=times,
    )
    registry = CollectorRegistry()
    registry.register(ShardingCollector(lambda: member, lambda: []))  # type: ignore[arg-type,return-value]

    def value(suffix: str, direction: str, **labels: str) -> float | None:
        return registry.get_sample_value(
            f"fastctl_shard_handover_duration_seconds_{suffix}",
            {"group": "g", "direction": direction, **labels},
        )

    assert value("count", "in") == 1
    assert value("sum", "in") == pytest.approx(1.5)
    assert value("bucket", "in", le="1.0") == 0
    assert value("bucket", "in", le="2.0") == 1
    assert value("count", "out") == 1
    assert value("sum", "out") == pytest.approx(4.0)
    assert value("bucket", "out", le="2.0") == 0
    assert value("bucket", "out", le="5.0") == 1
    assert value("bucket", "out", le="+Inf") == 1
