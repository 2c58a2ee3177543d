"""The applier's smaller promises, each one a wrong change to the applier would break: the
options reach the scheduler, the applier's own limit holds on a scheduler with more slots,
a full or stopping driver sleeps instead of spinning, what is logged and with what, the
names of its tasks, and the bookkeeping that must end with it.

Found by mutation testing (docs/testing.md): each test fails on a mutant that the older
tests let through. Bounds are on counts and loop turns, never on wall-clock time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from fastctl import Action, ApplierConfig, ObjectRef, ReconcileResult, Scheduler
from fastctl._applier import _PEERS, applier
from fastctl.errors import ReconcileCancelled, ReconcileTimeout

from .test_applier import Feed, LateStore, collect, refs, store_of, wait_for
from .test_applier_edges import CountingScheduler, close, first_results

pytestmark = pytest.mark.timeout(60)


class Recording(CountingScheduler):
    """A `Scheduler` that also records what each ``pop_many`` returned, each call to
    ``next_ready_at`` (the driver asks it once per pass that may arm a timer: a busy loop
    shows as a count that keeps growing), and the arguments of each ``done``."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.ready_asks = 0
        self.dones: list[tuple[str, float | None, bool]] = []

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        keys = super().pop_many(max, now=now)
        self.events.append("pop " + " ".join(keys))
        return keys

    def next_ready_at(self) -> float | None:
        self.ready_asks += 1
        self.events.append("next_ready_at")
        return super().next_ready_at()

    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = None,
        failed: bool = False,
        now: float | None = None,
    ) -> None:
        self.dones.append((key, requeue_after, failed))
        super().done(key, requeue_after=requeue_after, failed=failed, now=now)

    def done_many(self, keys: Iterable[str], *, now: float | None = None) -> None:
        keys = list(keys)
        self.dones.extend((key, None, False) for key in keys)
        super().done_many(keys, now=now)


async def turns(n: int) -> None:
    """Let the event loop run `n` times round."""
    for _ in range(n):
        await asyncio.sleep(0)


async def never_returns(obj: Any, ctx: None) -> None:
    await asyncio.Event().wait()


def feed_of(*items: ObjectRef) -> Feed:
    """A trigger feed holding `items`, left open."""
    feed = Feed()
    for item in items:
        feed.put(item)
    return feed


def task_names() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if not t.done()}


@pytest.fixture
def runner_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="fastctl.runner"):
        yield caplog


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fastctl.runner"]


# -- options ---------------------------------------------------------------------------------


def test_new_scheduler_takes_the_concurrency_and_the_debounce() -> None:
    sched = ApplierConfig(concurrency=2, debounce=30.0).new_scheduler()
    for key in ("a", "b", "c"):
        sched.add(key)
    assert sched.pop_many(10) == []  # debounced: not ready yet
    later = time.monotonic() + 60.0  # a virtual "now" past the debounce
    assert len(sched.pop_many(10, now=later)) == 2  # the concurrency limit


@pytest.mark.parametrize(
    ("options", "calls"),
    [
        ({}, 1),  # no debounce by default: it starts within a few loop turns
        ({"debounce": 30.0}, 0),
        ({"config": ApplierConfig(debounce=30.0)}, 0),
    ],
)
async def test_the_debounce_reaches_the_applier_s_own_scheduler(
    options: dict[str, Any], calls: int
) -> None:
    """Given as a keyword or in `config`, a long debounce keeps the triggered key waiting."""
    ref = ObjectRef("a", "ns")
    ran = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal ran
        ran += 1

    it = applier(reconcile, None, None, store_of([ref]), feed_of(ref), **options)
    nxt = asyncio.ensure_future(it.__anext__())
    await turns(50)
    assert ran == calls
    nxt.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await nxt
    await close(it)


def test_concurrency_0_is_accepted_and_a_boolean_or_text_timeout_is_not() -> None:
    assert ApplierConfig(concurrency=0).concurrency == 0
    for timeout in (True, "5"):
        with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
            ApplierConfig(timeout=timeout)  # type: ignore[arg-type]


def test_argument_errors_name_the_type_they_got() -> None:
    with pytest.raises(TypeError, match="reconcile must be callable, got int"):
        applier(1, None, None, {}, Feed())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="error_policy must be callable, got str"):
        applier(never_returns, "x", None, {}, Feed())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got list"):
        applier(never_returns, None, None, [], Feed())  # type: ignore[arg-type]


# -- concurrency -----------------------------------------------------------------------------


async def test_unbounded_runs_more_than_one_pop_batch_at_once_and_keeps_its_timer() -> None:
    """``concurrency=0`` pops 1,024 keys at a time: the rest must start too (nothing else
    would wake the driver while all of them wait), and a requeue needs the ready timer."""
    keys = refs(1100)
    gate = asyncio.Event()
    started = 0
    again = ObjectRef("again", "ns")
    requeued = 0

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        nonlocal started, requeued
        if obj["name"] == "again":
            requeued += 1
            return Action.requeue(0.001) if requeued == 1 else None
        started += 1
        await gate.wait()
        return None

    feed = feed_of(*keys)
    it = applier(reconcile, None, None, store_of([*keys, again]), feed, concurrency=0)
    nxt = asyncio.ensure_future(first_results(it, 1100))
    await wait_for(lambda: started == 1100)
    gate.set()
    assert len(await nxt) == 1100
    feed.put(again)
    results = await first_results(it, 2)  # the second one only comes from the timer
    assert [r.ref for r in results] == [again, again]
    await close(it)


async def test_the_applier_s_limit_holds_on_a_scheduler_with_more_slots() -> None:
    keys = refs(6)
    gate = asyncio.Event()
    running = 0
    most = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1

    feed = feed_of(*keys)
    sched = Scheduler()  # no limit of its own
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=2, scheduler=sched)
    nxt = asyncio.ensure_future(first_results(it, 6))
    await wait_for(lambda: running >= 2)
    await turns(50)
    assert most == 2
    gate.set()
    assert len(await nxt) == 6
    assert most == 2
    await close(it)


async def test_slots_freed_by_objects_missing_from_the_store_are_refilled_in_the_same_pass() -> (
    None
):
    """The first two keys popped are gone from the store: the driver pops again at once,
    without going to sleep on a timer first."""
    keys = refs(4)
    sched = Recording(Scheduler())
    feed = feed_of(*keys)
    store = store_of(keys[2:])
    it = applier(never_returns, None, None, store, feed, concurrency=2, scheduler=sched)
    nxt = asyncio.ensure_future(it.__anext__())
    await wait_for(lambda: sched.inner.in_flight == 2)
    first = sched.events.index("pop ns/obj-0 ns/obj-1")
    assert sched.events[first : first + 4] == [
        "pop ns/obj-0 ns/obj-1",
        "done ns/obj-0",
        "done ns/obj-1",
        "pop ns/obj-2 ns/obj-3",
    ]
    nxt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await nxt
    await close(it)


# -- no busy loop ----------------------------------------------------------------------------


async def test_a_full_applier_neither_pops_nor_arms_a_timer_when_woken() -> None:
    """All slots taken and other keys ready: a wake-up (a new trigger) must not pop, and
    must not arm a timer for a ready key (a timer in the past fires again and again)."""
    keys = refs(3)
    sched = Recording(Scheduler())
    gate = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        await gate.wait()

    feed = feed_of(*keys)
    it = applier(reconcile, None, None, store_of(keys), feed, concurrency=1, scheduler=sched)
    nxt = asyncio.ensure_future(first_results(it, 3))
    await wait_for(lambda: sched.inner.in_flight == 1)
    await turns(10)
    pops, asks = sched.pops, sched.ready_asks
    for ref in keys[1:]:
        feed.put(ref)  # wakes the driver
    await turns(200)
    assert (sched.pops - pops, sched.ready_asks - asks) == (0, 0)
    gate.set()
    assert all(r.ok for r in await nxt)
    await close(it)


async def test_a_stopping_applier_does_not_arm_a_timer_for_a_ready_key() -> None:
    """Once the triggers end nothing new starts, so a key that becomes ready meanwhile (a
    requeue) must not arm a timer: it would fire on every loop turn while others finish."""
    soon, slow = ObjectRef("soon", "ns"), ObjectRef("slow", "ns")
    sched = Recording(Scheduler())
    gate_soon, gate_slow = asyncio.Event(), asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        if obj["name"] == "soon":
            await gate_soon.wait()
            return Action.requeue(0.001)
        await gate_slow.wait()
        return None

    feed = Feed()
    feed.put(soon)
    feed.put(slow)
    it = applier(
        reconcile, None, None, store_of([soon, slow]), feed, concurrency=2, scheduler=sched
    )
    first_result = asyncio.ensure_future(first_results(it, 1))
    await wait_for(lambda: sched.inner.in_flight == 2)
    feed.close()
    await turns(10)  # the triggers end: the applier is stopping
    gate_soon.set()
    [first] = await first_result
    assert first.ref == soon
    nxt = asyncio.ensure_future(it.__anext__())
    ready_at = sched.inner.next_ready_at()
    assert ready_at is not None
    await wait_for(lambda: time.monotonic() > ready_at)  # `soon` is ready again
    asks = sched.ready_asks
    await turns(200)
    assert sched.ready_asks - asks <= 1
    gate_slow.set()
    last = await asyncio.wait_for(nxt, 10)
    assert last.ref == slow
    assert await asyncio.wait_for(collect(it), 10) == []


async def test_one_timer_serves_every_wake_up_while_the_next_ready_time_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key waits 30 s for its requeue while 20 others are reconciled: each of their
    endings wakes the driver, and none may re-arm the timer it already has."""
    later = ObjectRef("later", "ns")
    keys = refs(20)
    loop = asyncio.get_running_loop()
    armed = 0
    real_call_at = loop.call_at

    def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal armed
        armed += getattr(callback, "__name__", "") == "_on_timer"
        return real_call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", call_at)  # `call_later` arms through it too

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        return Action.requeue(30) if obj["name"] == "later" else None

    feed = feed_of(later)
    it = applier(reconcile, None, None, store_of([later, *keys]), feed)
    await first_results(it, 1)
    for ref in keys:
        feed.put(ref)
    assert len(await first_results(it, 20)) == 20
    await close(it)
    assert armed == 1


async def test_a_timer_cleared_while_the_slots_are_full_can_be_armed_again() -> None:
    """A requeue arms the timer; a reconcile that fills the only slot clears it; when that
    one ends, the timer for the requeue is armed again."""
    later, now = ObjectRef("later", "ns"), ObjectRef("now", "ns")
    extra = ObjectRef("extra", "ns")

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        return Action.requeue(30) if obj["name"] == "later" else None

    feed = Feed()
    feed.put(later)
    it = applier(reconcile, None, None, store_of([later, now, extra]), feed, concurrency=1)
    [first] = await first_results(it, 1)
    assert first.action.requeue_after == 30
    nxt = asyncio.ensure_future(it.__anext__())
    await turns(10)  # the driver arms the timer for `later`
    feed.put(now)  # fills the slot: the timer is cleared
    assert (await asyncio.wait_for(nxt, 10)).ref == now
    nxt = asyncio.ensure_future(it.__anext__())
    await turns(20)  # the slot is free again: the timer for `later` is re-armed
    assert not nxt.done()
    feed.put(extra)
    assert (await asyncio.wait_for(nxt, 10)).ref == extra
    await close(it)


async def test_triggers_arriving_while_the_consumer_holds_a_result_are_taken_in() -> None:
    a, b = refs(2)

    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    feed = Feed()
    feed.put(a)
    it = applier(reconcile, None, None, store_of([a, b]), feed)
    [first] = await first_results(it, 1)  # the iterator now waits at its yield
    feed.put(b)
    await turns(20)  # ingest takes b in and wakes a driver that is not waiting
    [second] = await first_results(it, 1)
    await close(it)
    assert (first.ref, second.ref) == (a, b)


# -- several appliers on one scheduler ----------------------------------------------------


async def test_a_reconcile_ending_wakes_the_other_applier_on_a_shared_scheduler() -> None:
    """Two appliers share a scheduler with one slot: the second one's key can only start
    when the first one's reconcile ends, and only a wake-up from the first tells it."""
    x, y = ObjectRef("x", "ns"), ObjectRef("y", "ns")
    sched = Scheduler(concurrency=1)
    gate = asyncio.Event()
    store = store_of([x, y])

    async def reconcile(obj: Any, ctx: None) -> None:
        if obj["name"] == "x":
            await gate.wait()

    feed_a, feed_b = Feed(), Feed()
    feed_a.put(x)
    it_a = applier(reconcile, None, None, store, feed_a, scheduler=sched)
    nxt_a = asyncio.ensure_future(it_a.__anext__())
    await wait_for(lambda: sched.in_flight == 1)
    feed_b.put(y)
    it_b = applier(reconcile, None, None, store, feed_b, scheduler=sched)
    nxt_b = asyncio.ensure_future(it_b.__anext__())
    await turns(20)  # b has tried and found no slot
    assert not nxt_b.done()
    gate.set()
    assert (await asyncio.wait_for(nxt_a, 10)).ref == x
    assert (await asyncio.wait_for(nxt_b, 10)).ref == y
    await close(it_a)
    assert id(sched) in _PEERS  # b still runs on it
    await close(it_b)
    assert id(sched) not in _PEERS  # nothing kept once the last one has gone


# -- cancellation ----------------------------------------------------------------------------


async def test_cancelling_the_applier_does_not_count_its_reconciles_as_failures(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    keys = refs(2)
    sched = Scheduler()
    feed = feed_of(*keys)
    task = asyncio.create_task(
        collect(applier(never_returns, None, None, store_of(keys), feed, scheduler=sched))
    )
    await wait_for(lambda: sched.in_flight == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sched.in_flight == 0
    assert len(sched) == 0  # released, not put in backoff
    assert sched.stats()["failures_total"] == 0
    assert records(runner_log) == []


async def test_a_reconcile_s_own_cancellation_is_forgotten_once_it_is_reported() -> None:
    ref = ObjectRef("a", "ns")
    tasks: list[asyncio.Task[Any]] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        task.cancel()
        task.cancel()  # asked twice: both requests are forgotten
        await asyncio.sleep(1)

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed)
    [result] = await first_results(it, 1)
    await close(it)
    assert isinstance(result.error, ReconcileCancelled)
    assert result.error.key == ref.key
    [task] = tasks
    assert task.get_name() == "fastctl-reconcile:ns/a"
    assert task.done()
    assert not task.cancelled()
    assert task.cancelling() == 0


async def test_a_thread_reconcile_task_cancelled_from_outside_ends_cancelled(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    """Cancelling a reconcile task itself (asyncio.run does so to every task at shutdown,
    maybe before the applier's own clean-up): its key stays in flight until the thread
    returns, the task ends cancelled, and the thread's late return is logged and released
    even with no applier left on the scheduler."""
    ref = ObjectRef("a", "ns")
    sched = Scheduler()
    release = threading.Event()
    started = threading.Event()
    loop_errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, ctx: loop_errors.append(ctx))

    def reconcile(obj: Any, ctx: None) -> None:
        started.set()
        release.wait(30)

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, scheduler=sched)
    nxt = asyncio.ensure_future(it.__anext__())
    await wait_for(started.is_set)
    try:
        [task] = [t for t in asyncio.all_tasks() if t.get_name() == "fastctl-reconcile:ns/a"]
        task.cancel()
        await asyncio.wait({task}, timeout=10)
        assert task.cancelled()
        assert sched.is_in_flight(ref.key)  # the thread still runs
        nxt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await nxt
        await close(it)
        assert id(sched) not in _PEERS
    finally:
        release.set()  # a failure above must not leave the thread waiting
    await wait_for(lambda: sched.in_flight == 0)
    await turns(5)
    loop.set_exception_handler(None)
    assert loop_errors == []
    [late] = records(runner_log)
    assert late.levelno == logging.WARNING
    assert late.getMessage().startswith("reconcile of ns/a: its thread returned")


async def test_a_key_released_by_its_late_thread_is_no_orphan_for_its_next_reconcile() -> None:
    """After an orphaned thread has returned, the key's next reconcile is an ordinary one:
    cancelled from outside before its thread could start (the only worker is busy), it is
    reported as cancelled and releases its key, rather than being taken for an orphan and
    left in flight for ever."""
    ref = ObjectRef("a", "ns")
    sched = Scheduler()
    release, hold = threading.Event(), threading.Event()
    calls = 0

    def reconcile(obj: Any, ctx: None) -> None:
        nonlocal calls
        calls += 1
        release.wait(30)

    def reconcile_task() -> asyncio.Task[Any]:
        [task] = [t for t in asyncio.all_tasks() if t.get_name() == "fastctl-reconcile:ns/a"]
        return task

    with ThreadPoolExecutor(1) as pool:
        feed = feed_of(ref)
        config = ApplierConfig(executor=pool)
        it = applier(reconcile, None, None, store_of([ref]), feed, scheduler=sched, config=config)
        nxt = asyncio.ensure_future(it.__anext__())
        try:
            await wait_for(lambda: calls == 1)
            orphaned = reconcile_task()
            orphaned.cancel()
            await asyncio.wait({orphaned}, timeout=10)
            assert orphaned.cancelled()  # its thread runs on
            release.set()
            await wait_for(lambda: sched.in_flight == 0)  # the thread returned
            pool.submit(hold.wait, 30)  # the only worker is busy
            feed.put(ref)
            await wait_for(lambda: sched.in_flight == 1)
            reconcile_task().cancel()  # before its thread could start
            result = await asyncio.wait_for(nxt, 10)
            assert isinstance(result.error, ReconcileCancelled)
            assert sched.in_flight == 0
            assert calls == 1
        finally:
            release.set()
            hold.set()
            nxt.cancel()
            await close(it)


# -- what is logged and reported -------------------------------------------------------


async def test_a_failure_is_logged_as_an_error_with_its_traceback(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    ref = ObjectRef("a", "ns")
    raised = KeyError("boom")

    async def reconcile(obj: Any, ctx: None) -> None:
        raise raised

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed)
    await first_results(it, 1)
    await close(it)
    [record] = records(runner_log)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is raised
    assert record.getMessage().startswith("reconcile of ns/a failed")
    assert "KeyError('boom')" in record.getMessage()


async def test_a_timeout_is_logged_as_a_warning_naming_the_object_and_the_limit(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    ref = ObjectRef("a", "ns")
    feed = feed_of(ref)
    it = applier(never_returns, None, None, store_of([ref]), feed, timeout=0.01)
    [result] = await first_results(it, 1)
    await close(it)
    assert isinstance(result.error, ReconcileTimeout)
    assert result.error.key == ref.key
    [record] = records(runner_log)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert record.getMessage().startswith("reconcile of ns/a: ")
    assert "timeout of 0.01 s" in record.getMessage()


async def test_an_error_policy_s_requeue_is_kept_and_still_counts_as_a_failure() -> None:
    ref = ObjectRef("a", "ns")
    sched = Recording(Scheduler())

    async def reconcile(obj: Any, ctx: None) -> None:
        raise KeyError("boom")

    def policy(obj: Any, exc: BaseException, ctx: None) -> Action:
        return Action.requeue(30)

    feed = feed_of(ref)
    it = applier(reconcile, policy, None, store_of([ref]), feed, scheduler=sched)
    [result] = await first_results(it, 1)
    await close(it)
    assert result.action.requeue_after == 30
    assert sched.dones == [("ns/a", 30.0, True)]


async def test_a_coroutine_error_policy_is_awaited_in_the_slot_before_the_retry() -> None:
    """An ``async def`` policy may await (publish an Event, read the API): its answer
    decides the retry, and the object's next reconcile waits for it (the slot is held)."""
    ref = ObjectRef("a", "ns")
    sched = Recording(Scheduler())
    answered = asyncio.Event()
    in_flight_while_deciding: list[bool] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        raise KeyError("boom")

    async def policy(obj: Any, exc: BaseException, ctx: str) -> Action:
        assert isinstance(exc, KeyError)
        assert ctx == "ctx"
        await asyncio.sleep(0)  # really suspends
        in_flight_while_deciding.append(sched.inner.is_in_flight("ns/a"))
        answered.set()
        return Action.requeue(30)

    feed = feed_of(ref)
    it = applier(reconcile, policy, "ctx", store_of([ref]), feed, scheduler=sched)
    [result] = await first_results(it, 1)
    await close(it)
    assert answered.is_set()
    assert in_flight_while_deciding == [True]
    assert result.action.requeue_after == 30
    assert sched.dones == [("ns/a", 30.0, True)]


async def test_a_coroutine_error_policy_that_fails_falls_back_to_the_backoff(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    ref = ObjectRef("a", "ns")
    sched = Recording(Scheduler())

    async def reconcile(obj: Any, ctx: None) -> None:
        raise KeyError("boom")

    async def policy(obj: Any, exc: BaseException, ctx: None) -> Any:
        await asyncio.sleep(0)
        return 42

    feed = feed_of(ref)
    it = applier(reconcile, policy, None, store_of([ref]), feed, scheduler=sched)
    [result] = await first_results(it, 1)
    await close(it)
    assert result.action.requeue_after is None  # the default backoff
    assert sched.dones == [("ns/a", None, True)]
    [_, record] = records(runner_log)
    assert "error_policy returned int (42)" in str(record.exc_info[1] if record.exc_info else "")


async def test_a_failing_error_policy_is_logged_with_its_traceback(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    ref = ObjectRef("a", "ns")
    broken = RuntimeError("policy bug")

    async def reconcile(obj: Any, ctx: None) -> None:
        raise KeyError("boom")

    def policy(obj: Any, exc: BaseException, ctx: None) -> Action:
        raise broken

    feed = feed_of(ref)
    it = applier(reconcile, policy, None, store_of([ref]), feed)
    await first_results(it, 1)
    await close(it)
    [_, record] = records(runner_log)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is broken
    assert record.getMessage().startswith("error_policy failed for ns/a")


async def test_keyboard_interrupt_is_logged_and_counted_as_a_failure(
    runner_log: pytest.LogCaptureFixture,
) -> None:
    ref = ObjectRef("a", "ns")
    sched = Recording(Scheduler())

    async def reconcile(obj: Any, ctx: None) -> None:
        raise KeyboardInterrupt

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, scheduler=sched)
    with pytest.raises(KeyboardInterrupt):  # consumed in this task, as in test_applier_edges
        async with asyncio.timeout(10):
            await collect(it)
    assert sched.dones == [("ns/a", None, True)]
    [record] = records(runner_log)
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("reconcile of ns/a raised KeyboardInterrupt()")


async def test_a_result_carries_the_object_and_how_long_its_reconcile_ran() -> None:
    ref = ObjectRef("a", "ns")
    store = store_of([ref])
    feed = feed_of(ref)

    async def reconcile(obj: Any, ctx: None) -> None:
        await asyncio.sleep(0)

    before = time.monotonic()
    it = applier(reconcile, None, None, store, feed)
    [result] = await first_results(it, 1)
    window = time.monotonic() - before
    await close(it)
    assert result.obj is store[ref]
    assert isinstance(result.duration, float)
    assert 0.0 <= result.duration <= window  # within what the test itself saw


async def test_a_wrong_return_type_says_what_was_expected() -> None:
    ref = ObjectRef("a", "ns")

    async def reconcile(obj: Any, ctx: None) -> int:
        return 42

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed)  # type: ignore[arg-type]
    [result] = await first_results(it, 1)
    await close(it)
    assert str(result.error).endswith("; expected fastctl.Action or None")


async def test_a_plain_reconcile_failing_after_its_timeout_still_reports_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread's own late error is not the reconcile's outcome: the timeout is. The
    thread fails only once the applier's wait has timed out (seen through asyncio.wait)."""
    ref = ObjectRef("a", "ns")
    timed_out = threading.Event()
    real_wait = asyncio.wait

    async def wait(fs: Any, *, timeout: float | None = None) -> Any:
        done, pending = await real_wait(fs, timeout=timeout)
        if pending:
            timed_out.set()
        return done, pending

    monkeypatch.setattr(asyncio, "wait", wait)

    def reconcile(obj: Any, ctx: None) -> None:
        timed_out.wait(30)
        raise ValueError("too late")

    feed = feed_of(ref)
    it = applier(reconcile, None, None, store_of([ref]), feed, timeout=0.01)
    [result] = await first_results(it, 1)
    await close(it)
    assert isinstance(result.error, ReconcileTimeout)


# -- what the reconcile is given -----------------------------------------------------------


@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_an_async_reconcile_gets_the_applier_s_context(timeout: float | None) -> None:
    ref = ObjectRef("a", "ns")
    context = object()
    seen: list[object] = []

    async def reconcile(obj: Any, ctx: object) -> None:
        seen.append(ctx)

    feed = feed_of(ref)
    it = applier(reconcile, None, context, store_of([ref]), feed, timeout=timeout)
    await first_results(it, 1)
    await close(it)
    assert seen == [context]


async def test_an_object_with_an_async_call_method_runs_on_the_loop() -> None:
    ref = ObjectRef("a", "ns")
    loop_thread = threading.current_thread()

    class Reconciler:
        def __init__(self) -> None:
            self.threads: list[threading.Thread] = []

        async def __call__(self, obj: Any, ctx: None) -> None:
            self.threads.append(threading.current_thread())

    reconciler = Reconciler()
    feed = feed_of(ref)
    it = applier(reconciler, None, None, store_of([ref]), feed)
    [result] = await first_results(it, 1)
    await close(it)
    assert result.ok
    assert reconciler.threads == [loop_thread]


class NamedRef(ObjectRef):
    """A subclass of `ObjectRef`, as a library wrapping fastctl might pass."""

    __slots__ = ()


async def test_a_subclass_of_object_ref_is_a_trigger_for_its_key() -> None:
    ref = ObjectRef("a", "ns")
    feed = Feed()
    feed.put(NamedRef("a", "ns"))
    it = applier(never_returns, None, None, store_of([ref]), feed, timeout=0.01)
    [result] = await first_results(it, 1)
    await close(it)
    assert result.ref == ref


class HalfReadyStore(dict[ObjectRef, Any]):
    """A mapping with an ``is_ready`` but no ``wait_ready``: not a store to wait for."""

    is_ready = False


async def test_only_a_store_with_both_is_ready_and_wait_ready_is_waited_for() -> None:
    ref = ObjectRef("a", "ns")

    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    feed = feed_of(ref)
    it = applier(reconcile, None, None, HalfReadyStore(store_of([ref])), feed)
    [result] = await first_results(it, 1)
    await close(it)
    assert result.ok


# -- the applier's own tasks -----------------------------------------------------------------


async def test_the_applier_s_tasks_are_named_and_ended_with_it() -> None:
    ref = ObjectRef("a", "ns")
    store = LateStore(store_of([ref]))  # never ready
    feed = feed_of(ref)
    it: AsyncIterator[ReconcileResult] = applier(never_returns, None, None, store, feed)
    nxt = asyncio.ensure_future(it.__anext__())
    await turns(10)
    assert {"fastctl-applier-ingest", "fastctl-applier-ready"} <= task_names()
    nxt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await nxt
    await close(it)
    await turns(5)
    assert not {n for n in task_names() if n.startswith("fastctl-")}
