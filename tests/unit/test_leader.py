"""Leader election without an API server: the timing rules with a fake clock, and the
elector loop against an in-memory Lease (tests/kube/test_leader.py has the real server)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.leader._rules import (
    MIN_SAFETY_MARGIN,
    LeaseRecord,
    Observation,
    Tenure,
    default_identity,
    micro_time,
    next_record,
    released_record,
)

from .fake_lease import LeaseStore

FAST: dict[str, Any] = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

SLACK = 0.5
"""Scheduling latency allowed on a loaded, shared machine. Only liveness bounds (how soon
something happens) get it; safety bounds (never before the lease expired) never do."""


# -- configuration ---------------------------------------------------------------------


def test_defaults_are_client_go_s() -> None:
    config = LeaderElection("op")
    assert (config.namespace, config.lease_duration, config.renew_deadline) == ("default", 15, 10)
    assert config.retry_period == 2
    assert config.lease_duration_seconds == 15


def test_the_default_identity_is_hostname_and_a_random_suffix() -> None:
    a, b = LeaderElection("op").identity, LeaderElection("op").identity
    assert a != b
    assert a.rsplit("_", 1)[0] == b.rsplit("_", 1)[0] == default_identity().rsplit("_", 1)[0]


def test_the_config_is_frozen_and_hashable() -> None:
    config = LeaderElection("op", identity="me")
    with pytest.raises(AttributeError):
        config.name = "other"  # type: ignore[misc]
    assert config == LeaderElection("op", identity="me")
    assert hash(config) == hash(LeaderElection("op", identity="me"))


def test_lease_duration_seconds_round_up_so_others_never_wait_less() -> None:
    assert (
        LeaderElection(
            "op", lease_duration=2.1, renew_deadline=1.5, retry_period=1
        ).lease_duration_seconds
        == 3
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 10, "renew_deadline": 10}, "longer than renew_deadline"),
        ({"lease_duration": 2.1, "renew_deadline": 2, "retry_period": 1}, "at least 0.5 s"),
        ({"lease_duration": 10, "renew_deadline": 9.6}, "cancel its running reconciles"),
        ({"renew_deadline": 2.2, "retry_period": 2}, "retry_period"),
        ({"retry_period": 0}, "positive"),
        ({"lease_duration": math.nan}, "positive"),
        ({"identity": ""}, "empty"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_unsafe_or_empty_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LeaderElection("op", **kwargs)


def test_the_smallest_safety_margin_is_accepted() -> None:
    config = LeaderElection("op", lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
    assert config.lease_duration - config.renew_deadline == MIN_SAFETY_MARGIN


# -- the pure timing rules -------------------------------------------------------------


def test_micro_time_is_rfc3339_utc_with_microseconds() -> None:
    when = datetime(2026, 12, 2, 14, 45, 0, 123456, tzinfo=UTC) + timedelta(0)
    assert micro_time(when) == "2026-12-02T14:45:00.123456Z"
    assert MICRO_TIME.match(micro_time())


def test_a_record_round_trips_through_the_spec() -> None:
    record = LeaseRecord("a", 15, "t1", "t2", 3)
    assert LeaseRecord.from_spec(record.to_spec()) == record
    assert LeaseRecord.from_spec(None) == LeaseRecord()
    assert LeaseRecord.from_spec({"holderIdentity": None, "leaseDurationSeconds": "x"}) == (
        LeaseRecord()
    )


def test_renewing_keeps_acquire_time_and_transitions_taking_over_counts_one() -> None:
    created = next_record(None, "a", 15, "t0")
    assert created == LeaseRecord("a", 15, "t0", "t0", 0)
    renewed = next_record(created, "a", 15, "t1")
    assert renewed == LeaseRecord("a", 15, "t0", "t1", 0)
    taken = next_record(renewed, "b", 15, "t2")
    assert taken == LeaseRecord("b", 15, "t2", "t2", 1)
    released = released_record(taken, "t3")
    assert released == LeaseRecord("", 1, "t3", "t3", 1)
    assert next_record(released, "a", 15, "t4").transitions == 2


def test_expiry_counts_from_when_a_change_was_seen_not_from_the_remote_renew_time() -> None:
    seen = Observation()
    # A renewTime an hour in the past (a skewed clock) does not make the lease free.
    record = LeaseRecord("a", 15, "2020-01-01T00:00:00.000000Z", "2020-01-01T00:00:00.000000Z")
    assert seen.observe(record, now=100.0)
    assert seen.held_by_other("b", now=114.9, fallback_duration=15)
    assert not seen.held_by_other("b", now=115.0, fallback_duration=15)


def test_an_unchanged_record_does_not_restart_the_clock_a_changed_one_does() -> None:
    seen = Observation()
    seen.observe(LeaseRecord("a", 10, "t0", "t0"), now=0.0)
    assert not seen.observe(LeaseRecord("a", 10, "t0", "t0"), now=8.0)
    assert seen.expires_at(15) == 10.0  # the record's duration, not ours
    assert seen.observe(LeaseRecord("a", 10, "t0", "t1"), now=9.0)
    assert seen.expires_at(15) == 19.0


def test_a_lease_without_holder_is_free_and_our_own_is_never_held_by_other() -> None:
    seen = Observation()
    assert not seen.held_by_other("b", now=0.0, fallback_duration=15)  # nothing seen yet
    seen.observe(LeaseRecord("", 1, "t", "t"), now=0.0)
    assert seen.expires_at(15) == -math.inf
    seen.observe(LeaseRecord("b", 15, "t", "t2"), now=1.0)
    assert not seen.held_by_other("b", now=1.0, fallback_duration=15)
    seen.observe(LeaseRecord("a", 0, "t", "t3"), now=2.0)  # no valid duration: ours
    assert seen.expires_at(15) == 17.0
    assert seen.held_by_other("b", now=16.9, fallback_duration=15)


def test_a_tenure_ends_renew_deadline_after_the_last_successful_send() -> None:
    tenure = Tenure(term=1, started_at=0.4, deadline=0.0 + 10)  # sent at 0, answered at 0.4
    assert tenure.valid(9.99)
    assert not tenure.valid(10.0)
    tenure.renewed(sent_at=2.0, renew_deadline=10)
    assert tenure.deadline == 12.0
    tenure.renewed(sent_at=1.0, renew_deadline=10)  # a late answer never moves it back
    assert tenure.deadline == 12.0


# -- the loop against an in-memory Lease ----------------------------------------------


class _FakeLeases:
    """An elector's view of `LeaseStore`; `cut()` makes every request hang (a partition)."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.reachable = asyncio.Event()
        self.reachable.set()

        self.stall_next = False  # the next request hangs until cancelled; later ones pass

    def cut(self) -> None:
        self.reachable.clear()

    async def _wire(self) -> None:
        await asyncio.sleep(0.001)
        if self.stall_next:
            self.stall_next = False
            await asyncio.Event().wait()
        await self.reachable.wait()

    async def get(self) -> dict[str, Any] | None:
        await self._wire()
        return self.store.get()

    async def create(self, record: LeaseRecord) -> dict[str, Any]:
        await self._wire()
        return self.store.create(record)

    async def replace(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        await self._wire()
        return self.store.replace(lease, record)


def _fake_elector(
    store: LeaseStore,
    identity: str,
    *,
    lease_duration: float = 1.0,
    renew_deadline: float = 0.3,
    retry_period: float = 0.05,
) -> LeaderElector:
    config = LeaderElection(
        "l",
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
    )
    elector = LeaderElector(cast(ApiClient, None), config)  # no HTTP: _FakeLeases below
    elector._leases = _FakeLeases(store)  # type: ignore[assignment]
    return elector


@contextlib.asynccontextmanager
async def _running(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_partitioned_leader_stops_at_its_deadline_while_its_request_hangs() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")
    async with _running(a):
        term = await asyncio.wait_for(a.wait_leading(), 2)
        assert term == 1
        a._leases.cut()  # type: ignore[attr-defined]
        cut_at = time.monotonic()
        await asyncio.wait_for(a.wait_lost(term), 2)
        lost_after = time.monotonic() - cut_at
        assert not a.is_leader
        # The last renewal that got through was sent at most a retry period before the cut.
        assert lost_after <= a.config.renew_deadline + SLACK
        assert lost_after >= a.config.renew_deadline - a.config.retry_period - 0.05


async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a", lease_duration=4.0, renew_deadline=3.0)
    async with _running(a):
        await asyncio.wait_for(a.wait_leading(), 2)
        assert store.lease is not None
        store.put({**store.lease, "spec": next_record(None, "x", 1, micro_time()).to_spec()})
        taken_at = time.monotonic()
        await asyncio.wait_for(a.wait_lost(), 4)
        # At its next renewal (0.05 s), not at its renew deadline (3 s).
        assert time.monotonic() - taken_at < 0.05 + SLACK
        assert a.leader == "x"


async def test_release_makes_run_return_and_hands_over_within_a_retry() -> None:
    store = LeaseStore()
    a, b = _fake_elector(store, "a"), _fake_elector(store, "b")
    async with _running(a) as a_task:
        await asyncio.wait_for(a.wait_leading(), 2)
        async with _running(b):
            await asyncio.sleep(0.2)
            assert not b.is_leader
            released_at = time.monotonic()
            assert await a.release()
            await asyncio.wait_for(a_task, 1)
            await asyncio.wait_for(b.wait_leading(), 1)
            assert time.monotonic() - released_at < 0.05 + SLACK
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1
    assert not await a.release()  # not ours any more: nothing to do


async def test_release_does_not_wait_for_a_renewal_that_hangs() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a", lease_duration=3.0, renew_deadline=2.0)
    async with _running(a):
        await asyncio.wait_for(a.wait_leading(), 2)
        a._leases.stall_next = True  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)  # a renewal is now hanging, holding the write lock
        started = time.monotonic()
        assert await a.release()
        assert time.monotonic() - started < SLACK  # not the 2 s renew deadline
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == ""


async def test_is_leader_follows_the_clock_even_when_the_loop_is_blocked() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")
    async with _running(a):
        await asyncio.wait_for(a.wait_leading(), 2)
        assert a.is_leader
        time.sleep(a.config.renew_deadline + 0.05)  # noqa: ASYNC251 (blocks the loop on purpose)
        assert not a.is_leader


async def test_run_twice_at_once_is_an_error() -> None:
    a = _fake_elector(LeaseStore(), "a")
    async with _running(a):
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match=r"^LeaderElector\.run\(\) is already running$"):
            await asyncio.wait_for(a.run(), 2)  # a cap for a second run that does start
