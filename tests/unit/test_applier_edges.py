"""The applier at its edges: endings that are not plain returns or exceptions, threads that
outlive their applier, schedulers it does not own, and results nobody consumed.

Each test names the guarantee it checks; bounds are on counts, never on wall-clock time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from fastctl import Action, ObjectRef, ReconcileResult, Scheduler, Trigger
from fastctl._applier import ApplierConfig, applier
from fastctl._threads import live_threads
from fastctl.errors import ReconcileCancelled, ReconcileTimeout
from fastctl.log import current_object

from .test_applier import Feed, collect, refs, store_of, wait_for

pytestmark = pytest.mark.timeout(60)


class Custom(BaseException):
    """A BaseException that is neither Exception nor CancelledError."""


async def first_results(it: AsyncIterator[ReconcileResult], n: int) -> list[ReconcileResult]:
    """The first `n` results, with a bound: a leaked slot shows as a timeout, not a hang."""
    out: list[ReconcileResult] = []
    async with asyncio.timeout(10):
        async for result in it:
            out.append(result)
            if len(out) == n:
                break
    return out


async def close(it: AsyncIterator[ReconcileResult]) -> None:
    """Close the applier's iterator (an async generator) at once."""
    await cast("AsyncGenerator[ReconcileResult, None]", it).aclose()


# -- every ending releases the slot ------------------------------------------------------


async def test_a_custom_base_exception_is_reported_and_releases_the_slot() -> None:
    ref = ObjectRef("a")
    sched = Scheduler(concurrency=1)
    calls = 0

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Custom("boom")
        return None

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, concurrency=1, scheduler=sched)
    [failed] = await first_results(it, 1)
    assert isinstance(failed.error, Custom)
    assert sched.in_flight == 0
    feed.put(ref)  # the object is reconciled again: the slot came back
    [ok] = await first_results(it, 1)
    assert ok.ok
    assert calls == 2
    feed.close()
    assert await asyncio.wait_for(collect(it), 10) == []  # a graceful stop ends


async def test_a_reconcile_that_cancels_its_own_task_releases_the_slot() -> None:
    ref = ObjectRef("a")
    sched = Scheduler(concurrency=1)

    async def reconcile(obj: Any, ctx: None) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, concurrency=1, scheduler=sched)
    [result] = await first_results(it, 1)
    assert isinstance(result.error, ReconcileCancelled)
    assert sched.in_flight == 0
    feed.close()
    assert await asyncio.wait_for(collect(it), 10) == []


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_release_the_slot_then_propagate(
    exc_type: type[BaseException],
) -> None:
    keys = refs(2)
    sched = Scheduler(concurrency=2)
    other_cancelled = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        if obj["name"] == "obj-0":
            await asyncio.sleep(0.01)
            raise exc_type
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            other_cancelled.set()
            raise

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=2, scheduler=sched)
    # Consumed in this task: raised in a task of its own, a KeyboardInterrupt would stop
    # the event loop itself (which is what it does to ``fastctl run``).
    with pytest.raises(exc_type):
        async with asyncio.timeout(10):
            await collect(it)
    assert other_cancelled.is_set()  # the applier stopped, cancelling the rest
    assert sched.in_flight == 0


# -- timeouts -------------------------------------------------------------------------


class ServerTimeout(TimeoutError):
    """Like aiohttp's ServerTimeoutError: a TimeoutError that is not the applier's."""


@pytest.mark.parametrize("timeout", [None, 30.0])
@pytest.mark.parametrize("in_thread", [False, True])
async def test_a_timeout_error_of_the_reconcile_itself_is_its_own_error(
    timeout: float | None, in_thread: bool
) -> None:
    ref = ObjectRef("a")
    raised = ServerTimeout("read timed out")

    def plain(obj: Any, ctx: None) -> None:
        raise raised

    async def coroutine(obj: Any, ctx: None) -> None:
        raise raised

    feed = Feed()
    feed.put(ref)
    it = applier(
        plain if in_thread else coroutine, None, None, store_of([ref]), feed, timeout=timeout
    )
    [result] = await first_results(it, 1)
    await close(it)
    assert result.error is raised
    assert not isinstance(result.error, ReconcileTimeout)
    assert result.error.__traceback__ is not None


async def test_the_applier_s_own_deadline_is_still_a_reconcile_timeout() -> None:
    ref = ObjectRef("a")

    async def reconcile(obj: Any, ctx: None) -> None:
        await asyncio.sleep(30)

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, timeout=0.01)
    [result] = await first_results(it, 1)
    await close(it)
    assert isinstance(result.error, ReconcileTimeout)
    assert "timeout of 0.01 s" in str(result.error)


# -- threads -----------------------------------------------------------------------------


async def test_current_object_is_set_inside_a_thread_reconcile() -> None:
    ref = ObjectRef("a", "ns")
    seen: list[ObjectRef | None] = []

    def reconcile(obj: Any, ctx: None) -> None:
        seen.append(current_object.get())

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed)
    await first_results(it, 1)
    await close(it)
    assert seen == [ref]


async def test_a_thread_reconcile_gets_the_applier_s_context() -> None:
    ref = ObjectRef("a", "ns")
    context = object()
    seen: list[object] = []

    def reconcile(obj: Any, ctx: object) -> None:
        seen.append(ctx)

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, context, store_of([ref]), feed)
    await first_results(it, 1)
    await close(it)
    assert seen == [context]


async def test_a_thread_outliving_its_cancelled_applier_keeps_its_key_in_flight() -> None:
    ref = ObjectRef("a")
    sched = Scheduler(concurrency=4)
    release = threading.Event()
    lock = threading.Lock()
    running = 0
    overlaps = 0
    calls = 0

    def reconcile(obj: Any, ctx: None) -> None:
        nonlocal running, overlaps, calls
        with lock:
            running += 1
            calls += 1
            overlaps += running > 1
            first = calls == 1
        if first:
            release.wait(30)
        with lock:
            running -= 1

    store = store_of([ref])
    feed_a = Feed()
    feed_a.put(ref)
    first = asyncio.create_task(
        collect(applier(reconcile, None, None, store, feed_a, scheduler=sched))
    )
    await wait_for(lambda: calls == 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    # The thread runs on: its key is still in flight, and the process knows a thread lives.
    assert sched.is_in_flight(ref.key)
    assert live_threads() == 1
    # A second applier on the same scheduler must not start the same object beside it...
    feed_b = Feed()
    feed_b.put(ref)
    it = applier(reconcile, None, None, store, feed_b, scheduler=sched)
    nxt = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0.05)
    assert calls == 1
    assert not nxt.done()
    # ...and starts the follow-up once the thread has returned.
    release.set()
    result = await asyncio.wait_for(nxt, 10)
    assert result.ok
    assert calls == 2
    assert overlaps == 0
    await close(it)
    assert live_threads() == 0
    assert sched.in_flight == 0


async def test_a_thread_reconcile_that_never_started_is_skipped_on_cancel() -> None:
    keys = refs(3)
    sched = Scheduler()
    release = threading.Event()
    ran: list[str] = []

    def reconcile(obj: Any, ctx: None) -> None:
        ran.append(obj["name"])
        release.wait(30)

    with ThreadPoolExecutor(1) as pool:
        feed = Feed()
        for ref in keys:
            feed.put(ref)
        task = asyncio.create_task(
            collect(
                applier(
                    reconcile,
                    None,
                    None,
                    store_of(keys),
                    feed,
                    scheduler=sched,
                    config=ApplierConfig(executor=pool),
                )
            )
        )
        await wait_for(lambda: len(ran) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sched.in_flight == 1  # only the one whose thread runs
        release.set()
    await wait_for(lambda: sched.in_flight == 0)
    assert ran == ["obj-0"]


# -- schedulers it does not own ----------------------------------------------------------


class CountingScheduler:
    """A `Scheduler` that counts the driver's calls to `pop_many`."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.pops = 0
        self.events: list[str] = []

    def add(
        self,
        key: str,
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        self.inner.add(key, after=after, priority=priority, group=group, now=now)

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        self.pops += 1
        return self.inner.pop_many(max, now=now)

    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = None,
        failed: bool = False,
        now: float | None = None,
    ) -> None:
        self.events.append(f"done {key}")
        self.inner.done(key, requeue_after=requeue_after, failed=failed, now=now)

    def done_many(self, keys: Iterable[str], *, now: float | None = None) -> None:
        keys = list(keys)
        self.events.extend(f"done {key}" for key in keys)
        self.inner.done_many(keys, now=now)

    def next_ready_at(self) -> float | None:
        return self.inner.next_ready_at()

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight

    def __len__(self) -> int:
        return len(self.inner)

    def stats(self, *, now: float | None = None) -> Any:
        return self.inner.stats(now=now)


async def test_a_scheduler_with_fewer_slots_than_the_applier_does_not_spin() -> None:
    keys = refs(3)
    sched = CountingScheduler(Scheduler(concurrency=1))
    gate = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        await gate.wait()

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=4, scheduler=sched)
    nxt = asyncio.ensure_future(it.__anext__())
    await wait_for(lambda: sched.inner.in_flight == 1)
    before = sched.pops
    for _ in range(200):  # let the loop run: a busy driver would pop on every turn
        await asyncio.sleep(0)
    assert sched.pops - before <= 2
    gate.set()
    results = [await asyncio.wait_for(nxt, 10)]
    results += await first_results(it, 2)
    await close(it)
    assert len(results) == 3
    assert all(r.ok for r in results)
    assert sched.pops <= 12  # O(1) pops per reconcile


class SlowPopScheduler(CountingScheduler):
    """A `Scheduler` whose empty pops take a while, as on a loaded machine: a key waiting
    for its backoff becomes ready between the pop and whatever the driver does next."""

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        keys = super().pop_many(max, now=now)
        if not keys:
            time.sleep(0.01)  # longer than the backoff below
        return keys


async def test_a_key_that_becomes_ready_just_after_a_short_pop_still_gets_its_timer() -> None:
    """A failed key backs off for about a millisecond; the pop that finds nothing ready
    returns after it is ready. The driver must still wake for it (no trigger, no running
    reconcile would ever wake it otherwise)."""
    ref = ObjectRef("a")
    sched = SlowPopScheduler(Scheduler(backoff_base=0.001, backoff_max=0.001))
    calls = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("first attempt")

    feed = Feed()
    feed.put(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, scheduler=sched)
    results = await first_results(it, 2)  # a hang shows as first_results' timeout
    await close(it)
    assert [r.ok for r in results] == [False, True]
    assert calls == 2


# -- results nobody consumed, and what the scheduler measures ----------------------------


async def test_outcomes_not_yet_consumed_at_cancellation_keep_their_requeue() -> None:
    keys = refs(3)
    sched = Scheduler(concurrency=3)
    ended = 0

    async def reconcile(obj: Any, ctx: None) -> Action:
        nonlocal ended
        await asyncio.sleep(0)
        ended += 1
        return Action.requeue(60)

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=3, scheduler=sched)
    await first_results(it, 1)
    await wait_for(lambda: ended == 3)  # two more ended while nobody asked for them
    await close(it)
    assert sched.in_flight == 0
    assert len(sched) == 3  # all three wait for their requeue, none was forgotten
    next_at = sched.next_ready_at()
    assert next_at is not None


async def test_done_is_called_when_the_reconcile_ends_not_when_its_result_is_consumed() -> None:
    keys = refs(2)
    sched = CountingScheduler(Scheduler(concurrency=2))
    ended: list[str] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        await asyncio.sleep(0)
        ended.append(obj["name"])

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=2, scheduler=sched)
    await first_results(it, 1)
    await wait_for(lambda: len(ended) == 2)
    # The second result waits for its consumer, but the scheduler already knows it ended,
    # so its work duration does not include the wait.
    assert sorted(sched.events) == ["done ns/obj-0", "done ns/obj-1"]
    await close(it)


# -- triggers ------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [2**63, -(2**63) - 1, 10**30])
def test_a_priority_outside_64_bits_is_refused_by_trigger(priority: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        Trigger(ObjectRef("a"), priority=priority)


def test_the_64_bit_priority_bounds_are_accepted() -> None:
    sched = Scheduler()
    for i, priority in enumerate((2**63 - 1, -(2**63))):
        trigger = Trigger(ObjectRef(f"a{i}"), priority=priority)
        sched.add(trigger.ref.key, priority=trigger.priority)
    assert len(sched) == 2
