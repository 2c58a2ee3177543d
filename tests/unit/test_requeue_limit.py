"""The overall bound on what an applier runs again on its own (`ApplierConfig.requeue_limit`,
`fastctl._requeue_limit`), on the virtual clock: when every reconcile fails, the retries of
all objects together start no faster than the bound in any window; a change is never held;
immediate requeues are held, delayed ones keep their schedule; every object still gets its
retries; the holds are counted."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from fastctl import Action, ApplierConfig, ObjectRef, RateLimit
from fastctl._applier import DEFAULT_REQUEUE_LIMIT, _Driver, applier
from fastctl.testing import virtual_time

from .test_applier import Feed, refs, store_of
from .test_rate_limit import most_in_any_window

LIMIT = RateLimit(qps=10.0, burst=20)


class Starts:
    """When each reconcile started (loop clock), by key, and which were changes'."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)

    def note(self, obj: dict[str, Any]) -> None:
        self.times[obj["name"]].append(asyncio.get_running_loop().time())

    def retries(self) -> list[float]:
        """Every start after an object's first: runs no change asked for."""
        return [t for times in self.times.values() for t in times[1:]]


def failing(starts: Starts) -> Any:
    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        starts.note(obj)
        raise RuntimeError("the API server is down")

    return reconcile


async def run_for(
    seconds: float, reconcile: Any, keys: list[ObjectRef], config: ApplierConfig, **kw: Any
) -> Feed:
    """Run an applier over `keys` (each triggered once) for `seconds` of virtual time."""
    feed = Feed()
    for ref in keys:
        feed.put(ref)
    store = store_of(keys)

    async def consume() -> None:
        async for _ in applier(reconcile, None, None, store, feed, config=config, **kw):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(seconds)
    feed.close()
    await task
    return feed


@virtual_time
async def test_an_outage_costs_no_more_retries_than_the_bound_whatever_the_objects() -> None:
    starts = Starts()
    config = ApplierConfig(concurrency=64, requeue_limit=LIMIT)
    await run_for(120.0, failing(starts), refs(500), config)
    retries = starts.retries()
    for window in (0.0, 1.0, 5.0, 30.0):
        assert most_in_any_window(retries, window) <= LIMIT.burst + LIMIT.qps * window + 1e-6
    # Kept at the bound, not starved: 120 s at 10 a second, bar the first instants.
    assert len(retries) >= LIMIT.qps * 110
    # And every object got retries in turn, none left behind.
    assert all(len(times) >= 2 for times in starts.times.values())


@virtual_time
async def test_without_the_bound_the_same_outage_retries_far_faster() -> None:
    starts = Starts()
    config = ApplierConfig(concurrency=64, requeue_limit=None)
    await run_for(20.0, failing(starts), refs(500), config)
    assert most_in_any_window(starts.retries(), 1.0) > 10 * (LIMIT.burst + LIMIT.qps)


@virtual_time
async def test_a_change_starts_at_once_while_retries_wait_for_their_tokens() -> None:
    starts = Starts()
    keys = refs(300)
    changed, patient = ObjectRef("changed", "ns"), ObjectRef("patient", "ns")
    store = {**store_of(keys), changed: {"name": "changed"}, patient: {"name": "patient"}}
    feed = Feed()
    for ref in [*keys, patient]:
        feed.put(ref)
    config = ApplierConfig(concurrency=64, requeue_limit=LIMIT)

    def policy(obj: dict[str, Any], error: BaseException, ctx: None) -> Action:
        return Action.requeue(60.0 if obj["name"] == "patient" else 0.01)

    async def consume() -> None:
        async for _ in applier(failing(starts), policy, None, store, feed, config=config):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(10.0)  # the bucket is spent, reserved well ahead
    now = asyncio.get_running_loop().time
    at = now()
    feed.put(changed)
    await asyncio.sleep(0.001)
    assert starts.times["changed"] == [at]  # a first change: no token taken, no wait
    # A change to an object whose retry waits for its token starts it at once too,
    waiting = next(k for k in keys if len(starts.times[k.name]) == 1)
    at = now()
    feed.put(waiting)
    await asyncio.sleep(0.001)
    assert starts.times[waiting.name][-1] == at
    # and so does one to an object whose retry is not due yet (queued, no token reserved).
    assert starts.times["patient"] == [0.0]
    at = now()
    feed.put(patient)
    await asyncio.sleep(0.001)
    assert starts.times["patient"] == [0.0, at]
    feed.close()
    await task


@virtual_time
async def test_immediate_requeues_are_held_and_delayed_ones_keep_their_schedule() -> None:
    starts = Starts()

    async def requeue_now(obj: dict[str, Any], ctx: None) -> Action:
        starts.note(obj)
        return Action.requeue(0)

    await run_for(10.0, requeue_now, refs(200), ApplierConfig(requeue_limit=LIMIT))
    again = starts.retries()
    assert most_in_any_window(again, 1.0) <= LIMIT.burst + LIMIT.qps
    assert len(again) >= LIMIT.qps * 9

    starts = Starts()

    async def requeue_later(obj: dict[str, Any], ctx: None) -> Action:
        starts.note(obj)
        return Action.requeue(5.0)

    await run_for(11.0, requeue_later, refs(200), ApplierConfig(requeue_limit=LIMIT))
    # 200 objects every 5 s: 40 a second, four times the bound, each on its own schedule.
    began = min(times[0] for times in starts.times.values())
    runs = {tuple(t - began for t in times) for times in starts.times.values()}
    assert runs == {(0.0, 5.0, 10.0)}


@virtual_time
async def test_the_holds_and_their_waits_are_reported() -> None:
    held: list[float] = []
    starts = Starts()
    keys = refs(50)
    feed = Feed()
    for ref in keys:
        feed.put(ref)
    config = ApplierConfig(requeue_limit=RateLimit(qps=5.0, burst=10))
    driver = _Driver(
        failing(starts),
        None,
        None,
        store_of(keys),
        feed,
        config,
        None,
        on_requeue_held=held.append,
    )

    async def consume() -> None:
        async for _ in driver.results():
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(5.0)
    feed.close()
    await task
    assert len(held) >= 40  # 50 failing objects, 10 tokens, then 5 a second
    assert all(wait > 0 for wait in held)
    assert max(held) >= (50 - 10) / 5.0 - 1e-6  # the last of the first round waits 8 s


def test_the_default_bound_is_controller_runtimes_bucket() -> None:
    assert ApplierConfig().requeue_limit == DEFAULT_REQUEUE_LIMIT == RateLimit(10.0, 100)
    with pytest.raises(ValueError, match="requeue_limit"):
        ApplierConfig(requeue_limit=10)  # type: ignore[arg-type]


@virtual_time
async def test_the_follow_up_of_a_change_during_a_failing_run_is_not_held() -> None:
    a, b = ObjectRef("a", "ns"), ObjectRef("b", "ns")
    running, go = asyncio.Event(), asyncio.Event()
    starts = Starts()

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        starts.note(obj)
        if obj["name"] == "a" and len(starts.times["a"]) == 1:
            running.set()
            await go.wait()
        raise RuntimeError("down")

    feed = Feed()
    feed.put(b)  # b's retries spend the bucket: one token, then one every 100 s
    config = ApplierConfig(requeue_limit=RateLimit(qps=0.01, burst=1))

    async def consume() -> None:
        async for _ in applier(reconcile, None, None, store_of([a, b]), feed, config=config):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(1.0)
    assert len(starts.times["b"]) == 2  # its first retry took the token; the next waits
    feed.put(a)
    await running.wait()
    feed.put(a)  # a change while a's first run is on: its follow-up is the change's
    await asyncio.sleep(0.5)
    failed_at = asyncio.get_running_loop().time()
    go.set()
    await asyncio.sleep(0.001)
    assert starts.times["a"] == [1.0, failed_at]  # at once, no token
    feed.close()
    await task
